"""LIBERO-10 scripted expert: goal -> skill planning (pure) and real LIBERO episodes.

The pure tests need no simulator. The real ones build state-only envs (~8 s each) and run one
episode each of the stove task (knob + moka pot by its handle) and the caddy task, plus a
one-episode rendered collection.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

from envs.collection import SCRIPTED_SUITES, CollectConfig, validate
from envs.experts import LongExpert, UnsupportedGoal, make_expert
from envs.experts.long import plan_long_skills
from tests.envs.expert_checks import collected_episode, expert_episode

os.environ.setdefault("MUJOCO_GL", "egl")

SUITE = "libero_10"
DRAWERS = {"white_cabinet_1_bottom_region": "white_cabinet_1_bottom_level"}


# ---------------------------------------------------------------- goal -> skills
def test_basket_region_becomes_the_basket():
    goal = [["In", "alphabet_soup_1", "basket_1_contain_region"], ["In", "butter_1", "basket_1_contain_region"]]
    assert plan_long_skills(goal, "put both in the basket", {}, {"alphabet_soup_1", "butter_1", "basket_1"}) == [
        ("place", "alphabet_soup_1", "basket_1"),
        ("place", "butter_1", "basket_1"),
    ]


def test_knob_first_and_slots_on_a_shared_site():
    goal = [
        ["On", "moka_pot_1", "flat_stove_1_cook_region"],
        ["On", "moka_pot_2", "flat_stove_1_cook_region"],
        ["Turnon", "flat_stove_1"],
    ]
    plan = plan_long_skills(goal, "put both moka pots on the stove", {}, {"moka_pot_1", "moka_pot_2"}, slot=0.08)
    assert plan[0] == ("turn_knob", "flat_stove_1")
    assert [p[:3] for p in plan[1:]] == [
        ("place", "moka_pot_1", "flat_stove_1_cook_region"),
        ("place", "moka_pot_2", "flat_stove_1_cook_region"),
    ]
    assert [float(p[3]) for p in plan[1:]] == pytest.approx([0.04, -0.04])  # side by side, far one first
    # A single item on a site gets no slot arguments.
    single = plan_long_skills([["On", "moka_pot_1", "flat_stove_1_cook_region"]], "", {}, {"moka_pot_1"})
    assert single == [("place", "moka_pot_1", "flat_stove_1_cook_region")]


def test_drawer_is_opened_filled_and_closed():
    goal = [["Close", "white_cabinet_1_bottom_region"], ["In", "akita_black_bowl_1", "white_cabinet_1_bottom_region"]]
    assert plan_long_skills(goal, "", DRAWERS, {"akita_black_bowl_1"}) == [
        ("open_drawer", "white_cabinet_1_bottom_level"),
        ("place_in_drawer", "akita_black_bowl_1", "white_cabinet_1_bottom_region"),
        ("close_drawer", "white_cabinet_1_bottom_level"),
    ]
    # A drawer nothing goes into stays closed: its Close() needs no skill.
    assert plan_long_skills([["Close", "white_cabinet_1_bottom_region"]], "", DRAWERS, set()) == []


def test_unscripted_goals_are_rejected():
    with pytest.raises(UnsupportedGoal, match="microwave_1"):
        plan_long_skills([["Close", "microwave_1"]], "close the microwave", DRAWERS, set())
    with pytest.raises(UnsupportedGoal):
        plan_long_skills([["Open", "microwave_1"]], "", DRAWERS, set())


def test_make_expert_long():
    assert isinstance(make_expert(SUITE, rng=np.random.default_rng(0)), LongExpert)
    assert SUITE in SCRIPTED_SUITES
    validate(CollectConfig(suite=SUITE, perturbed_fraction=0.0))
    validate(CollectConfig(suite=SUITE))  # perturbed episodes too (envs.experts.perturbed_suites)


# ---------------------------------------------------------------- real LIBERO
@pytest.mark.libero
@pytest.mark.slow
@pytest.mark.parametrize("task_id, init_id, skills", [
    (2, 0, {"turn_knob", "place"}),  # knob, then the moka pot by its handle onto the stove
])  # task 5 (the book into the caddy's back compartment) succeeds in test_collect_long_episode
def test_long_expert_succeeds(libero, task_id, init_id, skills):
    res = expert_episode(SUITE, task_id, init_id, max_steps=520)
    assert {p.split(":")[0] for p in res.phases} == skills


@pytest.mark.libero
@pytest.mark.slow
def test_collect_long_episode(libero, tmp_path):
    # collection keeps successful expert episodes of task 5 only (collected_episode checks meta.success)
    assert "caddy" in collected_episode(SUITE, 5, tmp_path / "data").instruction
