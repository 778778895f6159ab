"""Observation and action spaces shared by every environment of the project.

The real LIBERO env and the imagination env both build their spaces here, so a policy cannot
tell which one it runs in: same keys, shapes, dtypes and bounds.

Observation (one dict, single env):
    image        uint8   [V, H, W, 3]  views in a fixed order, upright
    state        float32 [S]           eef pos (3), eef axis-angle (3), gripper qpos (2)
    instruction  str                   the task's language instruction
Action: float32 [K, 7] chunk in [-1, 1] (delta eef pos, delta axis-angle, gripper; OSC_POSE).
"""
from __future__ import annotations

import string
from typing import Any, TypeAlias

import numpy as np
from gymnasium import spaces

STATE_DIM = 8
ACTION_DIM = 7
STATE_NAMES = ("eef_x", "eef_y", "eef_z", "eef_ax", "eef_ay", "eef_az", "gripper_q0", "gripper_q1")
ACTION_NAMES = ("dx", "dy", "dz", "dax", "day", "daz", "gripper")
# Instructions are plain English; Text's default charset is alphanumeric only, so spaces and
# punctuation must be allowed explicitly or check_env rejects every real observation.
INSTRUCTION_CHARSET = frozenset(string.ascii_letters + string.digits + " .,;:'\"-_()/&!?")
INSTRUCTION_MAX_LEN = 256

# Type aliases of the Gymnasium reset/step values (plain dicts: policies and wrappers add keys of their own).
Observation: TypeAlias = dict[str, Any]
"""One env: {"image": uint8 [V, H, W, 3], "state": float32 [8], "instruction": str}."""
BatchObservation: TypeAlias = dict[str, Any]
"""N envs: {"image": uint8 [N, V, H, W, 3], "state": float32 [N, 8], "instruction": N strings}."""
Info: TypeAlias = dict[str, Any]
"""reset/step info: "success", "task_id", "init_state_id", ... (batched: one array per key, plus "_key" masks)."""


def observation_space(views: int, height: int, width: int, state_dim: int = STATE_DIM) -> spaces.Dict:
    """Single-env observation space for `views` camera views of `height` x `width` pixels."""
    return spaces.Dict(
        {
            "image": spaces.Box(0, 255, shape=(views, height, width, 3), dtype=np.uint8),
            "state": spaces.Box(-np.inf, np.inf, shape=(state_dim,), dtype=np.float32),
            "instruction": spaces.Text(max_length=INSTRUCTION_MAX_LEN, min_length=1, charset=INSTRUCTION_CHARSET),
        }
    )


def action_space(chunk_len: int) -> spaces.Box:
    """Single-env action space: a chunk of `chunk_len` 7-D actions in [-1, 1]."""
    return spaces.Box(-1.0, 1.0, shape=(chunk_len, ACTION_DIM), dtype=np.float32)


def check_action_chunk(action: np.ndarray, chunk_len: int, tol: float = 1e-6) -> np.ndarray:
    """Validate a single-env action chunk and return it as float32 [K, 7].

    Raises ValueError naming the problem (shape, non-finite values, out of range) so a bad policy
    output fails loudly instead of being silently clipped by the controller.
    """
    a = np.asarray(action, dtype=np.float32)
    if a.shape != (chunk_len, ACTION_DIM):
        raise ValueError(
            f"action: expected float array of shape (K, 7) = ({chunk_len}, {ACTION_DIM}) "
            f"(delta pos 3, delta axis-angle 3, gripper 1), got shape {tuple(a.shape)}"
        )
    if not np.all(np.isfinite(a)):
        bad = np.argwhere(~np.isfinite(a))[0].tolist()
        raise ValueError(f"action: contains NaN or inf (first at index {bad}); expected finite values in [-1, 1]")
    if a.min() < -1.0 - tol or a.max() > 1.0 + tol:
        idx = np.unravel_index(np.argmax(np.abs(a)), a.shape)
        raise ValueError(
            f"action: values must lie in [-1, 1]; got {float(a[idx]):.4f} at index {list(map(int, idx))}"
        )
    return np.clip(a, -1.0, 1.0)


def check_instruction(text: str) -> str:
    """Return `text` if it fits the instruction space, else raise ValueError naming the bad characters."""
    bad = sorted(set(text) - INSTRUCTION_CHARSET)
    if bad or not (1 <= len(text) <= INSTRUCTION_MAX_LEN):
        raise ValueError(
            f"instruction: expected 1-{INSTRUCTION_MAX_LEN} characters from letters, digits and "
            f"basic punctuation; got {text!r} (unsupported characters: {bad})"
        )
    return text
