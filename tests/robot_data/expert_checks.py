"""The real-LIBERO checks every scripted expert's tests share: one expert episode from an official init state,
and one collected episode read back from the dataset."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np


def expert_episode(suite: str, task_id: int, init_id: int, max_steps: int) -> Any:
    """Run the suite's expert (robot_data.experts.make_expert) on one init state; checks success and the action
    convention, returns the episode result."""
    from envs import libero_suites
    from robot_data.experts import make_expert, run_expert_episode

    task = libero_suites.get_task(suite, task_id)
    env = libero_suites.make_raw_env(task)
    try:
        expert = make_expert(suite, rng=np.random.default_rng(0))
        res = run_expert_episode(env, task.init_states[init_id], expert, max_steps=max_steps, reset_seed=init_id)
        assert res.success and env.check_success()
    finally:
        env.close()
    assert res.actions.shape == (res.steps, 7) and res.actions.dtype == np.float32
    assert np.all(np.abs(res.actions) <= 1.0)
    return res


def collected_episode(suite: str, task_id: int, root: Path) -> Any:
    """Collect one clean expert episode of the task into root; checks its metadata, returns the episode."""
    from robot_data.collection import CollectConfig, collect
    from robot_data.dataset import EpisodeDataset

    cfg = CollectConfig(out_dir=str(root), suite=suite, tasks=[task_id], episodes_per_task=1, perturbed_fraction=0.0,
                        views=["agentview"], preview_videos=0, post_success_steps=2)
    ds = EpisodeDataset(collect(cfg))
    assert len(ds) == 1
    meta = ds.meta[0]
    assert meta.success and meta.source == "expert" and meta.suite == suite and meta.task_id == task_id
    return ds[0]
