"""Write a dataset the way lerobot 0.4's LeRobotDataset (v3.0) does, without lerobot (its pins clash with ours).

What is mirrored: several episodes per data parquet (one row group each), per-camera mp4s that are
the episodes' own encodings concatenated by stream copy (lerobot's concatenate_video_files) with
from_timestamp / to_timestamp per episode, several episodes per meta/episodes file, LeRobot's LIBERO
feature names and no project columns at all (no instruction, source, success, sha256, next.*).
"""
from __future__ import annotations

import io
import json
from fractions import Fraction
from pathlib import Path
from typing import Any

import av
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from robot_data.dataset import Episode
from robot_data.dataset.layout import tasks_table
from robot_data.dataset.stats import aggregate_stats, lowdim_stats, stats_to_json
from robot_data.dataset.video import encode_video

CAMERAS = {"agentview": "observation.images.image", "wrist": "observation.images.image2"}


def _concat_mp4(parts: list[bytes], path: Path) -> list[float]:
    """Stream-copy the encoded episodes into one mp4, back to back; return each one's start time (s)."""
    starts: list[float] = []
    path.parent.mkdir(parents=True, exist_ok=True)
    with av.open(str(path), mode="w", format="mp4") as out:
        ostream = None
        offset = Fraction(0)
        for data in parts:
            with av.open(io.BytesIO(data), mode="r") as src:
                istream = src.streams.video[0]
                if ostream is None:
                    ostream = out.add_stream_from_template(istream)
                tb = istream.time_base
                assert tb is not None and istream.duration is not None
                starts.append(float(offset))
                shift = int(offset / tb)
                for packet in src.demux(istream):
                    if packet.dts is None:
                        continue  # the demuxer's flush packet
                    packet.pts = None if packet.pts is None else packet.pts + shift
                    packet.dts += shift
                    packet.stream = ostream
                    out.mux(packet)
                offset += istream.duration * tb
    return starts


def _list_array(values: np.ndarray, fixed: bool) -> pa.Array:
    flat = pa.array(values.astype(np.float32).reshape(-1))
    if fixed:
        return pa.FixedSizeListArray.from_arrays(flat, values.shape[1])
    offsets = pa.array(np.arange(0, values.size + 1, values.shape[1], dtype=np.int32))
    return pa.ListArray.from_arrays(offsets, flat)


