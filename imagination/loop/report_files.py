"""The run folder a loop report reads: loop.json checked, the paths it records resolved (the folder may have moved),
optional results read without failing the report, CSV and tensorboard curves, and files linked or copied into
report_assets/ so the report folder stands alone (imagination/loop/report.py writes the report itself)."""
from __future__ import annotations

import csv
import hashlib
import json
import shutil
from pathlib import Path
from typing import Any
from urllib.parse import quote

import numpy as np
from matplotlib.figure import Figure

from infra.atomic import atomic_write

ASSETS = "report_assets"  # the report's own files, under the run folder


class RunFiles:
    """Paths of one run: resolves the paths in loop.json and turns files into relative links."""

    def __init__(self, run_dir: Path, loop: dict):
        self.dir, self.assets = run_dir, run_dir / ASSETS
        self.notes: list[str] = []
        recorded = loop.get("run_dir")
        self.recorded = Path(recorded) if isinstance(recorded, str) and recorded else None

    def path(self, p: Any) -> Path | None:
        """A path from loop.json. Paths under the run_dir recorded at write time are re-rooted here:
        the loop writes them as it was given out_dir (`outputs/demo/bc/...`, relative to the working
        directory it ran in) and the folder may have been moved since. Other relative paths are
        under run_dir; other absolute ones stay as they are."""
        if not isinstance(p, str) or not p:
            return None
        path = Path(p)
        plain = path if path.is_absolute() else self.dir / path
        if self.recorded is not None:
            try:
                rerooted = self.dir / path.relative_to(self.recorded)
            except ValueError:
                return plain
            if rerooted.exists() or not plain.exists():
                return rerooted
        return plain

    def find(self, p: Any, *folders: Path | None) -> Path | None:
        """The first existing file among `p` and its name in each of `folders` (paths written by
        another process may be relative to that process's working directory)."""
        path = self.path(p)
        candidates = [path] + [f / Path(p).name for f in folders if f is not None and isinstance(p, str) and p]
        return next((c for c in candidates if c is not None and c.is_file()), None)

    def link(self, path: Path) -> str:
        """`path` relative to run_dir, URL-quoted; a file outside run_dir is copied in first."""
        try:
            rel = path.resolve().relative_to(self.dir.resolve())
        except ValueError:
            digest = hashlib.sha1(str(path.resolve()).encode()).hexdigest()[:8]
            rel = Path(ASSETS) / "linked" / f"{digest}_{path.name}"
            dest = self.dir / rel
            if not dest.exists() or dest.stat().st_size != path.stat().st_size:
                atomic_write(dest, lambda tmp: shutil.copyfile(path, tmp))
        return quote(rel.as_posix())

    def json(self, p: Any, results: bool = False) -> dict | None:
        """An optional JSON file: None when it is not there; unreadable ones are noted, not fatal.
        results=True also requires evaluate()'s figures, which the tables index without checks."""
        path = self.path(p)
        if path is None or not path.is_file():
            return None
        try:
            data = json.loads(path.read_text())
            blocks = [data["overall"], *data.get("per_task", {}).values()] if results else []
            if isinstance(data, dict) and all({"success_rate", "successes", "episodes", "ci95"} <= b.keys()
                                              for b in blocks):
                return data
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            pass
        self.notes.append(f"`{path.name}` could not be read and was skipped")
        return None

    def save(self, fig: Figure, name: str) -> str:
        """Write `fig` to report_assets/name (atomically); returns its relative link."""
        atomic_write(self.assets / name, lambda tmp: fig.savefig(tmp, format="png", dpi=110, bbox_inches="tight"))
        return f"{ASSETS}/{name}"


def load_loop(run_dir: str | Path) -> dict:
    """run_dir/loop.json, checked for the parts every report needs; errors name the file."""
    path = Path(run_dir) / "loop.json"
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no loop.json here; is this a loop run folder?")
    try:
        loop = json.loads(path.read_text())
    except (OSError, ValueError) as e:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        raise ValueError(f"{path}: not valid JSON ({e})") from e
    if not isinstance(loop, dict):
        raise ValueError(f"{path}: expected a JSON object, got {type(loop).__name__}")
    for key in ("stages", "phases", "world_models", "guard"):
        items, named = loop.get(key) or [], key != "guard"
        if not isinstance(items, list) or not all(isinstance(i, dict) and (not named or "name" in i) for i in items):
            raise ValueError(f"{path}: '{key}' must be a list of objects" + (" with a 'name'" if named else ""))
    return loop


def read_csv(path: Path | None) -> dict[str, np.ndarray]:
    """Numeric columns of a CSV (blank cells become NaN); empty when there is no such file."""
    if path is None or not path.is_file():
        return {}
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    out = {}
    for key in rows[0] if rows else []:
        try:
            out[key] = np.array([float(r[key]) if r[key] not in ("", None) else np.nan for r in rows])
        except ValueError:  # a text column
            pass
    return out


def tensorboard_scalars(folder: Path | None, tag: str) -> tuple[np.ndarray, np.ndarray]:
    """(steps, values) of `tag` in the event files under `folder`; later files win (a resumed run)."""
    if folder is None or not folder.is_dir():
        return np.zeros(0), np.zeros(0)
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    merged: dict[int, float] = {}
    for f in sorted(folder.rglob("events.out.tfevents.*"), key=lambda f: f.name):  # the name starts with its time
        acc = EventAccumulator(str(f), size_guidance={"scalars": 0})
        acc.Reload()
        if tag in acc.Tags().get("scalars", []):
            merged.update({e.step: e.value for e in acc.Scalars(tag)})
    steps = np.array(sorted(merged))
    return steps, np.array([merged[s] for s in steps])


__all__ = ["ASSETS", "RunFiles", "load_loop", "read_csv", "tensorboard_scalars"]
