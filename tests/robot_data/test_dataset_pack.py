"""EpisodeWriter(pack=True): many episodes per data/video/meta file within info.json's size limits, LeRobot's
LIBERO camera keys on request, and datasets written before still read the same."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

from robot_data.dataset import DatasetConfig, EpisodeDataset, EpisodeWriter
from robot_data.dataset.layout import LIBERO_KEYS
from tests.robot_data.test_dataset import VIEWS, assert_episode_equal, make_episode


def files(root: Path, kind: str) -> list[str]:
    return sorted(p.relative_to(root).as_posix() for p in (root / kind).rglob("file-*.*"))


def test_packed_round_trip_with_libero_keys(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    episodes = [make_episode(rng, T=8 + i, task_id=i % 2, instruction=f"task {i % 2}") for i in range(5)]
    config = DatasetConfig(views=VIEWS, image_size=(32, 32), camera_keys=LIBERO_KEYS)
    with EpisodeWriter(tmp_path, config, pack=True) as writer:
        assert [writer.append(ep) for ep in episodes[:3]] == [0, 1, 2]
    with EpisodeWriter(tmp_path, config, pack=True) as writer:  # a new session starts the next file, as lerobot
        assert [writer.append(ep) for ep in episodes[3:]] == [3, 4]
    assert files(tmp_path, "data") == ["data/chunk-000/file-000.parquet", "data/chunk-000/file-001.parquet"]
    assert files(tmp_path, "videos") == [f"videos/{k}/chunk-000/file-00{i}.mp4" for k in LIBERO_KEYS.values()
                                         for i in (0, 1)]
    info = json.loads((tmp_path / "meta/info.json").read_text())
    assert {"observation.images.image", "observation.images.image2"} <= set(info["features"])
    rows = pq.read_table(tmp_path / "meta/episodes/chunk-000/file-001.parquet").to_pylist()
    assert [r["episode_index"] for r in rows] == [3, 4]
    assert rows[1]["videos/observation.images.image/from_timestamp"] == 11 / 20  # after episode 3's 11 frames
    ds = EpisodeDataset(tmp_path)  # verify=True: every file's sha256 and row count
    assert ds.views == VIEWS and ds.checksummed and ds.config == config
    for i, ep in enumerate(episodes):
        assert_episode_equal(ds[i], ep)  # lossless: frame for frame, at every span of the shared mp4s


def test_packing_respects_the_size_limits(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    episodes = [make_episode(rng, T=10, size=(64, 64)) for _ in range(12)]  # noise: ~120 KB per view and episode
    config = DatasetConfig(views=VIEWS, image_size=(64, 64), video_files_size_in_mb=1)
    with EpisodeWriter(tmp_path, config, pack=True) as writer:
        for ep in episodes:
            writer.append(ep)
    videos = [tmp_path / f for f in files(tmp_path, "videos")]
    assert len(videos) >= 4 and all(p.stat().st_size < 1 << 20 for p in videos)  # 2 files or more per view
    assert len(files(tmp_path, "data")) == len(videos) // 2
    ds = EpisodeDataset(tmp_path)
    for i in (0, 7, 11):
        assert_episode_equal(ds[i], episodes[i])


def test_pending_episodes_of_a_killed_writer_are_dropped(tmp_path: Path) -> None:
    rng = np.random.default_rng(2)
    episodes = [make_episode(rng) for _ in range(3)]
    config = DatasetConfig(views=VIEWS, image_size=(32, 32))
    with EpisodeWriter(tmp_path, config, pack=True) as writer:
        writer.append(episodes[0])
    writer = EpisodeWriter(tmp_path, config, pack=True)
    writer.append(episodes[1])
    writer.append(episodes[2])
    assert writer._lock_file is not None
    writer._lock_file.close()  # killed before the shared files were committed: the lock goes with the process
    writer._lock_file = None
    assert len(EpisodeDataset(tmp_path)) == 1
    with EpisodeWriter(tmp_path, config) as again:  # removes the leftovers and appends per-episode files after
        assert again.append(episodes[2]) == 1
    assert not [p for p in tmp_path.rglob("*.tmp")]
    ds = EpisodeDataset(tmp_path)
    assert_episode_equal(ds[1], episodes[2])
