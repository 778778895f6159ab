"""The closed-loop check (scripts/closed_loop_check.py): can imagined RL's reward tell a real failure
from a real success? Every policy's real jobs (or, with `branch_data`, its recorded real episodes from
their decisive step) run again in imagination (`imagination.eval.closed_loop`); each job's highest
imagined success probability is compared with its real outcome (AUC, and AUC within task).
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from imagination.eval.calibrate import plot_outcome_histogram
from imagination.eval.closed_loop import (
    BRANCH_ACTIONS,
    ClosedLoopConfig,
    Separation,
    branch_records,
    closed_loop_records,
    judge_file_error,
    outcome_separation,
)
from imagination.rewards.goal import GOAL_THRESHOLD
from infra.atomic import atomic_write_json
from infra.cli import save_config
from infra.provenance import provenance
from world_models.model import WorldModel


@dataclass
class CheckConfig(ClosedLoopConfig):
    policies: list[str] = field(default_factory=list)  # policy checkpoints (Policy.save files)
    real_results: list[str] = field(default_factory=list)  # one real results.json per policy, same order
    branch_data: str = ""  # a dataset with the policies' recorded real episodes: start from their decisive step
    # branches: only the recorded episodes of these tasks ([] = every task's). Why: ranking policies on the one task
    # RL trained costs a fifth of all five tasks' starts
    branch_tasks: list[int] = field(default_factory=list)
    lead_steps: int = 8  # branch start: this many steps before the policy first closes the gripper
    # branches: "policy" acts (closed loop), or "recorded" replays each episode's own actions from the same start
    # (open loop: the control that says how much of what closed loop loses is the policy acting on imagined frames)
    branch_actions: str = "policy"
    # branches: whose recorded episodes each policy starts from, one per policy ([] = its own). Why: a policy
    # adapted to the imagined frames (scripts/adapt_to_imagination.py) has no real rollouts; it acts from its start's
    recorded_by: list[str] = field(default_factory=list)
    # branches: each start imagined this many times, the policy sampling with exploration noise noise_log_std (log
    # std on every action dimension; nan: the policy's own). Why: a GRPO group imagines one keyframe several times
    # and learns only from what differs among them; this says on how many starts the draws' verdicts split on the
    # threshold before any RL is run (docs/results.md, "The outcome reader")
    draws: int = 1
    noise_log_std: float = float("nan")
    # draws: one start's draws share the world model's sampling noise (ImaginationConfig.noise_group), as imagined
    # RL's GRPO groups do, so that what differs among them is what the policy did. Why: with the noise drawn per
    # draw, a model whose sampling noise alone flips outcomes (guided sampling does) splits draws that GRPO's
    # groups, sharing it, would not (docs/results.md, "Action guidance")
    common_noise: bool = False
    names: list[str] = field(default_factory=list)  # labels for the table; [] = each policy file's parent folder
    out_dir: str = "outputs/closed_loop"


def _check(cfg: CheckConfig) -> list[str]:
    if not cfg.policies:
        raise SystemExit("policies: expected one or more policy checkpoints, e.g. policies=[bc/policy.pt]")
    if cfg.goal_score != "probability" and not cfg.branch_data:
        raise SystemExit(f"goal_score: {cfg.goal_score!r} only with branch_data (jobs from the first frame are read "
                         "by the goal probability)")
    if cfg.branch_tasks and not cfg.branch_data:
        raise SystemExit("branch_tasks: only with branch_data (which tasks' recorded episodes to start from)")
    if cfg.recorded_by and not cfg.branch_data:
        raise SystemExit("recorded_by: only with branch_data (whose recorded episodes the policies start from)")
    if cfg.branch_data:
        if not Path(cfg.branch_data).is_dir():
            raise SystemExit(f"branch_data: {cfg.branch_data} is not a dataset folder")
        if cfg.real_results:
            raise SystemExit("real_results: not used with branch_data (its recorded episodes carry their outcomes); "
                             "give one of the two")
        if cfg.branch_actions not in BRANCH_ACTIONS:
            raise SystemExit(f"branch_actions: expected one of {list(BRANCH_ACTIONS)}, got {cfg.branch_actions!r}")
        if cfg.recorded_by and len(cfg.recorded_by) != len(cfg.policies):
            raise SystemExit(f"recorded_by: expected one recording policy per policy ({len(cfg.policies)}), "
                             f"got {len(cfg.recorded_by)}")
        if cfg.lead_steps < 0:
            raise SystemExit(f"lead_steps: expected an integer >= 0, got {cfg.lead_steps}")
        if cfg.branch_actions != "policy" and not np.isnan(cfg.noise_log_std):
            raise SystemExit("noise_log_std: the policy's exploration noise, so only with branch_actions=policy")
        if cfg.draws < 1 or (cfg.draws > 1 and cfg.branch_actions != "policy"):
            raise SystemExit(f"draws: expected an integer >= 1, and > 1 only with branch_actions=policy (recorded "
                             f"actions are the same every draw), got {cfg.draws}")
    elif cfg.draws != 1:
        raise SystemExit(f"draws: only with branch_data (the starts a GRPO group would imagine), got {cfg.draws}")
    elif len(cfg.real_results) != len(cfg.policies):
        raise SystemExit(f"real_results: expected one results.json per policy ({len(cfg.policies)}), "
                         f"got {len(cfg.real_results)}")
    if cfg.common_noise and (cfg.draws < 2 or cfg.num_envs < cfg.draws):
        raise SystemExit(f"common_noise: shares the noise among one start's draws, so needs draws >= 2 and num_envs >= "
                         f"draws, got draws={cfg.draws}, num_envs={cfg.num_envs}")
    if not cfg.world_model:
        raise SystemExit("world_model: required (the world model to check)")
    if error := judge_file_error(cfg):
        raise SystemExit(error)
    if cfg.imagined_steps < 0 or (cfg.imagined_steps and not cfg.branch_data):
        raise SystemExit(f"imagined_steps: expected an integer >= 0, and only with branch_data (jobs from the first "
                         f"frame run to max_steps), got {cfg.imagined_steps}")
    if not cfg.branch_data and not cfg.start_data:
        raise SystemExit("start_data: required (the real episodes whose first frames start the jobs)")
    for p in [cfg.world_model, *cfg.policies, *cfg.real_results]:
        if not Path(p).is_file():
            raise SystemExit(f"{p}: not a file")
    names = list(cfg.names) or [Path(p).parent.name or Path(p).stem for p in cfg.policies]
    if len(names) != len(cfg.policies) or len(set(names)) != len(names):
        raise SystemExit(f"names: expected {len(cfg.policies)} distinct names (one per policy), got {names}")
    return names


def _line(label: str, sep: Separation, fired: int, n: int, mean: float) -> str:
    return (f"  {label:<14} real {sep.successes:>3}/{n:<3} imagined {fired:>3}/{n:<3} mean verdict {mean:.3f}  "
            f"AUC {sep.auc:.3f}  AUC within task {sep.auc_within_task:.3f}")


def check_closed_loop(cfg: CheckConfig) -> dict:
    """Every policy's jobs in imagination, scored against their real outcomes; writes closed_loop.json
    and closed_loop.png to out_dir and returns closed_loop.json's content."""
    names = _check(cfg)
    out = Path(cfg.out_dir)
    save_config(cfg, out / "config.yaml")
    # the goal judge's verdict is a probability read against 0.5, as imagined RL counts its successes
    threshold = GOAL_THRESHOLD if cfg.reward == "goal" else WorldModel.load(cfg.world_model).cfg.head.success_threshold
    rows, table = [], {}
    for i, (name, policy) in enumerate(zip(names, cfg.policies)):
        if cfg.branch_data:
            records = branch_records(cfg.branch_data, policy, cfg, cfg.lead_steps, actions=cfg.branch_actions,
                                     recorded_by=cfg.recorded_by[i] if cfg.recorded_by else "", draws=cfg.draws,
                                     noise_log_std=None if np.isnan(cfg.noise_log_std) else cfg.noise_log_std,
                                     common_noise=cfg.common_noise, tasks=list(cfg.branch_tasks))
        else:
            real = json.loads(Path(cfg.real_results[i]).read_text())
            records = closed_loop_records(real, policy, cfg, str(out / name))
        rows += [{"policy": name, **r} for r in records]
    # with draws, each start's draws are consecutive rows, and their mean verdict is the start's figure
    verdicts = np.array([r["max_success_prob"] for r in rows]).reshape(-1, cfg.draws)
    spread = draw_spread(verdicts, threshold) if cfg.draws > 1 else None
    starts = rows[::cfg.draws]
    probs = verdicts.mean(axis=1)
    labels = np.array([r["real_success"] for r in starts])
    tasks = np.array([r["task_id"] for r in starts])
    where = f"from {cfg.lead_steps} steps before the first grasp" if cfg.branch_data else "from the first frame"
    mode = "open loop (recorded actions)" if cfg.branch_data and cfg.branch_actions == "recorded" else "closed loop"
    print(f"{mode} {where}, {cfg.world_model} (success threshold {threshold:.3f}):")
    for name in [*names, "all"]:
        m = np.array([name in ("all", r["policy"]) for r in starts])
        sep = outcome_separation(probs[m], labels[m], tasks[m])
        fired = int((probs[m] >= threshold).sum())
        # the policies' imagined success on the same starts: what ranks them without a real rollout
        mean = float(probs[m].mean())
        print(_line(name, sep, fired, int(m.sum()), mean))
        table[name] = {**asdict(sep), "imagined_successes": fired, "mean_verdict": mean, "jobs": int(m.sum())}
    pooled = table["all"]
    if pooled["threshold"] is not None:
        print(f"  best closed-loop threshold {pooled['threshold']['threshold']:.3f}: balanced accuracy "
              f"{pooled['threshold']['balanced_accuracy']:.3f}")
    if spread is not None:
        print(f"  {cfg.draws} draws of each start: verdicts differ by {spread['mean_range']:.2f} on average (largest "
              f"less smallest); they split on the threshold on {spread['split']}/{spread['starts']} starts, the only "
              "ones whose GRPO groups would carry a signal")
        table["draws"] = spread
    # the seeds are the real evaluations' (one per job, in "jobs"), so the record holds none of its own;
    # branches from recorded episodes (branch_data) have no evaluation seed: None there
    result = {"world_model": cfg.world_model, "success_threshold": threshold, "separation": table, "jobs": rows,
              "provenance": provenance(None, [(r["task_id"], r["init_state_id"], r.get("seed")) for r in rows])}
    atomic_write_json(out / "closed_loop.json", result, indent=2)
    plot_outcome_histogram(out / "closed_loop.png", probs, labels, threshold,
                           "highest success probability, policy acting in imagination", "model threshold", bins=40)
    print(f"  written: {out / 'closed_loop.json'}, {out / 'closed_loop.png'}")
    return result


def draw_spread(verdicts: np.ndarray, threshold: float) -> dict:
    """verdicts [starts, draws]: each start's draws -> the range of a start's verdicts (largest less smallest),
    averaged over the starts, and how many starts have draws on both sides of the threshold:
    {"starts", "mean_range", "split"}."""
    low, high = verdicts.min(axis=1), verdicts.max(axis=1)
    split = int(((low < threshold) & (threshold <= high)).sum())
    return {"starts": len(verdicts), "mean_range": float((high - low).mean()), "split": split}


__all__ = ["CheckConfig", "check_closed_loop", "draw_spread"]
