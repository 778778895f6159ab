"""The reward gate's figures on hand-made jobs: within-task AUC and its bootstrap interval, per-task
calibration, and the verdict at the thresholds' edges."""
import math

import numpy as np
import pytest

from imagination.eval.closed_loop import outcome_separation
from imagination.eval.reward_gate import (
    THRESHOLD_AUC,
    THRESHOLD_GAP,
    TaskCalibration,
    calibration_table,
    exact_judge_gap_p_value,
    exact_judge_pass_chance,
    gate_figures,
    gate_verdict,
    jobs_for_exact_judge,
    max_calibration_gap,
    within_task_auc_interval,
)

# Task 0 is hard and scored high, task 1 easy and scored low; inside each task successes score higher.
PROBS = np.array([0.9, 0.8, 0.7, 0.6, 0.4, 0.3, 0.2, 0.1])
LABELS = np.array([1, 0, 0, 0, 1, 1, 1, 0], bool)
TASKS = np.array([0, 0, 0, 0, 1, 1, 1, 1])


def test_within_task_auc_is_perfect_where_the_pooled_one_is_not():
    est = within_task_auc_interval(PROBS, LABELS, TASKS)
    assert est.point == 1.0
    assert est.pairs == 1 * 3 + 3 * 1 and est.tasks == 2
    assert est.ci95 == (1.0, 1.0)  # every resample that has a pair ranks it right
    # pooled: 0.9 beats all 4 failures; 0.4, 0.3 and 0.2 beat only 0.1 -> 7 of 16 pairs
    assert outcome_separation(PROBS, LABELS, TASKS).auc == pytest.approx(7 / 16)
    figs = gate_figures([{"task_id": int(t), "real_success": bool(y), "max_success_prob": float(p)}
                         for p, y, t in zip(PROBS, LABELS, TASKS)], threshold=0.5)
    assert figs["auc_within_task"] == 1.0 and figs["auc"] == pytest.approx(7 / 16) and figs["pairs"] == 6
    assert (figs["jobs"], figs["real_successes"], figs["imagined_successes"]) == (8, 4, 4)


def test_ties_count_half_and_tasks_with_one_outcome_give_no_pairs():
    probs = np.array([0.5, 0.5, 0.7, 0.9, 0.2])
    labels = np.array([1, 0, 1, 1, 1], bool)
    tasks = np.array([0, 0, 1, 1, 2])  # tasks 1 and 2: successes only
    est = within_task_auc_interval(probs, labels, tasks)
    assert (est.point, est.pairs, est.tasks) == (0.5, 1, 1)
    none = within_task_auc_interval(probs, np.ones(5, bool), tasks)
    assert math.isnan(none.point) and none.pairs == 0 and all(math.isnan(x) for x in none.ci95)


def test_bootstrap_matches_resampling_the_jobs_by_hand():
    rng = np.random.default_rng(3)
    tasks = np.repeat(np.arange(3), 6)
    labels = rng.random(18) < 0.5
    labels[[0, 1, 6, 7, 12, 13]] = [True, False] * 3  # every task has both outcomes
    probs = np.round(0.3 * labels + rng.random(18) * 0.7, 1)  # rounded: ties happen
    est = within_task_auc_interval(probs, labels, tasks, resamples=200, seed=5)
    # the same draws (task by task, a multinomial count per job), each resample scored on its expanded jobs
    draw = np.random.default_rng(5)
    counts = {k: draw.multinomial(6, np.full(6, 1 / 6), size=200) for k in range(3)}
    aucs = []
    for r in range(200):
        idx = np.concatenate([np.flatnonzero(tasks == k).repeat(counts[k][r]) for k in range(3)])
        auc = outcome_separation(probs[idx], labels[idx], tasks[idx]).auc_within_task
        if not math.isnan(auc):
            aucs.append(auc)
    assert est.resamples == len(aucs)
    np.testing.assert_allclose(est.ci95, np.quantile(aucs, [0.025, 0.975]))


