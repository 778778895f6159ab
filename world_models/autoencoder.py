"""Frame autoencoder for the latent world model: a `diffusers.AutoencoderKL` trained here on our frames.

    ae = Autoencoder(AutoencoderConfig(image_size=128))
    z = ae.encode(frames)     # frames [..., 3V, H, W] in [-1, 1] -> latents [..., C_lat V, H/f, W/f]
    x = ae.decode(z)          # latents -> frames [..., 3V, H, W] in [-1, 1] (not clamped)
    ae.save("autoencoder.pt"); ae = Autoencoder.load("autoencoder.pt")

f = 2^(len(block_out_channels) - 1) (8 with four blocks: 128 px -> 16 x 16 latents). Views stacked
as channels (ch = 3V, the world model's frame layout) are encoded one by one with the same weights
and their latents stacked as channels again, C_lat per view. `encode` returns the posterior mean,
shifted and scaled, (mean - shift_factor) * scaling_factor, so latents have roughly zero mean and unit
std on the training frames (both factors are measured at the end of training, as Stable Diffusion's
0.18215 was); the denoiser's sigma_data assumes that scale.
"""
from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field

import torch
from diffusers import AutoencoderKL
from torch import nn

from infra.checkpoint import CheckpointError, load_model_file, restore, save_model_file

_FORMAT = "wm-vla-rl/autoencoder"
_VERSION = 1


@dataclass
class AutoencoderConfig:
    image_size: int = 128  # frame side in pixels (square frames)
    block_out_channels: list[int] = field(default_factory=lambda: [16, 32, 64, 64])  # one entry per
    # resolution; each after the first halves the side: four give the usual 8x downsampling
    layers_per_block: int = 1
    latent_channels: int = 4  # per view
    norm_num_groups: int = 16  # GroupNorm groups: must divide every entry of block_out_channels
    mid_block_attention: bool = True  # self-attention at the latent resolution (cheap at 16 x 16)
    scaling_factor: float = 1.0  # latents = (posterior mean - shift_factor) * scaling_factor; set from
    shift_factor: float = 0.0  # the training frames at the end of scripts/train_autoencoder.py

    @property
    def downsample(self) -> int:
        return 2 ** (len(self.block_out_channels) - 1)

    @property
    def latent_size(self) -> int:
        return self.image_size // self.downsample

    def check(self) -> None:
        """Raise ValueError naming the field that cannot build an autoencoder."""
        if not self.block_out_channels:
            raise ValueError("autoencoder.block_out_channels: expected at least one entry")
        if self.image_size < 1 or self.image_size % self.downsample:
            raise ValueError(f"autoencoder.image_size: {self.image_size} px is not a multiple of the "
                             f"{self.downsample}x downsampling of {len(self.block_out_channels)} blocks")
        bad = [c for c in self.block_out_channels if c % self.norm_num_groups]
        if bad:
            raise ValueError(f"autoencoder.norm_num_groups: {self.norm_num_groups} does not divide "
                             f"block_out_channels entries {bad}")
        if self.latent_channels < 1:
            raise ValueError(f"autoencoder.latent_channels: expected >= 1, got {self.latent_channels}")
        if self.scaling_factor <= 0:
            raise ValueError(f"autoencoder.scaling_factor: expected > 0, got {self.scaling_factor}")


