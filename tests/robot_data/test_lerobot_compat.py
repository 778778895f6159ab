"""Datasets both ways with the real lerobot (0.4.x, in its own venv: `make lerobot-venv`).

* Ours -> lerobot: a dataset written by EpisodeWriter (per-episode files and lossless video; packed
  files, LeRobot's LIBERO camera keys and browser-playable h264) is opened by lerobot's LeRobotDataset
  from its local root, decoding with torchcodec (lerobot's default) or PyAV; every frame's pixels,
  state, action, task and indices must be what we wrote, and lerobot's own sampling (a DataLoader
  batch, delta_timestamps action chunks) must work on it.
* Both ways: lerobot records an episode into one of our datasets, our writer appends after it, and
  each side reads all of them.
* Lerobot -> ours: a dataset written through lerobot's API (create, add_frame, save_episode, finalize;
  its default AV1 video) is read by EpisodeDataset and trains our world model for a few steps.

lerobot pins torch < 2.11 and av < 16, which our venv cannot take, so its side runs in a subprocess
(tests/interop.py). Skipped, naming the make target, when that venv is not built; CI builds it.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
import torch

from robot_data.dataset import LIBERO_KEYS, DatasetConfig, Episode, EpisodeDataset, EpisodeWriter
from tests.interop import require_venv, run_in_venv
from tests.robot_data.test_dataset import smooth_frames

pytestmark = pytest.mark.slow  # each test starts lerobot (torch, datasets) in a subprocess: 10-30 s

SIZE = 32
FPS = 10
LENGTHS = (9, 12, 7)
TASKS = ("put the bowl on the plate", "open the drawer", "put the bowl on the plate")

# Opens argv[1] with lerobot's video backend argv[3] ("" = its default: torchcodec, installed with FFmpeg's
# libraries by `make lerobot-venv`), saves every frame's images (uint8 HWC), state and action to argv[2]
# (.npz) and prints what lerobot made of the rest as JSON.
READ_SCRIPT = """
import json, sys
import numpy as np, torch
from lerobot.datasets.lerobot_dataset import LeRobotDataset

root, out, backend = sys.argv[1], sys.argv[2], sys.argv[3] or None
ds = LeRobotDataset("local/ours", root=root, video_backend=backend)
meta = ds.meta
keys = list(meta.camera_keys)
images = {k: [] for k in keys}
states, actions, rows = [], [], []
for i in range(len(ds)):
    item = ds[i]
    for k in keys:
        images[k].append((item[k].permute(1, 2, 0).numpy() * 255).round().astype(np.uint8))
    states.append(item["observation.state"].numpy())
    actions.append(item["action"].numpy())
    rows.append([int(item[c]) for c in ("episode_index", "frame_index", "index", "task_index")]
                + [float(item["timestamp"]), item["task"]])
first = ds[0][keys[0]]
batch = next(iter(torch.utils.data.DataLoader(ds, batch_size=4, shuffle=False)))
chunked = LeRobotDataset("local/ours", root=root, video_backend=backend,
                         delta_timestamps={"action": [t / ds.fps for t in range(4)]})
last = chunked[meta.episodes[0]["dataset_to_index"] - 1]  # an episode's last frame: the chunk runs past it
np.savez(out, states=np.stack(states), actions=np.stack(actions),
         **{"img:" + k: np.stack(v) for k, v in images.items()})
print(json.dumps({
    "episodes": ds.num_episodes, "frames": ds.num_frames, "fps": ds.fps, "cameras": keys, "backend": ds.video_backend,
    "tasks": {str(t): int(r["task_index"]) for t, r in meta.tasks.iterrows()},
    "rows": rows, "image": [str(first.dtype), list(first.shape)],
    "batch": [list(batch[keys[0]].shape), list(batch["action"].shape), list(batch["task"])],
    "chunk": [list(last["action"].shape), last["action_is_pad"].tolist()],
    "stats": sorted(meta.stats), "lengths": [int(e["length"]) for e in meta.episodes],
}))
"""

# Writes the episodes of argv[2] (.npz) with lerobot's recording API into argv[1]; prints its video info.
WRITE_SCRIPT = """
import json, sys
import numpy as np
from lerobot.datasets.lerobot_dataset import LeRobotDataset

root, src = sys.argv[1], np.load(sys.argv[2])
n, size, fps = int(src["n"]), int(src["size"]), int(src["fps"])
cams = {"agentview": "observation.images.image", "wrist": "observation.images.image2"}
features = {k: {"dtype": "video", "shape": (size, size, 3), "names": ["height", "width", "channels"]}
            for k in cams.values()}
features["observation.state"] = {"dtype": "float32", "shape": (8,), "names": None}
features["action"] = {"dtype": "float32", "shape": (7,), "names": None}
ds = LeRobotDataset.create("local/theirs", fps=fps, features=features, root=root, robot_type="panda")
for e in range(n):
    state, action = src[f"state{e}"], src[f"action{e}"]
    for t in range(len(state)):
        frame = {k: src[f"{view}{e}"][t] for view, k in cams.items()}
        ds.add_frame({**frame, "observation.state": state[t], "action": action[t], "task": str(src[f"task{e}"])})
    ds.save_episode()
