"""A LeRobot robot (`lerobot.robots.Robot`) behind the `RobotArm` interface.

LeRobot robots speak flat dicts: `get_observation()` returns motor readings ("<motor>.pos") and camera
frames (uint8 [H, W, 3] under the camera's name); `send_action(dict)` takes motor targets. Our policy
speaks end-effector deltas, so this adapter works in LeRobot's end-effector convention:

    observation:  ee.x, ee.y, ee.z (m), ee.wx, ee.wy, ee.wz (rotation vector), gripper.pos
    action:       ee.x ... ee.wz (absolute target pose), ee.gripper_pos

Robots whose driver reports joints only plug in LeRobot's kinematics processors through the two
hooks: `observation_fn(raw) -> raw with ee.* added` (forward kinematics) and `action_fn(ee_action, raw)
-> motor targets` (inverse kinematics); docs/deploy.md shows the wiring.

`lerobot` is not a dependency of this project (its releases pin other torch versions); it is imported
only when a `LeRobotArm` is built, with one clear error when it is missing. The conversions are plain
functions (`state_from_ee`, `ee_action`) so they can be checked without hardware.
"""
from __future__ import annotations

import importlib
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from scipy.spatial.transform import Rotation

from envs.robot.base import RobotArm, RobotConfig

LEROBOT_HELP = ("install it on the robot computer (pip install lerobot; it pins its own torch, so use a separate "
                "environment from training), or implement envs.robot.base.RobotArm for your arm: see docs/deploy.md")


@dataclass
class LeRobotArmConfig(RobotConfig):
    """How LeRobot's dicts map onto the policy's observation and action (calibrate: docs/deploy.md)."""

    cameras: dict[str, str] = field(default_factory=dict)  # our view -> LeRobot camera key, e.g. {"agentview": "front"}
    ee_keys: list[str] = field(default_factory=lambda: ["ee.x", "ee.y", "ee.z", "ee.wx", "ee.wy", "ee.wz"])
    gripper_obs_key: str = "gripper.pos"
    gripper_action_key: str = "ee.gripper_pos"
    gripper_open: float = 100.0  # the driver's gripper value when fully open ...
    gripper_closed: float = 0.0  # ... and when closed
    finger_open_qpos: float = 0.04  # the simulated Panda's finger qpos when open: the policy's state[6:8] scale
    pos_scale: float = 0.012  # metres of eef motion per unit of a[:3]: what one unit moves the simulated arm (~0.012)
    rot_scale: float = 0.08  # radians per unit of a[3:6] (LIBERO Panda: ~0.06-0.09 measured)
    control_hz: float = 20.0  # the rate the policy was trained at


def require_lerobot() -> Any:
    """Import `lerobot.robots`, or raise ImportError saying what is missing and what to do."""
    try:
        return importlib.import_module("lerobot.robots")
    except ImportError as e:
        raise ImportError(f"LeRobotArm needs the `lerobot` package, which is not installed ({e}); "
                          f"{LEROBOT_HELP}") from e


def state_from_ee(raw: dict[str, Any], cfg: LeRobotArmConfig) -> np.ndarray:
    """LeRobot end-effector readings -> float32 [8]: eef pos (3), axis-angle (3), finger qpos (2, as in sim)."""
    missing = [k for k in [*cfg.ee_keys, cfg.gripper_obs_key] if k not in raw]
    if missing:
        raise KeyError(f"observation: missing {missing}; add forward kinematics with observation_fn (docs/deploy.md)")
    pose = np.array([float(raw[k]) for k in cfg.ee_keys], dtype=np.float64)
    span = cfg.gripper_open - cfg.gripper_closed
    opening = float(np.clip((float(raw[cfg.gripper_obs_key]) - cfg.gripper_closed) / span, 0.0, 1.0))
    q = opening * cfg.finger_open_qpos
    return np.concatenate([pose, [q, -q]]).astype(np.float32)


