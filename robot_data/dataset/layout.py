"""Paths, config and meta files of the LeRobotDataset v3.0 layout, shared by writer and reader.

    meta/info.json                       config, totals, features (commit point of every append)
    meta/seal.sha256                     ours: sha256 of every meta file, sealed (robot_data.dataset.seal)
    meta/stats.json                      dataset-level feature stats
    meta/tasks.parquet                   task strings, task_index = row
    meta/episodes/chunk-CCC/file-FFF.parquet   one row per episode (indices, checksums, our metadata)
    data/chunk-CCC/file-FFF.parquet      frame rows
    videos/observation.images.<view>/chunk-CCC/file-FFF.mp4

By default every episode has files of its own: chunk CCC = index // chunks_size, file FFF = index %
chunks_size. A packing writer (EpisodeWriter(pack=True)) puts many episodes in each file, as lerobot does,
up to data_files_size_in_mb / video_files_size_in_mb; each episode's meta/episodes row says where it lives.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from robot_data.dataset.episode import VIEW_NAME_RE
from robot_data.dataset.errors import DatasetCorruptError
from robot_data.dataset.video import VIDEO_CODECS, check_video_codec

CODEBASE_VERSION = "v3.0"
INFO_PATH = "meta/info.json"
STATS_PATH = "meta/stats.json"
TASKS_PATH = "meta/tasks.parquet"
DATA_PATH = "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"
VIDEO_PATH = "videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4"
EPISODES_PATH = "meta/episodes/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"


def is_dataset(path: str | Path) -> bool:
    """Whether `path` holds a dataset in this layout: its commit point, meta/info.json, is there."""
    return bool(str(path)) and (Path(path) / INFO_PATH).is_file()


# size targets of multi-episode files (info.json); a writer that packs episodes keeps its files under them
DATA_FILES_SIZE_IN_MB = 100
VIDEO_FILES_SIZE_IN_MB = 500

_LIBERO_STATE_NAMES = ("eef_pos_x", "eef_pos_y", "eef_pos_z", "eef_axis_angle_x", "eef_axis_angle_y",
                       "eef_axis_angle_z", "gripper_qpos_0", "gripper_qpos_1")
_LIBERO_ACTION_NAMES = ("x", "y", "z", "roll", "pitch", "yaw", "gripper")


@dataclass(frozen=True)
class DatasetConfig:
    """Dataset-wide settings, stored in (and on reopen read back from) meta/info.json.

    image_size is (H, W). video_codec "libx264rgb" with crf 0 is lossless; "h264" is lossy yuv420p
    (crf 0-51, needs even H and W). chunks_size files share one chunk-NNN directory.
    camera_keys: view -> feature key where it is not observation.images.<view>, e.g. LeRobot's LIBERO
    keys {"agentview": "observation.images.image", "wrist": "observation.images.image2"} (LIBERO_KEYS).
    data_files_size_in_mb / video_files_size_in_mb: how large a packing writer lets a file grow.
    """

    fps: int = 20
    views: tuple[str, ...] = ("agentview", "wrist")
    image_size: tuple[int, int] = (64, 64)
    state_dim: int = 8
    action_dim: int = 7
    video_codec: str = "libx264rgb"
    crf: int = 0
    robot_type: str = "panda"
    chunks_size: int = 1000
    camera_keys: dict[str, str] = field(default_factory=dict)
    data_files_size_in_mb: int = DATA_FILES_SIZE_IN_MB
    video_files_size_in_mb: int = VIDEO_FILES_SIZE_IN_MB

    def __post_init__(self) -> None:
        # normalise lists (e.g. from JSON/YAML) so equality checks against info.json work
        object.__setattr__(self, "views", tuple(self.views))
        # keys that are the default anyway are dropped, so a config equals the one rebuilt from info.json
        object.__setattr__(self, "camera_keys", {v: k for v, k in dict(self.camera_keys).items() if k != video_key(v)})
        object.__setattr__(self, "image_size", tuple(int(x) for x in self.image_size))
        if not self.fps > 0:
            raise ValueError(f"fps: expected > 0, got {self.fps!r}")
        if len(set(self.views)) != len(self.views) or not all(VIEW_NAME_RE.match(v) for v in self.views):
            raise ValueError(f"views: expected distinct [A-Za-z0-9_] names, got {self.views!r}")
        if len(self.image_size) != 2:
            raise ValueError(f"image_size: expected (H, W), got {self.image_size!r}")
        unknown = [v for v in self.camera_keys if v not in self.views]
        keys = [self.camera_key(v) for v in self.views]
        if unknown or len(set(keys)) != len(keys) or not all(k.startswith("observation.images.") for k in keys):
            raise ValueError(f"camera_keys: expected distinct observation.images.* keys for views {self.views}, "
                             f"got {self.camera_keys!r}")
        for name in ("state_dim", "action_dim", "chunks_size", "data_files_size_in_mb", "video_files_size_in_mb"):
            if int(getattr(self, name)) < 1:
                raise ValueError(f"{name}: expected >= 1, got {getattr(self, name)!r}")
        check_video_codec(self.video_codec, *self.image_size, self.crf)

    def camera_key(self, view: str) -> str:
        """Feature key / videos/ subdirectory of a camera view."""
        return self.camera_keys.get(view) or video_key(view)


# LeRobot's LIBERO datasets name the cameras this way (lerobot's LIBERO env and policies expect it)
LIBERO_KEYS = {"agentview": "observation.images.image", "wrist": "observation.images.image2"}


def video_key(view: str) -> str:
    """Default feature key / videos/ subdirectory of a camera view."""
    return f"observation.images.{view}"


def episode_file_path(config: DatasetConfig, kind: str, index: int, view: str | None = None) -> str:
    """Relative path of episode `index`'s file; kind is "data", "video" (needs view) or "episodes"."""
    chunk_index, file_index = divmod(index, config.chunks_size)
    if kind == "data":
        return DATA_PATH.format(chunk_index=chunk_index, file_index=file_index)
    if kind == "episodes":
        return EPISODES_PATH.format(chunk_index=chunk_index, file_index=file_index)
    if kind == "video" and view is not None:
        return VIDEO_PATH.format(video_key=config.camera_key(view), chunk_index=chunk_index, file_index=file_index)
    raise ValueError(f"kind: expected 'data', 'episodes' or 'video' with a view, got {kind!r} (view={view!r})")


