"""The co-evolution loop end to end on a tiny real run (real LIBERO, tiny models, a few steps each):
stage bookkeeping and reuse, dataset growth with labelled policy episodes, the fine-tune starting
from the previous world model, the guard, and the report of the finished run."""
import json
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from imagination.loop.config import LoopConfig, LoopState, finetune_config, guard
from infra.cli import load_config
from robot_data.dataset import EpisodeDataset
from world_models.model import WorldModel


def test_guard_fires_only_past_the_margin():
    assert guard(1, "round1", 0.9, 0.5, 0.25, 3.0) == {
        "round": 1, "phase": "round1", "imagined_success": 0.9, "real_success": 0.5, "gap": pytest.approx(0.4),
        "margin": 0.25, "fired": True, "failure_weight": 3.0}
    quiet = guard(1, "round1", 0.6, 0.5, 0.25, 3.0)
    assert not quiet["fired"] and quiet["failure_weight"] == 1.0


def test_config_errors_name_the_field():
    cfg = load_config(LoopConfig, "quick", group="loop")
    cfg.validate()
    cfg.bc.policy.views = ["agentview", "wrist"]  # the world model imagines agentview only
    with pytest.raises(ValueError, match="bc.policy.views"):
        cfg.validate()
    cfg.world_model.clips.views = ["agentview", "wrist"]
    cfg.bc.policy.views = ["agentview"]  # a subset: the imagined env shows the policy only what it reads
    cfg.validate()
    with pytest.raises(ValueError, match="rounds"):
        LoopConfig(rounds=-1).validate()


def test_finetune_config_weights_policy_episodes_and_bootstraps_from_the_start():
    cfg = load_config(LoopConfig, "quick", group="loop")
    ft = finetune_config(cfg, "/d", "/o", "/wm.pt", failure_weight=3.0)
    assert (ft.clips.data_dir, ft.out_dir, ft.init_from, ft.steps) == ("/d", "/o", "/wm.pt", cfg.finetune_steps)
    assert ft.clips.source_weights == {"policy": cfg.policy_weight} and ft.clips.failure_weight == 3.0
    # the quick fine-tune (500 steps) is shorter than the ramp's start (800): without the change it never bootstraps
    assert cfg.finetune_steps < cfg.world_model.bootstrap.ramp_start
    assert ft.bootstrap.probability(0) == ft.bootstrap.probability(ft.steps) == cfg.world_model.bootstrap.prob_end > 0
    assert cfg.world_model.bootstrap.probability(0) == 0.0  # the first training is unchanged
    assert ft.warmup_steps <= cfg.finetune_steps // 10


def test_stage_runs_once_and_is_reused(tmp_path):
    cfg = LoopConfig(out_dir=str(tmp_path))
    calls: list[int] = []

    def counted(result: dict) -> Callable[[], dict]:
        def run() -> dict:
            calls.append(1)
            return result
        return run

    state = LoopState(cfg)
    assert state.stage("a", counted({"x": 1}), log=lambda _: None) == {"x": 1}
    again = LoopState(cfg)  # a new process reads loop.json
    assert again.stage("a", counted({"x": 2}), log=lambda _: None) == {"x": 1}
    assert calls == [1]


def _tiny(out: Path) -> LoopConfig:
    cfg = load_config(LoopConfig, "quick", [
        f"out_dir={out}", "collect.tasks=[0]", "collect.episodes_per_task=2", "collect.perturbed_fraction=0.5",
        "collect.num_workers=1", "collect.preview_videos=0",
        "world_model.steps=6", "world_model.batch_size=2", "world_model.sample_every=0",
        "world_model.checkpoint_every=3",
        "world_model.model.denoiser.block_out_channels=[8,16]", "world_model.model.denoiser.norm_num_groups=4",
        "world_model.model.head.channels=[4,8]", "world_model.warmup_steps=1",
        "bc.steps=4", "bc.batch_size=4", "bc.policy.conv_channels=[8,8]", "bc.policy.hidden=32",
        "rl.iterations=1", "rl.num_groups=1", "rl.group_size=2", "rl.imagination.max_steps=16",
        "eval.tasks=[0]", "eval.episodes_per_task=1", "eval.num_envs=1", "eval.max_steps=16", "eval.videos=1",
        "wm_eval_steps=8", "finetune_steps=3", "guard_margin=0.0"], group="loop")
    return cfg


