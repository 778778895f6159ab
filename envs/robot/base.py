"""The robot-arm interface the control loop drives: a simulated arm and a real one look the same.

    arm.start_episode()                 # bring the scene/arm to a start; releases a previous stop
    obs = arm.get_observation()         # image uint8 [V, H, W, 3], state float32 [8], instruction str
    state = arm.get_state()             # float32 [8]: eef pos (3), axis-angle (3), gripper qpos (2)
    info = arm.send_action(action)      # float32 [7] in [-1, 1]: one control step; {"done", "success"}
    arm.stop("reason")                  # halt now; thread-safe, idempotent, latching
    arm.close()

Observations follow the project's convention (one env, no batch dimension), so the same observation
can be sent to the policy server as is. `stop` may be called from any thread (a watchdog, a signal
handler) while the control thread is blocked elsewhere; after it, `send_action` raises `RobotStopped`
until the next `start_episode`.
"""
from __future__ import annotations

import abc
import threading
from dataclasses import dataclass, field
from typing import Any

import numpy as np

STATE_DIM = 8
ACTION_DIM = 7


class RobotStopped(RuntimeError):
    """A motion command reached an arm that has been stopped (watchdog, emergency stop, fault)."""


@dataclass
class RobotConfig:
    """Fields every arm has."""

    views: list[str] = field(default_factory=lambda: ["agentview", "wrist"])  # order of obs["image"]
    image_size: int = 64  # square images, as the policy was trained on
    instruction: str = ""  # the task's instruction sent to the policy; "" = the arm's own (sim: the task's)


def check_observation(obs: Any, views: int, image_size: int) -> dict[str, Any]:
    """Validate one arm observation against the convention; ValueError naming the field."""
    if not isinstance(obs, dict):
        raise ValueError(f"observation: expected a dict with image, state, instruction, got {type(obs).__name__}")
    image, state, text = obs.get("image"), obs.get("state"), obs.get("instruction")
    want = (views, image_size, image_size, 3)
    if not isinstance(image, np.ndarray) or image.dtype != np.uint8 or image.shape != want:
        got = (image.dtype, image.shape) if isinstance(image, np.ndarray) else type(image).__name__
        raise ValueError(f"observation['image']: expected uint8 {list(want)} (views, H, W, RGB), got {got}")
    if not isinstance(state, np.ndarray) or state.dtype != np.float32 or state.shape != (STATE_DIM,):
        got = (state.dtype, state.shape) if isinstance(state, np.ndarray) else type(state).__name__
        raise ValueError(f"observation['state']: expected float32 [{STATE_DIM}] (eef pos, axis-angle, gripper qpos), "
                         f"got {got}")
    if not isinstance(text, str) or not text:
        raise ValueError(f"observation['instruction']: expected a non-empty string, got {text!r}; set the arm's "
                         "config.instruction")
    return obs


class RobotArm(abc.ABC):
    """Abstract arm. Subclasses implement the `_`-prefixed methods; stop bookkeeping lives here."""

    #: The arm's native control rate; the loop runs at this rate unless told otherwise.
    control_hz: float = 20.0
    #: False for a simulation, whose clock only advances when it is stepped: no wall-clock pacing needed.
    realtime: bool = True

    def __init__(self, config: RobotConfig):
        if not config.views or config.image_size < 8:
            raise ValueError(f"views/image_size: need >= 1 view and image_size >= 8, got {config.views}, "
                             f"{config.image_size}")
        self.config = config
        self._stop_lock = threading.Lock()
        self._stopped = False
        self.stop_reason = ""

    # ------------------------------------------------------------------ to implement
    @abc.abstractmethod
    def _start_episode(self, **options: Any) -> None:
        """Bring the arm (and, in simulation, the scene) to the start of an episode."""

    @abc.abstractmethod
    def _observe(self) -> dict[str, Any]:
        """The current observation (image, state, instruction)."""

    @abc.abstractmethod
    def _act(self, action: np.ndarray) -> dict[str, Any]:
        """Execute one action float32 [7] for one control period; return {"done": bool, "success": bool}."""

    def _halt(self) -> None:  # noqa: B027 (an optional hook: subclasses override it where needed)
        """Make the hardware hold still now (e.g. hold the current pose, brake); default: no more commands."""

    def get_state(self) -> np.ndarray:
        """float32 [8] proprio; override where reading it is cheaper than a full observation."""
        return self.get_observation()["state"]

    def close(self) -> None:  # noqa: B027 (an optional hook: subclasses override it where needed)
        """Release the hardware or the simulator."""

    # ------------------------------------------------------------------ public
    @property
    def stopped(self) -> bool:
        return self._stopped

    def start_episode(self, **options: Any) -> dict[str, Any]:
        """Start an episode and release a previous stop; returns the first observation."""
        self._start_episode(**options)
        with self._stop_lock:
            self._stopped, self.stop_reason = False, ""
        return self.get_observation()

    def get_observation(self) -> dict[str, Any]:
        obs = dict(self._observe())
        if self.config.instruction:
            obs["instruction"] = self.config.instruction
        return check_observation(obs, len(self.config.views), self.config.image_size)

    def send_action(self, action: np.ndarray) -> dict[str, Any]:
        """One control step with a 7-D action already checked by the safety limits."""
        a = np.asarray(action, dtype=np.float32)
        if a.shape != (ACTION_DIM,) or not np.all(np.isfinite(a)) or np.abs(a).max() > 1.0 + 1e-6:
            raise ValueError(f"action: expected 7 finite values in [-1, 1], got {a.tolist()}")
        if self._stopped:
            raise RobotStopped(f"arm is stopped ({self.stop_reason}); call start_episode() to resume")
        return self._act(np.clip(a, -1.0, 1.0))

    def stop(self, reason: str = "stop requested") -> None:
        """Halt the arm now and refuse further motion; safe from any thread, repeated calls are no-ops."""
        with self._stop_lock:
            if self._stopped:
                return
            self._stopped, self.stop_reason = True, reason
        self._halt()

    def __enter__(self) -> RobotArm:
        return self

    def __exit__(self, *exc) -> None:
        self.stop("closing")
        self.close()


__all__ = ["ACTION_DIM", "STATE_DIM", "RobotArm", "RobotConfig", "RobotStopped", "check_observation"]
