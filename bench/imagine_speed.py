"""Imagination env speed with the policy in the loop, next to the real LIBERO vector env.

    python bench/imagine_speed.py                                    # quick-preset world model, untrained
    python bench/imagine_speed.py --world-model outputs/demo/world_model/world_model.pt

One env step = one control step (a chunk of K counts K). Both sides run the built-in VLA on the
same kind of observation (agentview, 64 px): `ImaginationVectorEnv` at batch 1/8/32 (success
termination off, so every step imagines a whole chunk) and
`LiberoVectorEnv` with 2 worker processes, measured in the same run. Prints one line per setting,
the ratio imagined/real, and `BENCH imagine_speed ... PASS|FAIL`; exits 1 when the best imagined
steps/s is below --min-ratio times the real steps/s. Speed does not depend on the weights.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("MUJOCO_GL", "egl")

import numpy as np
import torch

from bench.inputs import demo_path, report_missing
from imagination.env import ImaginationConfig
from imagination.episodes import load_start_episodes
from imagination.imagine import open_imagination
from infra.cli import load_config
from infra.errors import run_main
from policies.vla import VLAConfig, VLAPolicy
from robot_data.dataset import is_dataset
from world_models.model import WorldModel
from world_models.proprio import ProprioConfig, ProprioModel
from world_models.train_setup import model_config_for_data
from world_models.training import TrainWorldModelConfig


def timed_rollout(env, policy, chunks: int, seed: int = 0) -> float:
    """Control steps/s of `chunks` chunked steps of `env` (after one warm-up step) with `policy` acting."""
    obs, _ = env.reset(seed=seed)
    actions = policy.predict_action_chunk(obs).numpy()
    obs, *_ = env.step(actions)
    steps, t0 = 0, time.perf_counter()
    for _ in range(chunks):
        actions = policy.predict_action_chunk(obs).numpy()
        obs, _, _, _, info = env.step(actions)
        steps += int(np.sum(info["steps"])) if "steps" in info else actions.shape[0] * actions.shape[1]
    return steps / (time.perf_counter() - t0)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--world-model", default="", help="a WorldModel file (default: quick preset, untrained)")
    p.add_argument("--data", default=demo_path("data"), help="real episodes to start from (default: the demo's)")
    p.add_argument("--batches", type=int, nargs="+", default=[1, 8, 32])
    p.add_argument("--chunks", type=int, default=6, help="timed chunked steps per setting")
    p.add_argument("--sampler-steps", type=int, default=1)
    p.add_argument("--workers", type=int, default=2, help="real LIBERO vector env workers")
    p.add_argument("--min-ratio", type=float, default=1.0)
    args = p.parse_args(argv)
    needed = [("dataset", args.data, is_dataset(args.data))]
    if args.world_model:
        needed.append(("world model", args.world_model, Path(args.world_model).is_file()))
    if report_missing("imagine_speed", needed, instead="give --data, --world-model"):
        return 2
    torch.manual_seed(0)
    if args.world_model:
        wm = WorldModel.load(args.world_model)
    else:
        wm = WorldModel(model_config_for_data(load_config(TrainWorldModelConfig, "quick", group="world_model"), 64))
    wm.eval()
    views = list(wm.cfg.views)
    proprio = ProprioModel(ProprioConfig(chunk_len=wm.chunk_len)).eval()
    policy = VLAPolicy(VLAConfig(views=views, chunk_len=wm.chunk_len)).eval()
    episodes = load_start_episodes(args.data, views)
    figures: dict[str, float] = {}
    # Never terminate: an untrained success head fires at random, and a timed step that only
    # autoresets would count compute that was never spent. Every timed step imagines a whole chunk.
    cfg = ImaginationConfig(sampling_steps=args.sampler_steps, success_threshold=1.01, max_steps=10**6)
    for b in args.batches:
        env = open_imagination(wm, episodes, proprio, num_envs=b, config=cfg)
        figures[f"imagined_b{b}"] = timed_rollout(env, policy, args.chunks)
        print(f"  imagination env, batch {b:>3}: {figures[f'imagined_b{b}']:8.1f} steps/s", flush=True)

    from envs.libero_env import LiberoEnvConfig
    from envs.vector_env import LiberoVectorEnv

    real_env = LiberoVectorEnv(LiberoEnvConfig(views=tuple(views), chunk_len=wm.chunk_len, fast_render=True),
                               num_envs=args.workers)
    try:
        real = timed_rollout(real_env, policy, max(2, args.chunks // 2))
    finally:
        real_env.close()
    print(f"  real LIBERO vector env x{args.workers} (fast render): {real:8.1f} steps/s", flush=True)
    best = max(figures, key=figures.__getitem__)
    ratio = figures[best] / real
    ok = ratio >= args.min_ratio
    fields = " ".join(f"{k}={v:.1f}" for k, v in figures.items())
    print(f"BENCH imagine_speed {fields} real_vec{args.workers}={real:.1f} ratio_best={ratio:.2f} best={best} "
          f"threshold_ratio={args.min_ratio} {'PASS' if ok else 'FAIL'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(run_main(main))  # input errors as one line, exit 2 (infra/errors.py)
