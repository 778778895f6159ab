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


def _records(successes: dict[int, list[bool]]) -> list[dict]:
    """Episode records of one task: {init_state_id: [success per episode]} (one seed per episode index)."""
    return [{"task_id": 0, "init_state_id": i, "seed": k, "success": s, "steps": 100}
            for i, runs in successes.items() for k, s in enumerate(runs)]


def test_the_own_gain_is_split_into_training_and_held_out_init_states():
    from bench.rl_gain_report import split_by_training_layouts, split_lines

    # init states 0-1 trained on, 2-3 held out: the recipe wins every trained job and none of the held-out ones
    start = _records({0: [False] * 5, 1: [False] * 5, 2: [True, False] * 2 + [True], 3: [False] * 5})
    seed = _records({0: [True] * 5, 1: [True] * 5, 2: [True, False] * 2 + [True], 3: [False] * 5})
    control = _records({0: [False] * 5, 1: [True] + [False] * 4, 2: [True] * 5, 3: [False] * 5})
    parts = split_by_training_layouts({"start": start, "control": control}, [seed], train_init_states=2)
    assert list(parts) == ["trained", "held out"]
    best, trained = parts["trained"]
    assert (best, trained.difference.n) == ("control", 10) and abs(trained.difference.gain_points - 90.0) < 1e-9
    best, held = parts["held out"]
    # the control's 5/10 beats the start's 3/10 there: the own gain is against it
    assert (best, held.difference.n) == ("control", 10) and abs(held.difference.gain_points + 20.0) < 1e-9
    lines = split_lines(parts, 2)
    assert lines[0].startswith("own gain on init states 0-1, which the recipe trained on: +90.0 points")
    assert lines[1].startswith("own gain on held-out layouts: -20.0 points")


def test_drawn_layouts_the_recipe_started_from_count_as_trained():
    from bench.rl_gain_report import split_by_training_layouts, split_lines
    from envs.libero_suites import DRAWN_LAYOUT_BASE as D

    # drawn layouts 0-1 were the recipe's starts (trained), drawn layout 5 and init state 3 were not
    start = _records({0: [False] * 4, D: [False] * 4, D + 1: [False] * 4, D + 5: [True] * 4, 3: [False] * 4})
    seed = _records({0: [True] * 4, D: [True] * 4, D + 1: [True] * 4, D + 5: [False] * 4, 3: [False] * 4})
    parts = split_by_training_layouts({"start": start}, [seed], train_init_states=2, drawn=2)
    assert parts["trained"][1].difference.n == 12 and abs(parts["trained"][1].difference.gain_points - 100.0) < 1e-9
    assert parts["held out"][1].difference.n == 8 and abs(parts["held out"][1].difference.gain_points + 50.0) < 1e-9
    assert "init states 0-1 and drawn layouts 0-1, which" in split_lines(parts, 2, drawn=2)[0]
    # without the drawn starts, every drawn layout is held out
    assert split_by_training_layouts({"start": start}, [seed], train_init_states=2)["held out"][1].difference.n == 16


def test_no_split_on_jobs_of_one_kind_or_records_without_init_states():
    from bench.rl_gain_report import split_by_training_layouts

    bench_jobs = _records({20: [True, False], 21: [False, False]})
    assert split_by_training_layouts({"start": bench_jobs}, [bench_jobs], train_init_states=10) == {}
    old = [{k: v for k, v in r.items() if k != "init_state_id"} for r in _records({0: [True], 15: [False]})]
    assert split_by_training_layouts({"start": old}, [old], train_init_states=10) == {}


def _arm(successes: dict[int, list[bool]]) -> dict:
    from imagination.eval.evaluate import summarize

    records = _records(successes)
    return {**summarize(records, {0: "pick up the bowl"}), "episodes": records, "timing": {"seconds": 60.0}}


def _report(arms: dict, offset: int) -> tuple[int, str]:
    """report() on these arms of a 3-seed recipe whose judge reads no simulator quantity; (exit status, BENCH line)."""
    import argparse
    import contextlib
    import io
    from dataclasses import replace

    from bench.protocol import RLGainProtocol
    from bench.rl_gain_report import report
    from imagination.rl.training import ImagineRLConfig

    args = argparse.Namespace(protocol="v2", init_state_offset=offset, bc="given", threshold=10.0, min_seeds=3,
                              gate="none", acts="always", rl_from="start", refine_world_model=0, loop_rounds=0,
                              loop_adopt_margin=1.0, gate_margin=0.0, world_model_preset="", recipe_world_model="",
                              recipe_goal_reader="", near_miss_kinds=None)
    cfg = ImagineRLConfig()
    cfg = replace(cfg, imagination=replace(cfg.imagination, reward="grasp", object_reader="reader.pt"))
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        status = report(args, RLGainProtocol(), arms, {}, [], cfg, 0, [])
    return status, out.getvalue().strip().splitlines()[-1]


def test_a_gain_on_the_training_layouts_alone_does_not_pass():
    # 20 jobs on init states 0-9 (trained on) and 20 on 10-19: every seed wins all trained jobs, none held out
    start = _arm({i: [False, False] for i in range(20)})
    seed = _arm({i: [i < 10] * 2 for i in range(20)})
    status, bench = _report({"start": start, "recipe": seed, "recipe1": seed, "recipe2": seed}, offset=0)
    assert "own_gain_points=+50.0" in bench and "heldout_own_gain_points=+0.0" in bench
    assert status == 1 and bench.endswith("FAIL")
    # the same gain on the held-out layouts too passes
    seed = _arm({i: [True, True] for i in range(20)})
    status, bench = _report({"start": start, "recipe": seed, "recipe1": seed, "recipe2": seed}, offset=0)
    assert "heldout_own_gain_points=+100.0" in bench and status == 0 and bench.endswith("PASS")
    # jobs with no training layout (the benchmark's): no split, the verdict as before
    start = _arm({i: [False, False] for i in range(20, 40)})
    seed = _arm({i: [True, True] for i in range(20, 40)})
    status, bench = _report({"start": start, "recipe": seed, "recipe1": seed, "recipe2": seed}, offset=20)
    assert "heldout_own_gain" not in bench and status == 0
