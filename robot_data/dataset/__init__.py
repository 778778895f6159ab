"""Episode dataset on disk, in the LeRobotDataset v3.0 layout (readable by lerobot).

    meta/info.json              codebase_version "v3.0", fps, totals, features; the commit point
    meta/seal.sha256            ours: sha256 of each meta file, checked on open (robot_data.dataset.seal)
    meta/stats.json             per-feature min/max/mean/std/count/q01..q99 over all frames
    meta/tasks.parquet          task strings ("task") with their "task_index"
    meta/episodes/chunk-CCC/file-FFF.parquet
                                one row per episode: length, global index range, file locations,
                                per-episode stats, sha256 of its files, and our metadata (instruction,
                                suite, task_id, source, perturbation, seed, init_state_id, success,
                                extra_json)
    data/chunk-CCC/file-FFF.parquet
                                frame rows: timestamp, frame_index, episode_index, index, task_index,
                                observation.state [S], action [A], next.reward, next.success, next.done
    videos/observation.images.<view>/chunk-CCC/file-FFF.mp4

By default each episode has its own data, video and episodes files (CCC = index // chunks_size,
FFF = index % chunks_size), so appends never rewrite old files; EpisodeWriter(pack=True) puts many
episodes in each file as lerobot does (robot_data.dataset.pack), still writing every committed file once.
The reader finds episodes through their meta/episodes rows, so it also reads lerobot's own datasets;
ReaderConfig (robot_data.dataset.features) maps their cameras, state and action onto ours.
`EpisodeWriter.append` writes them atomically and then rewrites meta/info.json, so an episode exists iff its
index < total_episodes.
Videos are lossless H.264 (libx264rgb, QP 0) by default; `video_codec="h264"` gives small lossy files.

    with EpisodeWriter(root, DatasetConfig(views=("agentview", "wrist"))) as w:
        w.append(episode)
    ds = EpisodeDataset(root)          # verify=True: checksums of every file up front
    ds = EpisodeDataset(root, verify=False)   # fast open; each file is still checked against its
                                              # recorded sha256 when first decoded (robot_data.dataset.integrity)
    ep = ds[ds.select(source="expert", success=True)[0]]
    metas = select_meta(ds.meta, task_id=[0, 3])   # EpisodeMeta rows: m.task_id, m.extra, m.as_dict()
"""
from robot_data.dataset.episode import SOURCES, Episode
from robot_data.dataset.features import ReaderConfig
from robot_data.dataset.layout import LIBERO_KEYS, DatasetConfig, is_dataset
from robot_data.dataset.meta import EpisodeMeta, select_meta
from robot_data.dataset.reader import DatasetCorruptError, EpisodeDataset
from robot_data.dataset.stats import aggregate_stats
from robot_data.dataset.video import VIDEO_CODECS, decode_video, encode_preview, encode_video
from robot_data.dataset.writer import EpisodeWriter

__all__ = [
    "SOURCES",
    "VIDEO_CODECS",
    "DatasetConfig",
    "DatasetCorruptError",
    "Episode",
    "EpisodeDataset",
    "EpisodeMeta",
    "EpisodeWriter",
    "LIBERO_KEYS",
    "ReaderConfig",
    "aggregate_stats",
    "decode_video",
    "encode_preview",
    "encode_video",
    "is_dataset",
    "select_meta",
]
