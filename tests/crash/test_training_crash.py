"""World-model training, BC, RL and a loop stage, SIGKILLed in real subprocesses at named points
(infra/crash_points.py), resumed, and compared with an uninterrupted run.

Each test runs one chain: killed at point A, re-run and killed at point B, ..., re-run to the end. The
outputs must equal the uninterrupted run's bit for bit where the docs promise an exact resume:
world-model training "resumes exactly" (docs/world_model.md), BC "continues bit for bit" (policies/bc.py),
imagined RL "a resumed run continues exactly" (README). Tiny configs on one thread, ~10 s a process.
"""
from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
import torch

from policies.base import Policy
from tests.crash.harness import run_driver, run_script
from tests.world_models.conftest import write_square_dataset
from world_models.model import WorldModel


def same_weights(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    keys = [k for k in a if k != "_extra_state"]
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in keys)


def policy_weights(path: Path) -> dict[str, torch.Tensor]:
    return Policy.load(path).state_dict()


@pytest.fixture(scope="module")
def squares(tmp_path_factory) -> Path:
    """The world-model tests' square world, small: 4 episodes of 16 steps, one 16 px view."""
    return write_square_dataset(tmp_path_factory.mktemp("crash_squares") / "data", episodes=4, T=16)


# ---------------------------------------------------------------------- world model
def wm_args(data: Path, out: Path) -> list[str]:
    return [f"out_dir={out}", f"clips.data_dir={data}", "clips.context_frames=2", "clips.chunk_len=4",
            "model.views=[agentview]", "model.denoiser.block_out_channels=[8,16]", "model.denoiser.norm_num_groups=4",
            "model.denoiser.layers_per_block=1", "model.head.channels=[4,8]", "steps=6", "batch_size=4",
            "checkpoint_every=2", "keep_checkpoints=2", "sample_every=0", "warmup_steps=1", "num_threads=1"]


def last_step_line(stdout: str) -> str:
    return next(line for line in stdout.splitlines() if line.strip().startswith("last step:"))


@pytest.mark.slow
def test_world_model_training_killed_in_and_between_saves_resumes_exactly(squares: Path, tmp_path: Path) -> None:
    ref_out, out = tmp_path / "reference", tmp_path / "run"
    reference = run_script("scripts/train_world_model.py", wm_args(squares, ref_out))
    ckpts = out / "checkpoints"

    def names() -> list[str]:
        return sorted(p.name for p in ckpts.iterdir())

    # 1. step 2's checkpoint committed, killed before the pruning
    run_script("scripts/train_world_model.py", wm_args(squares, out), crash="wm.checkpoint.after_commit:1")
    assert names() == ["step_0000002"]
    # 2. resumed from step 2, killed inside step 4's save: accelerate's files in step_0000004.tmp, no train state
    run_script("scripts/train_world_model.py", wm_args(squares, out), crash="wm.checkpoint.state_saved:1")
    assert names() == ["step_0000002", "step_0000004.tmp"]
    # 3. resumed from step 2 again; step 4 committed; killed at step 6 between world_model.pt and the commit
    run_script("scripts/train_world_model.py", wm_args(squares, out), crash="wm.checkpoint.before_commit:2")
    assert names() == ["step_0000002", "step_0000004", "step_0000006.tmp"]
    final = WorldModel.load(ref_out / "world_model.pt").state_dict()
    # the model file is never older than the newest checkpoint: here it already holds step 6's weights
    assert same_weights(WorldModel.load(out / "world_model.pt").state_dict(), final)
    # 4. resumed from step 4 to the end: the same last loss, weights and checkpoint files as never killed
    resumed = run_script("scripts/train_world_model.py", wm_args(squares, out))
    assert "resumed from step 4" in resumed.stdout + resumed.stderr
    assert last_step_line(resumed.stdout) == last_step_line(reference.stdout)
    assert same_weights(WorldModel.load(out / "world_model.pt").state_dict(), final)
    assert names() == ["step_0000004", "step_0000006"]
    for name in ("model.safetensors", "optimizer.bin", "scheduler.bin"):
        got = (ckpts / "step_0000006" / name).read_bytes()
        assert got == (ref_out / "checkpoints" / "step_0000006" / name).read_bytes(), name
    assert json.loads((out / "split.json").read_text()) == json.loads((ref_out / "split.json").read_text())


