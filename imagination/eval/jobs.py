"""The types evaluation is built on, shared by the scheduler (`evaluate`) and every env it drives
(`libero`: real LIBERO, `imagined`: the world model): what to evaluate (`EvalConfig`), one episode
(`Job`), what the policy needs from an env (`EnvSpec`) and the batched env protocol (`EvalEnv`).
Kept apart from the scheduler so that the adapters import these without importing it back.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np


@dataclass
class EvalConfig:
    """What to evaluate, where, and how many episodes."""

    checkpoint: str = ""  # a Policy.save file, or "random" for the uniform random baseline
    # modules of your own package that define the checkpoint's policy class, imported before loading it: the
    # allow-list for a class outside this project's packages (policies/base.py, docs/policies.md)
    policy_modules: list[str] = field(default_factory=list)
    env: str = "libero_spatial"  # a LIBERO suite, or "imagination" (needs world_model and start_data)
    tasks: list[int] = field(default_factory=list)  # empty = every task of the env
    episodes_per_task: int = 10  # episodes run per task (the 95% interval of its success rate narrows as 1/sqrt(n))
    init_state_offset: int = 0  # episode j of a task starts from init state (offset + j) % num_init_states
    seed: int = 0  # episode seeds derive from (seed, task, j); also seeds sampled actions
    num_envs: int = 2  # parallel simulator processes
    # "local": simulator subprocesses on this machine; "ray": one Ray actor per env on the cluster at ray_address
    # ("" = a new local cluster, "auto" = the running one), the policy batching all of them here
    backend: str = "local"
    # checkpoint=ws://...: the server's protocol, "project" (policies.serving) or "openpi" (an openpi server;
    # set action_steps and image_size, which its metadata does not give)
    remote_protocol: str = "project"
    ray_address: str = ""
    action_steps: int = 0  # actions executed per predicted chunk (receding horizon); 0 = the whole chunk
    # the policy's chunk (mean) if True; else policy.sample, whose noise also depends on the batch layout
    deterministic: bool = True
    max_steps: int = 0  # control steps per episode; 0 = the env's standard horizon
    fast_render: bool = True  # see LiberoEnvConfig.fast_render: evaluate as the training data was rendered
    image_size: int = 0  # rendered size; 0 = the policy's image_size (64 if it has none)
    videos: int = 4  # mp4s (views side by side) of the first N episodes
    out_dir: str = "outputs/eval/run"
    num_threads: int = 1  # torch threads for the policy (simulators use the other cores)
    # env=imagination: the world model, the real episodes whose first frames start imagined ones
    # (matched by task and init state), and the proprio model (empty: fit one on start_data, ~15 s).
    world_model: str = ""
    start_data: str = ""
    # env=imagination over a dataset that mixes suites: start from this suite's episodes ("" = its only suite);
    # `suites=[...]` sets it per suite
    start_suite: str = ""
    proprio: str = ""
    sampling_steps: int = 0  # denoising steps per chunk; 0 = the world model's default
    action_guidance: float = 0.0  # imagination only: the world model's action guidance; 0 = the model's own
    success_threshold: float | None = None  # imagination only; None = the world model's calibrated threshold
    reward: str = "head"  # imagination only: "head", "state" or "goal" (ImaginationConfig.reward)
    state_reward: str = ""  # imagination only: the StateReward checkpoint of reward "state"
    goal_reader: str = ""  # imagination only: the goal reader of reward "goal" (scripts/train_goal_reader.py)
    device: str = "cpu"  # imagination only: where the world model runs (cpu, cuda); the policy stays on the CPU
    # Gaussian noise (std in 0-255 intensity units) added to the images the policy sees, not to the env: how much
    # do real outcomes depend on pixel-level detail (bench/gate_ceiling.py)? Drawn per job from (its seed,
    # obs_noise_seed), so a job's noise does not depend on scheduling. 0 = the images as rendered.
    obs_noise: float = 0.0
    obs_noise_seed: int = 0


@dataclass(frozen=True)
class Job:
    """One evaluation episode."""

    index: int  # position in the plan (videos go to the first ones)
    task_id: int
    episode: int  # j-th episode of this task
    init_state_id: int
    seed: int


@dataclass(frozen=True)
class EnvSpec:
    """What the policy needs from the env."""

    views: tuple[str, ...]
    image_size: int
    chunk_len: int  # actions per env step


class EvalEnv(Protocol):
    """A batched env the loop can drive. Observations follow envs/spaces (batched)."""

    num_envs: int

    def num_tasks(self) -> int: ...

    def num_init_states(self, task_id: int) -> int: ...

    def instruction(self, task_id: int) -> str: ...

    def reset_envs(self, jobs: Sequence[Job | None]) -> dict[str, Any]:
        """Start job i in env i where jobs[i] is not None (others untouched); returns the batched obs."""

    def step(self, actions: np.ndarray) -> tuple[dict[str, Any], np.ndarray, np.ndarray, np.ndarray, dict]:
        """actions float32 [B, K, 7] -> (obs, reward [B], terminated [B], truncated [B], info).

        info["frames"] (when recording) is a list of B uint8 arrays [n, V, H, W, 3], the views after
        each low-level step; info["t"] [B] the control steps of each episode so far.
        """

    def close(self) -> None: ...


EnvFactory = Callable[[EvalConfig, EnvSpec, list[int]], EvalEnv]  # (config, spec, first task per env) -> env
