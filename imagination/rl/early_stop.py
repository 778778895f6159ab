"""Stop imagined RL on a held-out signal and keep the best policy, instead of a fixed iteration count.

Why: imagined RL climbs whatever its world model rewards, and past some point the policy gains in
imagination by exploiting the model's errors (docs/notebook/loop.md, "On one GPU": +7.8 real points after 40 GRPO
iterations, -23.5 after 100, imagined success flat at 0.8). The iteration count that is best for the
real simulator is unknown in advance. A held-out check every `every` iterations scores the policy's
mean actions from start episodes RL never trains on, optionally in a second world model trained
apart (its errors are not the ones RL learned to exploit); the best-scoring policy is kept, and RL
stops after `patience` checks without a new best.

    stopper = EarlyStopper(patience=2)
    stopper.observe(0, score_of_start_policy)   # -> True: a new best (save it)
    ...
    stopper.should_stop                          # patience checks in a row without a new best

A second check bounds how far RL may move the policy where the first one does not look. A check from placement
starts never sees the approach, and an iterate can raise it while its approach drifts far enough to fail in
reality (docs/results.md, protocol v2). With `max_move` > 0, an iterate whose mean chunks on held-out real frames
before the first gripper close (`move_phase="before_release"`: before the release's lead, the carry too) moved from
the start policy's by more than `max_move` (mean |difference|, actions in [-1, 1]) is never kept, whatever its score.
It needs no real step: the frames are recorded ones.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

from imagination.env import ImaginationVectorEnv
from imagination.imagine import imagine, policy_mean
from imagination.rl.anchor import kept_frames
from policies.base import Policy

HELDOUT_STARTS = ("start", "rl")
MOVE_PHASES = ("before_grasp", "before_release")


@dataclass
class HeldoutConfig:
    """The held-out check of an imagined-RL run (off when every = 0)."""

    every: int = 0  # iterations between checks; 0 = off: train the fixed number of iterations
    # real episodes whose first frames start the held-out imagined episodes, e.g. the gate's recorded
    # episodes (bench/protocol.py: init states RL does not start from); "" = RL's start data
    start_data: str = ""
    # a world model to score in; "" = RL's own. A second model trained on another split or seed gives a
    # signal the policy has not been fitted to
    world_model: str = ""
    tasks: list[int] = field(default_factory=list)  # start from episodes of these tasks ([] = all)
    # where each held-out episode starts: "start" = its frame 0; "rl" = its most likely start under RL's own
    # keyframe settings (imagination.keyframes: e.g. the aligned step 8 before the release for placement starts,
    # with RL's imagined_steps). Why "rl": a run that trains from placement starts for 24 steps is judged there;
    # a check from frame 0 would score 24 steps of the approach, which it never trains
    starts: str = "start"
    max_episodes: int = 64  # the first N matching start episodes (in dataset order)
    patience: int = 2  # checks in a row without a new best before RL stops
    min_delta: float = 0.0  # a new best must beat the old one by more than this
    # an iterate whose mean chunks moved more than this from the start policy's on the held-out episodes' frames
    # of move_phase (mean |difference|) is never kept; 0 = no bound
    max_move: float = 0.0
    move_every: int = 8  # the approach frames read: every move_every-th step (a chunk's decision steps)
    # which frames of each held-out episode the move is read on (imagination/rl/anchor.py PHASES): "before_grasp",
    # or "before_release", up to the keyframes' release_lead steps before the release (the carry too)
    move_phase: str = "before_grasp"

    def validate(self) -> None:
        if self.every < 0:
            raise ValueError(f"heldout.every: expected an integer >= 0 (0 = off), got {self.every}")
        if self.patience < 1:
            raise ValueError(f"heldout.patience: expected an integer >= 1, got {self.patience}")
        if self.max_episodes < 1:
            raise ValueError(f"heldout.max_episodes: expected an integer >= 1, got {self.max_episodes}")
        if self.starts not in HELDOUT_STARTS:
            raise ValueError(f"heldout.starts: expected one of {list(HELDOUT_STARTS)}, got {self.starts!r}")
        if not (math.isfinite(self.min_delta) and self.min_delta >= 0):
            raise ValueError(f"heldout.min_delta: expected a finite number >= 0, got {self.min_delta}")
        if not (math.isfinite(self.max_move) and self.max_move >= 0):
            raise ValueError(f"heldout.max_move: expected a finite number >= 0 (0 = no bound), got {self.max_move}")
        if self.move_phase not in MOVE_PHASES:
            raise ValueError(f"heldout.move_phase: expected one of {list(MOVE_PHASES)}, got {self.move_phase!r}")
        if self.move_every < 1:
            raise ValueError(f"heldout.move_every: expected an integer >= 1, got {self.move_every}")


class EarlyStopper:
    """Tracks held-out scores in order; says which is the best and when to stop."""

    def __init__(self, patience: int, min_delta: float = 0.0, max_move: float = 0.0):
        self.patience, self.min_delta, self.max_move = patience, min_delta, max_move
        self.best_score, self.best_iteration = -math.inf, -1
        self.since_best = 0
        self.scores: list[tuple[int, float]] = []
        self.moves: list[tuple[int, float]] = []  # (iteration, move) of each check, when moves are measured

    def observe(self, iteration: int, score: float, move: float | None = None) -> bool:
        """Record the score at `iteration` (0 = the starting policy) and, when measured, how far the policy moved
        from the start (`move`); True when it is a new best. An iterate that moved more than max_move (> 0) is
        never a new best."""
        self.scores.append((iteration, float(score)))
        if move is not None:
            self.moves.append((iteration, float(move)))
        within = move is None or not self.max_move or move <= self.max_move
        if within and score > self.best_score + self.min_delta:
            self.best_score, self.best_iteration, self.since_best = float(score), iteration, 0
            return True
        self.since_best += 1
        return False

    @property
    def should_stop(self) -> bool:
        return self.since_best >= self.patience

    @classmethod
    def replay(cls, patience: int, min_delta: float, scores: list[tuple[int, float]],
               moves: Sequence[tuple[int, float]] = (), max_move: float = 0.0) -> EarlyStopper:
        """The stopper after `scores` and `moves` (a resumed run's record of its checks)."""
        stopper = cls(patience, min_delta, max_move)
        moved = {int(it): float(m) for it, m in moves}
        for it, s in scores:
            stopper.observe(int(it), float(s), moved.get(int(it)))
        return stopper


def heldout_success(env: ImaginationVectorEnv, policy: Policy, seed: int = 0) -> float:
    """Imagined success rate of the policy's mean chunks from each start episode of `env` with a start, at its
    most likely start under env's keyframe settings (`KeyframeSampler.modes`; mode "start": frame 0), one
    imagined episode each, batched by env.num_envs, with fixed world-model noise (`seed`)."""
    starts = env.keyframes.modes()
    n = env.num_envs
    policy.eval()
    act = policy_mean(policy)
    successes = sum(int(imagine(env, act, starts[b:b + n], seed=seed + b).success.sum())
                    for b in range(0, len(starts), n))
    return successes / len(starts)


def approach_observations(env: ImaginationVectorEnv, every: int = 8, phase: str = "before_grasp",
                          release_lead: int = 8) -> dict | None:
    """The policy's observations at every `every`-th step of each of env's start episodes before its gripper first
    closes (action[:, 6] > 0; phase "before_release": before release_lead steps ahead of the first release after
    it, anchor.kept_frames), as env shows them (its policy views): image uint8 [N, V, H, W, 3], state float32
    [N, S], instruction N strings; None when no episode has such a step."""
    images, states, instructions = [], [], []
    for ep in env.episodes:
        steps = np.arange(0, kept_frames(ep.action, phase, release_lead)[1], every)
        images.append(env.policy_views(ep.frames[steps]))
        states.append(ep.state[steps])
        instructions += [ep.instruction] * len(steps)
    if not instructions:
        return None
    return {"image": np.concatenate(images), "state": np.concatenate(states).astype(np.float32),
            "instruction": instructions}


@torch.no_grad()
def mean_chunks(policy: Policy, obs: dict, batch: int = 256) -> np.ndarray:
    """The policy's mean action chunks on `obs` (approach_observations) -> float32 [N, K, 7], in batches."""
    policy.eval()
    n = len(obs["instruction"])
    return np.concatenate([policy.predict_action_chunk(
        {"image": obs["image"][b:b + batch], "state": obs["state"][b:b + batch],
         "instruction": obs["instruction"][b:b + batch]}).cpu().numpy() for b in range(0, n, batch)])


def move_from(start_chunks: np.ndarray, policy: Policy, obs: dict) -> float:
    """Mean |difference| of the policy's mean chunks on `obs` from the start policy's (`start_chunks`)."""
    return float(np.abs(mean_chunks(policy, obs) - start_chunks).mean())


__all__ = ["HELDOUT_STARTS", "MOVE_PHASES", "EarlyStopper", "HeldoutConfig", "approach_observations", "heldout_success",
           "mean_chunks", "move_from"]
