"""Closed-loop check of the reward: does imagination tell the jobs a policy fails for real from the
ones it solves?

Open-loop calibration (`imagination.eval.calibrate`) replays *recorded* actions, and there a good model
separates real outcomes perfectly. Imagined RL is closed loop: the policy acts on imagined frames.
This module re-runs the jobs of a finished real evaluation (same policy, tasks, init states, seeds)
inside the world model with a success head that never ends an episode, keeps each episode's
highest success probability, and measures how well that figure predicts the real outcome of the
same job:

    records = closed_loop_records(real_results, policy_path, cfg)   # one dict per job
    records = branch_records(data_dir, policy_path, cfg, lead_steps) # from its own recorded rollouts
    sep = outcome_separation(probs, labels, task_ids)               # AUC, AUC within task, threshold
    sep = paired_separation(real_results, imagined_results)         # the loop's two evaluations

`branch_records` starts later: from the policy's own recorded real episodes (the loop appends them to
the data), `lead_steps` before it first closes the gripper, with the real history as context. The
world model then only has to carry the decisive part of the episode, and the policy's first chunk is
the one it took for real; this is where imagined RL starting from the policy's own keyframes
(`sources: [policy]`) takes its reward from.

AUC is the chance that a real success gets a higher imagined probability than a real failure. The
within-task AUC only compares jobs of one task, so it is not flattered by a model that merely knows
which task is hard: it is the figure that says whether GRPO, which compares episodes of one
keyframe, can learn anything true from the head (0.5 = nothing).
"""
from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import torch
from scipy.stats import mannwhitneyu
from tqdm.auto import tqdm

from envs import libero_suites
from imagination.env import ImaginationConfig, ImaginationVectorEnv
from imagination.episodes import load_start_episodes
from imagination.eval.calibrate import ThresholdChoice, pick_threshold
from imagination.eval.evaluate import evaluate
from imagination.eval.jobs import EvalConfig
from imagination.imagine import (
    ActionSource,
    RecordedActions,
    imagine,
    open_imagination,
    open_proprio,
    policy_mean,
    policy_sample,
)
from imagination.keyframes import Keyframe, KeyframeConfig
from policies.base import Policy
from robot_data.dataset import EpisodeDataset, select_meta
from world_models.grasp_point import first_close
from world_models.model import WorldModel
from world_models.proprio import ProprioModel


@dataclass
class ClosedLoopConfig:
    """Where the imagined re-run happens (the jobs come from the real evaluation)."""

    world_model: str = ""
    start_data: str = ""  # real episodes whose frame 0 starts each job (matched by task and init state)
    proprio: str = ""  # a saved proprio model; "" = fit one on start_data
    max_steps: int = 0  # imagined horizon; 0 = the real evaluation's
    num_envs: int = 16  # imagined episodes per batch
    num_threads: int = 1
    reward: str = "head"  # what judges success in imagination: the head, "state", "goal" or "grasp" (ImaginationConfig)
    state_reward: str = ""  # StateReward checkpoint for reward "state"
    # reward "grasp": the judge file (scripts/fit_grasp_judge.py), paid at the first imagined close; where the object
    # starts comes from the object reader (scripts/train_object_reader.py) or, without one, the start episodes'
    # simulator labels (scripts/label_episodes.py)
    grasp_judge: str = ""
    object_reader: str = ""
    # reward "goal": the goal reader (scripts/train_goal_reader.py) whose verdict on the last imagined frame is the
    # job's figure, as imagined RL's goal judge pays it (ImaginationConfig.goal_until "horizon")
    goal_reader: str = ""
    goal_score: str = "probability"  # reward "goal": what its verdict is (ImaginationConfig.goal_score)
    # branches only: how many steps each one imagines from its start (0: to max_steps). Why: the window recipes
    # (configs/rl/goal_window.yaml) imagine 64 steps from a keyframe, and this checks exactly that
    imagined_steps: int = 0
    # the world model's action guidance (ImaginationConfig.action_guidance; 0: the model's own)
    action_guidance: float = 0.0
    device: str = "cpu"
    # modules of your own package that define the policy's class, imported before it loads (docs/policies.md)
    policy_modules: list[str] = field(default_factory=list)


