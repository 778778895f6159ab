"""Named kill points for crash tests (a testing aid): the process SIGKILLs itself at a chosen point.

    VLA_CRASH_AT=wm.checkpoint.before_commit python scripts/train_world_model.py ...   # first time reached
    VLA_CRASH_AT=collect.step:40 python scripts/collect.py ...                          # the 40th time

Library code marks the moments a crash matters with `crash_point("<name>")`: between the writes of a
commit, inside a checkpoint save, between a stage's outputs and its record. tests/crash/ runs real
subprocesses with VLA_CRASH_AT set, checks that each died there (exit by SIGKILL, no cleanup run, as a
power cut or the OOM killer would leave it), resumes them and compares the outputs with an uninterrupted
run's. The variable is read once, at import: when it is unset `crash_point` returns at once.

Points (`POINTS`; a name not listed is refused when the variable is read, so a typo cannot pass silently):
    collect.step                      one control step of a recorded episode (mid-episode)
    dataset.seal_opened               an append's episode files written and meta/seal.sha256 opened (accepting
                                      old and new meta files), tasks.parquet and stats.json not yet rewritten
    dataset.before_commit             an append's files and stats.json written, info.json (the commit) not yet
    dataset.after_commit              info.json committed, the seal not yet closed, the writer's memory not updated
    wm.checkpoint.state_saved         inside a checkpoint save: accelerate's state in step_N.tmp, nothing else
    wm.checkpoint.before_commit       world_model.pt written, the checkpoint folder not yet renamed into place
    wm.checkpoint.after_commit        checkpoint committed, older ones not yet pruned
    bc.step                           one BC optimisation step done (before any checkpoint of it)
    bc.checkpoint_saved               BC checkpoint.pt written
    bc.before_policy                  training done, the final policy.pt not yet written
    rl.iteration                      one RL iteration's update done (before any checkpoint of it)
    rl.checkpoint_saved               RL policy.pt and checkpoint.pt written
    rl.before_result                  RL iterations done, metrics, videos and result.json not yet written
    loop.stage_done                   a loop stage returned, loop.json does not record it yet
    calibrate.before_record           calibrated model file written, calibration.json (the record) not yet
"""
from __future__ import annotations

import os
import signal

ENV = "VLA_CRASH_AT"
POINTS = ("collect.step", "dataset.seal_opened", "dataset.before_commit", "dataset.after_commit",
          "wm.checkpoint.state_saved", "wm.checkpoint.before_commit", "wm.checkpoint.after_commit", "bc.step",
          "bc.checkpoint_saved", "bc.before_policy", "rl.iteration", "rl.checkpoint_saved", "rl.before_result",
          "loop.stage_done", "calibrate.before_record")


def _parse(value: str | None) -> tuple[str, int] | None:
    """("name", n) from "name" or "name:n" (n >= 1); None when unset or empty."""
    if not value:
        return None
    name, _, count = value.partition(":")
    if name not in POINTS:
        raise ValueError(f"{ENV}: unknown crash point {name!r}; expected one of {list(POINTS)}")
    try:
        n = int(count) if count else 1
    except ValueError:
        n = 0
    if n < 1:
        raise ValueError(f"{ENV}: expected <name> or <name>:<n> with n >= 1, got {value!r}")
    return name, n


_TARGET = _parse(os.environ.get(ENV))
_reached = 0


def crash_point(name: str) -> None:
    """SIGKILL this process if VLA_CRASH_AT names `name` and this is the n-th time it is reached."""
    global _reached
    if _TARGET is None or _TARGET[0] != name:
        return
    _reached += 1
    if _reached == _TARGET[1]:
        os.kill(os.getpid(), signal.SIGKILL)


__all__ = ["ENV", "POINTS", "crash_point"]
