"""The meta/episodes rows of a LeRobot v3.0 dataset, and the files they point at.

lerobot packs many episodes into each meta/episodes, data and video file and says where each
episode lives in its row: data/chunk_index + data/file_index (the parquet holding its frame rows),
dataset_from_index / dataset_to_index (their global `index` range) and, per camera,
videos/<key>/chunk_index + file_index + from_timestamp / to_timestamp (its span of that mp4).
EpisodeWriter's per-episode files are the special case of one episode per file, so one reader,
driven by these rows, serves both.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from robot_data.dataset.errors import DatasetCorruptError
from robot_data.dataset.layout import DATA_PATH, EPISODES_PATH, VIDEO_PATH

REQUIRED_COLUMNS = ("episode_index", "length", "dataset_from_index", "dataset_to_index",
                    "data/chunk_index", "data/file_index")


def episodes_files(root: Path) -> list[Path]:
    """meta/episodes/chunk-*/file-*.parquet, in (chunk, file) order."""
    return sorted((root / "meta" / "episodes").glob("chunk-*/file-*.parquet"))


def read_rows(root: Path, total_episodes: int, chunks_size: int = 1000,
              sources: dict[str, bytes] | None = None) -> list[dict[str, Any]]:
    """Rows of episodes 0 .. total_episodes-1, one each, in order. Rows at or beyond total_episodes (an
    uncommitted append) are left out; a missing or duplicated committed episode is an error. `sources`:
    the bytes of the episodes files to read, by relative path (already read and checked against the seal:
    robot_data.dataset.seal), else every file on disk."""
    rels = sorted(sources) if sources is not None else [p.relative_to(root).as_posix() for p in episodes_files(root)]
    rows: dict[int, dict[str, Any]] = {}
    for rel in rels:
        try:
            # page checksums (written by EpisodeWriter) turn bit rot in these rows into an error
            source = root / rel if sources is None else pa.BufferReader(sources[rel])
            table = pq.read_table(source, page_checksum_verification=True)
        except (OSError, pa.ArrowException, ValueError) as err:
            raise DatasetCorruptError(f"{rel} is unreadable: {err}") from err
        missing = [c for c in REQUIRED_COLUMNS if c not in table.column_names]
        if missing:
            raise DatasetCorruptError(f"{rel} lacks the LeRobot v3.0 columns {missing}")
        for row in table.to_pylist():
            i = int(row["episode_index"])
            if i >= total_episodes:
                continue
            if i in rows:
                raise DatasetCorruptError(f"{rel}: episode {i} has a second row in meta/episodes")
            row["meta/episodes/file"] = rel  # where the row was read from, for error messages
            rows[i] = row
    absent = [i for i in range(total_episodes) if i not in rows]
    if absent:
        # EpisodeWriter's own layout gives an episode its own rows file: name it when it is gone
        own = episodes_file(*divmod(absent[0], chunks_size))
        if not (root / own).is_file():
            raise DatasetCorruptError(f"episode {absent[0]}: {own} is missing (meta/episodes has no row for it)")
        raise DatasetCorruptError(f"meta/episodes has no row for episode(s) {absent[:10]} of the {total_episodes} "
                        f"that meta/info.json counts")
    return [rows[i] for i in range(total_episodes)]


def data_file(info: dict[str, Any], row: dict[str, Any]) -> str:
    """Relative path of the parquet holding the episode's frame rows."""
    template = info.get("data_path") or DATA_PATH
    return str(template.format(chunk_index=int(row["data/chunk_index"]), file_index=int(row["data/file_index"])))


def video_file(info: dict[str, Any], row: dict[str, Any], key: str) -> str:
    """Relative path of the mp4 holding camera `key` of the episode."""
    template = info.get("video_path") or VIDEO_PATH
    try:
        chunk, file = int(row[f"videos/{key}/chunk_index"]), int(row[f"videos/{key}/file_index"])
    except (KeyError, TypeError) as err:
        raise DatasetCorruptError(f"{row.get('meta/episodes/file')}: episode {row['episode_index']} has no "
                        f"videos/{key}/chunk_index and file_index") from err
    return str(template.format(video_key=key, chunk_index=chunk, file_index=file))


def video_span(row: dict[str, Any], key: str) -> float:
    """from_timestamp of the episode in its mp4 of camera `key` (0 where a file holds one episode)."""
    value = row.get(f"videos/{key}/from_timestamp")
    return 0.0 if value is None else float(value)


def episodes_file(chunk_index: int, file_index: int) -> str:
    return EPISODES_PATH.format(chunk_index=chunk_index, file_index=file_index)
