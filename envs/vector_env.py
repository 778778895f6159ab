"""N real LIBERO envs in subprocesses behind Gymnasium's `AsyncVectorEnv` (or, for one env, in this process
behind `SyncVectorEnv`).

Gymnasium does the process management, batching and autoreset; these subclasses only add what LIBERO
evaluation needs: per-env reset options (a different task or official init state in each worker).
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import numpy as np
from gymnasium.vector import AsyncVectorEnv, AutoresetMode, SyncVectorEnv

from envs.libero_env import LiberoEnvConfig, make_env_fn
from envs.spaces import BatchObservation, Info


def _env_fns(config: LiberoEnvConfig, num_envs: int, task_ids: Sequence[int] | None) -> list:
    if num_envs < 1:
        raise ValueError(f"num_envs: expected an integer >= 1, got {num_envs}")
    task_ids = list(task_ids) if task_ids is not None else [config.task_id] * num_envs
    if len(task_ids) != num_envs:
        raise ValueError(f"task_ids: expected {num_envs} task ids (one per env), got {len(task_ids)}")
    return [make_env_fn(replace(config, task_id=int(t))) for t in task_ids]


class _PerEnvOptions:
    """reset(options=...) with per-env lists, for a Gymnasium vector env of `LiberoEnv`s."""

    num_envs: int

    def reset(self, *, seed: int | list[int | None] | None = None,
              options: dict[str, Any] | None = None) -> tuple[BatchObservation, Info]:
        """options: per-env lists (or one value for all) of "init_state_id" / "task_id", and Gymnasium's
        "reset_mask" (bool [B]) to restart only some envs; None entries leave an env's option unset."""
        options = dict(options or {})
        mask = options.pop("reset_mask", None)
        if options:
            self.set_attr("next_reset_options", split_options(options, self.num_envs))  # type: ignore[attr-defined]
        return super().reset(seed=seed,  # type: ignore[misc]
                             options=None if mask is None else {"reset_mask": np.asarray(mask, bool)})

    def step(self, actions: np.ndarray) -> tuple[BatchObservation, np.ndarray, np.ndarray, np.ndarray, Info]:
        """actions float32 [B, K, 7] -> (observations, reward float [B], terminated bool [B], truncated bool [B],
        info: per-key arrays [B] with "_key" masks). With NEXT_STEP autoreset, an env that ended is reset by
        the step after (that step's action is ignored and its reward is 0)."""
        return super().step(actions)  # type: ignore[misc]


class LiberoVectorEnv(_PerEnvOptions, AsyncVectorEnv):
    """`num_envs` LIBERO tasks stepped in parallel worker processes.

    Observations are batched: image uint8 [B, V, H, W, 3], state float32 [B, 8], instruction a tuple of
    B strings; actions float32 [B, K, 7]. `reset(options=...)` also accepts per-env lists, e.g.
    ``{"init_state_id": [0, 1, 2], "task_id": [4, 4, 7]}``.
    """

    def __init__(
        self,
        config: LiberoEnvConfig,
        num_envs: int = 2,
        task_ids: Sequence[int] | None = None,
        autoreset_mode: AutoresetMode = AutoresetMode.NEXT_STEP,
        context: str = "spawn",
    ):
        fns = _env_fns(config, num_envs, task_ids)
        # "spawn": each worker starts clean, without a copy of the parent's GL or OpenMP state.
        # Text observations (instructions) are not shared-memory friendly, and frames are small at
        # 64-128 px, so observations travel through the pipes.
        super().__init__(fns, shared_memory=False, context=context, autoreset_mode=autoreset_mode)
        self.config = config


class LiberoSyncVectorEnv(_PerEnvOptions, SyncVectorEnv):
    """`LiberoVectorEnv`'s contract with the envs in this process, one after the other: for one env, where a
    worker process would only add its start (importing the simulator stack again) and the pipe."""

    def __init__(self, config: LiberoEnvConfig, num_envs: int = 1, task_ids: Sequence[int] | None = None,
                 autoreset_mode: AutoresetMode = AutoresetMode.NEXT_STEP):
        super().__init__(_env_fns(config, num_envs, task_ids), autoreset_mode=autoreset_mode)
        self.config = config


def libero_vector_env(config: LiberoEnvConfig, num_envs: int, task_ids: Sequence[int] | None = None,
                      autoreset_mode: AutoresetMode = AutoresetMode.NEXT_STEP) -> LiberoVectorEnv | LiberoSyncVectorEnv:
    """One env in this process, several in worker processes (same observations, outcomes and options)."""
    if num_envs == 1:
        return LiberoSyncVectorEnv(config, 1, task_ids, autoreset_mode)
    return LiberoVectorEnv(config, num_envs, task_ids, autoreset_mode)


def split_options(options: dict, num_envs: int) -> list[dict]:
    """Reset options of per-env lists (or one value for all; None entries unset) -> one options dict per env."""
    per_env: list[dict] = [{} for _ in range(num_envs)]
    for key, value in options.items():
        values = list(value) if isinstance(value, (list, tuple, np.ndarray)) else [value] * num_envs
        if len(values) != num_envs:
            raise ValueError(f"reset options[{key!r}]: expected {num_envs} values (one per env), got {len(values)}")
        for opts, v in zip(per_env, values):
            if v is not None:
                opts[key] = int(v)
    return per_env
