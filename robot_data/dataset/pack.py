"""`PackedFiles`: the data parquet, per-view mp4s and meta/episodes parquet that many episodes share.

lerobot keeps appending episodes to the same files until one would pass info.json's
data_files_size_in_mb / video_files_size_in_mb, then moves on to the next file index. EpisodeWriter
with pack=True does the same, but never rewrites a file that is already committed: episodes are
encoded into open files under temporary names (so memory holds one episode's frames at a time) and
`finish` writes the files once, full; the writer then commits all of their episodes with one
info.json. So each committed file is written exactly once and its sha256 never goes stale.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from infra.atomic import atomic_write_bytes
from robot_data.dataset.integrity import bytes_digest, file_digest
from robot_data.dataset.layout import DATA_PATH, EPISODES_PATH, VIDEO_PATH, DatasetConfig
from robot_data.dataset.video import VideoAppender

_MB = 1 << 20


class PackedFiles:
    """The files at (chunk_index, file_index) being filled with episodes; see the module docstring."""

    def __init__(self, root: Path, config: DatasetConfig, chunk_index: int, file_index: int):
        self.root, self.config = root, config
        self.chunk_index, self.file_index = chunk_index, file_index
        self.tables: list[pa.Table] = []
        self.rows: list[dict[str, Any]] = []
        self.data_bytes = 0  # uncompressed size of the frame rows: a bound on the parquet's size
        self.videos = {view: VideoAppender(root / self.path("video", view), config.fps, *config.image_size,
                                           config.video_codec, config.crf) for view in config.views}

    def path(self, kind: str, view: str | None = None) -> str:
        where = {"chunk_index": self.chunk_index, "file_index": self.file_index}
        if kind == "data":
            return DATA_PATH.format(**where)
        if kind == "episodes":
            return EPISODES_PATH.format(**where)
        return VIDEO_PATH.format(video_key=self.config.camera_key(str(view)), **where)

    def __len__(self) -> int:
        return len(self.rows)

    def fits(self, table: pa.Table, length: int) -> bool:
        """Whether an episode of these frame rows keeps every file under its size limit. The mp4s are judged
        by their bytes per frame so far (VideoAppender.projected_size), as lerobot judges its parquet files;
        an empty group takes anything."""
        if not self.rows:
            return True
        if self.data_bytes + table.nbytes >= self.config.data_files_size_in_mb * _MB:
            return False
        limit = self.config.video_files_size_in_mb * _MB
        return all(video.projected_size(length) < limit for video in self.videos.values())

    def add(self, table: pa.Table, row: dict[str, Any], frames: dict[str, np.ndarray]) -> None:
        """Encode the episode's frames after the others and keep its rows; `row` gains its file locations."""
        where = {"chunk_index": self.chunk_index, "file_index": self.file_index}
        row.update({f"data/{k}": v for k, v in where.items()})
        for view, video in self.videos.items():
            key = self.config.camera_key(view)
            start = video.append(frames[view])
            row.update({f"videos/{key}/chunk_index": self.chunk_index, f"videos/{key}/file_index": self.file_index,
                        f"videos/{key}/from_timestamp": start,
                        f"videos/{key}/to_timestamp": start + len(table) / self.config.fps})
        row.update({f"meta/episodes/{k}": v for k, v in where.items()})
        self.tables.append(table)
        self.rows.append(row)
        self.data_bytes += table.nbytes

    def finish(self) -> list[dict[str, Any]]:
        """Write the data and video files in place; return the episodes' rows with their files' sha256
        (the caller writes them to meta/episodes and commits)."""
        shas = {}
        for view, video in self.videos.items():
            shas[f"videos/{self.config.camera_key(view)}/sha256"] = file_digest(video.close())
        sink = pa.BufferOutputStream()
        # one row group per episode: a reader of one episode skips the others' (lerobot writes them so too);
        # page checksums let readers that verify them detect bit rot
        with pq.ParquetWriter(sink, self.tables[0].schema, write_page_checksum=True) as writer:
            for table in self.tables:
                writer.write_table(table)
        data = sink.getvalue().to_pybytes()
        atomic_write_bytes(self.root / self.path("data"), data)
        shas["data/sha256"] = bytes_digest(data)
        for row in self.rows:
            row.update(shas)
        return self.rows

    def abort(self) -> None:
        """Drop the open files (their episodes were never committed)."""
        for video in self.videos.values():
            video.abort()