def build_features(config: DatasetConfig) -> dict[str, dict[str, Any]]:
    """The info.json "features" block (lerobot's schema: dtype, shape, names, video info)."""
    height, width = config.image_size
    encoder_pix_fmt = VIDEO_CODECS[config.video_codec]
    features: dict[str, dict[str, Any]] = {}
    for view in config.views:
        features[config.camera_key(view)] = {
            "dtype": "video",
            "shape": [height, width, 3],
            "names": ["height", "width", "channels"],
            "info": {
                "video.height": height,
                "video.width": width,
                "video.codec": "h264",  # the bitstream format, which is what decoders need
                "video.pix_fmt": encoder_pix_fmt[2],
                "video.is_depth_map": False,
                "video.fps": float(config.fps),
                "video.channels": 3,
                "has_audio": False,
                # not lerobot keys: let a reopening writer encode new episodes the same way
                "video.encoder": config.video_codec,
                "video.crf": int(config.crf),
            },
        }
        if view in config.camera_keys:  # the key does not say the view: record it for our reader
            features[config.camera_key(view)]["info"]["video.view"] = view
    state_names = _LIBERO_STATE_NAMES if config.state_dim == 8 else [f"state_{i}" for i in range(config.state_dim)]
    action_names = _LIBERO_ACTION_NAMES if config.action_dim == 7 else [f"action_{i}" for i in range(config.action_dim)]
    features["observation.state"] = {"dtype": "float32", "shape": [config.state_dim], "names": list(state_names)}
    features["action"] = {"dtype": "float32", "shape": [config.action_dim], "names": list(action_names)}
    for name, dtype in (("timestamp", "float32"), ("frame_index", "int64"), ("episode_index", "int64"),
                        ("index", "int64"), ("task_index", "int64"), ("next.reward", "float32"),
                        ("next.success", "bool"), ("next.done", "bool")):
        features[name] = {"dtype": dtype, "shape": [1], "names": None}
    return features


def build_info(config: DatasetConfig, total_episodes: int, total_frames: int, total_tasks: int) -> dict[str, Any]:
    """Contents of meta/info.json for the given totals."""
    return {
        "codebase_version": CODEBASE_VERSION,
        "robot_type": config.robot_type,
        "total_episodes": total_episodes,
        "total_frames": total_frames,
        "total_tasks": total_tasks,
        "chunks_size": config.chunks_size,
        "data_files_size_in_mb": config.data_files_size_in_mb,
        "video_files_size_in_mb": config.video_files_size_in_mb,
        "fps": config.fps,
        "splits": {"train": f"0:{total_episodes}"},
        "data_path": DATA_PATH,
        "video_path": VIDEO_PATH if config.views else None,
        "features": build_features(config),
    }


