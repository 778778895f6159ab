"""The built-in small VLA: views + instruction + proprio -> Gaussian action chunk and a value.

    image [B, V, H, W, 3] --shared conv encoder + per-view embedding--> [B, V*F_img] --+
    instruction (B str) --frozen MiniLM (384, cached)--> linear --------> [B, F_lang] -+--> trunk MLP --> [B, hidden]
    state [B, 8] --pos/gripper normalized, axis-angle -> rotation matrix--> MLP [B, F_state] -+
    trunk --> tanh(linear) = mean [B, K, 7];  state-independent log-std [K, 7] (clamped);  value MLP [B]

Action distribution (for RL): a Gaussian N(mean, std) per action dimension whose samples are clipped
to [-1, 1]. Clipping puts probability mass on the bounds, so the log-probability of an action on a
bound is the log of that tail mass (log Phi), elsewhere the Gaussian log-density: `sample` and
`evaluate` agree exactly on the actions the env really executes. `entropy` reports the entropy of the
underlying (unclipped) Gaussian, the usual exploration measure.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

from policies.base import ACTION_DIM, ObservationError, Policy, PolicyConfig, batch_obs, check_actions
from policies.gaussian import clipped_gaussian_log_prob, gaussian_entropy
from policies.language import EMBED_DIM, LanguageConfig, shared_encoder

STATE_DIM = 8  # eef pos (3), eef axis-angle (3), gripper qpos (2): the project's proprio layout


@dataclass
class VLAConfig(PolicyConfig):
    """Sizes of the built-in VLA (defaults: ~0.8M trainable parameters, CPU-friendly at 64 px)."""

    views: list[str] = field(default_factory=lambda: ["agentview", "wrist"])  # order of obs["image"] views
    image_size: int = 64  # inputs of another size are resized (area) to this before the encoder
    conv_channels: list[int] = field(default_factory=lambda: [32, 64, 64, 128])  # one stride-2 conv each
    image_features: int = 128  # per view
    language_features: int = 64
    state_features: int = 64
    hidden: int = 256
    trunk_layers: int = 2
    init_log_std: float = -1.0  # exp(-1) ~ 0.37 std at the start of RL
    log_std_min: float = -5.0
    log_std_max: float = 0.5
    language_cache: str = ""  # optional .npz cache of instruction embeddings (see policies.language)


class PolicyOutput(NamedTuple):
    mean: torch.Tensor  # float32 [B, K, 7] in (-1, 1)
    log_std: torch.Tensor  # float32 [K, 7], clamped
    value: torch.Tensor  # float32 [B]


def axis_angle_to_matrix(aa: torch.Tensor) -> torch.Tensor:
    """Rodrigues: axis-angle [..., 3] -> flattened rotation matrix [..., 9].

    Why: near a half turn (the gripper pointing down) axis-angle flips sign between nearly equal
    orientations; the rotation matrix is continuous there, so the network sees similar inputs.
    """
    theta = aa.norm(dim=-1, keepdim=True)
    safe = theta.clamp_min(1e-8)
    k = aa / safe
    x, y, z = k.unbind(-1)
    zero = torch.zeros_like(x)
    K = torch.stack([zero, -z, y, z, zero, -x, -y, x, zero], dim=-1).reshape(*aa.shape[:-1], 3, 3)
    s, c = torch.sin(theta)[..., None], torch.cos(theta)[..., None]
    eye = torch.eye(3, dtype=aa.dtype, device=aa.device).expand_as(K)
    R = eye + s * K + (1 - c) * (K @ K)
    return R.reshape(*aa.shape[:-1], 9)


class ConvEncoder(nn.Module):
    """uint8-derived images float [N, 3, S, S] in [0, 1] -> features [N, out]; stride-2 convs keep layout."""

    def __init__(self, channels: list[int], image_size: int, out: int):
        super().__init__()
        layers, c_in = [], 3
        for c in channels:
            layers += [nn.Conv2d(c_in, c, 3, stride=2, padding=1), nn.GroupNorm(min(8, c), c), nn.SiLU()]
            c_in = c
        self.convs = nn.Sequential(*layers)
        side = image_size
        for _ in channels:
            side = (side + 1) // 2
        # flatten (not global pooling): where things are in the image is what the actions depend on
        self.proj = nn.Sequential(nn.Flatten(), nn.Linear(c_in * side * side, out), nn.LayerNorm(out), nn.SiLU())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(self.convs((x - 0.5) / 0.25))


class VLAPolicy(Policy):
    """Small vision-language-action policy with a Gaussian action-chunk head and a value head."""

    config_class = VLAConfig
    config: VLAConfig
    # buffers (register_buffer): proprio normalisation
    state_mean: torch.Tensor
    state_std: torch.Tensor

    def __init__(self, config: VLAConfig | None = None):
        super().__init__(config or VLAConfig())
        cfg: VLAConfig = self.config
        if not cfg.views or cfg.image_size < 8 or not cfg.conv_channels:
            raise ValueError(f"VLAConfig: need >= 1 view, image_size >= 8 and conv channels, got {cfg}")
        V, K = len(cfg.views), cfg.chunk_len
        self.image_encoder = ConvEncoder(list(cfg.conv_channels), cfg.image_size, cfg.image_features)
        self.view_embedding = nn.Parameter(torch.zeros(V, cfg.image_features))
        self.language_proj = nn.Sequential(nn.Linear(EMBED_DIM, cfg.language_features), nn.SiLU())
        self.state_mlp = nn.Sequential(nn.Linear(3 + 9 + 2, cfg.state_features), nn.SiLU(),
                                       nn.Linear(cfg.state_features, cfg.state_features), nn.SiLU())
        trunk, width = [], V * cfg.image_features + cfg.language_features + cfg.state_features
        for _ in range(cfg.trunk_layers):
            trunk += [nn.Linear(width, cfg.hidden), nn.LayerNorm(cfg.hidden), nn.SiLU()]
            width = cfg.hidden
        self.trunk = nn.Sequential(*trunk)
        self.action_head = nn.Linear(width, K * ACTION_DIM)
        self.log_std = nn.Parameter(torch.full((K, ACTION_DIM), float(cfg.init_log_std)))
        self.value_head = nn.Sequential(nn.Linear(width, cfg.hidden // 2), nn.SiLU(), nn.Linear(cfg.hidden // 2, 1))
        # Proprio normalization travels with the weights, so a checkpoint is self-contained.
        self.register_buffer("state_mean", torch.zeros(STATE_DIM))
        self.register_buffer("state_std", torch.ones(STATE_DIM))
        self._instructions: dict[str, torch.Tensor] = {}  # embeddings this policy has used (saved with it)

    # ------------------------------------------------------------------ setup
    def set_state_stats(self, mean: Any, std: Any) -> None:
        """Proprio statistics (e.g. EpisodeDataset.stats["observation.state"]) -> float [8] each."""
        mean = torch.as_tensor(mean, dtype=torch.float32).reshape(-1)
        std = torch.as_tensor(std, dtype=torch.float32).reshape(-1)
        if mean.shape != (STATE_DIM,) or std.shape != (STATE_DIM,):
            raise ValueError(f"state stats: expected mean and std of {STATE_DIM} values, got {mean.shape}, {std.shape}")
        self.state_mean.copy_(mean)
        self.state_std.copy_(std.clamp_min(1e-3))  # a constant dimension must not blow up

    def instruction_embeddings(self, texts: list[str]) -> torch.Tensor:
        """float32 [B, 384] frozen embeddings; MiniLM is loaded only for instructions not seen before."""
        missing = [t for t in dict.fromkeys(texts) if t not in self._instructions]
        if missing:
            encoder = shared_encoder(LanguageConfig(cache_path=self.config.language_cache))
            self._instructions.update(encoder.table(missing))
        return torch.stack([self._instructions[t] for t in texts]).to(self.device)

    def get_extra_state(self) -> dict:
        texts = sorted(self._instructions)
        emb = torch.stack([self._instructions[t] for t in texts]) if texts else torch.zeros(0, EMBED_DIM)
        return {"instructions": texts, "embeddings": emb}

    def set_extra_state(self, state: dict) -> None:
        self._instructions = {t: e.float().cpu() for t, e in zip(state["instructions"], state["embeddings"])}

    # ------------------------------------------------------------------ network
    def forward(self, obs: Mapping[str, Any]) -> PolicyOutput:
        """Batched obs -> PolicyOutput(mean [B, K, 7], log_std [K, 7], value [B]), with gradients."""
        cfg: VLAConfig = self.config
        x = batch_obs(obs, self.device)
        image, state = x["image"], x["state"]
        B, V, H, W, _ = image.shape
        if V != len(cfg.views):
            raise ObservationError(f"obs['image']: policy expects {len(cfg.views)} views {cfg.views}, got {V}")
        if state.shape[1] != STATE_DIM:
            raise ObservationError(f"obs['state']: expected [B, {STATE_DIM}] (eef pos, axis-angle, gripper qpos), "
                                   f"got {tuple(state.shape)}")
        img = image.reshape(B * V, H, W, 3).permute(0, 3, 1, 2).float() / 255.0
        if (H, W) != (cfg.image_size, cfg.image_size):
            img = F.interpolate(img, size=(cfg.image_size, cfg.image_size), mode="area")
        feats = self.image_encoder(img).reshape(B, V, -1) + self.view_embedding
        lang = self.language_proj(self.instruction_embeddings(x["instruction"]))
        norm = (state - self.state_mean) / self.state_std
        proprio = torch.cat([norm[:, 0:3], axis_angle_to_matrix(state[:, 3:6]), norm[:, 6:8]], dim=-1)
        h = self.trunk(torch.cat([feats.reshape(B, -1), lang, self.state_mlp(proprio)], dim=-1))
        mean = torch.tanh(self.action_head(h)).reshape(B, cfg.chunk_len, ACTION_DIM)
        log_std = self.log_std.clamp(cfg.log_std_min, cfg.log_std_max)
        return PolicyOutput(mean, log_std, self.value_head(h).squeeze(-1))

    # ------------------------------------------------------------------ contract
    @torch.no_grad()
    def predict_action_chunk(self, obs: Mapping[str, Any]) -> torch.Tensor:
        return self(obs).mean

    def evaluate(self, obs, actions, per_dim=False):
        out = self(obs)
        a = check_actions(actions, out.mean.shape[0], self.chunk_len, self.device)
        lp = clipped_gaussian_log_prob(out.mean, out.log_std, a, reduce=not per_dim)
        return lp, gaussian_entropy(out.log_std, out.mean.shape[0], self.config.chunk_len), out.value

    @torch.no_grad()
    def sample(self, obs, generator=None):
        out = self(obs)
        noise = torch.randn(out.mean.shape, generator=generator, device=out.mean.device)
        actions = (out.mean + out.log_std.exp() * noise).clamp(-1.0, 1.0)
        return actions, clipped_gaussian_log_prob(out.mean, out.log_std, actions), out.value


__all__ = ["STATE_DIM", "PolicyOutput", "VLAConfig", "VLAPolicy", "axis_angle_to_matrix"]