def real_jobs_config(real_results: dict, policy_path: str, cfg: ClosedLoopConfig, out_dir: str) -> EvalConfig:
    """The `EvalConfig` that runs the jobs of a real `results.json` in imagination, head never firing."""
    if "config" not in real_results or "episodes" not in real_results:
        raise ValueError("real_results: expected a results.json written by scripts/eval_policy.py "
                         "(with 'config' and 'episodes')")
    rc = real_results["config"]
    if rc.get("env") == "imagination":
        raise ValueError("real_results: that evaluation ran in imagination; give one from a LIBERO suite")
    return EvalConfig(
        checkpoint=policy_path, env="imagination", tasks=list(rc["tasks"]),
        episodes_per_task=int(rc["episodes_per_task"]), init_state_offset=int(rc["init_state_offset"]),
        seed=int(rc["seed"]), action_steps=int(rc["action_steps"]), image_size=int(rc.get("image_size", 0)),
        deterministic=bool(rc["deterministic"]), max_steps=cfg.max_steps or int(rc["max_steps"]), videos=0,
        out_dir=out_dir, num_envs=cfg.num_envs, num_threads=cfg.num_threads, world_model=cfg.world_model,
        start_data=cfg.start_data, proprio=cfg.proprio, success_threshold=math.inf, reward=cfg.reward,
        state_reward=cfg.state_reward, goal_reader=cfg.goal_reader, action_guidance=cfg.action_guidance,
        device=cfg.device, policy_modules=list(cfg.policy_modules))


def closed_loop_records(real_results: dict, policy_path: str, cfg: ClosedLoopConfig, out_dir: str,
                        progress: bool = True) -> list[dict]:
    """Run the real evaluation's jobs in imagination; one record per job with both outcomes.

    Each record: task_id, init_state_id, seed, real_success, max_success_prob, imagined_steps.
    A finished imagined evaluation in `out_dir` with the same settings is reused (resumable)."""
    ecfg = real_jobs_config(real_results, policy_path, cfg, out_dir)
    saved = Path(out_dir) / "results.json"
    imagined = json.loads(saved.read_text()) if saved.is_file() else None
    if imagined is None or imagined.get("config") != json.loads(json.dumps(asdict(ecfg))):
        imagined = evaluate(ecfg, progress=progress)
    real = {(e["task_id"], e["init_state_id"], e["seed"]): e for e in real_results["episodes"]}
    out = []
    for e in imagined["episodes"]:
        key = (e["task_id"], e["init_state_id"], e["seed"])
        if key not in real:
            raise ValueError(f"real_results: no real episode for task {key[0]}, init state {key[1]}, seed {key[2]}; "
                             "was it written by the same evaluation settings?")
        out.append({"task_id": key[0], "init_state_id": key[1], "seed": key[2],
                    "real_success": bool(real[key]["success"]), "max_success_prob": float(e["max_success_prob"]),
                    "imagined_steps": int(e["steps"])})
    return out


def decisive_step(actions: np.ndarray, lead_steps: int, hold: int = 1) -> int:
    """`lead_steps` before an episode's first gripper close (actions [T, 7], +1 closes) held for `hold` steps; an
    episode that never closes the gripper (so long) starts half-way. Why hold > 1: a learned policy's gripper
    command hovers near 0 on the way and can flick above it for a step long before it grasps (measured on
    LIBERO-Goal's bottle task)."""
    if hold <= 1:
        close = first_close(actions)
    else:
        shut = np.asarray(actions)[:, 6] > 0
        close = next((t for t in range(len(shut) - hold + 1) if shut[t:t + hold].all()), -1)
    return max(0, close - lead_steps) if close >= 0 else len(actions) // 2


def judge_file_error(cfg: ClosedLoopConfig) -> str | None:
    """The error for a judge whose trained file `cfg` does not give (reward "grasp" or "goal"), else None: the
    checks' configs refuse it before any imagination runs."""
    if cfg.reward == "grasp" and not Path(cfg.grasp_judge).is_file():
        return f"grasp_judge: reward grasp needs a judge file (scripts/fit_grasp_judge.py), got {cfg.grasp_judge!r}"
    if cfg.reward == "goal" and not Path(cfg.goal_reader).is_file():
        return (f"goal_reader: reward goal needs a goal reader file (scripts/train_goal_reader.py), "
                f"got {cfg.goal_reader!r}")
    return None


BRANCH_ACTIONS = ("policy", "recorded")


