"""Loading a checkpoint never runs code, and an unusable one gives one error naming the file.

Each checkpoint kind the project reads (world model, policy, BC and RL checkpoints, state-reward and
proprio models, the autoencoder and its training checkpoint) is given a planted pickle payload, which
would create a marker file if anything built it, and the damaged files a crash or a bad disk leaves
(empty, random bytes, truncated). The world-model training checkpoint folder has tests of its own
(tests/world_models/test_train_checkpoint.py).
"""
from __future__ import annotations

import builtins
import pickle
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import pytest
import torch

from imagination.rl.checkpoint import load_checkpoint as load_rl_checkpoint
from infra.checkpoint import CheckpointError, load_torch
from policies.base import Policy, RandomPolicy, RandomPolicyConfig
from policies.bc import _resume as resume_bc
from world_models.autoencoder import Autoencoder, AutoencoderConfig
from world_models.autoencoder_training import _FORMAT as AE_TRAIN_FORMAT
from world_models.autoencoder_training import AutoencoderTrainer
from world_models.model import WorldModel
from world_models.object_state import StateReward, StateRewardConfig
from world_models.proprio import ProprioConfig, ProprioModel


class Payload:
    """Unpickling this creates `marker`: the proof that loading ran code."""

    def __init__(self, marker: Path):
        self.marker = str(marker)

    def __reduce__(self):
        return builtins.open, (self.marker, "w")


class _TrainerAt:
    """Just enough of an AutoencoderTrainer for its `load`: the file is refused before the model is touched
    (an AttributeError here would mean the reader went past the refusal)."""

    def __init__(self, path: Path):
        self.path = path

    def checkpoint_path(self) -> Path:
        return self.path


def _tiny_autoencoder() -> Autoencoder:
    return Autoencoder(AutoencoderConfig(image_size=32, block_out_channels=[8, 8], norm_num_groups=8,
                                         mid_block_attention=False))


def _loaders() -> dict[str, Callable[[Path], object]]:
    """Every checkpoint kind, by the function that reads it. The BC, RL and autoencoder-training readers
    refuse the file before they touch the run's objects, so none are built here."""
    return {
        "autoencoder": Autoencoder.load,
        "autoencoder training checkpoint": lambda p: AutoencoderTrainer.load(_TrainerAt(p)),  # type: ignore[arg-type]
        "world model": WorldModel.load,
        "policy": Policy.load,
        "BC checkpoint": lambda p: resume_bc(p, None, None, None, None, None),  # type: ignore[arg-type]
        "RL checkpoint": lambda p: load_rl_checkpoint(p, None, None),  # type: ignore[arg-type]
        "state reward": StateReward.load,
        "proprio model": ProprioModel.load,
    }


def _real_file(kind: str, path: Path) -> None:
    """A genuine file of `kind` at `path` (the damaged ones are made from it)."""
    if kind == "autoencoder":
        _tiny_autoencoder().save(path)
    elif kind == "autoencoder training checkpoint":  # the blob AutoencoderTrainer.save writes
        ae = _tiny_autoencoder()
        torch.save({"format": AE_TRAIN_FORMAT, "step": 1, "model": ae.state_dict(),
                    "optimizer": torch.optim.AdamW(ae.parameters()).state_dict(),
                    "generator": torch.Generator().get_state(), "rng": "{}"}, path)
    elif kind in ("world model", "state reward", "proprio model", "policy"):
        makers: dict[str, Callable[[], Any]] = {
            "state reward": lambda: StateReward(StateRewardConfig()),
            "proprio model": lambda: ProprioModel(ProprioConfig()),
            "policy": lambda: RandomPolicy(RandomPolicyConfig(chunk_len=2))}
        model = makers.get(kind)
        if model is None:
            from tests.world_models.conftest import tiny_model_config

            WorldModel(tiny_model_config()).save(path)
        else:
            model().save(path)
    else:
        torch.save({"iteration": 1, "step": 1, "policy": {"w": torch.zeros(3)}}, path)


