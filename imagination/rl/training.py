"""RL post-training of a policy inside the world model (GRPO or PPO), with checkpoints that resume.

Every iteration: collect `num_groups` x `group_size` imagined episodes (`imagination.rl.rollout`), turn
them into advantages, run `rl.epochs` passes of clipped-surrogate updates. The batch of iteration i
is a pure function of (seed, i) and the policy, so a run stopped and resumed from its checkpoint
continues exactly as if it had not stopped. No real simulator is created: all interaction is imagined.

Outputs in out_dir (config.yaml too, written by the callers: scripts/imagine_rl.py, bench/rl_gain.py): policy.pt
(the latest policy, `Policy.load`), checkpoint.pt (policy,
optimizer, iteration, history; atomic), metrics.csv and logs/ (tensorboard), proprio.pt (the proprio
model, fitted on start_data with the world model's chunk length when none is given), grasp_judge.pt (reward
"grasp" given training data and no judge file: imagination/rewards/grasp.py `judge_for_run`), videos/ (imagined
episodes, one frame per chunk), result.json.

Under `accelerate launch --num_processes N` (infra.data_parallel) each process imagines num_groups / N
keyframe groups with its own seed (from seed, iteration and process index), and the update is
data-parallel: gradients are averaged over the processes after every minibatch, so the replicas stay
equal. GRPO's advantages are computed within a group, so they do not depend on N; PPO's batch
normalisation of advantages is per process. The logged figures are over every process's episodes. The
main process alone writes files; the checkpoint is the one-process format, and a run resumes exactly
with the same N.
"""
from __future__ import annotations

import copy
import json
import math
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch
from torch.utils.tensorboard import SummaryWriter
from tqdm import tqdm

from envs.frames import tile_views
from envs.libero_env import LiberoEnv
from imagination.rl.algo import freeze, make_optimizer, update
from imagination.rl.anchor import AnchorConfig, make_anchor
from imagination.rl.checkpoint import load_checkpoint, save_checkpoint, stored_identity
from imagination.rl.config import EXPLORATION_MODES, ImagineRLConfig
from imagination.rl.early_stop import (
    EarlyStopper,
    approach_observations,
    heldout_success,
    mean_chunks,
    move_from,
)
from imagination.rl.exploration_check import exploration_gap
from imagination.rl.frame_adapt import adapt_once
from imagination.rl.rollout import Rollouts, collect_rollouts, to_batch
from imagination.rl.run_envs import heldout_env, load_rl_env, start_indices
from imagination.rl.run_identity import check_same_run, run_identity
from imagination.rl.stats import imagined_stats, write_metrics
from infra.atomic import atomic_write_json
from infra.crash_points import crash_point
from infra.data_parallel import GradientSync, check_replicas, data_parallel, mean_over_processes
from infra.provenance import provenance
from policies.base import Policy
from robot_data.dataset import encode_preview


def exploration_log_std(cfg: ImagineRLConfig, actions: np.ndarray) -> torch.Tensor:
    """log std [7] of the exploration noise RL starts with (cfg.exploration), from actions [N, 7] of the data."""
    uniform = torch.full((actions.shape[-1],), float(cfg.init_log_std))
    if cfg.exploration == "uniform":
        return uniform
    spread = torch.as_tensor(np.asarray(actions, np.float64).std(axis=0), dtype=torch.float32)
    # a dimension the data never varies would get std 0: keep a floor of 1e-3
    scaled = (cfg.exploration_data_scale * spread).clamp_min(1e-3).log()
    return torch.minimum(uniform, scaled)


