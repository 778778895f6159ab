"""Round-trip, integrity and crash-safety tests of the LeRobot v3.0 episode dataset."""
from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from robot_data.dataset import (
    DatasetConfig,
    DatasetCorruptError,
    Episode,
    EpisodeDataset,
    EpisodeWriter,
    decode_video,
    encode_video,
    is_dataset,
)
from robot_data.dataset import files as files_module
from robot_data.dataset import seal as seal_module
from robot_data.dataset import writer as writer_module
from robot_data.dataset.seal import reseal

VIEWS = ("agentview", "wrist")


def smooth_frames(rng: np.random.Generator, T: int, H: int, W: int) -> np.ndarray:
    """uint8 [T, H, W, 3]: a colour gradient with a moving square (video-like, compressible)."""
    yy, xx = np.mgrid[0:H, 0:W]
    base = np.stack([xx * 255 / W, yy * 255 / H, np.full((H, W), rng.uniform(0, 255))], axis=-1)
    frames = np.repeat(base[None], T, axis=0)
    for t in range(T):
        y, x = (3 + t) % (H - 8), (5 + 2 * t) % (W - 8)
        frames[t, y:y + 8, x:x + 8] = rng.uniform(0, 255, size=3)
    return frames.astype(np.uint8)


def make_episode(rng: np.random.Generator, T: int = 12, size: tuple[int, int] = (32, 32), noise: bool = True,
                 **meta) -> Episode:
    H, W = size
    frames = {v: (rng.integers(0, 256, (T, H, W, 3), dtype=np.uint8) if noise else smooth_frames(rng, T, H, W))
              for v in VIEWS}
    success = np.zeros(T, dtype=bool)
    success[-2:] = rng.random() < 0.5
    fields: dict[str, Any] = dict(instruction="put the bowl on the plate", suite="libero_spatial", task_id=1,
                                  source="expert")
    fields.update(meta)
    return Episode(
        frames=frames,
        state=rng.standard_normal((T, 8)).astype(np.float32),
        action=rng.uniform(-1, 1, (T, 7)).astype(np.float32),
        reward=rng.random(T).astype(np.float32),
        success=success,
        **fields,
    )


def make_episodes(seed: int = 0) -> list[Episode]:
    rng = np.random.default_rng(seed)
    return [
        make_episode(rng, T=12, seed=7, init_state_id=3, extra={"note": "first", "k": [1, 2.5]}),
        make_episode(rng, T=25, instruction="open the drawer", task_id=4, source="perturbed",
                     perturbation="early_release"),
        make_episode(rng, T=17, source="policy", extra={"policy": "vla-v1"}),
    ]


def write(root: Path, episodes: list[Episode], config: DatasetConfig | None = None) -> None:
    with EpisodeWriter(root, config or DatasetConfig(image_size=(32, 32))) as writer:
        for episode in episodes:
            writer.append(episode)


def assert_episode_equal(got: Episode, want: Episode) -> None:
    assert set(got.frames) == set(want.frames)
    for view in want.frames:
        np.testing.assert_array_equal(got.frames[view], want.frames[view])
    for name in ("state", "action", "reward", "success"):
        got_arr, want_arr = getattr(got, name), getattr(want, name)
        assert got_arr.dtype == want_arr.dtype, name
        np.testing.assert_array_equal(got_arr, want_arr, err_msg=name)
    for name in ("instruction", "suite", "task_id", "source", "perturbation", "seed", "init_state_id", "extra"):
        assert getattr(got, name) == getattr(want, name), name
    assert got.episode_success == want.episode_success


