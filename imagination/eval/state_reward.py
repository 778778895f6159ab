"""Train the state reward (world_models/object_state.py) on a dataset's per-step simulator labels, and
score it against real outcomes (scripts/train_state_reward.py).

Every `holdout_every`-th labelled episode is held out; on those, the object is carried along the
recorded robot states from the first row and the highest success probability is compared with the
episode's real outcome (AUC within task), the figure the imagined reward is judged by.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import torch

from imagination.eval.closed_loop import outcome_separation
from robot_data.dataset import EpisodeDataset, is_dataset
from robot_data.label_collection import load_labelled
from world_models.object_state import StateRewardConfig, fit_state_reward, labelled_episodes, track


@dataclass
class TrainStateRewardConfig:
    data_dir: str = "outputs/bench/rl_gain/data"
    label_dirs: list[str] = field(default_factory=list)  # scripts/collect_labels.py out_dirs, added to training
    # recorded datasets labelled by scripts/label_episodes.py, added to training whole (none held out), e.g.
    # the policy's own real rollouts, whose grasps are not the expert's
    train_data_dirs: list[str] = field(default_factory=list)
    out: str = "outputs/state_reward/state_reward.pt"
    model: StateRewardConfig = field(default_factory=StateRewardConfig)
    holdout_every: int = 5  # every 5th labelled episode is held out for the figures (0 = none)
    num_threads: int = 1


def train_state_reward(cfg: TrainStateRewardConfig) -> dict:
    """Fit the state reward, save it to cfg.out and its held-out figures to <out>.json; returns those."""
    torch.set_num_threads(cfg.num_threads)
    episodes, kept = labelled_episodes(cfg.data_dir)
    if not episodes:
        raise SystemExit(f"data_dir: {cfg.data_dir} has no episode with per-step simulator labels; "
                         "label it with scripts/label_episodes.py (tasks without a pick-and-place object have none)")
    held = [k for k in range(len(episodes)) if cfg.holdout_every and k % cfg.holdout_every == cfg.holdout_every - 1]
    train = [e for k, e in enumerate(episodes) if k not in held]
    for d in cfg.label_dirs:
        if not Path(d).is_dir():
            raise SystemExit(f"label_dirs: {d} is not a directory (scripts/collect_labels.py writes one)")
        extra, _ = load_labelled(d)
        print(f"  + {len(extra)} simulated episodes from {d}")
        train += extra
    for d in cfg.train_data_dirs:
        if not is_dataset(d):
            raise SystemExit(f"train_data_dirs: {d} is not a recorded dataset (no meta/info.json)")
        extra, _ = labelled_episodes(d)
        if not extra:
            raise SystemExit(f"train_data_dirs: {d} has no episode with per-step simulator labels; "
                             "label it with scripts/label_episodes.py")
        print(f"  + {len(extra)} labelled recorded episodes from {d}")
        train += extra
    model, log = fit_state_reward(train, cfg.model)
    model.save(cfg.out)
    meta = EpisodeDataset(cfg.data_dir, verify=False).meta
    best = [float(track(model, episodes[k])[1].max(initial=0.0)) for k in held]
    real = [bool(meta[kept[k]].success) for k in held]
    sep = outcome_separation(np.array(best), np.array(real), np.array([meta[kept[k]].task_id for k in held])) \
        if held else None
    result = {"model": cfg.out, "train_episodes": len(train), "held_out_episodes": len(held),
              "final_object_loss": float(np.mean(log["object_loss"][-50:])),
              "final_success_loss": float(np.mean(log["success_loss"][-50:])),
              "held_out_auc": None if sep is None else sep.auc,
              "held_out_auc_within_task": None if sep is None else sep.auc_within_task, "config": asdict(cfg)}
    Path(cfg.out).with_suffix(".json").write_text(json.dumps(result, indent=2))
    print(f"state reward: {cfg.out} ({len(train)} episodes; object loss {result['final_object_loss']:.4f}, "
          f"success loss {result['final_success_loss']:.4f})")
    if sep is not None:
        print(f"  held out ({len(held)} episodes, recorded robot states): AUC {sep.auc:.3f}, "
              f"AUC within task {sep.auc_within_task:.3f}")
    return result


__all__ = ["TrainStateRewardConfig", "train_state_reward"]
