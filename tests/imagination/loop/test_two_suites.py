"""A tiny two-suite round on real LIBERO: one dataset collected from LIBERO-Spatial and LIBERO-Object, one world
model and one policy trained on both, then the policy evaluated on each suite with the per-suite table."""
from __future__ import annotations

import json

import pytest
import torch

from envs.cli import load_config
from envs.collection import CollectConfig, collect, summarize
from envs.dataset import EpisodeDataset
from imagination.env import ImaginationConfig
from imagination.eval.evaluate import evaluate
from imagination.eval.jobs import EvalConfig
from imagination.eval.real_rollouts import EvalPolicyConfig
from imagination.eval.suites import evaluate_suites
from imagination.keyframes import KeyframeConfig
from imagination.rl.algo import RLConfig
from imagination.rl.training import ImagineRLConfig, load_rl_env, train_rl
from policies.bc import BCConfig, train_bc_on_data
from world_models.model import WorldModel
from world_models.training import TrainWorldModelConfig, train_world_model

pytestmark = [pytest.mark.libero, pytest.mark.slow]


def test_collect_world_model_bc_and_eval_over_two_suites(tmp_path):
    data = tmp_path / "data"
    both = CollectConfig(out_dir=str(data), suites=["libero_spatial", "libero_object"], tasks=[0], episodes_per_task=1,
                         perturbed_fraction=0.0, views=["agentview"], preview_videos=0, post_success_steps=2)
    collect(both)  # one run, suite after suite, into one dataset
    # a second run of the first suite resumes (nothing new), and does not take the other suite's task 0 for its own
    collect(CollectConfig(out_dir=str(data), suite="libero_spatial", tasks=[0], episodes_per_task=1,
                          perturbed_fraction=0.0, views=["agentview"], preview_videos=0, post_success_steps=2))
    meta = EpisodeDataset(data).meta
    assert [m.suite for m in meta] == ["libero_spatial", "libero_object"] and all(m.success for m in meta)
    assert set(summarize(data)) == {"libero_spatial/0", "libero_object/0"}

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

    # imagined RL on the mixed dataset: one world model, one policy, starts from both suites, per-suite task figures
    rl = train_rl(ImagineRLConfig(
        policy=bc["policy_path"], world_model=str(tmp_path / "wm" / "world_model.pt"), start_data=str(data),
        out_dir=str(tmp_path / "rl"), iterations=1, num_groups=2, group_size=2, num_threads=1, videos=0,
        sources=["expert"], imagination=ImaginationConfig(max_steps=8, keyframes=KeyframeConfig(mode="start")),
        rl=RLConfig(algo="grpo", epochs=1, minibatch_size=4)), progress=False)
    assert rl["real_env_steps"] == 0
    row = rl["history"][0]
    per_task = {k for k in row if k.startswith("imagined_success_") and k != "imagined_success_rate"}
    assert per_task and per_task <= {"imagined_success_libero_spatial_task0", "imagined_success_libero_object_task0"}
    only = load_rl_env(ImagineRLConfig(world_model=str(tmp_path / "wm" / "world_model.pt"), start_data=str(data),
                                       sources=["expert"], suites=["libero_object"], num_groups=1, group_size=1),
                       tmp_path / "rl_object")
    assert [e.suite for e in only.episodes] == ["libero_object"]

    # and the trained policy imagined on each suite, from that suite's start episodes, in the papers' table
    imagined = evaluate_suites(EvalPolicyConfig(
        checkpoint=str(tmp_path / "rl" / "policy.pt"), env="imagination", world_model=str(tmp_path / "wm" /
        "world_model.pt"), start_data=str(data), suites=["libero_spatial", "libero_object"], tasks=[0],
        episodes_per_task=1, num_envs=1, max_steps=8, videos=0, out_dir=str(tmp_path / "imagined")))
    assert set(imagined["suites"]) == {"libero_spatial", "libero_object"} and imagined["pooled"]["episodes"] == 2
    with pytest.raises(ValueError, match=r"start_data mixes suites \['libero_object', 'libero_spatial'\]"):
        evaluate(EvalConfig(checkpoint=bc["policy_path"], env="imagination", world_model=str(tmp_path / "wm" /
                            "world_model.pt"), start_data=str(data), tasks=[0], episodes_per_task=1, num_envs=1,
                            out_dir=str(tmp_path / "bad")), progress=False)
