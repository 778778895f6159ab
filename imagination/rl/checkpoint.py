"""The imagined-RL run's checkpoint: one file per run, rewritten atomically, readable with weights_only=True.

    save_checkpoint(out / "checkpoint.pt", policy, optimizer, iteration, history, heldout_scores, ...)
    iteration, history, scores, seconds, trained_by = load_checkpoint(out / "checkpoint.pt", policy, optimizer, ...)

imagination/rl/training.py writes it every checkpoint_every iterations and resumes from it; a run resumed from it
draws the batches it would have drawn (the anchor's generator and the learning rate's schedule travel with it).
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import torch

from infra.atomic import atomic_torch_save
from infra.checkpoint import CheckpointError, expect_format, load_torch, restore
from policies.base import Policy

RL_CHECKPOINT = "RL checkpoint (resume=false, or delete it, starts over)"


def save_checkpoint(path: Path, policy: Policy, optimizer: torch.optim.Optimizer, iteration: int,
                     history: list[dict], heldout: list[tuple[int, float]],
                     anchor_gen: torch.Generator | None = None,
                     schedule: torch.optim.lr_scheduler.LRScheduler | None = None, seconds: float = 0.0,
                     identity: dict | None = None, processes: list[dict] | None = None) -> None:
    """Tensors and plain data only, so `load_checkpoint` reads it with weights_only=True. The history
    rows and held-out scores go as JSON text: their numbers may be numpy scalars, which are objects
    to pickle (a file holding them could not be loaded without trusting it). anchor_gen: the generator
    of the behaviour-cloning anchor's batches, when there is one (a resume draws the batches it would have).
    schedule: the learning rate's (its step count: a resumed warmup goes on where it was). seconds: the run's
    time so far, over every process that ran it (result.json's seconds stays the run's, not the last resume's).
    identity: the run's config as `run_identity` gives it, which a resume must match. processes: the provenance of
    every process that trained the run, the first one first (result.json's provenance stays the run's first, not the
    last resume's)."""
    blob = {"iteration": iteration, "policy": policy.state_dict(), "optimizer": optimizer.state_dict(),
            "seconds": float(seconds),
            "history_json": json.dumps(history, default=_number), "heldout_json": json.dumps(heldout, default=_number)}
    if identity is not None:
        blob["run_json"] = json.dumps(identity)
    if processes:
        blob["provenance_json"] = json.dumps(processes, default=_number)
    if anchor_gen is not None:
        blob["anchor_generator"] = anchor_gen.get_state()
    if schedule is not None:
        blob["schedule_steps"] = int(schedule.last_epoch)
    atomic_torch_save(path, blob)


def _number(value: Any) -> Any:
    """A numpy scalar as the Python number it holds (json.dumps' fallback); anything else is refused."""
    if isinstance(value, np.generic):
        return value.item()
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")


def load_checkpoint(path: Path, policy: Policy, optimizer: torch.optim.Optimizer,
                     anchor_gen: torch.Generator | None = None,
                     schedule: torch.optim.lr_scheduler.LRScheduler | None = None,
                     ) -> tuple[int, list[dict], list[tuple[int, float]], float, list[dict]]:
    """Restore policy and optimizer (and the anchor's generator and the learning rate's schedule, when both
    sides have one) from `path`; (iteration, history, held-out scores, seconds of training so far: 0 in files from
    before it was kept, the provenance of every process that trained it: [] in files from before it was kept).

    One checkpoint per run (rewritten atomically), so an unusable one has no older one to fall back to:
    CheckpointError names it. Files from before the JSON fields hold the same lists as plain data,
    which weights_only reads too (one holding numpy scalars is refused, by name)."""
    ck = expect_format(load_torch(path, RL_CHECKPOINT), path, RL_CHECKPOINT, None,
                       ("iteration", "policy", "optimizer"))
    restore(policy, ck["policy"], path, "policy")
    restore(optimizer, ck["optimizer"], path, "optimizer")
    try:
        if anchor_gen is not None and "anchor_generator" in ck:  # files written before it restart the draws
            anchor_gen.set_state(ck["anchor_generator"])
        if schedule is not None and "schedule_steps" in ck:  # the optimizer's state holds the current lr
            schedule.last_epoch = int(ck["schedule_steps"])
        history = json.loads(ck["history_json"]) if "history_json" in ck else list(ck["history"])
        scores = json.loads(ck["heldout_json"]) if "heldout_json" in ck else list(ck.get("heldout", []))
        processes = json.loads(ck["provenance_json"]) if "provenance_json" in ck else []
        return (int(ck["iteration"]), history, [(int(i), float(s)) for i, s in scores], float(ck.get("seconds", 0.0)),
                list(processes))
    except (KeyError, TypeError, ValueError, RuntimeError) as err:
        raise CheckpointError(f"{path}: its history, anchor generator or schedule is unusable "
                              f"({type(err).__name__}: {err})") from None


def stored_identity(path: Path) -> dict | None:
    """The run identity (`run_identity`) the checkpoint at `path` was saved with; None in files from before it was
    kept. Read before anything of a resumed run is built, so a folder of another run is refused first."""
    ck = expect_format(load_torch(path, RL_CHECKPOINT), path, RL_CHECKPOINT, None, ("iteration",))
    return json.loads(ck["run_json"]) if "run_json" in ck else None


__all__ = ["RL_CHECKPOINT", "load_checkpoint", "save_checkpoint", "stored_identity"]
