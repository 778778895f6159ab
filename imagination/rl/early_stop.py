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
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from imagination.env import ImaginationVectorEnv
from imagination.imagine import imagine, policy_mean
from policies.base import Policy

HELDOUT_STARTS = ("start", "rl")


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


class EarlyStopper:
    """Tracks held-out scores in order; says which is the best and when to stop."""

    def __init__(self, patience: int, min_delta: float = 0.0):
        self.patience, self.min_delta = patience, min_delta
        self.best_score, self.best_iteration = -math.inf, -1
        self.since_best = 0
        self.scores: list[tuple[int, float]] = []

    def observe(self, iteration: int, score: float) -> bool:
        """Record the score at `iteration` (0 = the starting policy); True when it is a new best."""
        self.scores.append((iteration, float(score)))
        if score > self.best_score + self.min_delta:
            self.best_score, self.best_iteration, self.since_best = float(score), iteration, 0
            return True
        self.since_best += 1
        return False

    @property
    def should_stop(self) -> bool:
        return self.since_best >= self.patience

    @classmethod
    def replay(cls, patience: int, min_delta: float, scores: list[tuple[int, float]]) -> EarlyStopper:
        """The stopper after `scores` (a resumed run's record of its checks)."""
        stopper = cls(patience, min_delta)
        for it, s in scores:
            stopper.observe(int(it), float(s))
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


__all__ = ["HELDOUT_STARTS", "EarlyStopper", "HeldoutConfig", "heldout_success"]