# ---------------------------------------------------------------------- round trips
def test_lossless_round_trip(tmp_path: Path) -> None:
    episodes = make_episodes()
    write(tmp_path, episodes)
    ds = EpisodeDataset(tmp_path)
    assert len(ds) == len(episodes) and ds.views == VIEWS and ds.fps == 20
    for i, episode in enumerate(episodes):
        assert_episode_equal(ds[i], episode)
        np.testing.assert_array_equal(ds.load_view(i, "wrist"), episode.frames["wrist"])
        state, action = ds.arrays(i)  # the numbers alone, from the data file
        np.testing.assert_array_equal(state, episode.state)
        np.testing.assert_array_equal(action, episode.action)
    assert_episode_equal(ds[-1], episodes[-1])

    # global frame indices are continuous across episodes, per-episode ones restart at 0
    tables = [pq.read_table(tmp_path / f"data/chunk-000/file-{i:03d}.parquet") for i in range(len(episodes))]
    index = np.concatenate([t.column("index").to_numpy() for t in tables])
    np.testing.assert_array_equal(index, np.arange(sum(len(e) for e in episodes)))
    for i, (t, episode) in enumerate(zip(tables, episodes)):
        np.testing.assert_array_equal(t.column("frame_index").to_numpy(), np.arange(len(episode)))
        np.testing.assert_allclose(t.column("timestamp").to_numpy(), np.arange(len(episode)) / 20, atol=1e-6)
        assert t.column("next.done").to_pylist() == [False] * (len(episode) - 1) + [True]
        assert set(t.column("episode_index").to_pylist()) == {i}

    meta = ds.meta
    assert [m.length for m in meta] == [len(e) for e in episodes]
    assert [m.success for m in meta] == [e.episode_success for e in episodes]
    assert meta[0].extra == episodes[0].extra and meta[1].perturbation == "early_release"
    assert ds.select(source="perturbed") == [1]
    assert ds.select(task_id=1) == [0, 2]
    assert ds.select(success=True) == [i for i, e in enumerate(episodes) if e.episode_success]
    assert ds.select(source="policy", task_id=4) == []


