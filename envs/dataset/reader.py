"""Read episodes written by `EpisodeWriter` (LeRobotDataset v3.0 layout) back into `Episode`s."""
from __future__ import annotations

import io
import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from envs.dataset.episode import Episode
from envs.dataset.errors import DatasetCorruptError
from envs.dataset.integrity import file_digest, open_checked
from envs.dataset.layout import (
    CODEBASE_VERSION,
    INFO_PATH,
    STATS_PATH,
    TASKS_PATH,
    DatasetConfig,
    episode_file_path,
    read_info,
    read_json,
    read_tasks,
    video_key,
)
from envs.dataset.meta import FIELDS, EpisodeMeta, select_meta
from envs.dataset.stats import stats_from_json
from envs.dataset.video import VideoDecodeError, decode_video

_EXPECTED_LAYOUT = (
    "a LeRobotDataset v3.0 directory with meta/info.json, meta/tasks.parquet, meta/episodes/chunk-*/file-*.parquet, "
    "data/chunk-*/file-*.parquet and videos/observation.images.<view>/chunk-*/file-*.mp4"
)
# per-episode metadata kept in `meta` (cheap: no frames, no stats): EpisodeMeta's fields; extra is read from extra_json
_META_COLUMNS = tuple(f for f in FIELDS if f != "extra")


