"""Benchmark options that need no long run: wm_speed with a given real rate and device, rl_gain --rl-run.
(The benchmarks themselves are run by hand: bench/README in the main README.)"""
import importlib
import json
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf

from imagination.eval.evaluate import evaluate_or_reuse
from imagination.eval.jobs import EvalConfig

ROOT = Path(__file__).resolve().parents[2]


def _load(name: str):
    return importlib.import_module(f"bench.{name}")


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
    (run / "result.json").write_text(json.dumps({"real_env_steps": 0, "iterations": 3, "history": [], "seconds": 120.0,
                                                       "first": {}, "last": {}}))
    (run / "policy.pt").write_bytes(b"weights")
    return run


def test_rl_gain_reads_a_finished_rl_run_made_elsewhere(tmp_path):
    rl_gain = _load("rl_gain")
    run = _rl_run(tmp_path, "/elsewhere/carry/policy_step300.pt")
    got = rl_gain.finished_rl_run(run, "outputs/bc/policy_step300.pt")
    assert got["policy_path"] == str(run / "policy.pt") and got["real_env_steps"] == 0
    # a run with the held-out check kept its best iterate: that is the policy scored, wherever the run was made
    result = json.loads((run / "result.json").read_text())
    result["policy_path"] = "/elsewhere/rl/best_policy.pt"
    (run / "result.json").write_text(json.dumps(result))
    with pytest.raises(SystemExit, match="best_policy.pt not found"):
        rl_gain.finished_rl_run(run, "outputs/bc/policy_step300.pt")
    (run / "best_policy.pt").write_bytes(b"the best iterate")
    assert rl_gain.finished_rl_run(run, "outputs/bc/policy_step300.pt")["policy_path"] == str(run / "best_policy.pt")


def test_rl_gain_records_the_config_of_the_rl_it_runs(tmp_path, monkeypatch):
    rl_gain = _load("rl_gain")
    from imagination.rl.training import ImagineRLConfig

    def fake_train(cfg):  # what train_rl leaves behind, without the training
        for name in ("result.json", "policy.pt"):
            (Path(cfg.out_dir) / name).write_text(json.dumps({"real_env_steps": 0}))
        return {"policy_path": str(Path(cfg.out_dir) / "policy.pt")}

    monkeypatch.setattr(rl_gain, "train_rl", fake_train)
    cfg = ImagineRLConfig(policy="outputs/bc/policy.pt", out_dir=str(tmp_path / "rl"), seed=2)
    cfg.imagination.grasp_point.task_bias = [1.0] + [0.0] * 9
    rl_gain.run_rl(cfg)
    saved = OmegaConf.load(tmp_path / "rl" / "config.yaml")
    assert saved.seed == 2 and list(saved.imagination.grasp_point.task_bias) == [1.0] + [0.0] * 9
    # so the run can be scored again later with --rl-run
    assert rl_gain.finished_rl_run(tmp_path / "rl", "bc/policy.pt")["policy_path"] == str(tmp_path / "rl" / "policy.pt")


def test_rl_gain_rejects_a_run_from_another_policy_or_an_unfinished_one(tmp_path):
    rl_gain = _load("rl_gain")
    run = _rl_run(tmp_path, "bc/policy.pt")
    with pytest.raises(SystemExit, match="not from --bc"):
        rl_gain.finished_rl_run(run, "bc/policy_step300.pt")
    (run / "result.json").unlink()
    with pytest.raises(SystemExit, match="result.json not found"):
        rl_gain.finished_rl_run(run, "bc/policy.pt")


def _finished_eval(folder: Path, checkpoint: str, successes: list[bool], tasks=(0, 1), per_task=2, offset=20,
                   env: str = "libero_spatial") -> None:
    from imagination.eval.evaluate import summarize

    records = [{"task_id": t, "init_state_id": offset + j, "seed": 100 * t + j, "steps": 50,
                "success": successes[i * per_task + j]} for i, t in enumerate(tasks) for j in range(per_task)]
    result = {**summarize(records, {t: f"task {t}" for t in tasks}), "episodes": records,
              "timing": {"seconds": 60.0},
              "config": {"checkpoint": checkpoint, "tasks": list(tasks), "episodes_per_task": per_task,
                         "init_state_offset": offset, "seed": 0, "env": env}}
    folder.mkdir(parents=True)
    (folder / "results.json").write_text(json.dumps(result))


