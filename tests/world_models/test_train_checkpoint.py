"""World-model training checkpoints: no file in a checkpoint folder can run code on resume, and a damaged
newest checkpoint is reported by path and passed over for the newest intact one."""
from __future__ import annotations

import builtins
import json
import pickle
import shutil
from pathlib import Path

import pytest
import torch

from infra.checkpoint import CheckpointError
from tests.world_models.conftest import tiny_checkpoint_config
from world_models.training import Trainer, train


class Payload:
    """Unpickling this creates `marker`: the proof that loading ran code."""

    def __init__(self, marker: Path):
        self.marker = str(marker)

    def __reduce__(self):
        return builtins.open, (self.marker, "w")


def _cfg(data: Path, out: Path):
    return tiny_checkpoint_config(data, out, steps=4)


@pytest.fixture(scope="module")
def finished(square_data, tmp_path_factory):
    """A 4-step run with checkpoints at steps 2 and 4."""
    out = tmp_path_factory.mktemp("run") / "run"
    train(_cfg(square_data, out))
    return out


@pytest.fixture
def run(finished, square_data, tmp_path):
    """A copy of the finished run, its config and its two checkpoint folders (older, newer)."""
    out = tmp_path / "run"
    shutil.copytree(finished, out)
    ckpts = out / "checkpoints"
    return _cfg(square_data, out), ckpts / "step_0000002", ckpts / "step_0000004"


def test_a_checkpoint_folder_holds_no_pickle_of_accelerate(run):
    _, _, newer = run
    assert sorted(f.name for f in newer.iterdir()) == ["model.safetensors", "optimizer.bin", "scheduler.bin",
                                                       "train_state_0.pt"]


@pytest.mark.parametrize("name", ["model.safetensors", "optimizer.bin", "scheduler.bin", "train_state_0.pt",
                                  "scaler.pt", "sampler.bin", "custom_checkpoint_0.pkl"])
def test_a_planted_payload_in_any_checkpoint_file_is_refused_and_never_runs(run, name, tmp_path):
    cfg, _, newer = run
    marker = tmp_path / "ran"
    (newer / name).write_bytes(pickle.dumps({"state": Payload(marker)}))
    if name == "custom_checkpoint_0.pkl":  # the layout before train_state_<rank>.pt: its train state is read there
        (newer / "train_state_0.pt").unlink()
    trainer = Trainer(cfg)
    with pytest.raises(CheckpointError) as err:
        trainer.load_checkpoint(newer)
    assert str(newer) in str(err.value) and "\n" not in str(err.value)
    assert not marker.exists()


def test_a_payload_in_accelerates_rng_pickle_is_never_read(run, tmp_path):
    """Folders of the older layout hold random_states_0.pkl, which accelerate would unpickle: it is renamed out
    of its reach (training draws nothing from the global RNG) and the checkpoint still resumes."""
    cfg, _, newer = run
    marker = tmp_path / "ran"
    torch.save({"random_state": Payload(marker)}, newer / "random_states_0.pkl")
    trainer = Trainer(cfg)
    assert trainer.load_checkpoint(newer) and trainer.step_count == 4
    assert not marker.exists() and (newer / "legacy_random_states_0.pkl").is_file()


def _damage(path: Path, how: str) -> None:
    data = path.read_bytes()
    path.write_bytes({"empty": b"", "random": bytes(range(256)) * (len(data) // 256 + 1),
                      "truncated": data[: len(data) // 2]}[how])


@pytest.mark.parametrize("name, how", [("optimizer.bin", "empty"), ("model.safetensors", "random"),
                                       ("train_state_0.pt", "truncated"), ("scheduler.bin", "random")])
def test_a_damaged_newest_checkpoint_falls_back_to_the_newest_intact_one(run, name, how, capsys):
    cfg, older, newer = run
    _damage(newer / name, how)
    trainer = Trainer(cfg)
    assert trainer.load_checkpoint() and trainer.step_count == 2
    err = capsys.readouterr().err
    assert f"checkpoint {newer} is damaged" in err and str(newer / name) in err
    # set aside, so that neither a later resume nor the pruning takes it for the newest
    assert not newer.exists() and newer.with_name(newer.name + ".corrupt").is_dir()
    assert trainer.list_checkpoints() == [older]
    # and the resumed run trains on to the end, as an uninterrupted one
    result = train(cfg, trainer)
    assert result["steps"] == 4 and [p.name for p in trainer.list_checkpoints()] == [older.name, newer.name]


def test_no_intact_checkpoint_refuses_naming_every_one(run):
    cfg, older, newer = run
    _damage(newer / "optimizer.bin", "empty")
    _damage(older / "train_state_0.pt", "truncated")
    with pytest.raises(CheckpointError) as err:
        Trainer(cfg).load_checkpoint()
    assert str(older / "train_state_0.pt") in str(err.value) and str(newer / "optimizer.bin") in str(err.value)


def test_a_folder_of_the_older_layout_resumes_exactly(run):
    """custom_checkpoint_0.pkl (the same plain data accelerate pickled) is read with weights_only=True."""
    cfg, _, newer = run
    reference = Trainer(cfg)
    assert reference.load_checkpoint(newer)
    expected = reference.step()
    state = torch.load(newer / "train_state_0.pt", weights_only=True)
    torch.save({"step": state["step"], "sampler": json.loads(state["sampler_json"]), "generator": state["generator"]},
               newer / "custom_checkpoint_0.pkl")
    (newer / "train_state_0.pt").unlink()
    legacy = Trainer(cfg)
    assert legacy.load_checkpoint(newer) and legacy.step_count == 4
    assert legacy.step()["loss"] == expected["loss"]
    assert (newer / "legacy_train_state_0.pt").is_file() and not (newer / "custom_checkpoint_0.pkl").exists()
