"""Behaviour cloning's samples and loss: every (episode, t) of the selected episodes as one sample (the observation
at t and the actions t..t+K-1, masked past the episode's end), the image augmentations its batches draw (random
shift, pixel noise), and the masked chunk loss. Also used by RL's anchor (imagination/rl/anchor.py) and the frame
adaptation (imagination/rl/frame_adapt.py), which imitate the same way."""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from envs.frames import stack_views


class ChunkData:
    """Selected episodes in memory as tensors; index n = one (episode, t) sample.

    image uint8 [N, V, H, W, 3], state float32 [N, 8], target float32 [N, K, 7], mask bool [N, K],
    text_id long [N] into `instructions`.
    """

    def __init__(self, episodes: Sequence[Any], views: Sequence[str], chunk_len: int, image_size: int):
        if not episodes:
            raise ValueError("BC: no episodes selected (check data_dir, tasks, sources, success_only)")
        images, states, targets, masks, text_ids, task_ids = [], [], [], [], [], []
        self.instructions: list[str] = []
        for ep in episodes:
            missing = [v for v in views if v not in ep.frames]
            if missing:
                raise ValueError(f"BC: episode lacks views {missing}; dataset views are {sorted(ep.frames)}")
            T = len(ep)
            img = torch.from_numpy(stack_views(ep.frames, views))  # [T, V, H, W, 3]
            images.append(_resize_uint8(img, image_size))
            states.append(torch.as_tensor(np.array(ep.state, dtype=np.float32)))
            action = torch.as_tensor(np.array(ep.action, dtype=np.float32))
            idx = torch.arange(T)[:, None] + torch.arange(chunk_len)[None, :]  # [T, K]
            masks.append(idx < T)
            targets.append(action[idx.clamp(max=T - 1)])
            if ep.instruction not in self.instructions:
                self.instructions.append(ep.instruction)
            text_ids.append(torch.full((T,), self.instructions.index(ep.instruction)))
            task_ids.append(torch.full((T,), int(getattr(ep, "task_id", -1))))  # -1: the episode names none
        self.image, self.state = torch.cat(images), torch.cat(states)
        self.target, self.mask, self.text_id = torch.cat(targets), torch.cat(masks), torch.cat(text_ids)
        self.task_id = torch.cat(task_ids)  # long [N]

    def sample_weights(self, task_weights: Sequence[float]) -> torch.Tensor | None:
        """float [N]: each sample's draw weight, `task_weights[task id]` (1.0 past the list); None = uniform.
        Every task keeps its share of the batch in proportion to its weight times its sample count."""
        if not task_weights:
            return None
        if bool((self.task_id < 0).any()):
            raise ValueError("task_weights: the episodes carry no task_id, so no sample can be given its task's weight")
        table = torch.ones(int(self.task_id.max()) + 1)
        n = min(len(task_weights), len(table))
        table[:n] = torch.as_tensor(list(task_weights[:n]), dtype=torch.float32)
        weights = table[self.task_id]
        if not weights.sum() > 0:
            raise ValueError(f"task_weights: every selected task has weight 0 ({list(task_weights)})")
        return weights

    def __len__(self) -> int:
        return self.state.shape[0]

    def batch(self, idx: torch.Tensor, shift: int, generator: torch.Generator,
              noise: float = 0.0) -> tuple[dict, torch.Tensor, torch.Tensor]:
        image = self.image[idx]
        if shift > 0:
            image = random_shift(image, shift, generator)
        if noise > 0:
            image = pixel_noise(image, noise, generator)
        obs = {"image": image, "state": self.state[idx],
               "instruction": [self.instructions[i] for i in self.text_id[idx]]}
        return obs, self.target[idx], self.mask[idx]


def _resize_uint8(img: torch.Tensor, size: int) -> torch.Tensor:
    """uint8 [T, V, H, W, 3] -> uint8 [T, V, size, size, 3] (area resize; no-op at the right size)."""
    T, V, H, W, _ = img.shape
    if (H, W) == (size, size):
        return img
    x = img.reshape(T * V, H, W, 3).permute(0, 3, 1, 2).float()
    x = F.interpolate(x, size=(size, size), mode="area").round().clamp(0, 255).to(torch.uint8)
    return x.permute(0, 2, 3, 1).reshape(T, V, size, size, 3)


def random_shift(image: torch.Tensor, pad: int, generator: torch.Generator) -> torch.Tensor:
    """Shift each image of uint8 [B, V, H, W, 3] by up to `pad` pixels, edges replicated.

    Clamped index grids do the replicate padding and the crop in one gather, staying in uint8.
    """
    B, V, H, W, C = image.shape
    flat = image.reshape(B * V, H, W, C)
    off = torch.randint(0, 2 * pad + 1, (B * V, 2), generator=generator) - pad
    rows = (torch.arange(H)[None, :] + off[:, :1]).clamp(0, H - 1)  # [N, H]
    cols = (torch.arange(W)[None, :] + off[:, 1:]).clamp(0, W - 1)  # [N, W]
    n = torch.arange(B * V)[:, None, None]
    return flat[n, rows[:, :, None], cols[:, None, :]].reshape(B, V, H, W, C)


def pixel_noise(image: torch.Tensor, max_std: float, generator: torch.Generator) -> torch.Tensor:
    """uint8 [B, ...] plus Gaussian noise of a std drawn per sample from U(0, max_std), rounded and clamped to uint8.

    A range of stds rather than one: the policy keeps seeing near-clean images, which is what it meets in LIBERO."""
    std = torch.rand(image.shape[0], generator=generator) * max_std
    noise = torch.randn(image.shape, generator=generator) * std.view(-1, *[1] * (image.dim() - 1))
    return (image.float() + noise).round().clamp(0, 255).to(torch.uint8)


def bc_loss(policy: torch.nn.Module, obs: dict, target: torch.Tensor, mask: torch.Tensor,
            kind: str, count: float | None = None) -> tuple[torch.Tensor, float]:
    """Masked loss over the chunk -> (loss to minimise, plain MSE of the mean for logging).

    policy: a VLAPolicy, or the DistributedDataParallel wrapping it (whose forward syncs gradients).
    count: what the masked sums are divided by, in action entries; default this batch's own. A process
    training on a 1/N slice of a global batch passes the global batch's count / N: the mean of the N
    processes' losses and gradients (what DDP averages) is then the global batch's, whatever the mask
    of each slice holds."""
    out = policy(obs)
    m = mask[..., None].to(out.mean.dtype)  # [B, K, 1]
    denom = m.sum() * target.shape[-1] if count is None else torch.as_tensor(count, dtype=m.dtype)
    mse = ((out.mean - target) ** 2 * m).sum() / denom
    if kind == "mse":
        return mse, mse.item()
    if kind == "nll":
        var = (2 * out.log_std).exp().expand_as(out.mean)
        nll = F.gaussian_nll_loss(out.mean, target, var, reduction="none", full=True)
        return (nll * m).sum() / denom, mse.item()
    raise ValueError(f"loss: expected 'mse' or 'nll', got {kind!r}")


__all__ = ["ChunkData", "bc_loss", "pixel_noise", "random_shift"]
