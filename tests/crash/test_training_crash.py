"""World-model training, BC, RL and a loop stage, SIGKILLed in real subprocesses at named points
(envs/crash_points.py), resumed, and compared with an uninterrupted run.

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
    assert got["final_loss"] == want["final_loss"] and got["final_mse"] == want["final_mse"]
    assert got["steps"] == want["steps"] == 12