@pytest.mark.slow
@pytest.mark.libero
def test_tiny_loop_round_end_to_end(tmp_path, capsys):
    from imagination.loop.run import run_loop

    torch.set_num_threads(1)
    out = tmp_path / "run"
    result = run_loop(_tiny(out))
    ds = EpisodeDataset(out / "data", verify=False)
    policy_eps = [m for m in ds.meta if m.source == "policy"]
    # 2 collected + 1 recorded real episode of the round-1 policy (the final phase is not recorded)
    assert len(ds) == 3 and len(policy_eps) == 1
    assert policy_eps[0].extra["round"] == 1 and policy_eps[0].extra["phase"] == "round1"
    assert result["data"] == {"episodes_before": 2, "episodes_after": 3, "policy_episodes_added": 1,
                              "failures_added": int(not policy_eps[0].success),
                              "near_successes_added": int(bool(policy_eps[0].extra["near_success"]))}
    # the fine-tune started from the first world model and trained on the grown dataset
    split = json.loads((out / "round1" / "world_model" / "split.json").read_text())
    first = json.loads((out / "world_model" / "split.json").read_text())
    assert set(first["held_out"]) <= set(split["held_out"]) and 2 in split["train"] + split["held_out"]
    ft_config = (out / "round1" / "world_model" / "config.yaml").read_text()
    assert str(out / "world_model" / "world_model.pt") in ft_config
    # the real-data control trained before round 1's evaluation was recorded: on the collected successes only
    assert [p["name"] for p in result["phases"]] == ["bc", "control", "round1", "round2"]
    control = json.loads((out / "control" / "control.json").read_text())
    assert control["episodes"] == sum(m.success for m in ds.meta[:2]) and control["datasets"] == [str(out / "data")]
    assert next(p for p in result["phases"] if p["name"] == "control")["imagined"] is None
    assert [w["name"] for w in result["world_models"]] == ["wm0", "wm1"]
    assert result["guard"][0]["round"] == 1
    # one proprio model per state of the dataset, read by every stage on it (not one fit per stage)
    assert sorted(f.name for f in (out / "proprio").iterdir()) == ["proprio_2.pt", "proprio_3.pt"]
    assert not any((out / f"round{r}" / "rl" / "proprio.pt").exists() for r in (1, 2))  # RL fitted none of its own
    # every RL round was decided against the policy the loop kept, and the report says which one it ended with
    decided = result["adoption"]
    assert [d["round"] for d in decided] == [1, 2] and decided[0]["kept_before"] == "bc"
    assert decided[1]["kept_before"] == decided[0]["kept"]
    assert f"The loop's policy: **{decided[1]['kept']}**" in (out / "report.md").read_text()
    # each world model's success threshold was calibrated on the data of its time (when it had both outcomes)
    for w, n_eps in zip(result["world_models"], (2, 3)):
        outcomes = {bool(m.success) for m in ds.meta[:n_eps]}
        cal = w["calibration"]
        if outcomes == {True, False}:
            assert WorldModel.load(w["path"]).cfg.head.success_threshold == pytest.approx(cal["threshold"])
            assert cal["positives"] + cal["negatives"] == n_eps
            assert (Path(w["path"]).parent / "calibration.json").is_file()
        else:
            assert "skipped" in cal and WorldModel.load(w["path"]).cfg.head.success_threshold == 0.5
    stages = [s["name"] for s in result["stages"]]
    assert stages[:3] == ["collect", "world_model", "eval_wm0"] and "round1_world_model" in stages
    # one real episode per phase: the reward's signal is said to be unmeasurable, not printed as nan
    assert "bc: reward signal on the real jobs: not measurable" in capsys.readouterr().out
    report = (out / "report.md").read_text()
    assert "Real LIBERO success" in report and (out / "report.html").exists()
    assert "## Imagination's own gain" in report and "real-data control" in report
    assert "success threshold (balanced acc.)" in report
    # a second run reuses everything: no stage runs again, the dataset does not grow
    again = run_loop(_tiny(out))
    assert [s["seconds"] for s in again["stages"]] == [s["seconds"] for s in result["stages"]]
    assert len(EpisodeDataset(out / "data", verify=False)) == 3