def _two_arms(tmp_path: Path) -> tuple[Path, list[str]]:
    """A BC file, a finished RL run from it and both arms' finished evaluations (2 tasks x 2 jobs, offset 20):
    BC 1/4, RL 3/4. Returns the output folder and rl_gain's arguments."""
    bc = tmp_path / "bc.pt"
    bc.write_bytes(b"weights")
    run = _rl_run(tmp_path, str(bc))
    out = tmp_path / "bench"
    _finished_eval(out / "eval_bc", str(bc), [False, False, True, False])
    _finished_eval(out / "eval_rl", str(run / "policy.pt"), [True, False, True, True])
    return out, ["--bc", str(bc), "--rl-run", str(run), "--out-dir", str(out), "--tasks", "0", "1",
                 "--episodes-per-task", "2", "--init-state-offset", "20", "--arms", "start", "recipe"]


def test_rl_gain_scores_the_paired_gain_and_needs_its_interval_above_zero(tmp_path, capsys):
    rl_gain = _load("rl_gain")
    out, args = _two_arms(tmp_path)
    assert rl_gain.main(args) == 1  # +50 points, but 2 of 4 jobs cannot put the interval above zero
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[0].startswith("protocol v2: libero_spatial tasks [0, 1]")
    assert "reusing" in lines[1] and lines[2].startswith("BC headroom: tasks outside 15-65%: task 0 0%")
    bench = lines[-1]
    assert bench.startswith("BENCH rl_gain episodes=4 before=0.250 after=0.750 gain_points=+50.0 gain_ci95=[")
    assert "task0=0/2->1 task1=1/2->2" in bench and "real_env_steps_during_rl=0" in bench and bench.endswith("FAIL")
    # with the start as the only control, imagination's own gain is the gain over the start; one seed of 3
    assert "seeds=1 start=0.250 best_control=start own_gain_points=+50.0" in bench
    lo = float(bench.split("gain_ci95=[")[1].split(",")[0])
    assert lo <= 0
    # an evaluation of other jobs is not reused as this arm's: the results were made for offset 20
    assert evaluate_or_reuse(EvalConfig(checkpoint=str(tmp_path / "bc.pt"), tasks=[0, 1], episodes_per_task=2,
                                        init_state_offset=20, out_dir=str(out / "eval_bc")), "BC")["episodes"]


def test_rl_gain_renders_both_arms_at_the_size_asked(tmp_path, monkeypatch):
    rl_gain = _load("rl_gain")
    _, args = _two_arms(tmp_path)
    asked: list[int] = []

    def reuse(cfg, label):  # the arms as written above, whatever the rendering: only the config is checked
        asked.append(cfg.image_size)
        return json.loads((Path(cfg.out_dir) / "results.json").read_text())

    monkeypatch.setattr(rl_gain, "evaluate_or_reuse", reuse)
    rl_gain.main([*args, "--image-size", "128"])
    rl_gain.main(args)
    assert asked == [128, 128, 0, 0]  # BC and RL arms alike; 0 (the policy's own size) by default


def _recorded_build(rl_gain, root: Path, monkeypatch) -> tuple[Path, list]:
    """A BC file under `root` and rl_gain's `build` replaced by a recorder of the protocols it is asked to build."""
    bc = root / "bc" / "policy.pt"
    bc.parent.mkdir(parents=True)
    bc.write_bytes(b"weights")
    built: list = []

    def build(proto, loop):
        built.append(proto)
        return {"bc": str(bc), "world_model": "", "data": ""}

    monkeypatch.setattr(rl_gain, "build", build)
    return bc, built


