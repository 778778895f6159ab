"""Policy ranking: does the world model order policies as real LIBERO does?

    python bench/rank.py                     # quick preset: outputs/demo world model and data
    python bench/rank.py --world-model outputs/world_model/quick/world_model.pt \\
        --data outputs/data/libero_spatial_quick --out-dir outputs/bench/rank_quick

Trains its own policies on the expert episodes of --data, reading the views the world model
imagines (the quick world model imagines agentview only), at the world model's image size and chunk
length:

    bc_s{N}    one BC run (--bc-steps), snapshots at each of --snapshots
    bc         the same run at its end
    bc_few     BC on --few-episodes expert episodes per task (same steps)
    bc_noisy   bc with sampled actions, its log-std set to log(--noise-std)
    random     uniform random actions (--no-random drops it)

Then evaluates every policy on the same jobs twice: in real LIBERO (fast render, as the data was
recorded) and in imagination, each imagined episode starting at frame 0 of the real episode of
--data with the same task and official init state (see imagination.eval.imagined). Jobs are keyed
by (task, init state, seed), with --episodes-per-task init states per task from --init-offset.
Prints a table of real and imagined success per policy, the Spearman rank correlation of the two
success-rate vectors, and `BENCH rank ... PASS|FAIL`; exits 1 when the correlation is below
--threshold (0.8 on the quick preset) or undefined (a constant vector, e.g. every policy at 0).
As a check of the world model itself, the recorded actions of the successful expert episodes are
replayed open loop in imagination from frame 0 (`expert_replay_imagined=k/n`; all n succeeded in
real LIBERO): a world model that rarely reaches success on them cannot rank policies by success.

Everything is cached in --out-dir (trained policies, per-policy results keyed by checkpoint hash
and evaluation settings): a rerun skips finished parts, a changed setting redoes only what it
touches. On 2 CPU cores shared with a world-model training run the defaults took ~42 minutes
(BC 4, real LIBERO 27, imagination 10), most of it in real LIBERO; --episodes-per-task scales both
evaluations.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import sys
import time
from dataclasses import asdict
from pathlib import Path

os.environ.setdefault("MUJOCO_GL", "egl")

import torch
from scipy.stats import spearmanr

from bench.inputs import demo_path, report_missing
from bench.rank_candidates import (
    Candidate,
    RandomOnViews,
    RandomOnViewsConfig,
    expert_episodes,
    make_candidates,
)
from imagination.episodes import load_start_episodes
from imagination.eval.calibrate import replay_success_prob
from imagination.eval.evaluate import evaluate, make_eval_env
from imagination.eval.jobs import EnvSpec, EvalConfig, EvalEnv
from imagination.imagine import open_proprio
from infra.errors import run_main
from infra.provenance import provenance
from policies.remote import is_remote
from robot_data.dataset import EpisodeDataset, is_dataset
from world_models.model import WorldModel
from world_models.proprio import ProprioModel


class SharedEnvs:
    """An env factory for evaluate() that keeps real LIBERO vector envs open across policies.

    Starting the worker processes and loading LIBERO costs ~30-60 s on a busy 2-core machine, per
    policy otherwise. Every job resets its env with its own task, init state and seed, so reuse does
    not change results. Imagined envs are built fresh (cheap), so their noise does not depend on the
    order policies are evaluated in.
    """

    def __init__(self):
        self._open: dict[tuple, EvalEnv] = {}

    def __call__(self, cfg: EvalConfig, spec: EnvSpec, first_tasks: list[int]):
        if cfg.env == "imagination":
            return make_eval_env(cfg, spec, first_tasks)
        key = (cfg.env, spec, len(first_tasks), cfg.max_steps, cfg.fast_render, cfg.videos > 0)
        if key not in self._open:
            self._open[key] = make_eval_env(cfg, spec, first_tasks)
        return _KeepOpen(self._open[key])

    def close(self) -> None:
        for env in self._open.values():
            env.close()
        self._open.clear()


class _KeepOpen:
    def __init__(self, env):
        self._env, self.num_envs = env, env.num_envs

    def __getattr__(self, name):
        return getattr(self._env, name)

    def close(self) -> None:  # SharedEnvs.close does it
        pass


def _digest(obj) -> str:
    return hashlib.sha1(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()[:12]


def _file_digest(path: str) -> str:
    if path == "random":
        return "random"
    if is_remote(path):  # a served policy has no bytes here; its results are never reused (run_eval)
        return path
    return hashlib.sha1(Path(path).read_bytes()).hexdigest()[:12]


def imagined_replay(wm: WorldModel, proprio: ProprioModel, data: str, tasks: list[int], max_steps: int,
                    sampling_steps: int, seed: int, device: str = "cpu") -> dict:
    """The world model's own check: replay each successful expert episode's recorded actions, open loop,
    in imagination from its frame 0. Real LIBERO succeeded on every one of them; an imagination that
    rarely does cannot rank policies by success either. Success: the head passes the model's threshold."""
    ds = EpisodeDataset(data, verify=False)
    picked = expert_episodes(ds, tasks)
    eps = load_start_episodes(data, list(wm.cfg.views), picked)
    probs = replay_success_prob(wm, proprio, eps, max_steps=max_steps, sampling_steps=sampling_steps or None,
                                batch_size=len(eps), seed=seed, device=device)
    success = probs >= wm.cfg.head.success_threshold
    return {"successes": int(success.sum()), "episodes": len(eps), "episode_index": picked,
            "success": success.tolist(), "threshold": wm.cfg.head.success_threshold}


