"""Training objective: EDM denoising loss + success/done BCE, and dynamic latent bootstrapping (Sword).

Denoising (EDM): for target frames x0 [B, K, ch, H, W] and sigma ~ logN(p_mean, p_std) per clip,
    L = lambda(sigma) * || D(x0 + sigma n; sigma, context, anchor, actions) - x0 ||^2,
    lambda(sigma) = (sigma^2 + sigma_data^2) / (sigma sigma_data)^2,
which is the unit-weighted MSE of the UNet's raw output against its preconditioned target.

Heads: BCE of the success/done logits [B, K] against the simulator labels, on degraded real target
frames and on the denoiser's own clean estimates (detached), so the head transfers to imagined frames.

In latent mode every frame tensor here is a latent [.., C_lat V, h, w] (the trainer encodes clips
before these functions see them) and nothing is clamped to [-1, 1].

Bootstrapping: with probability p(step) per clip, the ground-truth context is replaced by what the
model itself predicts for it: the previous chunk is sampled (no grad, few steps) from the clip's
history and previous actions, and its last C frames become the context. Training then sees the
slightly-wrong contexts it will see in an autoregressive rollout, which curbs drift.
All random draws come from the caller's generator, so a resumed run repeats them exactly.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from world_models import rng
from world_models.heads import degrade
from world_models.model import WorldModel


@dataclass
class BootstrapConfig:
    enabled: bool = True  # ablation switch
    prob_start: float = 0.0  # probability of replacing a clip's context at step 0
    prob_end: float = 0.5  # ... after ramp_steps
    ramp_start: int = 200  # let the model learn from real contexts first: its predictions are noise early on
    ramp_steps: int = 1000
    sample_steps: int = 1  # sampler steps for the bootstrapped chunk (rollouts use 1-3 as well)

    def probability(self, step: int) -> float:
        if not self.enabled:
            return 0.0
        frac = min(max((step - self.ramp_start) / max(self.ramp_steps, 1), 0.0), 1.0)
        return self.prob_start + frac * (self.prob_end - self.prob_start)


@torch.no_grad()
def bootstrap_context(model: WorldModel, batch: dict[str, torch.Tensor], prob: float, sample_steps: int,
                      generator: torch.Generator | None = None) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
    """Replace the context of a random subset of clips by the model's own prediction of it.

    Returns (new batch, mask [B] bool of the clips whose context was replaced). The rest of the batch
    is returned unchanged; the new context is detached (no gradient through the bootstrapped chunk).
    """
    B = batch["context"].shape[0]
    mask = (rng.rand(B, generator) < prob).cpu()
    if not mask.any():
        return batch, mask
    m = mask.to(batch["context"].device)
    C = batch["context"].shape[1]
    pred = model.sampler.sample(model.denoiser, batch["history"][m], batch["anchor"][m], batch["prev_actions"][m],
                                steps=sample_steps, generator=generator)
    context = batch["context"].clone()
    context[m] = torch.cat([batch["history"][m], pred], dim=1)[:, -C:].to(context)
    return dict(batch, context=context), mask


def noise_context(batch: dict[str, torch.Tensor], max_std: float, generator: torch.Generator | None = None,
                  bounded: bool = True) -> dict[str, torch.Tensor]:
    """Add Gaussian noise, std ~ U(0, max_std) per clip, to the context frames [B, C, ch, H, W].

    The anchor stays clean: it is a real frame in rollouts too. max_std 0 returns the batch untouched
    and draws nothing (the random stream of runs without it is unchanged). bounded=False (latents) skips
    the clamp to [-1, 1].
    """
    if max_std <= 0:
        return batch
    ctx = batch["context"]
    std = rng.rand(ctx.shape[0], generator) * max_std
    noise = rng.randn(ctx.shape, generator)
    noisy = ctx + std.to(ctx)[:, None, None, None, None] * noise.to(ctx)
    return dict(batch, context=noisy.clamp(-1, 1) if bounded else noisy)


class WorldModelObjective(nn.Module):
    """The training forward pass as one module, so `accelerator.prepare` (DDP) can wrap it.

    forward(batch, sigma [B], noise [B, K, ch, H, W], degraded_target) -> dict of scalar losses
    ("loss" is the total). The random inputs are drawn by the caller from its generator.
    """

    def __init__(self, model: WorldModel, head_weight: float = 0.1, head_on_predictions: bool = True,
                 moving_weight: float = 0.0, moving_threshold: float = 0.1):
        super().__init__()
        if not (math.isfinite(moving_weight) and moving_weight >= 0):
            raise ValueError(f"moving_weight: expected a finite number >= 0, got {moving_weight}")
        if not (math.isfinite(moving_threshold) and moving_threshold > 0):
            raise ValueError(f"moving_threshold: expected a finite number > 0, got {moving_threshold}")
        self.model = model
        self.head_weight = head_weight
        self.head_on_predictions = head_on_predictions
        self.moving_weight = moving_weight
        self.moving_threshold = moving_threshold

    def pixel_weights(self, target: torch.Tensor, anchor: torch.Tensor) -> torch.Tensor:
        """Denoising-loss weights [B, K, 1, H, W] of target frames [B, K, ch, H, W] next to anchor [B, ch, H, W]:
        1 + moving_weight where some channel differs from the anchor by more than moving_threshold, else 1,
        divided by each clip's mean so that the loss keeps its scale (and EDM's weighting its meaning)."""
        moving = ((target - anchor[:, None]).abs().amax(dim=2, keepdim=True) > self.moving_threshold).to(target)
        w = 1.0 + self.moving_weight * moving
        return w / w.flatten(1).mean(1)[:, None, None, None, None]

    def forward(self, batch: dict[str, torch.Tensor], sigma: torch.Tensor, noise: torch.Tensor,
                degraded_target: torch.Tensor) -> dict[str, torch.Tensor]:
        den, head = self.model.denoiser, self.model.head
        ref = den.reference(batch["context"], batch["anchor"])
        target = batch["target"] - ref  # the diffused variable (residual from the last context frame)
        s = sigma.to(target)
        x0 = den(target + s[:, None, None, None, None] * noise.to(target), s, batch["context"], batch["anchor"],
                 batch["actions"], batch.get("hidden"))
        err = (x0 - target).pow(2)
        mse = err.mean().detach()  # unweighted, comparable across runs
        if self.moving_weight > 0:
            err = err * self.pixel_weights(batch["target"], batch["anchor"])
        per_clip = err.flatten(1).mean(1)
        x0 = x0 + ref  # back to frames, for the heads
        denoise = (den.loss_weight(s) * per_clip).mean()
        hc = head.cfg
        pw_s = torch.tensor(hc.success_pos_weight, device=target.device)
        pw_d = torch.tensor(hc.done_pos_weight, device=target.device)
        est = x0.detach().clamp(-1, 1) if den.bounded else x0.detach()
        inputs = [degraded_target] + ([est] if self.head_on_predictions else [])
        succ_loss = done_loss = target.new_zeros(())
        for frames in inputs:
            s_logit, d_logit = head(frames, batch["anchor"])
            bce = F.binary_cross_entropy_with_logits
            succ_loss = succ_loss + bce(s_logit, batch["success"], pos_weight=pw_s) / len(inputs)
            done_loss = done_loss + bce(d_logit, batch["done"], pos_weight=pw_d) / len(inputs)
        total = denoise + self.head_weight * (succ_loss + done_loss)
        return {"loss": total, "denoise": denoise.detach(), "success_bce": succ_loss.detach(),
                "done_bce": done_loss.detach(), "mse": mse}


def hide_actions(model: WorldModel, batch: dict[str, torch.Tensor], generator: torch.Generator | None = None
                 ) -> dict[str, torch.Tensor]:
    """Action dropout: batch["hidden"] [B] bool marks each clip whose actions the denoiser is not shown, with
    probability denoiser.action_dropout (the null action instead: action guidance needs that prediction).
    At 0 the batch is returned untouched and nothing is drawn (the random stream of runs without it is unchanged)."""
    p = model.denoiser.cfg.action_dropout
    if p <= 0:
        return batch
    return dict(batch, hidden=(rng.rand(batch["actions"].shape[0], generator) < p).to(batch["actions"].device))


def draw_noise(model: WorldModel, batch: dict[str, torch.Tensor], generator: torch.Generator | None = None
               ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The random inputs of one training step: (sigma [B], noise like target, degraded target)."""
    target = batch["target"]
    sigma = model.denoiser.sample_sigma(target.shape[0], generator)
    noise = rng.randn(target.shape, generator)
    hc = model.head.cfg
    degraded = degrade(target, hc.blur_sigma_max, hc.noise_std_max, generator, bounded=model.denoiser.bounded)
    return sigma.to(target.device), noise.to(target.device), degraded
