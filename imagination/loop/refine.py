"""The world model refined on the recipe's own real episodes before imagined RL (bench/rl_gain.py
--refine-world-model STEPS), or trained afresh on them and the protocol's data from another preset, e.g. one GPU's
(--world-model-preset NAME).

The loop (imagination/loop/run.py) fine-tunes its world model after each round on the policy's new real episodes. A
protocol recipe already consumes real episodes its world model never trained on: the start's own rollouts on the
training init states (recorded for the goal reader, the keyframes and the anchor), failures included, which is the
behaviour imagination must render for RL to see it. The protocol's world model trained on the demonstrations and the
scripted near-misses alone. Refining it on the own rollouts as well is the loop's fine-tune
(imagination/loop/config.py finetune_config) fed no real episode the recipe does not already consume: every arm's
real-data budget stays what it was, and the real-data control already imitates those episodes' successes.
"""
from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from imagination.loop.config import LoopConfig, finetune_config
from infra.atomic import atomic_write_text
from infra.cli import load_config
from world_models.training import TrainWorldModelConfig, train_world_model

SPLIT_KEYS = ("holdout_fraction", "holdout_min", "split_seed")  # what decides which data episodes are held out


def refine_world_model(loop: LoopConfig, world_model: str, data: str, own: str, out_dir: str, steps: int,
                       views: Sequence[str]) -> str:
    """`world_model` fine-tuned for `steps` on `data` (split as it was: its held-out episodes stay held out) and every
    episode of `own`, with the loop preset's fine-tune settings (its policy-episode weight, bootstrapping from its
    final probability) into `out_dir`; made once, resumed when interrupted, reused when done. Returns the model file."""
    if steps < 1:
        raise ValueError(f"--refine-world-model: expected fine-tune steps >= 1, got {steps}")
    if (done := _finished(out_dir)) is not None:
        return done
    cfg = finetune_config(replace(loop, finetune_steps=steps), data, out_dir, world_model, failure_weight=1.0)
    cfg = replace(cfg, clips=replace(cfg.clips, extra_train_dirs=[own], views=list(views)))
    print(f"[refine] fine-tuning {world_model} for {steps} steps on {data} and the own rollouts {own}")
    return _train(cfg)


def retrain_world_model(preset: str, world_model: str, data: str, own: str, out_dir: str,
                        overrides: Sequence[str] = ()) -> str:
    """A world model of the preset `preset` (configs/world_model/, e.g. rl_gain_gpu: 16M parameters for one GPU)
    trained afresh on `data`, held out as the protocol's model `world_model` held it out (its config.yaml's split and
    views), and on every episode of `own`, into `out_dir`; made once, resumed when interrupted, reused when done.
    Returns the model file. Why afresh: a larger denoiser cannot start from the protocol's smaller one."""
    parent = Path(world_model).parent / "config.yaml"
    if not parent.is_file():
        raise FileNotFoundError(f"--world-model-preset: {parent} not found (the config.yaml beside the protocol's "
                                "world model, whose held-out split the new model keeps)")
    if (done := _finished(out_dir)) is not None:
        return done
    split = load_config(TrainWorldModelConfig, str(parent), group="world_model").clips
    cfg = load_config(TrainWorldModelConfig, preset, list(overrides), group="world_model")
    clips = replace(cfg.clips, data_dir=data, extra_train_dirs=[own], views=list(split.views),
                    **{k: getattr(split, k) for k in SPLIT_KEYS})
    cfg = replace(cfg, out_dir=out_dir, clips=clips)
    print(f"[world model] training the {preset} preset for {cfg.steps} steps on {data} and the own rollouts {own}")
    return _train(cfg)


def _finished(out_dir: str) -> str | None:
    """The model file of a training that finished in out_dir (its done.json), else None. Why not the model file
    alone: training rewrites it at every checkpoint, so an interrupted run leaves one too; that run resumes."""
    done = Path(out_dir) / "done.json"
    if not done.is_file():
        return None
    path = json.loads(done.read_text())["model_path"]
    print(f"[world model] reusing {path}")
    return str(path)


def _train(cfg: TrainWorldModelConfig) -> str:
    result = train_world_model(cfg)
    atomic_write_text(Path(cfg.out_dir) / "done.json", json.dumps(
        {"model_path": result["model_path"], "steps": result["steps"], "seconds": result["seconds"]}, indent=2))
    return str(result["model_path"])


__all__ = ["refine_world_model", "retrain_world_model"]