class Autoencoder(nn.Module):
    """`AutoencoderKL` behind a frame-layout interface: encode/decode [..., 3V, H, W] <-> [..., C_lat V, h, w]."""

    def __init__(self, cfg: AutoencoderConfig):
        super().__init__()
        cfg.check()
        self.cfg = cfg
        n = len(cfg.block_out_channels)
        self.vae = AutoencoderKL(
            in_channels=3, out_channels=3,
            down_block_types=("DownEncoderBlock2D",) * n, up_block_types=("UpDecoderBlock2D",) * n,
            block_out_channels=tuple(cfg.block_out_channels), layers_per_block=cfg.layers_per_block,
            latent_channels=cfg.latent_channels, norm_num_groups=cfg.norm_num_groups, sample_size=cfg.image_size,
            mid_block_add_attention=cfg.mid_block_attention,
            # the scaling lives in AutoencoderConfig (one place, saved with our checkpoint), not in the
            # diffusers config, whose value diffusers itself never applies inside encode/decode
        )

    # ---------------------------------------------------------------- layout helpers
    def _views(self, x: torch.Tensor, per_view: int, what: str) -> tuple[torch.Tensor, tuple[int, ...], int]:
        """[..., n V, h, w] -> ([N V, n, h, w], leading shape, V)."""
        if x.ndim < 3 or x.shape[-3] % per_view:
            raise ValueError(f"{what}: expected [..., {per_view} x views, H, W], got {tuple(x.shape)}")
        lead, (c, h, w) = tuple(x.shape[:-3]), x.shape[-3:]
        V = c // per_view
        return x.reshape(-1, V, per_view, h, w).flatten(0, 1), lead, V

    def _check_frames(self, frames: torch.Tensor) -> None:
        s = self.cfg.image_size
        if tuple(frames.shape[-2:]) != (s, s):
            raise ValueError(f"frames: expected {s} x {s} px (autoencoder.image_size), got {tuple(frames.shape)}")

    # ---------------------------------------------------------------- encode / decode
    def posterior(self, frames: torch.Tensor):
        """The raw diffusers posterior of single-view frames [N, 3, H, W] (training: sample, kl)."""
        # diffusers wraps encode/decode in apply_forward_hook, which hides them from mypy
        return self.vae.encode(frames).latent_dist  # type: ignore[attr-defined]

    def raw_decode(self, z: torch.Tensor) -> torch.Tensor:
        """Unscaled latents [N, C_lat, h, w] -> single-view frames [N, 3, H, W]."""
        return self.vae.decode(z).sample  # type: ignore[attr-defined]

    def encode(self, frames: torch.Tensor, batch: int = 64) -> torch.Tensor:
        """Scaled latents [..., C_lat V, h, w] of frames [..., 3V, H, W] in [-1, 1] (posterior means).

        Encoded `batch` single-view frames at a time, so a long episode does not hold every activation at once.
        """
        self._check_frames(frames)
        x, lead, V = self._views(frames, 3, "frames")
        x = x.to(next(self.parameters()).dtype)
        means = [self.posterior(x[i:i + batch]).mean for i in range(0, x.shape[0], batch)]
        z = (torch.cat(means) - self.cfg.shift_factor) * self.cfg.scaling_factor
        return z.reshape(*lead, V * self.cfg.latent_channels, *z.shape[-2:])

    def decode(self, latents: torch.Tensor, batch: int = 64) -> torch.Tensor:
        """Frames [..., 3V, H, W] (about [-1, 1], not clamped) of scaled latents [..., C_lat V, h, w]."""
        z, lead, V = self._views(latents, self.cfg.latent_channels, "latents")
        z = z.to(next(self.parameters()).dtype) / self.cfg.scaling_factor + self.cfg.shift_factor
        x = torch.cat([self.raw_decode(z[i:i + batch]) for i in range(0, z.shape[0], batch)])
        return x.reshape(*lead, V * 3, *x.shape[-2:])

    # ---------------------------------------------------------------- persistence
    def save(self, path: str | os.PathLike) -> None:
        """Config + weights, written atomically (infra.atomic)."""
        state = {k: v.detach().cpu() for k, v in self.state_dict().items()}
        save_model_file(path, _FORMAT, asdict(self.cfg), state, _VERSION)

    @classmethod
    def load(cls, path: str | os.PathLike, map_location: str | torch.device = "cpu") -> Autoencoder:
        """The autoencoder saved at `path`, in eval mode; CheckpointError naming `path` if unusable."""
        what = "autoencoder checkpoint (Autoencoder.save, scripts/train_autoencoder.py)"
        blob = load_model_file(path, what, _FORMAT, _VERSION, map_location)
        try:
            cfg = AutoencoderConfig(**blob["config"])
            model = cls(cfg)
        except (TypeError, ValueError) as err:
            raise CheckpointError(f"{path}: its autoencoder config is unusable ({type(err).__name__}: {err})") from None
        restore(model, blob["state_dict"], path, "autoencoder")
        return model.eval()
