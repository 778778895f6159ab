"""Reading LeRobot v3.0 datasets as lerobot writes them: many episodes per file, LIBERO camera keys, no
project columns (tests/robot_data/lerobot_layout.py writes them the way lerobot 0.4 does)."""
from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pytest

from robot_data.dataset import DatasetCorruptError, Episode, EpisodeDataset
from robot_data.dataset.features import ReaderConfig
from tests.robot_data.lerobot_layout import write_lerobot_dataset
from tests.robot_data.test_dataset import make_episode

LENGTHS = (12, 9, 15, 7, 10)


def episodes() -> list[Episode]:
    rng = np.random.default_rng(0)
    return [make_episode(rng, T=T, noise=False, instruction=f"task {T % 2}") for T in LENGTHS]


@pytest.fixture(scope="module")
def foreign(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("lerobot") / "libero_demo"
    write_lerobot_dataset(root, episodes(), per_file=2)  # files hold 2, 2 and 1 episodes
    return root


def nearest_frame(frames: np.ndarray, image: np.ndarray) -> int:
    return int(np.argmin([np.abs(f.astype(int) - image).mean() for f in frames]))


def test_multi_episode_files_read_by_their_rows(foreign: Path) -> None:
    ds = EpisodeDataset(foreign)
    assert len(ds) == 5 and ds.views == ("agentview", "wrist")  # LeRobot's LIBERO keys map to our views
    assert ds.features.cameras == {"agentview": "observation.images.image", "wrist": "observation.images.image2"}
    for i, want in enumerate(episodes()):
        got = ds[i]
        np.testing.assert_array_equal(got.state, want.state)
        np.testing.assert_array_equal(got.action, want.action)
        for view in ds.views:  # lossy h264, but every frame is its own one: nearest among the episode's
            assert got.frames[view].shape == want.frames[view].shape
            assert [nearest_frame(want.frames[view], f) for f in got.frames[view]] == list(range(len(want)))
        s, a = ds.arrays(i)
        np.testing.assert_array_equal(s, want.state)
        np.testing.assert_array_equal(a, want.action)


def test_missing_project_columns_get_the_configured_stand_ins(foreign: Path) -> None:
    ds = EpisodeDataset(foreign, verify=False)
    meta = ds.meta
    assert [m.instruction for m in meta] == [f"task {T % 2}" for T in LENGTHS]
    assert [m.task_id for m in meta] == [ds.tasks.index(m.instruction) for m in meta]
    assert {m.source for m in meta} == {"expert"} and all(m.success for m in meta)
    assert {m.suite for m in meta} == {"libero_demo"}  # the folder's name
    ep = ds[2]
    assert ep.success.tolist() == [False] * 14 + [True] and ep.reward[-1] == 1.0
    assert ds.select(source="expert", success=True) == [0, 1, 2, 3, 4]
    assert ds.stats["observation.state"]["mean"].shape == (8,)
    cfg = ReaderConfig(source="policy", succeed=False, suite="libero_spatial")
    other = EpisodeDataset(foreign, verify=False, features=cfg)
    assert {(m.source, m.success, m.suite) for m in other.meta} == {("policy", False, "libero_spatial")}
    assert not other[0].success.any()


def test_cameras_state_and_action_mapped_by_config(foreign: Path) -> None:
    cfg = ReaderConfig(cameras={"front": "observation.images.image"})
    ds = EpisodeDataset(foreign, verify=False, features=cfg)
    assert ds.views == ("front",)
    np.testing.assert_array_equal(ds.load_view(1, "front"), EpisodeDataset(foreign).load_view(1, "agentview"))
    with pytest.raises(ValueError, match=r"ReaderConfig.cameras: \{'x': 'observation.images.cam'\} not among"):
        EpisodeDataset(foreign, features=ReaderConfig(cameras={"x": "observation.images.cam"}))
    with pytest.raises(ValueError, match=r"no feature 'joint_pos' for the state"):
        EpisodeDataset(foreign, features=ReaderConfig(state="joint_pos"))


def test_foreign_files_are_reported_unchecked_once(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    root = tmp_path / "ds"
    write_lerobot_dataset(root, episodes()[:2])
    with caplog.at_level(logging.WARNING, logger="robot_data.dataset.reader"):
        EpisodeDataset(root)
        EpisodeDataset(root, verify=False)
    warnings = [r for r in caplog.records if "no sha256 recorded" in r.getMessage()]
    assert len(warnings) == 1 and not EpisodeDataset(root, verify=False).checksummed


def test_variable_lists_and_image_features(tmp_path: Path) -> None:
    want = episodes()[:3]
    for name, kwargs in (("lists", {"fixed_lists": False, "per_file": 3}), ("images", {"image_dtype": "image"})):
        root = tmp_path / name
        write_lerobot_dataset(root, want, **kwargs)
        ds = EpisodeDataset(root)
        np.testing.assert_array_equal(ds.arrays(2)[0], want[2].state)
        if name == "images":  # PNG frames in the data parquet: lossless
            np.testing.assert_array_equal(ds[1].frames["wrist"], want[1].frames["wrist"])


def test_a_wrong_from_timestamp_names_the_file(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    root = tmp_path / "ds"
    write_lerobot_dataset(root, episodes()[:2])
    path = root / "meta/episodes/chunk-000/file-000.parquet"
    table = pq.read_table(path)
    column = "videos/observation.images.image2/from_timestamp"
    table = table.set_column(table.schema.get_field_index(column), column, pa.array([0.0, 0.61]))
    pq.write_table(table, path)
    with pytest.raises(DatasetCorruptError, match=r"episode 1: videos/observation.images.image2/chunk-000/"
                                                  r"file-000.mp4 is unreadable: .*0.6100 s"):
        EpisodeDataset(root, verify=False)[1]


def test_clips_bc_and_imagination_starts_load_from_it(foreign: Path) -> None:
    from imagination.episodes import load_start_episodes
    from policies.bc import BCConfig
    from policies.bc import load_episodes as bc_episodes
    from policies.vla import VLAConfig
    from world_models.clips import load_episodes, make_clip

    views = ["agentview", "wrist"]
    clips = load_episodes(foreign, views)
    assert len(clips) == 5 and clips[2].frames.shape == (15, 32, 32, 6)
    assert make_clip(clips[2], 5, 4, 8)["target"].shape == (8, 32, 32, 6)
    demos, stats = bc_episodes(BCConfig(data_dir=str(foreign), policy=VLAConfig(views=views)))
    assert len(demos) == 5 and stats["mean"].shape == (8,)
    starts = load_start_episodes(str(foreign), views, [0, 3])
    assert starts[1].frames.shape == (7, 2, 32, 32, 3) and starts[1].instruction == "task 1"


def test_frames_resized_on_read_for_every_stage(foreign: Path) -> None:
    from imagination.episodes import load_start_episodes
    from world_models.clips import load_episodes

    small = ReaderConfig(image_size=16)
    ds, full = EpisodeDataset(foreign, features=small), EpisodeDataset(foreign)
    got, stored = ds.load_view(2, "agentview"), full.load_view(2, "agentview")
    assert got.shape == (15, 16, 16, 3) and ds.config.image_size == (16, 16) and full.config.image_size == (32, 32)
    # down by 2: each pixel is the mean of its 2 x 2 block
    block = stored.reshape(15, 16, 2, 16, 2, 3).astype(float).mean((2, 4))
    assert np.abs(got.astype(float) - block).max() <= 1.0
    assert EpisodeDataset(foreign, features=ReaderConfig(image_size=48)).load_view(0, "wrist").shape[1:] == (48, 48, 3)
    assert load_episodes(foreign, ["agentview"], features=small)[0].frames.shape[1:] == (16, 16, 3)
    assert load_start_episodes(str(foreign), ["agentview"], [1], features=small)[0].frames.shape[1:] == (1, 16, 16, 3)
    with pytest.raises(ValueError, match="image_size"):
        ReaderConfig(image_size=-1)


def test_foreign_info_json_checked_for_what_every_v3_dataset_has(tmp_path: Path) -> None:
    """read_info checks a foreign info.json's common fields (one error naming the file) but builds no config
    of ours from it; EpisodeWriter will not append to it."""
    import json

    from robot_data.dataset import EpisodeWriter
    from robot_data.dataset.layout import read_info

    root = tmp_path / "ds"
    write_lerobot_dataset(root, episodes()[:2])
    info_path = root / "meta/info.json"
    info, config = read_info(info_path, "v3.0")
    assert config is None and info["total_episodes"] == 2
    with pytest.raises(ValueError, match="not written by EpisodeWriter"):
        EpisodeWriter(root)
    good = json.loads(info_path.read_text())
    for damage, field in (({"total_frames": None}, "total_frames must be an integer"),
                          ({"features": dict(good["features"], action={"dtype": "float32", "shape": "7"})},
                           "features.action.shape"),
                          ({"features": dict(good["features"], **{"observation.images.image": {
                              "dtype": "video", "shape": [32, 32, 3], "info": "h264"}})},
                           "features.observation.images.image.info must be an object")):
        info_path.write_text(json.dumps(dict(good, **damage)))
        with pytest.raises(DatasetCorruptError) as err:
            EpisodeDataset(root)
        assert str(info_path) in str(err.value) and field in str(err.value)


def test_lerobot_task_table_and_stats_order(tmp_path: Path) -> None:
    """What real lerobot 0.4.4 writes (tests/robot_data/test_lerobot_compat.py): the task strings as an unnamed
    pandas index, i.e. a column "__index_level_0__" that the pandas metadata names, and stats.json features
    in an order of its own, which our writer must still merge when it appends."""
    import json

    import pyarrow as pa
    import pyarrow.parquet as pq

    from robot_data.dataset.layout import read_tasks
    from robot_data.dataset.stats import aggregate_stats, lowdim_stats

    table = pa.table({"task_index": pa.array([1, 0], pa.int64()), "__index_level_0__": ["second", "first"]})
    pandas_meta = {"index_columns": ["__index_level_0__"], "columns": []}
    pq.write_table(table.replace_schema_metadata({b"pandas": json.dumps(pandas_meta).encode()}),
                   tmp_path / "tasks.parquet")
    assert read_tasks(tmp_path / "tasks.parquet") == ["first", "second"]
    pq.write_table(pa.table({"task_index": [0], "name": ["x"]}), tmp_path / "bad.parquet")
    with pytest.raises(DatasetCorruptError, match="no task column"):
        read_tasks(tmp_path / "bad.parquet")

    a, b = lowdim_stats(np.arange(4.0)), lowdim_stats(np.arange(2.0))
    merged = aggregate_stats([{"x": a, "y": b}, {"y": b, "x": a}])
    assert merged["x"]["count"].tolist() == [8] and merged["y"]["count"].tolist() == [4]
    with pytest.raises(ValueError, match="differ"):
        aggregate_stats([{"x": a}, {"y": b}])
