"""Read a LeRobot v3.0 dataset (ours, written by `EpisodeWriter`, or lerobot's) into `Episode`s.

Every episode is found through its meta/episodes row (robot_data.dataset.rows): the data parquet and the
span of each camera's mp4 it lives in, however many episodes share those files. Features are mapped
by `ReaderConfig` (robot_data.dataset.features): which cameras are our views, which keys state and action.
Our project columns (instruction, suite, source, success, sha256 of every file, ...) are used where
present; a foreign dataset gets ReaderConfig's stand-ins, and its files, which carry no recorded sha256,
are read unchecked, which the reader says once per dataset (a logged warning) rather than silently.
"""
from __future__ import annotations

import io
import json
import logging
import os
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from robot_data.dataset.episode import Episode
from robot_data.dataset.errors import DatasetCorruptError
from robot_data.dataset.features import Features, ReaderConfig, resolve_features
from robot_data.dataset.images import decode_image_column, resize_frames
from robot_data.dataset.integrity import file_digest, open_checked
from robot_data.dataset.layout import (
    INFO_PATH,
    STATS_PATH,
    TASKS_PATH,
    DatasetConfig,
    parse_json,
    read_info,
    read_json,
    read_tasks,
)
from robot_data.dataset.meta import EpisodeMeta, select_meta
from robot_data.dataset.rows import data_file, read_rows, video_file, video_span
from robot_data.dataset.seal import read_meta
from robot_data.dataset.stats import stats_from_json, stats_of_rows
from robot_data.dataset.video import VideoDecodeError, decode_video_span

logger = logging.getLogger(__name__)

_EXPECTED_LAYOUT = (
    "a LeRobotDataset v3.0 directory with meta/info.json, meta/tasks.parquet, meta/episodes/chunk-*/file-*.parquet, "
    "data/chunk-*/file-*.parquet and videos/<camera key>/chunk-*/file-*.mp4"
)
_warned_unchecked: set[Path] = set()  # datasets already reported as read without checksums (once per process)

def _check_stats(path: Path, stats: dict[str, dict[str, np.ndarray]],
                 expected: dict[str, dict[str, np.ndarray]]) -> None:
    """DatasetCorruptError naming stats.json unless it holds the same features, statistics and values (up to
    float rounding) as the merge of the per-episode stats recorded in meta/episodes."""
    names = {k: sorted(v) for k, v in stats.items()}
    if names != {k: sorted(v) for k, v in expected.items()}:
        raise DatasetCorruptError(f"{path}: its features or statistics differ from the per-episode stats in "
                                  "meta/episodes (changed since it was written)")
    for key, table in expected.items():
        for name, value in table.items():
            got = np.asarray(stats[key][name], np.float64)
            if got.shape != np.shape(value) or not np.allclose(got, value, rtol=1e-6, atol=1e-9, equal_nan=True):
                raise DatasetCorruptError(f"{path}: {key}/{name} differs from the per-episode stats in "
                                          "meta/episodes (changed since it was written)")


__all__ = ["DatasetCorruptError", "EpisodeDataset"]


