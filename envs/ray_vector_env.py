"""The LIBERO vector env on a Ray cluster: one simulator per Ray actor, stepped in lockstep from one driver.

    venv = RayLiberoVectorEnv(LiberoEnvConfig(suite="libero_goal"), num_envs=64, address="auto")

Same contract as `envs.vector_env.LiberoVectorEnv` with autoreset disabled (what evaluation uses): batched
observations, per-env reset options ("task_id", "init_state_id") and Gymnasium's "reset_mask". The policy stays
in the driver process (the GPU, when there is one) and sees every worker's observation in one batch.

Why actors and lockstep: rendering makes the simulator the slow part (5-22 steps/s per core here), so one
LIBERO per CPU of the cluster is where the time goes; batching every env's observation into one policy call
keeps the policy's side cheap. Ray places the actors (one CPU each) on whichever nodes have CPUs free.

A worker that dies (its process or its node) loses only the episode it was running: the actor is replaced,
the episode restarts from the same reset (same task, init state and seed; the simulator is deterministic),
and `info["restarted"]` flags that env for the step, so an evaluation loop drops the lost partial episode.
"""
from __future__ import annotations

import copy
import os
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import numpy as np
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space, concatenate, create_empty_array, iterate

from envs.libero_env import LiberoEnvConfig, make_env_fn
from envs.spaces import BatchObservation, Info
from envs.vector_env import split_options

MAX_RESTARTS = 3  # per env: a worker that keeps dying is a bug, not bad luck


def join_cluster(address: str) -> Any:
    """The `ray` module, joined to the cluster at `address` ("" = a new local one, "auto" = the running one)
    unless this process already joined one (a test's `ray.init(num_cpus=2)`, a driver script's own init)."""
    import ray

    if not ray.is_initialized():
        if not address:  # a new local cluster: its simulators are the work, not background jobs to nice at 15 (Ray's
            # default), where any CPU-bound job beside them starves them; RAY_worker_niceness set by you wins
            os.environ.setdefault("RAY_worker_niceness", "0")
        ray.init(address=address or None, include_dashboard=False, log_to_driver=False)
    return ray


class _EnvActor:
    """One LiberoEnv inside a Ray worker process."""

    def __init__(self, config: LiberoEnvConfig):
        import os

        # Ray hides GPUs from a CPU-only actor with CUDA_VISIBLE_DEVICES="", which robosuite's EGL renderer
        # parses as a device list and fails on; unset, EGL picks its default device (Mesa on a CPU node).
        if os.environ.get("CUDA_VISIBLE_DEVICES") == "":
            del os.environ["CUDA_VISIBLE_DEVICES"]
        self.env = make_env_fn(config)()
        self.obs: Any = None

    def spaces(self) -> tuple[Any, Any]:
        return self.env.observation_space, self.env.action_space

    def reset(self, seed: int | None, options: dict) -> tuple[Any, dict]:
        self.obs, info = self.env.reset(seed=seed, options=options or None)
        return self.obs, info

    def noop(self) -> tuple[Any, dict]:
        return self.obs, {}

    def step(self, action: np.ndarray) -> tuple[Any, float, bool, bool, dict]:
        self.obs, reward, terminated, truncated, info = self.env.step(action)
        return self.obs, float(reward), bool(terminated), bool(truncated), info

    def pid(self) -> int:
        import os

        return os.getpid()

    def close(self) -> None:
        self.env.close()