def config_from_info(info: dict[str, Any]) -> DatasetConfig:
    """Rebuild the DatasetConfig a dataset was written with from its info.json."""
    features = info["features"]
    videos = {k: v for k, v in features.items() if v.get("dtype") == "video"}
    sizes = {tuple(v["shape"][:2]) for v in videos.values()}
    if len(sizes) > 1:
        raise ValueError(f"views have different image sizes {sorted(sizes)}; expected one (H, W)")
    first: dict[str, Any] = next(iter(videos.values()), {"shape": DatasetConfig.image_size, "info": {}})
    video_info = first.get("info") or {}
    views = {k: str((v.get("info") or {}).get("video.view") or k[len("observation.images."):])
             for k, v in videos.items()}
    try:
        return DatasetConfig(
            fps=info["fps"],
            views=tuple(views.values()),
            camera_keys={view: key for key, view in views.items()},
            data_files_size_in_mb=info.get("data_files_size_in_mb", DATA_FILES_SIZE_IN_MB),
            video_files_size_in_mb=info.get("video_files_size_in_mb", VIDEO_FILES_SIZE_IN_MB),
            image_size=tuple(first["shape"][:2]),
            state_dim=features["observation.state"]["shape"][0],
            action_dim=features["action"]["shape"][0],
            video_codec=video_info.get("video.encoder", DatasetConfig.video_codec),
            crf=video_info.get("video.crf", DatasetConfig.crf),
            robot_type=info.get("robot_type") or DatasetConfig.robot_type,
            chunks_size=info["chunks_size"],
        )
    except KeyError as err:
        raise ValueError(f"missing {err} needed to rebuild the dataset config") from err


# the info.json fields every LeRobot v3.0 dataset has, and a reader or writer uses
_INFO_COUNTS = ("total_episodes", "total_frames", "total_tasks", "chunks_size", "fps")
_CAMERA_DTYPES = ("video", "image")


def written_here(info: dict[str, Any]) -> bool:
    """Whether an info.json was written by EpisodeWriter (its cameras record "video.encoder"; a dataset with
    no cameras, by its next.success column), rather than by lerobot or another tool."""
    cams = [f for f in info["features"].values() if f.get("dtype") in _CAMERA_DTYPES]
    if cams:
        return any("video.encoder" in (f.get("info") or {}) for f in cams)
    return "next.success" in info["features"] and "observation.state" in info["features"]


_PATH_TEMPLATES: dict[str, dict[str, Any]] = {"data_path": {"chunk_index": 0, "file_index": 0},
                                              "video_path": {"video_key": "v", "chunk_index": 0, "file_index": 0}}


def read_info(path: Path, supported: str, any_v3: bool = False,
              data: bytes | None = None) -> tuple[dict[str, Any], DatasetConfig | None]:
    """(info, config) of meta/info.json at `path`, checked field by field; one DatasetCorruptError naming
    the file and the field for bad JSON, a missing field or a wrong type, instead of the KeyError,
    JSONDecodeError or AttributeError that reading it blindly gives. ValueError (with `supported`, what the
    caller accepts) for another codebase_version (any "v3.*" with any_v3, else "v3.0" only).

    What is checked is what every LeRobot v3.0 dataset has (the counts, features with a dtype and a list
    shape, camera shapes, state/action vectors where present). config is the DatasetConfig the dataset was
    written with when EpisodeWriter wrote it (`written_here`), else None: a dataset written by lerobot has
    none of our encoder info, and its cameras, state and action are named by ReaderConfig instead. `data`:
    the file's bytes, already read (and checked against the seal: robot_data.dataset.seal), else read from `path`."""
    info = read_json(path) if data is None else parse_json(data, path)
    if not isinstance(info, dict):
        raise DatasetCorruptError(f"{path}: expected a JSON object, got {type(info).__name__}")
    version = info.get("codebase_version")
    if not (version == CODEBASE_VERSION or (any_v3 and isinstance(version, str) and version.startswith("v3."))):
        raise ValueError(f"{path}: codebase_version {version!r} is not supported; {supported}")
    for name in _INFO_COUNTS:
        if not (isinstance(info.get(name), int) and not isinstance(info[name], bool) and info[name] >= 0):
            raise DatasetCorruptError(f"{path}: {name} must be an integer >= 0, got {info.get(name, '(missing)')!r}")
    for name, fields in _PATH_TEMPLATES.items():  # a damaged template would fail later as a bare KeyError
        template = info.get(name)
        if template is None:
            continue
        try:
            template.format(**fields)
        except (KeyError, IndexError, ValueError, AttributeError):
            raise DatasetCorruptError(f"{path}: {name} {template!r} is not a path template with the fields "
                                      f"{sorted(fields)}") from None
    features = info.get("features")
    if not isinstance(features, dict) or not all(isinstance(v, dict) for v in features.values()):
        raise DatasetCorruptError(f"{path}: features must be an object of objects, got "
                                  f"{'(missing)' if features is None else type(features).__name__}")
    for key, feature in features.items():
        dtype, shape = feature.get("dtype"), feature.get("shape")
        camera = dtype in _CAMERA_DTYPES
        if not (isinstance(shape, list) and all(isinstance(n, int) and not isinstance(n, bool) for n in shape)):
            raise DatasetCorruptError(f"{path}: features.{key}.shape must be a list of positive integers, "
                                      f"got {shape!r}")
        if not isinstance(dtype, str):
            raise DatasetCorruptError(f"{path}: features.{key}.dtype must be a string, got {dtype!r}")
        if key in ("observation.state", "action") or camera:
            if not (len(shape) >= (2 if camera else 1) and all(n > 0 for n in shape)):
                raise DatasetCorruptError(f"{path}: features.{key}.shape must be a list of positive integers, "
                                          f"got {shape!r}")
        if feature.get("info") is not None and not isinstance(feature["info"], dict):
            raise DatasetCorruptError(f"{path}: features.{key}.info must be an object")
    if not written_here(info):
        return info, None
    try:
        return info, config_from_info(info)
    except (ValueError, KeyError, TypeError, AttributeError) as err:  # a missing feature, or values refused
        raise DatasetCorruptError(f"{path}: {err}") from None