def test_rl_gain_builds_a_protocol_variant_under_its_own_root(tmp_path, monkeypatch, capsys):
    rl_gain = _load("rl_gain")
    root = tmp_path / "variant"
    bc, built = _recorded_build(rl_gain, root, monkeypatch)
    run = _rl_run(tmp_path, str(bc))
    _finished_eval(root / "run" / "eval_bc", str(bc), [False, True, True, False])
    _finished_eval(root / "run" / "eval_rl", str(run / "policy.pt"), [True, True, True, False])
    rl_gain.main(["--root", str(root), "--bc-augment-noise", "16", "--bc-task-weights", "0.5", "1", "--bc-steps", "600",
                  "--rl-run", str(run), "--tasks", "0", "1", "--episodes-per-task", "2", "--arms", "start", "recipe"])
    (proto,) = built
    assert proto.root == str(root) and proto.bc_augment_noise == 16.0 and proto.bc_task_weights == (0.5, 1.0)
    assert proto.bc_steps == 600
    out = capsys.readouterr().out
    assert f"reusing {root / 'run' / 'eval_bc'}" in out  # the arms default to <root>/run
    assert "BENCH rl_gain episodes=4 before=0.500 after=0.750" in out


def test_reward_ceiling_names_a_missing_input_in_one_line(tmp_path, capsys):
    reward_ceiling = _load("reward_ceiling")
    missing = str(tmp_path / "nowhere" / "world_model.pt")
    assert reward_ceiling.main(["--world-model", missing]) == 2
    out = capsys.readouterr().out.strip().splitlines()
    assert len(out) == 1 and out[0].startswith(f"--world-model: {missing} not found")


def test_rank_takes_extra_policies_files_or_servers(tmp_path):
    from bench.rank_candidates import extra_candidates

    f = tmp_path / "p.pt"
    f.write_bytes(b"x")
    got = extra_candidates([f"mine={f}", "served=ws://10.0.0.2:8765"], ["bc", "random"])
    assert [(c.name, c.checkpoint, c.about) for c in got] == [("mine", str(f), "given"),
                                                              ("served", "ws://10.0.0.2:8765", "served policy")]
    for bad, msg in ((["bc=ws://h:1"], "taken"), (["noequals"], "NAME=CHECKPOINT"),
                     ([f"x={tmp_path / 'missing.pt'}"], "neither a file")):
        with pytest.raises(SystemExit, match=msg):
            extra_candidates(bad, ["bc"])


def test_rl_gain_scores_every_arm_and_the_own_gain_against_the_best_control(tmp_path, capsys):
    """Protocol v2's report: the start, the controls (already trained: their control.json is reused) and three
    seeds of the recipe, each evaluated on the same jobs; the own gain is taken against the best control, and the
    judge check fails a reward that reads simulator labels at RL time."""
    rl_gain = _load("rl_gain")
    bc = tmp_path / "bc.pt"
    bc.write_bytes(b"weights")
    out = tmp_path / "bench"
    runs = []
    for k in range(3):
        (tmp_path / f"s{k}").mkdir()
        run = _rl_run(tmp_path / f"s{k}", str(bc))
        (run / "config.yaml").write_text(f"policy: {bc}\nbc_coef: 1.0\nimagination:\n  reward: grasp\n")
        runs.append(run)
    for arm in ("control", "anchor"):
        (out / arm).mkdir(parents=True)
        (tmp_path / f"{arm}.pt").write_bytes(b"weights")
        (out / arm / "control.json").write_text(json.dumps({"policy_path": str(tmp_path / f"{arm}.pt"),
                                                            "episodes": 7, "env_steps": 700, "updates": 6,
                                                            "max_param_change": 0.5}))  # an anchor that moved
    per_task = 10
    start = [j % 2 == 0 for j in range(2 * per_task)]  # 10 of 20
    _finished_eval(out / "eval_bc", str(bc), start, per_task=per_task)
    _finished_eval(out / "eval_control", str(tmp_path / "control.pt"), [j % 4 != 3 for j in range(20)],
                   per_task=per_task)  # 15 of 20: the best control
    _finished_eval(out / "eval_anchor", str(tmp_path / "anchor.pt"), start, per_task=per_task)
    failed = [{3, 11}, {3, 12}, {3}]  # 18, 18 and 19 of 20
    for k, run in enumerate(runs):
        _finished_eval(out / ("eval_rl" if k == 0 else f"eval_rl{k}"), str(run / "policy.pt"),
                       [j not in failed[k] for j in range(20)], per_task=per_task)
    args = ["--bc", str(bc), "--rl-run", *map(str, runs), "--out-dir", str(out), "--tasks", "0", "1",
            "--episodes-per-task", str(per_task), "--init-state-offset", "20"]
    assert rl_gain.main(args) == 1  # the grasp judge reads the object's start from simulator labels
    text = capsys.readouterr().out
    bench = text.strip().splitlines()[-1]
    assert "seeds=3 start=0.500 control=0.750 anchor=0.500 best_control=control" in bench
    own = float(bench.split("own_gain_points=")[1].split()[0])
    assert own == pytest.approx(100 * ((18 + 18 + 19) / 60 - 0.75), abs=0.05)
    assert "judge_reads_simulator=yes" in bench and bench.endswith("FAIL")
    assert "real data of control: 7 episodes, 700 env steps" in text
    # the anchor control consumed what the recipe did (here made elsewhere: neither is counted)
    assert "real data of anchor: its inputs are not on this machine" in text
    assert "control - start: +25.0 points" in text and "recipe2 - start: +45.0 points" in text