@pytest.mark.parametrize("kind", list(_loaders()))
@pytest.mark.parametrize("container", ["torch.save", "raw pickle"])
def test_a_planted_payload_is_refused_and_never_runs(kind, container, tmp_path):
    marker = tmp_path / "ran"
    path = tmp_path / "planted.pt"
    blob = {"format": "x", "config": {}, "state_dict": Payload(marker), "policy": Payload(marker)}
    if container == "torch.save":
        torch.save(blob, path)
    else:
        path.write_bytes(pickle.dumps(blob))
    with pytest.raises(CheckpointError) as err:
        _loaders()[kind](path)
    assert str(path) in str(err.value)
    assert not marker.exists()
    # the payload is real: an unrestricted load would have run it
    if container == "torch.save":
        torch.load(path, weights_only=False)
    else:
        pickle.loads(path.read_bytes())
    assert marker.exists()


@pytest.mark.parametrize("kind", list(_loaders()))
@pytest.mark.parametrize("damage", ["empty", "random bytes", "truncated"])
def test_a_damaged_file_names_itself(kind, damage, tmp_path):
    path = tmp_path / "damaged.pt"
    _real_file(kind, path)
    data = path.read_bytes()
    damaged = {"empty": b"", "random bytes": random.Random(0).randbytes(len(data)), "truncated": data[: len(data) // 2]}
    path.write_bytes(damaged[damage])
    with pytest.raises(CheckpointError) as err:
        _loaders()[kind](path)
    message = str(err.value)
    assert message.startswith(f"{path}: ") and "\n" not in message
    assert "weights_only" not in message  # torch's advice to load it unsafely is not passed on


def test_a_missing_file_is_file_not_found_naming_it(tmp_path):
    with pytest.raises(FileNotFoundError, match="nowhere.pt"):
        load_torch(tmp_path / "nowhere.pt", "world model")


def test_a_foreign_file_is_named_with_what_it_should_be(tmp_path):
    torch.save({"weights": torch.zeros(1)}, tmp_path / "other.pt")
    with pytest.raises(CheckpointError, match="not a world model checkpoint"):
        WorldModel.load(tmp_path / "other.pt")
    with pytest.raises(CheckpointError, match="lacks"):
        load_rl_checkpoint(tmp_path / "other.pt", None, None)  # type: ignore[arg-type]


def test_a_policy_naming_a_module_outside_the_project_is_not_imported(tmp_path):
    path = tmp_path / "policy.pt"
    RandomPolicy(RandomPolicyConfig(chunk_len=2)).save(path)
    blob = torch.load(path, weights_only=True)
    blob["class"] = "antigravity:Policy"  # importing it would open a web browser
    torch.save(blob, path)
    with pytest.raises(CheckpointError, match="outside this project's packages"):
        Policy.load(path)


def test_rl_checkpoint_keeps_its_history_exactly_and_reads_older_files(tmp_path):
    from imagination.rl.checkpoint import save_checkpoint

    policy = cast(Policy, torch.nn.Linear(2, 2))  # the reader needs only load_state_dict
    opt = torch.optim.Adam(policy.parameters())
    history = [{"iteration": 1, "imagined_return": 0.1 + 0.2, "std": float("nan")}]
    save_checkpoint(tmp_path / "ck.pt", policy, opt, 1, history, [(1, 0.25)])
    it, got, scores, seconds, processes = load_rl_checkpoint(tmp_path / "ck.pt", policy, opt)
    assert seconds == 0.0 and processes == []  # saved with the defaults: no time, no provenance recorded
    assert it == 1 and got[0]["imagined_return"] == 0.1 + 0.2 and got[0]["std"] != got[0]["std"]
    assert scores == [(1, 0.25)]
    # a file from before the JSON fields: the same lists as plain data
    torch.save({"iteration": 2, "policy": policy.state_dict(), "optimizer": opt.state_dict(),
                "history": history, "heldout": [(1, 0.5)]}, tmp_path / "old.pt")
    assert load_rl_checkpoint(tmp_path / "old.pt", policy, opt)[:3:2] == (2, [(1, 0.5)])


def test_a_checkpoint_of_another_version_is_refused_by_name(tmp_path: Path) -> None:
    """expect_format's version check, which WorldModel, Policy and Autoencoder loading share."""
    _real_file("policy", tmp_path / "p.pt")
    blob = torch.load(tmp_path / "p.pt", weights_only=True)
    torch.save(dict(blob, version=99), tmp_path / "p.pt")
    with pytest.raises(CheckpointError, match=r"p\.pt: policy checkpoint .* version 99 is not supported"):
        Policy.load(tmp_path / "p.pt")
