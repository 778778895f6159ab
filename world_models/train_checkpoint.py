"""What a world-model training checkpoint folder holds, and how a resume reads it without running code.

    checkpoints/step_NNNNNNN/
        model.safetensors        accelerate.save_state(safe_serialization=True): read without unpickling
        optimizer.bin            accelerate: torch.save of the optimizer state (tensors and plain data)
        scheduler.bin            accelerate: the LR scheduler's state (plain data)
        train_state_<rank>.pt    ours, one per process: step, the clip sampler's numpy generator (JSON),
                                 the torch generator and the global RNG states (tensors, JSON)

Why our own train-state file: accelerate stores registered objects in custom_checkpoint_<i>.pkl and
reads them back with torch.load(weights_only=False), which runs whatever a planted pickle asks for.
Its random_states_<rank>.pkl hold numpy arrays that only a widened unpickler accepts; they are deleted
before a folder is committed, the global RNG states going into train_state_<rank>.pt instead. So the
folder holds nothing that `verify` cannot read with weights_only=True, and it reads every file before
accelerate's load_state is called.

Folders written before this layout hold custom_checkpoint_0.pkl (the same plain data) and
random_states_<rank>.pkl: `migrate_legacy` renames them out of accelerate's reach (legacy_*), and the
train state is then read from legacy_train_state_0.pt with weights_only=True like any other file.
The global RNG states of such a folder are not restored; training draws nothing from them (every
random choice comes from the sampler's and the trainer's own generators, saved in the train state).
"""
from __future__ import annotations

import json
import random
import re
from pathlib import Path
from typing import Any

import numpy as np
import torch

from infra.atomic import atomic_torch_save
from infra.checkpoint import CheckpointError, check_safetensors, expect_format, load_torch

FORMAT = "wm-vla-rl/train_state"
WHAT = "world-model training checkpoint"
STEP_DIR = re.compile(r"^step_\d+$")
CORRUPT_SUFFIX = ".corrupt"  # a damaged folder a resume set aside (kept for inspection, never resumed)
_LEGACY = {re.compile(r"^custom_checkpoint_(\d+)\.pkl$"): "legacy_train_state_{}.pt",
           re.compile(r"^random_states_(\d+)\.pkl$"): "legacy_random_states_{}.pkl"}
_TRAIN_STATE = re.compile(r"^train_state_\d+\.pt$")
_REQUIRED = ("model.safetensors", "optimizer.bin", "scheduler.bin")


def train_state_path(folder: Path, rank: int) -> Path:
    return folder / f"train_state_{rank}.pt"


def save_train_state(folder: Path, rank: int, step: int, sampler: dict, generator: torch.Generator) -> None:
    """Write this process's train state into `folder`: tensors and JSON text only."""
    blob: dict[str, Any] = {
        "format": FORMAT, "step": int(step), "sampler_json": json.dumps(sampler),
        "generator": generator.get_state().cpu(), "torch_rng": torch.get_rng_state(),
        "numpy_rng_json": json.dumps(_numpy_global_state()), "python_rng_json": json.dumps(random.getstate()),
    }
    if torch.cuda.is_available():
        blob["cuda_rng"] = torch.cuda.get_rng_state_all()
    atomic_torch_save(train_state_path(folder, rank), blob)


def check_process_count(folder: Path, num_processes: int) -> None:
    """ValueError when `folder` was written by another number of processes than this run has.

    Why not a CheckpointError: such a folder is intact, and a resume must neither set it aside as damaged
    nor fall back to an older one. Nor can it be resumed exactly: each process's clip sampler and
    generator are its own, and accelerate steps the LR schedule once per process at every step."""
    saved = sum(1 for f in folder.glob("train_state_*.pt") if _TRAIN_STATE.match(f.name))
    if saved and saved != num_processes:
        raise ValueError(f"{folder}: written by {saved} training processes, this run has {num_processes}; resume "
                         f"with `accelerate launch --num_processes {saved}`, or start over with resume=false")


