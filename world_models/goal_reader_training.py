"""Fitting a goal reader (world_models/goal_reader.py) on recorded, goal-labelled episodes, with held-out figures:
what scripts/train_goal_reader.py runs.

    data = goal_frames(["outputs/data/libero_goal_quick"], "agentview")   # frames, task ids, predicate labels
    result = train_goal_reader(TrainGoalReaderConfig(data_dirs=[...]))     # reader.pt, result.json: AUCs

Every `holdout_every`-th episode of each task is held out: the reader never trains on it, and its figures (how the
goal probability ranks goal frames and successful episodes) are read there. The progress anchors each task's
predicates carry (the median progress at episodes' first frames and where the predicate holds) come from the
training episodes.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from world_models.goal_reader import GoalReader, GoalReaderConfig, fit_goal_reader


def goal_frames(data_dirs: list[str], view: str) -> dict[str, Any]:
    """Every frame (uint8 [N, H, W, 3] of `view`) of the episodes with goal labels (scripts/label_goals.py) in the
    datasets, with per frame: task id, episode (a running number over the datasets), whether each predicate holds
    before that frame's action [N, P] and its progress [N, P]; per episode its success; the tasks' predicates; the
    suite."""
    from robot_data.dataset import EpisodeDataset
    from robot_data.goal_labels import before_actions, read_goal_labels

    rows: dict[str, list] = {"images": [], "task_id": [], "episode": [], "holds": [], "progress": []}
    success: list[bool] = []
    predicates: dict[int, list[str]] = {}
    suites: set[str] = set()
    for root in data_dirs:
        ds = EpisodeDataset(root, verify=False)
        ds.require_views([view])
        for i in range(len(ds)):
            labels = read_goal_labels(root, i)
            if labels is None:
                continue
            holds, progress = before_actions(labels)  # row t: before action t, as frame t
            ep = ds[i]
            T = min(len(holds), len(ep.frames[view]))  # a replay that diverged labels a prefix
            suites.add(ep.suite)
            predicates[int(ep.task_id)] = list(labels["predicates"])
            rows["images"].append(ep.frames[view][:T])
            rows["task_id"].append(np.full(T, ep.task_id))
            rows["episode"].append(np.full(T, len(success)))
            rows["holds"].append(holds[:T])
            rows["progress"].append(progress[:T])
            success.append(bool(ep.episode_success))
    if not success:
        raise ValueError(f"data_dirs: no episode with goal labels in {data_dirs}; label them with "
                         "scripts/label_goals.py")
    if len(suites) > 1:
        raise ValueError(f"data_dirs: episodes of several suites {sorted(suites)}; a reader knows one suite's tasks")
    P = max(h.shape[1] for h in rows["holds"])
    out = {k: np.concatenate(v) for k, v in rows.items() if k not in ("holds", "progress")}
    out["holds"] = np.concatenate([np.pad(h, ((0, 0), (0, P - h.shape[1]))) for h in rows["holds"]])
    out["progress"] = np.concatenate([np.pad(p.astype(np.float32), ((0, 0), (0, P - p.shape[1])),
                                             constant_values=np.nan) for p in rows["progress"]])
    return {**out, "success": np.array(success), "predicates": predicates, "suite": suites.pop()}


@dataclass
class TrainGoalReaderConfig:
    data_dirs: list[str] = field(default_factory=list)  # recorded datasets (target goal: labelled by label_goals.py)
    out_dir: str = "outputs/goal_reader"  # reader.pt and result.json
    # every holdout_every-th episode (of each task, in order) is held out and measured, never trained on;
    # 0: train on all of them (then no held-out figure)
    holdout_every: int = 5
    # "goal": which of each task's goal predicates hold in a frame (labels by scripts/label_goals.py); "outcome":
    # whether the frame's episode succeeds, on the frames of outcome_window (world_models/outcome_reader.py)
    target: str = "goal"
    outcome_window: list[int] = field(default_factory=lambda: [0, 64])  # control steps from the first gripper close
    reader: GoalReaderConfig = field(default_factory=GoalReaderConfig)


def reader_figures(reader: GoalReader, data: dict[str, Any], episodes: np.ndarray) -> dict[str, Any]:
    """How the reader's goal probability ranks the frames of `episodes` (rows of goal_frames' data) where the whole
    goal holds against the others, and the episodes that succeeded against the failures by their highest goal
    probability: AUCs pooled and per task (nan with one outcome only); the progress error per predicate slot."""
    from sklearn.metrics import roc_auc_score

    def auc(y: np.ndarray, p: np.ndarray) -> float:
        return float(roc_auc_score(y, p)) if 0 < y.sum() < len(y) else float("nan")

    rows = np.isin(data["episode"], episodes)
    tasks, epi = data["task_id"][rows], data["episode"][rows]
    mask = reader.slot_mask(tasks)
    holds, prog = reader.read(data["images"][rows], tasks)  # one pass: the goal probability is their product
    p_goal = np.nanprod(holds, axis=1)
    goal = np.asarray(np.where(mask, data["holds"][rows], True).all(1))
    best = {int(e): float(p_goal[epi == e].max()) for e in episodes}
    ep_task = {int(e): int(tasks[epi == e][0]) for e in episodes}
    ep_best = np.array([best[int(e)] for e in episodes])
    out: dict[str, Any] = {"frames": int(rows.sum()), "episodes": len(episodes), "frame_auc": auc(goal, p_goal),
                           "episode_auc": auc(data["success"][episodes], ep_best), "per_task": {}}
    for t in sorted(set(ep_task.values())):
        es = np.array([e for e in episodes if ep_task[int(e)] == t])
        out["per_task"][t] = {"episodes": len(es), "successes": int(data["success"][es].sum()),
                              "frame_auc": auc(goal[tasks == t], p_goal[tasks == t]),
                              "episode_auc": auc(data["success"][es], np.array([best[int(e)] for e in es]))}
    err = np.abs(prog - data["progress"][rows])
    out["progress_abs_error_median"] = [float(np.nanmedian(err[:, p])) if np.isfinite(err[:, p]).any() else None
                                        for p in range(err.shape[1])]
    return out


def progress_anchors(reader: GoalReader, task_ids: np.ndarray, episode: np.ndarray, holds: np.ndarray,
                     progress: np.ndarray) -> np.ndarray:
    """Each task's predicates' (start, goal) progress [tasks, P, 2] from labelled frames (goal_frames' rows): the
    median progress on the episodes' first frames where the predicate does not hold yet, and the median on every
    frame where it holds; nan where the frames show neither. Labels supervise this at build time only: the judge then
    reads progress from imagined frames alone."""
    first = np.r_[True, episode[1:] != episode[:-1]]
    out = np.full((len(reader.tasks), reader.slots, 2), np.nan)
    for k, t in enumerate(reader.tasks):
        rows = task_ids == t
        for p in range(min(reader.slots, holds.shape[1])):
            known = rows & np.isfinite(progress[:, p])
            start, goal = progress[known & first & ~holds[:, p], p], progress[known & holds[:, p], p]
            if len(start) and len(goal):
                out[k, p] = float(np.median(start)), float(np.median(goal))
    return out


def train_goal_reader(cfg: TrainGoalReaderConfig, progress_bar: bool = True) -> dict[str, Any]:
    """Fit a reader on cfg's labelled datasets but their held-out episodes, save it with what it was trained on and
    how it reads the held-out episodes (result.json beside it)."""
    import time
    from pathlib import Path

    from infra.atomic import atomic_write_json

    if not cfg.data_dirs:
        raise ValueError("data_dirs: expected at least one recorded dataset (labelled by scripts/label_goals.py "
                         "for target goal)")
    if cfg.holdout_every < 0 or cfg.holdout_every == 1:
        raise ValueError(f"holdout_every: expected 0 (none) or an integer >= 2, got {cfg.holdout_every}")
    if cfg.target == "goal":
        data = goal_frames(cfg.data_dirs, cfg.reader.view)
    elif cfg.target == "outcome":
        from world_models.outcome_reader import outcome_frames

        data = outcome_frames(cfg.data_dirs, cfg.reader.view, cfg.outcome_window)
    else:
        raise ValueError(f"target: expected 'goal' or 'outcome', got {cfg.target!r}")
    n_ep = len(data["success"])
    ep_task = np.array([data["task_id"][data["episode"] == e][0] for e in range(n_ep)])
    held = np.array([e for t in np.unique(ep_task) for k, e in enumerate(np.flatnonzero(ep_task == t))
                     if cfg.holdout_every and k % cfg.holdout_every == cfg.holdout_every - 1], np.int64)
    train = np.setdiff1d(np.arange(n_ep), held)
    rows = np.isin(data["episode"], train)
    t0 = time.time()
    reader = fit_goal_reader(data["images"][rows], data["task_id"][rows], data["holds"][rows],
                             data["progress"][rows], data["suite"], data["predicates"], cfg.reader, progress_bar)
    reader.progress_anchors = progress_anchors(reader, data["task_id"][rows], data["episode"][rows],
                                               data["holds"][rows], data["progress"][rows])
    result: dict[str, Any] = {"data_dirs": list(cfg.data_dirs), "suite": data["suite"], "target": cfg.target,
                              **({"outcome_window": list(cfg.outcome_window)} if cfg.target == "outcome" else {}),
                              "predicates": {str(k): v for k, v in data["predicates"].items()},
                              "train_seconds": round(time.time() - t0, 1),
                              "train": reader_figures(reader, data, train)}
    if len(held):
        result["heldout"] = reader_figures(reader, data, held)
    if cfg.target == "outcome":  # where in the window the verdict parts successes from failures
        from world_models.outcome_reader import outcome_by_step

        for part, eps in (("train", train), ("heldout", held)):
            if len(eps):
                result[part]["within_task_auc_by_step"] = outcome_by_step(reader, data, eps)
    out = Path(cfg.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    reader.save(out / "reader.pt", trained_on=result)
    atomic_write_json(out / "result.json", result, indent=2)
    return result


__all__ = ["TrainGoalReaderConfig", "goal_frames", "progress_anchors", "reader_figures", "train_goal_reader"]
