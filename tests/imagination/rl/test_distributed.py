"""Imagined RL as 2 data-parallel CPU processes under `accelerate launch`: each imagines half of the
groups, the update is data-parallel (the replicas are checked equal at every checkpoint), the behaviour-
cloning anchor's loss falls, and a run killed after its first checkpoint and resumed ends exactly where
the uninterrupted run does.

The world model is untrained (what is imagined does not matter here: the mechanics do); the 1-process
tests in test_training.py show GRPO raising the imagined success on a trained one."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from policies.base import Policy
from policies.vla import VLAConfig, VLAPolicy
from robot_data.dataset import EpisodeDataset
from tests.distributed import Launch, accelerate_launch
from tests.world_models.conftest import SIZE, tiny_model_config, write_square_dataset
from world_models.model import WorldModel
from world_models.proprio import ProprioConfig, fit_proprio

SCRIPT = "scripts/imagine_rl.py"
ITERATIONS = 2


def square_inputs(root: Path) -> list[str]:
    """Start data, an untrained tiny world model, a barely fitted proprio model and an untrained VLA, as the
    script's arguments."""
    data = write_square_dataset(root / "data", episodes=6, T=24)
    torch.manual_seed(0)
    WorldModel(tiny_model_config()).eval().save(root / "wm.pt")
    episodes = EpisodeDataset(data, verify=False)
    proprio, _ = fit_proprio([episodes[i].state for i in range(len(episodes))],
                             [episodes[i].action for i in range(len(episodes))],
                             ProprioConfig(chunk_len=4, hidden=16, layers=1, steps=5))
    proprio.save(root / "proprio.pt")
    VLAPolicy(VLAConfig(views=["agentview"], image_size=SIZE, chunk_len=4, conv_channels=[8, 16], image_features=16,
                        language_features=8, state_features=8, hidden=32)).save(root / "policy.pt")
    return [f"policy={root / 'policy.pt'}", f"world_model={root / 'wm.pt'}", f"start_data={data}",
            f"proprio={root / 'proprio.pt'}", "sources=[]"]


# the plain success-head RL of the quick presets, not the shipped recipe the defaults hold (imagination/rl/training.py)
HEAD_REWARD = ["imagination.reward=head", "imagination.keyframes.balance_tasks=false", "exploration=uniform",
               "rl.group_std_floor=0.0", "rl.kl_estimator=k3"]


def run_args(inputs: list[str], out: Path) -> list[str]:
    """4 groups of 4 (2 groups a process), GRPO with a behaviour-cloning anchor, a checkpoint every iteration, the
    world model's disagreement reported."""
    return [*inputs, f"out_dir={out}", f"iterations={ITERATIONS}", "num_groups=4", "group_size=4", "init_log_std=-1.0",
            "num_threads=1", "videos=1", "imagination.max_steps=8", "imagination.keyframes.mode=start",
            "rl.algo=grpo", "rl.lr=3e-3", "rl.kl_coef=0.0", "rl.epochs=4", "rl.minibatch_size=8", "bc_coef=1.0",
            "checkpoint_every=1", "imagination.uncertainty=report", *HEAD_REWARD]


def history(out: Path) -> list[dict]:
    return json.loads((out / "result.json").read_text())["history"]


@pytest.mark.slow
def test_two_processes_train_and_resume_exactly(tmp_path):
    inputs = square_inputs(tmp_path)
    straight, stopped = tmp_path / "straight", tmp_path / "stopped"
    # side by side: the same run uninterrupted, and killed after its first checkpoint
    accelerate_launch(Launch(SCRIPT, run_args(inputs, straight)),
                      Launch(SCRIPT, run_args(inputs, stopped), crash="rl.checkpoint_saved:1"))
    rows = history(straight)
    assert len(rows) == ITERATIONS
    # the figures are over both processes' episodes: 16 a batch, each of at least one chunk
    assert all(row["imagined_samples"] >= 16 for row in rows), rows
    # the disagreement's spread over both processes' chunks (their batches differ in length: padded, then dropped)
    assert all(row["imagined_uncertainty_p90"] > 0 and 0 <= row["imagined_uncertain_fraction"] <= 1 for row in rows)
    anchor = [row["anchor_loss"] for row in rows]  # what the averaged gradients descend besides GRPO's objective
    assert anchor[-1] < 0.85 * anchor[0], anchor

    assert (stopped / "checkpoint.pt").is_file() and not (stopped / "result.json").exists()
    accelerate_launch(Launch(SCRIPT, run_args(inputs, stopped)))
    assert history(stopped) == rows  # every figure of every iteration, bit for bit
    a, b = Policy.load(straight / "policy.pt").state_dict(), Policy.load(stopped / "policy.pt").state_dict()
    for k, v in a.items():
        if isinstance(v, torch.Tensor):
            assert torch.equal(v, b[k]), k
    assert len(list((straight / "videos").glob("*.mp4"))) == 1  # written by the main process alone