class RayLiberoVectorEnv(VectorEnv):
    """`num_envs` LIBERO tasks, each in a Ray actor with `cpus_per_env` CPUs, on the cluster at `address`
    ("" = the one this process already joined, else a new local one; "auto" = the running cluster)."""

    def __init__(self, config: LiberoEnvConfig, num_envs: int = 2, task_ids: Sequence[int] | None = None,
                 address: str = "", cpus_per_env: float = 1.0):
        if num_envs < 1:
            raise ValueError(f"num_envs: expected an integer >= 1, got {num_envs}")
        task_ids = list(task_ids) if task_ids is not None else [config.task_id] * num_envs
        if len(task_ids) != num_envs:
            raise ValueError(f"task_ids: expected {num_envs} task ids (one per env), got {len(task_ids)}")
        self._ray = ray = join_cluster(address)
        self._remote: Any = ray.remote(num_cpus=cpus_per_env)(_EnvActor)
        self.config = config
        self._configs = [replace(config, task_id=int(t)) for t in task_ids]
        self.actors: list[Any] = [self._remote.remote(c) for c in self._configs]
        obs_space, act_space = ray.get(self.actors[0].spaces.remote())
        self.num_envs = num_envs
        self.single_observation_space, self.single_action_space = obs_space, act_space
        self.observation_space = batch_space(obs_space, num_envs)
        self.action_space = batch_space(act_space, num_envs)
        self.metadata = {"autoreset_mode": AutoresetMode.DISABLED}
        self._obs: Any = create_empty_array(obs_space, num_envs)
        self._last_reset: list[tuple[int | None, dict]] = [(None, {}) for _ in range(num_envs)]
        self.restarts = [0] * num_envs

    def reset(self, *, seed: int | list[int | None] | None = None,
              options: dict[str, Any] | None = None) -> tuple[BatchObservation, Info]:
        """As `LiberoVectorEnv.reset`: options hold per-env lists (or one value) of "init_state_id" / "task_id",
        and "reset_mask" (bool [B]) restarts only some envs; the others keep their last observation."""
        n = self.num_envs
        seeds = (list(seed) if isinstance(seed, (list, tuple))
                 else [None if seed is None else seed + i for i in range(n)])
        options = dict(options or {})
        given = options.pop("reset_mask", None)
        mask = np.ones(n, bool) if given is None else np.asarray(given, bool)
        per_env = split_options(options, n)
        for i in range(n):
            if mask[i]:
                self._last_reset[i] = (seeds[i], per_env[i])
        futures = [a.reset.remote(*self._last_reset[i]) if mask[i] else a.noop.remote()
                   for i, a in enumerate(self.actors)]
        observations, infos = [], dict[str, Any]()
        for i, f in enumerate(futures):
            (obs, info), restarted = self._get(i, f)
            observations.append(obs)
            # a running env (not reset here) whose worker died: its episode started over
            infos = self._add_info(infos, {**info, "restarted": True} if restarted and not mask[i] else info, i)
        self._obs = concatenate(self.single_observation_space, observations, self._obs)
        return copy.deepcopy(self._obs), infos

    def step(self, actions: np.ndarray) -> tuple[BatchObservation, np.ndarray, np.ndarray, np.ndarray, Info]:
        """actions float32 [B, K, 7] -> (observations, reward [B], terminated [B], truncated [B], info). An env
        whose worker died comes back restarted from its last reset, info["restarted"] True, reward 0."""
        futures = [a.step.remote(x) for a, x in zip(self.actors, iterate(self.action_space, actions))]
        rewards, terms, truncs = np.zeros(self.num_envs), np.zeros(self.num_envs, bool), np.zeros(self.num_envs, bool)
        observations, infos = [], dict[str, Any]()
        for i, f in enumerate(futures):
            out, restarted = self._get(i, f)
            if restarted:  # the worker died: its episode started over from its last reset
                obs, info = out
                info = {**info, "restarted": True}
            else:
                obs, rewards[i], terms[i], truncs[i], info = out
            observations.append(obs)
            infos = self._add_info(infos, info, i)
        self._obs = concatenate(self.single_observation_space, observations, self._obs)
        return copy.deepcopy(self._obs), rewards, terms, truncs, infos

    def _get(self, i: int, future: Any) -> tuple[Any, bool]:
        """(the result of env i's call, False); if its actor died, (a new actor's replay of env i's last reset,
        True)."""
        restarted = False
        while True:
            try:
                return self._ray.get(future), restarted
            except self._ray.exceptions.RayActorError:
                restarted = True
                self.restarts[i] += 1
                if self.restarts[i] > MAX_RESTARTS:
                    raise RuntimeError(f"env {i}: its Ray worker died {self.restarts[i]} times") from None
                self.actors[i] = self._remote.remote(self._configs[i])
                future = self.actors[i].reset.remote(*self._last_reset[i])

    def close_extras(self, **kwargs: Any) -> None:
        for a in self.actors:
            try:
                self._ray.get(a.close.remote(), timeout=30)
            except Exception:  # a dead or stuck worker: killing it below is all that is left to do
                pass
            self._ray.kill(a)


__all__ = ["MAX_RESTARTS", "RayLiberoVectorEnv", "join_cluster"]