# ---------------------------------------------------------------------- BC
def bc_args(data: str, out: Path) -> list[str]:
    return [f"data_dir={data}", f"out_dir={out}", "policy.views=[agentview]", "policy.image_size=16",
            "policy.conv_channels=[8,16]", "policy.image_features=32", "policy.language_features=16",
            "policy.state_features=16", "policy.hidden=32", "policy.trunk_layers=2", "policy.chunk_len=4",
            "steps=12", "batch_size=8", "lr=3e-3", "log_every=2", "checkpoint_every=4", "augment_shift=2",
            "snapshot_steps=[6]", "num_threads=1", "success_only=false"]


def loss_rows(out: Path) -> list[dict[str, str]]:
    """loss.csv without its wall-clock column."""
    return [{k: v for k, v in r.items() if k != "seconds"} for r in csv.DictReader(open(out / "loss.csv"))]


@pytest.mark.slow
def test_bc_killed_mid_run_after_a_checkpoint_and_before_the_policy_resumes_bit_for_bit(
        squares: Path, tmp_path: Path) -> None:
    ref_out, out = tmp_path / "reference", tmp_path / "run"
    run_script("scripts/train_bc.py", bc_args(str(squares), ref_out))
    # 1. killed after step 6 (checkpoint at 4; the step-6 snapshot not yet written)
    run_script("scripts/train_bc.py", bc_args(str(squares), out), crash="bc.step:6")
    assert not (out / "policy_step6.pt").exists() and (out / "checkpoint.pt").is_file()
    # 2. resumed from step 4, killed right after the step-8 checkpoint
    run_script("scripts/train_bc.py", bc_args(str(squares), out), crash="bc.checkpoint_saved:1")
    # 3. resumed from step 8, trained to the end, killed before policy.pt
    run_script("scripts/train_bc.py", bc_args(str(squares), out), crash="bc.before_policy")
    assert not (out / "policy.pt").exists()
    # 4. resumed at the end: policy.pt, the snapshot, the loss curve and result equal the uninterrupted run's
    run_script("scripts/train_bc.py", bc_args(str(squares), out))
    assert same_weights(policy_weights(out / "policy.pt"), policy_weights(ref_out / "policy.pt"))
    assert same_weights(policy_weights(out / "policy_step6.pt"), policy_weights(ref_out / "policy_step6.pt"))
    assert loss_rows(out) == loss_rows(ref_out)
    got, want = (json.loads((d / "result.json").read_text()) for d in (out, ref_out))
    for key in ("final_loss", "final_mse", "first_loss"):
        assert got[key] == want[key], key
    assert got["steps"] == want["steps"] == 12


# ---------------------------------------------------------------------- imagined RL
@pytest.fixture(scope="module")
def rl_inputs(squares: Path, tmp_path_factory) -> dict[str, str]:
    """An untrained tiny world model, a tiny VLA and a small proprio model of the square world: RL on them
    learns nothing useful, but runs every part of an iteration and its checkpoint."""
    from policies.vla import VLAConfig, VLAPolicy
    from robot_data.dataset import EpisodeDataset
    from tests.world_models.conftest import tiny_model_config
    from world_models.proprio import ProprioConfig, fit_proprio

    root = tmp_path_factory.mktemp("rl_inputs")
    torch.manual_seed(0)
    cfg = tiny_model_config()
    cfg.denoiser.block_out_channels, cfg.denoiser.norm_num_groups, cfg.head.channels = [8, 16], 4, [4, 8]
    WorldModel(cfg).save(root / "wm.pt")
    VLAPolicy(VLAConfig(views=["agentview"], image_size=16, chunk_len=4, conv_channels=[8, 16], image_features=16,
                        language_features=8, state_features=8, hidden=32)).save(root / "policy.pt")
    ds = EpisodeDataset(squares, verify=False)
    proprio, _ = fit_proprio([ds[i].state for i in range(len(ds))], [ds[i].action for i in range(len(ds))],
                             ProprioConfig(chunk_len=4, hidden=16, layers=1, steps=10))
    proprio.save(root / "proprio.pt")
    return {"data": str(squares), "wm": str(root / "wm.pt"), "policy": str(root / "policy.pt"),
            "proprio": str(root / "proprio.pt")}


# the plain success-head RL of the quick presets, not the shipped recipe the defaults hold (imagination/rl/training.py)
HEAD_REWARD = ["imagination.reward=head", "imagination.keyframes.balance_tasks=false", "exploration=uniform",
               "rl.group_std_floor=0.0", "rl.kl_estimator=k3"]