def adapted_start(cfg: ImagineRLConfig) -> str:
    """The run's start adapted to the world model's frames (cfg.adapt, filled in from the run; made once, reused on
    resume, and by every run given the same adapt.out_dir): the path of its policy."""
    if not Path(cfg.policy).is_file():
        raise FileNotFoundError(f"policy: {cfg.policy!r} is not a file (the start to adapt, a Policy.save checkpoint)")
    data = cfg.adapt.data or cfg.bc_data or cfg.start_data
    return adapt_once(replace(cfg.adapt, policy=cfg.policy, world_model=cfg.world_model, proprio=cfg.proprio,
                              data=data, out_dir=cfg.adapt.out_dir or str(Path(cfg.out_dir) / "adapt"),
                              num_threads=cfg.num_threads, device=cfg.imagination.device,
                              action_guidance=cfg.adapt.action_guidance or cfg.imagination.action_guidance))


def bc_anchor(cfg: ImagineRLConfig, policy: Policy, generator: torch.Generator | None = None):
    """cfg's anchor (imagination/rl/anchor.py): a closure returning cfg.bc_coef x its loss on a fresh batch
    drawn by `generator` (default: one seeded with cfg.seed)."""
    acfg = AnchorConfig(cfg.bc_coef, cfg.bc_target, cfg.bc_phase, cfg.bc_episodes_per_task,
                        cfg.imagination.keyframes.release_lead)
    tasks = list(cfg.bc_tasks or cfg.tasks)
    return make_anchor(acfg, policy, cfg.bc_data or cfg.start_data, tasks, cfg.rl.minibatch_size, cfg.seed,
                       features=cfg.imagination.features, generator=generator)


