"""imagination/rl/stats.py: the per-task figures an iteration logs."""
from types import SimpleNamespace

import numpy as np
import pytest

from imagination.rl.stats import per_task_success, write_metrics


def test_per_task_success_counts_episodes_by_their_start_task():
    env = SimpleNamespace(episodes=[SimpleNamespace(task_id=t, suite="libero_spatial") for t in (0, 0, 2)])
    r = SimpleNamespace(keyframe=np.array([[0, 5], [1, 0], [2, 3], [2, 9], [1, 4]]),
                        success=np.array([True, False, True, True, True]))
    got = per_task_success(r, env)  # type: ignore[arg-type]  # duck-typed stand-ins for Rollouts and the env
    assert got == {"imagined_success_task0": pytest.approx(2 / 3), "imagined_success_task2": 1.0}
    # start episodes of two suites: task 0 of one is not task 0 of the other
    env.episodes[1].suite = "libero_object"
    got = per_task_success(r, env)  # type: ignore[arg-type]
    assert got == {"imagined_success_libero_spatial_task0": 1.0, "imagined_success_libero_object_task0": 0.5,
                   "imagined_success_libero_spatial_task2": 1.0}


def test_metrics_hold_every_key_of_every_row_with_the_iteration_first(tmp_path):
    write_metrics(tmp_path / "m.csv", [{"iteration": 1, "b": 0.5}, {"iteration": 2, "a": 1.0, "b": 0.25}])
    assert (tmp_path / "m.csv").read_text().splitlines() == ["iteration,a,b", "1,,0.5", "2,1.0,0.25"]
    write_metrics(tmp_path / "none.csv", [])  # nothing trained: no file
    assert not (tmp_path / "none.csv").exists()
