"""Structure-preserving style augmentation (Sword, source (b)): photometric changes per clip.

Every change here is a per-pixel affine colour map x -> M x + b (M a 3x3 matrix, b a 3-vector):
colour gain, hue rotation about the grey axis, saturation, contrast about mid-grey and brightness.
Geometry is untouched, and because one (M, b) is drawn per clip and applied to every frame of it
(history, context, anchor, targets), the dynamics the model must learn are unchanged: only the look
varies, which is what makes the world model robust to lighting and colour it has not seen.
Frames are float in [-1, 1], shaped [B, T, ch, H, W] or [B, ch, H, W] with ch = 3 * views.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from world_models import rng


@dataclass
class StyleAugConfig:
    enabled: bool = True  # ablation switch
    prob: float = 0.8  # share of clips that get a new style; the rest stay as recorded
    brightness: float = 0.15  # additive shift, as a fraction of the [0, 1] intensity range
    contrast: float = 0.2  # factor in [1 - contrast, 1 + contrast] about mid-grey
    saturation: float = 0.3
    hue: float = 0.05  # rotation about the grey axis, as a fraction of a full turn
    gain: float = 0.1  # independent per-channel gain in [1 - gain, 1 + gain]


def _uniform(n: int, half_width: float, generator: torch.Generator | None, center: float = 0.0) -> torch.Tensor:
    return center + half_width * (2.0 * rng.rand(n, generator).cpu() - 1.0)


def sample_style(cfg: StyleAugConfig, batch: int,
                 generator: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Draw one colour map per clip: (M [B, 3, 3], b [B, 3]); identity for clips left alone."""
    eye = torch.eye(3).expand(batch, 3, 3)
    # draw every parameter even when disabled or skipped, so the random stream does not depend on it
    apply = (rng.rand(batch, generator).cpu() < cfg.prob) & cfg.enabled
    gain = torch.diag_embed(torch.stack([_uniform(batch, cfg.gain, generator, 1.0) for _ in range(3)], -1))
    theta = _uniform(batch, cfg.hue, generator) * 2 * math.pi
    sat = _uniform(batch, cfg.saturation, generator, 1.0)
    con = _uniform(batch, cfg.contrast, generator, 1.0)
    bright = _uniform(batch, cfg.brightness, generator) * 2.0  # [0, 1] units -> [-1, 1] units
    # hue: Rodrigues rotation about the unit grey axis g = (1, 1, 1) / sqrt(3); keeps grey grey
    g = torch.full((3,), 1 / math.sqrt(3))
    cross = torch.tensor([[0.0, -g[2], g[1]], [g[2], 0.0, -g[0]], [-g[1], g[0], 0.0]])
    outer = torch.outer(g, g)
    c, s = torch.cos(theta)[:, None, None], torch.sin(theta)[:, None, None]
    hue = c * eye + s * cross + (1 - c) * outer
    # saturation: blend with luminance (Rec. 601 weights)
    lum = torch.tensor([0.299, 0.587, 0.114])
    sat_m = sat[:, None, None] * eye + (1 - sat[:, None, None]) * torch.ones(3, 1) * lum
    m = con[:, None, None] * (gain @ hue @ sat_m)
    b = bright[:, None].expand(batch, 3)
    m = torch.where(apply[:, None, None], m, eye)
    b = torch.where(apply[:, None], b, torch.zeros_like(b))
    return m, b


def apply_style(frames: torch.Tensor, m: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Apply per-clip maps to frames [B, ..., ch, H, W] (ch a multiple of 3), clamped to [-1, 1]."""
    B, ch = frames.shape[0], frames.shape[-3]
    if ch % 3:
        raise ValueError(f"apply_style: channels must be a multiple of 3 (RGB per view), got {ch}")
    x = frames.reshape(B, -1, ch // 3, 3, *frames.shape[-2:])  # [B, T', V, 3, H, W]
    y = torch.einsum("bij,btvjhw->btvihw", m.to(x), x) + b.to(x)[:, None, None, :, None, None]
    return y.clamp(-1, 1).reshape(frames.shape)


def augment_clip(batch: dict[str, torch.Tensor], cfg: StyleAugConfig,
                 generator: torch.Generator | None = None,
                 keys: tuple[str, ...] = ("history", "context", "target", "anchor")) -> dict[str, torch.Tensor]:
    """Return a copy of `batch` whose frame tensors got one style per clip (same for all frames)."""
    any_frames = next(batch[k] for k in keys if k in batch)
    m, b = sample_style(cfg, any_frames.shape[0], generator)
    out = dict(batch)
    if not cfg.enabled:
        return out
    for k in keys:
        if k in batch:
            out[k] = apply_style(batch[k], m, b)
    return out