def rl_args(inputs: dict[str, str], out: Path) -> list[str]:
    return [f"policy={inputs['policy']}", f"world_model={inputs['wm']}", f"start_data={inputs['data']}",
            f"proprio={inputs['proprio']}", "sources=[]", f"out_dir={out}", "iterations=4", "num_groups=1",
            "group_size=2", "checkpoint_every=2", "num_threads=1", "videos=1", "init_log_std=-1.0",
            "imagination.max_steps=8", "imagination.keyframes.mode=start", "imagination.uncertainty=off",
            "imagination.sampling_steps=2", "rl.algo=grpo", "rl.kl_coef=0.0", "rl.epochs=1", "rl.minibatch_size=4",
            *HEAD_REWARD, "bc_coef=0.0"]


def without_time(result: dict) -> dict:
    return {k: v for k, v in result.items() if k != "seconds"}


@pytest.mark.slow
def test_rl_killed_mid_iteration_after_a_checkpoint_and_before_its_results_resumes_exactly(
        rl_inputs: dict[str, str], tmp_path: Path) -> None:
    ref_out, out = tmp_path / "reference", tmp_path / "run"
    run_script("scripts/imagine_rl.py", rl_args(rl_inputs, ref_out))
    # 1. killed after iteration 1's update (nothing checkpointed yet)
    run_script("scripts/imagine_rl.py", rl_args(rl_inputs, out), crash="rl.iteration:1")
    assert not (out / "checkpoint.pt").exists()
    # 2. killed right after iteration 2's checkpoint
    run_script("scripts/imagine_rl.py", rl_args(rl_inputs, out), crash="rl.checkpoint_saved:1")
    # 3. resumed from iteration 2, iterations 3-4 done and checkpointed, killed before metrics and result.json
    run_script("scripts/imagine_rl.py", rl_args(rl_inputs, out), crash="rl.before_result")
    assert not (out / "result.json").exists()
    # 4. resumed at the end
    run_script("scripts/imagine_rl.py", rl_args(rl_inputs, out))
    assert same_weights(policy_weights(out / "policy.pt"), policy_weights(ref_out / "policy.pt"))
    got, want = (json.loads((d / "result.json").read_text()) for d in (out, ref_out))
    assert got["history"] == want["history"]
    assert (out / "metrics.csv").read_text() == (ref_out / "metrics.csv").read_text()
    assert [Path(v).name for v in got.pop("videos")] == [Path(v).name for v in want.pop("videos")]
    assert Path(got.pop("policy_path")).name == Path(want.pop("policy_path")).name == "policy.pt"
    # the processes of steps 3 and 4 resumed the run that step 2 started (step 1 left no checkpoint)
    assert len(got.pop("resumed_provenance")) == 2 and "resumed_provenance" not in want
    assert without_time(got) == without_time(want)


# ---------------------------------------------------------------------- a loop stage
@pytest.mark.slow
def test_loop_stage_killed_inside_and_before_its_record_runs_once_more_and_is_recorded_once(
        squares: Path, tmp_path: Path) -> None:
    """The loop's "bc" stage (LoopState.stage over train_bc_on_data, as run_loop calls it): killed inside the
    stage, then after the stage returned but before loop.json records it. The re-run resumes the stage from
    its own checkpoint; loop.json then records it once, with the uninterrupted run's result, and a further
    run reuses it without training."""
    def args(out: Path) -> Path:
        path = out.with_suffix(".overrides.json")
        path.write_text(json.dumps(bc_args(str(squares), out / "bc")))
        return path

    ref_out, out = tmp_path / "reference", tmp_path / "run"
    reference = run_driver("loop_stage", str(ref_out), str(args(ref_out)))
    run_driver("loop_stage", str(out), str(args(out)), crash="bc.checkpoint_saved:2")
    assert not (out / "loop.json").exists()
    run_driver("loop_stage", str(out), str(args(out)), crash="loop.stage_done")
    assert (out / "bc" / "policy.pt").is_file() and not (out / "loop.json").exists()
    resumed = run_driver("loop_stage", str(out), str(args(out)))
    stages = json.loads((out / "loop.json").read_text())["stages"]
    assert [s["name"] for s in stages] == ["bc"] and stages[0]["status"] == "done"

    def result(proc) -> dict:
        line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT "))
        got = json.loads(line.removeprefix("RESULT "))
        return {k: v for k, v in got.items() if k not in ("seconds", "policy_path", "snapshots")}

    assert result(resumed) == result(reference)
    assert same_weights(policy_weights(out / "bc" / "policy.pt"), policy_weights(ref_out / "bc" / "policy.pt"))
    again = run_driver("loop_stage", str(out), str(args(out)))
    assert "bc: done before" in again.stdout and result(again) == result(reference)
