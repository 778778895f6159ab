"""Keyframe-initialized starts (WoVR): imagined episodes begin at frames of real episodes.

Starting only at t=0 spends most of the imagination budget on the easy approach; starting along
real trajectories puts the policy right before the grasp or the placement, where it fails.

    mode "start"    t = 0 only (the real env's distribution)
    mode "uniform"  any step of the episode
    mode "hard"     weighted toward the grasp and the release (gripper command flips), where
                    policies fail most; a floor weight keeps every step possible
    mode "release"  around `release_lead` steps before the episode's last release (the gripper opened after
                    being shut: the placement), nowhere else; an episode that never releases gives no start.
                    Why: a policy that carries the object to its target and lets go a few centimetres off fails
                    in the last tens of steps, and the world model keeps an outcome that near (bench/goal_judge.py
                    --last-steps) better than one a whole episode ahead
    mode "grasp"    around `grasp_lead` steps before the episode's first close, up to the close, nowhere else; an
                    episode that never closes gives no start. Why: an outcome reader (world_models/
                    outcome_reader.py) reads the held or slipped object in a window after the first close, and a
                    short imagined window from just before the grasp ends inside it; "hard" also starts far from
                    any grasp, where its verdict reads frames it was never trained on (docs/results.md, "The
                    outcome reader")
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from world_models.grasp_point import first_close, release_after

KEYFRAME_MODES = ("start", "uniform", "hard", "release", "grasp")


@dataclass
class KeyframeConfig:
    mode: str = "uniform"
    hard_width: float = 10.0  # steps: std of the Gaussian bumps around grasp/release events
    hard_floor: float = 0.1  # relative weight of steps far from any event
    max_start_fraction: float = 0.8  # never start in the last 20% of an episode (nothing left to do)
    release_lead: int = 40  # mode "release": steps before the last release the starts centre on (width hard_width)
    grasp_lead: int = 8  # mode "grasp": steps before the first close the starts centre on (width hard_width)
    # Spread every draw of n keyframes evenly over the tasks (n // tasks each, the rest to tasks drawn at random),
    # each task's keyframes by their weights. Why: GRPO draws a few groups per iteration; drawn freely, 4 groups
    # over 5 tasks leave a task out of most updates and let a run drift toward whichever tasks it happened to draw
    # (the grasp recipe's imagined success swung 0.03-0.97 between iterations, and its seeds 19-35 of 50 real).
    balance_tasks: bool = False
    # > 1: start only at multiples of this many steps, each step's weight moved to the multiple at or before it.
    # Why: a recorded rollout of a policy that runs chunks (its n_action_steps, e.g. 8) chose its actions only at
    # steps 0, 8, 16, ...; started there, the same policy on the recorded frame gives the recorded chunk exactly,
    # started between two of them it gives another chunk, and imagination follows a future the policy never had
    # (measured: docs/notebook/protocol_v2.md, section 11). Leave 0 for starts from demonstrations recorded by a
    # scripted expert, which decides at every step.
    align: int = 0


@dataclass(frozen=True)
class Keyframe:
    episode: int  # index into the episode list the sampler was built on
    t: int  # step: the policy acts first at row t (its observation is frame t)


def step_weights(actions: np.ndarray, cfg: KeyframeConfig) -> np.ndarray:
    """Unnormalized start weights [T] of one episode (actions [T, 7]) under `cfg.mode`."""
    T = len(actions)
    last = max(1, int(np.ceil(T * cfg.max_start_fraction)))
    w = np.zeros(T)
    if cfg.mode == "start":
        w[0] = 1.0
    elif cfg.mode == "uniform":
        w[:last] = 1.0
    elif cfg.mode == "hard":
        grip = np.sign(actions[:, 6])
        events = np.flatnonzero(np.diff(grip) != 0) + 1  # grasp (close) and release (open) steps
        t = np.arange(T)
        bumps = sum((np.exp(-0.5 * ((t - e) / cfg.hard_width) ** 2) for e in events), np.zeros(T))
        w[:last] = (cfg.hard_floor + bumps)[:last]
    elif cfg.mode == "release":
        shut = actions[:, 6] > 0
        opened = np.flatnonzero(shut[:-1] & ~shut[1:]) + 1  # steps whose command opens a shut gripper
        if len(opened):
            t, centre = np.arange(T), opened[-1] - cfg.release_lead
            w[:opened[-1]] = np.exp(-0.5 * ((t[:opened[-1]] - centre) / cfg.hard_width) ** 2)
    elif cfg.mode == "grasp":
        close = first_close(actions)
        if close >= 0:
            t = np.arange(close + 1)
            w[:close + 1] = np.exp(-0.5 * ((t - (close - cfg.grasp_lead)) / cfg.hard_width) ** 2)
    else:
        raise ValueError(f"keyframe mode: expected one of {list(KEYFRAME_MODES)}, got {cfg.mode!r}")
    if cfg.align > 1:  # each step's weight onto align_down of it, the first step of its block
        blocks = np.arange(0, T, cfg.align)
        aligned = np.zeros(T)
        aligned[blocks] = np.add.reduceat(w, blocks)
        return aligned
    return w


def align_down(t: int, align: int) -> int:
    """Step t rounded down to a multiple of `align` (KeyframeConfig.align; align <= 1 leaves it)."""
    return t if align <= 1 else t // align * align


class KeyframeSampler:
    """Draws `Keyframe`s over a list of episodes' action arrays, each step by its weight."""

    def __init__(self, episode_actions: list[np.ndarray], cfg: KeyframeConfig | None = None,
                 tasks: list[int] | None = None):
        """tasks: each episode's task id, needed by `cfg.balance_tasks`."""
        self.cfg = cfg or KeyframeConfig()
        if self.cfg.align < 0:
            raise ValueError(f"keyframes.align: expected a number of steps >= 0 (0: any step), got {self.cfg.align}")
        if not episode_actions:
            raise ValueError("keyframes: no episodes to start from")
        if self.cfg.balance_tasks and (tasks is None or len(tasks) != len(episode_actions)):
            raise ValueError(f"keyframes.balance_tasks: expected one task id per episode ({len(episode_actions)}), "
                             f"got {None if tasks is None else len(tasks)}")
        weights = [step_weights(a, self.cfg) for a in episode_actions]
        if not any(w.any() for w in weights):
            raise ValueError(f"keyframes: mode {self.cfg.mode!r} finds no step to start from in any of the "
                             f"{len(episode_actions)} episodes")
        self._pairs = np.array([(e, t) for e, w in enumerate(weights) for t in np.flatnonzero(w)])
        p = np.concatenate([w[w > 0] for w in weights])
        self._p = p / p.sum()
        pair_task = np.asarray(tasks)[self._pairs[:, 0]] if tasks is not None else np.zeros(len(self._pairs), int)
        self._by_task = {int(k): np.flatnonzero(pair_task == k) for k in np.unique(pair_task)}

    def modes(self) -> list[Keyframe]:
        """Each episode's most likely start (its first step of the highest weight), in episode order; an
        episode with no start under the mode gives none. Why: a held-out check scores a policy once per start
        episode from fixed starts (mode "start": frame 0; "release": the step `release_lead` before the
        release, aligned; "grasp": `grasp_lead` before the first close, aligned), so that two checks differ only by
        the policy."""
        firsts = np.flatnonzero(np.r_[True, np.diff(self._pairs[:, 0]) != 0])  # each episode's first pair
        ends = np.r_[firsts[1:], len(self._pairs)]
        best = [a + int(np.argmax(self._p[a:b])) for a, b in zip(firsts, ends)]
        return [Keyframe(int(e), int(t)) for e, t in self._pairs[best]]

    def sample(self, n: int, rng: np.random.Generator) -> list[Keyframe]:
        if not self.cfg.balance_tasks:
            idx = rng.choice(len(self._pairs), size=n, p=self._p)
        else:
            tasks = sorted(self._by_task)
            drawn = np.concatenate([np.repeat(tasks, n // len(tasks)),
                                    rng.choice(tasks, size=n % len(tasks), replace=False)]).astype(int)
            idx = np.empty(n, int)
            for k in np.unique(drawn):
                rows = self._by_task[int(k)]
                where = np.flatnonzero(drawn == k)
                idx[where] = rng.choice(rows, size=len(where), p=self._p[rows] / self._p[rows].sum())
            idx = idx[rng.permutation(n)]
        return [Keyframe(int(e), int(t)) for e, t in self._pairs[idx]]


def placement_starts(actions: Sequence[np.ndarray], lead: int, align: int = 0) -> np.ndarray:
    """Per episode (actions [T, 7]), the step `lead` steps before its first release after its first close (with
    align > 1: rounded down to a multiple of `align`), -1 where that step would not come after the close (no
    release, or one too soon)."""
    t0 = np.full(len(actions), -1, np.int64)
    for k, a in enumerate(actions):
        c = first_close(a)
        r = release_after(a, c) if c >= 0 else -1
        t = align_down(r - lead, align)
        if r >= 0 and t > c >= 0:
            t0[k] = t
    return t0


def grasp_starts(actions: Sequence[np.ndarray], lead: int, align: int = 0) -> np.ndarray:
    """Per episode (actions [T, 7]), the step `lead` steps before its first close (with align > 1: rounded down to a
    multiple of `align`), -1 where the episode never closes or closes sooner."""
    t0 = np.full(len(actions), -1, np.int64)
    for k, a in enumerate(actions):
        c = first_close(a)
        t = align_down(c - lead, align)
        if c >= 0 and t >= 0:
            t0[k] = t
    return t0
