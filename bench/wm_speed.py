"""Imagination speed: world-model frames/s at batch 1/8/32 with 1 and 3 sampler steps, next to real
LIBERO control steps/s measured in the same run.

    python bench/wm_speed.py                                     # quick preset architecture, random weights
    python bench/wm_speed.py --checkpoint outputs/world_model/quick/world_model.pt --sim-steps 50
    python bench/wm_speed.py --checkpoint wm.pt --device cuda --real-steps-per-s 3.9   # GPU box without LIBERO

One imagined frame = one predicted observation after one action (a chunk of K gives K frames), the
world model's counterpart of one real control step. Speed does not depend on the weights, so
without a checkpoint the quick preset's architecture is timed. Prints one line per setting, the
ratio imagined/real, and a final `BENCH wm_speed ... PASS|FAIL`; exits 1 when the best imagined
frames/s is below --min-ratio times the real steps/s.
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

from bench.inputs import report_missing
from infra.cli import load_config
from infra.errors import run_main
from world_models.model import WorldModel
from world_models.train_setup import model_config_for_data
from world_models.training import TrainWorldModelConfig


def imagined_fps(model: WorldModel, batch: int, steps: int, seconds: float) -> float:
    """Frames/s of `predict` at this batch size and sampler step count (>= 2 timed calls or `seconds`),
    on the model's device; GPU work is synchronized before the clock is read."""
    d = model.cfg.denoiser
    device = next(model.parameters()).device
    g = torch.Generator().manual_seed(0)
    ctx = (torch.rand(batch, d.context_frames, d.channels, d.image_size, d.image_size, generator=g) * 2 - 1).to(device)
    anc, act = ctx[:, 0].clone(), (torch.rand(batch, d.chunk_len, d.action_dim, generator=g) * 2 - 1).to(device)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    model.predict(ctx, anc, act, steps=steps)  # warm-up
    sync()
    n, t0 = 0, time.perf_counter()
    while n < 2 or time.perf_counter() - t0 < seconds:
        model.predict(ctx, anc, act, steps=steps)
        n += 1
        sync()
    return n * batch * d.chunk_len / (time.perf_counter() - t0)


def real_steps_per_s(steps: int, fast_render: bool) -> float:
    from envs.libero_env import LiberoEnv, LiberoEnvConfig

    env = LiberoEnv(LiberoEnvConfig(chunk_len=1, max_steps=steps + 10, fast_render=fast_render))
    try:
        env.reset(seed=0, options={"init_state_id": 0})
        acts = np.random.default_rng(0).uniform(-0.3, 0.3, size=(steps, 1, 7)).astype(np.float32)
        t0 = time.perf_counter()
        for a in acts:
            env.step(a)
        return steps / (time.perf_counter() - t0)
    finally:
        env.close()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--checkpoint", default="", help="a WorldModel file (default: the quick preset, untrained)")
    p.add_argument("--batches", type=int, nargs="+", default=[1, 8, 32])
    p.add_argument("--sampler-steps", type=int, nargs="+", default=[1, 3])
    p.add_argument("--seconds", type=float, default=3.0, help="timing budget per setting")
    p.add_argument("--sim-steps", type=int, default=60, help="real LIBERO control steps timed")
    p.add_argument("--fast-render", action="store_true", help="time LIBERO with fast_render=True")
    p.add_argument("--threads", type=int, default=0, help="torch threads (0 = default)")
    p.add_argument("--device", default="cpu", help="where the world model runs (cpu, cuda)")
    p.add_argument("--real-steps-per-s", type=float, default=0.0,
                   help="use this real LIBERO steps/s (measured elsewhere) instead of timing LIBERO here, "
                        "e.g. on a GPU machine without LIBERO; printed as real_source=given")
    p.add_argument("--min-ratio", type=float, default=1.0)
    args = p.parse_args(argv)
    needed = [("world model", args.checkpoint, Path(args.checkpoint).is_file())]
    if args.checkpoint and report_missing("wm_speed", needed,
                                          instead="leave --checkpoint out to time the quick architecture untrained"):
        return 2
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    if args.checkpoint:
        model = WorldModel.load(args.checkpoint)
    else:
        cfg = load_config(TrainWorldModelConfig, "quick", group="world_model")
        model = WorldModel(model_config_for_data(cfg, image_size=64)).eval()
    model = model.to(args.device)
    d = model.cfg.denoiser
    print(f"world model: {sum(p.numel() for p in model.parameters()) / 1e6:.2f}M params, {d.image_size} px, "
          f"K={d.chunk_len}, C={d.context_frames}, views={model.cfg.views}, device={args.device}, "
          f"threads={torch.get_num_threads()}", flush=True)
    figures: dict[str, float] = {}
    for steps in args.sampler_steps:
        for b in args.batches:
            fps = imagined_fps(model, b, steps, args.seconds)
            figures[f"wm_b{b}_s{steps}"] = fps
            print(f"  imagined: batch {b:>3}, {steps} step(s): {fps:8.1f} frames/s", flush=True)
    if args.real_steps_per_s > 0:
        real, source = args.real_steps_per_s, "given"
        print(f"  real LIBERO: {real:.1f} steps/s (given, not measured in this run)", flush=True)
    else:
        real, source = real_steps_per_s(args.sim_steps, args.fast_render), "measured"
        print(f"  real LIBERO (2 cameras, {'fast' if args.fast_render else 'default'} render): {real:.1f} steps/s",
              flush=True)
    best_key = max(figures, key=figures.__getitem__)
    ratio_b1 = figures.get(f"wm_b1_s{args.sampler_steps[0]}", 0.0) / real
    ratio_best = figures[best_key] / real
    ok = ratio_best >= args.min_ratio
    fields = " ".join(f"{k}={v:.1f}" for k, v in figures.items())
    print(f"BENCH wm_speed {fields} real_steps_per_s={real:.1f} real_source={source} device={args.device} "
          f"ratio_b1_s{args.sampler_steps[0]}={ratio_b1:.2f} ratio_best={ratio_best:.2f} best={best_key} "
          f"threshold_ratio={args.min_ratio} {'PASS' if ok else 'FAIL'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(run_main(main))  # input errors as one line, exit 2 (infra/errors.py)
