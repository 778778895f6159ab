"""Evaluate a policy checkpoint in an environment: success rate per task with 95% Wilson intervals.

The loop knows two things only: a `Policy` (policies.base) and an `EvalEnv`, built by
`make_eval_env` from `EvalConfig.env`: a LIBERO suite (real simulation) or "imagination" (the
world model, started from the same tasks and official init states as the real env). Callers with
another env pass their own factory to `evaluate(..., env_factory=...)`. Every episode is a `Job`
(task, official init state, seed): its seed depends on (seed, task, episode number) only, so
results do not depend on how many envs run in parallel or in what order episodes finish.
"""
from __future__ import annotations

import json
import logging
import math
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path

import numpy as np
import torch
from scipy.stats import binomtest
from tqdm import tqdm

from envs import libero_suites
from envs.frames import tile_views
from envs.outcome import FIGURES, failure_counts, outcome
from imagination.eval.jobs import EnvFactory, EnvSpec, EvalConfig, EvalEnv, Job
from imagination.eval.libero import LiberoEvalEnv
from imagination.eval.partial import PARTIAL, PartialEpisodes, partial_key, resumable
from infra.atomic import atomic_write_json
from infra.provenance import provenance
from policies.base import Policy, RandomPolicy, RandomPolicyConfig
from policies.remote import RemotePolicy, RemotePolicyConfig, is_remote
from robot_data.dataset import encode_preview

IMAGINATION = "imagination"


def make_eval_env(cfg: EvalConfig, spec: EnvSpec, first_tasks: list[int]) -> EvalEnv:
    """The env named by `cfg.env`: a real LIBERO suite, or the imagination env over a world model."""
    if cfg.env == IMAGINATION:
        from imagination.eval.imagined import ImaginationEvalEnv  # torch/world-model imports only when used

        return ImaginationEvalEnv(cfg, spec, first_tasks)
    if libero_suites.is_suite(cfg.env):
        return LiberoEvalEnv(cfg, spec, first_tasks)
    raise ValueError(f"env: {cfg.env!r} is not available; expected {IMAGINATION!r} or a LIBERO suite of its "
                     f"benchmark registry: {libero_suites.registry_suites()}")


def load_policy(cfg: EvalConfig) -> Policy:
    if cfg.checkpoint == "random":
        return RandomPolicy(RandomPolicyConfig(chunk_len=cfg.action_steps or 8, seed=cfg.seed))
    if is_remote(cfg.checkpoint):  # a policy server (policies/remote.py)
        if not cfg.deterministic:
            raise ValueError("deterministic: a served policy (checkpoint=ws://...) returns its own actions; "
                             "expected deterministic=true")
        if cfg.remote_protocol == "openpi":  # openpi's metadata has no chunk or image size: the evaluation's
            if not cfg.action_steps:
                raise ValueError("action_steps: an openpi server's chunk length is not in its metadata; set the "
                                 "actions executed per request, e.g. action_steps=5 (openpi's LIBERO example)")
            return RemotePolicy(RemotePolicyConfig(url=cfg.checkpoint, protocol="openpi", chunk_len=cfg.action_steps,
                                                   image_size=cfg.image_size or 224))
        return RemotePolicy(RemotePolicyConfig(url=cfg.checkpoint, protocol=cfg.remote_protocol))
    if not cfg.checkpoint or not Path(cfg.checkpoint).is_file():
        raise FileNotFoundError(f"checkpoint: {cfg.checkpoint!r} is not a file (a Policy.save checkpoint, "
                                "ws://host:port of a policy server, or 'random')")
    return Policy.load(cfg.checkpoint, modules=cfg.policy_modules)


# what a finished evaluation must share with a config to stand for it: the policy, the jobs and what it saw
REUSE_KEYS = ("checkpoint", "env", "tasks", "episodes_per_task", "init_state_offset", "seed", "start_suite",
              "obs_noise", "obs_noise_seed", "image_size")


def finished_results(cfg: EvalConfig) -> dict | None:
    """out_dir/results.json when it is an evaluation of cfg (the same REUSE_KEYS; a key a file written before it
    existed counts as the field's default) written after the checkpoint file last changed; None otherwise, and
    for a checkpoint that is no file (random, a policy server)."""
    path, ckpt = Path(cfg.out_dir) / "results.json", Path(cfg.checkpoint)
    if not (path.is_file() and ckpt.is_file() and path.stat().st_mtime >= ckpt.stat().st_mtime):
        return None
    old = json.loads(path.read_text())
    defaults = EvalConfig()
    same = all(old["config"].get(k, getattr(defaults, k)) == getattr(cfg, k) for k in REUSE_KEYS)
    return old if same else None