IMAGINATION_ONLY = ("world_model", "start_data", "proprio", "sampling_steps", "success_threshold", "device")


def run_eval(cand: Candidate, cfg: EvalConfig, label: str, extra_key: dict, wm: WorldModel, envs: SharedEnvs) -> dict:
    """evaluate() with a cache: out_dir/results.json is reused when the key (checkpoint bytes, settings) matches."""
    out = Path(cfg.out_dir)
    cfg_key = {k: v for k, v in asdict(cfg).items() if k not in ("out_dir", "num_envs", "num_threads")}
    if cfg.env != "imagination":  # a real evaluation does not depend on the imagination's settings
        cfg_key = {k: v for k, v in cfg_key.items() if k not in IMAGINATION_ONLY}
    key = {"checkpoint": _file_digest(cand.checkpoint), "config": cfg_key, **extra_key}
    key_path, res_path = out / "key.json", out / "results.json"
    cacheable = not is_remote(cand.checkpoint)  # what a server answers can change under the same address
    if cacheable and res_path.is_file() and key_path.is_file() and json.loads(key_path.read_text()) == key:
        result = json.loads(res_path.read_text())
        result["cached"] = True
    else:
        print(f"  {label:>8} {cand.name}: evaluating ...", flush=True)
        if key_path.is_file():
            key_path.unlink()
        policy = None
        if cand.checkpoint == "random":
            policy = RandomOnViews(RandomOnViewsConfig(chunk_len=wm.chunk_len, seed=cfg.seed, views=list(wm.cfg.views),
                                                       image_size=wm.cfg.denoiser.image_size))
        result = evaluate(cfg, policy=policy, progress=False, env_factory=envs)
        key_path.write_text(json.dumps(key, indent=2))
        result["cached"] = False
    o = result["overall"]
    print(f"  {label:>8} {cand.name}: {o['successes']}/{o['episodes']} ({result['timing']['seconds']:.0f} s"
          f"{', cached' if result['cached'] else ''})", flush=True)
    return result


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--world-model", default=demo_path("world_model"), help="a WorldModel file")
    p.add_argument("--data", default=demo_path("data"),
                   help="real episodes: BC training data and the starts of imagined episodes")
    p.add_argument("--out-dir", default="outputs/bench/rank", help="cache of policies and results (resumable)")
    p.add_argument("--tasks", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--episodes-per-task", type=int, default=6,
                   help="init states per task (the imagined starts need a recorded episode from each)")
    p.add_argument("--init-offset", type=int, default=0, help="first official init state of each task")
    p.add_argument("--max-steps", type=int, default=160,
                   help="control steps per episode, real and imagined (expert episodes take ~85-110)")
    p.add_argument("--seed", type=int, default=0, help="BC seed and evaluation job seeds")
    p.add_argument("--bc-steps", type=int, default=2000)
    p.add_argument("--snapshots", type=int, nargs="*", default=[100, 300, 1000], help="BC steps kept as policies")
    p.add_argument("--few-episodes", type=int, default=1, help="expert episodes per task for bc_few")
    p.add_argument("--noise-std", type=float, default=0.5, help="action std of bc_noisy")
    p.add_argument("--no-random", action="store_true", help="leave the uniform random policy out")
    p.add_argument("--policy", action="append", default=[], metavar="NAME=CHECKPOINT",
                   help="also rank this policy: a Policy.save file or ws://host:port of a policy server (repeatable); "
                        "its views, image size and chunk length must match the world model's")
    p.add_argument("--num-envs", type=int, default=2, help="real LIBERO worker processes")
    p.add_argument("--imagined-envs", type=int, default=6, help="imagined episodes run as one batch")
    p.add_argument("--sampling-steps", type=int, default=0, help="denoising steps per chunk; 0 = the model's")
    p.add_argument("--threads", type=int, default=1, help="torch threads for BC training and real-env policies")
    p.add_argument("--only", choices=["both", "imagined", "real"], default="both",
                   help="evaluate one side only (no correlation; for splitting a run)")
    p.add_argument("--device", default="cpu", help="where the world model runs for the imagined side (cpu, cuda)")
    p.add_argument("--threshold", type=float, default=0.8, help="minimum Spearman correlation")
    args = p.parse_args(argv)
    if report_missing("rank", [("world model", args.world_model, Path(args.world_model).is_file()),
                               ("dataset", args.data, is_dataset(args.data))], instead="give --world-model, --data"):
        return 2
    if args.noise_std <= 0:
        p.error("--noise-std: expected > 0")
    t0 = time.time()
    torch.set_num_threads(args.threads)
    out = Path(args.out_dir)
    wm = WorldModel.load(args.world_model)
    print(f"rank: world model {args.world_model} (views {list(wm.cfg.views)}, {wm.cfg.denoiser.image_size} px), "
          f"data {args.data}, tasks {args.tasks} x {args.episodes_per_task} episodes, max {args.max_steps} steps",
          flush=True)
    print("policies:", flush=True)
    cands = make_candidates(args, wm)
    t_train = time.time() - t0

    # One proprio model for every imagined evaluation (imagination.eval.imagined would fit it again per policy).
    proprio_path = out / "proprio.pt"
    proprio_key = out / "proprio.key"
    meta = [m.as_dict() for m in EpisodeDataset(args.data, verify=False).meta]  # the digest the dicts always gave
    pkey = _digest([str(Path(args.data).resolve()), meta])
    if not proprio_key.is_file() or proprio_key.read_text() != pkey:
        proprio_path.unlink(missing_ok=True)  # fitted on other data
    # fitted on every episode of --data with the world model's chunk length (again when the cached one's differs)
    proprio = open_proprio(wm, fit_data=args.data, cache=proprio_path)
    proprio_key.write_text(pkey)

    common = dict(tasks=list(args.tasks), episodes_per_task=args.episodes_per_task,
                  init_state_offset=args.init_offset, seed=args.seed, max_steps=args.max_steps, videos=0,
                  fast_render=True)
    sides = {"imagined": args.only in ("both", "imagined"), "real": args.only in ("both", "real")}
    results: dict[str, dict[str, dict]] = {"real": {}, "imagined": {}}
    wm_key = {"world_model": _file_digest(args.world_model), "start_data": pkey}

    def eval_config(side: str, c: Candidate) -> EvalConfig:
        if side == "real":
            return EvalConfig(checkpoint=c.checkpoint, env="libero_spatial", num_envs=args.num_envs,
                              deterministic=c.deterministic, num_threads=args.threads,
                              out_dir=str(out / "eval" / "real" / c.name), **common)
        return EvalConfig(checkpoint=c.checkpoint, env="imagination", world_model=args.world_model,
                          start_data=args.data, proprio=str(proprio_path), sampling_steps=args.sampling_steps,
                          num_envs=args.imagined_envs, deterministic=c.deterministic, device=args.device,
                          num_threads=max(args.threads, 2), out_dir=str(out / "eval" / "imagined" / c.name), **common)

    replay = None
    if sides["imagined"]:
        replay_path = out / "eval" / "imagined_expert_replay.json"
        rkey = {**wm_key, "tasks": list(args.tasks), "max_steps": args.max_steps, "seed": args.seed,
                "sampling_steps": args.sampling_steps, "replay": "recorded length, model threshold"}
        cached = json.loads(replay_path.read_text()) if replay_path.is_file() else {}
        if cached.get("key") == rkey:
            replay = cached["result"]
        else:
            torch.set_num_threads(max(args.threads, 2))
            replay = imagined_replay(wm, proprio, args.data, list(args.tasks), args.max_steps,
                                     args.sampling_steps, args.seed, args.device)
            replay_path.parent.mkdir(parents=True, exist_ok=True)
            replay_path.write_text(json.dumps({"key": rkey, "result": replay,
                                               "provenance": provenance(args.seed, {"tasks": list(args.tasks)})},
                                              indent=2))
        print(f"world model check: the recorded actions of {replay['episodes']} successful expert episodes, "
              f"replayed in imagination from frame 0, succeed in {replay['successes']}", flush=True)

    envs = SharedEnvs()
    try:
        for side in ("imagined", "real"):
            if sides[side]:
                print(f"{side}:", flush=True)
                for c in cands:
                    extra = wm_key if side == "imagined" else {}
                    results[side][c.name] = run_eval(c, eval_config(side, c), side, extra, wm, envs)
    finally:
        envs.close()

    # Imagined starts must match the real ones: the start data needs an episode per (task, init state).
    starts = {(m.task_id, m.init_state_id) for m in EpisodeDataset(args.data, verify=False).meta}
    exact = inexact = 0
    for r in results["imagined"].values():
        for e in r["episodes"]:
            if (e["task_id"], e["init_state_id"]) in starts:
                exact += 1
            else:
                inexact += 1

    def rate(side: str, name: str) -> float | None:
        r = results[side].get(name)
        return r["overall"]["success_rate"] if r else None

    def cell(side: str, name: str) -> str:
        r = results[side].get(name)
        if not r:
            return f"{'-':<16}"
        o = r["overall"]
        return f"{o['successes']:>2}/{o['episodes']:<3} = {o['success_rate']:.2f}".ljust(16)

    print()
    print(f"{'policy':<11} {'real':<16} {'imagined':<16}   what")
    for c in cands:
        print(f"{c.name:<11} {cell('real', c.name)} {cell('imagined', c.name)}   {c.about}")
    wall = time.time() - t0
    # evaluation seconds as recorded by each evaluation (also for cached ones), and this invocation's wall time
    evals = [r for side in results.values() for r in side.values()]
    eval_s = {side: sum(r["timing"]["seconds"] for r in results[side].values()) for side in results}
    timing = (f"real_eval_s={eval_s['real']:.0f} imagined_eval_s={eval_s['imagined']:.0f} "
              f"cached={sum(r['cached'] for r in evals)}/{len(evals)} train_s={t_train:.0f} wall_s={wall:.0f}")
    n_eps = len(args.tasks) * args.episodes_per_task
    head = f"BENCH rank policies={len(cands)} episodes_per_policy={n_eps} tasks={','.join(map(str, args.tasks))}"
    if inexact:
        print(f"warning: {inexact} imagined episodes started from another init state of the same task "
              f"({args.data} has no episode from theirs): real and imagined starts differ there")
    if args.only != "both":
        print(f"{head} only={args.only} {timing} (no correlation: one side evaluated)")
        if replay:
            print(f"expert_replay_imagined={replay['successes']}/{replay['episodes']}")
        return 0
    real = [rate("real", c.name) for c in cands]
    imag = [rate("imagined", c.name) for c in cands]
    rho = float(spearmanr(real, imag).statistic) if len(set(real)) > 1 and len(set(imag)) > 1 else float("nan")
    exact_field = f"exact_starts={exact}/{exact + inexact}"
    if replay:
        exact_field += f" expert_replay_imagined={replay['successes']}/{replay['episodes']}"
    if math.isnan(rho):
        which = [side for side, v in (("real", real), ("imagined", imag)) if len(set(v)) <= 1]
        print(f"Spearman undefined: every policy has the same {' and '.join(which)} success rate "
              f"({', '.join(f'{v[0]:.2f}' for s, v in (('real', real), ('imagined', imag)) if s in which)}): "
              f"nothing to rank; more episodes or more distinct policies are needed")
        print(f"{head} spearman=nan threshold={args.threshold} {exact_field} {timing} FAIL")
        return 1
    ok = rho >= args.threshold
    print(f"{head} spearman={rho:.3f} threshold={args.threshold} {exact_field} {timing} {'PASS' if ok else 'FAIL'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(run_main(main))  # input errors as one line, exit 2 (infra/errors.py)