def read_json(path: Path) -> Any:
    """The JSON document at `path`; DatasetCorruptError naming the file when it does not parse."""
    return parse_json(path.read_bytes(), path)


def parse_json(data: bytes, path: Path | str) -> Any:
    """The JSON document in `data` (the bytes of `path`); DatasetCorruptError naming the file when it does not parse."""
    try:
        return json.loads(data.decode("utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise DatasetCorruptError(f"{path}: not valid JSON ({err})") from None


def tasks_table(tasks: list[str]) -> pa.Table:
    """meta/tasks.parquet: task strings (row i has task_index i).

    lerobot reads this with pandas, expecting the task string as the index; pandas is not a
    dependency here, so the pandas schema metadata that pyarrow would have written is added by hand.
    """
    table = pa.table({"task_index": pa.array(range(len(tasks)), pa.int64()), "task": pa.array(tasks, pa.string())})
    pandas_meta = {
        "index_columns": ["task"],
        "column_indexes": [{"name": None, "field_name": None, "pandas_type": "unicode", "numpy_type": "object",
                            "metadata": {"encoding": "UTF-8"}}],
        "columns": [
            {"name": "task_index", "field_name": "task_index", "pandas_type": "int64", "numpy_type": "int64",
             "metadata": None},
            {"name": "task", "field_name": "task", "pandas_type": "unicode", "numpy_type": "object", "metadata": None},
        ],
        "creator": {"library": "pyarrow", "version": pa.__version__},
        "pandas_version": "2.2.3",
    }
    return table.replace_schema_metadata({b"pandas": json.dumps(pandas_meta).encode()})


def read_tasks(path: Path, data: bytes | None = None) -> list[str]:
    """Task strings ordered by task_index. The parquet page checksums are verified where written (EpisodeWriter
    writes them), and a file that does not read is one DatasetCorruptError naming it.

    The task strings are pandas' index, in a column named by the file's pandas metadata: "task" where the
    index was named (our writer), "__index_level_0__" where it was not (lerobot 0.4's own datasets).
    `data`: the file's bytes, already read (and checked against the seal), else read from `path`."""
    try:
        table = pq.read_table(path if data is None else pa.BufferReader(data), page_checksum_verification=True)
        column = _task_column(table.schema)
        order = np.argsort(table.column("task_index").to_numpy())
        tasks = table.column(column).to_pylist()
    except FileNotFoundError:
        raise
    except (OSError, pa.ArrowException, KeyError, ValueError) as err:
        raise DatasetCorruptError(f"{path}: unreadable task table ({err})") from None
    return [tasks[i] for i in order]


def _task_column(schema: pa.Schema) -> str:
    """The column holding the task strings: "task", else the pandas index column the metadata names."""
    if "task" in schema.names:
        return "task"
    pandas_meta = json.loads((schema.metadata or {}).get(b"pandas", b"{}"))
    index = [c for c in pandas_meta.get("index_columns", []) if isinstance(c, str) and c in schema.names]
    if index:
        return index[0]
    raise KeyError(f"no task column: expected 'task' or a pandas index column, got {schema.names}")
