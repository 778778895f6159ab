"""The world model refined on the recipe's own real episodes before imagined RL (bench/rl_gain.py
--refine-world-model STEPS).

The loop (imagination/loop/run.py) fine-tunes its world model after each round on the policy's new real episodes. A
protocol recipe already consumes real episodes its world model never trained on: the start's own rollouts on the
training init states (recorded for the goal reader, the keyframes and the anchor), failures included, which is the
behaviour imagination must render for RL to see it. The protocol's world model trained on the demonstrations and the
scripted near-misses alone. Refining it on the own rollouts as well is the loop's fine-tune
(imagination/loop/config.py finetune_config) fed no real episode the recipe does not already consume: every arm's
real-data budget stays what it was, and the real-data control already imitates those episodes' successes.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from imagination.loop.config import LoopConfig, finetune_config
from world_models.training import train_world_model


def refine_world_model(loop: LoopConfig, world_model: str, data: str, own: str, out_dir: str, steps: int,
                       views: Sequence[str]) -> str:
    """`world_model` fine-tuned for `steps` on `data` (split as it was: its held-out episodes stay held out) and every
    episode of `own`, with the loop preset's fine-tune settings (its policy-episode weight, bootstrapping from its
    final probability) into `out_dir`; made once, resumed when interrupted, reused when done. Returns the model file."""
    if steps < 1:
        raise ValueError(f"--refine-world-model: expected fine-tune steps >= 1, got {steps}")
    out = Path(out_dir) / "world_model.pt"
    if out.is_file():
        print(f"[refine] reusing {out}")
        return str(out)
    cfg = finetune_config(replace(loop, finetune_steps=steps), data, out_dir, world_model, failure_weight=1.0)
    cfg = replace(cfg, clips=replace(cfg.clips, extra_train_dirs=[own], views=list(views)))
    print(f"[refine] fine-tuning {world_model} for {steps} steps on {data} and the own rollouts {own}")
    train_world_model(cfg)
    return str(out)


__all__ = ["refine_world_model"]
