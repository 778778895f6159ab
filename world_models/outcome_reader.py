"""The outcome reader's training frames: P(the episode succeeds) read from one camera frame after the grasp.

A goal reader (world_models/goal_reader.py) answers "does the goal hold in this frame"; the outcome reader, the same
network trained with `scripts/train_goal_reader.py target=outcome`, answers "will this episode succeed", one verdict
per task named OUTCOME_PREDICATE, labelled on every frame of a recorded episode with that episode's own success. It
is trained on the frames of a window around each episode's first gripper close (`window`, in control steps from it),
where recorded successes and failures part, and read by the same goal judge (imagination/rewards/goal.py,
`imagination.reward=goal imagination.goal_reader=...`) on the last frame of a short imagined window.

Why: the goal reader can only tell a placed object from a missed one once it is placed, tens of steps after the
grasp, and the 2-core world model keeps an outcome that far ahead only along recorded actions: driven by the
policy's own actions its frames there rank LIBERO-Goal's bottle task backwards (docs/results.md, "The closed-loop
check with the goal judge"). The outcome reader reads the held or slipped bottle 16-24 steps after the grasp, where
the policy's actions have not yet taken the model far from its data. It is a value read from pixels: simulator
labels (the recorded success) supervise it at build time only, and at RL time it reads imagined frames alone.

    outcome_frames(dirs, view, window) -> the rows fit_goal_reader and reader_figures take (goal_frames' form)
"""
from __future__ import annotations

from typing import Any

import numpy as np

from world_models.grasp_point import first_close

OUTCOME_PREDICATE = "(episode succeeds)"  # the one verdict an outcome reader gives for each task


def outcome_window_start(action: np.ndarray) -> int:
    """The step an episode's outcome window counts from (action [T, 7]): its first gripper close, or half-way
    through an episode that never closes the gripper."""
    t = first_close(action)
    return t if t >= 0 else len(action) // 2


def check_window(window: list[int] | tuple[int, ...]) -> tuple[int, int]:
    if len(window) != 2 or not window[0] <= window[1]:
        raise ValueError(f"outcome_window: expected [first, last] control steps from the first gripper close with "
                         f"first <= last, got {list(window)}")
    return int(window[0]), int(window[1])


def outcome_frames(data_dirs: list[str], view: str, window: list[int] | tuple[int, ...]) -> dict[str, Any]:
    """The frames (uint8 [N, H, W, 3] of `view`) from `window[0]` to `window[1]` steps after each episode's first
    gripper close (outcome_window_start; clipped to the episode), every episode of the datasets, with per frame:
    task id, episode (a running number over the datasets), step (from the first close), the episode's success as
    its one verdict [N, 1] and no progress ([N, 1] nan); per episode its success; each task's one predicate,
    OUTCOME_PREDICATE; the suite.
    No goal labels are needed: only the recorded success."""
    from robot_data.dataset import EpisodeDataset

    lo, hi = check_window(window)
    rows: dict[str, list] = {"images": [], "task_id": [], "episode": [], "step": []}
    success: list[bool] = []
    suites: set[str] = set()
    for root in data_dirs:
        ds = EpisodeDataset(root, verify=False)
        ds.require_views([view])
        for i in range(len(ds)):
            ep = ds[i]
            frames = ep.frames[view]
            t0 = outcome_window_start(ep.action)
            first = max(0, t0 + lo)
            part = frames[first:min(len(frames), t0 + hi + 1)]
            if not len(part):
                continue  # the window lies past this episode's end
            suites.add(ep.suite)
            rows["images"].append(part)
            rows["task_id"].append(np.full(len(part), ep.task_id))
            rows["episode"].append(np.full(len(part), len(success)))
            rows["step"].append(np.arange(first, first + len(part)) - t0)
            success.append(bool(ep.episode_success))
    if not success:
        raise ValueError(f"data_dirs: no episode of {data_dirs} has frames in the outcome window {[lo, hi]}")
    if len(suites) > 1:
        raise ValueError(f"data_dirs: episodes of several suites {sorted(suites)}; a reader knows one suite's tasks")
    out = {k: np.concatenate(v) for k, v in rows.items()}
    ok = np.array(success)
    out["holds"] = ok[out["episode"]][:, None]
    out["progress"] = np.full((len(out["images"]), 1), np.nan, np.float32)
    tasks = sorted({int(t) for t in np.unique(out["task_id"])})
    return {**out, "success": ok, "predicates": {t: [OUTCOME_PREDICATE] for t in tasks}, "suite": suites.pop()}


def outcome_by_step(reader: Any, data: dict[str, Any], episodes: np.ndarray, every: int = 8) -> dict[int, float]:
    """How the reader's verdict on the frame `k` steps after the first close ranks `episodes` (rows of
    outcome_frames' data) that succeeded against those that failed, within each task (pairs of one task only),
    for k every `every` steps of the window: {k: AUC} (nan where no task has both outcomes)."""
    from scipy.stats import mannwhitneyu

    rows = np.isin(data["episode"], episodes)
    holds, _ = reader.read(data["images"][rows], data["task_id"][rows])
    p, step, epi, task = holds[:, 0], data["step"][rows], data["episode"][rows], data["task_id"][rows]
    out: dict[int, float] = {}
    for k in range(int(step.min()), int(step.max()) + 1, every):
        at = step == k
        u = n = 0.0
        for t in np.unique(task[at]):
            m = at & (task == t)
            won = data["success"][epi[m]]
            if won.any() and not won.all():
                u += float(mannwhitneyu(p[m][won], p[m][~won]).statistic)
                n += float(won.sum() * (~won).sum())
        out[k] = u / n if n else float("nan")
    return out


__all__ = ["OUTCOME_PREDICATE", "check_window", "outcome_by_step", "outcome_frames", "outcome_window_start"]
