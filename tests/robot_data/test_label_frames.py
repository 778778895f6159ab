"""robot_data/label_frames.py on real LIBERO: a label collection's successful episodes recorded again with cameras
are the same trajectories (the expert acts on simulator state), now with the frames the real-data control imitates."""
from __future__ import annotations

import numpy as np
import pytest

from robot_data.dataset import DatasetConfig, EpisodeDataset, EpisodeWriter
from robot_data.label_collection import LabelCollectConfig, _write, collect_labels, read_episode
from robot_data.label_frames import framed_copy, record_label_frames, success_plan
from tests.episodes import grasping_episode


def test_the_successful_label_episodes_are_recorded_again_with_the_datasets_cameras(tmp_path):
    labels = LabelCollectConfig(out_dir=str(tmp_path / "near_miss"), tasks=[0], episodes_per_task=2,
                                init_state_offset=3, kinds=["expert", "near_miss"], strength=3.0,
                                post_success_steps=2)
    collect_labels(labels, progress=False)
    infos = [read_episode(tmp_path / "near_miss" / f"task00_ep{j:04d}.npz") for j in range(2)]
    like = tmp_path / "data"  # the cameras and size to record with: the data's
    with EpisodeWriter(like, DatasetConfig(views=("agentview",), image_size=(32, 32))) as w:
        w.append(grasping_episode(np.random.default_rng(0), 8, 32, 0, True, "expert", 0, {}))
    out = record_label_frames(labels.out_dir, framed_copy(labels.out_dir), "libero_spatial", str(like),
                              num_workers=1, post_success_steps=2)
    assert out == str(tmp_path / "near_miss_frames")
    ds = EpisodeDataset(out)
    successes = [(arrays, info) for arrays, info in infos if info["success"]]
    assert successes and len(ds) == len(successes)  # the failures are not recorded: b imitates successes only
    for k, (arrays, info) in enumerate(successes):
        ep = ds[k]
        assert (ep.task_id, ep.init_state_id, ep.seed) == (info["task_id"], info["init_state_id"], info["seed"])
        assert ep.perturbation == ("" if info["kind"] == "expert" else info["kind"]) and ep.success.any()
        np.testing.assert_allclose(ep.action, arrays["action"], atol=1e-6)  # the same trajectory
        assert set(ep.frames) == {"agentview"} and ep.frames["agentview"].shape[1:] == (32, 32, 3)
    record_label_frames(labels.out_dir, out, "libero_spatial", str(like), num_workers=1, post_success_steps=2)
    assert len(EpisodeDataset(out)) == len(successes)  # resumed: nothing recorded twice
    # another collection (another seed) copied into the same folder: b would imitate episodes nobody consumed
    other = tmp_path / "other"
    other.mkdir()
    for j, (arrays, info) in enumerate(infos):
        _write(other / f"task00_ep{j:04d}.npz", arrays, {**info, "seed": info["seed"] + 1})
    with pytest.raises(ValueError, match=r"out_dir: .* holds task 0 episode \d .* not a success of the label folder"):
        record_label_frames(str(other), out, "libero_spatial", str(like), num_workers=1, post_success_steps=2)


def test_a_folder_without_episodes_or_with_two_strengths_is_refused(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="holds no labelled episode"):
        success_plan(str(tmp_path / "empty"))
    root = tmp_path / "mixed"
    root.mkdir()
    arrays: dict[str, np.ndarray] = {k: np.zeros((4, w), np.float32)
                                     for k, w in (("state", 8), ("action", 7), ("object_pos", 3), ("target_pos", 3))}
    arrays |= {"success": np.ones(4, bool), "grasped": np.zeros(4, bool)}
    for j, strength in enumerate((1.0, 1.6)):
        _write(root / f"task00_ep{j:04d}.npz", arrays, {"task_id": 0, "index": j, "init_state_id": j,
                                                        "kind": "near_miss", "seed": j, "strength": strength,
                                                        "success": True})
    with pytest.raises(ValueError, match=r"mixes perturbation strengths \[1.0, 1.6\]"):
        success_plan(str(root))
