"""The loop's real stages on a local Ray cluster (collect.backend=ray, eval.backend=ray): the tiny loop runs end
to end, its collected dataset is the one the local backend collects for the same plan, and its real evaluation
gives the local backend's per-episode outcomes for the same policy and jobs."""
from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest
import torch

from imagination.eval.evaluate import evaluate
from robot_data.collection import collect
from robot_data.dataset import EpisodeDataset
from tests.imagination.loop.test_loop import _tiny

pytest.importorskip("ray", reason="the [cluster] extra (ray) is not installed: pip install -e '.[cluster]'")
pytestmark = [pytest.mark.libero, pytest.mark.slow]

KEYS = ("task_id", "init_state_id", "seed", "success", "steps", "object_lift_m", "target_distance_m")


def test_tiny_loop_on_ray_matches_the_local_backend(cluster, tmp_path):
    from imagination.loop.run import run_loop

    torch.set_num_threads(1)
    cfg = _tiny(tmp_path / "run")
    # one RL round: the Ray backends serve every round's stages alike (test_loop.py runs the second one locally)
    cfg = replace(cfg, rounds=0, collect=replace(cfg.collect, backend="ray", num_workers=2),
                  eval=replace(cfg.eval, backend="ray", num_envs=1))
    result = run_loop(cfg)
    assert [p["name"] for p in result["phases"]] == ["bc", "control", "round1"]
    assert (tmp_path / "run" / "loop_config.yaml").read_text().count("backend: ray") == 2  # collect and eval

    # collect: the dataset the local backend writes for the same plan
    local = EpisodeDataset(collect(replace(cfg.collect, backend="local", num_workers=1,
                                           out_dir=str(tmp_path / "local_data"))), verify=True)
    on_ray = EpisodeDataset(tmp_path / "run" / "data", verify=True)
    collected = [m for m in on_ray.meta if m.source != "policy"]
    assert [m.as_dict() for m in collected] == [m.as_dict() for m in local.meta]
    for m in collected:
        a, b = local[m.episode_index], on_ray[m.episode_index]
        np.testing.assert_array_equal(a.action, b.action)
        np.testing.assert_array_equal(a.frames["agentview"], b.frames["agentview"])

    # real evaluation: the BC phase's outcomes again on the local backend
    ray_eval = json.loads((tmp_path / "run" / "bc" / "eval_real" / "results.json").read_text())
    local_eval = evaluate(replace(cfg.eval, checkpoint=str(tmp_path / "run" / "bc" / "policy.pt"), backend="local",
                                  out_dir=str(tmp_path / "local_eval"), videos=0), progress=False)
    rows = [[[e[k] for k in KEYS] for e in r["episodes"]] for r in (ray_eval, local_eval)]
    assert rows[0] == rows[1]
