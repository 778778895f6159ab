"""`collect backend=ray` on a local Ray cluster (robot_data/ray_collection.py): the dataset the local backend writes
for the same plan, episode for episode, although one worker is killed while it records an episode."""
from __future__ import annotations

import os
import signal
import time

import numpy as np
import pytest

from robot_data.collection import CollectConfig, collect
from robot_data.dataset import EpisodeDataset

ray = pytest.importorskip("ray", reason="the [cluster] extra (ray) is not installed: pip install -e '.[cluster]'")
pytestmark = [pytest.mark.libero, pytest.mark.slow]


def _cfg(tmp_path, name: str, **kw) -> CollectConfig:
    # 2 short episodes (one perturbed) on 2 workers: small frames, one view, a 12-step horizon
    return CollectConfig(out_dir=str(tmp_path / name), tasks=[0], episodes_per_task=2, perturbed_fraction=0.5,
                         perturbations=["early_release"], views=["agentview"], image_size=32, max_steps=12,
                         preview_videos=0, seed=5, **kw)


def _episodes(root):
    ds = EpisodeDataset(root)
    return ds, [ds[i] for i in range(len(ds))]


def test_ray_collection_writes_the_local_dataset_despite_a_killed_worker(cluster, tmp_path, monkeypatch):
    from robot_data.ray_collection import RayRecorder

    local_ds, local = _episodes(collect(_cfg(tmp_path, "local")))

    submitted: list[tuple] = []
    killed: list[tuple] = []
    submit = RayRecorder.submit

    def submit_then_kill(self, slot, item):  # SIGKILL the first worker's process just after its first episode starts
        pid = ray.get(self.actors[slot].pid.remote()) if not killed else None
        future = submit(self, slot, item)
        submitted.append(item.key)
        if pid is not None:
            time.sleep(0.2)
            os.kill(pid, signal.SIGKILL)
            killed.append(item.key)
        return future

    monkeypatch.setattr(RayRecorder, "submit", submit_then_kill)
    ray_ds, on_ray = _episodes(collect(_cfg(tmp_path, "ray", backend="ray", num_workers=2)))

    assert killed and submitted.count(killed[0]) == 2 and len(submitted) == 3  # its item was recorded again
    assert [m.as_dict() for m in ray_ds.meta] == [m.as_dict() for m in local_ds.meta]  # once each, in plan order
    assert {m.perturbation for m in ray_ds.meta} == {"", "early_release"}
    for a, b in zip(local, on_ray):
        np.testing.assert_array_equal(a.action, b.action)
        np.testing.assert_array_equal(a.state, b.state)
        np.testing.assert_array_equal(a.success, b.success)
        np.testing.assert_array_equal(a.frames["agentview"], b.frames["agentview"])

