"""LIBERO-Goal scripted expert: goal -> skill planning, pure geometry helpers, real LIBERO episodes.

The pure tests need no simulator. The real ones build state-only envs (~8 s each) and run one
episode each of the drawer + bowl task, the knob and the push, plus a one-episode rendered
collection: about a minute on 2 cores.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

from robot_data.collection import SCRIPTED_SUITES, CollectConfig, validate
from robot_data.experts import GoalExpert, UnsupportedGoal, make_expert
from robot_data.experts.goal import plan_skills
from robot_data.experts.primitives import Boxes, handle_point, push_pose, surface_height
from tests.robot_data.expert_checks import collected_episode, expert_episode

os.environ.setdefault("MUJOCO_GL", "egl")

SUITE = "libero_goal"
DRAWERS = {"wooden_cabinet_1_top_region": "wooden_cabinet_1_top_level"}


def _box(centre, halves, rot=None) -> Boxes:
    rot = np.eye(3) if rot is None else np.asarray(rot, float)
    return Boxes(np.array([centre], float), rot[None], np.array([halves], float))


# ---------------------------------------------------------------- goal -> skills
def test_plan_skills_per_goal_predicate():
    assert plan_skills([["On", "akita_black_bowl_1", "plate_1"]], "put the bowl on the plate", DRAWERS) == [
        ("place", "akita_black_bowl_1", "plate_1")
    ]
    assert plan_skills([["turnon", "flat_stove_1"]], "turn on the stove", {}) == [("turn_knob", "flat_stove_1")]
    # Same predicate, but the instruction asks for a push.
    assert plan_skills([["on", "plate_1", "main_table_stove_front_region"]], "push the plate to the front", {}) == [
        ("push", "plate_1", "main_table_stove_front_region")
    ]
    assert plan_skills([["open", "wooden_cabinet_1_top_region"]], "open the top drawer", DRAWERS) == [
        ("open_drawer", "wooden_cabinet_1_top_level")
    ]
    # In a drawer: open it first.
    assert plan_skills([["in", "akita_black_bowl_1", "wooden_cabinet_1_top_region"]], "", DRAWERS) == [
        ("open_drawer", "wooden_cabinet_1_top_level"),
        ("place_in_drawer", "akita_black_bowl_1", "wooden_cabinet_1_top_region"),
    ]


def test_plan_skills_rejects_unscripted_goals():
    with pytest.raises(UnsupportedGoal, match="close"):
        plan_skills([["close", "wooden_cabinet_1_top_region"]], "close the drawer", DRAWERS)
    with pytest.raises(UnsupportedGoal, match="open"):
        plan_skills([["open", "microwave_1"]], "open the microwave", DRAWERS)  # not a drawer


def test_make_expert_goal():
    assert isinstance(make_expert(SUITE, rng=np.random.default_rng(0)), GoalExpert)
    assert SUITE in SCRIPTED_SUITES
    validate(CollectConfig(suite=SUITE, perturbed_fraction=0.0))
    validate(CollectConfig(suite=SUITE))  # perturbed episodes too (robot_data.experts.perturbed_suites)


# ---------------------------------------------------------------- pure geometry
def test_push_pose_lines_up_behind_the_object():
    start, direction = push_pose(np.array([0.0, 0.0]), np.array([0.0, 0.3]), 0.05)
    np.testing.assert_allclose(direction, [0.0, 1.0])
    np.testing.assert_allclose(start, [0.0, -0.05])
    _, d = push_pose(np.array([0.1, 0.1]), np.array([0.1, 0.1]), 0.05)  # already there: any unit direction
    assert np.linalg.norm(d) == pytest.approx(1.0)


def test_handle_point_is_the_frontmost_bar():
    face = _box([0.0, 0.0, 1.0], [0.1, 0.003, 0.03])  # drawer face, opening towards +y
    posts = [_box([x, 0.01, 1.0], [0.005, 0.006, 0.01]) for x in (-0.03, 0.03)]
    bar = _box([0.0, 0.024, 1.0], [0.045, 0.008, 0.008])
    parts = [face, *posts, bar]
    corners = np.concatenate([p.corners() for p in parts])
    np.testing.assert_allclose(handle_point(corners, np.array([0.0, 1.0, 0.0])), [0.0, 0.024, 1.0], atol=1e-12)


def test_surface_height_on_a_tilted_plank():
    tilt = np.deg2rad(30.0)
    rot = np.array([[1.0, 0.0, 0.0], [0.0, np.cos(tilt), -np.sin(tilt)], [0.0, np.sin(tilt), np.cos(tilt)]])
    plank = _box([0.0, 0.0, 1.0], [0.1, 0.1, 0.005], rot)
    # The plank rises towards +y: its top surface is tan(30 deg) higher per metre of y.
    z0 = surface_height(plank, np.array([0.0, 0.0]), 1.2, 0.9, step=0.0005)
    z1 = surface_height(plank, np.array([0.0, 0.04]), 1.2, 0.9, step=0.0005)
    assert z0 == pytest.approx(1.0 + 0.005 / np.cos(tilt), abs=1e-3)
    assert z1 - z0 == pytest.approx(0.04 * np.tan(tilt), abs=1e-3)
    assert surface_height(plank, np.array([0.5, 0.0]), 1.2, 0.9) == 0.9  # off the plank


# ---------------------------------------------------------------- real LIBERO
# Drawer + bowl (two skills in a row), the stove knob, the plate push.
@pytest.mark.libero
@pytest.mark.slow
@pytest.mark.parametrize("task_id, init_id, skills", [
    (3, 0, {"clear", "open_drawer", "place_in_drawer"}),  # the bowl is pushed off the drawer's path first
    (7, 1, {"turn_knob"}),
    (5, 2, {"push"}),
])
def test_goal_expert_succeeds(libero, task_id, init_id, skills):
    res = expert_episode(SUITE, task_id, init_id, max_steps=300)
    assert {p.split(":")[0] for p in res.phases} == skills


@pytest.mark.libero
@pytest.mark.slow
def test_collect_goal_episode(libero, tmp_path):
    assert "plate" in collected_episode(SUITE, 8, tmp_path / "data").instruction