class EpisodeDataset:
    """Random access to the committed episodes of a LeRobot v3.0 dataset at `root`.

    verify=True checks every committed episode on open: its data parquet and videos exist (and match
    their sha256 where recorded: our datasets) and the parquet holds `length` rows of that episode.
    verify=False only skips that up-front pass: every data parquet and video with a recorded sha256 is
    still checked when it is first read for decoding (once per file per process, cached by
    robot_data.dataset.integrity), so a damaged file raises DatasetCorruptError naming episode and file
    instead of being decoded into wrong frames or rows. `features` maps cameras, state and action
    (default: ReaderConfig(), automatic camera mapping). Whatever `verify`, the meta files are read once on
    open and checked against meta/seal.sha256 where our writer left one (`sealed`: they were; see
    robot_data.dataset.seal); `stats` parses the stats.json read then.
    """

    def __init__(self, root: str | os.PathLike, verify: bool = True, features: ReaderConfig | None = None):
        self.root = Path(root)
        info_path = self.root / INFO_PATH
        if not info_path.is_file():
            raise FileNotFoundError(
                f"{info_path} not found: {self.root} is not a dataset; expected {_EXPECTED_LAYOUT}"
            )
        # every meta file is read once, here, and checked against meta/seal.sha256 where our writer left one
        meta = read_meta(self.root)
        self.sealed = meta.sealed
        self.info, written = read_info(
            info_path, "expected 'v3.0' (lerobot converts v2.1 datasets with "
            "lerobot.scripts.convert_dataset_v21_to_v30)", any_v3=True, data=meta.info)
        self.reader_config = features or ReaderConfig()
        try:
            self._features = resolve_features(self.info, self.reader_config)
        except (KeyError, ValueError, TypeError) as err:
            raise ValueError(f"{info_path}: {err}") from err
        self._config = self._dataset_config(written)
        self._rows = read_rows(self.root, int(self.info["total_episodes"]), int(self.info["chunks_size"]),
                               sources=meta.episodes)
        # ours iff every row records the sha256 of its files; then a missing checksum is corruption
        self.checksummed = bool(self._rows) and all("data/sha256" in r for r in self._rows)
        if self._rows and not self.checksummed and self.root.resolve() not in _warned_unchecked:
            _warned_unchecked.add(self.root.resolve())
            logger.warning("%s: no sha256 recorded for its files (not written by EpisodeWriter): they are read "
                           "unchecked; only parquet page checksums, where written, are verified", self.root)
        if meta.tasks is None:
            raise FileNotFoundError(f"{self.root / TASKS_PATH} not found; expected {_EXPECTED_LAYOUT}")
        self._tasks = read_tasks(self.root / TASKS_PATH, data=meta.tasks)[: int(self.info["total_tasks"])]
        self._stats_bytes = meta.stats  # parsed by `stats` when asked for: the version checked here
        self._meta = [self._meta_of(i, row) for i, row in enumerate(self._rows)]
        if verify:
            self.verify()

    # ------------------------------------------------------------------ properties
    @property
    def config(self) -> DatasetConfig:
        """The dataset's config, with the frame size the reader returns (`ReaderConfig.image_size`)."""
        size = self.reader_config.image_size
        return replace(self._config, image_size=(size, size)) if size else self._config

    @property
    def features(self) -> Features:
        """The camera keys, state and action keys this dataset is read through."""
        return self._features

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
        return list(self._tasks)

    @property
    def stats(self) -> dict[str, dict[str, np.ndarray]]:
        """Dataset-level feature stats from meta/stats.json (see robot_data.dataset.stats), under our keys:
        the state and action stats as "observation.state" / "action" whatever the dataset calls them."""
        path = self.root / STATS_PATH
        document = read_json(path) if self._stats_bytes is None else parse_json(self._stats_bytes, path)
        try:
            stats = stats_from_json(document)
        except (KeyError, TypeError, ValueError, AttributeError) as err:  # a flipped key or a value of another type
            raise DatasetCorruptError(f"{path}: not a stats table ({err!r})") from None
        if self.checksummed and self._rows:
            # stats.json is rewritten by every append, so no row records its sha256; but it is the merge of the
            # rows' own per-episode stats (whose file is checked), so a changed bit shows as a disagreement
            _check_stats(path, stats, stats_of_rows(self._rows))
        for ours, key in (("observation.state", self._features.state), ("action", self._features.action)):
            if key in stats:
                stats[ours] = stats[key]
        return stats

    def __len__(self) -> int:
        return len(self._rows)

    # ------------------------------------------------------------------ access
    def require_views(self, views: Sequence[str]) -> None:
        """Raise ValueError unless every view in `views` is recorded in this dataset."""
        missing = [v for v in views if v not in self.views]
        if missing:
            raise ValueError(f"views {missing} are not in the dataset at {self.root} (it has {list(self.views)}; "
                             f"cameras {self._features.cameras}); map cameras with ReaderConfig.cameras")

    def select(self, **filters: Any) -> list[int]:
        """Indices of the episodes matching every filter (`robot_data.dataset.meta.select_meta`), in order:
        select(source="expert", success=True), select(task_id=[0, 3]); None filters nothing."""
        return [m.episode_index for m in select_meta(self._meta, **filters)]

    def load_view(self, i: int, view: str) -> np.ndarray:
        """Decoded frames of one camera view of episode i -> uint8 [T, H, W, 3]."""
        i = self._check_index(i)
        if view not in self.views:
            raise KeyError(f"view {view!r} not in dataset views {self.views}")
        key, row = self._features.cameras[view], self._rows[i]
        length = int(row["length"])
        if self._features.dtypes[view] == "image":  # encoded images in the data parquet
            rel = data_file(self.info, row)
            frames = decode_image_column(self._read_frames(i, [key]).column(key), f"episode {i}: {rel} {key}")
        else:
            rel = video_file(self.info, row, key)
            source = self._open_checked(i, rel, row.get(f"videos/{key}/sha256"))
            try:
                frames = decode_video_span(source, video_span(row, key), length, self.fps,
                                           self.reader_config.tolerance_s)
            except (VideoDecodeError, OSError) as err:
                raise DatasetCorruptError(f"episode {i}: {rel} is unreadable: {err}") from err
        expected = (length, *self._config.image_size, 3)
        if frames.shape != expected:
            raise DatasetCorruptError(f"episode {i}: {rel} decodes to frames {frames.shape}, expected {expected}")
        return resize_frames(frames, self.reader_config.image_size)

    def arrays(self, i: int) -> tuple[np.ndarray, np.ndarray]:
        """(state [T, S], action [T, A]) of episode i, read from its data file alone: no video is decoded.
        Why: fitting models on robot numbers (proprio, grasp point) over many episodes would otherwise spend
        nearly all its time decoding frames it never looks at."""
        i = self._check_index(i)
        f = self._features
        table = self._read_frames(i, [f.state, f.action])
        return _list_column(table, f.state, f.state_dim), _list_column(table, f.action, f.action_dim)

    def __getitem__(self, i: int) -> Episode:
        i = self._check_index(i)
        m, f = self._meta[i], self._features
        table = self._read_frames(i)
        T = len(table)
        if "next.success" in table.column_names:
            success = table.column("next.success").to_numpy(zero_copy_only=False).astype(bool)
        else:  # a foreign episode: ReaderConfig.succeed says whether it reached success (at its end)
            success = np.zeros(T, dtype=bool)
            success[-1] = m.success
        reward = (table.column("next.reward").to_numpy(zero_copy_only=False).astype(np.float32).reshape(T)
                  if "next.reward" in table.column_names else success.astype(np.float32))
        return Episode(
            frames={view: self.load_view(i, view) for view in self.views},
            state=_list_column(table, f.state, f.state_dim),
            action=_list_column(table, f.action, f.action_dim),
            reward=reward,
            success=success,
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
        """Check files, checksums (where recorded), row counts and index continuity of every episode."""
        next_index = 0
        for i, row in enumerate(self._rows):
            rel = data_file(self.info, row)
            self._check_file(i, rel, row.get("data/sha256"))
            n_rows = len(self._read_frames(i, columns=["episode_index"]))
            if n_rows != row["length"]:
                raise DatasetCorruptError(f"episode {i}: {rel} has {n_rows} rows of this episode, "
                                          f"expected length {row['length']} (wrong length)")
            if row["dataset_from_index"] != next_index or row["dataset_to_index"] != next_index + row["length"]:
                raise DatasetCorruptError(
                    f"episode {i}: {row['meta/episodes/file']} has global indices "
                    f"[{row['dataset_from_index']}, {row['dataset_to_index']}), expected starting at {next_index}"
                )
            next_index = row["dataset_to_index"]
            for view, key in self._features.cameras.items():
                if self._features.dtypes[view] == "video":
                    self._check_file(i, video_file(self.info, row, key), row.get(f"videos/{key}/sha256"))
        if next_index != int(self.info["total_frames"]):
            raise DatasetCorruptError(f"{INFO_PATH}: total_frames {self.info['total_frames']} but the episodes "
                                      f"hold {next_index} frames")

    # ------------------------------------------------------------------ internals
    def _dataset_config(self, written: DatasetConfig | None) -> DatasetConfig:
        """Ours (`written`, from read_info): the config it was written with, where the features read are
        its own. Foreign, or ours read through other keys: one describing what the reader returns."""
        f = self._features
        if (written is not None and set(written.views) == set(f.cameras)
                and all(written.camera_key(v) == k for v, k in f.cameras.items())
                and (written.state_dim, written.action_dim) == (f.state_dim, f.action_dim)):
            return written
        even = all(n % 2 == 0 for n in f.image_size)
        return DatasetConfig(fps=self.info["fps"], views=tuple(f.cameras), image_size=f.image_size,
                             state_dim=f.state_dim, action_dim=f.action_dim,
                             video_codec="h264" if even else "libx264rgb",
                             robot_type=self.info.get("robot_type") or DatasetConfig.robot_type,
                             chunks_size=int(self.info.get("chunks_size", DatasetConfig.chunks_size)),
                             camera_keys={v: k for v, k in f.cameras.items() if k.startswith("observation.images.")})

    def _check_index(self, i: int) -> int:
        n = len(self._rows)
        if not -n <= i < n:
            raise IndexError(f"episode index {i} out of range for a dataset of {n} episodes")
        return i % n

    def _check_file(self, i: int, rel: str, expected_sha: str | None) -> None:
        """The file exists; where this dataset records checksums, its sha256 (cached per process) matches."""
        path = self.root / rel
        if not path.is_file():
            raise DatasetCorruptError(f"episode {i}: {rel} is missing")
        if not self.checksummed:
            return
        try:
            actual = file_digest(path)
        except OSError as err:
            raise DatasetCorruptError(f"episode {i}: {rel} is unreadable: {err}") from err
        _compare(i, rel, actual, expected_sha)

    def _open_checked(self, i: int, rel: str, expected_sha: str | None) -> Path | io.BytesIO:
        """The file to decode, once its sha256 matches the recorded one (a cached digest after the first
        read); a foreign dataset's file as it is (it records no checksums: reported once on open)."""
        path = self.root / rel
        if not path.is_file():
            raise DatasetCorruptError(f"episode {i}: {rel} is missing")
        if not self.checksummed:
            return path
        try:
            actual, source = open_checked(path)
        except OSError as err:
            raise DatasetCorruptError(f"episode {i}: {rel} is unreadable: {err}") from err
        _compare(i, rel, actual, expected_sha)
        return source

    def _read_frames(self, i: int, columns: list[str] | None = None) -> pa.Table:
        """Frame rows of episode i, sorted by frame_index (its data file may hold other episodes too)."""
        row = self._rows[i]
        rel = data_file(self.info, row)
        wanted = None if columns is None else sorted(set(columns) | {"episode_index", "frame_index"})
        source = self._open_checked(i, rel, row.get("data/sha256"))
        table = _read_parquet(i, self.root, rel, columns=wanted, source=source, episode=i)
        table = table.filter(pc.equal(table.column("episode_index"), i))
        table = table.take(np.argsort(table.column("frame_index").to_numpy(), kind="stable"))
        if columns is None and len(table) != row["length"]:
            raise DatasetCorruptError(f"episode {i}: {rel} has {len(table)} rows of this episode, "
                                      f"expected length {row['length']} (wrong length)")
        return table

    def _meta_of(self, i: int, row: dict[str, Any]) -> EpisodeMeta:
        """The row's metadata; project columns a foreign dataset lacks come from ReaderConfig / its tasks."""
        if self.checksummed and "extra_json" not in row:
            raise DatasetCorruptError(f"episode {i}: {row['meta/episodes/file']} lacks column extra_json")
        try:
            extra = json.loads(row.get("extra_json") or "{}")
        except json.JSONDecodeError as err:
            raise DatasetCorruptError(f"episode {i}: extra_json is not valid JSON: {err}") from err
        tasks = row.get("tasks") or []
        instruction = row.get("instruction") or (tasks[0] if tasks else "")
        cfg = self.reader_config
        return EpisodeMeta(
            episode_index=i, length=int(row["length"]), dataset_from_index=int(row["dataset_from_index"]),
            dataset_to_index=int(row["dataset_to_index"]), instruction=instruction,
            suite=row.get("suite") or cfg.suite or self.root.name,
            task_id=int(row["task_id"]) if row.get("task_id") is not None else _index_or(self._tasks, instruction),
            source=row.get("source") or cfg.source, perturbation=row.get("perturbation") or "",
            seed=int(row.get("seed") or 0),
            init_state_id=int(row["init_state_id"]) if row.get("init_state_id") is not None else -1,
            success=bool(row["success"]) if row.get("success") is not None else cfg.succeed,
            extra=extra,
        )

def _compare(i: int, rel: str, actual: str, expected_sha: str | None) -> None:
    if not isinstance(expected_sha, str):
        raise DatasetCorruptError(f"episode {i}: no sha256 recorded for {rel} (expected a hex string in its "
                                  f"meta/episodes row, got {expected_sha!r})")
    if actual != expected_sha:
        raise DatasetCorruptError(f"episode {i}: {rel} checksum mismatch (sha256 {actual[:12]}…, "
                                  f"recorded {expected_sha[:12]}…)")


def _index_or(tasks: list[str], task: str) -> int:
    return tasks.index(task) if task in tasks else -1


def _read_parquet(i: int, root: Path, rel: str, columns: list[str] | None = None,
                  source: Path | io.BytesIO | None = None, episode: int | None = None) -> pa.Table:
    path = root / rel
    if source is None and not path.is_file():
        raise DatasetCorruptError(f"episode {i}: {rel} is missing")
    try:
        # page checksums were written by EpisodeWriter; verifying them turns bit rot into an error. The
        # filter lets a file of many episodes skip the row groups of the others (lerobot writes one per episode)
        return pq.read_table(path if source is None else source, columns=columns,
                             filters=None if episode is None else [("episode_index", "=", episode)],
                             page_checksum_verification=True)
    except (OSError, pa.ArrowException, ValueError) as err:
        raise DatasetCorruptError(f"episode {i}: {rel} is unreadable: {err}") from err


def _list_column(table: pa.Table, name: str, dim: int) -> np.ndarray:
    """A (fixed-size) list column of numbers -> float32 [T, dim]."""
    if name not in table.column_names:
        raise DatasetCorruptError(f"data file has no column {name!r} (ReaderConfig.state / .action)")
    values = np.asarray(table.column(name).combine_chunks().flatten().to_numpy(zero_copy_only=False), np.float32)
    if values.size != len(table) * dim:
        raise DatasetCorruptError(f"column {name!r}: {values.size} values in {len(table)} rows, expected [T, {dim}]")
    return values.reshape(len(table), dim)