def test_rl_gain_names_a_seeds_folders_by_its_value_so_a_later_lone_seed_resumes_them(tmp_path, monkeypatch,
                                                                                      capsys):
    """`--seeds 2` alone runs RL in rl2 and scores it in eval_rl2, the folders a `--seeds 0 1 2` run made, instead
    of seed 0's rl and eval_rl."""
    rl_gain = _load("rl_gain")
    bc, wm, data = tmp_path / "bc.pt", tmp_path / "wm.pt", tmp_path / "data"
    bc.write_bytes(b"weights")
    wm.write_bytes(b"weights")
    data.mkdir()
    out = tmp_path / "bench"
    ran: list = []

    def run_counted(cfgs):
        ran.extend(cfgs)
        return [{"policy_path": str(Path(c.out_dir) / "policy.pt"), "history": [], "first": {}, "last": {},
                 "seconds": 1.0, "iterations": 1} for c in cfgs], 0

    monkeypatch.setattr(rl_gain, "run_counted", run_counted)
    _finished_eval(out / "eval_bc", str(bc), [False, False, True, False])
    (out / "rl2").mkdir(parents=True)
    (out / "rl2" / "policy.pt").write_bytes(b"weights")  # before its evaluation, which is then reused
    _finished_eval(out / "eval_rl2", str(out / "rl2" / "policy.pt"), [True, False, True, True])
    rl_gain.main(["--bc", str(bc), "--world-model", str(wm), "--data", str(data), "--out-dir", str(out),
                  "--tasks", "0", "1", "--episodes-per-task", "2", "--arms", "start", "recipe", "--seeds", "2",
                  "--min-seeds", "1"])
    assert [(Path(c.out_dir).name, c.seed) for c in ran] == [("rl2", 2)]
    assert not (out / "rl").exists() and not (out / "eval_rl").exists()
    assert "BENCH rl_gain episodes=4" in capsys.readouterr().out


def test_rl_gain_on_a_suite_runs_the_setting_chosen_for_it(tmp_path, monkeypatch, capsys):
    rl_gain = _load("rl_gain")
    root = tmp_path / "object"
    args = ["--suite", "libero_object", "--root", str(root), "--episodes-per-task", "2", "--arms", "start", "recipe"]
    with pytest.raises(ValueError, match="no setting is chosen for it yet"):
        rl_gain.main(args)
    (root / "setting.json").parent.mkdir(parents=True)
    (root / "setting.json").write_text(json.dumps({"suite": "libero_object", "tasks": [0, 1], "bc_demos_per_task": 2,
                                                   "bc_steps": 1500}))
    bc, built = _recorded_build(rl_gain, root, monkeypatch)
    run = _rl_run(tmp_path, str(bc))
    _finished_eval(root / "run" / "eval_bc", str(bc), [False, True, True, False], env="libero_object")
    _finished_eval(root / "run" / "eval_rl", str(run / "policy.pt"), [True, True, True, False], env="libero_object")
    rl_gain.main([*args, "--rl-run", str(run)])
    (proto,) = built
    assert (proto.suite, proto.tasks, proto.bc_demos_per_task, proto.bc_steps) == ("libero_object", (0, 1), 2, 1500)
    out = capsys.readouterr().out
    assert "protocol v2: libero_object tasks [0, 1]" in out and "BENCH rl_gain episodes=4" in out
    with pytest.raises(SystemExit):  # v1 is LIBERO-Spatial's recorded protocol, not a suite's
        rl_gain.main([*args, "--protocol", "v1"])


