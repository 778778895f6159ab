"""Which policy the loop keeps (imagination/loop/adopt.py): a round is adopted only when it is not shown worse than
the kept policy by more than the margin, paired job by job, and the report says which one the loop kept and why."""
import pytest

from imagination.loop.adopt import adoption, adoption_lines, task_adoption


def _episodes(successes):
    return [{"task_id": j % 3, "init_state_id": 20 + j, "seed": 0, "success": s} for j, s in enumerate(successes)]


def test_a_round_that_loses_is_not_adopted_and_one_that_holds_is():
    kept = _episodes([True] * 25 + [False] * 5)
    worse = _episodes([True] * 20 + [False] * 10)  # 5 jobs lost, none gained: -16.7, interval below 0
    d = adoption(1, "round1", "bc", kept, worse, margin=0.10)
    assert not d["adopted"] and d["kept"] == "bc" and d["diff_points"] == pytest.approx(-16.7, abs=0.05)
    assert d["ci95_points"][0] < -10 and "keeps bc" in d["reason"]
    same = adoption(1, "round1", "bc", kept, kept, margin=0.10)
    assert same["adopted"] and same["kept"] == "round1" and same["ci95_points"] == [0.0, 0.0]
    # the margin decides: one job lost of 30 is -3.3 [-10.2, +3.5], within 15 points but not within 10
    one_lost = _episodes([True] * 24 + [False] * 6)
    assert adoption(2, "round2", "round1", kept, one_lost, 0.15)["adopted"]
    assert not adoption(2, "round2", "round1", kept, one_lost, 0.10)["adopted"]
    assert not adoption(2, "round2", "round1", kept, worse, 0.0)["adopted"]
    assert adoption(2, "round2", "round1", kept, worse, 1.0)["adopted"]  # 1.0 adopts every round
    with pytest.raises(ValueError, match="adopt_margin"):
        adoption(1, "round1", "bc", kept, kept, margin=1.5)
    with pytest.raises(ValueError, match="same jobs"):
        adoption(1, "round1", "bc", kept, _episodes([True] * 29), margin=0.1)


def test_the_report_names_the_policy_the_loop_kept_and_why():
    kept = _episodes([True] * 25 + [False] * 5)
    records = [adoption(1, "round1", "bc", kept, kept, 0.1),
               adoption(2, "round2", "round1", kept, _episodes([True] * 20 + [False] * 10), 0.1)]
    md = "\n".join(adoption_lines(records))
    assert "| 1 | round1 | bc |" in md and "| 2 | round2 | round1 |" in md
    assert "The loop's policy: **round1**" in md and "keeps round1" in md
    assert "No round was decided" in "\n".join(adoption_lines([]))


def test_each_task_is_decided_on_its_own_jobs():
    def tasks(per_task):  # {task: successes of 20 jobs}
        return [{"task_id": t, "init_state_id": j, "seed": 0, "success": j < n} for t, n in per_task.items()
                for j in range(20)]
    start = tasks({5: 12, 7: 10, 8: 16})
    tuned = tasks({5: 4, 7: 18, 8: 16})  # task 5 collapses, task 7 gains, task 8 is unchanged
    d = task_adoption("start", "rl", start, tuned, margin=0.10)
    assert sorted(d) == [5, 7, 8]
    assert not d[5]["adopted"] and d[5]["jobs"] == 20 and d[5]["diff_points"] == pytest.approx(-40.0)
    assert d[7]["adopted"] and d[7]["kept"] == "rl" and d[8]["adopted"] and d[8]["task"] == 8
    # the whole-policy decision on the same jobs throws task 7's gain away with task 5's loss
    assert adoption(1, "rl", "start", start, tuned, 0.10)["adopted"] is False
