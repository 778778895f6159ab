"""The spatial expert's carry when the bowl slips out of the grip (pure: hand-made observations, no simulator).

A bowl that drops just short of its target and comes to rest there is placed; one that drops elsewhere is not.
"""

from __future__ import annotations

import numpy as np
import pytest

from robot_data.experts import SpatialExpert

GRIP_DZ = 0.04  # grip site above the bowl origin when the carry started
PLATE = np.array([0.0, 0.15, 0.926])
EEF = np.array([0.0, 0.15, 1.12])
DOWN_QUAT = np.array([1.0, 0.0, 0.0, 0.0])  # (x, y, z, w): 180 deg about x, the hand pointing down


def _carrying() -> SpatialExpert:
    expert = SpatialExpert()
    expert.bowl, expert.plate = "bowl_1", "plate_1"
    expert._r_hand_to_site = np.eye(3)
    expert._grasp_eef_z = 0.95
    expert._grip_dz = GRIP_DZ
    expert._goto("carry")
    return expert


def _obs(bowl: np.ndarray) -> dict:
    return {"robot0_eef_pos": EEF, "robot0_eef_quat": DOWN_QUAT, "robot0_gripper_qpos": np.array([0.02, -0.02]),
            "bowl_1_pos": bowl, "bowl_1_quat": np.array([0.0, 0.0, 0.0, 1.0]), "plate_1_pos": PLATE}


@pytest.mark.parametrize("bowl, phase", [
    (PLATE + [0.013, -0.012, 0.0], "release"),  # dropped 1.8 cm short, level with the target: placed
    (PLATE + [0.10, 0.0, 0.0], "carry"),  # dropped 10 cm away: not placed
    (PLATE + [0.013, -0.012, 0.10], "carry"),  # fell only part way (caught on a wall): not at rest there
    (EEF - [0.03, 0.0, GRIP_DZ], "carry"),  # still in the grip, 3 cm off: carry on towards the target
])
def test_a_dropped_bowl_is_released_only_where_it_landed_on_target(bowl, phase):
    expert = _carrying()
    action = expert.act(_obs(np.asarray(bowl, dtype=np.float64)))
    assert expert.phase == phase
    assert action.shape == (7,) and np.all(np.abs(action) <= 1.0)
    if phase == "release":
        assert action[6] == -1.0  # opens the hand where it is