def ee_action(action: np.ndarray, state: np.ndarray, cfg: LeRobotArmConfig) -> dict[str, float]:
    """Policy action float [7] at `state` [8] -> LeRobot end-effector target dict (absolute pose, gripper).

    Position: p + a[:3] * pos_scale. Orientation: the delta rotation is applied in the base frame, as
    robosuite's OSC_POSE does (R_target = R(a[3:6] * rot_scale) @ R_current). Gripper: -1 open, +1 closed.
    """
    a, s = np.asarray(action, np.float64), np.asarray(state, np.float64)
    pos = s[:3] + a[:3] * cfg.pos_scale
    rot = (Rotation.from_rotvec(a[3:6] * cfg.rot_scale) * Rotation.from_rotvec(s[3:6])).as_rotvec()
    opening = (1.0 - float(np.clip(a[6], -1, 1))) / 2.0
    out = {k: float(v) for k, v in zip(cfg.ee_keys, [*pos, *rot])}
    out[cfg.gripper_action_key] = cfg.gripper_closed + opening * (cfg.gripper_open - cfg.gripper_closed)
    return out


def square_resize(frame: np.ndarray, size: int) -> np.ndarray:
    """uint8 [H, W, 3] camera frame -> [size, size, 3]: centre crop to a square, then area resize."""
    import cv2  # lazy: the [robot] extra (LIBERO and LeRobot bring opencv too)

    h, w = frame.shape[:2]
    side = min(h, w)
    top, left = (h - side) // 2, (w - side) // 2
    return cv2.resize(np.ascontiguousarray(frame[top:top + side, left:left + side]), (size, size),
                      interpolation=cv2.INTER_AREA)


class LeRobotArm(RobotArm):
    """`RobotArm` over a connected-or-not LeRobot robot instance (e.g. from `make_robot_from_config`)."""

    config: LeRobotArmConfig

    def __init__(self, robot: Any, config: LeRobotArmConfig,
                 observation_fn: Callable[[dict], dict] | None = None,
                 action_fn: Callable[[dict, dict], dict] | None = None):
        lerobot_robots = require_lerobot()
        super().__init__(config)
        if not isinstance(robot, lerobot_robots.Robot):
            raise TypeError(f"robot: expected a lerobot.robots.Robot, got {type(robot).__name__}")
        missing = [v for v in config.views if v not in config.cameras]
        if missing:
            raise ValueError(f"cameras: no LeRobot camera given for view(s) {missing}; "
                             "e.g. cameras={'agentview': 'front'}")
        if not config.instruction:
            raise ValueError("instruction: a real arm does not know its task; "
                             "set the instruction to send to the policy")
        self.robot, self.control_hz = robot, config.control_hz
        self._observation_fn = observation_fn or (lambda raw: raw)
        self._action_fn = action_fn or (lambda ee, raw: ee)
        self._io = threading.Lock()  # stop() may come from the watchdog thread while the loop uses the bus
        self._raw: dict[str, Any] | None = None
        self._raw_time = 0.0
        if not robot.is_connected:
            robot.connect()

    def _read(self, max_age: float = 0.0) -> dict[str, Any]:
        if self._raw is None or time.monotonic() - self._raw_time > max_age:
            with self._io:
                self._raw = self._observation_fn(self.robot.get_observation())
            self._raw_time = time.monotonic()
        return self._raw

    def _start_episode(self, **options: Any) -> None:
        self._read()  # the operator has set up the scene and the arm's start pose

    def _observe(self) -> dict[str, Any]:
        cfg: LeRobotArmConfig = self.config
        raw = self._read()
        image = np.stack([square_resize(np.asarray(raw[cfg.cameras[v]]), cfg.image_size) for v in cfg.views])
        return {"image": image.astype(np.uint8), "state": state_from_ee(raw, cfg), "instruction": cfg.instruction}

    def get_state(self) -> np.ndarray:
        # a reading younger than half a control period is current enough, and saves a camera read
        return state_from_ee(self._read(max_age=0.5 / self.control_hz), self.config)

    def _act(self, action: np.ndarray) -> dict[str, Any]:
        raw = self._read(max_age=0.5 / self.control_hz)
        target = self._action_fn(ee_action(action, state_from_ee(raw, self.config), self.config), raw)
        with self._io:
            self.robot.send_action(target)
        return {"done": False, "success": False}

    def _halt(self) -> None:
        """Hold the current pose and gripper (not torque off: many arms would fall)."""
        raw = self._read()
        cfg: LeRobotArmConfig = self.config
        hold = {k: float(raw[k]) for k in cfg.ee_keys}
        hold[cfg.gripper_action_key] = float(raw[cfg.gripper_obs_key])
        with self._io:
            self.robot.send_action(self._action_fn(hold, raw))

    def close(self) -> None:
        if self.robot.is_connected:
            self.robot.disconnect()


__all__ = ["LeRobotArm", "LeRobotArmConfig", "ee_action", "require_lerobot", "square_resize", "state_from_ee"]
