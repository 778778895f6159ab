"""Behaviour cloning of the built-in VLA on expert episodes (chunks of K future actions per step).

Every step t of a selected episode is one sample: the observation at t and the actions t..t+K-1.
Near the episode end the chunk runs past the last action; those entries are masked out of the loss
(the episode is over: there is no right action to imitate). Images get a random shift (replicate
padding, DrQ-style), the usual cure for a conv encoder overfitting a few demonstrations.

Checkpoints (`out_dir/checkpoint.pt`, atomic) hold model, optimizer, LR schedule, RNG states and step,
so a stopped run resumed with the same config continues bit for bit.

Under `accelerate launch --num_processes N` the update is data-parallel (infra.data_parallel): each
process draws the same global batch of `batch_size` samples, trains on its 1/N slice, and gradients are
averaged; the main process alone writes the files. A checkpoint is the same file either way, so a run
resumes exactly with the same N (with another N the batches are the same, the float sums not quite).

`out_dir/policy.pt` is the final policy (`Policy.load`), `out_dir/policy_step{N}.pt` the policy at each
of `snapshot_steps`, `out_dir/loss.csv` and `out_dir/logs/` (tensorboard) the loss curve.
"""
from __future__ import annotations

import csv
import json
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch.utils.tensorboard import SummaryWriter
from tqdm import tqdm

from infra.atomic import atomic_torch_save
from infra.checkpoint import CheckpointError, expect_format, load_torch, restore
from infra.cli import save_config
from infra.crash_points import crash_point
from infra.data_parallel import check_replicas, data_parallel, mean_over_processes, shard
from infra.provenance import provenance
from policies.base import Policy
from policies.bc_batch import ChunkData, bc_loss
from policies.vla import VLAConfig, VLAPolicy
from robot_data.dataset import Episode, EpisodeDataset, ReaderConfig


@dataclass
class BCConfig:
    """Behaviour cloning run: data, model, optimisation, bookkeeping."""

    # data_dir .. max_episodes select the episodes; scripts/train_bc.py reads them (policies/ knows no dataset format)
    data_dir: str = "outputs/data/libero_spatial_quick"  # an EpisodeDataset (LeRobot v3 layout)
    # more datasets whose episodes are picked by the same rules (sources, tasks, success_only, episodes_per_task
    # apply to each); proprio stats stay data_dir's. Why: filtered BC on every real episode a run consumed
    # (the demonstrations, the policy's own rollouts) spans several recorded datasets
    extra_data_dirs: list[str] = field(default_factory=list)
    # start from this Policy.save checkpoint (a VLA) instead of fresh weights: a fine-tune. Its architecture and
    # proprio stats are kept; `policy` must describe the same network (views, image size, chunk length)
    init_policy: str = ""
    # which of data_dir's features are the views, the state and the action (robot_data.dataset.ReaderConfig), e.g.
    # features.cameras={agentview: observation.images.image}; the defaults map them automatically
    features: ReaderConfig = field(default_factory=ReaderConfig)
    out_dir: str = "outputs/bc/quick"
    tasks: list[int] = field(default_factory=list)  # empty = every task in the dataset
    sources: list[str] = field(default_factory=lambda: ["expert"])  # episode sources to imitate
    success_only: bool = True  # imitate only episodes that reached success
    max_episodes: int = 0  # 0 = all selected episodes
    # at most this many selected episodes per task, the first in dataset order (0 = all). Why: BC from a
    # few demonstrations leaves the headroom RL needs (bench/rl_gain.py starts from such a policy)
    episodes_per_task: int = 0
    # sampling weight of each task id's training samples (task i -> task_weights[i]; ids past the list: 1.0;
    # empty = every sample equally likely). Why: one demonstration per task leaves some tasks far easier than
    # others; a lower weight trains that task less, so that a BC start has headroom on every task, as the rl_gain
    # protocol asks (15-65% real success per task, docs/loop.md, "The benchmark's protocol")
    task_weights: list[float] = field(default_factory=list)
    policy: VLAConfig = field(default_factory=VLAConfig)
    steps: int = 2000
    batch_size: int = 32
    lr: float = 1e-3
    weight_decay: float = 1e-4
    grad_clip: float = 1.0
    loss: str = "mse"  # "mse" on the chunk mean, or "nll" (Gaussian NLL, also fits the policy's log-std)
    augment_shift: int = 4  # max random image shift in pixels (0 = off)
    # Gaussian pixel noise in training images, its std drawn per sample from U(0, augment_noise) (0-255 units; 0 =
    # off). Why: N(0, 2) noise in the images flips 18% of the real outcomes of the rl_gain protocol's 1-demo BC and
    # RL policies (docs/notebook/loop.md, "The gate's ceiling"): no world model predicts an outcome that turns on single
    # intensity steps. With noise up to 16 in training, the world model's judge ranks the start's outcomes at 0.73
    # within task, against 0.47 (docs/notebook/loop.md, "A start trained with pixel noise").
    augment_noise: float = 0.0
    checkpoint_every: int = 500
    # also save the policy as it was at these steps: out_dir/policy_step{N}.pt (e.g. to compare training stages)
    snapshot_steps: list[int] = field(default_factory=list)
    log_every: int = 50
    seed: int = 0
    num_threads: int = 1  # torch CPU threads (2 threads on a busy 2-core machine run ~10x slower than 1)
    device: str = "cpu"
    resume: bool = True  # continue from out_dir/checkpoint.pt when it exists


