"""Reward "head": the world model's success head on the imagined frames, 1.0 at the first action whose probability
passes the checkpoint's calibrated threshold (imagination/eval/calibrate.py). It reads only what the world model
imagines, and never ends an episode by itself."""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import torch

if TYPE_CHECKING:
    from imagination.episodes import StartEpisode


class HeadReward:
    """`Reward` (imagination/rewards/base.py) of the success head."""

    graded = False
    reads_frames = False  # the head's logits come with the chunk

    def __init__(self, threshold: float):
        self.default_threshold = threshold

    def start_limit(self, episode: StartEpisode, max_steps: int) -> int:
        return max_steps

    def start(self, i: int, episode_index: int, episode: StartEpisode, t: int) -> None:
        pass  # the head keeps nothing per episode: it reads each chunk's frames

    def chunk(self, envs: np.ndarray, t: np.ndarray, before: torch.Tensor, acts: torch.Tensor, states: torch.Tensor,
              success_logits: torch.Tensor, frames: torch.Tensor | None = None) -> tuple[np.ndarray, np.ndarray]:
        return torch.sigmoid(success_logits).cpu().numpy(), np.full(len(envs), -1, np.int64)

    def advance(self, j: int, i: int, n: int) -> None:
        pass


__all__ = ["HeadReward"]
