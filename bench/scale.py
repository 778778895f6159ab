"""Scale-out figures: real-LIBERO evaluation episodes/hour on 1 and 2 Ray workers against the local vector env,
imagined env steps/s of imagined RL on 1 and 2 training processes, and the hours a paper-scale evaluation takes.

    python bench/scale.py                                  # ~6 min on 2 cores
    python bench/scale.py --data outputs/demo/data         # start frames for imagined RL from another dataset
    python bench/scale.py --ray-address auto --workers 1 32 --skip-imagined   # on a running Ray cluster

Real evaluation: the lockstep eval envs (local `LiberoVectorEnv`, `RayLiberoVectorEnv`) run --episodes rounds
of --horizon control steps per worker, two 64 px views, fast rendering, chunks of 8 random actions (the policy's
cost is left out: one batched forward pass a chunk, on the driver's GPU in a real run). Start-up (spawning
workers, importing LIBERO) is not timed: it is paid once per run, not per episode.

Imagined RL: scripts/imagine_rl.py as one plain process, then under `accelerate launch` with 2 CPU processes
(the launch tests/distributed.py uses), on an untrained quick-preset world model and VLA (speed does not depend
on the weights), one torch thread per process. Steps/s = imagined control steps / the training loop's seconds
(rollouts and updates), over every process.

Paper estimate: 4 suites x 10 tasks x 50 trials at each suite's standard horizon on N nodes of 32 workers, from
the 1-Ray-worker rate (a worker per core: on a node of 32 cores, no worker shares its core). Every episode is
counted to its horizon, as failures run; successes end earlier, so this is an upper bound.

Prints one line per setting and `BENCH scale ... PASS|FAIL`; FAIL (exit 1) when one Ray worker runs below
--min-ray-ratio times the episodes/hour of one local subprocess (Ray's per-step round trips cost that much).
Exit 2 (one line) when the start data is missing.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

os.environ.setdefault("MUJOCO_GL", "egl")

import numpy as np

from bench.inputs import report_missing
from infra.errors import run_main

REPO = Path(__file__).resolve().parents[1]
DATA = "outputs/bench/scale/data"
MAKE_DATA = (f"python scripts/collect.py out_dir={DATA} 'tasks=[0]' episodes_per_task=2 perturbed_fraction=0 "
             "'views=[agentview]' max_steps=48 preview_videos=0")
CHUNK = 8  # actions per policy call in the real runs (the project's VLA chunk)
PAPER_SUITES = ("libero_spatial", "libero_object", "libero_goal", "libero_10")
PAPER_TASKS, PAPER_TRIALS, CORES_PER_NODE = 10, 50, 32


@dataclass
class RealRun:
    """One timed real-evaluation run: `workers` envs of `backend`, `episodes` rounds of `horizon` steps each."""

    backend: str
    workers: int
    episodes: int
    horizon: int
    reset_s: float = 0.0  # summed over rounds (envs reset in lockstep)
    step_s: float = 0.0

    @property
    def episodes_per_hour(self) -> float:
        return self.workers * self.episodes * 3600 / (self.reset_s + self.step_s)

    @property
    def worker_steps_per_s(self) -> float:
        return self.episodes * self.horizon / self.step_s  # each worker ran episodes x horizon steps

    @property
    def reset_s_per_episode(self) -> float:
        return self.reset_s / self.episodes


def time_real(backend: str, workers: int, episodes: int, horizon: int, ray_address: str = "") -> RealRun:
    """Time `episodes` lockstep rounds of `horizon` control steps on `workers` envs of `backend`."""
    from gymnasium.vector import AutoresetMode

    from envs.libero_env import LiberoEnvConfig
    from envs.ray_vector_env import RayLiberoVectorEnv
    from envs.vector_env import LiberoVectorEnv

    cfg = LiberoEnvConfig(suite="libero_spatial", task_id=0, views=("agentview", "wrist"), image_size=64,
                          chunk_len=CHUNK, max_steps=horizon, fast_render=True)
    venv = (RayLiberoVectorEnv(cfg, workers, address=ray_address) if backend == "ray"
            else LiberoVectorEnv(cfg, workers, autoreset_mode=AutoresetMode.DISABLED))
    run, rng = RealRun(backend, workers, episodes, horizon), np.random.default_rng(0)
    try:
        for e in range(episodes):
            t0 = time.perf_counter()
            venv.reset(seed=[1000 * e + i for i in range(workers)],
                       options={"init_state_id": [(e * workers + i) % 50 for i in range(workers)]})
            run.reset_s += time.perf_counter() - t0
            t0 = time.perf_counter()
            for _ in range(-(-horizon // CHUNK)):  # truncated at the horizon; random motions do not succeed
                venv.step(rng.uniform(-0.3, 0.3, (workers, CHUNK, 7)).astype(np.float32))
            run.step_s += time.perf_counter() - t0
    finally:
        venv.close()
    return run


def paper_hours(run: RealRun, nodes: int) -> float:
    """Hours of 4 suites x 10 tasks x 50 trials, each to its horizon, on `nodes` x 32 workers at `run`'s rate."""
    from envs.libero_suites import suite_info

    worker_s = sum(PAPER_TASKS * PAPER_TRIALS * (run.reset_s_per_episode
                                                 + suite_info(s).max_steps / run.worker_steps_per_s)
                   for s in PAPER_SUITES)
    return worker_s / (nodes * CORES_PER_NODE) / 3600


