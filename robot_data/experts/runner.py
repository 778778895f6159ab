"""Roll out a scripted expert in a raw LIBERO env with the standard evaluation protocol.

Protocol (as in LIBERO's own evaluation): ``env.reset()``, ``env.set_init_state(state)``, a few
"settle" steps with a zero motion and an open gripper so the objects come to rest, then up to
``max_steps`` expert steps; the episode ends at the first step where ``check_success()`` holds.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from envs.libero_suites import start_episode


class ScriptedExpert(Protocol):
    """What the runner needs from an expert (``SpatialExpert``, ``ObjectExpert``, perturbed ones)."""

    @property
    def phase(self) -> str: ...

    def reset(self, raw_env, raw_obs: dict) -> None: ...

    def act(self, raw_obs: dict) -> np.ndarray: ...


# The LIBERO settle action: no motion, gripper open.

StepCallback = Callable[[dict, np.ndarray, float, bool], None]


@dataclass
class ExpertEpisodeResult:
    """Outcome of one expert episode.

    success: ``check_success()`` held at the last step.
    steps: number of expert steps taken (settle steps excluded), T.
    actions: float32 [T, 7] actions sent to the env.
    phases: the expert phase that produced each action (length T).
    perturbation: label of the perturbation applied ("none" for the plain expert).
    """

    success: bool
    steps: int
    actions: np.ndarray
    phases: list[str]
    perturbation: str = "none"
    info: dict = field(default_factory=dict)


def _validate(raw_env, init_state, max_steps: int, settle_steps: int) -> np.ndarray:
    for name, value, low in (("max_steps", max_steps, 1), ("settle_steps", settle_steps, 0)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < low:
            raise ValueError(f"{name} must be an int >= {low}, got {value!r}")
    for attr in ("reset", "set_init_state", "step", "check_success", "sim", "obj_of_interest"):
        if not hasattr(raw_env, attr):
            raise ValueError(f"raw_env lacks {attr!r}: pass a LIBERO OffScreenRenderEnv/ControlEnv")
    state = np.asarray(init_state, dtype=np.float64)
    expected = raw_env.get_sim_state().shape if hasattr(raw_env, "get_sim_state") else None
    if state.ndim != 1 or (expected is not None and state.shape != expected):
        raise ValueError(
            f"init_state must be a flat MuJoCo state of shape {expected}, got {state.shape}"
        )
    if not np.all(np.isfinite(state)):
        raise ValueError("init_state contains non-finite values")
    return state


def run_expert_episode(
    raw_env,
    init_state: np.ndarray,
    expert: ScriptedExpert,
    max_steps: int = 220,
    settle_steps: int = 10,
    on_step: StepCallback | None = None,
    reset_seed: int | None = None,
) -> ExpertEpisodeResult:
    """Run one episode of ``expert`` from ``init_state`` (flat MuJoCo state, e.g. [92] floats).

    ``on_step(raw_obs, action, reward, done)`` is called after every expert step with the
    observation that step produced, so a recorder sees (obs_t+1, a_t) pairs; settle steps are
    not reported. Returns an ``ExpertEpisodeResult``.

    ``reset_seed``: LIBERO re-samples the placement of fixed fixtures (cabinet, stove: ~1 cm,
    a few degrees) from the global NumPy RNG at every ``reset()``, and the init state does not
    cover them. Passing a seed makes that draw reproducible (the global RNG state is restored).
    """
    state = _validate(raw_env, init_state, max_steps, settle_steps)
    if on_step is not None and not callable(on_step):
        raise ValueError("on_step must be callable or None")
    obs = start_episode(raw_env, state, settle_steps, reset_seed)
    expert.reset(raw_env, obs)
    actions: list[np.ndarray] = []
    phases: list[str] = []
    success = bool(raw_env.check_success())
    while not success and len(actions) < max_steps:
        action = expert.act(obs)
        phases.append(expert.phase)
        actions.append(action)
        obs, reward, done, _ = raw_env.step(action.copy())
        success = bool(raw_env.check_success())
        if on_step is not None:
            on_step(obs, action, float(reward), bool(done or success))
    return ExpertEpisodeResult(
        success=success,
        steps=len(actions),
        actions=np.asarray(actions, dtype=np.float32).reshape(-1, 7),
        phases=phases,
        perturbation=getattr(expert, "perturbation_label", "none"),
        info={"regrasps": getattr(expert, "regrasps", 0), **dict(getattr(expert, "perturbation_info", {}))},
    )
