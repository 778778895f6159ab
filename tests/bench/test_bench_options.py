"""Benchmark options that need no long run: wm_speed with a given real rate and device, rl_gain --rl-run.
(The benchmarks themselves are run by hand: bench/README in the main README.)"""
import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _load(name: str):
    spec = importlib.util.spec_from_file_location(f"bench_{name}", ROOT / "bench" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_wm_speed_with_a_given_real_rate_passes_and_fails_on_its_threshold(capsys):
    wm_speed = _load("wm_speed")
    args = ["--batches", "1", "--sampler-steps", "1", "--seconds", "0.01", "--device", "cpu", "--threads", "1"]
    assert wm_speed.main(args + ["--real-steps-per-s", "0.001"]) == 0
    line = capsys.readouterr().out.strip().splitlines()[-1]
    assert line.startswith("BENCH wm_speed") and "real_source=given" in line and "device=cpu" in line
    assert line.endswith("PASS")
    # no CPU imagines a billion frames a second: the same run against an absurd real rate must fail
    assert wm_speed.main(args + ["--real-steps-per-s", "1e9"]) == 1
    assert capsys.readouterr().out.strip().endswith("FAIL")


def _rl_run(tmp_path: Path, started_from: str) -> Path:
    run = tmp_path / "rl"
    run.mkdir()
    (run / "config.yaml").write_text(f"policy: {started_from}\niterations: 3\n")
    (run / "result.json").write_text(json.dumps({"real_env_steps": 0, "iterations": 3, "history": []}))
    (run / "policy.pt").write_bytes(b"weights")
    return run


def test_rl_gain_reads_a_finished_rl_run_made_elsewhere(tmp_path):
    rl_gain = _load("rl_gain")
    run = _rl_run(tmp_path, "/elsewhere/carry/policy_step300.pt")
    got = rl_gain.finished_rl_run(run, "outputs/bc/policy_step300.pt")
    assert got["policy_path"] == str(run / "policy.pt") and got["real_env_steps"] == 0


def test_rl_gain_rejects_a_run_from_another_policy_or_an_unfinished_one(tmp_path):
    rl_gain = _load("rl_gain")
    run = _rl_run(tmp_path, "bc/policy.pt")
    with pytest.raises(SystemExit, match="not from --bc"):
        rl_gain.finished_rl_run(run, "bc/policy_step300.pt")
    (run / "result.json").unlink()
    with pytest.raises(SystemExit, match="result.json not found"):
        rl_gain.finished_rl_run(run, "bc/policy.pt")


def test_rl_gain_prints_per_task_changes_and_how_failures_happened():
    from imagination.evaluate import summarize

    rl_gain = _load("rl_gain")

    def result(outcomes: list[str], with_outcome: bool = True) -> dict:
        records = [{"task_id": 0, "success": o == "success", "steps": 10, **({"outcome": o} if with_outcome else {})}
                   for o in outcomes]
        return summarize(records, {0: "pick up the bowl"})

    before = result(["success", "never lifted", "never lifted", "lifted, not placed"])
    after = result(["success", "success", "never lifted", "success"])
    history = [{"imagined_success_task0": v} for v in (0.2, 0.4, 0.6, 0.8)]
    lines = rl_gain.per_task_lines(before, after, history)
    assert lines[0].startswith("task 0: BC 1/4  ->  RL 3/4   imagined during RL 0.30 -> 0.70")
    assert lines[1:] == ["BC failures: never lifted 2, lifted, not placed 1", "RL failures: never lifted 1"]
    # results written before outcomes existed: no failure lines
    old = result(["success", "never lifted"], with_outcome=False)
    assert len(rl_gain.per_task_lines(old, old, history)) == 1