def imagined_inputs(data: str, folder: Path) -> list[str]:
    """An untrained quick-preset world model, proprio model and VLA in `folder`, as imagine_rl.py arguments."""
    import torch

    from infra.cli import load_config
    from policies.vla import VLAConfig, VLAPolicy
    from world_models.model import WorldModel
    from world_models.proprio import ProprioConfig, ProprioModel
    from world_models.train_setup import model_config_for_data
    from world_models.training import TrainWorldModelConfig

    torch.manual_seed(0)
    wm = WorldModel(model_config_for_data(load_config(TrainWorldModelConfig, "quick", group="world_model"), 64))
    wm.save(folder / "wm.pt")
    ProprioModel(ProprioConfig(chunk_len=wm.chunk_len)).save(folder / "proprio.pt")
    VLAPolicy(VLAConfig(views=list(wm.cfg.views), chunk_len=wm.chunk_len)).save(folder / "policy.pt")
    return [f"policy={folder / 'policy.pt'}", f"world_model={folder / 'wm.pt'}", f"proprio={folder / 'proprio.pt'}",
            f"start_data={data}", "sources=[]"]


def imagined_command(processes: int, port: int) -> list[str]:
    """scripts/imagine_rl.py as one plain process, or under the `accelerate launch` of tests/distributed.py."""
    script = str(REPO / "scripts" / "imagine_rl.py")
    if processes == 1:
        return [sys.executable, script]
    return [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", str(processes),
            "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no",
            "--main_process_port", str(port), script]