def test_rl_gain_evaluates_the_eval_tasks_only_and_builds_the_protocols_own(tmp_path, monkeypatch, capsys):
    """--eval-tasks scores every arm on some of the protocol's tasks; the data, the start and the recipe's inputs stay
    those of every task (--tasks would build another protocol)."""
    rl_gain = _load("rl_gain")
    root = tmp_path / "object"
    (root / "setting.json").parent.mkdir(parents=True)
    (root / "setting.json").write_text(json.dumps({"suite": "libero_object", "tasks": [0, 1], "bc_demos_per_task": 1,
                                                   "bc_steps": 900}))
    bc, built = _recorded_build(rl_gain, root, monkeypatch)
    run = _rl_run(tmp_path, str(bc))
    _finished_eval(root / "run" / "eval_bc", str(bc), [False, True], tasks=(1,), env="libero_object")
    _finished_eval(root / "run" / "eval_rl", str(run / "policy.pt"), [True, True], tasks=(1,), env="libero_object")
    args = ["--suite", "libero_object", "--root", str(root), "--episodes-per-task", "2", "--arms", "start", "recipe",
            "--rl-run", str(run)]
    rl_gain.main([*args, "--eval-tasks", "1"])
    (proto,) = built
    assert proto.tasks == (0, 1)
    bench = capsys.readouterr().out.strip().splitlines()[-1]
    assert "episodes=2 " in bench and "task1=1/2->2" in bench and "task0" not in bench
    with pytest.raises(SystemExit):  # not one of the protocol's tasks
        rl_gain.main([*args, "--eval-tasks", "4"])
    assert "--eval-tasks: expected some of the protocol's tasks [0, 1], got [4]" in capsys.readouterr().err


def test_rl_gain_acts_holding_switches_every_arm_but_the_start_and_is_its_own_recipe(tmp_path, capsys):
    """--acts holding: the recipe's seeds and the controls act once the gripper closes, the start while it is open
    (one PhaseSwitchPolicy file per arm, evaluated in its own folder); the start is evaluated as it is."""
    from policies.base import Policy
    from policies.phase_switch import PhaseSwitchPolicy
    from tests.policies.conftest import two_policies

    rl_gain = _load("rl_gain")
    start, tuned = two_policies()
    bc = tmp_path / "bc.pt"
    start.save(bc)
    run = _rl_run(tmp_path, str(bc))
    tuned.save(run / "policy.pt")
    (run / "config.yaml").write_text(f"policy: {bc}\nimagination:\n  reward: grasp\n")
    out = tmp_path / "bench"
    (out / "control").mkdir(parents=True)
    tuned.save(tmp_path / "control.pt")
    (out / "control" / "control.json").write_text(json.dumps({"policy_path": str(tmp_path / "control.pt"),
                                                              "episodes": 7, "env_steps": 700}))
    _finished_eval(out / "eval_bc", str(bc), [False, False, True, False])
    for folder, policy in (("eval_rl", run / "policy.pt"), ("eval_control", tmp_path / "control.pt")):
        switch = rl_gain.switched(str(bc), str(policy), out / f"{folder}_holding.pt")
        _finished_eval(out / f"{folder}_holding", switch, [True, False, True, True])
    args = ["--bc", str(bc), "--rl-run", str(run), "--out-dir", str(out), "--tasks", "0", "1",
            "--episodes-per-task", "2", "--init-state-offset", "20", "--arms", "start", "control", "recipe",
            "--min-seeds", "1", "--acts", "holding"]
    assert rl_gain.main(args) == 1
    text = capsys.readouterr().out
    assert "start (BC): reusing" in text
    assert "recipe seed 0, acting once the gripper closes: reusing" in text
    assert "real-data control, acting once the gripper closes: reusing" in text
    assert "acts=holding" in text.strip().splitlines()[-1]
    loaded = Policy.load(out / "eval_rl_holding.pt")
    assert isinstance(loaded, PhaseSwitchPolicy)
    for got, want in ((loaded.approach, start), (loaded.hold, tuned)):
        for a, b in zip(got.state_dict().values(), want.state_dict().values()):
            torch.testing.assert_close(a, b)
    with pytest.raises(SystemExit):
        rl_gain.main([*args, "--gate", "task"])
    assert "--acts holding: not with --gate task" in capsys.readouterr().err


