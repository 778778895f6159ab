"""Append-only, crash-safe writer of episodes in the LeRobotDataset v3.0 layout.

Every episode gets its own data parquet, one mp4 per view and its own meta/episodes parquet, at
chunk_index = episode_index // chunks_size, file_index = episode_index % chunks_size. Files are written
under temporary names and renamed into place; meta/info.json is rewritten last and is the commit point:
an episode exists iff its index < info["total_episodes"]. Whatever a killed writer left behind beyond
that is removed the next time a writer opens the dataset.

Each commit also moves meta/seal.sha256 (robot_data.dataset.seal), the sha256 of every meta file: before the
meta files change it accepts their old and new versions, after info.json only the new ones. A writer that
opens a dataset checks the meta files against it, recovers, and writes the seal of what it recovered.
"""
from __future__ import annotations

import dataclasses
import json
import logging
import os
import re
from pathlib import Path
from typing import IO, Any

import numpy as np
import pyarrow as pa

from infra.atomic import atomic_write_bytes
from infra.crash_points import crash_point
from robot_data.dataset.episode import Episode
from robot_data.dataset.files import (
    acquire_lock,
    check_creatable,
    frame_table,
    json_bytes,
    parquet_bytes,
    write_json_atomic,
    write_parquet_atomic,
)
from robot_data.dataset.integrity import bytes_digest, file_digest
from robot_data.dataset.layout import (
    CODEBASE_VERSION,
    DATA_PATH,
    INFO_PATH,
    STATS_PATH,
    TASKS_PATH,
    VIDEO_PATH,
    DatasetConfig,
    build_info,
    episode_file_path,
    read_info,
    read_json,
    read_tasks,
    tasks_table,
)
from robot_data.dataset.pack import PackedFiles
from robot_data.dataset.rows import data_file, read_rows, video_file
from robot_data.dataset.seal import Entries, merge, read_meta, write_seal
from robot_data.dataset.stats import (
    aggregate_stats,
    flatten_stats,
    image_stats,
    lowdim_stats,
    stats_from_json,
    stats_of_rows,
    stats_to_json,
)
from robot_data.dataset.video import encode_video

logger = logging.getLogger(__name__)

# chunk-NNN/file-NNN.<ext> anywhere below data/, videos/<key>/ or meta/episodes/
_EPISODE_FILE = re.compile(r"chunk-(\d+)/file-(\d+)\.(parquet|mp4)$")