def drop_accelerate_rng(folder: Path) -> None:
    """Delete accelerate's random_states_*.pkl from a folder about to be committed (see the module doc)."""
    for f in folder.glob("random_states_*.pkl"):
        f.unlink()


def migrate_legacy(folder: Path) -> None:
    """Rename the pickles of an older folder out of accelerate's reach (atomic renames; idempotent)."""
    for f in list(folder.iterdir()) if folder.is_dir() else []:
        for pattern, new in _LEGACY.items():
            m = pattern.match(f.name)
            if m:
                f.replace(folder / new.format(m.group(1)))


def read_train_state(folder: Path, rank: int, mmap: bool = False) -> dict[str, Any]:
    """{"step", "sampler", "generator"} (+ "rng": the global states, when the folder has them) of process
    `rank`; CheckpointError naming the file if it is missing or unusable."""
    path = train_state_path(folder, rank)
    if not path.is_file() and (folder / "legacy_train_state_0.pt").is_file():
        # before per-process files every process restored process 0's state, as it did then
        path = folder / "legacy_train_state_0.pt"
        blob = expect_format(load_torch(path, WHAT, mmap=mmap), path, WHAT, None, ("step", "sampler", "generator"))
        return {"step": int(blob["step"]), "sampler": blob["sampler"], "generator": blob["generator"]}
    if not path.is_file():
        raise CheckpointError(f"{path}: missing (the checkpoint is incomplete, or was written by fewer processes "
                              f"than this run has)")
    blob = expect_format(load_torch(path, WHAT, mmap=mmap), path, WHAT, FORMAT,
                         ("step", "sampler_json", "generator", "torch_rng", "numpy_rng_json", "python_rng_json"))
    try:
        return {"step": int(blob["step"]), "sampler": json.loads(blob["sampler_json"]), "generator": blob["generator"],
                "rng": {"torch": blob["torch_rng"], "numpy": json.loads(blob["numpy_rng_json"]),
                        "python": json.loads(blob["python_rng_json"]), "cuda": blob.get("cuda_rng")}}
    except (TypeError, ValueError) as err:
        raise CheckpointError(f"{path}: its train state is unusable ({type(err).__name__}: {err})") from None


def set_global_rng(rng: dict[str, Any]) -> None:
    """Restore the global torch / numpy / Python (and CUDA, when both sides have it) RNG states."""
    torch.set_rng_state(rng["torch"])
    kind, keys, pos, has_gauss, cached = rng["numpy"]
    np.random.set_state((kind, np.asarray(keys, dtype=np.uint32), pos, has_gauss, cached))
    version, state, gauss = rng["python"]
    random.setstate((version, tuple(state), gauss))
    if rng.get("cuda") is not None and torch.cuda.is_available() and len(rng["cuda"]) == torch.cuda.device_count():
        torch.cuda.set_rng_state_all(rng["cuda"])


def verify(folder: Path, rank: int) -> None:
    """Read every file of `folder` a resume will load, with weights_only=True (tensor data memory-mapped,
    so this costs little); CheckpointError naming the first that is missing, damaged or refused."""
    for name in _REQUIRED:
        if not (folder / name).is_file():
            raise CheckpointError(f"{folder / name}: missing (the checkpoint is incomplete)")
    for f in sorted(folder.iterdir()):
        if f.suffix == ".safetensors":
            check_safetensors(f, WHAT)
        elif f.suffix in (".bin", ".pt") and not f.name.startswith(("train_state_", "legacy_")):
            load_torch(f, WHAT, mmap=True)  # optimizer, scheduler, scaler: whatever accelerate will load
        elif f.suffix == ".pkl" and not f.name.startswith("legacy_"):  # accelerate would unpickle it
            raise CheckpointError(f"{f}: unexpected pickle in a checkpoint folder; refused (loading it could "
                                  f"run code)")
    read_train_state(folder, rank, mmap=True)


def _numpy_global_state() -> list:
    state: Any = np.random.get_state()  # the legacy tuple (its stub also allows a dict)
    kind, keys, pos, has_gauss, cached = state
    return [kind, keys.tolist(), int(pos), int(has_gauss), float(cached)]
