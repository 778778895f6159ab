"""Reward "state": a state reward (world_models/object_state.py) carries the goal's object along the proprio model's
robot states, from where the keyframe's simulator labels put it, and judges the object-target geometry after each
action: 1.0 at the first action whose probability passes 0.5.

Why: a grasp that misses the rim by 2 cm is 1-2 px at 64 px, invisible to the success head, but plain in numbers.
It reads simulator labels at RL time (the object's position at the keyframe), which a real robot does not have.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
import torch

if TYPE_CHECKING:
    from imagination.episodes import StartEpisode
    from world_models.object_state import StateReward


class StateJudge:
    """`Reward` (imagination/rewards/base.py) of a StateReward, with each env's carried object."""

    default_threshold = 0.5  # a probability trained as one
    graded = False
    reads_frames = False

    def __init__(self, model: StateReward, num_envs: int, device: str = "cpu"):
        self.model, self.device = model, torch.device(device)
        # the goal's object as the env carries it: position, target, start height, held (0/1)
        self.obj, self.target = (torch.zeros(num_envs, 3, device=self.device) for _ in range(2))
        self.z0, self.held = (torch.zeros(num_envs, device=self.device) for _ in range(2))
        self._path: tuple[torch.Tensor, torch.Tensor] | None = None  # the last chunk's object and held paths

    @classmethod
    def load(cls, path: str, chunk_len: int, episodes: Sequence[StartEpisode], num_envs: int,
             device: str = "cpu") -> StateJudge:
        """The StateReward at `path` (ImaginationConfig.state_reward), checked against the world model's chunk
        length and the start episodes' simulator labels (the object's position at a keyframe is where it starts)."""
        from world_models.object_state import StateReward

        if not path:
            raise ValueError("state_reward: reward 'state' needs a StateReward checkpoint "
                             "(scripts/train_state_reward.py)")
        model = StateReward.load(path).to(device)
        if model.cfg.chunk_len != chunk_len:
            raise ValueError(f"state_reward: chunk_len {model.cfg.chunk_len} differs from the world model's "
                             f"{chunk_len}")
        unlabelled = [k for k, e in enumerate(episodes) if e.sim is None]
        if unlabelled:
            raise ValueError(f"start episodes {unlabelled[:5]}{'...' if len(unlabelled) > 5 else ''} have no "
                             "simulator labels, which reward 'state' starts the object from: run "
                             "scripts/label_episodes.py on their dataset (tasks without a pick-and-place object "
                             "cannot use it)")
        return cls(model, num_envs, device)

    def start_limit(self, episode: StartEpisode, max_steps: int) -> int:
        # only rows the labels cover (a replay that diverged labels the rows before it only)
        assert episode.sim is not None  # checked in load
        return min(max_steps, len(episode.sim["grasped"]))

    def start(self, i: int, episode_index: int, episode: StartEpisode, t: int) -> None:
        sim = episode.sim
        assert sim is not None  # checked in load
        if t >= len(sim["grasped"]):  # only a keyframe asked for in reset: drawn ones stay inside
            raise ValueError(f"keyframe at frame {t} of start episode {episode_index}: its simulator labels "
                             f"cover frames 0-{len(sim['grasped']) - 1} only (its replay diverged there)")
        self.obj[i] = torch.as_tensor(sim["object_pos"][t], device=self.device)
        self.target[i] = torch.as_tensor(sim["target_pos"][t], device=self.device)
        self.z0[i] = float(sim["object_pos"][0, 2])
        self.held[i] = float(sim["grasped"][t])

    def chunk(self, envs: np.ndarray, t: np.ndarray, before: torch.Tensor, acts: torch.Tensor, states: torch.Tensor,
              success_logits: torch.Tensor, frames: torch.Tensor | None = None) -> tuple[np.ndarray, np.ndarray]:
        """`StateReward.carry` along the chunk, as `track` does on records (the envs' own states are still
        those before it)."""
        a = torch.as_tensor(envs, device=self.device)
        target = self.target[a][:, None].expand(-1, states.shape[1], -1)
        obj_path, held_path, prob = self.model.carry(self.obj[a], self.z0[a], self.held[a], before, states, target)
        self._path = (obj_path, held_path)
        return prob.cpu().numpy(), np.full(len(envs), -1, np.int64)

    def advance(self, j: int, i: int, n: int) -> None:
        assert self._path is not None  # the env calls chunk first
        self.obj[i], self.held[i] = self._path[0][j, n - 1], self._path[1][j, n - 1]


__all__ = ["StateJudge"]
