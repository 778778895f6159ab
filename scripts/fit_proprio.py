"""Fit imagination's proprio model (the robot state after each action of a chunk) on recorded datasets.

    python scripts/fit_proprio.py 'data=[outputs/bench/rl_gain/data,outputs/bench/rl_gain/own_rollouts/data]' \\
        out=outputs/bench/rl_gain/proprio_own.pt model.chunk_len=8

Without a proprio file, imagination fits one on its start data (the demonstrations). A policy's own
rollouts move the arm in ways the demonstrations do not, and fitted on both the model drifts less where
the policy acts (docs/loop.md). Pass the file as `proprio=` to imagine_rl, eval_policy (imagined) and the
benches. The chunk length must be the world model's.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch

from envs.atomic import atomic_write_text
from envs.cli import run_script
from envs.dataset import EpisodeDataset
from world_models.proprio import FitProprioConfig, ProprioModel, chunk_pairs, fit_proprio


def main(cfg: FitProprioConfig) -> dict:
    states, actions = [], []
    for d in cfg.data:
        if not (Path(d) / "meta" / "info.json").is_file():
            raise SystemExit(f"data: {d} is not an episode dataset (no meta/info.json)")
        ds = EpisodeDataset(d, verify=False)
        for i in range(len(ds)):
            s, a = ds.arrays(i)  # the numbers only: no video decoded
            states.append(s)
            actions.append(a)
    print(f"fitting the proprio model on {len(states)} episodes of {len(cfg.data)} datasets "
          f"(chunk {cfg.model.chunk_len}, history {cfg.model.history}, {cfg.model.steps} steps)")
    model, losses = fit_proprio(states, actions, cfg.model)
    Path(cfg.out).parent.mkdir(parents=True, exist_ok=True)
    model.save(cfg.out)
    # one-step error on the training pairs, in metres of end-effector position: a sanity figure, not held out
    s0, hist, acts, targets, mask = chunk_pairs(states, actions, cfg.model.chunk_len, cfg.model.history)
    n = min(len(s0), 4096)
    pred = ProprioModel.load(cfg.out).predict(*(torch.from_numpy(x[:n]) for x in (s0, acts, hist)))
    err = np.linalg.norm((pred.numpy() - targets[:n])[..., :3], axis=-1)[mask[:n] > 0]
    result = {"out": cfg.out, "episodes": len(states), "data": list(cfg.data),
              "final_loss": float(np.mean(losses[-50:])), "train_eef_error_cm_median": float(np.median(err) * 100)}
    atomic_write_text(Path(cfg.out).with_suffix(".json"), json.dumps(result, indent=2))
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    run_script(main, FitProprioConfig, __doc__, group="fit_proprio")