def branch_imagination(wm: WorldModel, episodes: list, cfg: ClosedLoopConfig, num_envs: int, horizon: int,
                       imagined_steps: int, proprio: ProprioModel | None = None, noise_group: int = 1,
                       policy: Policy | None = None) -> ImaginationVectorEnv:
    """The imagination that continues recorded episodes from chosen steps (`Keyframe`s), judged by `cfg`'s reward
    under a success threshold that never ends an episode (the grasp judge still ends one at its close). proprio
    None: `cfg.proprio`, or one fitted on `episodes`."""
    if proprio is None:
        proprio = open_proprio(wm, cfg.proprio, episodes)
    return open_imagination(wm, episodes, proprio, num_envs,
                            ImaginationConfig(max_steps=horizon, success_threshold=math.inf,
                                              keyframes=KeyframeConfig(mode="start"), reward=cfg.reward,
                                              state_reward=cfg.state_reward, goal_reader=cfg.goal_reader,
                                              goal_score=cfg.goal_score, grasp_judge=cfg.grasp_judge,
                                              object_reader=cfg.object_reader, imagined_steps=imagined_steps,
                                              action_guidance=cfg.action_guidance, device=cfg.device,
                                              noise_group=noise_group), policy=policy)


def branch_records(data_dir: str, policy_path: str, cfg: ClosedLoopConfig, lead_steps: int = 8,
                   progress: bool = True, actions: str = "policy", recorded_by: str = "", draws: int = 1,
                   noise_log_std: float | None = None, common_noise: bool = False,
                   tasks: list[int] | None = None) -> list[dict]:
    """Continue the policy's recorded real episodes in imagination from their decisive step.

    The episodes are the data's `source: policy` ones whose `extra.policy` is `recorded_by`, written by
    `imagination.eval.real_rollouts.evaluate_and_record`: `policy_path` by default, or another policy, e.g. the start
    for the start adapted to imagined frames, which acts from its recordings. Each starts at `decisive_step`, its
    real frames up to there as context, the policy acting deterministically to the horizon (`cfg.max_steps`, 0 = the
    suite's, or `cfg.imagined_steps` from the start) with a judge that never ends an episode. Each record:
    episode, task_id, init_state_id, start_t, end_t, real_success, max_success_prob (with reward "goal", the
    reader's verdict on the last imagined frame: the goal judge pays nothing before it).

    actions "recorded": the episodes' own recorded actions instead of the policy's (open loop), from the same
    starts: the control that tells what the world model loses in closed loop from what the window itself holds.

    draws > 1: each start imagined that many times (one record each, `draw` 0.., consecutive), as a GRPO group
    imagines one keyframe; noise_log_std: the policy samples its chunks with that exploration noise (log std on
    every action dimension) instead of acting deterministically, as RL explores; common_noise: one start's draws
    share the world model's sampling noise (ImaginationConfig.noise_group = draws), as a GRPO group does.

    tasks: only the recorded episodes of these task ids (None or [] = every task's)."""
    if actions not in BRANCH_ACTIONS:
        raise ValueError(f"branch_actions: expected one of {list(BRANCH_ACTIONS)}, got {actions!r}")
    if draws < 1:
        raise ValueError(f"draws: expected an integer >= 1, got {draws}")
    meta = EpisodeDataset(data_dir, verify=False).meta
    recorder = recorded_by or policy_path
    mine = [m for m in select_meta(meta, source="policy") if m.extra.get("policy") == recorder]
    if not mine:
        known = sorted({str(m.extra.get("policy")) for m in select_meta(meta, source="policy")})
        raise ValueError(f"policy: {data_dir} has no recorded real episode of {recorder} "
                         f"(its policy episodes come from {known or 'no policy'})")
    if tasks:
        have = sorted({int(m.task_id) for m in mine})
        if missing := sorted(set(tasks) - set(have)):
            raise ValueError(f"branch_tasks: {data_dir} has no recorded episode of {recorder} on task(s) {missing} "
                             f"(it has tasks {have})")
        mine = [m for m in mine if int(m.task_id) in tasks]
    torch.set_num_threads(cfg.num_threads)
    wm = WorldModel.load(cfg.world_model, map_location=cfg.device)
    episodes = load_start_episodes(data_dir, list(wm.cfg.views))
    # fitted (proprio "") before the policy is built: the fit starts from torch's global random state
    proprio = open_proprio(wm, cfg.proprio, episodes)
    policy = Policy.load(policy_path, map_location=cfg.device, modules=cfg.policy_modules)
    horizon = cfg.max_steps or libero_suites.suite_info(mine[0].suite).max_steps
    n = min(cfg.num_envs, len(mine))
    if common_noise:  # whole groups per batch, so that noise groups (consecutive envs) are one start's draws
        if draws < 2 or n < draws:
            raise ValueError(f"common_noise: needs draws >= 2 and num_envs >= draws, got draws={draws}, "
                             f"num_envs={cfg.num_envs}")
        n -= n % draws
    venv = branch_imagination(wm, episodes, cfg, n, horizon, cfg.imagined_steps, proprio,
                              noise_group=draws if common_noise else 1, policy=policy)
    indices = [int(m.episode_index) for m in mine]
    starts = [Keyframe(i, decisive_step(venv.episodes[i].action, lead_steps)) for i in indices for _ in range(draws)]
    mine = [m for m in mine for _ in range(draws)]
    act: ActionSource = RecordedActions(venv) if actions == "recorded" else policy_mean(policy)
    if noise_log_std is not None:
        if actions != "policy":
            raise ValueError("noise_log_std: the policy's exploration noise, so only with branch_actions=policy")
        log_std = policy.noise_log_std()
        if log_std is None:
            raise ValueError(f"noise_log_std: {policy_path} has no exploration noise to set (Policy.noise_log_std)")
        with torch.no_grad():
            log_std.fill_(float(noise_log_std))
        act = policy_sample(policy, torch.Generator().manual_seed(0))
    runs = [imagine(venv, act, starts[b:b + n], seed=b)
            for b in tqdm(range(0, len(starts), n), desc="branches", disable=not progress)]
    best = np.concatenate([r.max_success_prob for r in runs])
    end = np.concatenate([r.final_t for r in runs])
    return [{"episode": int(m.episode_index), "task_id": int(m.task_id), "init_state_id": int(m.init_state_id),
             "start_t": kf.t, "end_t": int(e), "real_success": bool(m.success), "max_success_prob": float(p),
             **({"draw": k % draws} if draws > 1 else {})}
            for k, (m, kf, p, e) in enumerate(zip(mine, starts, best, end))]


