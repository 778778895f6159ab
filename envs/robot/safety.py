"""Client-side safety limits for a 7-D delta end-effector action, and an emergency stop.

The policy's action is a *command* in normalized units (OSC_POSE): delta position a[:3] and delta
axis-angle a[3:6] in [-1, 1], gripper a[6] (-1 open, +1 closed). The arm's controller turns one unit
into `pos_scale` metres and `rot_scale` radians of target motion (LIBERO/robosuite: 0.05 m, 0.5 rad at
20 Hz). `clamp_action` works in those physical units on the commanded target:

  1. workspace box: the commanded next eef position  p + a[:3] * pos_scale  is clipped into the box;
     an arm already outside the box may only move back towards it;
  2. per-step translation: the commanded displacement is scaled down to at most `max_translation` m
     (direction kept, so a clamped motion never leaves the box: the box is convex);
  3. per-step rotation: the commanded rotation vector is scaled down to at most `max_rotation` rad;
  4. gripper: clipped to [gripper_min, gripper_max].
Non-finite actions or states are not clamped but refused (`UnsafeAction`): they mean a fault upstream,
and the control loop stops the arm. These functions are pure, so they are easy to test and audit.
"""
from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np


class UnsafeAction(ValueError):
    """An action (or robot state) that cannot be made safe by clamping, e.g. NaN."""


@dataclass
class SafetyLimits:
    """Limits in the robot base frame (metres, radians). Defaults fit the LIBERO Panda's table workspace."""

    # eef x, y, z; LIBERO-Spatial expert demos span x [-0.25, 0.24], y [-0.23, 0.32], z [0.91, 1.19]
    workspace_min: list[float] = field(default_factory=lambda: [-0.45, -0.40, 0.89])
    workspace_max: list[float] = field(default_factory=lambda: [0.35, 0.45, 1.40])
    pos_scale: float = 0.05  # metres of target motion per unit of a[:3] (calibrate on your arm: docs/deploy.md)
    rot_scale: float = 0.5  # radians of target rotation per unit of a[3:6]
    # metres of commanded target motion per control step; 0.06 m passes a full-scale single-axis command
    # (0.05 m) and caps fast diagonal ones (up to 0.087 m)
    max_translation: float = 0.06
    max_rotation: float = 0.5  # radians per control step
    gripper_min: float = -1.0
    gripper_max: float = 1.0


def check_limits(limits: SafetyLimits) -> SafetyLimits:
    """Validate a SafetyLimits; ValueError naming the field."""
    lo, hi = np.asarray(limits.workspace_min, float), np.asarray(limits.workspace_max, float)
    if lo.shape != (3,) or hi.shape != (3,):
        raise ValueError("workspace_min/workspace_max: expected 3 values (x, y, z) each, "
                         f"got {lo.tolist()}, {hi.tolist()}")
    if not np.all(lo < hi):
        raise ValueError("workspace_min: must be below workspace_max on every axis, "
                         f"got {lo.tolist()} vs {hi.tolist()}")
    for name in ("pos_scale", "rot_scale", "max_translation", "max_rotation"):
        value = getattr(limits, name)
        if not (np.isfinite(value) and value > 0):
            raise ValueError(f"{name}: expected a positive number, got {value}")
    if not -1.0 <= limits.gripper_min <= limits.gripper_max <= 1.0:
        raise ValueError(f"gripper_min/gripper_max: expected -1 <= min <= max <= 1, got {limits.gripper_min}, "
                         f"{limits.gripper_max}")
    return limits


@dataclass
class SafetyReport:
    """Which limits changed an action (each flag True when that limit was active)."""

    workspace: bool = False
    translation: bool = False
    rotation: bool = False
    gripper: bool = False

    @property
    def clamped(self) -> bool:
        return self.workspace or self.translation or self.rotation or self.gripper


