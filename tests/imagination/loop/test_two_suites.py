"""A tiny two-suite round on real LIBERO: one dataset collected from LIBERO-Spatial and LIBERO-Object, one world
model and one policy trained on both, then the policy evaluated on each suite with the per-suite table."""
from __future__ import annotations

import json

import pytest
import torch

from envs.cli import load_config
from envs.collection import CollectConfig, collect
from envs.dataset import EpisodeDataset
from imagination.eval.real_rollouts import EvalPolicyConfig
from imagination.eval.suites import evaluate_suites
from policies.bc import BCConfig, train_bc_on_data
from world_models.model import WorldModel
from world_models.training import TrainWorldModelConfig, train_world_model

pytestmark = [pytest.mark.libero, pytest.mark.slow]


def test_collect_world_model_bc_and_eval_over_two_suites(tmp_path):
    data = tmp_path / "data"
    for suite in ("libero_spatial", "libero_object"):
        collect(CollectConfig(out_dir=str(data), suite=suite, tasks=[0], episodes_per_task=1, perturbed_fraction=0.0,
                              views=["agentview"], preview_videos=0, post_success_steps=2))
    # a second run of the first suite resumes (nothing new), and does not take the other suite's task 0 for its own
    collect(CollectConfig(out_dir=str(data), suite="libero_spatial", tasks=[0], episodes_per_task=1,
                          perturbed_fraction=0.0, views=["agentview"], preview_videos=0, post_success_steps=2))
    meta = EpisodeDataset(data).meta
    assert sorted(m.suite for m in meta) == ["libero_object", "libero_spatial"] and all(m.success for m in meta)

    wm_cfg = load_config(TrainWorldModelConfig, "quick", [
        f"clips.data_dir={data}", f"out_dir={tmp_path / 'wm'}", "steps=4", "batch_size=2", "sample_every=0",
        "checkpoint_every=2", "warmup_steps=1", "model.denoiser.block_out_channels=[8,16]",
        "model.denoiser.norm_num_groups=4", "model.head.channels=[4,8]"], group="world_model")
    wm = WorldModel.load(train_world_model(wm_cfg)["model_path"])
    assert wm.cfg.views == ["agentview"]

    bc_cfg = load_config(BCConfig, "quick", [
        f"data_dir={data}", f"out_dir={tmp_path / 'bc'}", "steps=4", "batch_size=4", "policy.conv_channels=[8,8]",
        "policy.views=[agentview]",
        "policy.hidden=32", "checkpoint_every=2"], group="bc")
    bc = train_bc_on_data(bc_cfg)
    assert bc["episodes"] == 2 and len(set(bc["instructions"])) == 2  # one task of each suite
    torch.set_num_threads(1)

    table = evaluate_suites(EvalPolicyConfig(
        checkpoint=bc["policy_path"], suites=["libero_spatial", "libero_object"], tasks=[0], episodes_per_task=1,
        num_envs=1, max_steps=16, videos=0, out_dir=str(tmp_path / "eval")))
    assert set(table["suites"]) == {"libero_spatial", "libero_object"} and table["pooled"]["episodes"] == 2
    written = json.loads((tmp_path / "eval" / "suites.json").read_text())
    assert written["checkpoint"] == bc["policy_path"]
