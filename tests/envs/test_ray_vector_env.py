"""Real LIBERO on a local Ray cluster (envs/ray_vector_env.py): the same per-episode outcomes as the local
subprocess backend for the same jobs, and a killed worker's episode started over with the same result."""
from __future__ import annotations

import pytest
import torch

from imagination.eval.evaluate import evaluate
from imagination.eval.jobs import EvalConfig
from policies.vla import VLAPolicy
from tests.policies.conftest import tiny_config

ray = pytest.importorskip("ray", reason="the [cluster] extra (ray) is not installed: pip install -e '.[cluster]'")
pytestmark = [pytest.mark.libero, pytest.mark.slow]

KEYS = ("task_id", "init_state_id", "seed", "success", "steps", "object_lift_m", "target_distance_m",
        "grasp_distance_m")


@pytest.fixture(scope="module")
def policy():
    torch.manual_seed(0)  # deterministic chunks: outcomes depend on the simulator only
    return VLAPolicy(tiny_config(views=["agentview", "wrist"])).eval()


def _cfg(tmp_path, name, **kw):
    # 3 jobs on 2 envs: the third starts by a masked reset while the other env keeps running
    return EvalConfig(checkpoint="tiny", env="libero_spatial", tasks=[0], episodes_per_task=3, num_envs=2,
                      max_steps=16, videos=0, out_dir=str(tmp_path / name), **kw)


def _rows(result):
    return [[e[k] for k in KEYS] for e in result["episodes"]]


def test_ray_backend_gives_the_local_outcomes_and_survives_a_dead_worker(cluster, policy, tmp_path, monkeypatch):
    # one run on Ray checks both: env 0's worker lives throughout (Ray's outcomes as such), env 1's is killed
    # mid-episode and its episode started over (the same outcome all the same)
    local = evaluate(_cfg(tmp_path, "local"), policy=policy, progress=False)

    from envs.ray_vector_env import RayLiberoVectorEnv

    killed: list[int] = []
    step = RayLiberoVectorEnv.step

    def step_then_kill(self, actions):  # kill env 1's worker process once, mid-episode
        out = step(self, actions)
        if not killed:
            killed.append(ray.get(self.actors[1].pid.remote()))
            ray.kill(self.actors[1])
        return out

    monkeypatch.setattr(RayLiberoVectorEnv, "step", step_then_kill)
    retried = evaluate(_cfg(tmp_path, "killed", backend="ray"), policy=policy, progress=False)
    assert killed and _rows(retried) == _rows(local)


def test_unknown_backend_is_refused(tmp_path, policy):
    with pytest.raises(ValueError, match="backend"):
        evaluate(_cfg(tmp_path, "x", backend="slurm"), policy=policy, progress=False)
