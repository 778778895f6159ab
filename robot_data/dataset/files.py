"""The files EpisodeWriter writes, as bytes and atomic writes, and the guards it opens a dataset with.

The meta files are built as bytes first, so their sha256 can enter meta/seal.sha256 before they are
written (robot_data.dataset.seal); every write is atomic (infra.atomic), so a kill leaves the old file or the new.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import IO, Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from infra.atomic import atomic_write_bytes
from robot_data.dataset.episode import Episode
from robot_data.dataset.integrity import bytes_digest
from robot_data.dataset.layout import INFO_PATH, STATS_PATH, TASKS_PATH

try:  # advisory lock against two writers appending at once; POSIX only
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]


def frame_table(episode: Episode, index: int, task_index: int, from_index: int,
                 fps: float) -> tuple[pa.Table, dict[str, np.ndarray]]:
    """Frame rows of one episode, and the same columns as arrays (for the stats)."""
    T, S, A = len(episode), episode.state.shape[1], episode.action.shape[1]
    done = np.zeros(T, dtype=bool)
    done[-1] = True
    columns = {
        "observation.state": episode.state,
        "action": episode.action,
        "next.reward": episode.reward,
        "next.success": episode.success,
        "next.done": done,
        "timestamp": (np.arange(T) / fps).astype(np.float32),
        "frame_index": np.arange(T, dtype=np.int64),
        "episode_index": np.full(T, index, dtype=np.int64),
        "index": np.arange(from_index, from_index + T, dtype=np.int64),
        "task_index": np.full(T, task_index, dtype=np.int64),
    }
    arrays = {
        # fixed-size lists: what lerobot/HF datasets write for a feature of shape [S]
        "observation.state": pa.FixedSizeListArray.from_arrays(pa.array(episode.state.reshape(-1)), S),
        "action": pa.FixedSizeListArray.from_arrays(pa.array(episode.action.reshape(-1)), A),
    }
    order = ("timestamp", "frame_index", "episode_index", "index", "task_index", "observation.state", "action",
             "next.reward", "next.success", "next.done")
    table = pa.table({name: arrays[name] if name in arrays else pa.array(columns[name]) for name in order})
    return table, columns


def parquet_bytes(table: pa.Table) -> bytes:
    """The parquet file of `table`, as bytes (so its sha256 is known before it is written)."""
    sink = pa.BufferOutputStream()
    # page checksums let readers that verify them detect bit rot in the episodes parquet too
    pq.write_table(table, sink, write_page_checksum=True)
    return bytes(sink.getvalue().to_pybytes())


def write_parquet_atomic(table: pa.Table, path: Path) -> str:
    """Write `table` to `path` atomically; return the sha256 of the bytes written."""
    data = parquet_bytes(table)
    atomic_write_bytes(path, data)
    return bytes_digest(data)


def json_bytes(obj: Any) -> bytes:
    """A meta JSON file's bytes, formatted as lerobot writes them."""
    return (json.dumps(obj, indent=4) + "\n").encode()


def write_json_atomic(path: Path, obj: Any) -> None:
    atomic_write_bytes(path, json_bytes(obj))


def check_creatable(root: Path) -> None:
    """Refuse to create a dataset over foreign files; tolerate what an interrupted creation leaves."""
    # creation writes tasks.parquet and stats.json before info.json, so those may exist without it
    allowed_meta = {Path(TASKS_PATH).name, Path(STATS_PATH).name, ".writer.lock"}
    for sub in ("data", "videos", "meta"):
        for path in (root / sub).iterdir() if (root / sub).is_dir() else ():
            if sub == "meta" and (path.name in allowed_meta or path.name.endswith(".tmp")):
                continue
            raise FileExistsError(
                f"{root}: has {path.relative_to(root)} but no {INFO_PATH}; refusing to create a dataset over "
                "files that are not a committed LeRobot v3.0 dataset"
            )


def acquire_lock(path: Path) -> IO[str]:
    """An open handle holding an exclusive advisory lock on `path` (closing it releases the lock)."""
    handle = open(path, "a+")
    if fcntl is not None:
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.close()
            raise RuntimeError(f"{path.parent.parent}: another EpisodeWriter has this dataset open") from None
    return handle
