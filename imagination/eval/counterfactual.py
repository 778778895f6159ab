"""The counterfactual check: from one real moment, do the world model and its judge order several action
sequences as the simulator does?

GRPO learns only from what differs among one start's imagined episodes. Every other check compares episodes
from different starts (closed_loop_check: AUC against real outcomes), where most of the signal can be the start
itself: a model that knows which starts are easy scores well there and can still say nothing about which of
two actions from the same start is better. This check asks that question with the simulator as the referee.

For every start (a task and an official init state) the policy first runs deterministically in real LIBERO;
the branch point is `lead_steps` before its first gripper close, rounded down to a step where it chooses a
chunk. Then `variants` times: the same start replayed exactly to the branch point (MuJoCo and LIBERO's resets
are deterministic for a seed), the policy samples with exploration noise (`noise_log_std`, as imagined RL
explores) for `window` steps, then acts deterministically to the horizon; the simulator says whether the task
succeeded. Each variant is recorded (out_dir/data, source "policy"). In imagination each variant's own recorded
actions are replayed open loop from the branch point, the real frames before it as context, for `window`
steps, and the judge gives its verdict, as a window recipe's GRPO group would be paid.

The figure is the AUC within start: over pairs of variants of one start with different real outcomes, the
chance that the real success gets the higher verdict (0.5: no signal GRPO could use), with a 95% bootstrap
interval over starts. Only starts whose variants split in reality count; their number is printed.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from tqdm.auto import tqdm

from envs import libero_suites
from envs.libero_env import LiberoEnv, LiberoEnvConfig
from imagination.episodes import load_start_episodes
from imagination.eval.closed_loop import (
    ClosedLoopConfig,
    branch_imagination,
    decisive_step,
    judge_file_error,
    outcome_separation,
)
from imagination.imagine import RecordedActions, imagine
from imagination.keyframes import Keyframe
from infra.atomic import atomic_write_json
from infra.cli import save_config
from infra.provenance import provenance
from policies.base import Policy, batch_obs
from robot_data.dataset import DatasetConfig, Episode, EpisodeDataset, EpisodeWriter
from world_models.model import WorldModel


@dataclass
class CounterfactualConfig(ClosedLoopConfig):
    policy: str = ""  # the policy checkpoint whose variants are compared
    suite: str = "libero_goal"
    tasks: list[int] = field(default_factory=list)
    init_state_offset: int = 10  # starts: these official init states of every task
    init_states: int = 10
    variants: int = 8  # sampled action sequences per start
    noise_log_std: float = -1.84  # their exploration noise (log std on every action dimension)
    lead_steps: int = 8  # branch point: this many steps before the deterministic run's first close
    window: int = 40  # steps each variant samples, and (imagined_steps 0) imagination replays before its verdict
    seed: int = 0
    # one start's variants share the world model's sampling noise in imagination, as a GRPO group's members do
    # (ImaginationConfig.noise_group), so that what differs among their verdicts is what their actions did
    common_noise: bool = True
    # the verdicts' file, out_dir/<name>.json. Why: the real variants are recorded once (out_dir/variants.json) and
    # every later run with the same real settings judges them again, so judges and world models are compared on
    # the same real outcomes in seconds each
    name: str = "counterfactual"
    out_dir: str = "outputs/counterfactual"


# the settings that decide what happened in reality: a run that changes none of them reuses the recorded variants
REAL_FIELDS = ("policy", "suite", "tasks", "init_state_offset", "init_states", "variants", "noise_log_std",
               "lead_steps", "window", "seed", "max_steps")


def _real_settings(cfg: CounterfactualConfig) -> dict:
    return {f: list(v) if isinstance(v := getattr(cfg, f), (list, tuple)) else v for f in REAL_FIELDS}


def recorded_variants(cfg: CounterfactualConfig) -> list[dict] | None:
    """The variants recorded in out_dir by an earlier run with the same real settings, or None when none were."""
    out = Path(cfg.out_dir)
    saved = out / "variants.json"
    if saved.is_file():
        blob = json.loads(saved.read_text())
        if blob["real"] != _real_settings(cfg):
            changed = sorted(k for k, v in _real_settings(cfg).items() if blob["real"].get(k) != v)
            raise ValueError(f"out_dir: {out} holds variants recorded with other {', '.join(changed)}; give a new "
                             "out_dir, or the same real settings to judge them again")
        return list(blob["records"])
    if (out / "data").exists():
        raise ValueError(f"out_dir: {out}/data exists without variants.json (an interrupted recording?); remove it "
                         "or give a new out_dir")
    return None


def _act(policy: Policy, obs: dict, pick: list[int], generator: torch.Generator | None) -> np.ndarray:
    """The policy's chunk for one observation (its views `pick` of the rendered ones), float32 [K, 7]: sampled
    with `generator`, else its mean."""
    batch = batch_obs({"image": obs["image"][pick][None], "state": obs["state"][None],
                       "instruction": [obs["instruction"]]})
    with torch.no_grad():
        chunk = policy.sample(batch, generator)[0] if generator is not None else policy.predict_action_chunk(batch)
    return chunk[0].cpu().numpy().astype(np.float32)


def _run(env: LiberoEnv, policy: Policy, pick: list[int], task_id: int, init_state_id: int, seed: int,
         prefix: np.ndarray, sampled_steps: int, generator: torch.Generator | None) -> dict:
    """One real episode: `prefix` [t, 7] replayed, then `sampled_steps` of sampled chunks, then the policy's mean
    to the end. Returns frames [T+1, V, H, W, 3], states [T+1, 8], actions [T, 7], success."""
    obs, _ = env.reset(seed=seed, options={"task_id": task_id, "init_state_id": init_state_id})
    n = env.cfg.chunk_len
    frames, states, actions = [obs["image"]], [obs["state"]], []  # type: ignore[var-annotated]
    done, success = False, False
    while not done:
        t = len(actions)
        if t < len(prefix):
            chunk = prefix[t:t + n]
        else:
            chunk = _act(policy, obs, pick, generator if t < len(prefix) + sampled_steps else None)
        obs, _, terminated, truncated, info = env.step(chunk)
        steps = info["chunk_obs"]
        frames += [o["image"] for o in steps]
        states += [o["state"] for o in steps]
        actions += list(chunk[: len(steps)])
        done, success = terminated or truncated, bool(info["success"])
    return {"frames": np.stack(frames), "states": np.stack(states).astype(np.float32),
            "actions": np.stack(actions).astype(np.float32), "success": success}


def branch_point(actions: np.ndarray, lead_steps: int, chunk_len: int, hold: int = 4) -> int:
    """`decisive_step` of actions [T, 7] with the grasp a close held `hold` steps, rounded down to a multiple of
    chunk_len (where the policy chooses a chunk, as real evaluation runs it)."""
    t = decisive_step(actions, lead_steps, hold)
    return t - t % chunk_len


def record_variants(cfg: CounterfactualConfig, policy: Policy, views: tuple[str, ...], image_size: int,
                    progress: bool = True) -> list[dict]:
    """Every start's variants in real LIBERO, rendering `views` (the world model's and the policy's) at
    `image_size`, written to out_dir/data; one record per variant. The policy acts on whole chunks, as
    `scripts/eval_policy.py` runs it."""
    pick = [views.index(v) for v in getattr(policy.config, "views", views)]
    log_std = policy.noise_log_std()
    if log_std is None:
        raise ValueError(f"policy: {cfg.policy} has no exploration noise to sample with (Policy.noise_log_std)")
    with torch.no_grad():
        log_std.fill_(float(cfg.noise_log_std))
    n = policy.chunk_len
    if cfg.window < n or cfg.window % n:
        raise ValueError(f"window: expected a positive multiple of the policy's chunk length ({n}), got {cfg.window}")
    data = Path(cfg.out_dir) / "data"
    records: list[dict] = []
    env = None
    with EpisodeWriter(data, DatasetConfig(views=views, image_size=(image_size, image_size))) as writer:
        jobs = [(task, cfg.init_state_offset + j) for task in cfg.tasks for j in range(cfg.init_states)]
        for start, (task, init) in enumerate(tqdm(jobs, desc="starts", disable=not progress)):
            if env is None:
                env = LiberoEnv(LiberoEnvConfig(suite=cfg.suite, task_id=task, views=views, image_size=image_size,
                                                chunk_len=n, max_steps=cfg.max_steps or None, fast_render=True,
                                                chunk_info=True))
            seed = cfg.seed * 1_000_003 + start
            base = _run(env, policy, pick, task, init, seed, np.zeros((0, 7), np.float32), 0, None)
            t0 = branch_point(base["actions"], cfg.lead_steps, n)
            for k in range(cfg.variants):
                gen = torch.Generator().manual_seed(seed * 1000 + k)
                run = _run(env, policy, pick, task, init, seed, base["actions"][:t0], cfg.window, gen)
                T = len(run["actions"])
                hold = np.zeros((1, 7), np.float32)
                hold[0, 6] = run["actions"][-1, 6]
                flags = np.zeros(T + 1, bool)
                flags[-2:] = run["success"]
                writer.append(Episode(
                    frames={v: run["frames"][:, i] for i, v in enumerate(views)}, state=run["states"],
                    action=np.concatenate([run["actions"], hold]), reward=flags.astype(np.float32), success=flags,
                    instruction=env.instruction, suite=cfg.suite, task_id=task, source="policy", seed=seed,
                    init_state_id=init, extra={"policy": cfg.policy, "start": start, "variant": k, "branch_t": t0}))
                records.append({"start": start, "task_id": task, "init_state_id": init, "variant": k, "branch_t": t0,
                                "real_success": run["success"], "base_success": base["success"]})
    if env is not None:
        env.close()
    atomic_write_json(Path(cfg.out_dir) / "variants.json", {"real": _real_settings(cfg), "records": records})
    return records


def imagined_verdicts(cfg: CounterfactualConfig, records: list[dict], wm: WorldModel,
                      progress: bool = True) -> np.ndarray:
    """Each variant's recorded actions replayed in imagination (`wm`, loaded from cfg.world_model) from its branch
    point for `imagined_steps` steps (0: `window`): the judge's verdict [N], in the order of `records` (the order
    they were written)."""
    torch.set_num_threads(cfg.num_threads)
    data = str(Path(cfg.out_dir) / "data")
    episodes = load_start_episodes(data, list(wm.cfg.views))
    meta = EpisodeDataset(data, verify=False).meta
    if len(meta) != len(records):
        raise ValueError(f"{data}: holds {len(meta)} episodes, expected the {len(records)} variants just recorded")
    n = min(cfg.num_envs, len(records))
    if cfg.common_noise:  # whole starts per batch: a noise group is consecutive envs, one start's variants
        if n < cfg.variants:
            raise ValueError(f"num_envs: common_noise needs at least one start's {cfg.variants} variants per batch, "
                             f"got {cfg.num_envs}")
        n -= n % cfg.variants
    horizon = cfg.max_steps or libero_suites.suite_info(cfg.suite).max_steps  # the window ends a branch earlier
    venv = branch_imagination(wm, episodes, cfg, n, horizon, imagined_steps=cfg.imagined_steps or cfg.window,
                              noise_group=cfg.variants if cfg.common_noise else 1)
    starts = [Keyframe(int(m.episode_index), int(m.extra["branch_t"])) for m in meta]
    act = RecordedActions(venv)
    runs = [imagine(venv, act, starts[b:b + n], seed=b)
            for b in tqdm(range(0, len(starts), n), desc="imagined", disable=not progress)]
    return np.concatenate([r.max_success_prob for r in runs])


def within_start(verdicts: np.ndarray, real: np.ndarray, start_ids: np.ndarray, boots: int = 2000,
                 seed: int = 0) -> dict:
    """AUC within start (verdicts [N], real outcomes [N], start ids [N]) with a 95% bootstrap interval over the
    starts whose variants split in reality: {"auc", "ci95", "split_starts", "starts"}."""
    verdicts, real, start_ids = np.asarray(verdicts, float), np.asarray(real, bool), np.asarray(start_ids)
    split = [s for s in np.unique(start_ids) if 0 < real[start_ids == s].sum() < (start_ids == s).sum()]
    out = {"auc": float("nan"), "ci95": [float("nan"), float("nan")], "split_starts": len(split),
           "starts": len(np.unique(start_ids))}
    if not split:
        return out
    out["auc"] = outcome_separation(verdicts, real, start_ids).auc_within_task
    rng, aucs = np.random.default_rng(seed), []
    for _ in range(boots):
        pick = rng.choice(split, len(split))
        idx = np.concatenate([np.flatnonzero(start_ids == s) for s in pick])
        # the same start drawn twice counts twice: relabel the copies so pairs form within each copy only
        ids = np.concatenate([np.full((start_ids == s).sum(), c) for c, s in enumerate(pick)])
        aucs.append(outcome_separation(verdicts[idx], real[idx], ids).auc_within_task)
    out["ci95"] = [float(np.percentile(aucs, 2.5)), float(np.percentile(aucs, 97.5))]
    return out


def _check_config(cfg: CounterfactualConfig) -> None:
    for name in ("policy", "world_model"):
        if not Path(getattr(cfg, name)).is_file():
            raise SystemExit(f"{name}: expected a checkpoint file, got {getattr(cfg, name)!r}")
    if error := judge_file_error(cfg):
        raise SystemExit(error)
    if not cfg.tasks:
        raise SystemExit("tasks: expected one or more task ids of the suite, e.g. tasks=[2]")
    for name, least in (("variants", 2), ("init_states", 1), ("window", 1)):
        if int(getattr(cfg, name)) < least:
            raise SystemExit(f"{name}: expected an integer >= {least}, got {getattr(cfg, name)}")
    if not cfg.name or "/" in cfg.name:
        raise SystemExit(f"name: expected a file name for out_dir/<name>.json, got {cfg.name!r}")


def check_counterfactual(cfg: CounterfactualConfig) -> dict:
    """scripts/counterfactual_check.py: record the real variants (or reuse them), judge them in imagination, print
    the AUC within start and write out_dir/<name>.json; returns its content."""
    _check_config(cfg)
    records = recorded_variants(cfg)
    save_config(cfg, Path(cfg.out_dir) / f"{cfg.name}.yaml")
    wm = WorldModel.load(cfg.world_model, map_location=cfg.device)
    if records is None:
        policy = Policy.load(cfg.policy, map_location=cfg.device, modules=cfg.policy_modules)
        # what evaluation renders for the policy (imagination/eval/evaluate.py), and the world model's views beside
        views = tuple(dict.fromkeys([*wm.cfg.views, *getattr(policy.config, "views", ("agentview", "wrist"))]))
        records = record_variants(cfg, policy, views, int(getattr(policy.config, "image_size", 64)))
    else:
        print(f"reusing the {len(records)} real variants recorded in {cfg.out_dir} (variants.json)")
    verdicts = imagined_verdicts(cfg, records, wm)
    for r, v in zip(records, verdicts):
        r["verdict"] = float(v)
    real = np.array([r["real_success"] for r in records])
    ids = np.array([r["start"] for r in records])
    summary = within_start(verdicts, real, ids)
    print(f"{cfg.suite} tasks {list(cfg.tasks)}, {summary['starts']} starts x {cfg.variants} variants: real success "
          f"{int(real.sum())}/{len(real)}, variants split in reality on {summary['split_starts']} starts")
    print(f"  AUC within start {summary['auc']:.3f}  95% CI [{summary['ci95'][0]:.3f}, {summary['ci95'][1]:.3f}]  "
          f"(0.5: the judge orders one start's action sequences no better than chance)")
    result = {"summary": summary, "variants": records,
              "provenance": provenance(cfg.seed, [(r["task_id"], r["init_state_id"], r["variant"]) for r in records])}
    atomic_write_json(Path(cfg.out_dir) / f"{cfg.name}.json", result, indent=2)
    print(f"  written: {Path(cfg.out_dir) / cfg.name}.json")
    return result


__all__ = ["REAL_FIELDS", "CounterfactualConfig", "branch_point", "check_counterfactual", "imagined_verdicts",
           "record_variants", "recorded_variants", "within_start"]
