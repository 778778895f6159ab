"""LIBERO-10 scripted expert: goal -> skill planning and enclosure geometry (pure) and real LIBERO episodes.

The pure tests need no simulator. The real ones build state-only envs (~8 s each) and run one
episode each of the stove task (knob + moka pot by its handle), the drawer task (bowl into the
sideways bottom drawer, close it), the microwave task (mug in through the open side, close the
door) and the caddy task, plus a one-episode rendered collection.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

from robot_data.collection import SCRIPTED_SUITES, CollectConfig, validate
from robot_data.experts import LongExpert, UnsupportedGoal, make_expert
from robot_data.experts.long import plan_long_skills
from robot_data.experts.primitives import Boxes, side_opening
from tests.robot_data.expert_checks import collected_episode, expert_episode

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


def test_door_is_closed_last():
    goal = [["Close", "microwave_1"], ["In", "white_yellow_mug_1", "microwave_1_heating_region"]]
    doors = {"microwave_1": "microwave_1_microjoint"}
    assert plan_long_skills(goal, "", DRAWERS, {"white_yellow_mug_1"}, doors=doors) == [
        ("place", "white_yellow_mug_1", "microwave_1_heating_region"),
        ("close_door", "microwave_1_microjoint"),
    ]


def test_side_opening_of_an_enclosure():
    # A 20 x 16 x 14 cm box open towards -y (a microwave facing sideways): floor, roof, back and side walls.
    lo = [(-0.1, 0.0, 0.0), (-0.1, 0.0, 0.14), (-0.1, 0.16, 0.0), (-0.12, 0.0, 0.0), (0.1, 0.0, 0.0)]
    hi = [(0.1, 0.16, 0.02), (0.1, 0.16, 0.16), (0.1, 0.18, 0.16), (-0.1, 0.18, 0.16), (0.12, 0.18, 0.16)]
    lo_a, hi_a = np.array(lo), np.array(hi)
    boxes = Boxes((lo_a + hi_a) / 2, np.repeat(np.eye(3)[None], len(lo), axis=0), (hi_a - lo_a) / 2)
    op = side_opening(boxes, np.array([0.0, 0.08, 0.07]), np.eye(3), step=0.002)
    assert op.inward == pytest.approx([0.0, 1.0, 0.0])
    assert (op.floor, op.roof) == (pytest.approx(0.02, abs=1e-3), pytest.approx(0.14, abs=1e-3))
    assert op.front == pytest.approx(0.0, abs=2e-3)  # the roof's front edge
    assert op.middle == pytest.approx(0.0, abs=2e-3) and op.width == pytest.approx(0.2, abs=4e-3)
    with pytest.raises(ValueError, match="open side"):
        side_opening(boxes, np.array([0.0, 0.08, 0.07]), np.eye(3), reach=0.01)  # every side counts as open


def test_unscripted_goals_are_rejected():
    with pytest.raises(UnsupportedGoal, match="microwave_1"):
        plan_long_skills([["Close", "microwave_1"]], "close the microwave", DRAWERS, set())
    with pytest.raises(UnsupportedGoal):
        plan_long_skills([["Open", "microwave_1"]], "", DRAWERS, set())


def test_make_expert_long():
    assert isinstance(make_expert(SUITE, rng=np.random.default_rng(0)), LongExpert)
    assert SUITE in SCRIPTED_SUITES
    validate(CollectConfig(suite=SUITE, perturbed_fraction=0.0))
    validate(CollectConfig(suite=SUITE))  # perturbed episodes too (robot_data.experts.perturbed_suites)


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
@pytest.mark.parametrize("task_id, skills", [
    (3, {"place_in_drawer", "close_drawer"}),  # the bottom drawer starts open and faces sideways
    (9, {"place", "close_door"}),  # the mug into the microwave through its open side, then the door shut
])
def test_long_expert_closes_drawer_and_door(libero, task_id, skills):
    res = expert_episode(SUITE, task_id, 0, max_steps=520)
    assert skills <= {p.split(":")[0] for p in res.phases}


@pytest.mark.libero
@pytest.mark.slow
def test_collect_long_episode(libero, tmp_path):
    # collection keeps successful expert episodes of task 5 only (collected_episode checks meta.success)
    assert "caddy" in collected_episode(SUITE, 5, tmp_path / "data").instruction
