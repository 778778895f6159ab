"""The gate's paired calibration tests on hand-made jobs: per-task exact McNemar, Holm's correction, and the
joint test over tasks against its own definition (a fair coin for every discordant job)."""
import numpy as np
import pytest
from scipy.stats import binomtest

from imagination.eval.reward_gate import (
    TaskAgreement,
    TaskCalibration,
    calibration_checks,
    exact_judge_gap_p_value,
    exact_judge_pass_chance,
    gate_figures,
    holm_adjust,
    jobs_for_exact_judge,
    joint_calibration_p_value,
    paired_calibration,
)


def _agreement(opt: int, pes: int, task: int = 0, jobs: int = 10) -> TaskAgreement:
    return TaskAgreement(task, jobs, opt, pes, binomtest(opt, opt + pes, 0.5).pvalue if opt + pes else 1.0)


def test_paired_calibration_counts_the_discordant_jobs_of_each_task():
    probs = np.array([0.9, 0.9, 0.1, 0.1, 0.6, 0.2, 0.2, 0.2])
    labels = np.array([1, 0, 1, 0, 0, 1, 1, 1], bool)
    tasks = np.array([0, 0, 0, 0, 2, 2, 2, 2])
    rows = paired_calibration(probs, labels, tasks, threshold=0.5)
    assert [(r.task_id, r.jobs, r.optimistic, r.pessimistic) for r in rows] == [(0, 4, 1, 1), (2, 4, 1, 3)]
    assert rows[0].p_value == 1.0  # one each way: nothing to see
    assert rows[1].p_value == pytest.approx(binomtest(1, 4, 0.5).pvalue)
    # The rate gap alone (task 0: 2/4 imagined, 2/4 real) would hide the two jobs that disagree.
    assert gate_figures([{"task_id": 0, "real_success": bool(y), "max_success_prob": p}
                         for p, y in zip(probs[:4], labels[:4])], 0.5)["calibration"][0]["gap"] == 0.0


def test_a_judge_that_agrees_on_every_job_is_not_questioned():
    rows = paired_calibration([0.9, 0.1, 0.8], [1, 0, 1], [3, 3, 3], threshold=0.5)
    assert rows == [TaskAgreement(3, 3, 0, 0, 1.0)]
    assert joint_calibration_p_value(rows) == 1.0


def test_holm_adjust_by_hand_and_in_the_input_order():
    assert holm_adjust([0.04, 0.01, 0.03]) == pytest.approx([0.06, 0.03, 0.06])  # 3 x .01, 2 x .03, max(.06, .04)
    assert holm_adjust([0.5, 0.9]) == [1.0, 1.0]  # capped at 1
    assert holm_adjust([]) == []


@pytest.mark.parametrize("tests, needed", [(5, 8), (10, 9)])
def test_ten_jobs_a_task_show_a_task_miscalibrated_only_from_this_many_discordant_jobs(tests, needed):
    # One task with k jobs all imagined failures that really succeeded, the other tasks in full agreement.
    def shown(k: int) -> bool:
        rows = [_agreement(0, k)] + [_agreement(0, 0, t) for t in range(1, tests)]
        return holm_adjust([r.p_value for r in rows])[0] < 0.05

    assert shown(needed) and not shown(needed - 1)


def test_joint_test_of_one_task_is_its_mcnemar_test():
    for opt, pes in [(0, 5), (1, 6), (3, 3), (2, 7)]:
        assert joint_calibration_p_value([_agreement(opt, pes)]) == pytest.approx(binomtest(opt, opt + pes).pvalue)


def test_opposite_errors_on_two_tasks_add_up_instead_of_cancelling():
    both = joint_calibration_p_value([_agreement(5, 0, 0), _agreement(0, 5, 1)])
    assert both == pytest.approx(1 / 256)  # only all ten coins landing where they did, each task either way
    assert both < min(_agreement(5, 0).p_value, _agreement(0, 5).p_value)


def test_joint_p_value_matches_flipping_the_discordant_jobs_at_random():
    rows = [_agreement(1, 6, 0), _agreement(0, 5, 1), _agreement(5, 0, 2), _agreement(2, 0, 3), _agreement(0, 4, 4)]
    d = np.array([r.optimistic + r.pessimistic for r in rows])
    observed = sum((r.optimistic - r.pessimistic) ** 2 / (r.optimistic + r.pessimistic) for r in rows)
    opt = np.random.default_rng(0).binomial(d, 0.5, size=(200_000, len(d)))
    simulated = ((2 * opt - d) ** 2 / d).sum(axis=1)
    assert joint_calibration_p_value(rows) == pytest.approx((simulated >= observed - 1e-9).mean(), abs=3e-4)


def test_gate_figures_carry_the_paired_tests():
    records = [{"task_id": t, "real_success": True, "max_success_prob": 0.1} for t in (0, 1) for _ in range(6)]
    figs = gate_figures(records, threshold=0.5)
    assert [r["pessimistic"] for r in figs["paired_calibration"]] == [6, 6]
    assert figs["joint_calibration_p_value"] == pytest.approx((2 / 64) ** 2 * 1.0, rel=1e-9)
    assert TaskCalibration.from_dict(figs["calibration"][1]) == TaskCalibration(1, 6, 6, 0)


def test_calibration_checks_take_every_policys_tasks_together():
    def records(optimistic_per_task: list[int]) -> list[dict]:
        # 10 jobs a task, 5 real successes; `k` of the real failures imagined as successes
        return [{"task_id": t, "real_success": j < 5, "max_success_prob": 0.9 if j < 5 + k else 0.1}
                for t, k in enumerate(optimistic_per_task) for j in range(10)]

    figs = {"bc": gate_figures(records([5, 0]), 0.5), "rl": gate_figures(records([1, 2, 0]), 0.5)}
    c = calibration_checks(figs, ["bc", "rl"])
    assert c.tests == 5 and [len(c.holm[n]) for n in ("bc", "rl")] == [2, 3]
    by_hand = holm_adjust([binomtest(k, k, 0.5).pvalue if k else 1.0 for k in (5, 0, 1, 2, 0)])
    assert c.holm["bc"] + c.holm["rl"] == pytest.approx(by_hand)
    assert c.shown == []  # 5 of 5 one way is p = 1/16 before correction: not shown among 5 tasks
    rows = [TaskCalibration.from_dict(r) for n in ("bc", "rl") for r in figs[n]["calibration"]]
    assert c.max_gap == pytest.approx(0.5)  # bc task 0: 10 of 10 imagined, 5 of 10 real
    assert c.exact_chance == pytest.approx(exact_judge_pass_chance(rows))  # independent jobs: the product
    assert c.gap_p == pytest.approx(exact_judge_gap_p_value(rows, 0.5))
    assert c.jobs_needed == jobs_for_exact_judge(rows)
    assert c.joint_p == pytest.approx(joint_calibration_p_value(
        [TaskAgreement(**a) for n in ("bc", "rl") for a in figs[n]["paired_calibration"]]))
