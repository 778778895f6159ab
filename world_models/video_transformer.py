"""A video transformer for the denoiser's F (`DenoiserConfig.family="transformer"`): one sequence of patch tokens
over every frame of the clip, instead of a UNet over frames stacked as channels.

Why another family: the UNet sees a chunk as one image with K * ch + C * ch + ... channels, so a frame's content
and where it moved to mix in its first convolution, and the arm must be redrawn from channels that do not say
which frame they belong to. Here each frame keeps its own tokens and attention relates them (DiT / Latte-style):

    tokens      every frame patchified (a p x p patch -> `width`), plus a learned position (which patch) and a
                learned role (context frame c, the anchor, target frame k) embedding
    actions     frame-level: a_k's embedding is added to target frame k's tokens; all K actions and the noise
                level also modulate every block (adaLN-Zero: scale, shift and gate from their embedding)
    output      the target frames' tokens, linear to p x p x ch, unpatchified to [B, K * ch, H, W]

The EDM preconditioning stays in `world_models.denoiser.Denoiser`, which calls this in place of the UNet. Attention
is full over all (C + 1 + K) (H / p)^2 tokens: 208 for the latent quick preset's 16 x 16 latents at p = 4.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn


def timestep_embedding(t: torch.Tensor, dim: int) -> torch.Tensor:
    """Sinusoidal embedding [B, dim] of a scalar per sample t [B] (frequencies 1 .. 1/10000, as in DDPM/DiT)."""
    half = dim // 2
    freqs = torch.exp(-math.log(10000.0) * torch.arange(half, device=t.device, dtype=torch.float32) / half)
    args = t.float()[:, None] * freqs[None]
    return torch.cat([args.cos(), args.sin()], dim=1)


def unpatchify(tokens: torch.Tensor, p: int, ch: int) -> torch.Tensor:
    """Frames [B, T, ch, s*p, s*p] from tokens [B, T, s*s, p*p*ch]: token i*s + j is patch (row i, column j), as
    Conv2d(stride=p).flatten(2) orders them; its features are (row in patch, column in patch, channel)."""
    B, T, n, _ = tokens.shape
    s = math.isqrt(n)
    x = tokens.reshape(B, T, s, s, p, p, ch).permute(0, 1, 6, 2, 4, 3, 5)  # [B, T, ch, i, pi, j, pj]
    return x.reshape(B, T, ch, s * p, s * p)


class Block(nn.Module):
    """Pre-norm transformer block with adaLN-Zero: the conditioning vector sets each sub-layer's scale, shift and
    gate; the gates start at 0, so every block starts as the identity (DiT's finding: it trains best so)."""

    def __init__(self, width: int, heads: int, mlp_ratio: int = 4):
        super().__init__()
        self.heads = heads
        self.norm1 = nn.LayerNorm(width, elementwise_affine=False, eps=1e-6)
        self.qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)
        self.norm2 = nn.LayerNorm(width, elementwise_affine=False, eps=1e-6)
        self.mlp = nn.Sequential(nn.Linear(width, mlp_ratio * width), nn.GELU(approximate="tanh"),
                                 nn.Linear(mlp_ratio * width, width))
        modulation = nn.Linear(width, 6 * width)
        nn.init.zeros_(modulation.weight)
        nn.init.zeros_(modulation.bias)
        self.ada = nn.Sequential(nn.SiLU(), modulation)

    def forward(self, x: torch.Tensor, cond: torch.Tensor) -> torch.Tensor:
        """x [B, N, width], cond [B, width] -> [B, N, width]."""
        B, N, D = x.shape
        shift1, scale1, gate1, shift2, scale2, gate2 = self.ada(cond)[:, None].chunk(6, dim=-1)
        h = self.norm1(x) * (1 + scale1) + shift1
        q, k, v = self.qkv(h).reshape(B, N, 3, self.heads, D // self.heads).permute(2, 0, 3, 1, 4)
        h = F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(B, N, D)
        x = x + gate1 * self.proj(h)
        return x + gate2 * self.mlp(self.norm2(x) * (1 + scale2) + shift2)


class VideoTransformer(nn.Module):
    """F(noisy targets, context, anchor, noise level, actions) for a clip of C context frames, the anchor and K noisy
    target frames, each frame kept apart (the UNet's input stacks them along channels instead)."""

    def __init__(self, image_size: int, channels: int, context_frames: int, chunk_len: int, action_dim: int,
                 patch_size: int, width: int, depth: int, heads: int):
        super().__init__()
        if image_size % patch_size:
            raise ValueError(f"denoiser.patch_size: expected a divisor of the image (latent) size {image_size}, "
                             f"got {patch_size}")
        if width % heads or width % 2:
            raise ValueError(f"denoiser.width: expected an even multiple of denoiser.heads = {heads}, got {width}")
        self.C, self.p = context_frames, patch_size
        self.side = image_size // patch_size
        frames = context_frames + 1 + chunk_len
        self.patch = nn.Conv2d(channels, width, patch_size, stride=patch_size)
        self.pos = nn.Parameter(torch.randn(1, 1, self.side ** 2, width) * 0.02)  # which patch
        self.role = nn.Parameter(torch.randn(1, frames, 1, width) * 0.02)  # context c, anchor, target k
        self.frame_action = nn.Linear(action_dim, width)
        self.noise_mlp = nn.Sequential(nn.Linear(width, width), nn.SiLU(), nn.Linear(width, width))
        self.action_mlp = nn.Sequential(nn.Linear(chunk_len * action_dim, width), nn.SiLU(), nn.Linear(width, width))
        self.blocks = nn.ModuleList(Block(width, heads) for _ in range(depth))
        self.norm = nn.LayerNorm(width, elementwise_affine=False, eps=1e-6)
        self.ada = nn.Sequential(nn.SiLU(), nn.Linear(width, 2 * width))
        self.out = nn.Linear(width, patch_size * patch_size * channels)
        nn.init.zeros_(self.out.weight)  # F starts at 0: the denoiser starts as c_skip x, as the UNet nearly does
        nn.init.zeros_(self.out.bias)
        self.width = width

    def forward(self, targets: torch.Tensor, context: torch.Tensor, anchor: torch.Tensor, noise: torch.Tensor,
                actions: torch.Tensor) -> torch.Tensor:
        """targets [B, K, ch, H, W] (noisy, scaled by c_in), context [B, C, ch, H, W], anchor [B, ch, H, W], noise [B]
        (the scaled c_noise), actions [B, K, A] -> F [B, K * ch, H, W]."""
        B, K, ch, H, W = targets.shape
        C, p, s = self.C, self.p, self.side
        anchor = anchor[:, None]
        frames = torch.cat([context, anchor, targets], dim=1)  # [B, T, ch, H, W], roles in this order
        T = frames.shape[1]
        tok = self.patch(frames.reshape(B * T, ch, H, W)).flatten(2).transpose(1, 2).reshape(B, T, s * s, -1)
        tok = tok + self.pos + self.role
        per_frame = self.frame_action(actions.to(tok))  # [B, K, width]: a_k moved frame k
        tok = torch.cat([tok[:, :C + 1], tok[:, C + 1:] + per_frame[:, :, None]], dim=1)
        cond = (self.noise_mlp(timestep_embedding(noise, self.width).to(tok))
                + self.action_mlp(actions.reshape(B, -1).to(tok)))
        h = tok.reshape(B, T * s * s, -1)
        for block in self.blocks:
            h = block(h, cond)
        shift, scale = self.ada(cond)[:, None].chunk(2, dim=-1)
        h = self.out(self.norm(h) * (1 + scale) + shift).reshape(B, T, s * s, -1)[:, C + 1:]  # the target frames
        return unpatchify(h, p, ch).reshape(B, K * ch, H, W)


__all__ = ["Block", "VideoTransformer", "timestep_embedding", "unpatchify"]
