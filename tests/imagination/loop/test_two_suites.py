"""A tiny two-suite loop on real LIBERO: one dataset collected from LIBERO-Spatial and LIBERO-Object in one run,
one world model and one policy trained on both, imagined RL starting from both suites, and every policy
evaluated on each suite, real and imagined, with the per-suite tables and the report."""
from __future__ import annotations

import json
from dataclasses import replace

import pytest
import torch

from imagination.env import ImaginationConfig
from imagination.eval.evaluate import evaluate
from imagination.eval.jobs import EvalConfig
from imagination.rl.training import ImagineRLConfig, load_rl_env
from robot_data.collection import collect
from robot_data.dataset import EpisodeDataset
from tests.imagination.loop.test_loop import _tiny

pytestmark = [pytest.mark.libero, pytest.mark.slow]
SUITES = ["libero_spatial", "libero_object"]


def test_a_loop_over_two_suites(tmp_path, capsys):
    from imagination.loop.run import run_loop

    torch.set_num_threads(1)
    out = tmp_path / "run"
    cfg = _tiny(out)
    cfg.rounds = 0
    cfg.collect.suites = list(SUITES)
    cfg.collect.episodes_per_task = 1
    cfg.collect.perturbed_fraction = 0.0
    cfg.rl.imagination.reward = "head"  # the grasp reward knows one suite's tasks; the loop refuses it over several
    result = run_loop(cfg)
    data = out / "data"
    meta = EpisodeDataset(data, verify=False).meta
    collected = [m for m in meta if m.source != "policy"]
    assert [m.suite for m in collected] == SUITES and all(m.success for m in collected)
    assert set(json.loads((data / "summary.json").read_text())) == {"libero_spatial/0", "libero_object/0"}
    # a second collection of one suite resumes (nothing new): task 0 of Object is not task 0 of Spatial
    collect(replace(cfg.collect, out_dir=str(data), suite="libero_spatial", suites=[]))
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


def test_the_grasp_reward_is_refused_over_several_suites(tmp_path):
    cfg = _tiny(tmp_path)
    cfg.collect.suites = list(SUITES)
    cfg.rl.imagination.reward = "grasp"
    with pytest.raises(ValueError, match="the grasp reward's classifier knows the tasks of one suite"):
        cfg.validate()
