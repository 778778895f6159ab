"""What makes an imagined-RL run the run it is, so that a resume continues only the run it was asked for.

A run resumes from <out_dir>/checkpoint.pt. Without a check, a run started in a folder that holds another run's
checkpoint (another start policy, other start data, another judge's data) took that run's policy and history as its
own, finished, and reported them: a loop round whose start had changed "resumed" the previous round's run
(bench/rl_gain.py --loop-rounds with adoption). The checkpoint now stores the run's identity, its config without the
fields a resume may change, and a resume with another identity is refused by name.

    identity = run_identity(cfg)            # a plain dict, stored as JSON in the checkpoint
    check_same_run(stored, identity, path)  # ValueError naming the fields that differ
"""
from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

# Where the run writes, how long it runs and how it is run: a resume may change these and stays the same run.
RESUMABLE = ("out_dir", "iterations", "checkpoint_every", "videos", "num_threads", "device", "resume",
             "exploration_check")
RESUMABLE_IMAGINATION = ("device",)


def run_identity(cfg: Any) -> dict:
    """cfg (ImagineRLConfig) as plain data, without the fields in RESUMABLE (and RESUMABLE_IMAGINATION of its
    imagination)."""
    d = asdict(cfg)
    for name in RESUMABLE:
        d.pop(name, None)
    for name in RESUMABLE_IMAGINATION:
        d.get("imagination", {}).pop(name, None)
    return json.loads(json.dumps(d, default=str))  # tuples as lists: what the checkpoint gives back


def differing(stored: dict, identity: dict, prefix: str = "", defaults: dict | None = None) -> list[str]:
    """The dotted names of the fields whose values differ between two identities (nested configs by field). A field
    `stored` lacks reads as its value in `defaults` (the identity of the config's defaults), when given: a checkpoint
    written before the field existed ran with its default."""
    out, defaults = [], defaults or {}
    for key in sorted(set(stored) | set(identity)):
        a, b = stored.get(key, defaults.get(key)), identity.get(key)
        if isinstance(a, dict) and isinstance(b, dict):
            sub = defaults.get(key)
            out += differing(a, b, f"{prefix}{key}.", sub if isinstance(sub, dict) else None)
        elif a != b:
            out.append(f"{prefix}{key}")
    return out


def check_same_run(stored: dict | None, identity: dict, path: Path, defaults: dict | None = None) -> None:
    """ValueError unless the checkpoint at `path`, whose stored identity is `stored` (None: written before identities
    were kept, resumed as before), was written by a run with this `identity`. `defaults`: the identity of the config's
    defaults, which fields added since the checkpoint was written read as."""
    if stored is None:
        return
    names = differing(stored, identity, defaults=defaults)
    if names:
        shown = ", ".join(names[:6]) + (f" and {len(names) - 6} more" if len(names) > 6 else "")
        raise ValueError(f"resume: {path} was written by another run ({shown} differ); give this run another "
                         "out_dir, or resume=false to start it over there")


__all__ = ["RESUMABLE", "check_same_run", "differing", "run_identity"]
