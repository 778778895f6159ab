"""The paired difference of two evaluations of the same jobs (imagination/eval/stats.py), on hand-made records."""
import math
from collections.abc import Sequence

import pytest

from imagination.eval.stats import paired_difference


def _records(successes: Sequence[int], task: int = 0) -> list[dict]:
    return [{"task_id": task, "init_state_id": 20 + j, "seed": j, "success": s} for j, s in enumerate(successes)]


def test_identical_evaluations_differ_by_zero_with_a_zero_width_interval():
    r = _records([True, False, True, True])
    d = paired_difference(r, r)
    assert (d.n, d.before, d.after, d.diff, d.ci95, d.improved, d.worsened) == (4, 0.75, 0.75, 0.0, (0.0, 0.0), 0, 0)


def test_gain_and_interval_match_a_hand_computed_paired_t_interval():
    before = _records([False] * 6 + [True] * 4)
    after = _records([True, True, True, False, False, False, True, True, True, False])  # 3 gained, 1 lost
    d = paired_difference(before, after)
    assert (d.improved, d.worsened) == (3, 1)
    assert d.diff == pytest.approx(0.2) and d.gain_points == pytest.approx(20.0)
    diffs = [1, 1, 1, 0, 0, 0, 0, 0, 0, -1]
    mean = sum(diffs) / 10
    sd = math.sqrt(sum((x - mean) ** 2 for x in diffs) / 9)
    half = 2.2621571628 * sd / math.sqrt(10)  # t(0.975, 9 dof)
    assert d.ci95 == pytest.approx((mean - half, mean + half), abs=1e-6)
    assert d.ci95_points[0] < 0 < d.ci95_points[1]  # 3 vs 1 of 10 jobs is no evidence either way


def test_pairing_is_by_job_not_by_position():
    before = _records([True, False])
    after = list(reversed(_records([True, False])))
    assert paired_difference(before, after).diff == 0.0


def test_a_consistent_gain_over_many_jobs_has_an_interval_above_zero():
    before = _records([False] * 150)
    after = _records([j % 4 == 0 for j in range(150)])  # 38 jobs gained, none lost
    d = paired_difference(before, after)
    assert d.ci95[0] > 0 and d.gain_points == pytest.approx(100 * 38 / 150)


def test_evaluations_of_different_jobs_are_refused():
    with pytest.raises(ValueError, match="same jobs"):
        paired_difference(_records([True, False]), _records([True, False], task=1))
    with pytest.raises(ValueError, match="twice"):
        paired_difference(_records([True]) * 2, _records([True]) * 2)
    with pytest.raises(ValueError, match="missing"):
        paired_difference([{"task_id": 0, "success": True}], [{"task_id": 0, "success": True}])


def test_the_same_job_in_two_suites_is_two_jobs():
    """A loop over several suites merges their records (task ids repeat across suites), tagged by suite."""
    before = [{**r, "suite": s} for s in ("libero_spatial", "libero_object") for r in _records([False])]
    after = [{**before[0], "success": True}, before[1]]
    d = paired_difference(before, after)
    assert (d.n, d.improved, d.worsened) == (2, 1, 0)
    with pytest.raises(ValueError, match="same jobs"):
        paired_difference(before, [after[0], {**after[1], "suite": "libero_goal"}])


def test_seed_average_is_the_job_mean_over_seeds_with_its_spread():
    from imagination.eval.stats import seed_average

    before = _records([0, 0, 1, 1])
    seeds = [_records([1, 0, 1, 1]), _records([1, 1, 1, 0])]  # +1/4 and +1/4: spread 0
    avg = seed_average(before, seeds)
    # per job: (1+1)/2-0, (0+1)/2-0, 1-1, (1+0)/2-1 -> mean (1 + 0.5 + 0 - 0.5) / 4
    assert avg.difference.gain_points == pytest.approx(25.0)
    assert avg.per_seed == (0.75, 0.75) and avg.seed_sd_points == 0.0
    assert seed_average(before, [seeds[0]]).difference.gain_points == pytest.approx(
        paired_difference(before, seeds[0]).gain_points)
    with pytest.raises(ValueError, match="at least one seed"):
        seed_average(before, [])
    with pytest.raises(ValueError, match="same jobs"):
        seed_average(before, [seeds[0][:3]])


def test_seed_average_against_a_baseline_run_with_seeds_too_takes_its_job_mean():
    from imagination.eval.stats import seed_average

    old = [_records([0, 0, 1, 1]), _records([0, 0, 0, 0])]  # per job 0, 0, 0.5, 0.5
    new = [_records([1, 0, 1, 1]), _records([1, 1, 1, 0])]  # per job 1, 0.5, 1, 0.5
    avg = seed_average(old[0], new, before_seeds=[old[1]])
    assert avg.difference.before == pytest.approx(0.25) and avg.difference.after == pytest.approx(0.75)
    assert avg.difference.gain_points == pytest.approx(50.0)  # per job 1, 0.5, 0.5, 0
    assert (avg.difference.improved, avg.difference.worsened) == (3, 0)
    assert seed_average(old[0], new).difference.gain_points == pytest.approx(25.0)  # the first seed alone
    with pytest.raises(ValueError, match="same jobs"):
        seed_average(old[0], new, before_seeds=[old[1][:3]])


def test_seeds_bench_prints_a_bench_line(tmp_path, capsys):
    import json

    from bench.seeds import main

    paths = []
    for name, outcomes in (("bc", [0, 0, 1, 1] * 10), ("s0", [1, 1, 1, 1] * 10), ("s1", [1, 0, 1, 1] * 10)):
        p = tmp_path / f"{name}.json"
        p.write_text(json.dumps({"episodes": _records(outcomes)}))
        paths.append(str(p))
    assert main(paths) == 0  # +37.5 points, the interval above 0
    line = capsys.readouterr().out.strip().splitlines()[-1]
    assert line.startswith("BENCH seeds seeds=2 baseline_seeds=1 jobs=40") and "gain_points=+37.5" in line
    assert line.endswith("PASS")
    assert main([paths[0], paths[0], "--threshold", "1"]) == 1
    # the baseline a recipe with two seeds (bc and s1: per job 0.5, 0, 1, 1, mean 0.625): s0 (all 1) gains 37.5
    assert main([paths[0], paths[1], "--baseline-seeds", paths[2]]) == 0
    out = capsys.readouterr().out
    assert "baseline: 25.0/40, the mean of 2 seeds" in out
    assert "BENCH seeds seeds=1 baseline_seeds=2 jobs=40 before=0.625 after=1.000 gain_points=+37.5" in out
