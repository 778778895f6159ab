"""Per-task calibration of a judge's probability: one logit offset per task, fit on real outcomes.

Why: the grasp judge ranks a task's episodes well enough, but its level is off by task. On the 128 px latent
model it imagined task 1 at 10/10 against 4/10 real and task 4 at 0/10 against 5/10 (docs/notebook/loop.md,
"A BC start trained on the 128 px renders"). A GRPO group
whose rewards are all 0.95 or all 0.05 has no spread above the group-std floor and teaches nothing, and the
gate's calibration check fails however well the judge ranks. A logit offset per task changes neither the order
within a task (the within-task AUC is untouched) nor what the judge reads; it moves each task's level to where
the start policy's real success is.

The offsets are fit on the start policy's real episodes on the *training* init states (bench/reward_signal.py
--init-state-offset 0), each re-run in imagination exactly as the gate re-runs its jobs, and then judged on the
gate's disjoint jobs (--task-bias):

    bias = fit_task_bias(probs, labels, task_ids)          # [NUM_TASKS] logit offsets, 0 for unseen tasks
    calibrated = apply_task_bias(probs, task_ids, bias)    # world_models/grasp_point.py: what the judge then
                                                           # predicts with GraspPointConfig(task_bias=bias)
    fit = task_bias_from_rollouts(rollouts, policy, gate)  # both steps from a policy's recorded real episodes:
                                                           # what the loop runs before each round's RL

Per task the offset b solves mean_j sigmoid(logit(p_j) + b) = (k + 1/2) / (n + 1), the real rate of k successes
in n jobs pulled half a success towards 1/2, so that 0/10 or 10/10 gives a finite offset; |b| <= `bound`. The
bound is wide (8: a factor of e^8 in the odds) because a judge can be that far off on a task: the 128 px latent
model's judge gave task 4's episodes 1e-4 to 0.04 where 3 of 10 succeeded.
"""
from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

import numpy as np
from scipy.optimize import brentq
from scipy.special import expit

from world_models.grasp_point import NUM_TASKS, apply_task_bias, prob_logits

if TYPE_CHECKING:
    from imagination.eval.grasp_gate import GraspGateConfig


def fit_task_bias(probs: Any, labels: Any, task_ids: Any, bound: float = 8.0,
                  num_tasks: int = NUM_TASKS) -> list[float]:
    """Logit offsets [num_tasks] from probs [N] (the judge's P(success) per job), labels [N] (real success) and
    task_ids [N]: per task, the offset that makes its mean calibrated probability equal its smoothed real rate,
    clipped to [-bound, bound]; 0.0 for tasks without jobs."""
    p, y, t = np.asarray(probs, np.float64), np.asarray(labels, bool), np.asarray(task_ids, np.int64)
    if not (p.ndim == 1 and p.shape == y.shape == t.shape) or not len(p):
        raise ValueError(f"probs, labels, task_ids: expected three non-empty 1-D arrays of one length, got "
                         f"{p.shape}, {y.shape}, {t.shape}")
    if t.min() < 0 or t.max() >= num_tasks:
        raise ValueError(f"task_ids: expected integers in [0, {num_tasks}), got {sorted(set(t.tolist()))}")
    if not bound > 0:
        raise ValueError(f"bound: expected a number > 0, got {bound}")
    bias = [0.0] * num_tasks
    for k in np.unique(t):
        z, target = prob_logits(p[t == k]), (y[t == k].sum() + 0.5) / ((t == k).sum() + 1)

        def excess(b: float, z: np.ndarray = z, target: float = target) -> float:
            return float(expit(z + b).mean() - target)  # increasing in b

        if excess(-bound) >= 0:
            bias[int(k)] = -bound
        elif excess(bound) <= 0:
            bias[int(k)] = bound
        else:
            bias[int(k)] = float(brentq(excess, -bound, bound, xtol=1e-6))
    return bias


def task_bias_from_rollouts(rollouts: str, policy: str, gate: GraspGateConfig) -> dict[str, Any]:
    """Offsets for the judge `gate` describes, fit on `policy`'s recorded real episodes in the dataset `rollouts`
    (each re-run in imagination from its first frame, closed loop, as the reward gate re-runs its jobs).

    Why here and not on the gate's jobs: the offsets are part of the reward, so they may only see training-side
    jobs (the loop passes the start policy's own rollouts on the collected init states). The judge is fit without
    offsets (any in gate.grasp_point are ignored). Returns {"bias": [NUM_TASKS] offsets, "jobs": N, "tasks": per
    task id {"jobs", "real_successes", "imagined_before", "imagined_after"}}: the mean P(success) before and after
    the offsets next to the real successes they were fit to."""
    from imagination.eval.grasp_gate import grasp_gate_records
    from robot_data.sim_labels import label_dataset

    label_dataset(rollouts, progress=False)  # replays only episodes not labelled yet
    plain = replace(gate, grasp_point=replace(gate.grasp_point, task_bias=[]))
    records = grasp_gate_records(rollouts, policy, plain, ["closed_loop"])["closed_loop"]
    p = np.array([r["max_success_prob"] for r in records])
    y = np.array([r["real_success"] for r in records])
    t = np.array([r["task_id"] for r in records])
    bias = fit_task_bias(p, y, t)
    q = apply_task_bias(p, t, bias)
    tasks = {int(k): {"jobs": int((t == k).sum()), "real_successes": int(y[t == k].sum()),
                      "imagined_before": round(float(p[t == k].mean()), 4),
                      "imagined_after": round(float(q[t == k].mean()), 4)} for k in np.unique(t)}
    return {"bias": [round(b, 4) for b in bias], "jobs": len(records), "tasks": tasks}


__all__ = ["fit_task_bias", "task_bias_from_rollouts"]