def test_bootstrap_interval_holds_the_estimate_and_narrows_with_more_jobs():
    rng = np.random.default_rng(0)
    tasks = np.repeat(np.arange(5), 10)
    labels = rng.random(50) < 0.5
    probs = 0.25 * labels + 0.75 * rng.random(50)
    small = within_task_auc_interval(probs, labels, tasks)
    assert small.ci95[0] <= small.point <= small.ci95[1]
    assert small.ci95[1] - small.ci95[0] > 0.05
    big = within_task_auc_interval(np.tile(probs, 4), np.tile(labels, 4), np.tile(tasks, 4))
    assert big.point == pytest.approx(small.point) and big.pairs == 16 * small.pairs
    assert big.ci95[0] <= big.point <= big.ci95[1]
    assert big.ci95[1] - big.ci95[0] < 0.7 * (small.ci95[1] - small.ci95[0])
    assert within_task_auc_interval(probs, labels, tasks) == small  # the seed is fixed


def test_a_task_with_two_jobs_loses_the_resamples_that_draw_one_outcome():
    est = within_task_auc_interval([0.9, 0.1], [True, False], [0, 0], resamples=2000)
    assert 800 < est.resamples < 1200  # half the draws repeat one job
    assert est.point == 1.0 and est.ci95 == (1.0, 1.0)


def test_calibration_table_by_hand():
    probs = np.array([0.9, 0.2, 0.3, 0.5, 0.6, 0.7])
    labels = np.array([1, 1, 1, 0, 0, 0], bool)
    tasks = np.array([3, 3, 3, 3, 1, 1])
    rows = calibration_table(probs, labels, tasks, threshold=0.5)
    assert rows == [TaskCalibration(1, 2, 0, 2), TaskCalibration(3, 4, 3, 2)]  # 0.5 itself counts as imagined success
    assert rows[0].gap == 1.0 and rows[1].gap == pytest.approx(0.5 - 0.75)
    assert rows[1].as_dict()["real_rate"] == 0.75
    assert max_calibration_gap(rows) == 1.0
    assert math.isnan(max_calibration_gap([]))
    with pytest.raises(ValueError, match="1-D arrays"):
        calibration_table(probs, labels[:4], tasks, 0.5)


def test_verdict_at_the_thresholds_edges():
    assert (THRESHOLD_AUC, THRESHOLD_GAP) == (0.80, 0.15)
    assert gate_verdict(0.80, 0.15).passed and gate_verdict(0.80, 0.15).label == "PASS"
    low = gate_verdict(0.799, 0.0)
    assert not low.passed and low.measurable and low.reasons == ("within-task AUC 0.799 < 0.80",)
    wide = gate_verdict(1.0, 0.151)
    assert not wide.passed and "0.151 > 0.15" in wide.reasons[0]
    assert len(gate_verdict(0.5, 0.4).reasons) == 2
    # a gap of 13/20 - 10/20 is 0.15000000000000002 in floating point: at the edge, it passes
    labels = np.arange(20) < 10
    probs = np.where(np.arange(20) < 13, 0.9, 0.1)
    gap = max_calibration_gap(calibration_table(probs, labels, np.zeros(20), 0.5))
    assert gap > 0.15 and gate_verdict(0.8, gap).passed
    blind = gate_verdict(float("nan"), 0.0)
    assert not blind.passed and not blind.measurable and "cannot be measured" in blind.reasons[0]
    assert not gate_verdict(0.9, float("nan")).passed
    assert gate_verdict(0.7, 0.2, threshold_auc=0.6, threshold_gap=0.25).passed


