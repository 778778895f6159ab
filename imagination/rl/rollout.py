"""Collect imagined episodes for GRPO/PPO: groups of episodes from shared keyframes, run to their ends.

One call fills every env of an `ImaginationVectorEnv` with `num_groups` keyframes x `group_size`
copies, steps the policy's sampled chunks until every episode has terminated (success head) or been
truncated (horizon, uncertainty), and returns the chunks as flat samples with per-episode outcomes.
The episodes run in `imagination.imagine.imagine`, which freezes envs that finish early, so no compute
goes to episodes that would be thrown away.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import cast

import numpy as np
import torch

from imagination.env import ImaginationVectorEnv
from imagination.imagine import ActionSource, imagine, policy_sample
from imagination.rl.algo import Batch, RLConfig, gae, group_advantages
from policies.base import Policy
from policies.bc_batch import pixel_noise, random_shift


@dataclass
class Rollouts:
    """Samples (one per executed chunk, N in all) and episodes (one per env, E = num_envs).

    image uint8 [N, V, H, W, 3], state float32 [N, S], instruction N strings, actions [N, K, 7],
    log_prob, value, reward [N], episode int [N] (env index), step int [N] (chunk index in the episode);
    episode_return float [E], success bool [E], length int [E] (chunks), group int [E],
    keyframe int [E, 2] (start episode, start frame), uncertainty float [E] (mean over the episode);
    chunk_uncertainty float [N] (each chunk's disagreement; zeros with imagination.uncertainty off).
    """

    image: np.ndarray
    state: np.ndarray
    instruction: list[str]
    actions: torch.Tensor
    log_prob: torch.Tensor
    value: torch.Tensor
    reward: torch.Tensor
    done: torch.Tensor
    episode: np.ndarray
    step: np.ndarray
    episode_return: np.ndarray
    success: np.ndarray
    length: np.ndarray
    group: np.ndarray
    keyframe: np.ndarray
    uncertainty: np.ndarray
    chunk_uncertainty: np.ndarray

    def stats(self, threshold: float | None = None) -> dict[str, float]:
        """Means over the batch; with the env's uncertainty threshold, also the chunks' disagreement at its 90th
        percentile and the fraction of chunks above the threshold. Why: the threshold is a pixel difference whose
        useful value depends on the world model, and these two say whether truncate/penalize fires at all."""
        out = {"success_rate": float(self.success.mean()), "return": float(self.episode_return.mean()),
               "episode_chunks": float(self.length.mean()), "samples": float(len(self.episode)),
               "uncertainty": float(self.uncertainty.mean())}
        if threshold is not None:
            out.update(uncertainty_spread(self.chunk_uncertainty, threshold))
        return out


def uncertainty_spread(chunks: np.ndarray, threshold: float) -> dict[str, float]:
    """The chunks' disagreement [N] at its 90th percentile, and the fraction of chunks above `threshold`."""
    if not len(chunks):
        return {}
    return {"uncertainty_p90": float(np.quantile(chunks, 0.9)),
            "uncertain_fraction": float((chunks > threshold).mean())}


class AugmentedObservations:
    """An action source that acts on the imagined images augmented as BC's training images are
    (`policies.bc_batch`): each image [B, V, H, W, 3] shifted by up to `shift` pixels (edges replicated), then given
    Gaussian pixel noise of a std from U(0, noise) (0-255 units); 0 turns either off. It records what it acted on as
    the extra "image" [B, V, H, W, 3], so that the update scores each chunk on the very images it was sampled from."""

    def __init__(self, source: ActionSource, shift: int, noise: float, generator: torch.Generator):
        self.source, self.shift, self.noise, self.generator = source, shift, noise, generator

    def reset(self, keyframes: list) -> None:
        reset = getattr(self.source, "reset", None)
        if callable(reset):
            reset(keyframes)

    def __call__(self, obs: dict) -> dict:
        image = torch.from_numpy(np.asarray(obs["image"]))
        if self.shift > 0:
            image = random_shift(image, self.shift, self.generator)
        if self.noise > 0:
            image = pixel_noise(image, self.noise, self.generator)
        out = self.source({**obs, "image": image.numpy()})
        if not isinstance(out, dict):
            raise TypeError("AugmentedObservations: the wrapped source must return a dict of actions and extras")
        return {**out, "image": image.numpy()}


def collect_rollouts(env: ImaginationVectorEnv, policy: Policy, num_groups: int, group_size: int, seed: int,
                     max_chunks: int = 1000, obs_noise: float = 0.0, obs_shift: int = 0) -> Rollouts:
    """Run num_groups * group_size (= env.num_envs) imagined episodes to their ends with policy.sample.

    `seed` fixes everything random here: the keyframes, the world model's noise and the policy's
    action noise, so a resumed training run re-collects exactly the batch it would have collected.
    obs_noise > 0 or obs_shift > 0: the policy acts on the images shifted by up to obs_shift pixels and given pixel
    noise up to std obs_noise (`AugmentedObservations`), and the rollouts hold those augmented images.
    """
    B = env.num_envs
    if num_groups * group_size != B:
        raise ValueError(f"num_groups x group_size = {num_groups} x {group_size} must equal the env's num_envs {B}")
    rng = np.random.default_rng(seed)
    starts = env.keyframes.sample(num_groups, rng)
    keyframes = [kf for kf in starts for _ in range(group_size)]
    gen = torch.Generator(device=policy.device).manual_seed(seed)
    act: ActionSource = policy_sample(policy, gen)
    augment = obs_noise > 0 or obs_shift > 0
    if augment:  # its own stream: the action noise stays what it is without augmentation
        noise_seed = int(np.random.SeedSequence([seed, 1]).generate_state(1)[0])
        act = AugmentedObservations(act, obs_shift, obs_noise, torch.Generator().manual_seed(noise_seed))
    # augmented, the source records the images the policy acted on: the clean ones are not kept
    run = imagine(env, act, keyframes, seed=seed, keep_obs=True, keep_images=not augment, max_chunks=max_chunks)
    images = run.extras.pop("image") if augment else run.image
    assert images is not None and run.state is not None and run.instruction is not None  # keep_obs=True
    return Rollouts(
        image=np.asarray(images),
        state=run.state, instruction=run.instruction, actions=torch.from_numpy(run.actions),
        log_prob=cast(torch.Tensor, run.extras["log_prob"]), value=cast(torch.Tensor, run.extras["value"]),
        reward=torch.from_numpy(run.reward).float(),
        done=torch.from_numpy(run.done), episode=run.env, step=run.step,
        episode_return=run.episode_return, success=run.success, length=run.length,
        group=np.repeat(np.arange(num_groups), group_size),
        keyframe=np.array([(kf.episode, kf.t) for kf in keyframes]), uncertainty=run.mean_uncertainty,
        chunk_uncertainty=np.asarray(run.uncertainty, np.float32),
    )


def advantages(r: Rollouts, cfg: RLConfig) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-sample (advantages [N], returns [N]) for cfg.algo.

    GRPO: each episode's group-normalized return, broadcast to its chunks (returns = the raw return).
    PPO: GAE per episode (time-major over chunks; the episode's last chunk is terminal).
    """
    if cfg.algo == "grpo":
        ep_adv = group_advantages(torch.as_tensor(r.episode_return), torch.as_tensor(r.group), cfg.group_eps,
                                  cfg.group_std_floor)
        return ep_adv[r.episode], torch.as_tensor(r.episode_return)[r.episode]
    T, E = int(r.length.max()), len(r.length)
    rewards, values, dones = torch.zeros(T, E), torch.zeros(T, E), torch.ones(T, E)
    rewards[r.step, r.episode] = r.reward
    values[r.step, r.episode] = r.value
    dones[r.step, r.episode] = r.done.float()
    adv, ret = gae(rewards, values, dones, torch.zeros(E), cfg.gamma, cfg.gae_lambda)
    return adv[r.step, r.episode], ret[r.step, r.episode]


@torch.no_grad()
def _log_probs(policy: Policy, r: Rollouts, per_dim: bool, chunk: int = 256) -> torch.Tensor:
    parts = []
    for s in range(0, len(r.episode), chunk):
        sl = slice(s, s + chunk)
        obs = {"image": r.image[sl], "state": r.state[sl], "instruction": r.instruction[sl]}
        parts.append(policy.evaluate(obs, r.actions[sl], per_dim=per_dim)[0].cpu())
    return torch.cat(parts)


@torch.no_grad()
def to_batch(r: Rollouts, cfg: RLConfig, policy: Policy | None = None, reference: Policy | None = None) -> Batch:
    """Flat `Batch` for `imagination.rl.update`; log-probs under `reference` when given (KL penalty).

    With cfg.ratio "per_dim" the old log-probs are re-evaluated per action dimension under `policy`
    (the one that sampled the rollouts, not yet updated: the same numbers, unsummed).
    """
    adv, ret = advantages(r, cfg)
    obs = {"image": r.image, "state": r.state, "instruction": r.instruction}
    per_dim = cfg.ratio == "per_dim"
    old = r.log_prob
    if per_dim:
        if policy is None:
            raise ValueError("to_batch: ratio 'per_dim' needs the policy that sampled the rollouts")
        old = _log_probs(policy, r, True)
    ref = _log_probs(reference, r, per_dim) if reference is not None and cfg.kl_coef > 0 else None
    return Batch(obs, r.actions, old, adv.float(), ret.float(), ref)


__all__ = ["AugmentedObservations", "Rollouts", "advantages", "collect_rollouts", "to_batch", "uncertainty_spread"]