class EpisodeDataset:
    """Random access to the committed episodes of a dataset at `root`.

    verify=True checks every committed episode on open: its data parquet and videos exist and match
    their sha256, and the parquet holds `length` rows of that episode. That reads every byte once.
    verify=False only skips that up-front pass: every data parquet and video is still checked against
    its recorded sha256 when it is first read for decoding (once per file per process, cached by
    envs.dataset.integrity), so a damaged file raises DatasetCorruptError naming episode and file
    instead of being decoded into wrong frames or rows.
    """

    def __init__(self, root: str | os.PathLike, verify: bool = True):
        self.root = Path(root)
        info_path = self.root / INFO_PATH
        if not info_path.is_file():
            raise FileNotFoundError(
                f"{info_path} not found: {self.root} is not a dataset; expected {_EXPECTED_LAYOUT}"
            )
        self.info, self._config = read_info(info_path, f"expected {CODEBASE_VERSION!r}")
        self._rows = [self._read_episode_row(i) for i in range(int(self.info["total_episodes"]))]
        self._meta = [self._meta_of(i, row) for i, row in enumerate(self._rows)]
        if verify:
            self.verify()

    # ------------------------------------------------------------------ properties
    @property
    def config(self) -> DatasetConfig:
        return self._config

    @property
    def fps(self) -> float:
        return self._config.fps

    @property
    def views(self) -> tuple[str, ...]:
        return self._config.views

    @property
    def meta(self) -> list[EpisodeMeta]:
        """Per-episode metadata (no frames): the Episode fields plus length and global indices. Copies:
        a caller that edits an `extra` dict does not change the dataset's."""
        return [m.copy() for m in self._meta]

    @property
    def tasks(self) -> list[str]:
        """Task strings, indexed by task_index."""
        return read_tasks(self.root / TASKS_PATH)[: int(self.info["total_tasks"])]

    @property
    def stats(self) -> dict[str, dict[str, np.ndarray]]:
        """Dataset-level feature stats from meta/stats.json (see envs.dataset.stats)."""
        return stats_from_json(read_json(self.root / STATS_PATH))

    def __len__(self) -> int:
        return len(self._rows)

    # ------------------------------------------------------------------ access
    def require_views(self, views: Sequence[str]) -> None:
        """Raise ValueError unless every view in `views` is recorded in this dataset."""
        missing = [v for v in views if v not in self.views]
        if missing:
            raise ValueError(f"views {missing} are not in the dataset at {self.root} (it has {list(self.views)})")

    def select(self, **filters: Any) -> list[int]:
        """Indices of the episodes matching every filter (`envs.dataset.meta.select_meta`), in order:
        select(source="expert", success=True), select(task_id=[0, 3]); None filters nothing."""
        return [m.episode_index for m in select_meta(self._meta, **filters)]

    def load_view(self, i: int, view: str) -> np.ndarray:
        """Decoded frames of one camera view of episode i -> uint8 [T, H, W, 3]."""
        i = self._check_index(i)
        if view not in self.views:
            raise KeyError(f"view {view!r} not in dataset views {self.views}")
        rel = episode_file_path(self._config, "video", i, view=view)
        source = self._open_checked(i, rel, self._rows[i].get(f"videos/{video_key(view)}/sha256"))
        try:
            frames = decode_video(source)
        except (VideoDecodeError, OSError) as err:
            raise DatasetCorruptError(f"episode {i}: {rel} is unreadable: {err}") from err
        length = self._rows[i]["length"]
        expected = (length, *self._config.image_size, 3)
        if frames.shape != expected:
            raise DatasetCorruptError(f"episode {i}: {rel} decodes to frames {frames.shape}, expected {expected}")
        return frames

    def arrays(self, i: int) -> tuple[np.ndarray, np.ndarray]:
        """(state [T, S], action [T, 7]) of episode i, read from its data file alone: no video is decoded.
        Why: fitting models on robot numbers (proprio, grasp point) over many episodes would otherwise spend
        nearly all its time decoding frames it never looks at."""
        i = self._check_index(i)
        table = self._read_frames(i, ["observation.state", "action"])
        return (_list_column(table, "observation.state", self._config.state_dim),
                _list_column(table, "action", self._config.action_dim))

    def __getitem__(self, i: int) -> Episode:
        i = self._check_index(i)
        m = self._meta[i]
        table = self._read_frames(i)
        state = _list_column(table, "observation.state", self._config.state_dim)
        action = _list_column(table, "action", self._config.action_dim)
        return Episode(
            frames={view: self.load_view(i, view) for view in self.views},
            state=state,
            action=action,
            reward=table.column("next.reward").to_numpy().astype(np.float32),
            success=table.column("next.success").to_numpy(zero_copy_only=False).astype(bool),
            instruction=m.instruction,
            suite=m.suite,
            task_id=m.task_id,
            source=m.source,
            perturbation=m.perturbation,
            seed=m.seed,
            init_state_id=m.init_state_id,
            extra=dict(m.extra),
        )

    def verify(self) -> None:
        """Check files, checksums, row counts and index continuity of every committed episode."""
        next_index = 0
        for i, row in enumerate(self._rows):
            rel = episode_file_path(self._config, "data", i)
            self._check_file(i, rel, row["data/sha256"])
            n_rows = len(self._read_frames(i, columns=["episode_index"]))
            if n_rows != row["length"]:
                raise DatasetCorruptError(f"episode {i}: {rel} has {n_rows} rows of this episode, "
                                          f"expected length {row['length']} (wrong length)")
            if row["dataset_from_index"] != next_index or row["dataset_to_index"] != next_index + row["length"]:
                raise DatasetCorruptError(
                    f"episode {i}: {episode_file_path(self._config, 'episodes', i)} has global indices "
                    f"[{row['dataset_from_index']}, {row['dataset_to_index']}), expected starting at {next_index}"
                )
            next_index = row["dataset_to_index"]
            for view in self.views:
                key = video_key(view)
                self._check_file(i, episode_file_path(self._config, "video", i, view=view), row[f"videos/{key}/sha256"])
        if next_index != int(self.info["total_frames"]):
            raise DatasetCorruptError(f"{INFO_PATH}: total_frames {self.info['total_frames']} but the episodes "
                                      f"hold {next_index} frames")

    # ------------------------------------------------------------------ internals
    def _check_index(self, i: int) -> int:
        n = len(self._rows)
        if not -n <= i < n:
            raise IndexError(f"episode index {i} out of range for a dataset of {n} episodes")
        return i % n

    def _check_file(self, i: int, rel: str, expected_sha: str | None) -> None:
        """Compare the file's sha256 (cached per process: envs.dataset.integrity) with the recorded one."""
        path = self.root / rel
        if not path.is_file():
            raise DatasetCorruptError(f"episode {i}: {rel} is missing")
        try:
            actual = file_digest(path)
        except OSError as err:
            raise DatasetCorruptError(f"episode {i}: {rel} is unreadable: {err}") from err
        _compare(i, rel, actual, expected_sha)

    def _open_checked(self, i: int, rel: str, expected_sha: str | None) -> Path | io.BytesIO:
        """The file to decode, once its sha256 matches the recorded one (a cached digest after the first read)."""
        path = self.root / rel
        if not path.is_file():
            raise DatasetCorruptError(f"episode {i}: {rel} is missing")
        try:
            actual, source = open_checked(path)
        except OSError as err:
            raise DatasetCorruptError(f"episode {i}: {rel} is unreadable: {err}") from err
        _compare(i, rel, actual, expected_sha)
        return source

    def _read_episode_row(self, i: int) -> dict[str, Any]:
        rel = episode_file_path(self._config, "episodes", i)
        table = _read_parquet(i, self.root, rel)
        rows = [r for r in table.to_pylist() if r.get("episode_index") == i]
        if len(rows) != 1:
            raise DatasetCorruptError(f"episode {i}: {rel} has {len(rows)} rows for this episode, expected 1")
        return rows[0]

    def _read_frames(self, i: int, columns: list[str] | None = None) -> pa.Table:
        """Frame rows of episode i, sorted by frame_index (the file may in general hold others too)."""
        rel = episode_file_path(self._config, "data", i)
        wanted = None if columns is None else sorted(set(columns) | {"episode_index", "frame_index"})
        source = self._open_checked(i, rel, self._rows[i]["data/sha256"])
        table = _read_parquet(i, self.root, rel, columns=wanted, source=source)
        table = table.filter(pc.equal(table.column("episode_index"), i))
        table = table.take(np.argsort(table.column("frame_index").to_numpy(), kind="stable"))
        if columns is None and len(table) != self._rows[i]["length"]:
            raise DatasetCorruptError(f"episode {i}: {rel} has {len(table)} rows of this episode, "
                                      f"expected length {self._rows[i]['length']} (wrong length)")
        return table

    def _meta_of(self, i: int, row: dict[str, Any]) -> EpisodeMeta:
        missing = [k for k in (*_META_COLUMNS, "extra_json", "data/sha256") if k not in row]
        if missing:
            raise DatasetCorruptError(f"episode {i}: {episode_file_path(self._config, 'episodes', i)} lacks "
                                      f"columns {missing} (not written by EpisodeWriter?)")
        try:
            extra = json.loads(row["extra_json"])
        except json.JSONDecodeError as err:
            raise DatasetCorruptError(f"episode {i}: extra_json is not valid JSON: {err}") from err
        return EpisodeMeta(**{k: row[k] for k in _META_COLUMNS}, extra=extra)