def test_exact_judge_pass_chance_counts_the_binomial_noise_of_both_sides():
    half = TaskCalibration(task_id=0, jobs=10, real_successes=5, imagined_successes=5)
    # |X - Y| <= 1 for two independent Binomial(10, 1/2): (C(20,10) + 2 C(20,11)) / 4^10
    expected = (math.comb(20, 10) + 2 * math.comb(20, 11)) / 4 ** 10
    assert exact_judge_pass_chance([half]) == pytest.approx(expected, abs=1e-12)
    assert 0.49 < expected < 0.50
    # tasks are independent: five such tasks pass together far more rarely than one
    assert exact_judge_pass_chance([half] * 5) == pytest.approx(expected ** 5, rel=1e-9)
    # a task reality always solves (or never) leaves no noise: an exact judge always passes it
    sure = TaskCalibration(task_id=1, jobs=10, real_successes=10, imagined_successes=3)
    assert exact_judge_pass_chance([sure]) == pytest.approx(1.0)
    # more jobs, less noise: 100 jobs at p = 1/2 stay within 0.15 almost always; a wider threshold passes more
    many = TaskCalibration(task_id=0, jobs=100, real_successes=50, imagined_successes=50)
    assert exact_judge_pass_chance([many]) > 0.96
    assert exact_judge_pass_chance([half], threshold_gap=0.25) > exact_judge_pass_chance([half])
    # the edge passes, as the verdict's does: 3 of 20 apart is exactly 0.15
    twenty = TaskCalibration(task_id=0, jobs=20, real_successes=10, imagined_successes=10)
    by_hand = sum(math.comb(20, x) * math.comb(20, y) for x in range(21) for y in range(21)
                  if abs(x - y) <= 3) / 4 ** 20
    assert exact_judge_pass_chance([twenty]) == pytest.approx(by_hand, abs=1e-12)


def _pass_chance_by_hand(rates: list[float], n: int, gap: float = 0.15) -> float:
    """P(every task's |X - Y| / n <= gap), X, Y ~ Binomial(n, round(p n) / n) independent: a plain double sum."""
    total = 1.0
    for p in rates:
        q = round(p * n) / n
        pmf = [math.comb(n, k) * q ** k * (1 - q) ** (n - k) for k in range(n + 1)]
        total *= sum(pmf[x] * pmf[y] for x in range(n + 1) for y in range(n + 1) if abs(x - y) <= gap * n + 1e-9)
    return total


def test_jobs_for_exact_judge_is_where_the_pass_chance_stays_above_the_target():
    rows = [TaskCalibration(task_id=t, jobs=10, real_successes=k, imagined_successes=0) for t, k in enumerate([5, 9])]
    n = jobs_for_exact_judge(rows, max_jobs=120)
    assert n is not None and 10 < n <= 120
    rates = [0.5, 0.9]
    assert all(_pass_chance_by_hand(rates, m) >= 0.8 for m in range(n, 121))
    assert _pass_chance_by_hand(rates, n - 1) < 0.8  # and not one job fewer
    # one task at 1/2 needs fewer jobs than five such tasks, and a laxer target fewer still
    half = [TaskCalibration(task_id=0, jobs=10, real_successes=5, imagined_successes=0)]
    one, five = jobs_for_exact_judge(half), jobs_for_exact_judge(half * 5)
    assert one is not None and five is not None and one < five
    lax = jobs_for_exact_judge(half * 5, chance=0.5)
    assert lax is not None and lax < five
    # a task reality always solves needs no more jobs than it has; an unreachable target gives None
    assert jobs_for_exact_judge([TaskCalibration(task_id=0, jobs=10, real_successes=10, imagined_successes=0)]) == 10
    assert jobs_for_exact_judge(half * 5, max_jobs=40) is None
    assert jobs_for_exact_judge([]) is None


def test_exact_judge_gap_p_value_says_whether_a_gap_is_beyond_the_jobs_noise():
    half = [TaskCalibration(task_id=t, jobs=10, real_successes=5, imagined_successes=5) for t in range(5)]
    assert exact_judge_gap_p_value(half, 0.0) == pytest.approx(1.0)  # any draw shows a gap of 0 or more
    # P(max gap >= 0.2) = 1 - P(every task within 0.1): the complement of the pass chance at 0.1
    assert exact_judge_gap_p_value(half, 0.2) == pytest.approx(1 - exact_judge_pass_chance(half, 0.1), abs=1e-12)
    p = [exact_judge_gap_p_value(half, g) for g in (0.1, 0.2, 0.3, 0.5, 1.0)]
    assert all(a > b for a, b in zip(p, p[1:]))  # larger gaps are rarer
    assert p[1] > 0.5 and p[-1] < 1e-5  # a 0.2 gap on some task is the rule at 10 jobs; 10 of 10 apart is not
    sure = [TaskCalibration(task_id=0, jobs=10, real_successes=0, imagined_successes=6)]
    assert exact_judge_gap_p_value(sure, 0.6) == pytest.approx(0.0)  # reality never succeeds: no noise to blame
