"""The final world_model.pt is never older than the newest checkpoint, and keep_checkpoints holds on every path.

A kill is simulated at the two points of a checkpoint save: after the checkpoint is committed but
before the model file is written (the state an older save order left behind), and after the model
file is written but before the checkpoint folder is renamed into place.
"""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch

from tests.world_models.conftest import tiny_checkpoint_config
from world_models.model import WorldModel
from world_models.training import Trainer, train


def _cfg(data: Path, out: Path):
    return tiny_checkpoint_config(data, out, steps=6)


def _weights_of_checkpoint(cfg, ckpt: Path) -> dict[str, torch.Tensor]:
    trainer = Trainer(cfg)
    assert trainer.load_checkpoint(ckpt)
    return {k: v.detach().cpu().clone() for k, v in trainer.unwrapped().state_dict().items()}


def _file_weights(path: Path) -> dict[str, torch.Tensor]:
    return WorldModel.load(path).state_dict()


def _same(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def _names(out: Path) -> list[str]:
    return sorted(p.name for p in (out / "checkpoints").iterdir())


@pytest.fixture(scope="module")
def finished(square_data, tmp_path_factory):
    """An uninterrupted 6-step run (checkpoints at 2, 4, 6; two kept) and its final weights."""
    out = tmp_path_factory.mktemp("uninterrupted") / "run"
    cfg = _cfg(square_data, out)
    train(cfg)
    return cfg, _file_weights(out / "world_model.pt")


def test_uninterrupted_run_keeps_two_checkpoints_and_the_newest_weights(finished):
    cfg, final = finished
    out = Path(cfg.out_dir)
    assert _names(out) == ["step_0000004", "step_0000006"]
    assert _same(final, _weights_of_checkpoint(cfg, out / "checkpoints" / "step_0000006"))
    assert not _same(final, _weights_of_checkpoint(cfg, out / "checkpoints" / "step_0000004"))


def test_resume_repairs_a_model_file_older_than_the_newest_checkpoint(finished, tmp_path, capsys):
    cfg0, final = finished
    out = tmp_path / "run"
    shutil.copytree(cfg0.out_dir, out)
    cfg = _cfg(Path(cfg0.clips.data_dir), out)
    ckpts = out / "checkpoints"
    # killed after step 6's checkpoint was committed, before the model file and the pruning: the model
    # file still holds step 4's weights and a third checkpoint folder is left
    older = Trainer(cfg)
    assert older.load_checkpoint(ckpts / "step_0000004")
    older.unwrapped().save(out / "world_model.pt")
    shutil.copytree(ckpts / "step_0000004", ckpts / "step_0000002")
    assert not _same(_file_weights(out / "world_model.pt"), final)

    result = train(cfg)
    assert result["steps"] == 6
    assert "rewrote" in capsys.readouterr().out
    assert _same(_file_weights(out / "world_model.pt"), final)
    assert _names(out) == ["step_0000004", "step_0000006"]

    # a missing model file is written again too
    (out / "world_model.pt").unlink()
    train(cfg)
    assert _same(_file_weights(out / "world_model.pt"), final)


def test_a_current_model_file_is_left_alone(finished, tmp_path, capsys):
    cfg0, _ = finished
    out = tmp_path / "run"
    shutil.copytree(cfg0.out_dir, out)
    before = (out / "world_model.pt").stat().st_mtime_ns
    train(_cfg(Path(cfg0.clips.data_dir), out))
    assert "rewrote" not in capsys.readouterr().out
    assert (out / "world_model.pt").stat().st_mtime_ns == before


class Killed(BaseException):
    """Stands in for SIGKILL: nothing after the kill point runs."""


def test_kill_between_model_file_and_checkpoint_commit(finished, tmp_path, monkeypatch):
    cfg0, final = finished
    out = tmp_path / "run"
    cfg = _cfg(Path(cfg0.clips.data_dir), out)
    real_save = WorldModel.save
    saves: list[int] = []

    def save_then_die(self, path):
        real_save(self, path)
        saves.append(1)
        if len(saves) == 3:  # the save of step 6: model file written, checkpoint not yet renamed
            raise Killed

    monkeypatch.setattr(WorldModel, "save", save_then_die)
    with pytest.raises(Killed):
        train(cfg)
    monkeypatch.undo()
    ckpts = out / "checkpoints"
    assert "step_0000006.tmp" in _names(out) and not (ckpts / "step_0000006").exists()
    # the model file is not older than the newest committed checkpoint (step 4): it is step 6's
    assert _same(_file_weights(out / "world_model.pt"), final)

    result = train(cfg)  # resumes from step 4 and retrains steps 5-6 exactly
    assert result["steps"] == 6
    assert _same(_file_weights(out / "world_model.pt"), final)
    assert _same(_weights_of_checkpoint(cfg, ckpts / "step_0000006"), final)
    assert _names(out) == ["step_0000004", "step_0000006"]