def _compare(i: int, rel: str, actual: str, expected_sha: str | None) -> None:
    if not isinstance(expected_sha, str):
        raise DatasetCorruptError(f"episode {i}: no sha256 recorded for {rel} (expected a hex string in its "
                                  f"meta/episodes row, got {expected_sha!r})")
    if actual != expected_sha:
        raise DatasetCorruptError(f"episode {i}: {rel} checksum mismatch (sha256 {actual[:12]}…, "
                                  f"recorded {expected_sha[:12]}…)")


def _read_parquet(i: int, root: Path, rel: str, columns: list[str] | None = None,
                  source: Path | io.BytesIO | None = None) -> pa.Table:
    path = root / rel
    if source is None and not path.is_file():
        raise DatasetCorruptError(f"episode {i}: {rel} is missing")
    try:
        # page checksums were written by EpisodeWriter; verifying them turns bit rot into an error
        return pq.read_table(path if source is None else source, columns=columns,
                             page_checksum_verification=True)
    except (OSError, pa.ArrowException, ValueError) as err:
        raise DatasetCorruptError(f"episode {i}: {rel} is unreadable: {err}") from err


def _list_column(table: pa.Table, name: str, dim: int) -> np.ndarray:
    """A (fixed-size) list<float32> column -> float32 [T, dim]."""
    values = table.column(name).combine_chunks().flatten().to_numpy(zero_copy_only=False)
    return np.asarray(values, dtype=np.float32).reshape(len(table), dim)
