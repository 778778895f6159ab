"""The pose servo the object, goal and skill experts share: the OSC_POSE action that drives the grip site to a
target position and rotation, and the phase bookkeeping around it (a phase's step count, stall detection).

A class using it sets `self.cfg` (with pos_gain, rot_gain, stall_steps), `self._r_hand_to_site` (the grip
site's fixed rotation w.r.t. the hand body, read at reset by primitives.hand_to_site), `self._phase`, `self._t` and
`self._history`.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from robot_data.experts.primitives import mat_to_rotvec, quat_xyzw_to_mat
from robot_data.experts.spatial import OSC_POS_SCALE, OSC_ROT_SCALE


class ServoControl:
    """Mixin: `_servo` toward a pose, `_goto` a phase, `_stalled` progress."""

    cfg: Any
    _r_hand_to_site: np.ndarray
    _phase: str
    _t: int
    _history: list[float]

    def _rot_err(self, obs: dict, r_goal: np.ndarray) -> float:
        """The angle (rad) from the grip site's rotation to r_goal [3, 3]."""
        return float(np.linalg.norm(mat_to_rotvec(r_goal @ self._site_rotation(obs).T)))

    def _site_rotation(self, obs: dict) -> np.ndarray:
        """The grip site's rotation [3, 3]: robot0_eef_quat is the hand body's, rotated by a fixed offset."""
        return quat_xyzw_to_mat(obs["robot0_eef_quat"]) @ self._r_hand_to_site

    def _servo(self, obs: dict, target: np.ndarray, r_goal: np.ndarray, gripper: float) -> np.ndarray:
        """Action [7] moving the eef toward target [3] and the grip site toward r_goal [3, 3], gripper as given."""
        action = np.zeros(7)
        action[:3] = self.cfg.pos_gain * (target - obs["robot0_eef_pos"]) / OSC_POS_SCALE
        action[3:6] = self.cfg.rot_gain * mat_to_rotvec(r_goal @ self._site_rotation(obs).T) / OSC_ROT_SCALE
        action[6] = gripper
        return np.clip(action, -1.0, 1.0)

    def _goto(self, phase: str) -> None:
        self._phase, self._t, self._history = phase, 0, []

    def _stalled(self, to_go: float, steps: int | None = None) -> bool:
        """True when `to_go` (a distance still to go) stopped shrinking for `steps` (default cfg.stall_steps)."""
        self._history.append(to_go)
        n = steps or self.cfg.stall_steps
        return len(self._history) > n and self._history[-n - 1] - to_go < 0.002


__all__ = ["ServoControl"]