@pytest.mark.parametrize("override", ["policy=other/policy.pt", "world_model=wm.pt", " start_data =d", "out_dir=x"])
def test_rl_gain_refuses_an_rl_override_the_protocol_would_replace(override, tmp_path, capsys):
    """`--rl policy=X` once ran the protocol's own start without a word; now it stops before building anything."""
    with pytest.raises(SystemExit) as stop:
        _load("rl_gain").main(["--suite", "libero_goal", "--root", str(tmp_path / "root"), "--rl", "bc_coef=300",
                               override])
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert f"--rl {override}:" in err and "--bc" in err and "bc_coef" not in err.split("error:")[1]
    assert not (tmp_path / "root").exists()


def test_rl_gain_refuses_an_override_of_the_goal_reader_before_building(tmp_path, capsys):
    with pytest.raises(SystemExit) as stop:
        _load("rl_gain").main(["--suite", "libero_goal", "--recipe", "goal_window", "--root", str(tmp_path / "root"),
                               "--rl", "imagination.goal_reader=mine.pt"])
    assert stop.value.code == 2 and "--rl imagination.goal_reader=mine.pt:" in capsys.readouterr().err
    assert not (tmp_path / "root").exists()


def test_rl_gain_rl_from_control_starts_the_recipe_from_arm_b_and_is_its_own_recipe(tmp_path, capsys):
    """--rl-from control: the recipe's RL starts from the real-data control (a run from the start is refused), b is
    scored beside it, and the BENCH line says where RL started."""
    rl_gain = _load("rl_gain")
    bc, control = tmp_path / "bc.pt", tmp_path / "control.pt"
    for f in (bc, control):
        f.write_bytes(b"weights")
    out = tmp_path / "bench"
    (out / "control").mkdir(parents=True)
    (out / "control" / "control.json").write_text(json.dumps({"policy_path": str(control), "episodes": 7,
                                                              "env_steps": 700}))
    (tmp_path / "c").mkdir()
    (tmp_path / "s").mkdir()
    from_control, from_start = _rl_run(tmp_path / "c", str(control)), _rl_run(tmp_path / "s", str(bc))
    _finished_eval(out / "eval_bc", str(bc), [False, False, True, False])
    _finished_eval(out / "eval_control", str(control), [True, False, True, False])
    _finished_eval(out / "eval_rl", str(from_control / "policy.pt"), [True, True, True, False])
    args = ["--bc", str(bc), "--out-dir", str(out), "--tasks", "0", "1", "--episodes-per-task", "2",
            "--init-state-offset", "20", "--min-seeds", "1", "--rl-from", "control"]
    assert rl_gain.main([*args, "--rl-run", str(from_control), "--arms", "start", "control", "recipe"]) == 1
    bench = capsys.readouterr().out.strip().splitlines()[-1]
    assert "start=0.250 control=0.500 best_control=control own_gain_points=+25.0" in bench
    assert "rl_from=control" in bench
    with pytest.raises(SystemExit, match="not from the real-data control"):  # a run from the start is another recipe
        rl_gain.main([*args, "--rl-run", str(from_start), "--arms", "start", "control", "recipe"])
    with pytest.raises(SystemExit) as stop:
        rl_gain.main([*args, "--rl-run", str(from_control), "--arms", "start", "recipe"])
    assert stop.value.code == 2 and "--arms must hold control and recipe" in capsys.readouterr().err