class EpisodeWriter:
    """Create a dataset at `root` (needs `config`, or uses the defaults) or append to an existing one.

    Opening an existing dataset takes its config from meta/info.json; a passed `config` must match it.
    Holds an advisory lock on meta/.writer.lock until `close()` (or the end of a `with` block).
    """

    # set by _create or _open_existing; updated by each committed append
    _config: DatasetConfig
    _total_episodes: int
    _total_frames: int
    _tasks: list[str]
    _stats: dict[str, dict[str, np.ndarray]]
    _pending_tasks: list[str]  # tasks including those of appended, not yet committed episodes
    _pending_frames: int  # total frames including those episodes
    _seal: Entries  # the seal of the committed state (one digest a file)

    def __init__(self, root: str | os.PathLike, config: DatasetConfig | None = None, pack: bool = False):
        self.root = Path(root)
        self.pack = pack
        self._dirty = False  # True while (or after a failed) append has files beyond the commit point
        self._group: PackedFiles | None = None  # pack=True: the shared files being filled, not yet committed
        self._group_stats: list[dict[str, dict[str, np.ndarray]]] = []
        self._last_file: tuple[int, int] | None = None  # (chunk, file) of the last committed episode's data
        info_path = self.root / INFO_PATH
        if not info_path.exists():
            check_creatable(self.root)
        (self.root / "meta").mkdir(parents=True, exist_ok=True)
        self._lock_file: IO[str] | None = acquire_lock(self.root / "meta" / ".writer.lock")
        try:
            if info_path.exists():
                self._open_existing(config)
            else:
                self._create(config or DatasetConfig())
        except BaseException:
            self._release()
            raise

    # ------------------------------------------------------------------ public API
    @property
    def config(self) -> DatasetConfig:
        return self._config

    def __len__(self) -> int:
        """Number of committed episodes."""
        return self._total_episodes

    def append(self, episode: Episode) -> int:
        """Validate `episode` against the config, write its files and return its index. Per-episode files
        (default): committed before returning. pack=True: encoded into the open shared files and committed
        when they are full, on `flush()` or on `close()` (a crash before loses only those pending episodes)."""
        if self._lock_file is None:
            raise ValueError(f"{self.root}: writer is closed")
        episode.validate()
        self._check_episode(episode)
        if self._dirty:  # an earlier append failed part-way: drop its files before writing over them
            self._drop_pending()
            self._recover(total_tasks=len(self._tasks))
        self._dirty = True
        cfg = self._config
        index = self._total_episodes + len(self._group or ())
        task = episode.instruction
        task_index = self._pending_tasks.index(task) if task in self._pending_tasks else len(self._pending_tasks)
        from_index = self._pending_frames
        frames_table, frame_columns = frame_table(episode, index, task_index, from_index, cfg.fps)
        ep_stats = {key: lowdim_stats(values) for key, values in frame_columns.items()}
        for view in cfg.views:
            ep_stats[cfg.camera_key(view)] = image_stats(episode.frames[view])
        row: dict[str, Any] = {"episode_index": index, "tasks": [task], "length": len(episode),
                               "dataset_from_index": from_index, "dataset_to_index": from_index + len(episode)}
        project = {  # our columns, after lerobot's (file locations, checksums, stats)
            **flatten_stats(ep_stats),
            "instruction": task,
            "suite": episode.suite,
            "task_id": int(episode.task_id),
            "source": episode.source,
            "perturbation": episode.perturbation,
            "seed": int(episode.seed),
            "init_state_id": int(episode.init_state_id),
            "success": episode.episode_success,
            "extra_json": json.dumps(episode.extra, sort_keys=True, allow_nan=False),
        }
        if task_index == len(self._pending_tasks):
            self._pending_tasks = [*self._pending_tasks, task]
        if not self.pack:
            self._pending_frames += len(episode)
            self._write_own_files(episode, index, frames_table, row, project, ep_stats)
            return index
        if self._group is not None and not self._group.fits(frames_table, len(episode)):
            self._commit_group()
        if self._group is None:
            self._group = PackedFiles(self.root, cfg, *self._next_file())
        self._group.add(frames_table, row, episode.frames)
        row.update(project)
        self._group_stats.append(ep_stats)
        self._pending_frames += len(episode)
        self._dirty = False  # pending, not broken: the open files are committed or dropped as a whole
        return index

    def flush(self) -> None:
        """Commit the episodes pending in the open shared files (pack=True; nothing to do otherwise)."""
        if self._group is not None:
            self._commit_group()

    def _write_own_files(self, episode: Episode, index: int, frame_table: pa.Table, row: dict[str, Any],
                         project: dict[str, Any], ep_stats: dict[str, dict[str, np.ndarray]]) -> None:
        """One data parquet, mp4 per view and meta/episodes parquet for this episode alone; then commit."""
        cfg = self._config
        chunk_index, file_index = divmod(index, cfg.chunks_size)
        data_sha = write_parquet_atomic(frame_table, self.root / episode_file_path(cfg, "data", index))
        row.update({"data/chunk_index": chunk_index, "data/file_index": file_index})
        length = len(episode)
        for view in cfg.views:
            key = cfg.camera_key(view)
            video_path = self.root / episode_file_path(cfg, "video", index, view=view)
            encode_video(video_path, episode.frames[view], cfg.fps, cfg.video_codec, cfg.crf)
            row.update({
                f"videos/{key}/chunk_index": chunk_index,
                f"videos/{key}/file_index": file_index,
                # one video per episode, so every episode starts at t = 0 of its own file
                f"videos/{key}/from_timestamp": 0.0,
                f"videos/{key}/to_timestamp": length / cfg.fps,
                f"videos/{key}/sha256": file_digest(video_path),
            })
        row.update({"meta/episodes/chunk_index": chunk_index, "meta/episodes/file_index": file_index,
                    "data/sha256": data_sha, **project})
        episodes_rel = episode_file_path(cfg, "episodes", index)
        sha = write_parquet_atomic(pa.Table.from_pylist([row]), self.root / episodes_rel)
        self._commit([row], [ep_stats], {episodes_rel: sha})

    def _commit_group(self) -> None:
        group = self._group
        assert group is not None
        self._dirty = True
        rows = group.finish()
        sha = write_parquet_atomic(pa.Table.from_pylist(rows), self.root / group.path("episodes"))
        self._commit(rows, self._group_stats, {group.path("episodes"): sha})
        self._group, self._group_stats = None, []

    def _commit(self, rows: list[dict[str, Any]], ep_stats: list[dict[str, dict[str, np.ndarray]]],
                episodes_files: dict[str, str]) -> None:
        """Open the seal, write tasks and stats, then info.json (the commit point) for the episodes of `rows`
        (whose meta/episodes files, with their sha256, are `episodes_files`), then close the seal."""
        tasks = self._pending_tasks
        changes: dict[str, bytes] = {}
        if len(tasks) != len(self._tasks):
            changes[TASKS_PATH] = parquet_bytes(tasks_table(tasks))
        stats = aggregate_stats([self._stats, *ep_stats] if self._stats else ep_stats)
        changes[STATS_PATH] = json_bytes(stats_to_json(stats))
        total_episodes = self._total_episodes + len(rows)
        total_frames = int(rows[-1]["dataset_to_index"])
        info = json_bytes(build_info(self._config, total_episodes=total_episodes, total_frames=total_frames,
                                      total_tasks=len(tasks)))
        seal = {**self._seal, **{rel: frozenset([sha]) for rel, sha in episodes_files.items()},
                **{rel: frozenset([bytes_digest(data)]) for rel, data in {**changes, INFO_PATH: info}.items()}}
        write_seal(self.root, merge(self._seal, seal))  # every meta file may now be old or new
        crash_point("dataset.seal_opened")
        for rel, data in changes.items():
            atomic_write_bytes(self.root / rel, data)
        crash_point("dataset.before_commit")
        self._write_info(info)  # commit point
        crash_point("dataset.after_commit")
        write_seal(self.root, seal)
        self._seal = seal
        # In-memory state moves only after the commit, so a failed append leaves the writer usable.
        self._total_episodes, self._total_frames = total_episodes, total_frames
        self._tasks, self._stats = tasks, stats
        self._last_file = (int(rows[-1]["data/chunk_index"]), int(rows[-1]["data/file_index"]))
        self._dirty = False

    def _next_file(self) -> tuple[int, int]:
        """The (chunk, file) after the last committed episode's, as lerobot moves on (chunks_size files a chunk)."""
        if self._last_file is None:
            return 0, 0
        chunk_index, file_index = self._last_file
        if file_index + 1 >= self._config.chunks_size:
            return chunk_index + 1, 0
        return chunk_index, file_index + 1

    def _drop_pending(self) -> None:
        """Forget episodes appended since the last commit (their files are removed by _recover)."""
        if self._group is not None:
            self._group.abort()
        self._group, self._group_stats = None, []
        self._pending_tasks, self._pending_frames = list(self._tasks), self._total_frames

    def close(self) -> None:
        """Commit pending episodes (pack=True), release the writer lock; further appends raise."""
        try:
            if getattr(self, "_group", None) is not None and not self._dirty:
                self.flush()
        finally:
            self._release()

    def _release(self) -> None:
        if getattr(self, "_group", None) is not None:
            self._drop_pending()
        lock = getattr(self, "_lock_file", None)
        if lock is not None:
            lock.close()  # closing the descriptor drops the flock
            self._lock_file = None

    def __enter__(self) -> EpisodeWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ opening
    def _create(self, config: DatasetConfig) -> None:
        self._config = config
        self._total_episodes = self._total_frames = 0
        self._remove_uncommitted()  # temp files of an interrupted earlier creation
        self._tasks = []
        self._stats = {}
        self._pending_tasks, self._pending_frames = [], 0
        write_parquet_atomic(tasks_table([]), self.root / TASKS_PATH)
        write_json_atomic(self.root / STATS_PATH, {})
        self._write_info(json_bytes(build_info(config, total_episodes=0, total_frames=0, total_tasks=0)))
        # after info.json: killed before, the dataset has no seal and opens unchecked until a writer seals it
        self._reseal()

    def _open_existing(self, config: DatasetConfig | None) -> None:
        info_path = self.root / INFO_PATH
        meta = read_meta(self.root)  # a meta file that differs from the seal is refused here, never re-sealed
        info, stored = read_info(info_path, f"this writer only appends to {CODEBASE_VERSION!r} datasets",
                                 data=meta.info)
        if stored is None:
            raise ValueError(f"{info_path}: not written by EpisodeWriter (its cameras record no video.encoder); "
                             "this writer only appends to its own datasets, and reads others through EpisodeDataset")
        if config is not None:
            for f in dataclasses.fields(DatasetConfig):
                if getattr(config, f.name) != getattr(stored, f.name):
                    raise ValueError(
                        f"config mismatch for {self.root}: {f.name} is {getattr(stored, f.name)!r} in the "
                        f"dataset but {getattr(config, f.name)!r} was passed"
                    )
        self._config = stored
        self._total_episodes = int(info["total_episodes"])
        self._total_frames = int(info["total_frames"])
        self._recover(total_tasks=int(info["total_tasks"]))

    def _recover(self, total_tasks: int) -> None:
        """Bring files beyond the commit point back in line with the committed state."""
        self._remove_uncommitted()
        all_tasks = read_tasks(self.root / TASKS_PATH)
        self._tasks = all_tasks[:total_tasks]
        self._pending_tasks, self._pending_frames = list(self._tasks), self._total_frames
        if len(all_tasks) != len(self._tasks):  # a task added by an uncommitted episode
            write_parquet_atomic(tasks_table(self._tasks), self.root / TASKS_PATH)

        stats_path = self.root / STATS_PATH
        try:
            self._stats = stats_from_json(read_json(stats_path))
        except (OSError, ValueError):
            self._stats = {}
        counted = {int(s["count"][0]) for s in self._stats.values()} or {0}
        if counted != {self._total_frames}:
            # stats.json is written just before the commit, so after a crash it may include an
            # uncommitted episode: rebuild it from the committed episodes' own stats.
            logger.warning("%s: stats.json does not match the committed episodes; recomputing it", self.root)
            self._stats = self._recompute_stats()
            write_json_atomic(stats_path, stats_to_json(self._stats))
        self._reseal()

    def _reseal(self) -> None:
        """Seal the meta files as they now are: called once they hold the committed state (after creation or
        recovery). Recovery only rewrites tasks and stats to their committed bytes, which an open seal accepts."""
        rels = [INFO_PATH, TASKS_PATH, STATS_PATH, *self._episodes_files]
        self._seal = {rel: frozenset([file_digest(self.root / rel)]) for rel in rels}
        write_seal(self.root, self._seal)

    def _remove_uncommitted(self) -> None:
        """Delete temp files and episode files no committed meta/episodes row points at (left by a killed append)."""
        rows = read_rows(self.root, self._total_episodes, self._config.chunks_size) if self._total_episodes else []
        info = {"data_path": DATA_PATH, "video_path": VIDEO_PATH}
        keep = {data_file(info, r) for r in rows} | {video_file(info, r, self._config.camera_key(v))
                                                    for r in rows for v in self._config.views}
        self._episodes_files = sorted({r["meta/episodes/file"] for r in rows})
        keep |= set(self._episodes_files)
        self._last_file = (int(rows[-1]["data/chunk_index"]), int(rows[-1]["data/file_index"])) if rows else None
        removed = []
        for top in ("data", "videos", "meta"):
            base = self.root / top
            if not base.exists():
                continue
            for path in sorted(p for p in base.rglob("*") if p.is_file()):
                rel = path.relative_to(self.root).as_posix()
                match = _EPISODE_FILE.search(rel)
                is_tmp = path.name.startswith(".") and path.name.endswith(".tmp")
                is_episode_file = match is not None and (top != "meta" or rel.startswith("meta/episodes/"))
                if is_episode_file and match is not None:
                    if rel in keep:
                        continue
                elif not is_tmp:
                    continue
                path.unlink()
                removed.append(rel)
        if removed:
            logger.warning(
                "%s: removed %d file(s) of an uncommitted episode / interrupted write: %s",
                self.root, len(removed), ", ".join(removed),
            )

    def _recompute_stats(self) -> dict[str, dict[str, np.ndarray]]:
        """The committed episodes' stats, merged commit by commit in the order `_commit` merged them (each
        meta/episodes file was one commit), so a recovered stats.json equals an uninterrupted run's bit for bit."""
        return stats_of_rows(read_rows(self.root, self._total_episodes, self._config.chunks_size))

    def _write_info(self, info: bytes) -> None:
        """Atomically replace meta/info.json: the commit point of an append (a method: tests fail it)."""
        atomic_write_bytes(self.root / INFO_PATH, info)

    def _check_episode(self, episode: Episode) -> None:
        cfg = self._config
        if set(episode.frames) != set(cfg.views):
            raise ValueError(f"frames: dataset views are {list(cfg.views)}, episode has {sorted(episode.frames)}")
        T = len(episode)
        for view in cfg.views:
            expected = (T, *cfg.image_size, 3)
            if episode.frames[view].shape != expected:
                raise ValueError(f"frames[{view!r}]: expected shape {expected}, got {episode.frames[view].shape}")
        if episode.state.shape[1] != cfg.state_dim:
            raise ValueError(f"state: expected [T, {cfg.state_dim}], got {episode.state.shape}")
        if episode.action.shape[1] != cfg.action_dim:
            raise ValueError(f"action: expected [T, {cfg.action_dim}], got {episode.action.shape}")
