"""imagination/eval/task_bias.py: per-task logit offsets that bring a judge's level to the real success rate
without changing its order within a task."""
import numpy as np
import pytest

from imagination.eval.reward_gate import calibration_table, within_task_auc_interval
from imagination.eval.task_bias import fit_task_bias
from world_models.grasp_point import apply_task_bias


def _jobs(rng, n=10):
    """Task 0: an optimistic judge (all ~0.95, 3/10 real); task 1: a pessimistic one (~0.05, 6/10 real); task 2
    in between. Successes score higher within each task, so the order carries the signal."""
    probs, labels, tasks = [], [], []
    for task, (level, wins) in enumerate([(0.95, 3), (0.05, 6), (0.5, 5)]):
        y = np.arange(n) < wins
        z = np.log(level / (1 - level)) + np.where(y, 0.6, -0.6) + rng.normal(0, 0.1, n)
        probs += list(1 / (1 + np.exp(-z)))
        labels += list(y)
        tasks += [task] * n
    return np.array(probs), np.array(labels), np.array(tasks)


def test_offsets_match_each_tasks_smoothed_real_rate_and_keep_the_order():
    p, y, t = _jobs(np.random.default_rng(0))
    bias = fit_task_bias(p, y, t)
    assert len(bias) == 10 and bias[3:] == [0.0] * 7
    assert bias[0] < -1.0 and bias[1] > 1.0  # the optimist brought down, the pessimist up
    q = apply_task_bias(p, t, bias)
    for k, wins in enumerate([3, 6, 5]):
        assert q[t == k].mean() == pytest.approx((wins + 0.5) / 11, abs=1e-5)
    before = within_task_auc_interval(p, y, t, resamples=50)
    after = within_task_auc_interval(q, y, t, resamples=50)
    assert after.point == pytest.approx(before.point)  # a monotone move per task: the same ranking
    gaps_before = [abs(r.gap) for r in calibration_table(p, y, t, 0.5)]
    gaps_after = [abs(r.gap) for r in calibration_table(q, y, t, 0.5)]
    assert max(gaps_before) >= 0.4 and max(gaps_after) <= 0.2


def test_all_or_nothing_tasks_stay_finite_and_the_bound_holds():
    p = np.array([0.5] * 4 + [0.999999] * 4)
    y = np.array([True] * 4 + [False] * 4)
    t = np.array([0] * 4 + [1] * 4)
    bias = fit_task_bias(p, y, t, bound=3.0)
    assert 0 < bias[0] < 3.0  # 4/4 real: pulled to 4.5/5, not to 1
    assert apply_task_bias(p, t, bias)[:4].mean() == pytest.approx(0.9, abs=1e-5)
    assert bias[1] == -3.0  # 0/4 real against a judge at 1 - 1e-6: the bound stops it
    np.testing.assert_allclose(apply_task_bias(p, t, []), p)  # no offsets: untouched


def test_bad_inputs_name_the_field():
    with pytest.raises(ValueError, match="probs, labels, task_ids"):
        fit_task_bias([0.5, 0.5], [True], [0, 0])
    with pytest.raises(ValueError, match="task_ids: expected integers in"):
        fit_task_bias([0.5], [True], [10])
    with pytest.raises(ValueError, match="bound"):
        fit_task_bias([0.5], [True], [0], bound=0.0)
    with pytest.raises(ValueError, match="task_bias: has 2 entries"):
        apply_task_bias(np.array([0.5]), np.array([3]), [0.0, 1.0])
