"""bench/choose_start.py: a suite's protocol-v2 setting chosen on init states 0-19 and recorded for rl_gain --suite.
Collection, BC and real evaluation are replaced by recorders (each is tested in its own package); what is checked is
which jobs every candidate is scored on, which one is kept, when a setting is recorded and when it is refused."""
import json
from pathlib import Path

import pytest

import bench.choose_start as choose_start
from bench.ledger import record_scored
from bench.protocol import PROTOCOL_V2, setting_path, suite_protocol
from imagination.eval.evaluate import summarize


@pytest.fixture
def sweep(monkeypatch):
    """Recorders; `rates[steps]` is the success each candidate's evaluation reports (per episode, in order)."""
    calls: dict[str, list] = {"collect": [], "bc": [], "eval": []}
    rates: dict[int, float] = {}

    def collect(p, loop):
        calls["collect"].append(p)
        return p.path("data")

    def bc(cfg):
        calls["bc"].append(cfg)
        Path(cfg.out_dir).mkdir(parents=True, exist_ok=True)
        Path(cfg.out_dir, "policy.pt").write_text("{}")
        Path(cfg.out_dir, "result.json").write_text(json.dumps({"steps": cfg.steps}))

    def evaluate(cfg, label):
        calls["eval"].append(cfg)
        steps = int(Path(cfg.checkpoint).parent.name[2:])
        n = cfg.episodes_per_task * len(cfg.tasks)
        wins = round(rates[steps] * n)
        eps = [{"task_id": cfg.tasks[k // cfg.episodes_per_task], "success": k < wins, "steps": 100}
               for k in range(n)]
        return {**summarize(eps, {t: f"task {t}" for t in cfg.tasks}), "episodes": eps}

    monkeypatch.setattr(choose_start, "collect_data", collect)
    monkeypatch.setattr(choose_start, "train_bc_on_data", bc)
    monkeypatch.setattr(choose_start, "evaluate_or_reuse", evaluate)
    return calls, rates


def test_the_most_successful_start_in_the_band_is_recorded_and_read_by_the_suites_protocol(tmp_path, sweep, capsys):
    calls, rates = sweep
    rates.update({1000: 0.3, 2000: 0.55, 4000: 0.55})  # a tie: the fewer steps
    root = tmp_path / "object"
    assert choose_start.main(["--suite", "libero_object", "--tasks", "0", "3", "--root", str(root)]) == 0
    assert [c.steps for c in calls["bc"]] == [1000, 2000, 4000]
    assert all(c.episodes_per_task == 1 and c.data_dir == str(root / "data") for c in calls["bc"])
    # every candidate on the choose jobs: init states 0-19 of the setting's tasks, never the benchmark's 20-49
    assert all(e.init_state_offset == 0 and e.episodes_per_task == 20 and e.tasks == [0, 3] and e.env == "libero_object"
               for e in calls["eval"])
    setting = json.loads(setting_path(str(root)).read_text())
    assert setting["bc_steps"] == 2000 and setting["candidates"]["1000"]["successes"] == 12
    assert (root / "bc" / "policy.pt").is_file() and not (root / "bc" / "eval_0_19").exists()
    out = capsys.readouterr().out
    assert "BENCH choose_start suite=libero_object tasks=0,3 demos=1" in out and "chosen_steps=2000 rate=0.550" in out
    p = suite_protocol("libero_object", str(root))
    assert (p.suite, p.tasks, p.bc_demos_per_task, p.bc_steps, p.root) == ("libero_object", (0, 3), 1, 2000, str(root))
    assert p.job_sets()["bench"] == set(range(20, 50))


def test_a_start_outside_the_band_records_nothing_and_fails(tmp_path, sweep, capsys):
    _, rates = sweep
    rates.update({2000: 0.9})
    root = tmp_path / "object"
    assert choose_start.main(["--suite", "libero_object", "--steps", "2000", "--root", str(root)]) == 1
    assert not setting_path(str(root)).exists() and not (root / "bc").exists()
    assert "outside 20-70%: nothing recorded" in capsys.readouterr().out
    with pytest.raises(ValueError, match="no setting is chosen for it yet .*choose_start.py --suite libero_object"):
        suite_protocol("libero_object", str(root))


def test_a_setting_is_not_chosen_again_once_rl_was_scored_on_it(tmp_path, sweep):
    _, rates = sweep
    rates.update({2000: 0.5})
    root = tmp_path / "ten"
    assert choose_start.main(["--suite", "libero_10", "--steps", "2000", "--root", str(root)]) == 0
    record_scored(root / "scored.json", {"recipe": {"name": "any"}})
    with pytest.raises(ValueError, match="recipes have been scored on this setting's benchmark jobs"):
        choose_start.main(["--suite", "libero_10", "--steps", "2000", "--root", str(root)])


def test_recorded_settings_are_kept_and_unknown_suites_are_refused(tmp_path):
    assert suite_protocol("libero_spatial") == PROTOCOL_V2
    # LIBERO-Goal's setting is recorded in the code: a checkout without <root>/setting.json scores the same jobs
    goal = suite_protocol("libero_goal")
    assert (goal.tasks, goal.bc_demos_per_task, goal.bc_steps, goal.root) == (
        (0, 1, 2, 3, 4), 1, 2000, "outputs/bench/rl_gain_v2_goal")
    assert suite_protocol("libero_goal", str(tmp_path / "elsewhere")).tasks == goal.tasks
    assert suite_protocol("libero_10").tasks == (2, 4, 5, 6, 7)
    for suite in ("libero_spatial", "libero_goal", "libero_10"):
        with pytest.raises(ValueError, match=f"holds protocol v2's {suite} setting, chosen and recorded already"):
            choose_start.main(["--suite", suite])
    with pytest.raises(ValueError, match="--suite: expected one of"):
        suite_protocol("libero_90")
    bad = tmp_path / "bad"
    bad.mkdir()
    setting_path(str(bad)).write_text(json.dumps({"suite": "libero_goal", "tasks": [0]}))
    with pytest.raises(ValueError, match="missing \\['bc_demos_per_task', 'bc_steps'\\]"):
        suite_protocol("libero_goal", str(bad))


def test_a_root_holds_one_setting_and_another_is_refused_before_anything_is_reused(tmp_path, sweep):
    calls, rates = sweep
    rates.update({2000: 0.95})
    root = tmp_path / "object"
    first = ["--suite", "libero_object", "--tasks", "5", "6", "--steps", "2000", "--root", str(root)]
    assert choose_start.main(first) == 1
    assert not setting_path(str(root)).exists()  # 95%: above the band, nothing recorded
    # other tasks under the same root would reuse the first setting's data, BC and evaluation: refused
    with pytest.raises(ValueError, match=r"--root: .* holds the candidates of .*'tasks': \[5, 6\].* another --root"):
        choose_start.main(["--suite", "libero_object", "--tasks", "0", "1", "--steps", "2000", "--root", str(root)])
    with pytest.raises(ValueError, match="under another --root"):
        choose_start.main(["--suite", "libero_object", "--tasks", "5", "6", "--demos", "2", "--root", str(root)])
    assert len(calls["collect"]) == 1 and len(calls["eval"]) == 1
    # the same setting again resumes (here: its other step counts)
    rates.update({1000: 0.5})
    assert choose_start.main(["--suite", "libero_object", "--tasks", "5", "6", "--steps", "1000", "2000",
                              "--root", str(root)]) == 1
