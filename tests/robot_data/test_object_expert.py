"""LIBERO-Object scripted expert: pure geometry primitives, suite dispatch, and real LIBERO episodes.

The primitive tests need no simulator. The real ones build state-only envs (no cameras, ~8 s
each) for three tasks and run one short episode on each (one with a deliberately missed first
grasp), plus a one-episode rendered collection: about 30 s on 2 cores.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

from robot_data.collection import CollectConfig, validate
from robot_data.experts import ObjectExpert, SpatialExpert, make_expert
from robot_data.experts.primitives import Boxes, container_drop, finger_probes, footprint_width, plan_top_grasp
from robot_data.label_collection import LabelCollectConfig
from robot_data.label_collection import validate as validate_labels

os.environ.setdefault("MUJOCO_GL", "egl")

SUITE = "libero_object"


def _box(centre, halves, yaw: float = 0.0) -> Boxes:
    c, s = np.cos(yaw), np.sin(yaw)
    rot = np.array([[c, -s, 0.0], [s, c, 0.0], [0.0, 0.0, 1.0]])
    return Boxes(np.array([centre], float), rot[None], np.array([halves], float))


# ---------------------------------------------------------------- pure geometry
def test_footprint_width_of_a_rotated_rectangle():
    corners = _box([0.3, -0.2, 0.05], [0.04, 0.01, 0.05], yaw=np.pi / 6).corners()
    width, centre = footprint_width(corners[:, :2], np.pi / 6 + np.pi / 2)  # across the short side
    assert width == pytest.approx(0.02) and len(corners) == 8
    width, _ = footprint_width(corners[:, :2], np.pi / 6)
    assert width == pytest.approx(0.08)
    assert centre == pytest.approx(np.array([0.3, -0.2]) @ [np.cos(2 * np.pi / 3), np.sin(2 * np.pi / 3)])


def test_top_grasp_of_a_tall_box_closes_across_its_narrow_side_below_the_top():
    # A 3 x 9 cm carton, 14 cm tall, standing on the floor with its long side along y.
    corners = _box([0.1, 0.2, 0.07], [0.015, 0.045, 0.07]).corners()
    g = plan_top_grasp(corners, depth=0.035, floor_clearance=0.013, max_width=0.068)
    np.testing.assert_allclose(g.point, [0.1, 0.2, 0.14 - 0.035], atol=1e-9)
    assert g.angles[0] == pytest.approx(0.0) and g.widths[0] == pytest.approx(0.03)
    assert all(w <= 0.068 for w in g.widths)  # only yaws the open gripper fits around
    assert (g.top, g.bottom) == pytest.approx((0.14, 0.0))


def test_top_grasp_of_a_flat_box_keeps_the_fingertips_off_the_floor():
    corners = _box([0.0, 0.0, 0.009], [0.04, 0.02, 0.009], yaw=np.pi / 2).corners()  # butter-like, 1.8 cm
    g = plan_top_grasp(corners, depth=0.035, floor_clearance=0.013, max_width=0.068)
    assert g.point[2] == pytest.approx(0.013)  # clamped above the bottom, not 3.5 cm below the top
    assert np.cos(g.angles[0]) == pytest.approx(1.0, abs=1e-9)  # rotated 90 deg: narrow along x
    assert g.widths[0] == pytest.approx(0.04)
    tiny = plan_top_grasp(corners, depth=0.035, floor_clearance=0.05, max_width=0.068)
    assert tiny.point[2] == pytest.approx(0.018 - 0.005)  # never above the item's top


def test_box_distance_and_finger_probes():
    boxes = _box([0.0, 0.0, 0.0], [0.1, 0.1, 0.1])
    d = boxes.distance(np.array([[0.0, 0.0, 0.0], [0.3, 0.0, 0.0], [0.2, 0.2, 0.1]]))
    np.testing.assert_allclose(d, [0.0, 0.2, np.sqrt(0.02)], atol=1e-12)
    assert np.isinf(Boxes(np.zeros((0, 3)), np.zeros((0, 3, 3)), np.zeros((0, 3))).distance(np.zeros(3))).all()
    probes = finger_probes(np.array([0.0, 0.0, 0.05]), np.pi / 2, 0.05, 0.1, n=4)
    assert probes.shape == (8, 3)
    np.testing.assert_allclose(np.abs(probes[:, 1]), 0.05, atol=1e-12)  # fingers spread along y
    assert probes[:, 2].min() < 0.05 < probes[:, 2].max()


def test_container_drop_finds_floor_and_rim():
    floor = _box([0.0, 0.0, 0.005], [0.07, 0.07, 0.005])
    walls = [_box([x, 0.0, 0.06], [0.005, 0.07, 0.06]) for x in (-0.07, 0.07)]
    parts = [floor, *walls]
    basket = Boxes(*(np.concatenate([getattr(b, k) for b in parts]) for k in ("centres", "rots", "halves")))
    z_floor, z_rim = container_drop(basket, np.array([0.0, 0.0]))
    assert z_floor == pytest.approx(0.01) and z_rim == pytest.approx(0.12)


# ---------------------------------------------------------------- suite dispatch and configs
def test_make_expert_picks_by_suite():
    assert isinstance(make_expert(SUITE), ObjectExpert)
    assert type(make_expert("libero_spatial")) is SpatialExpert
    with pytest.raises(ValueError, match="suite"):
        make_expert("libero_90")


def test_object_collection_takes_perturbed_episodes():
    validate(CollectConfig(suite=SUITE, perturbed_fraction=0.0))
    validate(CollectConfig(suite=SUITE))  # perturbed_fraction 0.3 with the suite's default kinds
    with pytest.raises(ValueError, match="perturbations"):
        validate(CollectConfig(suite=SUITE, perturbations=["wrong_azimuth"]))  # the bowl's rim pinch only
    validate_labels(LabelCollectConfig(suite=SUITE, kinds=["expert"]))
    validate_labels(LabelCollectConfig(suite=SUITE))  # near_miss x3 + expert
    with pytest.raises(ValueError, match="kinds"):
        validate_labels(LabelCollectConfig(suite=SUITE, kinds=["wrong_azimuth"]))


# ---------------------------------------------------------------- real LIBERO
# Milk (tall carton, 13 cm) and butter (1.7 cm flat box): both ends of the grip-height rule.
@pytest.mark.libero
@pytest.mark.slow
@pytest.mark.parametrize("task_id, init_id", [(7, 3), (6, 1)])
def test_object_expert_succeeds(libero, task_id, init_id):
    from robot_data.experts import OBJECT_PHASES, run_expert_episode

    task = libero.get_task(SUITE, task_id)
    env = libero.make_raw_env(task)
    try:
        expert = make_expert(SUITE, rng=np.random.default_rng(0))
        seen: list[bool] = []
        res = run_expert_episode(env, task.init_states[init_id], expert, max_steps=280, reset_seed=init_id,
                                 on_step=lambda o, a, r, d: seen.append(d))
        assert res.success and env.check_success()
        assert res.actions.shape == (res.steps, 7) and res.actions.dtype == np.float32
        assert np.all(np.abs(res.actions) <= 1.0) and res.steps < 200
        assert len(seen) == res.steps and seen[-1]
        assert {"approach", "descend", "close", "lift", "carry", "lower"} <= set(res.phases) <= set(OBJECT_PHASES)
        assert res.info["regrasps"] == 0
    finally:
        env.close()


class _MissFirst(ObjectExpert):
    """Plans its first grasp 6 cm beside the item: the lift check must catch it and regrasp."""

    def _grasp_offset(self) -> np.ndarray:
        return np.array([0.0, 0.06, 0.0]) if self._attempts == 1 else np.zeros(3)


@pytest.mark.libero
@pytest.mark.slow
def test_failed_grasp_is_retried(libero):
    from robot_data.experts import run_expert_episode

    task = libero.get_task(SUITE, 1)  # cream cheese
    env = libero.make_raw_env(task)
    try:
        res = run_expert_episode(env, task.init_states[0], _MissFirst(), max_steps=280, reset_seed=0)
    finally:
        env.close()
    assert res.success and res.info["regrasps"] == 1
    assert res.phases.count("regrasp") > 0 and res.phases.index("regrasp") < res.phases.index("carry")