@pytest.mark.parametrize("given", [["--bc", "bc.pt"], ["--rl-run", "rl_s0"], ["--refine-world-model", "-1"]])
def test_rl_gain_refines_only_the_protocols_own_world_model(given, tmp_path, capsys):
    """--refine-world-model fine-tunes the protocol's own model on its own rollouts: with a start or a run made
    elsewhere there is no such model to refine, and negative steps are no setting; both stop before building."""
    args = ["--suite", "libero_goal", "--root", str(tmp_path / "root"), "--refine-world-model", "1500", *given]
    with pytest.raises(SystemExit) as stop:
        _load("rl_gain").main(args)
    assert stop.value.code == 2 and "--refine-world-model:" in capsys.readouterr().err
    assert not (tmp_path / "root").exists()


@pytest.mark.parametrize("given", [["--world-model", "wm.pt"], ["--rl-run", "rl_s0"], ["--refine-world-model", "9"]])
def test_rl_gain_trains_a_preset_world_model_only_for_the_protocols_own_inputs(given, tmp_path, capsys):
    """--world-model-preset trains a model afresh on the protocol's data and own rollouts: not beside a model, a run
    or a refinement from elsewhere; refused before anything is built."""
    args = ["--suite", "libero_goal", "--root", str(tmp_path / "root"), "--world-model-preset", "rl_gain_gpu", *given]
    with pytest.raises(SystemExit) as stop:
        _load("rl_gain").main(args)
    assert stop.value.code == 2 and "--world-model-preset:" in capsys.readouterr().err
    assert not (tmp_path / "root").exists()


@pytest.mark.parametrize("given", [["--bc", "bc.pt"], ["--rl-run", "rl_s0"], ["--refine-world-model", "9"],
                                   ["--world-model-preset", "rl_gain_gpu"]])
def test_rl_gain_imagines_in_a_given_world_model_only_beside_the_protocols_own_inputs(given, tmp_path, capsys):
    """--recipe-world-model swaps the model the recipe imagines in and keeps the protocol's other inputs: not beside
    a start or a run from elsewhere, nor beside another way of making the recipe's model; refused before building."""
    model = tmp_path / "world_model.pt"
    model.write_bytes(b"")
    args = ["--suite", "libero_goal", "--root", str(tmp_path / "root"), "--recipe-world-model", str(model), *given]
    with pytest.raises(SystemExit) as stop:
        _load("rl_gain").main(args)
    assert stop.value.code == 2 and "--recipe-world-model:" in capsys.readouterr().err
    assert not (tmp_path / "root").exists()


@pytest.mark.parametrize("flag", ["--recipe-world-model", "--recipe-goal-reader"])
def test_rl_gain_refuses_a_recipe_input_that_is_not_a_file(flag, tmp_path, capsys):
    args = ["--suite", "libero_goal", "--root", str(tmp_path / "root"), flag, str(tmp_path / "missing.pt")]
    with pytest.raises(SystemExit) as stop:
        _load("rl_gain").main(args)
    err = capsys.readouterr().err
    assert stop.value.code == 2 and f"{flag}:" in err and "missing.pt is not a file" in err
    assert not (tmp_path / "root").exists()


def test_rl_gain_gives_a_goal_reader_only_to_a_recipe_that_pays_the_goal(tmp_path, capsys):
    """A recipe paid by the grasp judge never reads a goal reader: swapping one in would change nothing the run
    does, so it is refused before anything is built."""
    reader = tmp_path / "reader.pt"
    reader.write_bytes(b"")
    args = ["--suite", "libero_goal", "--root", str(tmp_path / "root"), "--recipe", "grasp",
            "--recipe-goal-reader", str(reader)]
    with pytest.raises(SystemExit) as stop:
        _load("rl_gain").main(args)
    err = capsys.readouterr().err
    assert stop.value.code == 2 and "--recipe-goal-reader:" in err and "pays reward 'grasp'" in err, err
    assert not (tmp_path / "root").exists()


