"""The `Reward` protocol: what the imagination env asks of the judge of its imagined episodes, and `build_reward`,
the one place that maps `ImaginationConfig.reward` to a judge.

Per env, the env asks the judge where episodes may start (`start_limit`), tells it where each one starts (`start`),
and, for every imagined chunk, asks it for P(success) after each action and whether it ends the episode there
(`chunk`); then tells it how many of the chunk's actions the env executed (`advance`: a success or the horizon can
stop an env inside a chunk, and a judge that carries state along the chunk keeps the state at that action).

    judge = build_reward(cfg, world_model, episodes, num_envs)
    judge.start(i, episode_index, episode, t)
    prob, end = judge.chunk(envs, t, before, acts, states, success_logits, frames)   # [b, K], [b] (-1: on)
    judge.advance(j, i, n)

The env ends an episode where the judge ends it (`end`), or at the first action whose probability passes the
success threshold (`default_threshold` unless ImaginationConfig.success_threshold is set). Its reward is 1.0 on
success, or the probability where it ended for a `graded` judge (a graded outcome for GRPO's groups).

Why one protocol: the env's step was three interleaved branches, one per reward, and a new judge (the goal judge of
every suite) meant a fourth; a judge is now one module that states what it reads and is tested on its own.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

import numpy as np
import torch

if TYPE_CHECKING:
    from imagination.episodes import StartEpisode
    from world_models.grasp_point import GraspPointConfig
    from world_models.model import WorldModel

REWARDS = ("head", "state", "grasp", "goal")
# Rewards that read simulator quantities at RL time: "state" and "grasp" take the object's start from the
# keyframe's simulator labels, which a real robot does not have; "grasp" with an object reader
# (ImaginationConfig.object_reader) reads it from the first frame instead. "head" reads only what the world
# model imagines, "goal" only the imagined frames (a goal reader, world_models/goal_reader.py).
SIMULATOR_REWARDS = ("state", "grasp")


class RewardSettings(Protocol):
    """The fields of `ImaginationConfig` (imagination/env.py, where each is explained) that choose and fit a judge."""

    reward: str
    state_reward: str
    grasp_judge: str
    grasp_train_data: list[str]
    grasp_label_dirs: list[str]
    grasp_until: str
    grasp_held: str
    grasp_point: GraspPointConfig
    object_reader: str
    goal_reader: str
    goal_until: str
    goal_score: str
    goal_distance_scale: float
    imagined_steps: int
    success_threshold: float | None
    max_steps: int
    device: str


def reads_simulator(cfg: RewardSettings) -> bool:
    """Whether the reward of cfg reads a simulator quantity while RL runs (the own-gain benchmark's rule)."""
    return cfg.reward in SIMULATOR_REWARDS and not (cfg.reward == "grasp" and cfg.object_reader)


class Reward(Protocol):
    """The judge of a batch of imagined episodes (module docstring)."""

    default_threshold: float  # on `chunk`'s probabilities, unless ImaginationConfig.success_threshold is set
    graded: bool  # the reward is the probability where the episode ended (else 1.0 on success, 0 otherwise)
    reads_frames: bool  # `chunk` needs the chunk's imagined frames (the env decodes all K of them for it)

    def start_limit(self, episode: StartEpisode, max_steps: int) -> int:
        """Keyframes of `episode` are drawn from its frames before this one."""
        ...

    def start(self, i: int, episode_index: int, episode: StartEpisode, t: int) -> None:
        """Env i starts at frame t of start episode `episode_index`."""
        ...

    def chunk(self, envs: np.ndarray, t: np.ndarray, before: torch.Tensor, acts: torch.Tensor, states: torch.Tensor,
              success_logits: torch.Tensor, frames: torch.Tensor | None) -> tuple[np.ndarray, np.ndarray]:
        """One imagined chunk of the envs `envs` [b] at control steps t [b]: robot states before it [b, S], actions
        [b, K, 7], the proprio model's states after each action [b, K, S], the success head's logits [b, K], and
        when the judge `reads_frames` the imagined frames after each action [b, K, 3V, H, W] in [-1, 1] (else
        None) -> P(success) after each action [b, K] and the action index where the judge ends each episode [b]
        (-1: it goes on)."""
        ...

    def advance(self, j: int, i: int, n: int) -> None:
        """Env i, row j of the last `chunk`, executed that chunk's first n actions."""
        ...


def build_reward(cfg: RewardSettings, world_model: WorldModel, episodes: Sequence[StartEpisode],
                 num_envs: int) -> Reward:
    """The judge cfg.reward names, loaded or fitted for `num_envs` envs starting from `episodes`."""
    if cfg.reward not in REWARDS:
        raise ValueError(f"reward: expected one of {list(REWARDS)}, got {cfg.reward!r}")
    if cfg.reward == "head":
        judge: Reward = _head(world_model)
    elif cfg.reward == "state":
        from imagination.rewards.state import StateJudge

        judge = StateJudge.load(cfg.state_reward, world_model.chunk_len, episodes, num_envs, cfg.device)
    elif cfg.reward == "grasp":
        from imagination.rewards.grasp import load_grasp_judge

        if not cfg.grasp_judge:
            raise ValueError("grasp_judge: reward 'grasp' reads a fitted judge file: fit one with "
                             "scripts/fit_grasp_judge.py (scripts/imagine_rl.py fits it from "
                             "imagination.grasp_train_data into its out_dir)")
        judge = load_grasp_judge(cfg.grasp_judge, episodes, num_envs, cfg.grasp_until, cfg.max_steps, cfg.grasp_point,
                                 cfg.object_reader, world_model.cfg.views, cfg.imagined_steps,
                                 cfg.grasp_held)
    elif cfg.reward == "goal":
        from imagination.rewards.goal import GoalJudge

        judge = GoalJudge.load(cfg.goal_reader, episodes, num_envs, world_model.cfg.views, cfg.max_steps,
                               cfg.success_threshold, cfg.goal_until, cfg.goal_score, cfg.goal_distance_scale,
                               cfg.imagined_steps)
    if cfg.object_reader and cfg.reward != "grasp":
        raise ValueError(f"object_reader: only reward 'grasp' reads it, the reward is {cfg.reward!r}")
    return judge


def _head(world_model: WorldModel) -> Reward:
    from imagination.rewards.head import HeadReward

    return HeadReward(world_model.cfg.head.success_threshold)


__all__ = ["REWARDS", "Reward", "RewardSettings", "SIMULATOR_REWARDS", "build_reward", "reads_simulator"]
