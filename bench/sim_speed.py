"""Real LIBERO simulation speed: control steps/s with two cameras, single env and 2-worker vector env.

    python bench/sim_speed.py            # 64 and 128 px, default and fast rendering
    python bench/sim_speed.py --quick    # fewer steps

Prints one line per setting and a final `BENCH sim_speed ... PASS|FAIL` line; exits 1 when the
single-env 64 px default-rendering speed is below --min-steps-per-s (a sign that headless
rendering fell back to something pathological). Reset time is reported apart from stepping.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

os.environ.setdefault("MUJOCO_GL", "egl")

import numpy as np

from envs.libero_env import LiberoEnv, LiberoEnvConfig
from envs.vector_env import LiberoVectorEnv
from infra.errors import run_main


def _actions(rng: np.random.Generator, n: int, batch: int | None = None) -> np.ndarray:
    # Small random motions keep the arm near its start pose: the cost measured is physics + render.
    shape = (n, 1, 7) if batch is None else (n, batch, 1, 7)
    return rng.uniform(-0.3, 0.3, size=shape).astype(np.float32)


def bench_single(cfg: LiberoEnvConfig, steps: int, seed: int = 0) -> tuple[float, float]:
    """Returns (steps/s, reset seconds) for one env stepping one action at a time."""
    env = LiberoEnv(cfg)
    try:
        t0 = time.perf_counter()
        env.reset(seed=seed, options={"init_state_id": 0})
        reset_s = time.perf_counter() - t0
        acts = _actions(np.random.default_rng(seed), steps)
        t0 = time.perf_counter()
        for a in acts:
            env.step(a)
        return steps / (time.perf_counter() - t0), reset_s
    finally:
        env.close()


def bench_vector(cfg: LiberoEnvConfig, steps: int, workers: int = 2, seed: int = 0) -> float:
    """Total env steps/s summed over `workers` subprocess envs."""
    venv = LiberoVectorEnv(cfg, num_envs=workers)
    try:
        venv.reset(seed=[seed + i for i in range(workers)], options={"init_state_id": list(range(workers))})
        acts = _actions(np.random.default_rng(seed), steps, batch=workers)
        t0 = time.perf_counter()
        for a in acts:
            venv.step(a)
        return workers * steps / (time.perf_counter() - t0)
    finally:
        venv.close()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="30 steps per setting instead of 100")
    p.add_argument("--steps", type=int, default=None, help="control steps per setting (after the reset)")
    p.add_argument("--sizes", type=int, nargs="+", default=[64, 128], help="square image sizes in px")
    p.add_argument("--workers", type=int, default=2, help="vector env worker processes")
    p.add_argument("--min-steps-per-s", type=float, default=2.0, help="threshold: single env, 64 px, default render")
    args = p.parse_args(argv)
    steps = args.steps or (30 if args.quick else 100)
    # Horizon above the measured steps: no truncation, hence no autoreset inside the timing.
    base = LiberoEnvConfig(suite="libero_spatial", task_id=0, chunk_len=1, max_steps=steps + 10)
    figures: dict[str, float] = {}
    for size in args.sizes:
        for fast in (False, True):
            cfg = LiberoEnvConfig(**{**base.__dict__, "image_size": size, "fast_render": fast})
            tag = f"{size}px_{'fast' if fast else 'default'}"
            single, reset_s = bench_single(cfg, steps)
            vector = bench_vector(cfg, steps, args.workers)
            figures[f"single_{tag}"], figures[f"vec{args.workers}_{tag}"] = single, vector
            print(f"{tag:>14}: single env {single:6.1f} steps/s  (reset {reset_s:4.1f} s)   "
                  f"vector env x{args.workers} {vector:6.1f} steps/s", flush=True)
    key = "single_64px_default"
    ok = figures.get(key, 0.0) >= args.min_steps_per_s
    fields = " ".join(f"{k}={v:.1f}" for k, v in figures.items())
    print(f"BENCH sim_speed cameras=2 steps={steps} {fields} threshold_{key}={args.min_steps_per_s} "
          f"{'PASS' if ok else 'FAIL'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(run_main(main))  # input errors as one line, exit 2 (infra/errors.py)