def _write_videos(folder: Path, r: Rollouts, n: int) -> list[str]:
    """One mp4 per imagined episode (first n envs): the observation before each chunk, 2x upscaled."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for e in range(min(n, len(r.length))):
        rows = np.flatnonzero(r.episode == e)
        frames = r.image[rows[np.argsort(r.step[rows])]]  # [T, V, H, W, 3]
        tiled = tile_views(frames, scale=2)
        tag = "success" if r.success[e] else "fail"
        path = folder / f"imagined{e:02d}_start{r.keyframe[e, 0]}-{r.keyframe[e, 1]}_{tag}.mp4"
        encode_preview(path, tiled, fps=4)
        paths.append(str(path))
    return paths


def train_rl(cfg: ImagineRLConfig, progress: bool = True) -> dict:
    """Run (or resume) imagined RL to cfg.iterations; returns the summary also written to result.json."""
    cfg.rl.validate()
    cfg.heldout.validate()
    if cfg.iterations < 1 or cfg.num_groups < 1 or cfg.group_size < 1:
        raise ValueError(f"iterations, num_groups and group_size must be >= 1, got "
                         f"{cfg.iterations}, {cfg.num_groups}, {cfg.group_size}")
    if cfg.exploration not in EXPLORATION_MODES:
        raise ValueError(f"exploration: expected one of {list(EXPLORATION_MODES)}, got {cfg.exploration!r}")
    if not cfg.exploration_data_scale > 0:
        raise ValueError(f"exploration_data_scale: expected a number > 0, got {cfg.exploration_data_scale}")
    if not 0 <= cfg.exploration_check <= 1:
        raise ValueError(f"exploration_check: expected a share of episodes in [0, 1] (0: off), got "
                         f"{cfg.exploration_check}")
    if cfg.group_size % cfg.imagination.noise_group:
        raise ValueError(f"imagination.noise_group: envs share noise within a group of {cfg.group_size} episodes "
                         f"(group_size): expected a divisor of it, got {cfg.imagination.noise_group}")
    if any(not isinstance(t, int) or t < 0 for t in cfg.bc_tasks):
        raise ValueError(f"bc_tasks: expected a list of task ids >= 0 ([] = tasks), got {cfg.bc_tasks}")
    if cfg.rl.algo == "grpo" and cfg.group_size < 2:
        raise ValueError("group_size: GRPO compares episodes within a group; expected >= 2")
    if cfg.checkpoint_every < 0:
        raise ValueError(f"checkpoint_every: expected iterations between checkpoints >= 0 (0: only at the last), got "
                         f"{cfg.checkpoint_every}")
    if not cfg.obs_noise >= 0:
        raise ValueError(f"obs_noise: expected a pixel-noise std >= 0 (0-255 units), got {cfg.obs_noise}")
    if cfg.obs_shift < 0:
        raise ValueError(f"obs_shift: expected a shift >= 0 in pixels, got {cfg.obs_shift}")
    identity = run_identity(cfg)  # before the run fills in its own paths (adapted start, judge file)
    stored = Path(cfg.out_dir) / "checkpoint.pt"
    if cfg.resume and stored.exists():  # refused before anything is built
        check_same_run(stored_identity(stored), identity, stored, defaults=run_identity(ImagineRLConfig()))
    torch.set_num_threads(cfg.num_threads)
    acc = data_parallel(cfg.device)  # None unless started by `accelerate launch` with several processes
    rank, processes = (acc.process_index, acc.num_processes) if acc else (0, 1)
    if cfg.num_groups % processes:
        raise ValueError(f"num_groups: {cfg.num_groups} groups do not split evenly over {processes} processes; "
                         f"use a multiple of {processes}")
    groups, main = cfg.num_groups // processes, rank == 0  # this process's share; the main one writes files
    sync = GradientSync(acc) if acc else None
    device = cfg.device
    if acc and cfg.device != "cpu":  # each process on its own GPU, the world model too
        device = str(acc.device)
        cfg = replace(cfg, imagination=replace(cfg.imagination, device=device))
    out = Path(cfg.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    if cfg.adapt.steps > 0:
        if acc and not main:  # the main process adapts; the others reuse what it wrote
            acc.wait_for_everyone()
        cfg = replace(cfg, policy=adapted_start(cfg))
        if acc and main:
            acc.wait_for_everyone()
    if not Path(cfg.policy).is_file():
        raise FileNotFoundError(f"policy: {cfg.policy!r} is not a file "
                                "(a Policy.save checkpoint, e.g. from train_bc.py)")
    policy = Policy.load(cfg.policy, map_location=device, modules=cfg.policy_modules)
    if acc and not main:  # the main process fits and caches the proprio model (when none is given) first
        acc.wait_for_everyone()
    env = load_rl_env(cfg, out, policy, groups * cfg.group_size)
    if acc and main:
        acc.wait_for_everyone()
    log_std = policy.noise_log_std()  # the exploration noise of the policy's sample (Policy's RL contract)
    if not math.isnan(cfg.init_log_std) and log_std is not None:
        # the spread the demonstrations show: expert episodes only (the perturbed ones add noise on purpose)
        expert = set(start_indices(cfg, "expert"))
        picked = start_indices(cfg)  # env.episodes follow this order
        eps = [ep for i, ep in zip(picked, env.episodes) if i in expert] or env.episodes
        actions = np.concatenate([ep.action for ep in eps])
        with torch.no_grad():
            log_std.copy_(exploration_log_std(cfg, actions).to(log_std).expand_as(log_std))
    # The reference shares the exploration noise, so the KL measures how far the mean has moved.
    reference = copy.deepcopy(policy).eval() if cfg.rl.kl_coef > 0 else None
    freeze(policy, cfg.frozen)
    optimizer, schedule = make_optimizer(policy, cfg.rl)
    anchor_gen = torch.Generator().manual_seed(cfg.seed) if cfg.bc_coef > 0 else None
    anchor = bc_anchor(cfg, policy, anchor_gen) if anchor_gen is not None else None
    ckpt_path, start = out / "checkpoint.pt", 0
    history: list[dict] = []
    scores: list[tuple[int, float]] = []
    before = 0.0  # seconds spent by the processes this run resumes
    trained_by: list[dict] = []  # the provenance of each process that trained this run before this one
    if cfg.resume and ckpt_path.exists():
        start, history, scores, before, trained_by = load_checkpoint(ckpt_path, policy, optimizer, anchor_gen,
                                                                      schedule)
    trained_by = [*trained_by, provenance(cfg.seed)]
    best_path, stopper, check_env = out / "best_policy.pt", None, None
    approach, start_chunks = None, None  # the held-out approach frames and the start policy's chunks on them
    if cfg.heldout.every:
        check_env = heldout_env(cfg, env)
        if cfg.heldout.max_move:
            approach = approach_observations(check_env, cfg.heldout.move_every, cfg.heldout.move_phase,
                                             env.cfg.keyframes.release_lead)
            if approach is None:
                held = cfg.heldout.start_data or cfg.start_data
                raise ValueError(f"heldout.max_move: the held-out episodes of {held} have no step in "
                                 f"heldout.move_phase {cfg.heldout.move_phase!r} to measure the move on")
            # from the file, not `policy`: a resumed run's policy has moved already
            start_policy = Policy.load(cfg.policy, map_location=device, modules=cfg.policy_modules)
            start_chunks = mean_chunks(start_policy, approach)
        moves = [(int(r["iteration"]), float(r["heldout_move"])) for r in history if "heldout_move" in r]
        stopper = EarlyStopper.replay(cfg.heldout.patience, cfg.heldout.min_delta, scores, moves,
                                      cfg.heldout.max_move)
        if not stopper.scores:  # the starting policy is the first candidate: RL must beat it to replace it
            stopper.observe(0, heldout_success(check_env, policy, cfg.seed))
            if main:
                policy.save(best_path)
    end = start if stopper is not None and stopper.should_stop else cfg.iterations  # a resumed run that had stopped
    check_path = out / "exploration_check.json"
    if start == 0 and main:  # a run started over in this folder reports no check of an earlier run
        check_path.unlink(missing_ok=True)
    if cfg.exploration_check > 0 and start == 0:  # the start's reading; a resumed run has moved on from it
        policy.eval()
        gap = exploration_gap(env, policy, max(1, env.num_envs // 2), cfg.seed)
        if main:
            print(gap.report(cfg.exploration_check), flush=True)
            atomic_write_json(check_path, {"tolerance": cfg.exploration_check, **gap.as_dict(),
                                           "warned_tasks": sorted(gap.drops(cfg.exploration_check)),
                                           "under_read_tasks": sorted(gap.under_reads(cfg.exploration_check))},
                              indent=2)
    writer = SummaryWriter(str(out / "logs")) if main else None
    bar = tqdm(range(start, end), initial=start, total=cfg.iterations, desc=f"imagined {cfg.rl.algo}",
               unit="it", disable=not (progress and main))
    t0, rollouts, real_steps_before = time.time(), None, LiberoEnv.process_steps
    # a run resumed past its last iteration: the videos that iteration wrote (before its checkpoint)
    videos = sorted(str(p) for p in (out / "videos").glob("imagined*.mp4")) if start == end else []
    for it in bar:
        # with several processes each imagines its own groups: its own keyframes and noise
        seed = int(np.random.SeedSequence([cfg.seed, it, *([rank] if acc else [])]).generate_state(1)[0])
        policy.eval()
        rollouts = collect_rollouts(env, policy, groups, cfg.group_size, seed, obs_noise=cfg.obs_noise,
                                    obs_shift=cfg.obs_shift)
        batch = to_batch(rollouts, cfg.rl, policy, reference)
        logs = update(policy, optimizer, batch, cfg.rl, np.random.default_rng(seed), anchor, sync, schedule)
        if acc:  # every process logged the same figures (the keys depend on the config only): their means
            logs = dict(zip(sorted(logs), mean_over_processes(acc, [logs[k] for k in sorted(logs)])))
        noise = policy.noise_log_std()
        row = {"iteration": it + 1, **imagined_stats(acc, rollouts, env), **logs,
               "std": float(noise.detach().exp().mean()) if noise is not None else float("nan")}
        history.append(row)
        crash_point("rl.iteration")
        for k, v in row.items():
            if k != "iteration" and writer:
                writer.add_scalar(k, v, it + 1)
        bar.set_postfix(success=f"{row['imagined_success_rate']:.2f}", ret=f"{row['imagined_return']:.2f}")
        checked = stopper is not None and (it + 1) % cfg.heldout.every == 0
        if checked:
            assert stopper is not None and check_env is not None  # both are set when cfg.heldout.every
            # every process checks (the same policy, env and seed: the same score), so all stop together
            row["heldout_success"] = heldout_success(check_env, policy, cfg.seed)
            if approach is not None and start_chunks is not None:
                row["heldout_move"] = move_from(start_chunks, policy, approach)
            if writer:
                for key in ("heldout_success", "heldout_move"):
                    if key in row:
                        writer.add_scalar(key, row[key], it + 1)
            if stopper.observe(it + 1, row["heldout_success"], row.get("heldout_move")) and main:
                policy.save(best_path)
        if main and (it + 1 == cfg.iterations or (stopper is not None and stopper.should_stop)):
            # the last iteration's videos before the checkpoint that records it: a run killed after that
            # checkpoint resumes past the last iteration, with no rollouts left to draw them from
            videos = _write_videos(out / "videos", rollouts, cfg.videos)
        if checked or (cfg.checkpoint_every and (it + 1) % cfg.checkpoint_every == 0) or it + 1 == cfg.iterations:
            check_replicas(acc, policy)
            if main:  # the replicas are equal: one policy and one checkpoint hold every process's state
                policy.save(out / "policy.pt")
                save_checkpoint(ckpt_path, policy, optimizer, it + 1, history, stopper.scores if stopper else [],
                                 anchor_gen, schedule, before + time.time() - t0, identity, trained_by)
            if acc:  # no process runs ahead of a checkpoint not yet on disk
                acc.wait_for_everyone()
            crash_point("rl.checkpoint_saved")
        if stopper is not None and stopper.should_stop and main:
            print(f"imagined RL: stopped after iteration {it + 1}: no better held-out success in "
                  f"{cfg.heldout.patience} checks (best {stopper.best_score:.3f} at iteration "
                  f"{stopper.best_iteration})")
            break
    if writer:
        writer.close()
    crash_point("rl.before_result")
    if main:
        write_metrics(out / "metrics.csv", history)
        if not (out / "policy.pt").exists():
            policy.save(out / "policy.pt")
    result = {"policy_path": str(best_path if stopper else out / "policy.pt"), "iterations": len(history),
              "start_policy": cfg.policy,  # the policy RL started from: the adapted one when cfg.adapt.steps > 0
              "seconds": before + time.time() - t0,
              "algo": cfg.rl.algo,
              "real_env_steps": LiberoEnv.process_steps - real_steps_before, "history": history, "videos": videos,
              "first": history[0] if history else {}, "last": history[-1] if history else {},
              # no jobs of its own: iteration i's keyframes and noise follow from (seed, i). The first process's:
              # a run resumed under another commit says so in resumed_provenance, one entry per later process
              "provenance": trained_by[0]}
    if len(trained_by) > 1:
        result["resumed_provenance"] = trained_by[1:]
    if check_path.is_file():
        result["exploration_check"] = json.loads(check_path.read_text())
    if stopper is not None:  # which policy policy_path is, and why
        result["heldout"] = {"scores": stopper.scores, "best_iteration": stopper.best_iteration,
                             "best_success": stopper.best_score, "stopped_early": stopper.should_stop,
                             "moves": stopper.moves, "max_move": cfg.heldout.max_move}
    if main:
        atomic_write_json(out / "result.json", result, indent=2)
    if acc:
        acc.wait_for_everyone()  # every file is written when any process returns
        acc.end_training()  # leaves the process group
    return result


__all__ = ["EXPLORATION_MODES", "ImagineRLConfig", "exploration_log_std", "train_rl"]
