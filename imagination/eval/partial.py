"""The finished episodes of a real evaluation that has not finished yet: out_dir/episodes.partial.jsonl.

A real evaluation of a benchmark's jobs is long on a CPU, and a stopped one used to start over.
Each episode's record is appended here the moment it ends; the same command run again (the same config, the
checkpoint file unchanged since the file was begun) runs only the jobs the file lacks, and the file is removed once
results.json is written.

Why a job's record can be reused: its reset (task, official init state, seed) fixes the simulator, and with
`deterministic=True` the policy acts on its own observations alone. A sampled policy draws from one generator
shared by the batch, so its episodes depend on what ran before them: such an evaluation (and the random baseline,
a remote policy, or the imagined env, whose noise is drawn per batch) always starts over.

    first line   {"format": ..., "key": {...}}     what the records are of: config fields and the checkpoint's stat
    other lines  one episode record each            as evaluate's "episodes" hold them (video path included)
"""
from __future__ import annotations

import json
import os
from dataclasses import asdict
from pathlib import Path
from typing import Any

from imagination.eval.jobs import EvalConfig, Job
from infra.atomic import atomic_write_text

PARTIAL = "episodes.partial.jsonl"
FORMAT = "wm-vla-rl/eval_partial"
# fields that do not change any episode's outcome: where files go, how many run at once and on what
_FREE = ("out_dir", "videos", "num_envs", "num_threads", "backend", "ray_address")


def resumable(cfg: EvalConfig, imagined: bool) -> bool:
    """Whether cfg's episodes can be reused one by one (see the module's docstring)."""
    return not imagined and cfg.deterministic and Path(cfg.checkpoint).is_file()


def partial_key(cfg: EvalConfig) -> dict[str, Any]:
    """What a partial file's records are of: every config field that can change an outcome and the checkpoint
    file's size and modification time (a retrained policy at the same path is another policy)."""
    st = Path(cfg.checkpoint).stat()
    fields = {k: v for k, v in asdict(cfg).items() if k not in _FREE}
    return {"config": fields, "checkpoint_size": st.st_size, "checkpoint_mtime_ns": st.st_mtime_ns}


class PartialEpisodes:
    """Append-only record of finished episodes under out_dir; `load` returns those of the same evaluation."""

    def __init__(self, out_dir: str | os.PathLike, key: dict[str, Any]):
        self.path = Path(out_dir) / PARTIAL
        self.key = json.loads(json.dumps(key))  # as it reads back from the file (tuples become lists)

    def load(self, jobs: list[Job]) -> dict[int, dict]:
        """The records of `jobs` the file holds (by job index), and the file reopened for appending. A file of
        another evaluation is set aside as <name>.stale and a new one begun; a line cut short by a kill is skipped."""
        done: dict[int, dict] = {}
        if self.path.is_file():
            lines = self.path.read_text().splitlines()
            header = _parse(lines[0]) if lines else None
            if header is not None and header.get("format") == FORMAT and header.get("key") == self.key:
                by_index = {j.index: j for j in jobs}
                for line in lines[1:]:
                    rec = _parse(line)
                    job = by_index.get(rec.get("index", -1)) if rec else None
                    if job is not None and rec is not None and _same_job(rec, job):
                        done[job.index] = rec
            else:
                self.path.replace(self.path.with_name(PARTIAL + ".stale"))
        # rewritten with the records kept (atomically: a kill now loses none): a torn last line must not sit in
        # front of the next append
        entries = [{"format": FORMAT, "key": self.key}, *done.values()]
        atomic_write_text(self.path, "".join(json.dumps(e) + "\n" for e in entries))
        return done

    def append(self, record: dict) -> None:
        """Add one finished episode; on disk before this returns (a kill after it loses nothing)."""
        with open(self.path, "a") as f:
            f.write(json.dumps(record) + "\n")
            f.flush()
            os.fsync(f.fileno())

    def finish(self) -> None:
        """Remove the file: results.json now holds every record."""
        self.path.unlink(missing_ok=True)


def _parse(line: str) -> dict | None:
    try:
        value = json.loads(line)
    except json.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None


def _same_job(record: dict, job: Job) -> bool:
    return all(record.get(k) == v for k, v in asdict(job).items())


__all__ = ["PARTIAL", "PartialEpisodes", "partial_key", "resumable"]