def test_lossy_round_trip_is_close_and_smaller(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    episode = make_episode(rng, T=20, size=(64, 64), noise=False)
    write(tmp_path / "lossy", [episode], DatasetConfig(image_size=(64, 64), video_codec="h264", crf=18))
    write(tmp_path / "lossless", [episode], DatasetConfig(image_size=(64, 64)))
    ds = EpisodeDataset(tmp_path / "lossy")
    assert ds.config.video_codec == "h264" and ds.config.crf == 18
    for view in VIEWS:
        decoded = ds.load_view(0, view)
        err = np.abs(decoded.astype(np.float64) - episode.frames[view]).mean()
        assert err < 4.0, f"{view}: mean abs error {err:.2f}"
    info = json.loads((tmp_path / "lossy/meta/info.json").read_text())
    assert info["features"]["observation.images.wrist"]["info"]["video.pix_fmt"] == "yuv420p"
    lossy = (tmp_path / "lossy/videos/observation.images.wrist/chunk-000/file-000.mp4").stat().st_size
    lossless = (tmp_path / "lossless/videos/observation.images.wrist/chunk-000/file-000.mp4").stat().st_size
    assert lossy < lossless


def test_lossy_codec_rejects_odd_frame_size_and_lossless_accepts_it(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="even"):
        DatasetConfig(image_size=(33, 32), video_codec="h264")
    frames = np.random.default_rng(2).integers(0, 256, (5, 33, 31, 3), dtype=np.uint8)
    with pytest.raises(ValueError, match="even"):
        encode_video(tmp_path / "odd.mp4", frames, fps=20, codec="h264", crf=23)
    encode_video(tmp_path / "odd.mp4", frames, fps=20)
    np.testing.assert_array_equal(decode_video(tmp_path / "odd.mp4"), frames)
    assert [p.name for p in tmp_path.iterdir()] == ["odd.mp4"]  # no temp files left behind


def test_append_after_reopen(tmp_path: Path) -> None:
    episodes = make_episodes()
    write(tmp_path, episodes[:2])
    with EpisodeWriter(tmp_path) as writer:  # config comes from info.json
        assert len(writer) == 2 and writer.config.image_size == (32, 32)
        with pytest.raises(RuntimeError, match="another EpisodeWriter"):
            EpisodeWriter(tmp_path)
        assert writer.append(episodes[2]) == 2
    ds = EpisodeDataset(tmp_path)
    assert len(ds) == 3
    assert_episode_equal(ds[2], episodes[2])
    assert [m.dataset_from_index for m in ds.meta] == [0, 12, 37]


def test_config_mismatch_on_reopen(tmp_path: Path) -> None:
    write(tmp_path, make_episodes()[:1])
    with pytest.raises(ValueError, match="image_size"):
        EpisodeWriter(tmp_path, DatasetConfig(image_size=(64, 64)))
    with pytest.raises(ValueError, match="views"):
        EpisodeWriter(tmp_path, DatasetConfig(image_size=(32, 32), views=("agentview",)))
    EpisodeWriter(tmp_path, DatasetConfig(image_size=(32, 32))).close()  # an equal config is fine


def test_writer_checks_episode_against_config(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    with EpisodeWriter(tmp_path, DatasetConfig(image_size=(32, 32))) as writer:
        with pytest.raises(ValueError, match=r"frames\['agentview'\]"):
            writer.append(make_episode(rng, size=(16, 16)))
        episode = make_episode(rng)
        del episode.frames["wrist"]
        with pytest.raises(ValueError, match="views"):
            writer.append(episode)
        episode = make_episode(rng)
        episode.state = episode.state[:, :6].copy()
        with pytest.raises(ValueError, match="state"):
            writer.append(episode)
        assert len(writer) == 0


# ---------------------------------------------------------------------- meta files
def test_info_tasks_and_stats(tmp_path: Path) -> None:
    episodes = make_episodes()
    write(tmp_path, episodes)
    info = json.loads((tmp_path / "meta/info.json").read_text())
    total = sum(len(e) for e in episodes)
    assert info["codebase_version"] == "v3.0"
    assert (info["total_episodes"], info["total_frames"], info["total_tasks"]) == (3, total, 2)
    assert info["splits"] == {"train": "0:3"} and info["fps"] == 20 and info["chunks_size"] == 1000
    video = info["features"]["observation.images.agentview"]
    assert video["dtype"] == "video" and video["shape"] == [32, 32, 3]
    assert video["info"]["video.codec"] == "h264" and video["info"]["video.encoder"] == "libx264rgb"
    assert info["features"]["observation.state"]["shape"] == [8]
    assert info["features"]["action"]["shape"] == [7]

    tasks = pq.read_table(tmp_path / "meta/tasks.parquet")
    assert tasks.column("task").to_pylist() == ["put the bowl on the plate", "open the drawer"]
    assert tasks.column("task_index").to_pylist() == [0, 1]
    assert json.loads(tasks.schema.metadata[b"pandas"])["index_columns"] == ["task"]
    ds = EpisodeDataset(tmp_path)
    assert ds.tasks == ["put the bowl on the plate", "open the drawer"]
    task_index = np.concatenate([pq.read_table(tmp_path / f"data/chunk-000/file-{i:03d}.parquet")
                                 .column("task_index").to_numpy() for i in range(3)])
    np.testing.assert_array_equal(np.unique(task_index), [0, 1])

    stats = json.loads((tmp_path / "meta/stats.json").read_text())
    for key, name in (("observation.state", "state"), ("action", "action"), ("next.reward", "reward")):
        values = np.concatenate([getattr(e, name).astype(np.float64).reshape(len(e), -1) for e in episodes])
        np.testing.assert_allclose(stats[key]["mean"], values.mean(axis=0), rtol=1e-9, atol=1e-12)
        np.testing.assert_allclose(stats[key]["std"], values.std(axis=0), rtol=1e-9, atol=1e-12)
        np.testing.assert_allclose(stats[key]["min"], values.min(axis=0))
        np.testing.assert_allclose(stats[key]["max"], values.max(axis=0))
        assert stats[key]["count"] == [total]
        assert {"q01", "q10", "q50", "q90", "q99"} <= set(stats[key])
    pixels = np.concatenate([e.frames["wrist"] for e in episodes]).reshape(-1, 3) / 255.0
    image = np.asarray(stats["observation.images.wrist"]["mean"])
    assert image.shape == (3, 1, 1)
    np.testing.assert_allclose(image.reshape(3), pixels.mean(axis=0), rtol=1e-9)
    np.testing.assert_allclose(np.asarray(stats["observation.images.wrist"]["std"]).reshape(3), pixels.std(axis=0),
                               rtol=1e-9)

    row = pq.read_table(tmp_path / "meta/episodes/chunk-000/file-001.parquet").to_pylist()[0]
    assert row["tasks"] == ["open the drawer"] and row["length"] == 25
    assert (row["dataset_from_index"], row["dataset_to_index"]) == (12, 37)
    assert row["videos/observation.images.wrist/to_timestamp"] == pytest.approx(25 / 20)
    np.testing.assert_allclose(row["stats/action/mean"], episodes[1].action.astype(np.float64).mean(axis=0), rtol=1e-9)


# ---------------------------------------------------------------------- corruption
def corrupt_dataset(tmp_path: Path) -> list[Episode]:
    episodes = make_episodes()
    write(tmp_path, episodes)
    return episodes


def test_truncated_video_detected(tmp_path: Path) -> None:
    corrupt_dataset(tmp_path)
    video = tmp_path / "videos/observation.images.agentview/chunk-000/file-001.mp4"
    video.write_bytes(video.read_bytes()[: video.stat().st_size // 2])
    with pytest.raises(DatasetCorruptError, match=r"episode 1: videos/observation.images.agentview/.*checksum"):
        EpisodeDataset(tmp_path)
    ds = EpisodeDataset(tmp_path, verify=False)  # decoding alone notices it too
    with pytest.raises(DatasetCorruptError, match="episode 1"):
        ds.load_view(1, "agentview")
    ds.load_view(0, "agentview")


def test_flipped_parquet_bytes_detected(tmp_path: Path) -> None:
    corrupt_dataset(tmp_path)
    data = tmp_path / "data/chunk-000/file-002.parquet"
    raw = bytearray(data.read_bytes())
    raw[len(raw) // 3] ^= 0xFF
    data.write_bytes(bytes(raw))
    with pytest.raises(DatasetCorruptError, match=r"episode 2: data/chunk-000/file-002.parquet checksum mismatch"):
        EpisodeDataset(tmp_path)


@pytest.mark.parametrize("rel", [
    "meta/episodes/chunk-000/file-001.parquet",
    "data/chunk-000/file-001.parquet",
    "videos/observation.images.wrist/chunk-000/file-001.mp4",
])
def test_deleted_episode_file_detected(tmp_path: Path, rel: str) -> None:
    corrupt_dataset(tmp_path)
    (tmp_path / rel).unlink()
    with pytest.raises(DatasetCorruptError, match=f"episode 1: {rel} is missing"):
        EpisodeDataset(tmp_path)


def rerecord_sha(root: Path, column: str, rel: str) -> None:
    """Record the current sha256 of `rel` in episode 0's meta/episodes row, so checks past the checksum run."""
    path = root / "meta/episodes/chunk-000/file-000.parquet"
    table = pq.read_table(path)
    digest = hashlib.sha256((root / rel).read_bytes()).hexdigest()
    table = table.set_column(table.schema.get_field_index(column), column, pa.array([digest]))
    pq.write_table(table, path, write_page_checksum=True)
    reseal(root)  # a deliberate edit of a meta file: seal it, or the seal check would refuse it first


def test_wrong_frame_count_detected(tmp_path: Path) -> None:
    episodes = corrupt_dataset(tmp_path)
    rel = "videos/observation.images.wrist/chunk-000/file-000.mp4"
    encode_video(tmp_path / rel, episodes[0].frames["wrist"][:-3], fps=20)  # a valid video, 3 frames short
    with pytest.raises(DatasetCorruptError, match=f"episode 0: {rel} checksum mismatch"):
        EpisodeDataset(tmp_path, verify=False)[0]
    rerecord_sha(tmp_path, "videos/observation.images.wrist/sha256", rel)
    ds = EpisodeDataset(tmp_path, verify=False)
    with pytest.raises(DatasetCorruptError, match=r"episode 0: .*file-000.mp4 is unreadable: .*holds 9 of the 12"):
        ds[0]


def test_wrong_row_count_detected(tmp_path: Path) -> None:
    corrupt_dataset(tmp_path)
    rel = "data/chunk-000/file-000.parquet"
    pq.write_table(pq.read_table(tmp_path / rel).slice(0, 5), tmp_path / rel)
    rerecord_sha(tmp_path, "data/sha256", rel)
    ds = EpisodeDataset(tmp_path, verify=False)
    with pytest.raises(DatasetCorruptError, match="episode 0: data/chunk-000/file-000.parquet has 5 rows"):
        ds[0]


def test_not_a_dataset(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="meta/info.json"):
        EpisodeDataset(tmp_path)
    assert not is_dataset(tmp_path) and not is_dataset(tmp_path / "ds") and not is_dataset("")
    write(tmp_path / "ds", make_episodes()[:1])
    assert is_dataset(tmp_path / "ds") and is_dataset(str(tmp_path / "ds"))
    info_path = tmp_path / "ds/meta/info.json"
    info_path.write_text(json.dumps(dict(json.loads(info_path.read_text()), codebase_version="v2.1")))
    with pytest.raises(ValueError, match="v2.1"):
        EpisodeDataset(tmp_path / "ds")
    with pytest.raises(ValueError, match="v2.1"):
        EpisodeWriter(tmp_path / "ds")


@pytest.mark.parametrize("damage, field", [
    (lambda info: "{not json", "not valid JSON"),
    (lambda info: "[]", "expected a JSON object"),
    (lambda info: json.dumps({k: v for k, v in info.items() if k != "features"}), "features must be"),
    (lambda info: json.dumps(dict(info, features=["action"])), "features must be"),
    (lambda info: json.dumps(dict(info, total_episodes="3")), "total_episodes must be an integer"),
    (lambda info: json.dumps(dict(info, fps=None)), "fps must be an integer"),
    (lambda info: json.dumps(dict(info, features=dict(info["features"], action={"shape": "7"}))),
     "features.action.shape"),
    (lambda info: json.dumps(dict(info, features={k: v for k, v in info["features"].items() if k != "action"})),
     "missing 'action'"),
    (lambda info: json.dumps(dict(info, data_path=info["data_path"].replace("file_index", "f)le_index"))),
     "data_path"),
    (lambda info: json.dumps(dict(info, video_path=info["video_path"].replace("{", "{{", 1))), "video_path"),
])
def test_malformed_info_json_is_one_error_naming_the_file(tmp_path: Path, damage, field) -> None:
    write(tmp_path / "ds", make_episodes()[:1])
    info_path = tmp_path / "ds/meta/info.json"
    info_path.write_text(damage(json.loads(info_path.read_text())))
    for open_it in (EpisodeDataset, EpisodeWriter):
        with pytest.raises(DatasetCorruptError) as err:
            open_it(tmp_path / "ds")
        assert str(info_path) in str(err.value) and field in str(err.value)


# ---------------------------------------------------------------------- crash safety
def test_partial_episode_is_invisible_and_cleaned(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                  caplog: pytest.LogCaptureFixture) -> None:
    episodes = make_episodes()
    write(tmp_path, episodes[:1])
    stats_before = json.loads((tmp_path / "meta/stats.json").read_text())

    def fail_before_commit(self, info):
        raise KeyboardInterrupt("killed before info.json")

    writer = EpisodeWriter(tmp_path)
    monkeypatch.setattr(EpisodeWriter, "_write_info", fail_before_commit)
    with pytest.raises(KeyboardInterrupt):
        writer.append(episodes[1])  # new task: tasks.parquet and stats.json were already rewritten
    writer.close()
    monkeypatch.undo()
    leftovers = ["data/chunk-000/file-001.parquet", "meta/episodes/chunk-000/file-001.parquet",
                 "videos/observation.images.wrist/chunk-000/file-001.mp4"]
    assert all((tmp_path / rel).exists() for rel in leftovers)

    ds = EpisodeDataset(tmp_path)  # readers only see committed episodes, and do not modify anything
    assert len(ds) == 1 and ds.tasks == [episodes[0].instruction]

    with caplog.at_level(logging.WARNING, logger="robot_data.dataset.writer"):
        writer = EpisodeWriter(tmp_path)
    assert "uncommitted" in caplog.text and "file-001" in caplog.text
    assert not any((tmp_path / rel).exists() for rel in leftovers)
    assert pq.read_table(tmp_path / "meta/tasks.parquet").num_rows == 1
    assert_stats_close(json.loads((tmp_path / "meta/stats.json").read_text()), stats_before)
    assert writer.append(episodes[1]) == 1
    writer.close()
    ds = EpisodeDataset(tmp_path)
    assert len(ds) == 2 and ds.tasks == [episodes[0].instruction, episodes[1].instruction]
    assert_episode_equal(ds[1], episodes[1])


def assert_stats_close(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for key in a:
        assert a[key].keys() == b[key].keys()
        for name in a[key]:
            np.testing.assert_allclose(a[key][name], b[key][name], rtol=1e-12, err_msg=f"{key}/{name}")


def test_interrupted_creation_can_be_redone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def fail_before_commit(self, info):
        raise KeyboardInterrupt("killed before info.json")

    monkeypatch.setattr(EpisodeWriter, "_write_info", fail_before_commit)
    with pytest.raises(KeyboardInterrupt):
        EpisodeWriter(tmp_path, DatasetConfig(image_size=(32, 32)))
    monkeypatch.undo()
    with pytest.raises(FileNotFoundError):
        EpisodeDataset(tmp_path)  # nothing committed: not a dataset yet
    (tmp_path / "meta/.stats.json.abc.tmp").write_bytes(b"partial")
    write(tmp_path, make_episodes()[:1])
    assert len(EpisodeDataset(tmp_path)) == 1 and not list(tmp_path.rglob("*.tmp"))
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "data").mkdir(parents=True)
    (tmp_path / "other" / "data" / "foreign.parquet").write_bytes(b"x")
    with pytest.raises(FileExistsError, match="foreign.parquet"):
        EpisodeWriter(tmp_path / "other")


def test_killed_at_any_write_leaves_a_valid_dataset(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Crash at each file write of an append in turn; every time the dataset stays consistent."""
    episodes = make_episodes()
    real_bytes, real_video = writer_module.atomic_write_bytes, writer_module.encode_video
    # data, 2 videos, episodes row, the opened seal, tasks (new task), stats, info (the seal closed after it
    # is not reached: that write would come after the commit)
    n_writes = 8
    for crash_at in range(n_writes):
        root = tmp_path / f"crash{crash_at}"
        write(root, episodes[:1])
        calls: list[str | Path] = []

        def counted(real, calls=calls, crash_at=crash_at):
            def wrapper(*args, **kwargs):
                calls.append(args[0])
                if len(calls) > crash_at:
                    # leave a half-written temp file, as a kill during the write would
                    Path(args[0]).with_name(f".{Path(args[0]).name}.x.tmp").write_bytes(b"partial")
                    raise KeyboardInterrupt
                return real(*args, **kwargs)
            return wrapper

        for module in (writer_module, files_module, seal_module):  # every module the writer writes through
            monkeypatch.setattr(module, "atomic_write_bytes", counted(real_bytes))
        monkeypatch.setattr(writer_module, "encode_video", counted(real_video))
        writer = EpisodeWriter(root)
        with pytest.raises(KeyboardInterrupt):
            writer.append(episodes[1])
        monkeypatch.undo()
        assert len(EpisodeDataset(root)) == 1, crash_at
        if crash_at % 2:  # a fresh writer (as after a kill) ...
            writer.close()
            writer = EpisodeWriter(root)
        assert writer.append(episodes[2]) == 1  # ... or the same one, after an exception
        writer.close()
        assert not list(root.rglob("*.tmp"))
        ds = EpisodeDataset(root)
        assert len(ds) == 2 and ds.tasks == [episodes[0].instruction]
        assert_episode_equal(ds[1], episodes[2])
        stats = ds.stats["action"]
        both = np.concatenate([episodes[0].action, episodes[2].action]).astype(np.float64)
        np.testing.assert_allclose(stats["mean"], both.mean(axis=0), rtol=1e-9)
        assert stats["count"][0] == len(both)
    assert len(calls) == n_writes  # the last round crashed at the final (commit) write


# ---------------------------------------------------------------------- Episode.validate
@pytest.mark.parametrize("mutate, field", [
    (lambda e: setattr(e, "state", e.state[:, None]), "state"),
    (lambda e: setattr(e, "state", e.state[:0]), "state"),
    (lambda e: setattr(e, "action", e.action.astype(np.float64)), "action"),
    (lambda e: setattr(e, "action", e.action[:-1]), "action"),
    (lambda e: e.state.__setitem__((3, 2), np.nan), "state"),
    (lambda e: e.action.__setitem__((0, 0), np.inf), "action"),
    (lambda e: setattr(e, "reward", e.reward[:, None]), "reward"),
    (lambda e: setattr(e, "success", e.success.astype(np.int64)), "success"),
    (lambda e: e.frames.__setitem__("wrist", e.frames["wrist"].astype(np.float32)), r"frames\['wrist'\]"),
    (lambda e: e.frames.__setitem__("wrist", e.frames["wrist"][:-1]), r"frames\['wrist'\]"),
    (lambda e: e.frames.__setitem__("wrist", e.frames["wrist"][..., 0]), r"frames\['wrist'\]"),
    (lambda e: setattr(e, "source", "human"), "source"),
    (lambda e: setattr(e, "source", "perturbed"), "perturbation"),
    (lambda e: setattr(e, "instruction", ""), "instruction"),
    (lambda e: setattr(e, "task_id", "3"), "task_id"),
    (lambda e: setattr(e, "extra", {"x": object()}), "extra"),
])
def test_episode_validate_errors(mutate, field: str) -> None:
    episode = make_episode(np.random.default_rng(4))
    episode.validate()
    mutate(episode)
    with pytest.raises(ValueError, match=field):
        episode.validate()


def test_episode_basics() -> None:
    episode = make_episode(np.random.default_rng(5), T=9)
    assert len(episode) == 9
    episode.success[:] = False
    assert episode.episode_success is False
    episode.success[4] = True
    assert episode.episode_success is True
