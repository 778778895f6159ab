"""World-model training as 2 data-parallel CPU processes under `accelerate launch`: it runs, the loss
falls, and a run stopped halfway and resumed ends with the weights of the uninterrupted run."""
from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from tests.distributed import Launch, accelerate_launch
from tests.world_models.conftest import write_square_dataset
from world_models.model import WorldModel
from world_models.train_checkpoint import check_process_count

SCRIPT = "scripts/train_world_model.py"
STEPS = 20


def run_args(data: Path, out: Path, steps: int) -> list[str]:
    """The square world's tiny model (tests/world_models/conftest.py), a checkpoint every STEPS / 2 steps."""
    return [f"out_dir={out}", f"clips.data_dir={data}", "clips.context_frames=2", "clips.chunk_len=4",
            "model.denoiser.block_out_channels=[8,16]", "model.denoiser.norm_num_groups=4",
            "model.denoiser.layers_per_block=1", "model.head.channels=[8,16]", f"steps={steps}", "batch_size=8",
            "lr=5e-3", "lr_schedule=constant_with_warmup", "warmup_steps=5", "augment.enabled=false",
            f"checkpoint_every={STEPS // 2}", "keep_checkpoints=2", "sample_every=0", "log_every=1", "num_threads=1"]


def logged_losses(out: Path) -> list[float]:
    """train/denoise at every step, from the tensorboard file (written by the main process alone)."""
    files = sorted((out / "logs" / "world_model").glob("events.out.tfevents.*"))
    assert len(files) == 1, files
    events = EventAccumulator(str(files[0]))
    events.Reload()
    return [e.value for e in events.Scalars("train/denoise")]


@pytest.mark.slow
def test_two_processes_train_and_resume_exactly(tmp_path):
    data = write_square_dataset(tmp_path / "data", episodes=6, T=24)
    straight = tmp_path / "straight"
    accelerate_launch(Launch(SCRIPT, run_args(data, straight, STEPS)))
    half = straight / "checkpoints" / f"step_{STEPS // 2:07d}"
    # one train state per process: each draws its own clips from its own generators
    assert sorted(f.name for f in half.glob("train_state_*.pt")) == ["train_state_0.pt", "train_state_1.pt"]
    losses = logged_losses(straight)
    assert len(losses) == STEPS and np.mean(losses[-5:]) < 0.7 * np.mean(losses[:5]), losses

    # the first half of the same run, stopped after its checkpoint at STEPS / 2, then resumed to STEPS
    resumed = tmp_path / "resumed"
    (resumed / "checkpoints").mkdir(parents=True)
    shutil.copytree(half, resumed / "checkpoints" / half.name)
    [(stdout, _)] = accelerate_launch(Launch(SCRIPT, run_args(data, resumed, STEPS)))
    assert stdout.count(f"resumed from step {STEPS // 2}") == 1  # printed by the main process only
    a, b = WorldModel.load(straight / "world_model.pt"), WorldModel.load(resumed / "world_model.pt")
    assert a.state_dict().keys() == b.state_dict().keys()
    for k, v in a.state_dict().items():
        assert torch.equal(v, b.state_dict()[k]), k
    # and the weights at the halfway checkpoint differ from them: the resumed run trained, the comparison can fail
    halfway = load_file(half / "model.safetensors")  # the prepared objective's state: the model under "model."
    assert not all(torch.equal(v, halfway[f"model.{k}"]) for k, v in a.state_dict().items())


def test_resume_with_another_process_count_is_refused(tmp_path):
    for rank in (0, 1):
        (tmp_path / f"train_state_{rank}.pt").touch()
    check_process_count(tmp_path, 2)
    with pytest.raises(ValueError, match=r"written by 2 training processes, this run has 1; .*--num_processes 2"):
        check_process_count(tmp_path, 1)
