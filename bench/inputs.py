"""What the benchmarks read by default (what `make demo` writes), and the one line each prints when an
input is missing.

`make demo` runs `scripts/loop.py --config quick`; the loop preset's out_dir (configs/loop/quick.yaml)
holds the run: <out_dir>/data (the recorded dataset), <out_dir>/world_model/world_model.pt (the first
world model, with its split.json), <out_dir>/bc/policy.pt. A benchmark whose inputs are missing prints

    <bench>: missing <what> <path>, ...; `make demo` makes them (or give --flag ...)

to stderr and returns exit status 2, so that a script can tell "not run" (2) from "below its
threshold" (1). bench/rl_gain.py and bench/reward_signal.py build their own protocol under
outputs/bench/rl_gain (bench/protocol.py) and keep their own messages.
"""
from __future__ import annotations

import sys
from pathlib import Path

# The loop preset `make demo` runs; its out_dir is read from the preset so that the two cannot drift apart.
DEMO_PRESET = "grasp"
MAKE_DEMO = "make demo"


def demo_dir() -> Path:
    """The folder `make demo` writes (configs/loop/grasp.yaml's out_dir, relative to the repository root).

    Read from the preset file, not through LoopConfig: a bench that only needs this default (`--help`, or a
    world-model score on a machine without the robot client's packages) does not import the whole loop."""
    import yaml

    from infra.cli import CONFIGS

    out_dir = (yaml.safe_load((CONFIGS / "loop" / f"{DEMO_PRESET}.yaml").read_text()) or {}).get("out_dir")
    if out_dir:
        return Path(out_dir)
    from imagination.loop.config import LoopConfig
    from infra.cli import load_config  # the preset leaves out_dir to LoopConfig's default

    return Path(load_config(LoopConfig, DEMO_PRESET, group="loop").out_dir)


def demo_path(name: str) -> str:
    """data, world_model (the file), bc (the policy file): where the demo's loop writes them (imagination.loop.run)."""
    files = {"data": "data", "world_model": "world_model/world_model.pt", "bc": "bc/policy.pt"}
    if name not in files:
        raise ValueError(f"demo_path: expected one of {sorted(files)}, got {name!r}")
    return str(demo_dir() / files[name])


def missing_line(bench: str, needed: list[tuple[str, str, bool]], make: str = MAKE_DEMO,
                 instead: str = "") -> str | None:
    """The line naming every missing input, or None. needed: (what, path, present) per input; make: the
    command that makes them; instead: the other way out, e.g. "give --data" (said in parentheses)."""
    gone = [f"{what} {path or '(not given)'}" for what, path, present in needed if not present]
    if not gone:
        return None
    return (f"{bench}: missing {', '.join(gone)}; `{make}` makes " + ("it" if len(gone) == 1 else "them")
            + (f" (or {instead})" if instead else ""))


def report_missing(bench: str, needed: list[tuple[str, str, bool]], make: str = MAKE_DEMO,
                   instead: str = "") -> bool:
    """Print `missing_line` to stderr when something is missing; True then (the caller returns 2)."""
    line = missing_line(bench, needed, make, instead)
    if line is not None:
        print(line, file=sys.stderr)
    return line is not None


__all__ = ["DEMO_PRESET", "MAKE_DEMO", "demo_dir", "demo_path", "missing_line", "report_missing"]
