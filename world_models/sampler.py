"""Sampling the next K frames from a `Denoiser` with diffusers schedulers, kept apart from the denoiser.

Two schedulers, chosen by `SamplerConfig.scheduler`:

* "edm_euler": `diffusers.EDMEulerScheduler`, Karras sigmas from sigma_max to 0 (DIAMOND's sampler).
  The denoiser's clean estimate is handed to `step` as `pred_original_sample`, so the scheduler does
  no preconditioning of its own.
* "flow_match_euler": `diffusers.FlowMatchEulerDiscreteScheduler` over the rectified-flow path
  x_s = (1 - s) x0 + s n, s in [0, 1]. No velocity-trained model is needed: that path is the EDM
  path rescaled, x_s = (1 - s) * (x0 + sigma n) with sigma = s / (1 - s), so the same EDM denoiser
  gives x0 = D(x_s / (1 - s), sigma) and the velocity v = (x_s - x0) / s that `step` expects.
  s starts at sigma_max / (1 + sigma_max) rather than 1 (sigma = inf), as EDM starts at sigma_max.

With one step both start from pure noise at sigma_max and return the denoiser's single estimate, so
they agree exactly; with more steps they differ only in where the intermediate noise levels lie.
All tensors: noisy/returned frames [B, K, ch, H, W], context [B, C, ch, H, W], anchor [B, ch, H, W],
actions [B, K, 7].
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from diffusers import EDMEulerScheduler, FlowMatchEulerDiscreteScheduler

from world_models import rng
from world_models.denoiser import Denoiser

SCHEDULERS = ("edm_euler", "flow_match_euler")


@dataclass
class SamplerConfig:
    scheduler: str = "edm_euler"  # one of SCHEDULERS
    steps: int = 2  # default denoising steps at rollout (1-3); evaluation may ask for more
    rho: float = 7.0  # Karras schedule curvature (edm_euler)
    flow_shift: float = 1.0  # FlowMatchEulerDiscreteScheduler `shift` (> 1: more steps at high noise)
    # Action guidance w (classifier-free guidance on the actions alone; the context and anchor stay given):
    # x0 = x0(no action) + w (x0(actions) - x0(no action)). 1 = plain conditional sampling (one net call per step);
    # w > 1 amplifies what the actions change in the frames, at two net calls per step, and needs a denoiser
    # trained with action_dropout. Why: a model that predicts an outcome mostly from what the context shows
    # lets the acting policy change it too little (docs/results.md, "Action guidance")
    action_guidance: float = 1.0


class Sampler:
    """Draws K frames jointly: `sample(denoiser, context, anchor, actions, steps, generator)`."""

    def __init__(self, cfg: SamplerConfig):
        if cfg.scheduler not in SCHEDULERS:
            raise ValueError(f"sampler.scheduler: expected one of {SCHEDULERS}, got {cfg.scheduler!r}")
        if cfg.steps < 1:
            raise ValueError(f"sampler.steps: expected >= 1, got {cfg.steps}")
        check_guidance(cfg.action_guidance)
        self.cfg = cfg

    def make_scheduler(self, denoiser: Denoiser):
        d = denoiser.cfg
        if self.cfg.scheduler == "edm_euler":
            return EDMEulerScheduler(sigma_min=d.sigma_min, sigma_max=d.sigma_max, sigma_data=d.sigma_data,
                                     sigma_schedule="karras", rho=self.cfg.rho, final_sigmas_type="zero")
        return FlowMatchEulerDiscreteScheduler(num_train_timesteps=1000, shift=self.cfg.flow_shift)

    @torch.no_grad()
    def sample(self, denoiser: Denoiser, context: torch.Tensor, anchor: torch.Tensor, actions: torch.Tensor,
               steps: int | None = None, generator: torch.Generator | None = None,
               noise: torch.Tensor | None = None, guidance: float | None = None) -> torch.Tensor:
        """noise: the starting noise [B, K, ch, H, W] to use instead of drawing it from `generator` (envs that
        share their world model's noise draw it themselves: imagination/env.py noise_group). guidance: the
        action guidance w for this call (None: cfg.action_guidance)."""
        steps = self.cfg.steps if steps is None else int(steps)
        if steps < 1:
            raise ValueError(f"steps: expected >= 1, got {steps}")
        w = check_guidance(self.cfg.action_guidance if guidance is None else float(guidance))
        check_guidance(w, denoiser, "action_guidance")

        d = denoiser.cfg
        B, _, ch, H, W = context.shape

        def clean(x: torch.Tensor, sigma: torch.Tensor) -> torch.Tensor:
            if w == 1.0:
                return denoiser(x, sigma, context, anchor, actions)
            # one batched call: the first half sees the actions, the second the null action
            hidden = torch.arange(2 * B, device=x.device) >= B
            both = denoiser(torch.cat([x, x]), torch.cat([sigma, sigma]), torch.cat([context, context]),
                            torch.cat([anchor, anchor]), torch.cat([actions, actions]), hidden)
            given, free = both[:B], both[B:]
            return free + w * (given - free)

        shape = (B, actions.shape[1], ch, H, W)
        # drawn on the generator's device (world_models.rng): a CPU generator gives the same frames on
        # any device for one seed; a CUDA one (a GPU imagination env) saves the host-to-device copy
        if noise is None:
            noise = rng.randn(shape, generator).to(context)
        elif tuple(noise.shape) != shape:
            raise ValueError(f"noise: expected shape {shape}, got {tuple(noise.shape)}")
        else:
            noise = noise.to(context)
        scheduler = self.make_scheduler(denoiser)
        if self.cfg.scheduler == "edm_euler":
            scheduler.set_timesteps(steps)
            sigmas = scheduler.sigmas
            x = noise * sigmas[0]
            # the denoiser applies c_in itself; tell the scheduler so it does not warn about scale_model_input
            scheduler.is_scale_input_called = True
            for i, t in enumerate(scheduler.timesteps):
                sigma = torch.full((B,), float(sigmas[i]), device=x.device)
                x0 = clean(x, sigma)
                x = scheduler.step(x0, t, x, pred_original_sample=x0).prev_sample
            return _bound(denoiser, x + denoiser.reference(context, anchor))
        s_max = d.sigma_max / (1.0 + d.sigma_max)
        s_min = d.sigma_min / (1.0 + d.sigma_min)
        s_grid = torch.linspace(s_max, s_min, steps).tolist() if steps > 1 else [s_max]
        scheduler.set_timesteps(sigmas=s_grid)
        x = noise * float(scheduler.sigmas[0])
        for i, t in enumerate(scheduler.timesteps):
            s = float(scheduler.sigmas[i])
            sigma = torch.full((B,), s / (1.0 - s), device=x.device)
            x0 = clean(x / (1.0 - s), sigma)
            v = (x - x0) / s
            x = scheduler.step(v, t, x).prev_sample
        return _bound(denoiser, x + denoiser.reference(context, anchor))


def check_guidance(w: float, denoiser: Denoiser | None = None, field: str = "sampler.action_guidance") -> float:
    """w itself, or one clear error naming `field`: action guidance is a finite number >= 0 (1 = none), and other
    than 1 only for a denoiser that learned a null action (when one is given)."""
    if not (math.isfinite(w) and w >= 0):
        raise ValueError(f"{field}: expected a finite number >= 0 (1 = no guidance), got {w}")
    if denoiser is not None and w != 1.0 and not denoiser.guidable:
        raise ValueError(f"{field}: {w} needs a world model trained with denoiser.action_dropout > 0 "
                         "(scripts/train_world_model.py model.denoiser.action_dropout=0.1); this one has no null "
                         "action (use 1)")
    return float(w)


def _bound(denoiser: Denoiser, x: torch.Tensor) -> torch.Tensor:
    """Frames clamped to [-1, 1] in pixel space; latents (an unbounded space) as they are."""
    return x.clamp(-1, 1) if denoiser.bounded else x
