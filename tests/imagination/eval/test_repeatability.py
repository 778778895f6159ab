"""imagination/eval/repeatability.py: the gate's figures with repeated real runs as the judge, on hand-made
episode records."""
import numpy as np
import pytest

from imagination.eval.repeatability import repeat_figures


def _records(outcomes: dict[tuple[int, int], bool], seed: int = 0) -> list[dict]:
    return [{"task_id": t, "init_state_id": i, "seed": seed, "success": ok} for (t, i), ok in outcomes.items()]


REF = {(0, 10): True, (0, 11): True, (0, 12): False, (0, 13): False, (1, 10): True, (1, 11): False}


def test_a_repeatable_world_ranks_perfectly_and_an_inverted_one_not_at_all():
    same = repeat_figures(_records(REF), [_records(REF, seed=1), _records(REF, seed=2)])
    assert same["auc_within_task"] == 1.0 and same["agreement"] == 1.0 and same["auc_by_repeats"] == [1.0, 1.0]
    assert same["pairs"] == 2 * 2 + 1 * 1 and same["repeat_successes"] == [3, 3] and same["max_calibration_gap"] == 0
    flipped = {k: not v for k, v in REF.items()}
    inv = repeat_figures(_records(REF), [_records(flipped)])
    assert inv["auc_within_task"] == 0.0 and inv["agreement"] == 0.0
    assert inv["max_calibration_gap"] == pytest.approx(0.0)  # task rates: 2/4 -> 2/4, 1/2 -> 1/2


def test_more_repeats_average_the_noise_and_ties_count_half():
    # task 0: the two successes succeed on 2 of 2 and 1 of 2 repeats; the failures on 1 of 2 and 0 of 2
    r1 = {**REF, (0, 11): False, (0, 12): True}
    r2 = dict(REF)
    f = repeat_figures(_records(REF), [_records(r1), _records(r2)])
    # task 0 with both repeats: success probs 1, .5 vs failure probs .5, 0 -> wins 1 + 1 + 0.5 + 1 of 4;
    # task 1: 1 of 1. Pooled within task: (3.5 + 1) / 5
    assert f["auc_within_task"] == pytest.approx(4.5 / 5)
    # one repeat at a time: r1 wins task 0 by 1 (init 10 over 13) + 2 ties of 4 pairs, and task 1: (2 + 1) / 5;
    # r2 is the reference itself
    single = [repeat_figures(_records(REF), [_records(r)])["auc_within_task"] for r in (r1, r2)]
    assert single == pytest.approx([0.6, 1.0]) and f["auc_by_repeats"][0] == pytest.approx(np.mean(single))
    assert f["agreement"] == pytest.approx((4 / 6 + 1) / 2)
    by_task = {r["task_id"]: r for r in f["calibration"]}
    assert by_task[0]["reference_successes"] == 2 and by_task[0]["repeat_rate"] == pytest.approx(0.5)
    # one repeat as the judge of the gate's calibration check: r1 has task 0 at 2/4 like the recording (its
    # flips cancel), r2 is the recording
    assert f["max_calibration_gap_by_repeat"] == [0.0, 0.0]
    r3 = {**REF, (0, 12): True, (1, 11): True}  # task 0: 3/4 against 2/4; task 1: 2/2 against 1/2
    f3 = repeat_figures(_records(REF), [_records(r3), _records(r2)])
    assert f3["max_calibration_gap_by_repeat"] == [0.5, 0.0]
    # the paired tests with one repeat as the judge: r3 errs on two jobs, both imagined successes that failed
    assert [(a["task_id"], a["optimistic"], a["pessimistic"]) for a in f3["paired_calibration_by_repeat"][0]] == [
        (0, 1, 0), (1, 1, 0)]
    # one discordant job a task is no evidence: its McNemar term is 1 whichever way it falls
    assert f3["joint_calibration_p_by_repeat"] == pytest.approx([1.0, 1.0])
    assert f["joint_calibration_p_by_repeat"][0] == pytest.approx(1.0)  # r1's two flips in task 0 cancel
    lo, hi = f["auc_within_task_ci95"]
    assert 0 <= lo <= f["auc_within_task"] <= hi <= 1


def test_repeats_must_hold_the_reference_jobs():
    with pytest.raises(ValueError, match=r"repeat 1: expected the reference's 6 jobs .*missing \[\(1, 11\)\]"):
        repeat_figures(_records(REF), [_records({k: v for k, v in REF.items() if k != (1, 11)})])
    twice = _records(REF) + _records({(0, 10): True})
    with pytest.raises(ValueError, match=r"reference: job \(task 0, init state 10\) appears twice"):
        repeat_figures(twice, [_records(REF)])
    with pytest.raises(ValueError, match="at least one repeated evaluation"):
        repeat_figures(_records(REF), [])
    with pytest.raises(ValueError, match="missing 'success'"):
        repeat_figures([{"task_id": 0, "init_state_id": 1}], [_records(REF)])


def test_a_judge_is_set_against_reality_with_one_repeat_on_the_same_jobs():
    from imagination.eval.repeatability import judge_gap

    r1 = {**REF, (0, 11): False, (0, 12): True}  # single-repeat AUC 0.6 (above)
    perfect = {k: float(v) for k, v in REF.items()}
    g = judge_gap(perfect, _records(REF), [_records(r1), _records(REF)])
    assert g["judge_auc_within_task"] == 1.0 and g["reality_auc_within_task_1_repeat"] == pytest.approx(0.8)
    assert g["gap"] == pytest.approx(0.2)
    lo, hi = g["gap_ci95"]
    assert 0.0 <= lo <= 0.2 <= hi <= 0.5  # a resample never makes the perfect judge worse than a repeat
    blind = judge_gap({k: 0.5 for k in REF}, _records(REF), [_records(REF)])
    assert blind["judge_auc_within_task"] == 0.5 and blind["gap"] == -0.5 and blind["gap_ci95"] == [-0.5, -0.5]
    with pytest.raises(ValueError, match="expected the reference's 6 jobs"):
        judge_gap({(0, 10): 1.0}, _records(REF), [_records(REF)])
