"""Action-conditioned EDM denoiser predicting the next K frames jointly (DIAMOND-style, pixel space).

    D(x_sigma; sigma, context, anchor, actions)
        = c_skip(sigma) x_sigma + c_out(sigma) F(c_in(sigma) x_sigma, c_noise(sigma), ...)

F is a `diffusers.UNet2DModel` (or, with `family="transformer"`, world_models/video_transformer.py, which
keeps the frames apart as tokens and reads the actions as their conditioning). The UNet's input stacks, along
channels, for a batch of B clips:

    noisy target frames, scaled by c_in     [B, K * ch, H, W]
    clean context frames                    [B, C * ch, H, W]
    the episode's anchor frame (frame 0)    [B, ch, H, W]
    action planes: a_k as 7 constant maps   [B, K * 7, H, W]  (frame-level conditioning: the
                   placed next to frame k                      convolution sees which action moved which frame)

and an MLP embedding of all K actions is added to the noise-level embedding through UNet2DModel's
`class_embed_type="identity"`, so every ResNet block is modulated by the actions as well. The output
[B, K * ch, H, W] is read as K frames [B, K, ch, H, W]. Frames are float in [-1, 1].

With `residual=True` (default) the diffused variable is the change from a reference frame r, the
last context frame or (`residual_to="anchor"`) the episode's first frame: x = frames - r, and
frames = x + r after sampling (`reference`).

The preconditioning (c_skip, c_out, c_in, c_noise) lives here and not in the sampler, so the
denoiser always returns a clean estimate x0 and any sampler (EDM Euler, flow-match Euler) can use it.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch
from diffusers import UNet2DModel
from torch import nn

from world_models import rng
from world_models.video_transformer import VideoTransformer


@dataclass
class DenoiserConfig:
    image_size: int = 64
    channels: int = 3  # per frame: 3 x number of views
    context_frames: int = 4  # C
    chunk_len: int = 8  # K
    action_dim: int = 7
    block_out_channels: list[int] = field(default_factory=lambda: [32, 64, 64])
    layers_per_block: int = 1
    attention: bool = False  # self-attention in the lowest-resolution blocks (costly on CPU)
    norm_num_groups: int = 8
    sigma_data: float = 0.2  # std of the diffused variable: ~0.16 for residuals on LIBERO 64 px (0.5 for
    # whole frames); a matching value keeps c_skip small at mid noise, so the net predicts the residual
    # instead of having to cancel noise that c_skip lets through (grain that accumulates in rollouts)
    sigma_min: float = 0.002
    sigma_max: float = 5.0  # DIAMOND's value: enough for 1-3 step sampling from a strong context
    p_mean: float = -0.4  # training noise levels: ln(sigma) ~ N(p_mean, p_std^2) (EDM / DIAMOND)
    p_std: float = 1.2
    residual: bool = True  # diffuse the change from a reference frame instead of the frame itself:
    # most of a robot scene is static, so the residual is mostly zero and the model spends its
    # capacity on what moves (the sampler adds the reference back)
    residual_to: str = "anchor"  # the reference: "last" context frame, or the episode's "anchor" (frame 0).
    # With "anchor" the static background is anchor + ~0 at every chunk, so sampling errors in it do not
    # pile up chunk after chunk as they do when each chunk is relative to the previous prediction
    # (quick preset, 64-step open loop: SSIM 0.871 with "anchor" vs 0.787 with "last", same training)
    sigma_max_prob: float = 0.0  # share of training clips noised at exactly sigma_max, where one-step
    # sampling evaluates the net; the log-normal alone puts only ~5% of clips near it
    noise_embed_scale: float = 100.0  # c_noise = 0.25 ln(sigma) spans ~2 units: scaled so the
    # sinusoidal timestep embedding uses more than its lowest frequencies
    # F's family: "unet" (diffusers.UNet2DModel over the frames stacked as channels; block_out_channels,
    # layers_per_block, attention, norm_num_groups) or "transformer" (world_models/video_transformer.py: patch
    # tokens of every frame, full attention; patch_size, width, depth, heads)
    family: str = "unet"
    # Share of training clips whose actions are hidden: replaced by a learned null action chunk, so that one
    # network also learns the action-free prediction from the context alone, which action guidance
    # (SamplerConfig.action_guidance) steers away from. 0 (default): no null action, no guidance.
    action_dropout: float = 0.0
    patch_size: int = 4
    width: int = 128
    depth: int = 4
    heads: int = 4


class Denoiser(nn.Module):
    """EDM-preconditioned joint K-frame denoiser built on `diffusers.UNet2DModel`."""

    def __init__(self, cfg: DenoiserConfig, bounded: bool = True):
        """bounded: the diffused space is frames in [-1, 1] (pixel mode), so samples are clamped to it;
        False for autoencoder latents, which have no fixed range."""
        super().__init__()
        self.bounded = bounded
        if cfg.residual_to not in ("last", "anchor"):
            raise ValueError(f"denoiser.residual_to: expected 'last' or 'anchor', got {cfg.residual_to!r}")
        if not 0.0 <= cfg.sigma_max_prob <= 1.0:
            raise ValueError(f"denoiser.sigma_max_prob: expected a probability in [0, 1], got {cfg.sigma_max_prob}")
        if cfg.family not in ("unet", "transformer"):
            raise ValueError(f"denoiser.family: expected 'unet' or 'transformer', got {cfg.family!r}")
        if not 0.0 <= cfg.action_dropout < 1.0:
            raise ValueError(f"denoiser.action_dropout: expected a share in [0, 1), got {cfg.action_dropout}")
        self.cfg = cfg
        C, K, ch, A = cfg.context_frames, cfg.chunk_len, cfg.channels, cfg.action_dim
        # the "no action given" input [K, A]; only in models trained to be guided, so older checkpoints load as
        # they are. Zeros start it at a gripper command of 0, which real chunks (gripper -1 or +1) never hold
        self.null_actions = nn.Parameter(torch.zeros(K, A)) if cfg.action_dropout > 0 else None
        if cfg.family == "transformer":
            self.net = VideoTransformer(cfg.image_size, ch, C, K, A, cfg.patch_size, cfg.width, cfg.depth, cfg.heads)
            return
        n = len(cfg.block_out_channels)
        down = ["AttnDownBlock2D" if cfg.attention and i == n - 1 else "DownBlock2D" for i in range(n)]
        up = ["AttnUpBlock2D" if cfg.attention and i == 0 else "UpBlock2D" for i in range(n)]
        self.unet = UNet2DModel(
            sample_size=cfg.image_size,
            in_channels=K * ch + C * ch + ch + K * A,
            out_channels=K * ch,
            block_out_channels=tuple(cfg.block_out_channels),
            down_block_types=tuple(down),
            up_block_types=tuple(up),
            layers_per_block=cfg.layers_per_block,
            norm_num_groups=cfg.norm_num_groups,
            add_attention=cfg.attention,
            class_embed_type="identity",
        )
        emb_dim = cfg.block_out_channels[0] * 4  # UNet2DModel's time-embedding width
        self.action_mlp = nn.Sequential(nn.Linear(K * A, emb_dim), nn.SiLU(), nn.Linear(emb_dim, emb_dim))

    # ---------------------------------------------------------------- EDM preconditioning
    def c_skip(self, sigma: torch.Tensor) -> torch.Tensor:
        return self.cfg.sigma_data ** 2 / (sigma ** 2 + self.cfg.sigma_data ** 2)

    def c_out(self, sigma: torch.Tensor) -> torch.Tensor:
        return sigma * self.cfg.sigma_data / (sigma ** 2 + self.cfg.sigma_data ** 2).sqrt()

    def c_in(self, sigma: torch.Tensor) -> torch.Tensor:
        return 1.0 / (sigma ** 2 + self.cfg.sigma_data ** 2).sqrt()

    def c_noise(self, sigma: torch.Tensor) -> torch.Tensor:
        return 0.25 * sigma.log()

    @property
    def guidable(self) -> bool:
        """Whether the model learned a null action (cfg.action_dropout > 0), which action guidance needs."""
        return self.null_actions is not None

    def hide(self, actions: torch.Tensor, hidden: torch.Tensor) -> torch.Tensor:
        """actions [B, K, 7] with the clips where hidden [B] (bool) is true replaced by the null action."""
        if self.null_actions is None:
            raise ValueError("hidden actions need a denoiser trained with denoiser.action_dropout > 0 (a null action)")
        h = hidden.to(device=actions.device, dtype=torch.bool)[:, None, None]
        return torch.where(h, self.null_actions.to(actions)[None], actions)

    def forward(self, noisy: torch.Tensor, sigma: torch.Tensor, context: torch.Tensor, anchor: torch.Tensor,
                actions: torch.Tensor, hidden: torch.Tensor | None = None) -> torch.Tensor:
        """Clean estimate x0 [B, K, ch, H, W] of `noisy` [B, K, ch, H, W] at noise level sigma [B].

        Both are in the diffused space: residuals from `reference(context, anchor)` when cfg.residual.

        context [B, C, ch, H, W], anchor [B, ch, H, W], actions [B, K, 7]; all float. hidden [B] bool: clips
        whose actions the net is not shown (the null action instead; `hide`).
        """
        if hidden is not None:
            actions = self.hide(actions, hidden)
        B, K, ch, H, W = noisy.shape
        sigma = sigma.to(noisy).reshape(B)
        s = sigma[:, None, None, None]
        noise = self.c_noise(sigma) * self.cfg.noise_embed_scale
        if self.cfg.family == "transformer":  # frames kept apart; the actions condition the tokens
            f = self.net(self.c_in(s)[:, None] * noisy, context, anchor, noise, actions)
        else:
            planes = actions.to(noisy).reshape(B, -1, 1, 1).expand(B, actions.shape[1] * actions.shape[2], H, W)
            x = torch.cat([
                (self.c_in(s) * noisy.reshape(B, K * ch, H, W)),
                context.reshape(B, -1, H, W),
                anchor,
                planes,
            ], dim=1)
            emb = self.action_mlp(actions.reshape(B, -1).to(noisy))
            # mypy cannot see nn.Module.__call__ through diffusers' ModelMixin
            f = self.unet(x, noise, class_labels=emb).sample  # type: ignore[operator]
        x0 = self.c_skip(s) * noisy.reshape(B, K * ch, H, W) + self.c_out(s) * f
        return x0.reshape(B, K, ch, H, W)

    def reference(self, context: torch.Tensor, anchor: torch.Tensor) -> torch.Tensor:
        """What the diffused variable is relative to [B, 1, ch, H, W]: the last context frame, the anchor, or 0."""
        if not self.cfg.residual:
            return torch.zeros_like(context[:, -1:])
        return anchor[:, None] if self.cfg.residual_to == "anchor" else context[:, -1:]

    def loss_weight(self, sigma: torch.Tensor) -> torch.Tensor:
        """EDM weighting lambda(sigma) = 1 / c_out^2: every noise level contributes a unit-variance target."""
        return (sigma ** 2 + self.cfg.sigma_data ** 2) / (sigma * self.cfg.sigma_data) ** 2

    def sample_sigma(self, batch: int, generator: torch.Generator | None = None, device=None) -> torch.Tensor:
        """Training noise levels: log-normal (p_mean, p_std), clipped to [sigma_min, sigma_max]."""
        z = rng.randn((batch,), generator)
        sigma = (self.cfg.p_mean + self.cfg.p_std * z).exp().clamp(self.cfg.sigma_min, self.cfg.sigma_max)
        if self.cfg.sigma_max_prob > 0:  # drawn only when asked: older configs keep their random stream
            at_max = rng.rand(batch, generator) < self.cfg.sigma_max_prob
            sigma = torch.where(at_max, torch.full_like(sigma, self.cfg.sigma_max), sigma)
        return sigma.to(device or "cpu")
