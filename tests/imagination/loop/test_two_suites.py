"""A tiny two-suite loop on real LIBERO, run once on a local Ray cluster (collect.backend=ray, eval.backend=ray):
one dataset collected from LIBERO-Spatial and LIBERO-Object in one run, one world model and one policy trained on
both, imagined RL starting from both suites, and every policy evaluated on each suite, real and imagined, with the
per-suite tables and the report. The same run checks the Ray backends against the local ones: its collected
dataset is the one the local backend collects for the same plan, and its real evaluation gives the local
backend's per-episode outcomes for the same policy and jobs. (One run for both: a loop is the slowest thing in
the test suite.)"""
from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch

from imagination.env import ImaginationConfig
from imagination.eval.evaluate import evaluate
from imagination.eval.jobs import EvalConfig
from imagination.eval.suites import suite_config
from imagination.loop.config import LoopConfig
from imagination.rl.run_envs import load_rl_env
from imagination.rl.training import ImagineRLConfig
from robot_data.collection import collect
from robot_data.dataset import EpisodeDataset
from tests.imagination.loop.test_loop import _tiny

SUITES = ["libero_spatial", "libero_object"]
KEYS = ("task_id", "init_state_id", "seed", "success", "steps", "object_lift_m", "target_distance_m")


def _two_suites(out: Path) -> LoopConfig:
    cfg = _tiny(out)
    cfg.rounds = 0  # one RL round: the second runs locally in test_loop.py
    cfg.collect.suites = list(SUITES)
    cfg.collect.episodes_per_task = 1
    cfg.collect.perturbed_fraction = 0.0
    cfg.rl.imagination.reward = "head"  # the grasp reward knows one suite's tasks; the loop refuses it over several
    return replace(cfg, collect=replace(cfg.collect, backend="ray", num_workers=2),
                   eval=replace(cfg.eval, backend="ray", num_envs=1))


@pytest.fixture(scope="module")
def loop_run(cluster, tmp_path_factory) -> tuple[LoopConfig, dict]:
    pytest.importorskip("libero.libero", reason="the loop collects in real LIBERO (the [libero] extra)")
    from imagination.loop.run import run_loop

    torch.set_num_threads(1)
    cfg = _two_suites(tmp_path_factory.mktemp("two_suites") / "run")
    return cfg, run_loop(cfg)


@pytest.mark.libero
@pytest.mark.slow
def test_a_loop_over_two_suites(loop_run, tmp_path):
    cfg, result = loop_run
    out = Path(cfg.out_dir)
    data = out / "data"
    meta = EpisodeDataset(data, verify=False).meta
    collected = [m for m in meta if m.source != "policy"]
    assert [m.suite for m in collected] == SUITES and all(m.success for m in collected)
    assert set(json.loads((data / "summary.json").read_text())) == {"libero_spatial/0", "libero_object/0"}
    # a second collection of one suite resumes (nothing new): task 0 of Object is not task 0 of Spatial
    collect(replace(cfg.collect, out_dir=str(data), suite="libero_spatial", suites=[], backend="local"))
    assert len(EpisodeDataset(data, verify=False)) == len(meta)

    assert [p["name"] for p in result["phases"]] == ["bc", "control", "round1"]
    control = json.loads((out / "control" / "eval_real" / "results.json").read_text())
    assert {e["suite"] for e in control["episodes"]} == set(SUITES)  # the control is paired over both suites
    for phase in ("bc", "round1"):
        for kind in ("eval_real", "eval_imagined"):
            merged = json.loads((out / phase / kind / "results.json").read_text())
            assert set(merged["per_task"]) == {"libero_spatial/0", "libero_object/0"}
            assert merged["overall"]["episodes"] == 2 and {e["suite"] for e in merged["episodes"]} == set(SUITES)
            assert set(merged["suites"]["suites"]) == set(SUITES) and (out / phase / kind / "suites.md").is_file()
            for suite in SUITES:
                one = json.loads((out / phase / kind / suite / "results.json").read_text())
                assert one["config"]["env"] == (suite if kind == "eval_real" else "imagination")
                assert one["config"]["start_suite"] == ("" if kind == "eval_real" else suite)
    # RL drew its starts from both suites and reports task 0 of each apart
    metrics = (out / "round1" / "rl" / "metrics.csv").read_text().splitlines()[0].split(",")
    per_task = {k for k in metrics if k.startswith("imagined_success_") and k != "imagined_success_rate"}
    assert per_task and per_task <= {"imagined_success_libero_spatial_task0", "imagined_success_libero_object_task0"}
    report = (out / "report.md").read_text()
    assert "libero_object/0" in report and "libero_spatial/0" in report
    assert "## Imagination's own gain" in report and "Not measured" not in report

    # the suite filter of imagined RL, and a mixed start dataset without a suite to start from
    wm = result["world_models"][0]["path"]
    only = load_rl_env(ImagineRLConfig(world_model=wm, start_data=str(data), sources=["expert"],
                                       imagination=ImaginationConfig(),
                                       suites=["libero_object"], num_groups=1, group_size=1), tmp_path / "rl_object")
    assert [e.suite for e in only.episodes] == ["libero_object"]
    with pytest.raises(ValueError, match=r"start_data mixes suites \['libero_object', 'libero_spatial'\]"):
        evaluate(EvalConfig(checkpoint=str(out / "bc" / "policy.pt"), env="imagination", world_model=wm,
                            start_data=str(data), tasks=[0], episodes_per_task=1, num_envs=1,
                            out_dir=str(tmp_path / "bad")), progress=False)


@pytest.mark.libero
@pytest.mark.slow
def test_the_loop_on_ray_matches_the_local_backend(loop_run, tmp_path):
    cfg, _ = loop_run
    out = Path(cfg.out_dir)
    assert (out / "loop_config.yaml").read_text().count("backend: ray") == 2  # collect and eval

    # collect: the dataset the local backend writes for the same plan
    local = EpisodeDataset(collect(replace(cfg.collect, backend="local", num_workers=1,
                                           out_dir=str(tmp_path / "local_data"))), verify=True)
    on_ray = EpisodeDataset(out / "data", verify=True)
    collected = [m for m in on_ray.meta if m.source != "policy"]
    assert [m.as_dict() for m in collected] == [m.as_dict() for m in local.meta]
    for m in collected:
        a, b = local[m.episode_index], on_ray[m.episode_index]
        np.testing.assert_array_equal(a.action, b.action)
        np.testing.assert_array_equal(a.frames["agentview"], b.frames["agentview"])

    # real evaluation: the BC phase's outcomes again on the local backend, suite by suite
    for suite in SUITES:
        ray_eval = json.loads((out / "bc" / "eval_real" / suite / "results.json").read_text())
        one = suite_config(replace(cfg.eval, checkpoint=str(out / "bc" / "policy.pt"), backend="local",
                                   out_dir=str(tmp_path / "local_eval"), videos=0), suite)
        local_eval = evaluate(one, progress=False)
        rows = [[[e[k] for k in KEYS] for e in r["episodes"]] for r in (ray_eval, local_eval)]
        assert rows[0] == rows[1]


def test_the_grasp_reward_is_refused_over_several_suites(tmp_path):
    cfg = _tiny(tmp_path)
    cfg.collect.suites = list(SUITES)
    cfg.rl.imagination.reward = "grasp"
    with pytest.raises(ValueError, match="the grasp reward's classifier knows the tasks of one suite"):
        cfg.validate()
