"""bench/reward_signal.py: one line and exit 2 when its inputs are missing; on a tiny world model and
policy with a finished gate evaluation (no LIBERO run), the imagined re-run, the tables, the BENCH
line, reward_signal.json and the exit status."""
import json
import os
import subprocess
import sys
from dataclasses import asdict, replace
from pathlib import Path

import numpy as np
import pytest
import torch

from bench import gate_side
from tests.bench.test_bench_options import ROOT, _load

H, K = 16, 4


def test_missing_protocol_inputs_give_one_line_and_exit_2(tmp_path):
    run = subprocess.run([sys.executable, str(ROOT / "bench" / "reward_signal.py"), "--root", str(tmp_path / "proto")],
                         capture_output=True, text=True, cwd=ROOT, env={**os.environ, "MUJOCO_GL": "egl"}, timeout=300)
    assert run.returncode == 2 and run.stdout == ""
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1, run.stderr
    line = lines[0]
    assert line.startswith("reward_signal: missing world model ") and "Traceback" not in run.stderr
    for name in ("world_model/world_model.pt", "calibration.json", "bc/policy.pt", str(tmp_path / "proto" / "data")):
        assert name in line
    assert "`python bench/rl_gain.py` builds" in line


def test_missing_given_files_are_named(tmp_path, capsys):
    reward_signal = _load("reward_signal")
    given = ["--root", str(tmp_path), "--world-model", str(tmp_path / "wm.pt"), "--train-data", str(tmp_path / "data"),
             "--policies", str(tmp_path / "p.pt")]
    code = reward_signal.main([*given, "--reward", "head"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1
    assert err[0] == (f"reward_signal: missing world model {tmp_path / 'wm.pt'}, training data {tmp_path / 'data'}, "
                      f"policy {tmp_path.name} {tmp_path / 'p.pt'}; give existing files")
    # the default reward (the recipe's grasp classifier) also needs its training data, near misses and proprio
    # model: the protocol's own unless given, so the line says what builds them
    assert reward_signal.main(given) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].endswith("`python bench/rl_gain.py` builds the protocol's "
                                             "(or give --world-model, --policies, --train-data)")
    for name in (f"grasp classifier data {tmp_path / 'own_rollouts' / 'data'}",
                 f"near-miss labels {tmp_path / 'near_miss_labels_s16'}",
                 f"proprio model {tmp_path / 'own_rollouts' / 'proprio.pt'}"):
        assert name in err[0]
    assert reward_signal.main([*given, "--branch"]) == 2
    assert "--branch: the branch check runs with --reward head or state" in capsys.readouterr().err
    assert reward_signal.main(["--root", str(tmp_path), "--policies", "a.pt", "b.pt", "--names", "x", "x"]) == 2
    assert "2 distinct names" in capsys.readouterr().err


def _episodes(root: Path, source: str, policy: str, outcomes: dict[int, bool], init: int) -> None:
    """One short episode per task of outcomes (task -> real success), the gripper closing at step 6."""
    from robot_data.dataset import DatasetConfig, EpisodeWriter
    from tests.episodes import grasping_episode

    rng = np.random.default_rng(init)
    with EpisodeWriter(root, DatasetConfig(views=("agentview",), image_size=(H, H))) as w:
        for task, ok in outcomes.items():
            w.append(grasping_episode(rng, 12, H, task, ok, source, init, {"policy": policy} if policy else {}))


@pytest.fixture(scope="module")
def protocol_root(tmp_path_factory):
    """The protocol's inputs in miniature: data, a world model whose head always says sigmoid(2), BC."""
    from policies.vla import VLAConfig, VLAPolicy
    from world_models.denoiser import DenoiserConfig
    from world_models.model import WorldModel, WorldModelConfig

    root = tmp_path_factory.mktemp("reward_signal")
    _episodes(root / "data", "expert", "", {t: True for t in range(5)}, init=0)
    torch.manual_seed(0)
    d = DenoiserConfig(image_size=H, channels=3, context_frames=2, chunk_len=K, block_out_channels=[8, 16],
                       norm_num_groups=4)
    wm = WorldModel(WorldModelConfig(views=["agentview"], denoiser=d))
    with torch.no_grad():
        wm.head.out.weight.zero_()
        wm.head.out.bias.fill_(2.0)
    (root / "world_model").mkdir()
    wm.save(root / "world_model" / "world_model.pt")
    (root / "world_model" / "calibration.json").write_text("{}")
    (root / "bc").mkdir()
    policy = VLAPolicy(VLAConfig(views=["agentview"], image_size=H, chunk_len=K, conv_channels=[8, 8]))
    policy.save(root / "bc" / "policy.pt")
    return root


def _finished_gate_eval(root: Path, successes) -> None:
    """The BC policy's gate evaluation as if run in LIBERO (outcomes given) and its recorded episodes."""
    from imagination.eval.evaluate import plan_jobs
    from imagination.loop.config import LoopConfig
    from infra.cli import load_config

    bc = str(root / "bc" / "policy.pt")
    gate = root / "gate"
    if not (gate / "data").exists():
        _episodes(gate / "data", "policy", bc, {t: t % 2 == 0 for t in range(5)}, init=10)
    cfg = replace(load_config(LoopConfig, "quick", group="loop").eval, env="libero_spatial", tasks=[0, 1, 2, 3, 4],
                  episodes_per_task=10, init_state_offset=10, seed=0, num_envs=2, fast_render=True, checkpoint=bc,
                  out_dir=str(gate / "eval_bc"), max_steps=8)
    jobs = plan_jobs(cfg, cfg.tasks, lambda task: 50)
    episodes = [{"task_id": j.task_id, "init_state_id": j.init_state_id, "seed": j.seed, "success": bool(s), "steps": 8}
                for j, s in zip(jobs, successes(jobs))]
    (gate / "eval_bc").mkdir(parents=True, exist_ok=True)
    (gate / "eval_bc" / "results.json").write_text(json.dumps({"config": asdict(cfg), "episodes": episodes}))


def saved_chance(root: Path) -> float:
    return float(json.loads((root / "gate" / "reward_signal.json").read_text())["exact_judge_pass_chance"])


@pytest.mark.libero
def test_a_head_that_says_the_same_everywhere_fails_the_gate(protocol_root, capsys):
    reward_signal = _load("reward_signal")
    _finished_gate_eval(protocol_root, lambda jobs: [j.episode % 2 == 0 for j in jobs])  # 5 of 10 on every task
    # bench/gate_ceiling.py's result for these policies is shown beside the verdict; another policy's is not
    ceiling = {"auc_within_task": 0.7, "auc_within_task_ci95": [0.6, 0.8], "auc_by_repeats": [0.65, 0.7]}
    for perturb, policy in (("seed", str(protocol_root / "bc" / "policy.pt")), ("noise", "other.pt")):
        (protocol_root / "gate_ceiling" / perturb).mkdir(parents=True)
        (protocol_root / "gate_ceiling" / perturb / "gate_ceiling.json").write_text(json.dumps(
            {"perturb": perturb, "repeats": 2, "policies": {"bc": policy}, "figures": {"all": ceiling}}))
    # the gate's verdict is the judge against reality: without the repeats' evaluations it stops before imagining
    assert reward_signal.main(["--root", str(protocol_root), "--reward", "head"]) == 2
    run = capsys.readouterr()
    assert run.out == "" and run.err.strip().splitlines() == [
        f"reward_signal: --verdict reality: {protocol_root / 'gate_ceiling' / 'seed' / 'gate_ceiling.json'}: the "
        "repeats' evaluations are missing (bc_r1, bc_r2); `python bench/gate_ceiling.py` (with the same --policies) "
        "re-runs the gate's jobs, or give --verdict thresholds"]
    # reality's repeats are of the gate's jobs: on the training init states only the thresholds can decide
    assert reward_signal.main(["--root", str(protocol_root), "--reward", "head", "--init-state-offset", "0"]) == 2
    assert "the real repeats are of the gate's jobs (init states 10-19); on init states 0- give --verdict " \
           "thresholds" in capsys.readouterr().err
    code = reward_signal.main(["--root", str(protocol_root), "--reward", "head", "--branch", "--lead-steps", "4",
                               "--verdict", "thresholds"])
    out = capsys.readouterr().out
    assert code == 1
    assert "bc: reusing" in out and "fitting the proprio model" in out
    bench = out.strip().splitlines()[-1]
    # every job imagined at sigmoid(2) = 0.88: all ties within task (0.5), every task imagined 10/10 vs 5/10 real
    assert bench == ("BENCH reward_signal reward=head policies=bc jobs=50 pairs=125 auc_within_task=0.50 "
                     "auc_within_task_ci95=[0.50,0.50] auc=0.50 max_calibration_gap=0.50 threshold_auc=0.80 "
                     "threshold_gap=0.15 exact_judge_pass_chance=0.030 jobs_for_exact_judge=94 gap_p_value=0.191 "
                     "shown_miscalibrated=0/5 "
                     "joint_calibration_p=9.5e-07 verdict_vs_reality=unmeasured verdict=thresholds FAIL")
    # 5 of 10 real on each task: a judge as likely to succeed as reality stays within 0.15 with chance 0.497 a task
    # and shows a gap of 0.5 (10 of 10 imagined against 5 of 10) on some task with probability 0.19: at 10 jobs a
    # task, the largest gap alone does not tell this head's optimism from noise
    assert "with probability 0.03, and show a gap this large with probability 0.19" in out
    assert saved_chance(protocol_root) == pytest.approx(0.49655 ** 5, rel=1e-4)
    # ... and would pass it 80% of the time only with 94 jobs a task (imagination.eval.reward_gate's own test)
    assert ("passes the calibration check with chance 0.030 at 10 jobs a task; 80% of the time only from 94 jobs a "
            "task on") in out
    assert json.loads((protocol_root / "gate" / "reward_signal.json").read_text())["jobs_for_exact_judge"] == 94
    # ... yet every task errs the same way, job by job (5 imagined successes that failed, none the other way):
    # p = 2/32 a task, 5 x that after Holm, so no one task is shown; together, 5 such tasks are (1/16)^5
    assert "     0    5/10     10/10    +0.50           5           0  0.062   0.312" in out
    assert ("shown miscalibrated: none at these jobs; all of them together (exact joint test): p = 9.5e-07, beyond "
            "the jobs' noise") in out
    saved_joint = json.loads((protocol_root / "gate" / "reward_signal.json").read_text())["joint_calibration_p_value"]
    assert saved_joint == pytest.approx(16.0 ** -5)
    assert "FAIL: within-task AUC 0.500 < 0.80; largest per-task |imagined - real| 0.500 > 0.15" in out
    assert "     0    5/10     10/10    +0.50" in out and "every policy's jobs pooled" not in out
    assert ("real re-runs (seed) rank the recorded outcomes at AUC within task 0.70 [0.60, 0.80] with 2 repeats, "
            "0.65 with one") in out and "(noise)" not in out
    saved = json.loads((protocol_root / "gate" / "reward_signal.json").read_text())
    assert saved["verdict"] == "FAIL" and len(saved["records"]) == 50
    assert list(saved["ceilings"]) == ["seed"] and saved["ceilings"]["seed"]["auc_within_task"] == 0.7
    assert saved["figures"]["bc"]["calibration"][0]["imagined_successes"] == 10
    assert saved["branch"]["figures"]["bc"]["jobs"] == 5  # the recorded episodes, from 4 steps before the grasp
    assert all(r["start_t"] == 2 for r in saved["branch"]["records"])
    assert (protocol_root / "proprio.pt").is_file()  # the protocol's cached proprio model
    # the ceiling names 2 repeats, but their evaluations are not there: no comparison with reality is claimed
    assert "against one real re-run: not measured, " in out and "bc_r1" in out
    assert saved["against_reality"]["measured"] is False

    # two real re-runs that reproduce the recording: reality ranks its outcomes perfectly, this head not at all
    for k in (1, 2):
        (protocol_root / "gate_ceiling" / "seed" / f"bc_r{k}").mkdir()
        (protocol_root / "gate_ceiling" / "seed" / f"bc_r{k}" / "results.json").write_text(
            (protocol_root / "gate" / "eval_bc" / "results.json").read_text())
    assert reward_signal.main(["--root", str(protocol_root), "--reward", "head"]) == 1  # the default verdict
    out = capsys.readouterr().out
    assert "judge - reality -0.50 [-0.50, -0.50] in within-task AUC" in out and "worse than one real re-run" in out
    assert out.strip().splitlines()[-1].endswith(
        "joint_calibration_p=9.5e-07 judge_vs_reality=-0.50 judge_vs_reality_ci95=[-0.50,-0.50] "
        "verdict_vs_reality=FAIL verdict=against_reality FAIL")
    saved = json.loads((protocol_root / "gate" / "reward_signal.json").read_text())
    assert saved["against_reality"]["measured"] and saved["against_reality"]["verdict"] == "FAIL"

    # every job solved for real: nothing to separate, said plainly; the cached proprio model is reused
    _finished_gate_eval(protocol_root, lambda jobs: [True] * len(jobs))
    assert reward_signal.main(["--root", str(protocol_root), "--reward", "head", "--verdict", "thresholds"]) == 1
    out = capsys.readouterr().out
    assert "fitting the proprio model" not in out and "older than its inputs, imagining again" in out
    assert "cannot measure: no task has both a real success and a real failure" in out
    assert out.strip().splitlines()[-1].startswith(
        "BENCH reward_signal reward=head policies=bc jobs=50 pairs=0 auc_within_task=nan")
    assert json.loads((protocol_root / "gate" / "reward_signal.json").read_text())["measurable"] is False


def test_jobs_and_task_bias_options_are_checked_first(tmp_path, capsys):
    reward_signal = _load("reward_signal")
    base = ["--root", str(tmp_path)]
    assert reward_signal.main([*base, "--init-state-offset", "15"]) == 2  # 15-24 reaches the benchmark's 20-
    err = capsys.readouterr().err
    assert "--init-state-offset: expected 0-10" in err and "benchmark" in err
    assert reward_signal.main([*base, "--task-bias", str(tmp_path / "none.json")]) == 2
    assert "--task-bias:" in capsys.readouterr().err
    calib = tmp_path / "calib.json"
    records = [{"policy": "bc", "task_id": k, "real_success": bool(j < 3 * k), "max_success_prob": 0.7}
               for k in range(3) for j in range(4)]  # judged 0.7 everywhere
    calib.write_text(json.dumps({"reward": "grasp", "policies": {"bc": "bc.pt"}, "init_states": [0, 9],
                                 "records": records}))
    fit = gate_side.task_bias_from_json(str(calib), "")
    assert fit["policy"] == "bc" and fit["init_states"] == [0, 9] and len(fit["bias"]) == 10
    assert fit["bias"][0] < 0 < fit["bias"][2] and fit["bias"][5] == 0.0  # 0/4 and 4/4 real
    assert reward_signal.main([*base, "--task-bias", str(calib), "--reward", "head"]) == 2
    assert "calibrate reward 'grasp' only" in capsys.readouterr().err
    assert reward_signal.main([*base, "--task-bias", str(calib), "--task-bias-policy", "rl"]) == 2
    assert "no records of policy 'rl'" in capsys.readouterr().err
    calib.write_text(json.dumps({"reward": "grasp", "task_bias": {"bias": [0.0] * 10}, "records": records}))
    assert reward_signal.main([*base, "--task-bias", str(calib)]) == 2
    assert "without offsets of its own" in capsys.readouterr().err
    # a gate folder holding another job set's episodes is refused, before anything else runs
    _episodes(tmp_path / "gate" / "data", "policy", "bc.pt", {0: True}, init=3)
    assert reward_signal.main(base) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"reward_signal: --gate-dir: {tmp_path / 'gate' / 'data'} holds real episodes of init states 3-3, "
                   "not only of 10-19; give each job set its own --gate-dir"]
    # the training jobs default to a folder of their own, so they get past that check to the missing inputs
    assert reward_signal.main([*base, "--init-state-offset", "0"]) == 2
    assert "missing world model" in capsys.readouterr().err
    assert reward_signal.main([*base, "--init-state-offset", "0", "--gate-dir", str(tmp_path / "gate")]) == 2
    assert "not only of 0-9" not in capsys.readouterr().err  # init state 3 is one of 0-9


def test_each_reward_and_the_judge_with_offsets_write_apart(tmp_path):
    out_dir = gate_side.out_dir_for
    gate = tmp_path / "gate"
    assert out_dir("", gate, "head", False) == gate
    assert out_dir("", gate, "grasp", False) == gate / "grasp_reward"
    # with offsets: beside the plain judge's result, which gate_ceiling.py reads, never over it
    assert out_dir("", gate, "grasp", True) == gate / "grasp_reward_task_bias"
    assert out_dir("", gate, "state", False) == gate / "state_reward"
    assert out_dir(str(tmp_path / "mine"), gate, "grasp", True) == tmp_path / "mine"