def evaluate_or_reuse(cfg: EvalConfig, label: str) -> dict:
    """finished_results(cfg) when there is one, else evaluate(cfg); says which under `label`."""
    path = Path(cfg.out_dir) / "results.json"
    if (old := finished_results(cfg)) is not None:
        print(f"{label}: reusing {path}")
        return old
    print(f"{label}: {len(cfg.tasks) * cfg.episodes_per_task} episodes -> {path}")
    return evaluate(cfg)


def plan_jobs(cfg: EvalConfig, tasks: list[int], num_init_states: Callable[[int], int]) -> list[Job]:
    """Episodes in task order; seeds from (seed, task, j) so they do not depend on scheduling. Episode j starts
    from init state (init_state_offset + j) modulo the task's count, or, with an offset at or above
    DRAWN_LAYOUT_BASE, from drawn layout init_state_offset + j (envs/libero_suites.py), of which there is no end."""
    jobs: list[Job] = []
    drawn = libero_suites.is_drawn_layout(cfg.init_state_offset)
    for task in tasks:
        n = num_init_states(task)
        for j in range(cfg.episodes_per_task):
            seed = int(np.random.SeedSequence([cfg.seed, task, j]).generate_state(1)[0] % 2**31)
            init = cfg.init_state_offset + j if drawn else (cfg.init_state_offset + j) % n
            jobs.append(Job(len(jobs), task, j, init, seed))
    return jobs


