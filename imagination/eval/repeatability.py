"""Reality against itself: how well can any judge predict a policy's real outcome on a job?

The reward gate (`imagination/eval/reward_gate.py`) asks an imagined judge to rank one recorded real
episode per job: its success against its failure, within each task. A perfect copy of the simulator would
reach 1.0, but no world model is one: at 64 px it blurs and shifts what the policy sees by far more than a
pixel. If the same policy, on the same job, succeeds or fails depending on such detail, then no judge that
does not reproduce the world exactly can rank the recorded outcomes well, and the gate's threshold can lie
above what any world model could reach.

This module measures that ceiling from real episodes only. The reference is the recorded evaluation the
gate scores against; each repeat is the same policy on the same jobs (task, init state) with a perturbation
much smaller than a world model's error (another reset seed, or pixel noise in what the policy sees:
`EvalConfig.obs_noise`). Each job's "probability" is its success rate over the repeats, and it is scored
exactly as the gate scores an imagined one:

    figs = repeat_figures(reference["episodes"], [r["episodes"] for r in repeats])
    figs["auc_within_task"], figs["auc_within_task_ci95"]   # the gate's statistic, with repeats as the judge
    figs["auc_by_repeats"]                                  # the same with 1, 2, ... K repeats (mean over subsets)
    figs["agreement"]                                       # P(a repeat's outcome == the reference's)

Using k of the K repeats gives the ceiling of a judge with k imagined samples per job (the gate's default
is one); the AUC still rising at k = K says more repeats would raise it further. `judge_gap` sets an imagined
judge's AUC on the same jobs against reality's with one repeat, with a paired interval.
"""
from __future__ import annotations

from itertools import combinations
from typing import Any

import numpy as np

from imagination.eval.closed_loop import outcome_separation
from imagination.eval.reward_gate import (
    calibration_table,
    joint_calibration_p_value,
    paired_calibration,
    resampled_within_task_aucs,
    within_task_auc_interval,
)

JobKey = tuple[int, int]  # (task_id, init_state_id): a repeat keeps the job, not its reset seed


def _outcomes(episodes: list[dict], name: str) -> dict[JobKey, bool]:
    out: dict[JobKey, bool] = {}
    for r in episodes:
        try:
            key = (int(r["task_id"]), int(r["init_state_id"]))
            ok = bool(r["success"])
        except KeyError as err:
            raise ValueError(f"{name}: episode records need task_id, init_state_id and success; "
                             f"missing {err}") from None
        if key in out:
            raise ValueError(f"{name}: job (task {key[0]}, init state {key[1]}) appears twice")
        out[key] = ok
    return out