def time_imagined(processes: int, inputs: list[str], out: Path, iterations: int, horizon: int) -> float:
    """Imagined control steps/s of imagined RL (GRPO, 16 episodes an iteration) on `processes` CPU processes."""
    from world_models.model import WorldModel

    args = [*inputs, f"out_dir={out}", f"iterations={iterations}", "num_groups=4", "group_size=4", "videos=0",
            "num_threads=1", "resume=false", f"checkpoint_every={iterations}", "rl.algo=grpo", "rl.epochs=1",
            "rl.minibatch_size=16", f"imagination.max_steps={horizon}", "imagination.keyframes.mode=start",
            "imagination.success_threshold=1.01",  # an untrained success head never ends an episode early
            # the success head's RL, not the shipped recipe the defaults hold (its grasp judge needs labelled data)
            "imagination.reward=head", "imagination.keyframes.balance_tasks=false", "exploration=uniform",
            "bc_coef=0.0", "rl.group_std_floor=0.0", "rl.kl_estimator=k3"]
    env = {**os.environ, "ACCELERATE_USE_CPU": "true", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
           "CUDA_VISIBLE_DEVICES": "", "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO),
                                                                                   os.environ.get("PYTHONPATH")]))}
    done = subprocess.run([*imagined_command(processes, 29000 + os.getpid() % 1000), *args], cwd=REPO, env=env,
                          capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"imagine_rl.py on {processes} process(es) failed:\n{done.stderr[-3000:]}")
    result = json.loads((out / "result.json").read_text())
    chunk = WorldModel.load(inputs[1].split("=", 1)[1]).chunk_len
    samples = sum(row["imagined_samples"] for row in result["history"])  # chunks, over every process
    return samples * chunk / result["seconds"]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--workers", type=int, nargs="+", default=[1, 2], help="real-eval worker counts per backend")
    p.add_argument("--episodes", type=int, default=3, help="timed episodes per worker and setting")
    p.add_argument("--horizon", type=int, default=48, help="control steps per real episode")
    p.add_argument("--ray-address", default="", help="Ray cluster ('' = a new local one, 'auto' = the running one)")
    p.add_argument("--data", default=DATA, help="real episodes whose frames start imagined ones")
    p.add_argument("--processes", type=int, nargs="+", default=[1, 2], help="imagined-RL training processes")
    p.add_argument("--iterations", type=int, default=3, help="imagined-RL iterations per setting")
    p.add_argument("--imagined-horizon", type=int, default=40, help="control steps per imagined episode")
    p.add_argument("--nodes", type=int, nargs="+", default=[1, 4], help="32-core nodes of the paper estimate")
    p.add_argument("--min-ray-ratio", type=float, default=0.8, help="threshold: Ray / local episodes/h, fewest workers")
    p.add_argument("--skip-real", action="store_true")
    p.add_argument("--skip-imagined", action="store_true")
    args = p.parse_args(argv)
    for name in ("workers", "processes", "nodes"):
        if min(getattr(args, name)) < 1:
            raise ValueError(f"--{name}: expected integers >= 1, got {getattr(args, name)}")
    from robot_data.dataset import is_dataset  # here, not at the top, as this bench's other heavy imports

    if not args.skip_imagined and report_missing("scale", [("dataset", args.data, is_dataset(args.data))],
                                                 make=MAKE_DATA, instead="give --data, or --skip-imagined"):
        return 2
    fields: dict[str, float] = {}
    if not args.skip_real:
        runs = {}
        for backend in ("local", "ray"):
            for w in args.workers:
                run = runs[backend, w] = time_real(backend, w, args.episodes, args.horizon, args.ray_address)
                fields[f"real_{backend}_x{w}_eph"] = run.episodes_per_hour
                print(f"  real eval, {backend:>5} x{w}: {run.episodes_per_hour:7.0f} episodes/h  "
                      f"({run.worker_steps_per_s:5.1f} steps/s a worker, reset {run.reset_s_per_episode:4.1f} s, "
                      f"{args.horizon}-step episodes)", flush=True)
        w = min(args.workers)
        fields["ray_to_local"] = runs["ray", w].episodes_per_hour / runs["local", w].episodes_per_hour
        base = runs["ray", w]
        fields["ray_worker_steps_per_s"] = base.worker_steps_per_s
        fields["ray_reset_s"] = base.reset_s_per_episode
        for n in args.nodes:
            fields[f"paper_hours_{n}node"] = paper_hours(base, n)
            print(f"  paper estimate: 4 suites x 10 tasks x 50 trials on {n} x {CORES_PER_NODE}-core node(s): "
                  f"{fields[f'paper_hours_{n}node']:.2f} h", flush=True)
    if not args.skip_imagined:
        with tempfile.TemporaryDirectory(prefix="bench_scale_") as tmp:
            inputs = imagined_inputs(args.data, Path(tmp))
            for n in args.processes:
                fields[f"imagined_p{n}_steps_per_s"] = rate = time_imagined(
                    n, inputs, Path(tmp) / f"p{n}", args.iterations, args.imagined_horizon)
                print(f"  imagined RL, {n} process(es): {rate:7.1f} imagined steps/s", flush=True)
    ok = fields.get("ray_to_local", 1.0) >= args.min_ray_ratio  # nothing to judge when --skip-real
    print("BENCH scale " + " ".join(f"{k}={v:.2f}" for k, v in fields.items())
          + f" threshold_ray_to_local={args.min_ray_ratio} {'PASS' if ok else 'FAIL'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(run_main(main))  # input errors as one line, exit 2 (infra/errors.py)