@pytest.mark.parametrize(("given", "says"), [
    (["--near-miss-kinds", "jitter_grasp"], "--near-miss-kinds: expected a non-empty list of"),
    (["--near-miss-kinds", "near_miss", "--bc", "bc.pt"], "--near-miss-kinds: the protocol records its recipe's "
                                                           "inputs itself"),
    (["--near-miss-kinds", "near_miss", "--recipe", "goal"], "reads no near-miss grasp (reward 'goal'"),
    (["--near-miss-kinds", "near_miss", "--recipe", "goal_grasp", "--rl", "imagination.grasp_label_dirs=[]"],
     "reads no near-miss grasp (reward 'grasp', grasp_label_dirs []"),
])
def test_rl_gain_takes_a_near_miss_plan_only_for_grasps_it_simulates(given, says, tmp_path, capsys):
    """--near-miss-kinds changes the near-miss grasps the protocol simulates for its recipe's judge: a plan the label
    collection would refuse, a start from elsewhere, or a recipe that reads no near-miss grasp is refused with one
    error naming the flag, before anything is built."""
    _refused_before_building(given, says, tmp_path, capsys)


@pytest.mark.parametrize(("given", "says"), [
    (["--own-drawn-layouts", "-2", "--recipe", "spatial_reader"], "--own-drawn-layouts: expected an integer >= 0"),
    (["--own-drawn-layouts", "20", "--bc", "bc.pt"], "--own-drawn-layouts: the protocol records its recipe's inputs"),
    (["--own-drawn-layouts", "20", "--recipe", "goal"], "--own-drawn-layouts: the recipe 'goal' does not start from"),
])
def test_rl_gain_records_drawn_layouts_only_for_a_recipe_that_starts_from_them(given, says, tmp_path, capsys):
    """--own-drawn-layouts records the start's own rollouts on drawn layouts as the recipe's starts: a start from
    elsewhere, or a recipe that does not start from the own rollouts with the grasp judge, is refused before anything
    is built."""
    _refused_before_building(given, says, tmp_path, capsys)


@pytest.mark.parametrize(("given", "says"), [
    (["--loop-rounds", "-1"], "--loop-rounds: expected a number of rounds >= 0"),
    (["--loop-rounds", "1", "--bc", "bc.pt"], "--loop-rounds: records and retrains the recipe's own seeds"),
    (["--loop-rounds", "1", "--gate", "task"], "not with --run, --bc, --world-model, --data, --rl-run, --gate task"),
    (["--loop-rounds", "1", "--arms", "start", "control"], "needs the recipe arm"),
    (["--loop-rounds", "1", "--recipe", "goal"], "refits the grasp judge on the policies' recorded rollouts; the "
                                                 "recipe pays reward 'goal'"),
    (["--loop-rounds", "1", "--loop-adopt-margin", "1.5"], "--loop-adopt-margin: expected a success-rate difference "
                                                           "in [0, 1], got 1.5"),
])
def test_rl_gain_runs_loop_rounds_only_for_its_own_grasp_recipe(given, says, tmp_path, capsys):
    """--loop-rounds records the recipe's own seeds and refits its grasp judge: with a start from elsewhere, a gate,
    no recipe arm, a recipe without the grasp judge or an adoption margin outside [0, 1] it is refused with one error
    naming the flag, before anything is built."""
    _refused_before_building(given, says, tmp_path, capsys)


def _refused_before_building(given: list[str], says: str, tmp_path, capsys) -> None:
    """rl_gain on LIBERO-Goal with `given` stops with exit 2 and an error holding `says`, before the protocol's root
    is made."""
    with pytest.raises(SystemExit) as stop:
        _load("rl_gain").main(["--suite", "libero_goal", "--root", str(tmp_path / "root"), *given])
    err = capsys.readouterr().err
    assert stop.value.code == 2 and says in err, err
    assert not (tmp_path / "root").exists()