def _cap_norm(v: np.ndarray, cap: float) -> tuple[np.ndarray, bool]:
    n = float(np.linalg.norm(v))
    return (v * (cap / n), True) if n > cap else (v, False)


def clamp_action(action: np.ndarray, state: np.ndarray, limits: SafetyLimits) -> tuple[np.ndarray, SafetyReport]:
    """Make one action safe: action float [7], state float [>=3] (eef position first) -> (float32 [7], report).

    Raises UnsafeAction on non-finite values or wrong shapes; never returns an action outside the limits.
    """
    a = np.asarray(action, dtype=np.float64)
    s = np.asarray(state, dtype=np.float64)
    if a.shape != (7,):
        raise UnsafeAction(f"action: expected 7 values (dpos 3, daxis-angle 3, gripper 1), got shape {a.shape}")
    if not np.all(np.isfinite(a)):
        raise UnsafeAction(f"action: contains NaN or inf: {a.tolist()}")
    if s.ndim != 1 or s.shape[0] < 3 or not np.all(np.isfinite(s[:3])):
        raise UnsafeAction(f"state: expected the eef position in state[:3], finite, got {s.tolist()}")
    report = SafetyReport()
    pos = s[:3]
    delta = a[:3] * limits.pos_scale
    target = np.clip(pos + delta, limits.workspace_min, limits.workspace_max)
    report.workspace = not bool(np.allclose(target, pos + delta, atol=1e-9))
    delta, report.translation = _cap_norm(target - pos, limits.max_translation)
    rot, report.rotation = _cap_norm(a[3:6] * limits.rot_scale, limits.max_rotation)
    grip = float(np.clip(a[6], limits.gripper_min, limits.gripper_max))
    report.gripper = bool(grip != a[6])
    out = np.concatenate([delta / limits.pos_scale, rot / limits.rot_scale, [grip]])
    # Normalized commands stay in [-1, 1] whatever the limits (the controller saturates there anyway).
    return np.clip(out, -1.0, 1.0).astype(np.float32), report


class EmergencyStop:
    """A latching emergency stop: once triggered, it stays set until `clear()` is called by a person.

    `trigger` runs the registered callbacks at once (e.g. `robot.stop`), so the arm stops even while
    the control loop waits on the server. `sigint()` turns Ctrl-C into a trigger.
    """

    def __init__(self) -> None:
        self._event = threading.Event()
        self._callbacks: list[Callable[[str], None]] = []
        self.reason = ""

    def on_trigger(self, callback: Callable[[str], None]) -> None:
        self._callbacks.append(callback)

    def remove(self, callback: Callable[[str], None]) -> None:
        if callback in self._callbacks:
            self._callbacks.remove(callback)

    def trigger(self, reason: str = "emergency stop") -> None:
        if not self._event.is_set():
            self.reason = reason
        self._event.set()
        for cb in list(self._callbacks):
            cb(reason)

    def is_set(self) -> bool:
        return self._event.is_set()

    def wait(self, timeout: float) -> bool:
        """Sleep up to `timeout` seconds, waking at once when the stop is triggered; True if it is set."""
        return self._event.wait(timeout)

    def clear(self) -> None:
        self._event.clear()
        self.reason = ""

    @contextmanager
    def sigint(self) -> Iterator[EmergencyStop]:
        """Within the block, the first Ctrl-C triggers the stop, a second one raises KeyboardInterrupt."""
        if threading.current_thread() is not threading.main_thread():
            yield self  # signal handlers can only be installed from the main thread
            return

        def handler(signum, frame):
            if self.is_set():
                raise KeyboardInterrupt
            self.trigger("emergency stop: Ctrl-C")

        previous = signal.signal(signal.SIGINT, handler)
        try:
            yield self
        finally:
            signal.signal(signal.SIGINT, previous)


__all__ = ["EmergencyStop", "SafetyLimits", "SafetyReport", "UnsafeAction", "check_limits", "clamp_action"]
