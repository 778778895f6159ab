"""bench/rl_gain_report.py: the lines the benchmark prints about each arm and each seed's RL run."""
from bench.rl_gain_report import headroom_line, kept_line, per_task_lines


def test_rl_gain_prints_per_task_changes_and_how_failures_happened():
    from imagination.eval.evaluate import summarize

    def result(outcomes: list[str], with_outcome: bool = True) -> dict:
        records = [{"task_id": 0, "success": o == "success", "steps": 10, **({"outcome": o} if with_outcome else {})}
                   for o in outcomes]
        return summarize(records, {0: "pick up the bowl"})

    before = result(["success", "never lifted", "never lifted", "lifted, not placed"])
    after = result(["success", "success", "never lifted", "success"])
    history = [{"imagined_success_task0": v} for v in (0.2, 0.4, 0.6, 0.8)]
    lines = per_task_lines(before, after, history)
    assert lines[0].startswith("task 0: BC 1/4  ->  RL 3/4   imagined during RL 0.30 -> 0.70")
    assert lines[1:] == ["BC failures: never lifted 2, lifted, not placed 1", "RL failures: never lifted 1"]
    # results written before outcomes existed: no failure lines
    old = result(["success", "never lifted"], with_outcome=False)
    assert len(per_task_lines(old, old, history)) == 1


def test_rl_gain_headroom_line_names_tasks_at_ceiling_or_floor():
    res = {"per_task": {"0": {"success_rate": 0.2}, "1": {"success_rate": 1.0}, "2": {"success_rate": 0.5}}}
    assert headroom_line(res).startswith("BC headroom: tasks outside 15-65%: task 1 100%")
    res["per_task"]["1"]["success_rate"] = 0.65
    assert headroom_line(res) == "BC headroom: every task within 15-65% real success"


def test_rl_gain_says_when_the_held_out_check_kept_no_rl_update():
    assert "kept iteration 0: this seed's policy is the recipe's start, no RL update" in kept_line(
        {"scores": [[0, 0.05], [2, 0.05]], "best_iteration": 0})
    assert kept_line({"best_iteration": 2}) == "; the held-out check kept iteration 2"
    assert kept_line(None) == "" and kept_line({}) == ""  # no check: the last iteration, unsaid
