"""Evaluation in real LIBERO: the `EvalEnv` over the simulator's vector env."""
from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
from gymnasium.vector import AutoresetMode

from envs import libero_suites
from envs.libero_env import LiberoEnvConfig
from envs.outcome import FIGURES
from envs.vector_env import LiberoSyncVectorEnv, LiberoVectorEnv, libero_vector_env

if TYPE_CHECKING:
    from envs.ray_vector_env import RayLiberoVectorEnv
from imagination.eval.jobs import EnvSpec, EvalConfig, Job


class LiberoEvalEnv:
    """EvalEnv over `LiberoVectorEnv` with autoreset disabled: the loop starts every episode itself,
    with its job's task, init state and seed (gymnasium's masked reset restarts only finished envs)."""

    def __init__(self, cfg: EvalConfig, spec: EnvSpec, first_tasks: list[int], record: bool | None = None):
        # record: return every low-level step's images and states in info (videos, episode recording)
        self.suite, self.num_envs = cfg.env, len(first_tasks)
        self.record = cfg.videos > 0 if record is None else record
        config = LiberoEnvConfig(suite=cfg.env, task_id=first_tasks[0], views=spec.views, image_size=spec.image_size,
                                 chunk_len=spec.chunk_len, max_steps=cfg.max_steps or None,
                                 fast_render=cfg.fast_render, chunk_info=self.record)
        self._tasks: dict[int, libero_suites.LiberoTask] = {}
        self.venv: LiberoVectorEnv | LiberoSyncVectorEnv | RayLiberoVectorEnv
        if cfg.backend == "ray":  # one simulator per Ray actor, anywhere on the cluster (envs/ray_vector_env.py)
            from envs.ray_vector_env import RayLiberoVectorEnv

            self.venv = RayLiberoVectorEnv(config, self.num_envs, first_tasks, address=cfg.ray_address)
        elif cfg.backend == "local":
            self.venv = libero_vector_env(config, self.num_envs, first_tasks, autoreset_mode=AutoresetMode.DISABLED)
        else:
            raise ValueError(f"backend: expected 'local' or 'ray', got {cfg.backend!r}")
        # envs whose Ray worker died during a reset: their episode started over (reported with the next step)
        self._restarted = np.zeros(self.num_envs, bool)

    def num_tasks(self) -> int:
        return libero_suites.suite_info(self.suite).num_tasks

    def _task(self, task_id: int) -> libero_suites.LiberoTask:
        if task_id not in self._tasks:
            self._tasks[task_id] = libero_suites.get_task(self.suite, task_id)
        return self._tasks[task_id]

    def num_init_states(self, task_id: int) -> int:
        return len(self._task(task_id).init_states)

    def instruction(self, task_id: int) -> str:
        return self._task(task_id).language

    def reset_envs(self, jobs: Sequence[Job | None]) -> dict[str, Any]:
        obs, info = self.venv.reset(seed=[j.seed if j else None for j in jobs], options={
            "task_id": [j.task_id if j else None for j in jobs],
            "init_state_id": [j.init_state_id if j else None for j in jobs],
            "reset_mask": [j is not None for j in jobs]})
        self._restarted |= _flag(info, "restarted", self.num_envs)
        return obs

    def step(self, actions: np.ndarray):
        obs, reward, terminated, truncated, info = self.venv.step(actions)
        out: dict[str, Any] = {"t": np.asarray(info["t"]), **{k: np.asarray(info[k], np.float64) for k in FIGURES}}
        # a worker that died (backend ray) took its episode with it: that env started it over
        out["restarted"] = self._restarted | _flag(info, "restarted", self.num_envs)
        self._restarted = np.zeros(self.num_envs, bool)
        if self.record:
            out["frames"] = [np.stack([o["image"] for o in chunk]) for chunk in info["chunk_obs"]]
            out["states"] = [np.stack([o["state"] for o in chunk]) for chunk in info["chunk_obs"]]
        return obs, reward, terminated, truncated, out

    def close(self) -> None:
        self.venv.close()


def _flag(info: dict[str, Any], key: str, n: int) -> np.ndarray:
    """bool [n]: a vector env info's per-env flag (absent: all False)."""
    if key not in info:
        return np.zeros(n, bool)
    return np.asarray(info[key], bool) & np.asarray(info.get(f"_{key}", np.ones(n, bool)), bool)
