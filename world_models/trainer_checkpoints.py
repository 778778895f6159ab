"""How the world-model Trainer (world_models/training.py) saves, prunes and resumes its checkpoints: the folder
layout and its safe reading are world_models/train_checkpoint.py's; this is the Trainer's side of it, kept apart so
that the training step reads on its own.

    trainer.save_checkpoint()   # checkpoints/step_NNNNNNN, committed by a rename after world_model.pt is written
    trainer.load_checkpoint()   # the newest intact one; damaged ones reported and set aside as .corrupt
"""
from __future__ import annotations

import shutil
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from infra.atomic import fsync_dir, fsync_file
from infra.checkpoint import CheckpointError
from infra.crash_points import crash_point
from world_models.model import WorldModel
from world_models.train_checkpoint import (
    CORRUPT_SUFFIX,
    STEP_DIR,
    check_process_count,
    drop_accelerate_rng,
    migrate_legacy,
    read_train_state,
    save_train_state,
    set_global_rng,
    verify,
)

if TYPE_CHECKING:
    from accelerate import Accelerator

    from world_models.train_setup import TrainWorldModelConfig


class TrainerCheckpoints:
    """The checkpoint half of the Trainer: it reads the Trainer's accelerator, out dir, config, train state
    (step, clip sampler, generator) and the model inside its prepared objective, and writes nothing else."""

    acc: Accelerator
    out: Path
    cfg: TrainWorldModelConfig
    state: Any
    objective: Any  # the accelerate-prepared WorldModelObjective; its .model is the WorldModel

    def unwrapped(self) -> WorldModel:
        """The WorldModel inside the (possibly DDP-wrapped) objective."""
        return self.acc.unwrap_model(self.objective).model

    def checkpoint_dir(self) -> Path:
        return self.out / "checkpoints"

    def save_checkpoint(self) -> Path:
        """accelerate state into a temporary folder; then the WorldModel file; then the folder renamed into place.

        The model file is written before the rename that commits the checkpoint: a kill in between leaves
        a world_model.pt newer than the newest checkpoint (a resume retrains those steps exactly and writes
        it again), never one older than it.
        """
        self.acc.wait_for_everyone()
        final = self.checkpoint_dir() / f"step_{self.state.step:07d}"
        tmp = final.with_name(final.name + ".tmp")
        if self.acc.is_main_process:
            shutil.rmtree(tmp, ignore_errors=True)
        self.acc.wait_for_everyone()
        self.acc.save_state(str(tmp), safe_serialization=True)
        crash_point("wm.checkpoint.state_saved")
        save_train_state(tmp, self.acc.process_index, self.state.step, self.state.sampler.state_dict(),
                         self.state.generator)
        self.acc.wait_for_everyone()
        if self.acc.is_main_process:
            drop_accelerate_rng(tmp)  # their RNG states are in train_state_<rank>.pt
            for f in tmp.rglob("*"):  # on disk before the rename commits them (a power cut, not only a kill)
                if f.is_file():
                    fsync_file(f)
            self.unwrapped().save(self.model_path())
            crash_point("wm.checkpoint.before_commit")
            shutil.rmtree(final, ignore_errors=True)
            tmp.replace(final)
            fsync_dir(final.parent)
            crash_point("wm.checkpoint.after_commit")
            self.prune_checkpoints()
        self.acc.wait_for_everyone()
        return final

    def model_path(self) -> Path:
        return self.out / "world_model.pt"

    def prune_checkpoints(self) -> None:
        """Keep the newest `keep_checkpoints` checkpoints; drop temporary folders a killed save left behind."""
        for old in self.list_checkpoints()[: -max(self.cfg.keep_checkpoints, 1)]:
            shutil.rmtree(old, ignore_errors=True)
        d = self.checkpoint_dir()
        for tmp in d.glob("step_*.tmp") if d.is_dir() else []:
            shutil.rmtree(tmp, ignore_errors=True)

    def export_model(self) -> bool:
        """Rewrite world_model.pt from the current weights unless it holds exactly them; True if rewritten.

        Why: a run killed between committing its last checkpoint and writing the model file (or a file
        damaged since) would otherwise leave a stale or missing model behind a run that reports done.
        """
        path = self.model_path()
        model = self.unwrapped()
        if _holds_weights(path, model):
            return False
        model.save(path)
        return True

    def list_checkpoints(self) -> list[Path]:
        """Committed checkpoint folders, oldest first (not .tmp ones a killed save left, nor set-aside .corrupt)."""
        d = self.checkpoint_dir()
        return sorted(p for p in d.iterdir() if p.is_dir() and STEP_DIR.match(p.name)) if d.is_dir() else []

    def load_checkpoint(self, path: Path | None = None) -> bool:
        """Restore the given checkpoint, or the newest intact one; False when there is none.

        A damaged newer one (empty, truncated or foreign files, a refused pickle) is reported on stderr
        by path and renamed step_NNNNNNN.corrupt, so that neither a later resume nor the pruning of old
        checkpoints takes it for the newest. CheckpointError names every damaged folder when none is
        intact, and the given one when `path` is given."""
        ckpts = [path] if path is not None else self.list_checkpoints()[::-1]
        if self.acc.is_main_process:
            for ckpt in ckpts:
                migrate_legacy(ckpt)
        self.acc.wait_for_everyone()
        damaged: list[tuple[Path, CheckpointError]] = []
        for ckpt in ckpts:
            try:
                self._restore(ckpt)
            except CheckpointError as err:
                if path is not None:
                    raise
                damaged.append((ckpt, err))
                if self.acc.is_main_process:
                    print(f"warning: checkpoint {ckpt} is damaged, not resumed from: {err}", file=sys.stderr)
                continue
            self._set_aside(damaged)
            return True
        if damaged:
            raise CheckpointError(f"no intact checkpoint to resume from in {self.checkpoint_dir()} (resume=false "
                                  "starts over): " + "; ".join(str(err) for _, err in damaged))
        return False

    def _restore(self, ckpt: Path) -> None:
        """Every file of `ckpt` read safely first (train_checkpoint.verify), then loaded."""
        rank = self.acc.process_index
        check_process_count(ckpt, self.acc.num_processes)
        verify(ckpt, rank)
        state = read_train_state(ckpt, rank)
        try:
            self.acc.load_state(str(ckpt))
            self.state.load_state_dict(state)
        except (RuntimeError, ValueError, KeyError, TypeError, OSError) as err:  # shapes or states that do not fit
            raise CheckpointError(f"{ckpt}: does not fit this run ({type(err).__name__}: "
                                  f"{str(err).strip().splitlines()[0] if str(err).strip() else ''})") from None
        if "rng" in state:
            set_global_rng(state["rng"])

    def _set_aside(self, damaged: list[tuple[Path, CheckpointError]]) -> None:
        self.acc.wait_for_everyone()  # every process has read past them before they move
        if self.acc.is_main_process:
            for ckpt, _ in damaged:
                aside = ckpt.with_name(ckpt.name + CORRUPT_SUFFIX)
                shutil.rmtree(aside, ignore_errors=True)
                ckpt.replace(aside)
                print(f"warning: moved the damaged checkpoint to {aside}", file=sys.stderr)


def _holds_weights(path: Path, model: WorldModel) -> bool:
    """True when `path` is a WorldModel file with `model`'s config and exactly its weights."""
    try:
        saved = WorldModel.load(path)
    except Exception:  # missing, truncated or foreign: not the current model either way
        return False
    mine = {k: v.detach().cpu() for k, v in model.state_dict().items()}
    theirs = saved.state_dict()
    return (saved.cfg == model.cfg and mine.keys() == theirs.keys()
            and all(torch.equal(mine[k], theirs[k]) for k in mine))
