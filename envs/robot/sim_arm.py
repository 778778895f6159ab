"""A simulated arm: the real LIBERO/robosuite Panda behind the `RobotArm` interface.

It is the stand-in for a real arm in tests and demos: the same control loop, client and safety limits
drive it, and every action is one real 20 Hz OSC_POSE control step of the MuJoCo simulation
(`LiberoEnv.step_single`). Two differences from hardware are deliberate:
  * a simulation's clock only advances when it is stepped, so the control loop need not pace it in
    wall-clock time (`realtime = False`); set a rate to rehearse a real deployment's timing;
  * `stop()` freezes the arm where it is: no further step is taken until the next `start_episode`.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import numpy as np

from envs.robot.base import RobotArm, RobotConfig


@dataclass
class SimArmConfig(RobotConfig):
    """A LIBERO task as the arm's world."""

    suite: str = "libero_spatial"
    task_id: int = 0
    init_state_id: int = 0  # official initial state of the first episode
    seed: int = 0
    max_steps: int = 0  # control steps per episode; 0 = the suite's standard horizon
    fast_render: bool = True  # ~2.5x faster software rendering (see LiberoEnvConfig.fast_render)


class SimArm(RobotArm):
    """`RobotArm` over one real LIBERO env. `start_episode(init_state_id=..., seed=...)` resets the scene."""

    realtime = False
    control_hz = 20.0  # LIBERO's control_freq: one action = 50 ms of simulated time
    config: SimArmConfig

    def __init__(self, config: SimArmConfig | None = None):
        super().__init__(config or SimArmConfig())
        cfg: SimArmConfig = self.config
        os.environ.setdefault("MUJOCO_GL", "egl")
        from envs.libero_env import LiberoEnv, LiberoEnvConfig  # lazy: LIBERO is an optional extra

        self.env = LiberoEnv(LiberoEnvConfig(suite=cfg.suite, task_id=cfg.task_id, views=tuple(cfg.views),
                                             image_size=cfg.image_size, chunk_len=1, max_steps=cfg.max_steps or None,
                                             fast_render=cfg.fast_render))
        self._obs: dict[str, Any] | None = None
        self._done = True
        self.success = False

    # narrower than RobotArm's **options on purpose: an unknown option is a TypeError
    def _start_episode(self, init_state_id: int | None = None, seed: int | None = None) -> None:  # type: ignore[override]
        cfg: SimArmConfig = self.config
        init = cfg.init_state_id if init_state_id is None else init_state_id
        self._obs, _ = self.env.reset(seed=cfg.seed if seed is None else seed, options={"init_state_id": int(init)})
        self._done, self.success = False, False

    def _observe(self) -> dict[str, Any]:
        if self._obs is None:
            raise RuntimeError("SimArm: call start_episode() before reading observations")
        return self._obs

    def get_state(self) -> np.ndarray:
        return self._observe()["state"]

    def _act(self, action: np.ndarray) -> dict[str, Any]:
        if self._done:
            raise RuntimeError("SimArm: the episode is over (success or horizon); call start_episode()")
        self._obs, _, terminated, truncated, info = self.env.step_single(action)
        self._done = bool(terminated or truncated)
        self.success = bool(info["success"])
        return {"done": self._done, "success": self.success, "t": int(info["t"])}

    def close(self) -> None:
        self.env.close()


def measure_action_scale(arm: SimArm, steps: int = 20, axis: int = 0) -> float:
    """How far the simulated eef really moves per control step under a full-scale command on `axis`.

    Metres per step for axis 0-2 (x, y, z), radians per step for 3-5 (rotation about x, y, z). The
    policy learned what one unit of action does to the simulated arm; a real arm's scales should
    reproduce it (docs/deploy.md). Starts a new episode.
    """
    if not 0 <= axis <= 5:
        raise ValueError(f"axis: expected 0-5 (x, y, z, rx, ry, rz), got {axis}")
    from scipy.spatial.transform import Rotation

    start = arm.start_episode()["state"].astype(np.float64)
    action = np.zeros(7, np.float32)
    action[axis], action[6] = 1.0, -1.0
    for _ in range(steps):
        arm.send_action(action)
    end = arm.get_state().astype(np.float64)
    if axis < 3:
        return float(abs(end[axis] - start[axis]) / steps)
    turn = Rotation.from_rotvec(end[3:6]) * Rotation.from_rotvec(start[3:6]).inv()
    return float(np.linalg.norm(turn.as_rotvec()) / steps)


__all__ = ["SimArm", "SimArmConfig", "measure_action_scale"]
