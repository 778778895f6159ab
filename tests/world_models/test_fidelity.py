"""World-model training (world_models.training.train_world_model, scripts/train_world_model.py) and its
open-loop fidelity (world_models.fidelity, scripts/eval_world_model.py) end to end on the square world."""
import json

import numpy as np
import pytest

from infra.cli import build_parser, load_config
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


def test_extra_training_data_keeps_the_held_out_split(square_data, tmp_path):
    """clips.extra_train_dirs: every episode there trains, data_dir's split is unchanged, and the fidelity bench
    refuses to score the extra data as unseen."""
    from robot_data.dataset import DatasetConfig, EpisodeWriter
    from tests.world_models.conftest import square_episode, write_square_dataset
    from world_models.fidelity import EvalWorldModelConfig, evaluate_world_model
    from world_models.training import Trainer

    extra = write_square_dataset(tmp_path / "extra", episodes=3, T=32)
    plain = Trainer(tiny_train_config(square_data, tmp_path / "plain", steps=1))
    cfg = tiny_train_config(square_data, tmp_path / "more", steps=1)
    cfg.clips.extra_train_dirs = [str(extra)]
    more = Trainer(cfg)
    assert [ep.index for ep in more.held_out] == [ep.index for ep in plain.held_out]
    assert len(more.train_episodes) == len(plain.train_episodes) + 3
    split = json.loads((tmp_path / "more" / "split.json").read_text())
    assert split["held_out"] == [ep.index for ep in plain.held_out]
    assert split["extra_train"] == {str(extra): [0, 1, 2]}
    assert "extra_train" not in json.loads((tmp_path / "plain" / "split.json").read_text())
    more.step()
    more.save_checkpoint()  # writes world_model.pt beside split.json
    ecfg = EvalWorldModelConfig(checkpoint=str(tmp_path / "more" / "world_model.pt"), more_data=[str(extra)],
                                max_steps=4, steps=1, videos=0, out_dir=str(tmp_path / "eval"))
    with pytest.raises(ValueError, match="more_data: .* is in the run's clips.extra_train_dirs"):
        evaluate_world_model(ecfg)

    small = tmp_path / "small"  # 8 px frames against the square world's 16
    with EpisodeWriter(small, DatasetConfig(views=("agentview",), image_size=(8, 8), fps=10)) as w:
        w.append(square_episode(np.random.default_rng(0), 12, size=8))
    bad = tiny_train_config(square_data, tmp_path / "bad", steps=1)
    bad.clips.extra_train_dirs = [str(small)]
    with pytest.raises(ValueError, match="clips.extra_train_dirs: .*small holds frames"):
        Trainer(bad)


def test_scoring_a_model_needs_no_simulator():
    """Fidelity and its bench read simulator labels from files; they run where only torch and diffusers are (a GPU
    image): importing them must not import the LIBERO env's gymnasium, MuJoCo or robosuite."""
    import subprocess
    import sys

    code = ("import sys, world_models.fidelity, bench.wm_fidelity; "
            "print(sorted(m for m in ('gymnasium', 'mujoco', 'robosuite', 'libero') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