@dataclass
class Separation:
    auc: float  # P(prob of a real success > prob of a real failure), ties count half; nan without both outcomes
    auc_within_task: float  # the same over pairs of one task only; nan when no task has both outcomes
    threshold: ThresholdChoice | None  # best balanced accuracy (None without both outcomes)
    successes: int
    failures: int


def _u_pairs(pos: np.ndarray, neg: np.ndarray) -> tuple[float, int]:
    """(pairs where the success scores higher, ties half; number of pairs)."""
    if len(pos) == 0 or len(neg) == 0:
        return 0.0, 0
    return float(mannwhitneyu(pos, neg).statistic), len(pos) * len(neg)


def outcome_separation(probs: np.ndarray, labels: np.ndarray, task_ids: np.ndarray) -> Separation:
    """How well imagined max success probabilities [N] predict real outcomes [N] (see module doc)."""
    probs, labels, task_ids = np.asarray(probs, float), np.asarray(labels, bool), np.asarray(task_ids)
    if not (probs.ndim == 1 and probs.shape == labels.shape == task_ids.shape):
        raise ValueError(f"probs, labels, task_ids: expected three 1-D arrays of one length, got "
                         f"{probs.shape}, {labels.shape}, {task_ids.shape}")
    u, n = _u_pairs(probs[labels], probs[~labels])
    uw, nw = 0.0, 0
    for t in np.unique(task_ids):
        m = task_ids == t
        a, b = _u_pairs(probs[m & labels], probs[m & ~labels])
        uw, nw = uw + a, nw + b
    pos, neg = int(labels.sum()), int((~labels).sum())
    return Separation(auc=u / n if n else float("nan"), auc_within_task=uw / nw if nw else float("nan"),
                      threshold=pick_threshold(probs, labels) if pos and neg else None, successes=pos, failures=neg)


def paired_separation(real_results: dict, imagined_results: dict) -> Separation | None:
    """`outcome_separation` of two evaluations of the same jobs (the loop's eval_real and eval_imagined):
    each job's imagined highest success probability against its real outcome. None when the imagined
    run recorded no probabilities. The loop's imagined runs end when the head passes its threshold, so
    jobs above it are ranked by the one chunk that passed it: coarser than `closed_loop_records`."""
    def key(e: dict) -> tuple:  # merged evaluations over several suites tag each episode with its suite
        return e.get("suite", ""), e["task_id"], e["init_state_id"], e["seed"]

    imagined = {key(e): e for e in imagined_results.get("episodes", [])}
    pairs = [(imagined[k]["max_success_prob"], e["success"], (k[0], e["task_id"]))
             for e in real_results.get("episodes", [])
             if (k := key(e)) in imagined and "max_success_prob" in imagined[k]]
    if not pairs:
        return None
    probs, labels = np.array([p[0] for p in pairs]), np.array([p[1] for p in pairs])
    names = sorted({p[2] for p in pairs})
    tasks = np.array([names.index(p[2]) for p in pairs])  # (suite, task) pairs: task 0 of two suites differs
    return outcome_separation(probs, labels.astype(bool), tasks)