def repeat_figures(reference: list[dict], repeats: list[list[dict]], resamples: int = 2000,
                   seed: int = 0) -> dict[str, Any]:
    """The gate's figures with the repeats as the judge (see the module doc).

    reference: results.json episode records of the recorded evaluation; repeats: K >= 1 lists of records
    of the same jobs. Returns a JSON-ready dict: jobs, repeats, reference_successes, repeat_successes (per
    repeat), agreement, auc, auc_within_task with ci95 and pairs, auc_by_repeats ([k=1, ..., k=K]),
    calibration (per task: the reference's successes against the repeats' mean, rounded),
    max_calibration_gap (|mean repeat rate - reference rate|, unrounded) and max_calibration_gap_by_repeat
    (per repeat, its largest per-task |rate - reference rate|: the gate's calibration check with one repeat
    as the judge, as a judge that imagines each job once is held to it), and per repeat the gate's paired
    tests with that repeat as the judge: paired_calibration_by_repeat (reward_gate.TaskAgreement rows) and
    joint_calibration_p_by_repeat."""
    if not repeats:
        raise ValueError("repeats: at least one repeated evaluation of the reference's jobs is needed")
    ref = _outcomes(reference, "reference")
    reps = [_outcomes(r, f"repeat {i + 1}") for i, r in enumerate(repeats)]
    for i, rep in enumerate(reps):
        if rep.keys() != ref.keys():
            missing, extra = sorted(ref.keys() - rep.keys()), sorted(rep.keys() - ref.keys())
            raise ValueError(f"repeat {i + 1}: expected the reference's {len(ref)} jobs (task, init state); "
                             f"missing {missing[:5]}, extra {extra[:5]}")
    keys = sorted(ref)
    labels = np.array([ref[k] for k in keys], bool)
    tasks = np.array([k[0] for k in keys])
    succ = np.array([[rep[k] for k in keys] for rep in reps], float)  # [K, N]
    probs = succ.mean(0)
    est = within_task_auc_interval(probs, labels, tasks, resamples=resamples, seed=seed)
    by_k = []
    for k in range(1, len(reps) + 1):
        aucs = [outcome_separation(succ[list(c)].mean(0), labels, tasks).auc_within_task
                for c in combinations(range(len(reps)), k)]
        by_k.append(float(np.nanmean(aucs)) if not np.isnan(aucs).all() else float("nan"))
    rows = calibration_table(probs, labels, tasks, 0.5)
    gaps = [abs(float(probs[tasks == r.task_id].mean()) - r.real_rate) for r in rows]
    by_repeat = [max(abs(float(s[tasks == r.task_id].mean()) - r.real_rate) for r in rows) for s in succ]
    paired = [paired_calibration(s, labels, tasks, 0.5) for s in succ]
    return {"jobs": len(keys), "repeats": len(reps), "reference_successes": int(labels.sum()),
            "repeat_successes": [int(s.sum()) for s in succ],
            "agreement": float((succ == labels[None]).mean()),
            "auc": outcome_separation(probs, labels, tasks).auc, "auc_within_task": est.point,
            "auc_within_task_ci95": list(est.ci95), "pairs": est.pairs, "tasks_with_both_outcomes": est.tasks,
            "auc_by_repeats": by_k,
            "calibration": [{"task_id": r.task_id, "jobs": r.jobs, "reference_successes": r.real_successes,
                             "repeat_rate": float(probs[tasks == r.task_id].mean())} for r in rows],
            "max_calibration_gap": max(gaps, default=float("nan")), "max_calibration_gap_by_repeat": by_repeat,
            "paired_calibration_by_repeat": [[a.as_dict() for a in rows_k] for rows_k in paired],
            "joint_calibration_p_by_repeat": [joint_calibration_p_value(rows_k) for rows_k in paired]}


def judge_gap(judge: dict[JobKey, float], reference: list[dict], repeats: list[list[dict]], resamples: int = 2000,
              seed: int = 0) -> dict[str, Any]:
    """An imagined judge (each job's probability, keyed (task_id, init_state_id)) against reality with one repeat.

    Both rank the reference's outcomes; reality's AUC is the mean of its K single-repeat AUCs, the fair
    comparison for a judge that imagines each job once. Returns the two within-task AUCs, their difference
    (judge - reality) and its 95% bootstrap interval: jobs resampled within each task, both AUCs computed on
    the same resample, so the interval is paired."""
    ref = _outcomes(reference, "reference")
    reps = [_outcomes(r, f"repeat {i + 1}") for i, r in enumerate(repeats)]
    if judge.keys() != ref.keys() or any(r.keys() != ref.keys() for r in reps):
        raise ValueError(f"judge and repeats: expected the reference's {len(ref)} jobs (task, init state) each")
    keys = sorted(ref)
    labels, tasks = np.array([ref[k] for k in keys], bool), np.array([k[0] for k in keys])
    scores = np.array([[judge[k] for k in keys]] + [[rep[k] for k in keys] for rep in reps], float)  # [1 + K, N]
    point = [outcome_separation(sc, labels, tasks).auc_within_task for sc in scores]
    boot = resampled_within_task_aucs(scores, labels, tasks, resamples, seed)  # [1 + K, R]
    diff = boot[0] - boot[1:].mean(0)
    diff = diff[~np.isnan(diff)]
    lo, hi = (float(x) for x in np.quantile(diff, [0.025, 0.975])) if len(diff) else (float("nan"),) * 2
    reality = float(np.mean(point[1:]))
    return {"judge_auc_within_task": float(point[0]), "reality_auc_within_task_1_repeat": reality,
            "gap": float(point[0]) - reality, "gap_ci95": [lo, hi]}


__all__ = ["judge_gap", "repeat_figures"]
