"""The report's own-gain section (imagination/loop/report_gain.py): each RL phase against the better control, and
the jobs that would resolve it."""
from imagination.loop.report_gain import jobs_to_resolve, own_gain_lines


def _result(outcomes: list[bool]) -> dict:
    eps = [{"task_id": 0, "init_state_id": j, "seed": j, "success": ok} for j, ok in enumerate(outcomes)]
    return {"episodes": eps, "overall": {"successes": sum(outcomes), "episodes": len(outcomes)}}


def test_the_rl_phase_is_scored_against_the_better_control():
    phases = [{"name": "bc", "label": "BC"}, {"name": "control", "label": "real-data control"},
              {"name": "round1", "label": "after imagined RL", "rl": "round1/rl"}]
    real = {"bc": _result([True, False] * 10), "control": _result([True, True, True, False] * 5),
            "round1": _result([True, True, False, True] * 5)}
    text = "\n".join(own_gain_lines(phases, real))
    row = next(line for line in text.splitlines() if line.startswith("| after imagined RL"))
    assert "| 15/20 | +25.0 [" in row and "+0.0 [" in row and "against real-data control" in row
    control_row = next(line for line in text.splitlines() if line.startswith("| real-data control"))
    assert control_row.endswith("| - | - |")  # a control has no own gain of its own


def test_without_the_control_it_says_what_is_missing():
    lines = own_gain_lines([{"name": "bc", "label": "BC"}], {"bc": _result([True, False])})
    assert any("Not measured" in line and "control_arm" in line for line in lines)


def test_jobs_to_resolve_scale_with_the_square_of_the_interval():
    assert jobs_to_resolve(30, 20.0) == 120  # half the width needs four times the jobs
    assert jobs_to_resolve(150, 8.0) == 150  # already narrower than +-10: no more jobs
    assert jobs_to_resolve(30, 0.0) == 30
