"""GRPO and PPO for chunked Gaussian policies, as plain functions plus one update step.

One decision = one action chunk [K, 7]; its log-probability is the sum over the K*7 dimensions
(`Policy.evaluate`). Both algorithms share the clipped surrogate and differ in the advantage:

    GRPO  episodes come in groups that start from the same keyframe; an episode's advantage is its
          outcome (return) normalized within the group, (R - mean_g) / (std_g + eps), given to every
          chunk of the episode. No value function; an optional KL penalty to a frozen reference
          (the BC policy) keeps the policy near the behaviour the world model has seen.
    PPO   per-chunk advantages from GAE over the value head; value loss on the returns.

Ratios: with `ratio="per_dim"` (default) each of the K*7 action dimensions has its own ratio,
clipped on its own, and the loss averages over dimensions, as GRPO does per token. Why: a chunk's
joint ratio multiplies 56 per-dimension ratios, so a tiny change of the mean moves it by e^+-5 and
nearly every sample is clipped (measured: clip fraction ~0.8, approx KL up to 700 per update).
`ratio="joint"` keeps the textbook one-ratio-per-chunk form.

The KL penalty uses the k3 estimator exp(q) - q - 1 with q = log pi_ref(a) - log pi(a): unbiased for
KL(pi || pi_ref) on samples of pi, and never negative (GRPO, DeepSeekMath). Its exp grows without
bound when the mean moves by several stds, which happens at once when a dimension's exploration std
is tiny (`exploration=data`: 0.012 on roll, where one Adam step moves the mean by ~0.03). `kl_estimator
= "k2"` uses q^2 / 2 instead: quadratic, never overflows, and its gradient on samples of pi is the
gradient of the same KL (Schulman, "Approximating KL divergence"). A step whose gradient is not finite
is skipped and counted (`skipped_fraction`), so one bad minibatch cannot turn the weights into NaN.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

if TYPE_CHECKING:
    from infra.data_parallel import GradientSync
    from policies.base import Policy

ALGOS = ("grpo", "ppo")


@dataclass
class RLConfig:
    """Update hyper-parameters shared by GRPO and PPO (cleanrl's defaults where they apply)."""

    algo: str = "grpo"  # grpo | ppo
    ratio: str = "per_dim"  # per_dim: one clipped ratio per action dimension; joint: one per chunk
    clip: float = 0.2  # ratio clipping of the surrogate
    kl_coef: float = 0.05  # weight of the KL to the reference policy (0 = off)
    kl_estimator: str = "k3"  # k3: exp(q) - q - 1 (GRPO's); k2: q^2 / 2, for tiny exploration stds
    entropy_coef: float = 0.0
    value_coef: float = 0.5  # PPO only
    gamma: float = 0.99  # PPO only: discount per chunk
    gae_lambda: float = 0.95  # PPO only
    group_eps: float = 1e-6  # GRPO: added to the group std
    # GRPO: the group std is divided by no less than this. Why: with a graded reward (the grasp reward's
    # P(success)) a group whose episodes all score 0.97-0.99 has a std of 0.01, and dividing by it turns
    # differences the reward cannot vouch for into advantages of +-1, as large as a group of real successes
    # and failures. A floor of 0.1 keeps such groups' push ten times smaller. 0 = the plain GRPO normalization.
    group_std_floor: float = 0.0
    normalize_advantages: bool = True  # PPO: per-batch advantage normalization
    epochs: int = 2  # passes over a batch of rollouts
    minibatch_size: int = 64
    lr: float = 1e-4
    # Minibatch updates over which the learning rate rises linearly from lr / warmup_updates to lr (0 = off).
    # Why: Adam's first step moves every weight by about lr whatever its gradient (its moment estimates start
    # from that one gradient), so a fresh optimiser at lr 1e-3 jumps the whole policy at once, the grasp that
    # no imagined episode trains included; the warmup lets the moments settle before the steps grow.
    warmup_updates: int = 0
    max_grad_norm: float = 1.0

    def validate(self) -> None:
        if self.algo not in ALGOS:
            raise ValueError(f"rl.algo: expected one of {list(ALGOS)}, got {self.algo!r}")
        if self.kl_estimator not in KL_ESTIMATORS:
            raise ValueError(f"rl.kl_estimator: expected one of {list(KL_ESTIMATORS)}, got {self.kl_estimator!r}")
        if self.ratio not in ("per_dim", "joint"):
            raise ValueError(f"rl.ratio: expected 'per_dim' or 'joint', got {self.ratio!r}")
        for name in ("clip", "lr", "max_grad_norm", "group_eps"):
            if not getattr(self, name) > 0:
                raise ValueError(f"rl.{name}: expected a number > 0, got {getattr(self, name)}")
        for name in ("kl_coef", "entropy_coef", "value_coef", "group_std_floor"):
            if getattr(self, name) < 0:
                raise ValueError(f"rl.{name}: expected a number >= 0, got {getattr(self, name)}")
        if not (0 <= self.gamma <= 1 and 0 <= self.gae_lambda <= 1):
            raise ValueError(f"rl.gamma and rl.gae_lambda: expected values in [0, 1], "
                             f"got {self.gamma}, {self.gae_lambda}")
        if self.warmup_updates < 0:
            raise ValueError(f"rl.warmup_updates: expected an integer >= 0, got {self.warmup_updates}")
        if self.epochs < 1 or self.minibatch_size < 1:
            raise ValueError(f"rl.epochs and rl.minibatch_size: expected integers >= 1, "
                             f"got {self.epochs}, {self.minibatch_size}")


def group_advantages(returns: torch.Tensor, groups: torch.Tensor, eps: float = 1e-6,
                     std_floor: float = 0.0) -> torch.Tensor:
    """GRPO outcome advantages [N] of episode returns [N] normalized within their group ids [N].

    A group whose episodes all got the same return carries no signal: its advantages are 0.
    The std is the population std (ddof 0), as in the GRPO paper's normalization, and no less than
    std_floor (RLConfig.group_std_floor says why).
    """
    returns = returns.to(torch.float32)
    adv = torch.zeros_like(returns)
    for g in torch.unique(groups):
        m = groups == g
        r = returns[m]
        adv[m] = (r - r.mean()) / (r.std(unbiased=False).clamp_min(std_floor) + eps)
    return adv


def gae(rewards: torch.Tensor, values: torch.Tensor, dones: torch.Tensor, last_values: torch.Tensor,
        gamma: float, lam: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Generalized advantage estimation over time-major arrays (cleanrl's loop).

    rewards, values, dones: [T, B]; dones[t] = 1 when the episode ended with step t (nothing after it
    is bootstrapped); last_values [B]: value of the observation after step T-1.
    Returns (advantages [T, B], returns = advantages + values [T, B]).
    """
    T = rewards.shape[0]
    adv = torch.zeros_like(rewards, dtype=torch.float32)
    last = torch.zeros_like(last_values, dtype=torch.float32)
    for t in reversed(range(T)):
        next_value = last_values if t == T - 1 else values[t + 1]
        nonterminal = 1.0 - dones[t].float()
        delta = rewards[t] + gamma * next_value * nonterminal - values[t]
        last = delta + gamma * lam * nonterminal * last
        adv[t] = last
    return adv, adv + values


def clipped_surrogate(log_prob: torch.Tensor, old_log_prob: torch.Tensor, advantages: torch.Tensor,
                      clip: float) -> tuple[torch.Tensor, dict[str, float]]:
    """PPO's clipped objective as a loss to minimize: mean(max(-A r, -A clip(r, 1-c, 1+c))), r = pi/pi_old.

    Returns (loss, stats) with stats clip_fraction and approx_kl ((r - 1) - log r, cleanrl).
    """
    log_ratio = log_prob - old_log_prob
    ratio = log_ratio.exp()
    loss = torch.max(-advantages * ratio, -advantages * ratio.clamp(1 - clip, 1 + clip)).mean()
    with torch.no_grad():
        stats = {"clip_fraction": float(((ratio - 1).abs() > clip).float().mean()),
                 "approx_kl": float(((ratio - 1) - log_ratio).mean())}
    return loss, stats


def kl_k3(log_prob: torch.Tensor, ref_log_prob: torch.Tensor) -> torch.Tensor:
    """Per-sample KL(pi || pi_ref) estimate [N] from log-probs of actions sampled from pi (k3, >= 0)."""
    # q is capped so exp stays finite in float32 (e^88 overflows); past the cap the sample adds no gradient
    q = (ref_log_prob - log_prob).clamp(max=20.0)
    return q.exp() - q - 1


def kl_k2(log_prob: torch.Tensor, ref_log_prob: torch.Tensor) -> torch.Tensor:
    """Per-sample KL(pi || pi_ref) estimate [N] (k2, q^2 / 2, >= 0): biased for the value, but its
    gradient on samples of pi is KL's, and it grows quadratically where k3 grows exponentially."""
    return 0.5 * (ref_log_prob - log_prob).pow(2)


KL_ESTIMATORS = {"k3": kl_k3, "k2": kl_k2}  # RLConfig.kl_estimator -> per-sample estimate


@dataclass
class Batch:
    """Flat training samples (one per imagined chunk) for an update.

    obs: image uint8 [N, V, H, W, 3], state float32 [N, S], instruction N strings;
    actions [N, K, 7]; advantages, returns [N]; log_prob and ref_log_prob (GRPO KL, or None) [N],
    or [N, K, 7] per action dimension (RLConfig.ratio "per_dim").
    """

    obs: Mapping[str, Any]
    actions: torch.Tensor
    log_prob: torch.Tensor
    advantages: torch.Tensor
    returns: torch.Tensor
    ref_log_prob: torch.Tensor | None = None

    def __len__(self) -> int:
        return int(self.actions.shape[0])

    def subset(self, idx: np.ndarray, device: torch.device | str | None = None) -> Batch:
        """The samples at `idx`; tensors moved to `device` (the policy's) when given, obs stay numpy."""
        obs = {"image": self.obs["image"][idx], "state": self.obs["state"][idx],
               "instruction": [self.obs["instruction"][i] for i in idx]}
        pick = torch.as_tensor(idx)

        def take(x: torch.Tensor) -> torch.Tensor:
            return x[pick] if device is None else x[pick].to(device)

        return Batch(obs, take(self.actions), take(self.log_prob), take(self.advantages), take(self.returns),
                     None if self.ref_log_prob is None else take(self.ref_log_prob))


def freeze(policy: Policy, prefixes: Sequence[str]) -> None:
    """Leave the policy's parameters whose names start with any of `prefixes` (e.g. "image_encoder") as they are:
    requires_grad off, so neither RL nor an anchor moves them. ValueError naming the policy's top-level modules when
    a prefix matches no parameter (a typo would otherwise train all)."""
    params = dict(policy.named_parameters())
    for prefix in prefixes:
        named = [p for n, p in params.items() if n == prefix or n.startswith(prefix + ".")]
        if not named:
            tops = sorted({n.split(".")[0] for n in params})
            raise ValueError(f"frozen: {prefix!r} names no parameter of {type(policy).__name__}; expected a "
                             f"parameter name or a module prefix of it, e.g. one of {tops}")
        for param in named:
            param.requires_grad_(False)


def make_optimizer(policy: Policy, cfg: RLConfig) -> tuple[torch.optim.Adam, torch.optim.lr_scheduler.LambdaLR]:
    """The RL optimiser (Adam at cfg.lr over the parameters that require a gradient: `freeze` leaves the rest out)
    and its schedule: a linear warmup over cfg.warmup_updates minibatch updates, then constant. Step the schedule
    once per optimiser step; save both to resume."""
    optimizer = torch.optim.Adam([p for p in policy.parameters() if p.requires_grad], lr=cfg.lr)
    warmup = cfg.warmup_updates
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: min(1.0, (step + 1) / warmup) if warmup else 1.0)
    return optimizer, schedule


def optimizer_step(policy: Policy, optimizer: torch.optim.Optimizer, loss: torch.Tensor, max_grad_norm: float,
                   schedule: torch.optim.lr_scheduler.LRScheduler | None = None,
                   sync: GradientSync | None = None) -> float | None:
    """One step on `loss`: gradients (averaged over the processes by `sync`), clipped to max_grad_norm, then the
    optimiser's step and the schedule's. Returns the gradient norm before clipping, or None when it is not finite
    and the step was skipped (one bad minibatch cannot turn the weights into NaN)."""
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    if sync is not None:  # the same gradients everywhere, hence the same finite check and step
        sync.average(policy.parameters())
    grad_norm = float(torch.nn.utils.clip_grad_norm_(policy.parameters(), max_grad_norm))
    if not math.isfinite(grad_norm):
        return None
    optimizer.step()
    if schedule is not None:
        schedule.step()
    return grad_norm


def update(policy: Policy, optimizer: torch.optim.Optimizer, batch: Batch, cfg: RLConfig,
           rng: np.random.Generator, anchor: Callable[[], torch.Tensor] | None = None,
           sync: GradientSync | None = None,
           schedule: torch.optim.lr_scheduler.LRScheduler | None = None) -> dict[str, float]:
    """`cfg.epochs` passes of minibatch updates on `batch`; returns the mean of each logged figure and the count
    of minibatch updates ("updates").
    `anchor()`, when given, is a loss added to every minibatch's (e.g. behaviour cloning on demonstrations).
    `sync`: this process's batch is its share of a data-parallel run's (infra.data_parallel); each epoch
    takes as many minibatches as the largest share needs at cfg.minibatch_size, and gradients are averaged
    over the processes before clipping, so every replica takes the same step.
    `schedule` (make_optimizer's) steps after every optimiser step.

    PPO's advantages are normalized per batch here (when configured); GRPO's are already group-normalized.
    """
    adv = batch.advantages
    if cfg.algo == "ppo" and cfg.normalize_advantages and len(batch) > 1:
        adv = (adv - adv.mean()) / (adv.std() + 1e-8)
    batch = Batch(batch.obs, batch.actions, batch.log_prob, adv, batch.returns, batch.ref_log_prob)
    logs: dict[str, list[float]] = {}
    updates = 0  # minibatch steps taken: an anchor control (imagination/loop/arms.py) applies its anchor as many times
    policy.train()
    device = next(policy.parameters()).device  # rollouts are kept on the CPU; a GPU policy learns on the GPU
    for _ in range(cfg.epochs):
        order = rng.permutation(len(batch))
        parts = [order[s:s + cfg.minibatch_size] for s in range(0, len(batch), cfg.minibatch_size)] \
            if sync is None else sync.split(order, cfg.minibatch_size)
        for part in parts:
            mb = batch.subset(part, device)
            per_dim = mb.log_prob.ndim == 3
            log_prob, entropy, value = policy.evaluate(mb.obs, mb.actions, per_dim=per_dim)
            mb_adv = mb.advantages[:, None, None] if per_dim else mb.advantages
            pg_loss, stats = clipped_surrogate(log_prob, mb.log_prob, mb_adv, cfg.clip)
            loss = pg_loss - cfg.entropy_coef * entropy.mean()
            if cfg.algo == "ppo":
                v_loss = 0.5 * (value - mb.returns).pow(2).mean()
                loss = loss + cfg.value_coef * v_loss
                stats["value_loss"] = float(v_loss)
            if cfg.kl_coef > 0 and mb.ref_log_prob is not None:
                kl = KL_ESTIMATORS[cfg.kl_estimator](log_prob, mb.ref_log_prob).mean()
                loss = loss + cfg.kl_coef * kl
                stats["kl_ref"] = float(kl.detach())
            if anchor is not None:
                anchor_loss = anchor()
                loss = loss + anchor_loss
                stats["anchor_loss"] = float(anchor_loss.detach())
            grad_norm = optimizer_step(policy, optimizer, loss, cfg.max_grad_norm, schedule, sync)
            if grad_norm is not None:
                stats["grad_norm"] = grad_norm
            stats["skipped_fraction"] = float(grad_norm is None)
            stats.update(policy_loss=float(pg_loss.detach()), entropy=float(entropy.detach().mean()))
            for k, v in stats.items():
                logs.setdefault(k, []).append(v)
            updates += 1
    policy.eval()
    return {**{k: float(np.mean(v)) for k, v in logs.items()}, "updates": float(updates)}


__all__ = ["ALGOS", "KL_ESTIMATORS", "Batch", "RLConfig", "clipped_surrogate", "gae", "group_advantages", "kl_k2",
           "kl_k3", "make_optimizer", "optimizer_step", "update"]
