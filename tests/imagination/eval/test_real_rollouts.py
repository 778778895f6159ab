"""evaluate_policy (scripts/eval_policy.py) with record_to=: real episodes appended to a dataset as the policy's
own data."""
import json

import numpy as np
import pytest

from imagination.eval.real_rollouts import EvalPolicyConfig, evaluate_policy
from robot_data.dataset import DatasetConfig, Episode, EpisodeDataset, EpisodeWriter


def _dataset(root):
    """A dataset with one stand-in episode, as scripts/collect.py would have left it (64 px, two views)."""
    rng = np.random.default_rng(0)
    T = 5
    with EpisodeWriter(root, DatasetConfig()) as w:
        w.append(Episode(
            frames={v: rng.integers(0, 255, (T, 64, 64, 3), dtype=np.uint8) for v in ("agentview", "wrist")},
            state=np.zeros((T, 8), np.float32), action=np.zeros((T, 7), np.float32), reward=np.zeros(T, np.float32),
            success=np.zeros(T, bool), instruction="task 0", suite="libero_spatial", task_id=0, source="expert",
            perturbation="", init_state_id=0))


def _cfg(tmp_path, **kw) -> EvalPolicyConfig:
    return EvalPolicyConfig(**{"checkpoint": "random", "env": "libero_spatial", "tasks": [0], "episodes_per_task": 1,
                               "num_envs": 1, "max_steps": 16, "videos": 0, "init_state_offset": 20,
                               "out_dir": str(tmp_path / "eval"), **kw})


@pytest.mark.libero
def test_record_to_appends_the_real_episodes(tmp_path, capsys):
    data = tmp_path / "data"
    _dataset(data)
    result = evaluate_policy(_cfg(tmp_path, record_to=str(data)))
    ds = EpisodeDataset(data)
    assert len(ds) == 2
    m = ds.meta[1]
    assert (m.source, m.task_id, m.init_state_id) == ("policy", 0, 20)
    assert m.extra["policy"] == "random" and "near_success" in m.extra
    assert m.success == result["episodes"][0]["success"]
    assert result["recorded"]["episodes"] == 1
    saved = json.loads((tmp_path / "eval" / "results.json").read_text())
    assert saved["recorded"] == result["recorded"]  # a resumed loop reusing the file keeps the counts
    # 16 random steps never lift the bowl: the simulator says so, and such a failure is not a near-success
    assert m.extra["outcome"] == result["episodes"][0]["outcome"] == "never lifted"
    assert m.extra["near_success"] is False and result["recorded"]["near_successes"] == 0
    out = capsys.readouterr().out
    assert "recorded into" in out and "failures: never lifted 1" in out


def test_record_to_refuses_what_it_cannot_record(tmp_path):
    with pytest.raises(SystemExit, match="not a dataset folder"):
        evaluate_policy(_cfg(tmp_path, record_to=str(tmp_path)))
    with pytest.raises(SystemExit, match="only real episodes"):
        evaluate_policy(_cfg(tmp_path, record_to=str(tmp_path), env="imagination"))
