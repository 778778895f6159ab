"""Keyframe draws (imagination/keyframes.py): task-balanced draws, and starts before the placement."""
from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from imagination.keyframes import KeyframeConfig, KeyframeSampler, step_weights


def _actions(n: int) -> list[np.ndarray]:
    return [np.zeros((20, 7)) for _ in range(n)]


def test_balanced_draws_cover_every_task_equally():
    # 9 episodes of task 0, one of task 1: free draws of 4 almost never balance, balanced ones always do
    tasks = [0] * 9 + [1]
    cfg = KeyframeConfig(mode="start", balance_tasks=True)
    sampler = KeyframeSampler(_actions(10), cfg, tasks)
    rng = np.random.default_rng(0)
    for _ in range(50):
        counts = Counter(tasks[k.episode] for k in sampler.sample(4, rng))
        assert counts == {0: 2, 1: 2}
    # an odd n: every task gets n // tasks, the rest go to distinct tasks
    counts = Counter(tasks[k.episode] for k in sampler.sample(5, rng))
    assert sorted(counts.values()) == [2, 3]
    free = KeyframeSampler(_actions(10), KeyframeConfig(mode="start"), tasks)
    draws = [Counter(tasks[k.episode] for k in free.sample(4, rng))[1] for _ in range(200)]
    assert np.mean(draws) < 1.0  # unbalanced: task 1 gets about 0.4 of 4


def test_balanced_draws_keep_step_weights_within_a_task():
    action = np.zeros((100, 7))
    action[40:, 6] = 1.0  # one grasp at step 40
    cfg = KeyframeConfig(mode="hard", balance_tasks=True)
    ts = [k.t for k in KeyframeSampler([action, action], cfg, [3, 7]).sample(400, np.random.default_rng(1))]
    assert abs(np.median(ts) - 40) < 10


def test_balance_needs_a_task_per_episode():
    with pytest.raises(ValueError, match="balance_tasks"):
        KeyframeSampler(_actions(3), KeyframeConfig(balance_tasks=True))
    with pytest.raises(ValueError, match="balance_tasks"):
        KeyframeSampler(_actions(3), KeyframeConfig(balance_tasks=True), [0, 1])


def _grip(*spans: tuple[int, int, float], T: int = 120) -> np.ndarray:
    """Actions [T, 7] whose gripper command is -1 (open) except `value` over [start, stop) of each span."""
    a = np.zeros((T, 7))
    a[:, 6] = -1.0
    for start, stop, value in spans:
        a[start:stop, 6] = value
    return a


def test_release_starts_centre_on_the_lead_before_the_last_release():
    cfg = KeyframeConfig(mode="release", release_lead=30, hard_width=5.0)
    w = step_weights(_grip((20, 40, 1.0), (50, 100, 1.0)), cfg)  # two grasps: the last release is at step 100
    assert int(np.argmax(w)) == 70 and w[100:].sum() == 0  # never at or after the release
    assert w[:20].max() < 1e-6  # no bump before the first grasp's release (step 40): only the last one is the placement
    assert not step_weights(_grip((30, 120, 1.0)), cfg).any()  # held to the end: never released, no start
    assert not step_weights(_grip(), cfg).any()  # never shut
    with pytest.raises(ValueError, match="mode 'release' finds no step to start from in any of the 2 episodes"):
        KeyframeSampler([_grip(), _grip((30, 120, 1.0))], cfg)
    starts = KeyframeSampler([_grip(), _grip((50, 100, 1.0))], cfg).sample(200, np.random.default_rng(0))
    ts = np.array([k.t for k in starts])
    assert {k.episode for k in starts} == {1} and abs(ts.mean() - 70) < 2 and ts.max() < 100


def test_aligned_starts_fall_on_the_policys_decision_steps_and_keep_each_blocks_weight():
    actions = _grip((50, 100, 1.0))
    free = step_weights(actions, KeyframeConfig(mode="release", release_lead=30, hard_width=5.0))
    w = step_weights(actions, KeyframeConfig(mode="release", release_lead=30, hard_width=5.0, align=8))
    assert np.flatnonzero(w).tolist() == [t for t in range(0, 100, 8) if free[t:t + 8].sum() > 0]
    assert np.isclose(w.sum(), free.sum()) and np.isclose(w[64], free[64:72].sum())  # 70's block starts at 64
    # uniform over the first 16 of 20 steps: the blocks at 0 and 8 hold 8 steps each, the one at 16 none
    uniform = step_weights(np.zeros((20, 7)), KeyframeConfig(mode="uniform", align=8))
    assert np.flatnonzero(uniform).tolist() == [0, 8] and uniform[[0, 8]].tolist() == [8.0, 8.0]
    starts = KeyframeSampler([actions], KeyframeConfig(mode="release", release_lead=30, align=8)).sample(
        100, np.random.default_rng(0))
    assert {k.t % 8 for k in starts} == {0}
    with pytest.raises(ValueError, match="keyframes.align: expected a number of steps >= 0"):
        KeyframeSampler([actions], KeyframeConfig(align=-1))


def test_modes_are_each_episodes_most_likely_start_in_episode_order():
    # frame 0 of every episode in mode "start"; in mode "release", the aligned block of release - lead
    assert [(k.episode, k.t) for k in KeyframeSampler(_actions(3), KeyframeConfig(mode="start")).modes()] == [
        (0, 0), (1, 0), (2, 0)]
    cfg = KeyframeConfig(mode="release", release_lead=30, hard_width=5.0, align=8)
    sampler = KeyframeSampler([_grip((50, 100, 1.0)), _grip(), _grip((20, 61, 1.0))], cfg)
    # 100 - 30 = 70 lies in the block at 64; 61 - 30 = 31 in the block at 24; episode 1 never releases: no start
    assert [(k.episode, k.t) for k in sampler.modes()] == [(0, 64), (2, 24)]
    # the first of equal weights: uniform starts give each episode's step 0
    assert {k.t for k in KeyframeSampler(_actions(2), KeyframeConfig(mode="uniform")).modes()} == {0}


def test_grasp_starts_centre_on_the_lead_before_the_first_close_and_never_after_it():
    cfg = KeyframeConfig(mode="grasp", grasp_lead=8, hard_width=3.0)
    w = step_weights(_grip((50, 100, 1.0), (120, 150, 1.0)), cfg)  # two grasps: the first close is at step 50
    assert int(np.argmax(w)) == 42 and w[51:].sum() == 0  # at the close at the latest; the second grasp gives none
    assert w[:25].max() < 1e-6
    assert not step_weights(_grip(), cfg).any()  # never shut: no start
    with pytest.raises(ValueError, match="mode 'grasp' finds no step to start from in any of the 1 episodes"):
        KeyframeSampler([_grip()], cfg)
    sampler = KeyframeSampler([_grip(), _grip((50, 100, 1.0))], KeyframeConfig(mode="grasp", grasp_lead=8, align=8))
    starts = sampler.sample(100, np.random.default_rng(0))
    assert {k.episode for k in starts} == {1} and {k.t % 8 for k in starts} == {0}
    assert max(k.t for k in starts) <= 50
    assert [(k.episode, k.t) for k in sampler.modes()] == [(1, 40)]  # 50 - 8 = 42 lies in the block at 40