def _read_log(path: Path) -> list[dict]:
    if not path.is_file():
        return []
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


_BC_CHECKPOINT = "BC checkpoint (resume=false, or delete it, starts over)"
_BC_KEYS = ("policy", "policy_config", "optimizer", "scheduler", "generator", "torch_rng", "step")


def _resume(path: Path, cfg: BCConfig, policy: VLAPolicy, opt: torch.optim.Optimizer,
            sched: torch.optim.lr_scheduler.LRScheduler, gen: torch.Generator) -> tuple[int, float | None]:
    """Restore a BC run from its checkpoint (tensors and plain data only); the step it had reached and the
    run's first loss (None in checkpoints written before it was kept).

    There is one checkpoint per run (rewritten atomically), so an unusable one has no older one to
    fall back to: CheckpointError names it. Loaded on the CPU: the RNG states must be CPU tensors, and
    load_state_dict moves the weights and optimizer state to the policy's device."""
    ck = expect_format(load_torch(path, _BC_CHECKPOINT), path, _BC_CHECKPOINT, None, _BC_KEYS)
    if ck["policy_config"] != asdict(cfg.policy):
        raise ValueError(f"{path}: saved with another policy config; use a new out_dir or resume=false")
    restore(policy, ck["policy"], path, "policy")
    restore(opt, ck["optimizer"], path, "optimizer")
    restore(sched, ck["scheduler"], path, "LR scheduler")
    try:
        gen.set_state(ck["generator"])
        torch.set_rng_state(ck["torch_rng"])
        first = ck.get("first_loss")
        return int(ck["step"]), None if first is None else float(first)
    except (TypeError, RuntimeError, ValueError) as err:
        raise CheckpointError(f"{path}: its RNG state or step is unusable ({err})") from None


