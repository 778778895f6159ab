"""A base for policies with a chunked Gaussian action head: write the network, inherit the RL contract.

A subclass implements one method, `mean_and_value(obs) -> (mean [B, K, 7] in [-1, 1], value [B])`, with
gradients; the base adds the exploration noise (`log_std`, a parameter [K, 7] that imagined RL sets at the
start of a run, `Policy.noise_log_std`) and derives the rest of the contract of `policies.base.Policy`:

    predict_action_chunk(obs)       the mean chunk
    sample(obs, generator)          a = clip(mean + exp(log_std) * noise, -1, 1), its log_prob, the value
    evaluate(obs, actions, per_dim) (log_prob, entropy, value) of `actions`, with gradients

log_prob is that of the clipped Gaussian, as the built-in VLA (policies/vla.py) computes it: the Gaussian
log-density inside (-1, 1), the log of the tail mass (log Phi) on a bound, summed over the K x 7 dimensions
(per dimension with per_dim=True); entropy that of the unclipped Gaussian. A diffusion or flow-matching policy
fits here too: its `mean_and_value` returns its deterministic sample (the denoising chain from fixed noise, or
the ODE from zero noise, kept differentiable), and the Gaussian around it is the distribution RL samples and
scores; the log_prob is that Gaussian's, not the generative model's (docs/policies.md, "The log-probability
contract").
"""
from __future__ import annotations

import abc
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from policies.base import ACTION_DIM, Policy, PolicyConfig, check_actions


@dataclass
class GaussianChunkConfig(PolicyConfig):
    """Fields of a Gaussian chunk head (subclass it to add the network's own)."""

    init_log_std: float = -1.0  # log std of the exploration noise of a fresh policy (imagined RL sets its own)
    log_std_min: float = -5.0  # log_std is clamped to [log_std_min, log_std_max] when used
    log_std_max: float = 0.5


def clipped_gaussian_log_prob(mean: torch.Tensor, log_std: torch.Tensor, actions: torch.Tensor,
                              reduce: bool = True) -> torch.Tensor:
    """log p(actions) [B] (per dimension [B, K, 7] when not reduce) of actions [B, K, 7] under N(mean, exp(log_std))
    clipped to [-1, 1]: the density inside, the tail mass (log Phi) on a bound. log_std broadcasts to mean."""
    std = log_std.exp().expand_as(mean)
    inner = torch.distributions.Normal(mean, std).log_prob(actions)
    upper = torch.special.log_ndtr((mean - 1.0) / std)  # log P(x >= 1)
    lower = torch.special.log_ndtr((-1.0 - mean) / std)  # log P(x <= -1)
    lp = torch.where(actions >= 1.0, upper, torch.where(actions <= -1.0, lower, inner))
    return lp.sum(dim=(1, 2)) if reduce else lp


def gaussian_entropy(log_std: torch.Tensor, batch: int, chunk_len: int) -> torch.Tensor:
    """Entropy [B] of the unclipped Gaussian over K x 7 dimensions: the sum of 0.5 log(2 pi e) + log std."""
    per_dim = (0.5 * math.log(2 * math.pi * math.e) + log_std).expand(chunk_len, ACTION_DIM)
    return per_dim.sum().expand(batch)


class GaussianChunkPolicy(Policy):
    """Abstract policy with a Gaussian chunk head: implement `mean_and_value`; set `config_class` to a subclass
    of GaussianChunkConfig."""

    config_class = GaussianChunkConfig
    config: GaussianChunkConfig
    log_std: nn.Parameter  # [K, 7]: log std of the exploration noise (clamped when used); RL sets it at its start

    def __init__(self, config: GaussianChunkConfig):
        super().__init__(config)
        if not config.log_std_min <= config.log_std_max:
            raise ValueError(f"log_std_min <= log_std_max expected, got {config.log_std_min}, {config.log_std_max}")
        self.log_std = nn.Parameter(torch.full((config.chunk_len, ACTION_DIM), float(config.init_log_std)))

    @abc.abstractmethod
    def mean_and_value(self, obs: Mapping[str, Any]) -> tuple[torch.Tensor, torch.Tensor]:
        """(mean chunk [B, K, 7] in [-1, 1], value [B]) for a batched observation, with gradients; a deterministic
        function of obs and the weights. Without a critic, return zeros for the value (GRPO does not use it)."""

    def clamped_log_std(self) -> torch.Tensor:
        """log_std [K, 7] clamped to [log_std_min, log_std_max]: the noise `sample` and `evaluate` use."""
        return self.log_std.clamp(self.config.log_std_min, self.config.log_std_max)

    def _mean_and_value(self, obs: Mapping[str, Any]) -> tuple[torch.Tensor, torch.Tensor]:
        mean, value = self.mean_and_value(obs)
        if mean.ndim != 3 or mean.shape[1:] != (self.chunk_len, ACTION_DIM) or value.shape != mean.shape[:1]:
            raise ValueError(f"{type(self).__name__}.mean_and_value: expected mean [B, {self.chunk_len}, {ACTION_DIM}] "
                             f"and value [B], got {tuple(mean.shape)} and {tuple(value.shape)}")
        return mean, value

    @torch.no_grad()
    def predict_action_chunk(self, obs: Mapping[str, Any]) -> torch.Tensor:
        return self._mean_and_value(obs)[0]

    def evaluate(self, obs: Mapping[str, Any], actions: Any, per_dim: bool = False
                 ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        mean, value = self._mean_and_value(obs)
        a = check_actions(actions, mean.shape[0], self.chunk_len, mean.device)
        log_std = self.clamped_log_std()
        return (clipped_gaussian_log_prob(mean, log_std, a, reduce=not per_dim),
                gaussian_entropy(log_std, mean.shape[0], self.chunk_len), value)

    @torch.no_grad()
    def sample(self, obs: Mapping[str, Any], generator: torch.Generator | None = None
               ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        mean, value = self._mean_and_value(obs)
        log_std = self.clamped_log_std()
        noise = torch.randn(mean.shape, generator=generator, device=mean.device)
        actions = (mean + log_std.exp() * noise).clamp(-1.0, 1.0)
        return actions, clipped_gaussian_log_prob(mean, log_std, actions), value


__all__ = ["GaussianChunkConfig", "GaussianChunkPolicy", "clipped_gaussian_log_prob", "gaussian_entropy"]
