"""Policy evaluation inside the world model, from the same starts as the real evaluation.

A job (task, official init state, seed) of `imagination.eval.evaluate` starts at frame 0 of a real
episode of that task recorded from that init state (expert episodes in the original look first),
so real and imagined success rates of several policies are measured from the same initial states
(policy ranking). When the start data has no episode from that init state, an episode of the same
task is picked by the job's seed, and the record says so (`exact_start` False).
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from envs import libero_suites
from imagination.env import ImaginationConfig
from imagination.eval.jobs import EnvSpec, EvalConfig, Job
from imagination.imagine import open_imagination
from imagination.keyframes import Keyframe, KeyframeConfig
from robot_data.dataset import EpisodeDataset, select_meta
from world_models.model import WorldModel


class ImaginationEvalEnv:
    """`EvalEnv` over `ImaginationVectorEnv` (see imagination.eval.jobs.EvalEnv)."""

    def __init__(self, cfg: EvalConfig, spec: EnvSpec, first_tasks: list[int]):
        for name in ("world_model", "start_data"):
            if not getattr(cfg, name):
                raise ValueError(f"{name}: env=imagination needs a {name.replace('_', ' ')} path")
        wm = WorldModel.load(cfg.world_model)
        size = wm.cfg.denoiser.image_size
        if spec.image_size != size:
            raise ValueError(f"image_size: the evaluation hands the policy {spec.image_size} px images but the world "
                             f"model imagines {size} px: set image_size={size} (the policy resizes what it reads)")
        if spec.chunk_len != wm.chunk_len:
            raise ValueError(f"action_steps: the world model steps chunks of {wm.chunk_len} actions, "
                             f"got {spec.chunk_len}")
        meta = EpisodeDataset(cfg.start_data, verify=False).meta
        suites = sorted({m.suite for m in meta})
        if not suites:
            raise ValueError(f"start_data: {cfg.start_data} holds no episodes to start from")
        if cfg.start_suite:
            if cfg.start_suite not in suites:
                raise ValueError(f"start_suite: start_data has no episode of {cfg.start_suite!r} (it has {suites})")
            meta = [m for m in meta if m.suite == cfg.start_suite]
        elif len(suites) != 1:
            raise ValueError(f"start_data mixes suites {suites}: set start_suite to one of them, or evaluate each "
                             "with suites=[...]")
        self.suite = meta[0].suite
        self._meta = meta
        self._instructions = {m.task_id: m.instruction for m in meta}
        horizon = cfg.max_steps or libero_suites.suite_info(self.suite).max_steps
        config = ImaginationConfig(max_steps=horizon, success_threshold=cfg.success_threshold,
                                   sampling_steps=cfg.sampling_steps or None, action_guidance=cfg.action_guidance,
                                   keyframes=KeyframeConfig(mode="start"),
                                   policy_views=list(spec.views), reward=cfg.reward, state_reward=cfg.state_reward,
                                   goal_reader=cfg.goal_reader, device=cfg.device)
        self.num_envs = len(first_tasks)
        self.venv = open_imagination(wm, cfg.start_data, cfg.proprio, self.num_envs, config)  # proprio "": fitted
        self.exact_starts: dict[int, bool] = {}  # job index -> started from its own init state

    def num_tasks(self) -> int:
        return libero_suites.suite_info(self.suite).num_tasks

    def num_init_states(self, task_id: int) -> int:
        return len(libero_suites.get_task(self.suite, task_id).init_states)

    def instruction(self, task_id: int) -> str:
        if task_id not in self._instructions:
            raise ValueError(f"tasks: start_data has no episode of task {task_id} "
                             f"(it has {sorted(self._instructions)})")
        return self._instructions[task_id]

    def _start_episode(self, job: Job) -> int:
        same_task = select_meta(self._meta, task_id=job.task_id)
        if not same_task:
            raise ValueError(f"tasks: start_data has no episode of task {job.task_id} to start from")
        exact = select_meta(same_task, init_state_id=job.init_state_id)
        # Prefer the clean expert in LIBERO's own look: its frame 0 is exactly what the real env shows.
        exact.sort(key=lambda m: (m.source != "expert", int(m.extra.get("style", 0)) != 0))
        self.exact_starts[job.index] = bool(exact)
        pick = exact[0] if exact else same_task[job.seed % len(same_task)]
        return int(pick.episode_index)

    def reset_envs(self, jobs: Sequence[Job | None]) -> dict[str, Any]:
        mask = np.array([j is not None for j in jobs])
        keyframes = [Keyframe(self._start_episode(j), 0) if j is not None else None for j in jobs]
        seed = next((j.seed for j in jobs if j is not None), None)
        obs, _ = self.venv.reset(seed=seed, options={"reset_mask": mask, "keyframes": keyframes})
        return obs

    def step(self, actions: np.ndarray):
        obs, reward, terminated, truncated, info = self.venv.step(actions)
        # One frame per chunk: the world model's observation after the chunk's last executed action.
        return obs, reward, terminated, truncated, {"t": info["t"], "frames": [img[None] for img in obs["image"]],
                                                    "success_prob": info["success_prob"]}

    def close(self) -> None:
        self.venv = None  # type: ignore[assignment]  # frees the world model; the env is not used after close
