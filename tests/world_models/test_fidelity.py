"""World-model training (world_models.training.train_world_model, scripts/train_world_model.py) and its
open-loop fidelity (world_models.fidelity, scripts/eval_world_model.py) end to end on the square world."""
import json

import pytest

from envs.cli import build_parser, load_config
from tests.world_models.conftest import tiny_model_config, tiny_train_config

pytestmark = pytest.mark.slow


def test_train_then_eval(square_data, tmp_path):
    from world_models.fidelity import EvalWorldModelConfig, evaluate_world_model
    from world_models.training import train_world_model

    out = tmp_path / "run"
    cfg = tiny_train_config(square_data, out, steps=4, batch_size=4, sample_every=2, checkpoint_every=2,
                            keep_checkpoints=1, log_every=1, sample_horizon=6)
    cfg.model = tiny_model_config()
    result = train_world_model(cfg)
    assert result["steps"] == 4
    assert (out / "config.yaml").is_file() and (out / "world_model.pt").is_file()
    assert [p.name for p in (out / "checkpoints").iterdir()] == ["step_0000004"]  # keep_checkpoints=1
    assert sorted(p.name for p in (out / "samples").iterdir()) == ["step_0000002.mp4", "step_0000004.mp4"]
    assert list((out / "logs").rglob("events.out.tfevents*")), "no tensorboard event file"
    split = json.loads((out / "split.json").read_text())
    assert split["held_out"] and not set(split["held_out"]) & set(split["train"])
    # re-running the finished run resumes at its last checkpoint and does no more steps
    assert train_world_model(cfg)["steps"] == 4

    ecfg = EvalWorldModelConfig(checkpoint=str(out / "world_model.pt"), max_steps=10, steps=1,
                                                 videos=1, out_dir=str(tmp_path / "eval"))
    res = evaluate_world_model(ecfg)
    assert res["episodes"] == split["held_out"]
    assert len(res["psnr_per_step"]) == 10 and len(res["ssim_per_step"]) == 10
    assert 0 < res["psnr"] < 100 and -1 <= res["ssim"] <= 1 and 0 <= res["success_f1"] <= 1
    saved = json.loads((tmp_path / "eval" / "eval.json").read_text())
    assert saved["psnr"] == res["psnr"] and saved["provenance"]["jobs"]["episodes"] == res["episodes"]
    assert -1 <= res["static_ssim"] <= 1 and all("static_ssim" in e for e in res["per_episode"])
    # the episode-outcome F1 is the F1 of "the head fired at some step" against "the episode succeeded"
    pe = res["per_episode"]
    tp = sum(e["success"] and e["predicted_success"] for e in pe)
    wrong = sum(e["success"] != e["predicted_success"] for e in pe)
    assert res["episode_success_f1"] == pytest.approx(2 * tp / (2 * tp + wrong) if tp + wrong else 0.0)
    assert (tmp_path / "eval" / "psnr_vs_horizon.png").stat().st_size > 0
    assert len(list((tmp_path / "eval" / "videos").glob("*.mp4"))) == 1


def test_cli_presets_and_help():
    from world_models.fidelity import EvalWorldModelConfig
    from world_models.training import TrainWorldModelConfig

    for preset in ("quick", "full", "gpu64"):
        cfg = load_config(TrainWorldModelConfig, preset, ["steps=7", "model.sampler.scheduler=flow_match_euler"],
                          group="world_model")
        assert cfg.steps == 7 and cfg.model.sampler.scheduler == "flow_match_euler"
        assert cfg.clips.chunk_len == 8 and cfg.clips.context_frames == 4
    gpu = load_config(TrainWorldModelConfig, "gpu64", [], group="world_model")
    assert gpu.mixed_precision == "bf16" and gpu.model.denoiser.attention and gpu.clips.views == ["agentview"]
    # the bootstrapping ramp ends inside the run, so the model trains on its own predictions
    assert gpu.bootstrap.ramp_start + gpu.bootstrap.ramp_steps < gpu.steps
    assert "checkpoint" in build_parser(EvalWorldModelConfig, "eval", "eval_world_model").format_help()
    assert "bootstrap" in build_parser(TrainWorldModelConfig, "train", "world_model").format_help()
