"""In-memory robot episode: the unit the dataset writer appends and the reader returns."""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np

#: Where an episode came from. "perturbed" = expert with an injected failure (see `perturbation`).
SOURCES: tuple[str, ...] = ("expert", "perturbed", "policy", "imagined")

# View names become path components and feature keys (observation.images.<view>), so keep them plain.
VIEW_NAME_RE = re.compile(r"^[A-Za-z0-9_]+$")


def _is_int(x: Any) -> bool:
    # bool is an int subclass; a bool task id is almost certainly a caller bug.
    return isinstance(x, (int, np.integer)) and not isinstance(x, (bool, np.bool_))


@dataclass
class Episode:
    """One episode of T steps.

    Per step t: `frames[view][t]` is the image observed before acting, `state[t]` the proprio state,
    `action[t]` the action taken at t, `success[t]` the simulator success flag *after* action t and
    `reward[t]` the reward for that transition.

    Shapes: frames[view] uint8 [T, H, W, 3]; state float32 [T, S]; action float32 [T, A];
    reward float32 [T]; success bool [T]. For LIBERO S = 8 (eef pos 3, axis-angle 3, gripper qpos 2)
    and A = 7.
    """

    frames: dict[str, np.ndarray]
    state: np.ndarray
    action: np.ndarray
    reward: np.ndarray
    success: np.ndarray
    instruction: str
    suite: str
    task_id: int
    source: str
    perturbation: str = ""
    seed: int = 0
    init_state_id: int = -1
    extra: dict = field(default_factory=dict)

    def __len__(self) -> int:
        return int(np.shape(self.state)[0]) if np.ndim(self.state) >= 1 else 0

    @property
    def episode_success(self) -> bool:
        """True if the simulator reported success at any step."""
        return bool(np.asarray(self.success).any())

    def validate(self) -> None:
        """Check shapes, dtypes and metadata; raise ValueError naming the field and expected form."""
        state = self.state
        if not isinstance(state, np.ndarray) or state.ndim != 2:
            raise ValueError(f"state: expected float32 array [T, S], got {_describe(state)}")
        T = state.shape[0]
        if T < 1:
            raise ValueError(f"state: expected T >= 1 steps, got shape {state.shape}")
        if state.shape[1] < 1:
            raise ValueError(f"state: expected float32 [T, S] with S >= 1, got shape {state.shape}")
        _check_array("state", state, np.float32, (T, state.shape[1]))
        action = self.action
        if not isinstance(action, np.ndarray) or action.ndim != 2 or action.shape[1] < 1:
            raise ValueError(f"action: expected float32 array [T={T}, A], got {_describe(action)}")
        _check_array("action", action, np.float32, (T, action.shape[1]))
        _check_array("reward", self.reward, np.float32, (T,))
        _check_array("success", self.success, np.bool_, (T,))
        for name in ("state", "action", "reward"):
            arr = getattr(self, name)
            if not np.isfinite(arr).all():
                bad = np.argwhere(~np.isfinite(arr))[0].tolist()
                raise ValueError(f"{name}: expected finite values, found NaN/inf at index {bad}")

        if not isinstance(self.frames, dict):
            raise ValueError(f"frames: expected dict view -> uint8 [T, H, W, 3], got {type(self.frames).__name__}")
        for view, img in self.frames.items():
            if not isinstance(view, str) or not VIEW_NAME_RE.match(view):
                raise ValueError(f"frames: view name {view!r} must be a non-empty [A-Za-z0-9_] string")
            if not isinstance(img, np.ndarray) or img.ndim != 4 or img.shape[-1] != 3:
                raise ValueError(f"frames[{view!r}]: expected uint8 [T={T}, H, W, 3], got {_describe(img)}")
            _check_array(f"frames[{view!r}]", img, np.uint8, (T,) + img.shape[1:])

        for name in ("instruction", "suite"):
            value = getattr(self, name)
            if not isinstance(value, str) or not value.strip():
                raise ValueError(f"{name}: expected a non-empty string, got {value!r}")
        if self.source not in SOURCES:
            raise ValueError(f"source: expected one of {SOURCES}, got {self.source!r}")
        if not isinstance(self.perturbation, str):
            raise ValueError(f"perturbation: expected a string ('' if none), got {self.perturbation!r}")
        if self.source == "perturbed" and not self.perturbation:
            raise ValueError("perturbation: source='perturbed' needs the perturbation kind, e.g. 'early_release'")
        for name in ("task_id", "seed", "init_state_id"):
            if not _is_int(getattr(self, name)):
                raise ValueError(f"{name}: expected an int, got {getattr(self, name)!r}")
        if self.init_state_id < -1:
            raise ValueError(f"init_state_id: expected >= 0, or -1 if unknown, got {self.init_state_id}")
        if not isinstance(self.extra, dict):
            raise ValueError(f"extra: expected a JSON-serialisable dict, got {type(self.extra).__name__}")
        try:
            json.dumps(self.extra, allow_nan=False)
        except (TypeError, ValueError) as err:
            raise ValueError(f"extra: expected a JSON-serialisable dict (str keys, finite numbers): {err}") from err


def _describe(x: Any) -> str:
    if isinstance(x, np.ndarray):
        return f"{x.dtype} array of shape {x.shape}"
    return type(x).__name__


def _check_array(name: str, arr: Any, dtype: type, shape: tuple[int, ...]) -> None:
    if not isinstance(arr, np.ndarray):
        raise ValueError(f"{name}: expected {np.dtype(dtype)} array of shape {shape}, got {_describe(arr)}")
    if arr.shape != shape:
        raise ValueError(f"{name}: expected shape {shape}, got {arr.shape}")
    if arr.dtype != dtype:
        raise ValueError(f"{name}: expected dtype {np.dtype(dtype)}, got {arr.dtype}")