def write_lerobot_dataset(root: Path, episodes: list[Episode], per_file: int = 2, fps: int = 20,
                          fixed_lists: bool = True, image_dtype: str = "video", cameras: dict[str, str] | None = None,
                          state_key: str = "observation.state") -> None:
    """Write `episodes` at `root` as lerobot would, `per_file` episodes to each data/video/episodes file.
    image_dtype "image" stores PNG frames in the data parquet instead of mp4s (lerobot's image features).
    cameras: view of the episodes -> the camera key to store it under (default LeRobot's LIBERO keys);
    state_key: the state's feature key."""
    cameras = CAMERAS if cameras is None else cameras
    H, W = episodes[0].frames["agentview"].shape[1:3]
    tasks: list[str] = []
    rows: list[dict[str, Any]] = []
    index = 0
    for start in range(0, len(episodes), per_file):
        file_index = start // per_file
        group = episodes[start: start + per_file]
        tables, spans = [], {}
        if image_dtype == "video":
            for view, key in cameras.items():
                parts = []
                for ep in group:
                    buf = root / f".part-{view}.mp4"
                    encode_video(buf, ep.frames[view], fps, "h264", 18)
                    parts.append(buf.read_bytes())
                    buf.unlink()
                rel = f"videos/{key}/chunk-000/file-{file_index:03d}.mp4"
                spans[key] = _concat_mp4(parts, root / rel)
        for k, ep in enumerate(group):
            i, T = start + k, len(ep)
            if ep.instruction not in tasks:
                tasks.append(ep.instruction)
            columns: dict[str, pa.Array] = {
                state_key: _list_array(ep.state, fixed_lists),
                "action": _list_array(ep.action, fixed_lists),
                "timestamp": pa.array((np.arange(T) / fps).astype(np.float32)),
                "frame_index": pa.array(np.arange(T, dtype=np.int64)),
                "episode_index": pa.array(np.full(T, i, dtype=np.int64)),
                "index": pa.array(np.arange(index, index + T, dtype=np.int64)),
                "task_index": pa.array(np.full(T, tasks.index(ep.instruction), dtype=np.int64)),
            }
            if image_dtype == "image":
                for view, key in cameras.items():
                    columns[key] = pa.array([{"bytes": _png(f), "path": None} for f in ep.frames[view]],
                                            pa.struct([("bytes", pa.binary()), ("path", pa.string())]))
            tables.append(pa.table(columns))
            row: dict[str, Any] = {"episode_index": i, "tasks": [ep.instruction], "length": T,
                                   "data/chunk_index": 0, "data/file_index": file_index,
                                   "dataset_from_index": index, "dataset_to_index": index + T,
                                   "meta/episodes/chunk_index": 0, "meta/episodes/file_index": file_index}
            for key, starts in spans.items():
                row.update({f"videos/{key}/chunk_index": 0, f"videos/{key}/file_index": file_index,
                            f"videos/{key}/from_timestamp": starts[k],
                            f"videos/{key}/to_timestamp": starts[k] + T / fps})
            row["stats/action/mean"] = ep.action.astype(np.float64).mean(axis=0).tolist()
            rows.append(row)
            index += T
        data = root / f"data/chunk-000/file-{file_index:03d}.parquet"
        data.parent.mkdir(parents=True, exist_ok=True)
        with pq.ParquetWriter(data, tables[0].schema) as writer:  # one row group per episode, as lerobot
            for table in tables:
                writer.write_table(table)
        meta = root / f"meta/episodes/chunk-000/file-{file_index:03d}.parquet"
        meta.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(pa.Table.from_pylist(rows[start:]), meta)
    pq.write_table(tasks_table(tasks), root / "meta/tasks.parquet")
    stats = aggregate_stats([{state_key: lowdim_stats(ep.state), "action": lowdim_stats(ep.action)}
                             for ep in episodes])
    (root / "meta/stats.json").write_text(json.dumps(stats_to_json(stats)))
    (root / "meta/info.json").write_text(json.dumps(_info(episodes, index, len(tasks), fps, H, W, image_dtype,
                                                                 cameras, state_key)))


def _png(frame: np.ndarray) -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(frame).save(buf, format="PNG")
    return buf.getvalue()


def _info(episodes: list[Episode], frames: int, tasks: int, fps: int, H: int, W: int, image_dtype: str,
          cameras: dict[str, str], state_key: str) -> dict:
    features: dict[str, Any] = {}
    for key in cameras.values():
        features[key] = {"dtype": image_dtype, "shape": [H, W, 3], "names": ["height", "width", "channels"]}
        if image_dtype == "video":
            features[key]["info"] = {"video.height": H, "video.width": W, "video.codec": "h264",
                                     "video.pix_fmt": "yuv420p", "video.is_depth_map": False, "video.fps": fps,
                                     "video.channels": 3, "has_audio": False}
    features[state_key] = {"dtype": "float32", "shape": [8], "names": ["state"]}
    features["action"] = {"dtype": "float32", "shape": [7], "names": ["actions"]}
    for name, dtype in (("timestamp", "float32"), ("frame_index", "int64"), ("episode_index", "int64"),
                        ("index", "int64"), ("task_index", "int64")):
        features[name] = {"dtype": dtype, "shape": [1], "names": None}
    return {"codebase_version": "v3.0", "robot_type": "panda", "total_episodes": len(episodes),
            "total_frames": frames, "total_tasks": tasks, "chunks_size": 1000, "data_files_size_in_mb": 100,
            "video_files_size_in_mb": 200, "fps": fps, "splits": {"train": f"0:{len(episodes)}"},
            "data_path": "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet",
            "video_path": "videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4",
            "features": features}
