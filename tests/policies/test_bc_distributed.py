"""Behaviour cloning as 2 data-parallel CPU processes under `accelerate launch`: it runs, the loss falls,
and a run killed after its halfway checkpoint and resumed ends exactly where the uninterrupted run does."""
from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest
import torch

from infra.data_parallel import shard
from policies.base import Policy
from policies.language import InstructionEncoder, LanguageConfig
from tests.distributed import Launch, accelerate_launch
from tests.policies.conftest import INSTRUCTIONS

SCRIPT = "scripts/train_bc.py"
STEPS = 20
CACHE = "instructions.npz"


def run_args(data: str, out: Path) -> list[str]:
    """tests/policies/conftest.py's tiny VLA, a checkpoint every STEPS / 2 steps, the loss logged at each.

    The instruction embeddings come from the cache `instruction_cache` wrote: no process loads MiniLM."""
    tiny = [f"policy.language_cache={out.parent / CACHE}", "policy.image_size=16",
            "policy.conv_channels=[8,16]", "policy.image_features=32", "policy.language_features=16",
            "policy.state_features=16", "policy.hidden=64", "policy.trunk_layers=2", "policy.chunk_len=4"]
    return [f"data_dir={data}", f"out_dir={out}", *tiny, f"steps={STEPS}", "batch_size=16", "lr=3e-3",
            "log_every=1", f"checkpoint_every={STEPS // 2}", "augment_shift=2", "num_threads=1"]


def instruction_cache(folder: Path) -> None:
    """The square dataset's instructions embedded once here, rather than by MiniLM in every process."""
    InstructionEncoder(LanguageConfig(cache_path=str(folder / CACHE))).encode(list(INSTRUCTIONS))


def losses(out: Path) -> list[float]:
    with open(out / "loss.csv", newline="") as f:
        return [float(r["loss"]) for r in csv.DictReader(f)]


@pytest.mark.slow
def test_two_processes_train_and_resume_exactly(square_dataset, tmp_path):
    straight, stopped = tmp_path / "straight", tmp_path / "stopped"
    instruction_cache(tmp_path)
    # side by side: the same run uninterrupted, and killed after its checkpoint at STEPS / 2
    accelerate_launch(Launch(SCRIPT, run_args(square_dataset, straight)),
                      Launch(SCRIPT, run_args(square_dataset, stopped), crash="bc.checkpoint_saved:1"))
    curve = losses(straight)  # one row a step, written by the main process alone: the mean over both
    assert len(curve) == STEPS and np.mean(curve[-5:]) < 0.75 * np.mean(curve[:3]), curve
    assert json.loads((straight / "result.json").read_text())["steps"] == STEPS

    assert not (stopped / "policy.pt").exists() and len(losses(stopped)) == STEPS // 2
    accelerate_launch(Launch(SCRIPT, run_args(square_dataset, stopped)))
    assert losses(stopped) == curve  # the same losses, bit for bit, before and after the stop
    a, b = Policy.load(straight / "policy.pt").state_dict(), Policy.load(stopped / "policy.pt").state_dict()
    assert a.keys() == b.keys()
    for k, v in a.items():
        if isinstance(v, torch.Tensor):
            assert torch.equal(v, b[k]), k


def test_batch_must_split_evenly_over_processes():
    assert shard(16, 1, 2) == slice(8, 16)
    with pytest.raises(ValueError, match="batch_size: 15 does not split evenly over 2 processes"):
        shard(15, 0, 2)