def wilson_interval(successes: int, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """Wilson score interval of a success rate (sensible at 0/n and n/n, unlike the normal one)."""
    if n == 0:
        return 0.0, 1.0
    ci = binomtest(successes, n).proportion_ci(confidence_level=confidence, method="wilson")
    return float(ci.low), float(ci.high)


def _next_job(pending: list[Job], current_task: int | None) -> Job | None:
    # Keep an env on its task when possible: switching tasks rebuilds the simulator (~8 s).
    for k, job in enumerate(pending):
        if job.task_id == current_task:
            return pending.pop(k)
    return pending.pop(0) if pending else None


def run_episodes(policy: Policy, env: EvalEnv, jobs: list[Job], cfg: EvalConfig, progress: bool = True,
                 on_record: Callable[[dict], None] | None = None, done: int = 0) -> list[dict]:
    """Run every job to its end; returns one record per job (in job order) and writes videos. `on_record` is
    called with each record as its episode ends (video written); `done` episodes ran before (the bar counts them)."""
    pending, B = list(jobs), env.num_envs
    frames: dict[int, list[np.ndarray]] = {}
    records: dict[int, dict] = {}
    gen = torch.Generator().manual_seed(cfg.seed)
    k = cfg.action_steps or policy.chunk_len
    policy.reset()
    start = [_next_job(pending, None) for _ in range(B)]
    running: list[Job] = [j or jobs[0] for j in start]
    padding = [j is None for j in start]  # env i runs a throw-away episode: no job left, but every env steps
    obs = env.reset_envs(running)
    t_start = [time.time()] * B
    # Imagined envs report the success head's probability: keep each episode's highest, the figure a
    # closed-loop calibration compares with the real outcome of the same job.
    best_prob = np.zeros(B, np.float32)
    restarts = 0  # episodes started over because their worker died (backend ray)
    for i, job in enumerate(running):
        if not padding[i] and job.index < cfg.videos:
            frames[job.index] = [obs["image"][i]]
    if cfg.obs_noise < 0:
        raise ValueError(f"obs_noise: expected a noise std >= 0 in 0-255 intensity units, got {cfg.obs_noise}")
    noise = [_noise_rng(cfg, j) for j in running]
    bar = tqdm(total=len(jobs) + done, initial=done, desc=f"eval {cfg.env}", unit="ep", disable=not progress)
    while len(records) < len(jobs):
        seen = _with_noise(obs, noise, cfg.obs_noise)
        with torch.no_grad():
            chunk = policy.predict_action_chunk(seen) if cfg.deterministic else policy.sample(seen, generator=gen)[0]
        actions = chunk[:, :k].cpu().numpy().astype(np.float32)
        obs, reward, terminated, truncated, info = env.step(actions)
        restart: list[Job | None] = [None] * B
        if "success_prob" in info:
            best_prob = np.maximum(best_prob, info["success_prob"])
        for i, job in enumerate(running):
            if "restarted" in info and info["restarted"][i]:  # its worker died: the job started over (same reset)
                t_start[i], best_prob[i] = time.time(), 0.0
                noise[i] = _noise_rng(cfg, job)
                restarts += 1
                if job.index in frames:
                    frames[job.index] = [obs["image"][i]]
                continue
            if job.index in frames and not padding[i] and "frames" in info:
                frames[job.index].extend(info["frames"][i])
            if not (terminated[i] or truncated[i]):
                continue
            if not padding[i]:
                records[job.index] = {**asdict(job), "success": bool(terminated[i]), "steps": int(info["t"][i]),
                                      "seconds": round(time.time() - t_start[i], 2)}
                if "success_prob" in info:
                    records[job.index]["max_success_prob"] = round(float(best_prob[i]), 4)
                if "object_lift_m" in info:  # real envs: how the episode ended (envs.outcome)
                    for key in FIGURES:
                        v = float(info[key][i])
                        records[job.index][key] = None if math.isnan(v) else round(v, 4)
                    records[job.index]["outcome"] = outcome(bool(terminated[i]), float(info["object_lift_m"][i]))
                if job.index in frames:
                    seq = np.stack(frames.pop(job.index))
                    records[job.index]["video"] = str(_write_video(Path(cfg.out_dir) / "videos", records[job.index],
                                                                   seq))
                if on_record is not None:
                    on_record(records[job.index])
                bar.update(1)
                bar.set_postfix(success=f"{sum(r['success'] for r in records.values())}/{len(records)}")
            nxt = _next_job(pending, job.task_id)
            padding[i] = nxt is None
            restart[i] = running[i] = nxt or job
        if len(records) < len(jobs) and any(r is not None for r in restart):
            obs = env.reset_envs(restart)
            for i, started in enumerate(restart):
                if started is not None:
                    t_start[i] = time.time()
                    noise[i] = _noise_rng(cfg, started)
                    best_prob[i] = 0.0
                    if not padding[i] and started.index < cfg.videos:
                        frames[started.index] = [obs["image"][i]]
    bar.close()
    if restarts:
        logging.getLogger(__name__).warning("%d episode(s) started over after their simulator worker died", restarts)
    return [records[j.index] for j in jobs]


def _noise_rng(cfg: EvalConfig, job: Job) -> np.random.Generator | None:
    return np.random.default_rng([job.seed, cfg.obs_noise_seed]) if cfg.obs_noise > 0 else None


def _with_noise(obs: dict, rngs: list[np.random.Generator | None], std: float) -> dict:
    """obs with N(0, std) added to env i's images uint8 [N, V, H, W, 3] from rngs[i], rounded and clipped to
    uint8; obs itself when std is 0. Only the policy sees it: videos and recordings keep the rendered frames."""
    if std <= 0:
        return obs
    images = obs["image"].astype(np.float32)
    for i, rng in enumerate(rngs):
        if rng is not None:
            images[i] += rng.normal(0.0, std, images[i].shape).astype(np.float32)
    return {**obs, "image": np.clip(np.rint(images), 0, 255).astype(np.uint8)}


def _write_video(folder: Path, record: dict, images: np.ndarray) -> Path:
    tiled = tile_views(images, scale=2)  # [T, 2H, 2VW, 3]
    tag = "success" if record["success"] else "fail"
    path = folder / f"ep{record['index']:03d}_task{record['task_id']}_init{record['init_state_id']}_{tag}.mp4"
    folder.mkdir(parents=True, exist_ok=True)
    encode_preview(path, tiled, fps=20)
    return path


def summarize(records: list[dict], instructions: dict[int, str]) -> dict:
    """Success per task and overall, with 95% Wilson intervals (and failure outcomes, real envs)."""
    def block(rs: list[dict]) -> dict:
        s, n = sum(r["success"] for r in rs), len(rs)
        lo, hi = wilson_interval(s, n)
        out = {"successes": s, "episodes": n, "success_rate": s / n if n else 0.0, "ci95": [lo, hi],
               "mean_steps": float(np.mean([r["steps"] for r in rs])) if rs else 0.0}
        if any("outcome" in r for r in rs):
            out["failures"] = failure_counts(rs)
        return out

    tasks = sorted({r["task_id"] for r in records})
    per_task = {str(t): {"instruction": instructions[t], **block([r for r in records if r["task_id"] == t])}
                for t in tasks}
    return {"overall": block(records), "per_task": per_task}


def evaluate(cfg: EvalConfig, policy: Policy | None = None, progress: bool = True,
             env_factory: EnvFactory = make_eval_env, write: bool = True) -> dict:
    """Evaluate `policy` (default: cfg.checkpoint) in cfg.env; writes out_dir/results.json and videos.

    write=False leaves results.json to the caller, which adds its own figures and writes the file once, so a
    kill never leaves a results.json that a reuse (`finished_results`) would take for a complete one.
    With write=True, a real evaluation keeps each finished episode in out_dir (imagination/eval/partial.py): the
    same call after a stop runs only the episodes it had not finished."""
    if cfg.episodes_per_task < 1 or cfg.num_envs < 1:
        raise ValueError(f"episodes_per_task and num_envs must be >= 1, got {cfg.episodes_per_task}, {cfg.num_envs}")
    torch.set_num_threads(cfg.num_threads)
    policy = (policy or load_policy(cfg)).eval()
    if not 0 <= cfg.action_steps <= policy.chunk_len:
        raise ValueError(f"action_steps: expected 0..{policy.chunk_len} (the policy's chunk_len), "
                         f"got {cfg.action_steps}")
    pcfg = policy.config
    spec = EnvSpec(tuple(getattr(pcfg, "views", ("agentview", "wrist"))),
                   cfg.image_size or int(getattr(pcfg, "image_size", 64)), cfg.action_steps or policy.chunk_len)
    probe_tasks = cfg.tasks or [0]
    env = env_factory(cfg, spec, [probe_tasks[i % len(probe_tasks)] for i in range(cfg.num_envs)])
    try:
        bad = [t for t in cfg.tasks if not 0 <= t < env.num_tasks()]
        if bad:
            raise ValueError(f"tasks: expected task ids in [0, {env.num_tasks() - 1}] for {cfg.env}, got {bad}")
        tasks = cfg.tasks or list(range(env.num_tasks()))
        jobs = plan_jobs(cfg, tasks, env.num_init_states)
        partial = (PartialEpisodes(cfg.out_dir, partial_key(cfg))
                   if write and resumable(cfg, cfg.env == IMAGINATION) else None)
        done = partial.load(jobs) if partial is not None else {}
        if done:
            print(f"eval: {len(done)} of {len(jobs)} episodes reused from {Path(cfg.out_dir) / PARTIAL}")
        todo = [j for j in jobs if j.index not in done]
        t0 = time.time()
        ran = run_episodes(policy, env, todo, cfg, progress, partial.append if partial else None,
                           len(done)) if todo else []
        seconds = time.time() - t0
        by_index = {**done, **{r["index"]: r for r in ran}}
        records = [by_index[j.index] for j in jobs]
        instructions = {t: env.instruction(t) for t in tasks}
    finally:
        env.close()
    steps = sum(r["steps"] for r in ran)  # this run's: the reused episodes' time was spent by an earlier one
    result = {"env": cfg.env, "checkpoint": cfg.checkpoint, "policy": type(policy).__name__,
              **summarize(records, instructions),
              "timing": {"seconds": seconds, "env_steps": steps, "env_steps_per_second": steps / max(seconds, 1e-9),
                         "episodes_per_minute": 60 * len(ran) / max(seconds, 1e-9), "episodes_reused": len(done)},
              "episodes": records, "config": asdict(cfg),
              # versions of the simulator stack and the project, the seed and every job as [task, init state, seed]
              "provenance": provenance(cfg.seed, [(j.task_id, j.init_state_id, j.seed) for j in jobs])}
    if write:
        atomic_write_json(Path(cfg.out_dir) / "results.json", result, indent=2)
        if partial is not None:
            partial.finish()
    return result


__all__ = ["REUSE_KEYS", "evaluate", "evaluate_or_reuse", "finished_results", "load_policy", "make_eval_env",
           "plan_jobs", "run_episodes", "summarize", "wilson_interval"]