def train_bc(cfg: BCConfig, episodes: Sequence[Any], state_stats: dict | None = None,
             progress: bool = True, on_log: Callable[[dict], None] | None = None) -> dict:
    """Train (or resume) a VLA by BC on `episodes`; returns {"policy_path", "steps", "final_loss", ...}.

    episodes: objects with frames {view: uint8 [T, H, W, 3]}, state float32 [T, 8], action float32
    [T, 7] and instruction str (e.g. `robot_data.dataset.Episode`; selecting them is the caller's job, see
    scripts/train_bc.py). state_stats: {"mean": [8], "std": [8]} (default: over these episodes).
    """
    bad = [n for n in cfg.snapshot_steps if not 1 <= n <= cfg.steps]
    if bad:
        raise ValueError(f"snapshot_steps: expected steps in [1, {cfg.steps}] (steps), got {bad}")
    if not cfg.augment_noise >= 0:
        raise ValueError(f"augment_noise: expected a pixel-noise std >= 0 (0-255 units), got {cfg.augment_noise}")
    if any(not w >= 0 for w in cfg.task_weights):
        raise ValueError(f"task_weights: expected one weight >= 0 per task id, got {list(cfg.task_weights)}")
    torch.set_num_threads(cfg.num_threads)
    acc = data_parallel(cfg.device)  # None unless started by `accelerate launch` with several processes
    rank, processes = (acc.process_index, acc.num_processes) if acc else (0, 1)
    mine = shard(cfg.batch_size, rank, processes)
    main = rank == 0  # writes every file; the other processes only compute
    device = acc.device if acc else cfg.device
    out = Path(cfg.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(cfg.seed)
    policy = _initial_policy(cfg).to(device)
    data = ChunkData(episodes, cfg.policy.views, cfg.policy.chunk_len, cfg.policy.image_size)
    weights = data.sample_weights(cfg.task_weights)
    if state_stats is None:
        state_stats = {"mean": data.state.mean(0), "std": data.state.std(0)}
    if not cfg.init_policy:  # a fine-tune keeps the normalisation its start was trained under
        policy.set_state_stats(state_stats["mean"], state_stats["std"])
    policy.instruction_embeddings(data.instructions)  # encode once, stored in the checkpoint
    # before any resume: every process reads the same checkpoint, so the replicas start equal anyway
    model = acc.prepare_model(policy) if acc else policy
    opt = torch.optim.AdamW(policy.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=max(cfg.steps, 1), eta_min=cfg.lr * 0.05)
    gen = torch.Generator().manual_seed(cfg.seed)
    step, ckpt_path, first_loss = 0, out / "checkpoint.pt", None
    if cfg.resume and ckpt_path.is_file():
        # the first loss too: result.json reports it, and a resumed run never computes it again
        step, first_loss = _resume(ckpt_path, cfg, policy, opt, sched, gen)

    def checkpoint() -> None:
        check_replicas(acc, policy)
        if main:  # every process holds the same state (see infra.data_parallel): one file is enough
            atomic_torch_save(ckpt_path, {"policy": policy.state_dict(), "policy_config": asdict(cfg.policy),
                                          "optimizer": opt.state_dict(), "scheduler": sched.state_dict(),
                                          "generator": gen.get_state(), "torch_rng": torch.get_rng_state(),
                                          "step": step, "first_loss": first_loss})
        if acc:  # no process runs ahead of a checkpoint not yet on disk (a stop now loses no step)
            acc.wait_for_everyone()

    log_path, columns = out / "loss.csv", ["step", "loss", "mse", "lr", "seconds"]
    # rows logged after the checkpoint we resume from will be logged again: drop them
    rows = [r for r in _read_log(log_path) if int(r["step"]) <= step] if step else []
    log_file = open(log_path if main else os.devnull, "w", newline="")
    writer = csv.writer(log_file)
    writer.writerow(columns)
    writer.writerows([[r[k] for k in columns] for r in rows])
    last: dict[str, Any] | None = {k: float(v) for k, v in rows[-1].items()} if rows else None
    tb = SummaryWriter(str(out / "logs")) if main else None
    policy.train()
    bar = tqdm(total=cfg.steps, initial=step, desc="bc", unit="step", disable=not (progress and main))
    t0, run_loss, run_mse, n = time.time(), 0.0, 0.0, 0
    try:
        while step < cfg.steps:
            idx = (torch.randint(0, len(data), (cfg.batch_size,), generator=gen) if weights is None else
                   torch.multinomial(weights, cfg.batch_size, replacement=True, generator=gen))
            obs, target, mask = data.batch(idx, cfg.augment_shift, gen, cfg.augment_noise)
            count = None
            if acc:  # the whole batch was drawn, so every process's generator stays in step
                count = float(mask.sum()) * target.shape[-1] / processes
                obs = {k: v[mine] for k, v in obs.items()}
                target, mask = target[mine], mask[mine]
            loss, mse = bc_loss(model, obs, target.to(device), mask.to(device), cfg.loss, count)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(policy.parameters(), cfg.grad_clip)
            opt.step()
            sched.step()
            step += 1
            crash_point("bc.step")
            step_loss, mse = mean_over_processes(acc, [loss.item(), mse])
            run_loss, run_mse, n = run_loss + step_loss, run_mse + mse, n + 1
            first_loss = run_loss if first_loss is None else first_loss
            if step % cfg.log_every == 0 or step == cfg.steps:
                row = {"step": step, "loss": run_loss / n, "mse": run_mse / n, "lr": sched.get_last_lr()[0],
                       "seconds": time.time() - t0}
                writer.writerow([row[k] for k in columns])
                log_file.flush()
                for k in ("loss", "mse", "lr"):
                    if tb:
                        tb.add_scalar(f"bc/{k}", row[k], step)
                bar.set_postfix(loss=f"{row['loss']:.4f}", mse=f"{row['mse']:.4f}")
                if on_log and main:
                    on_log(row)
                last, run_loss, run_mse, n = row, 0.0, 0.0, 0
            if step in cfg.snapshot_steps and main:
                policy.save(out / f"policy_step{step}.pt")
            if step % cfg.checkpoint_every == 0 or step == cfg.steps:
                checkpoint()
                crash_point("bc.checkpoint_saved")
            bar.update(1)
    finally:
        bar.close()
        log_file.close()
        if tb:
            tb.close()
    policy.eval()
    crash_point("bc.before_policy")
    if main:
        policy.save(out / "policy.pt")
    if acc:
        acc.wait_for_everyone()  # policy.pt is written when any process returns
        acc.end_training()  # leaves the process group
    seconds = time.time() - t0
    final = last or {"loss": float("nan"), "mse": float("nan")}
    snapshots = {n: str(out / f"policy_step{n}.pt") for n in sorted(cfg.snapshot_steps)
                 if (out / f"policy_step{n}.pt").is_file()}
    return {"policy_path": str(out / "policy.pt"), "snapshots": snapshots, "steps": step, "final_loss": final["loss"],
            "final_mse": final["mse"], "first_loss": first_loss, "seconds": seconds, "samples": len(data),
            "episodes": len(episodes), "instructions": data.instructions}



def _initial_policy(cfg: BCConfig) -> VLAPolicy:
    """Fresh weights, or cfg.init_policy's (a fine-tune), checked to be the network cfg.policy describes."""
    if not cfg.init_policy:
        return VLAPolicy(cfg.policy)
    start = Policy.load(cfg.init_policy)  # names the file when it is missing or damaged
    if not isinstance(start, VLAPolicy):
        raise ValueError(f"init_policy: {cfg.init_policy} holds a {type(start).__name__}; expected a VLA policy")
    for name in ("views", "image_size", "chunk_len"):
        have, want = getattr(start.config, name), getattr(cfg.policy, name)
        if have != want:
            raise ValueError(f"init_policy: {cfg.init_policy} has policy.{name}={have}, the config asks for {want}")
    return start


def load_episodes(cfg: BCConfig) -> tuple[list[Episode], dict]:
    """The episodes of cfg.data_dir and cfg.extra_data_dirs to imitate (sources, tasks, success filter,
    episodes_per_task, each dataset on its own; max_episodes over them all) and data_dir's proprio stats."""
    episodes: list[Episode] = []
    stats: dict = {}
    for data_dir in [cfg.data_dir, *cfg.extra_data_dirs]:
        ds = EpisodeDataset(data_dir, verify=False, features=cfg.features)
        if not set(cfg.policy.views) <= set(ds.views):
            raise ValueError(f"policy.views {cfg.policy.views}: not all in {data_dir}'s views {list(ds.views)}")
        picked = ds.select(source=list(cfg.sources), task_id=list(cfg.tasks) or None,
                           success=True if cfg.success_only else None)
        if cfg.episodes_per_task:
            task_of = {m.episode_index: m.task_id for m in ds.meta}
            per_task: dict[int, list[int]] = {}
            for i in picked:
                per_task.setdefault(task_of[i], []).append(i)
            picked = sorted(i for ids in per_task.values() for i in ids[: cfg.episodes_per_task])
        if not picked:
            raise ValueError(f"{data_dir}: no episodes match sources={cfg.sources} tasks={cfg.tasks} "
                             f"success_only={cfg.success_only}")
        episodes += [ds[i] for i in picked]
        stats = stats or ds.stats["observation.state"]
    if cfg.max_episodes:
        episodes = episodes[: cfg.max_episodes]
    return episodes, stats


def train_bc_on_data(cfg: BCConfig) -> dict:
    """`train_bc` on the episodes `load_episodes` picks from cfg.data_dir; the config and result.json
    are written to out_dir."""
    main = int(os.environ.get("RANK", "0")) == 0  # under `accelerate launch`, the main process writes and prints
    if main:
        save_config(cfg, Path(cfg.out_dir) / "config.yaml")
    episodes, stats = load_episodes(cfg)
    if main:
        print(f"bc: {len(episodes)} episodes ({sum(len(e) for e in episodes)} steps) from {cfg.data_dir}")
    result = train_bc(cfg, episodes, stats)
    if not main:
        return result
    print(f"policy: {result['policy_path']}  ({result['steps']} steps in {result['seconds']:.0f} s, "
          f"final loss {result['final_loss']:.5f}, mse {result['final_mse']:.5f})")
    result["provenance"] = provenance(cfg.seed)  # BC trains on recorded episodes: no jobs of its own
    (Path(cfg.out_dir) / "result.json").write_text(json.dumps(result, indent=2))
    return result


__all__ = ["BCConfig", "load_episodes", "train_bc", "train_bc_on_data"]
