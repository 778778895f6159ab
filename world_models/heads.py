"""Success (reward) and termination heads on predicted frames.

A small conv net looks at each predicted frame next to the episode's anchor frame (what changed
since the start is what tells a solved task) and returns two logits per frame:

    frames [B, K, ch, H, W], anchor [B, ch, H, W]  ->  success_logits [B, K], done_logits [B, K]

It is trained on simulator labels with real frames that are blurred and noised (`degrade`) and on
the denoiser's own (detached) clean estimates, so it keeps working on imagined frames, which are
softer than the real ones.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

from world_models import rng


@dataclass
class HeadConfig:
    channels: list[int] = field(default_factory=lambda: [16, 32, 64])
    blur_sigma_max: float = 1.5  # training augmentation: Gaussian blur with sigma ~ U(0, max) pixels
    noise_std_max: float = 0.1  # and additive Gaussian noise with std ~ U(0, max) ([-1, 1] units)
    success_pos_weight: float = 3.0  # success frames are rarer than the rest: weigh them up in the BCE
    done_pos_weight: float = 3.0
    # Decision threshold on sigmoid(success logit) in imagination. 0.5 until calibrated on replayed real
    # episodes (imagination.eval.calibrate, scripts/calibrate_success.py); saved with the checkpoint.
    success_threshold: float = 0.5


class SuccessDoneHead(nn.Module):
    """Per-frame success and done logits from (frame, anchor) pairs."""

    def __init__(self, cfg: HeadConfig, image_channels: int):
        super().__init__()
        self.cfg = cfg
        layers, c_in = [], 2 * image_channels
        for c in cfg.channels:  # each stage halves the resolution
            layers += [nn.Conv2d(c_in, c, 3, stride=2, padding=1), nn.GroupNorm(min(8, c), c), nn.SiLU()]
            c_in = c
        self.features = nn.Sequential(*layers)
        self.out = nn.Linear(c_in, 2)

    def forward(self, frames: torch.Tensor, anchor: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        B, K = frames.shape[:2]
        x = torch.cat([frames, anchor[:, None].expand_as(frames)], dim=2).flatten(0, 1)  # [B*K, 2ch, H, W]
        h = self.features(x).mean(dim=(-2, -1))
        logits = self.out(h).reshape(B, K, 2)
        return logits[..., 0], logits[..., 1]


def _gaussian_kernels(sigma: torch.Tensor, radius: int) -> torch.Tensor:
    """1-D Gaussian kernels [N, 2r+1], one per sigma (sigma 0 -> a delta)."""
    x = torch.arange(-radius, radius + 1, dtype=torch.float32, device=sigma.device)
    k = torch.exp(-0.5 * (x[None] / sigma.clamp_min(1e-3)[:, None]) ** 2)
    return k / k.sum(dim=1, keepdim=True)


def degrade(frames: torch.Tensor, blur_sigma_max: float, noise_std_max: float,
            generator: torch.Generator | None = None, bounded: bool = True) -> torch.Tensor:
    """Blur and noise each clip [B, K, ch, H, W] by a random amount (one amount per clip); clamped to
    [-1, 1] unless bounded=False (latents)."""
    B, K, ch, H, W = frames.shape
    sig = (rng.rand(B, generator) * blur_sigma_max).to(frames.device)
    std = rng.rand(B, generator) * noise_std_max
    noise = rng.randn(frames.shape, generator)
    radius = max(1, int(round(2 * blur_sigma_max)))
    k = _gaussian_kernels(sig, radius).to(frames)  # [B, 2r+1]
    # separable blur as a grouped conv: one kernel per (clip, frame, channel) plane
    x = frames.reshape(1, B * K * ch, H, W)
    kk = k[:, None, :].repeat_interleave(K * ch, dim=0)  # [B*K*ch, 1, 2r+1]
    x = F.conv2d(F.pad(x, (radius, radius, 0, 0), mode="replicate"), kk[:, :, None, :], groups=B * K * ch)
    x = F.conv2d(F.pad(x, (0, 0, radius, radius), mode="replicate"), kk[:, :, :, None], groups=B * K * ch)
    x = x.reshape(B, K, ch, H, W) + std.to(frames)[:, None, None, None, None] * noise.to(frames)
    return x.clamp(-1, 1) if bounded else x