ds.finalize()
print(json.dumps(ds.meta.info["features"]["observation.images.image"]["info"]))
"""


# Appends the episode of argv[2] (.npz) to the dataset at argv[1] with lerobot's recording API, as a user
# extending one of our datasets with `lerobot-record --resume` would.
APPEND_SCRIPT = """
import json, sys
import numpy as np
from lerobot.datasets.lerobot_dataset import LeRobotDataset

root, src = sys.argv[1], np.load(sys.argv[2])
ds = LeRobotDataset("local/ours", root=root)
cams = {"agentview": "observation.images.image", "wrist": "observation.images.image2"}
for t in range(len(src["state"])):
    frame = {k: src[view][t] for view, k in cams.items()}
    frame.update({"observation.state": src["state"][t], "action": src["action"][t], "task": str(src["task"]),
                  "next.reward": src["reward"][t:t + 1], "next.success": src["success"][t:t + 1],
                  "next.done": src["success"][t:t + 1]})
    ds.add_frame(frame)
ds.save_episode()
ds.finalize()
print(json.dumps({"episodes": ds.meta.total_episodes}))
"""


def episodes() -> list[Episode]:
    rng = np.random.default_rng(0)
    out = []
    for i, (T, task) in enumerate(zip(LENGTHS, TASKS)):
        out.append(Episode(
            frames={v: smooth_frames(rng, T, SIZE, SIZE) for v in ("agentview", "wrist")},
            state=rng.standard_normal((T, 8)).astype(np.float32), action=rng.uniform(-1, 1, (T, 7)).astype(np.float32),
            reward=np.zeros(T, np.float32), success=np.arange(T) == T - 1, instruction=task, suite="libero_spatial",
            task_id=i, source="expert"))
    return out


@pytest.fixture(scope="module")
def lerobot_python() -> Path:
    return require_venv("lerobot")


@pytest.mark.parametrize("variant, backend", [("own_files_lossless", ""), ("own_files_lossless", "pyav"),
                                              ("packed_libero_keys_h264", "")])
def test_lerobot_reads_our_dataset(lerobot_python: Path, tmp_path: Path, variant: str, backend: str) -> None:
    lossless = variant == "own_files_lossless"
    cfg = DatasetConfig(fps=FPS, image_size=(SIZE, SIZE))
    if not lossless:
        cfg = dataclasses.replace(cfg, camera_keys=LIBERO_KEYS, video_codec="h264", crf=18)
    eps = episodes()
    with EpisodeWriter(tmp_path / "ours", cfg, pack=not lossless) as writer:
        for ep in eps:
            writer.append(ep)
    got = run_in_venv("lerobot", READ_SCRIPT, [str(tmp_path / "ours"), str(tmp_path / "seen.npz"), backend])
    arrays = np.load(tmp_path / "seen.npz")
    assert got["backend"] == (backend or "torchcodec")  # lerobot's default decoder, and its PyAV one

    total = sum(LENGTHS)
    keys = [cfg.camera_key(v) for v in cfg.views]
    assert (got["episodes"], got["frames"], got["fps"], got["cameras"]) == (3, total, FPS, keys)
    assert got["tasks"] == {TASKS[0]: 0, TASKS[1]: 1} and got["lengths"] == list(LENGTHS)
    assert got["image"] == ["torch.float32", [3, SIZE, SIZE]]  # lerobot's convention: CHW in [0, 1]
    assert {"action", "observation.state", *keys} <= set(got["stats"])
    want_rows = [[e, t, sum(LENGTHS[:e]) + t, TASKS.index(ep.instruction), t / FPS, ep.instruction]
                 for e, ep in enumerate(eps) for t in range(len(ep))]
    assert [r[:4] + [round(r[4], 6), r[5]] for r in got["rows"]] == want_rows
    np.testing.assert_array_equal(arrays["states"], np.concatenate([ep.state for ep in eps]))
    np.testing.assert_array_equal(arrays["actions"], np.concatenate([ep.action for ep in eps]))
    for view, key in zip(cfg.views, keys):
        want = np.concatenate([ep.frames[view] for ep in eps]).astype(int)
        seen = arrays[f"img:{key}"].astype(int)
        if lossless:  # libx264rgb at QP 0: lerobot's decoder gives back our pixels exactly
            np.testing.assert_array_equal(seen, want)
        else:  # yuv420p h264 loses detail, but every frame must be its own one, in order
            assert np.abs(seen - want).mean() < 6, np.abs(seen - want).mean()
            assert [int(np.argmin(np.abs(want - f).mean(axis=(1, 2, 3)))) for f in seen] == list(range(total))
    assert got["batch"] == [[4, 3, SIZE, SIZE], [4, 7], [TASKS[0]] * 4]
    # episode 0's last frame: one real action, then three padded past the episode's end
    assert got["chunk"] == [[4, 7], [False, True, True, True]]


def test_our_world_model_trains_on_a_lerobot_written_dataset(lerobot_python: Path, tmp_path: Path) -> None:
    from tests.world_models.conftest import tiny_model_config
    from world_models.training import Trainer, TrainWorldModelConfig

    eps = episodes()
    src: dict[str, np.ndarray] = {"n": np.array(len(eps)), "size": np.array(SIZE), "fps": np.array(FPS)}
    for e, ep in enumerate(eps):
        src.update({f"state{e}": ep.state, f"action{e}": ep.action, f"task{e}": np.array(ep.instruction),
                    **{f"{v}{e}": f for v, f in ep.frames.items()}})
    np.savez(tmp_path / "src.npz", **src)  # type: ignore[arg-type]  # numpy's stubs take **kwds as one array type
    root = tmp_path / "theirs"
    video = run_in_venv("lerobot", WRITE_SCRIPT, [str(root), str(tmp_path / "src.npz")])
    assert video["video.codec"] == "av1" and video["video.pix_fmt"] == "yuv420p"  # lerobot's default encoding

    ds = EpisodeDataset(root)  # LeRobot's LIBERO keys map onto our views; no project columns needed
    assert len(ds) == 3 and ds.views == ("agentview", "wrist")
    for got, want in zip((ds[i] for i in range(len(ds))), eps):
        assert got.instruction == want.instruction and len(got) == len(want)
        np.testing.assert_array_equal(got.state, want.state)
        np.testing.assert_array_equal(got.action, want.action)
        for view in ds.views:  # lossy AV1: close, and each frame nearest to its own original
            seen, orig = got.frames[view].astype(int), want.frames[view].astype(int)
            assert seen.shape == orig.shape and np.abs(seen - orig).mean() < 8, np.abs(seen - orig).mean()
            assert [int(np.argmin(np.abs(orig - f).mean(axis=(1, 2, 3)))) for f in seen] == list(range(len(want)))

    torch.set_num_threads(1)
    cfg = TrainWorldModelConfig()
    cfg.clips.data_dir, cfg.clips.views = str(root), ["agentview"]
    cfg.clips.context_frames, cfg.clips.chunk_len = 2, 4
    cfg.out_dir, cfg.steps, cfg.batch_size, cfg.sample_every, cfg.num_threads = str(tmp_path / "wm"), 3, 4, 0, 1
    cfg.augment.enabled = cfg.bootstrap.enabled = False
    cfg.model = tiny_model_config(size=SIZE)
    trainer = Trainer(cfg)
    losses = [trainer.step()["denoise"] for _ in range(3)]
    assert all(np.isfinite(losses)), losses


def test_lerobot_and_our_writer_append_to_each_others_dataset(lerobot_python: Path, tmp_path: Path) -> None:
    """Ours (3 episodes) + one recorded by lerobot + one more of ours: both sides read all five. This needs
    the stats, the episodes rows and the tasks table each writer leaves to be ones the other can extend."""
    eps = episodes()
    extra = dataclasses.replace(eps[1], instruction="a task lerobot added")
    root = tmp_path / "mixed"
    cfg = DatasetConfig(fps=FPS, image_size=(SIZE, SIZE), camera_keys=LIBERO_KEYS)
    with EpisodeWriter(root, cfg, pack=True) as writer:
        for ep in eps:
            writer.append(ep)
    src = {"state": extra.state, "action": extra.action, "task": np.array(extra.instruction), "reward": extra.reward,
           "success": extra.success, **extra.frames}
    np.savez(tmp_path / "extra.npz", **src)  # type: ignore[arg-type]  # numpy's stubs take **kwds as one array type
    assert run_in_venv("lerobot", APPEND_SCRIPT, [str(root), str(tmp_path / "extra.npz")]) == {"episodes": 4}
    with EpisodeWriter(root, pack=True) as writer:  # reopens what lerobot left: its info, stats and tasks
        assert writer.append(eps[2]) == 4
    all_eps = [*eps, extra, eps[2]]

    ds = EpisodeDataset(root)
    assert len(ds) == 5 and [ds[i].instruction for i in range(5)] == [e.instruction for e in all_eps]
    for i, want in enumerate(all_eps):
        np.testing.assert_array_equal(ds[i].state, want.state)
        np.testing.assert_array_equal(ds[i].action, want.action)
    np.testing.assert_array_equal(ds[4].frames["agentview"], eps[2].frames["agentview"])  # ours: lossless

    got = run_in_venv("lerobot", READ_SCRIPT, [str(root), str(tmp_path / "seen.npz"), ""])
    assert got["episodes"] == 5 and got["lengths"] == [len(e) for e in all_eps]
    assert got["tasks"] == {TASKS[0]: 0, TASKS[1]: 1, extra.instruction: 2}
    assert [r[0] for r in got["rows"]] == [i for i, e in enumerate(all_eps) for _ in range(len(e))]
    seen = np.load(tmp_path / "seen.npz")
    np.testing.assert_array_equal(seen["actions"], np.concatenate([e.action for e in all_eps]))
