"""Which policy the loop keeps: a round's policy replaces the kept one only when its real evaluation shows it at
least as good, within a margin, on the same jobs.

Why: on LIBERO-Object one loop round of the demo's recipe made the policy worse than BC, shown on its paired jobs,
and the loop carried the worse policy on (docs/suites.md, "The demo's recipe (the grasp reward) on
LIBERO-Object"). A round now has to earn its place: paired job by job against the policy the loop keeps
(imagination/eval/stats.py), it is adopted when the lower end of the 95% interval of (round - kept) is at least
-margin, i.e. it is shown no worse than the kept policy by more than the margin (a non-inferiority test).
Otherwise the loop keeps the policy it had, and the next round's RL starts from that one. The jobs are the loop's
own real evaluation (`LoopConfig.eval`), which the rl_gain benchmark does not score.

    decision = adoption(round_=1, candidate="round1", kept="bc", kept_episodes=..., candidate_episodes=...,
                        margin=0.10)
    decision["adopted"], decision["reason"]
"""
from __future__ import annotations

from imagination.eval.stats import paired_difference


def adoption(round_: int, candidate: str, kept: str, kept_episodes: list[dict], candidate_episodes: list[dict],
             margin: float) -> dict:
    """The record of one decision: the candidate phase against the kept one, paired over the same real jobs
    (results.json "episodes"), adopted when its interval's lower end is >= -margin (a success-rate difference)."""
    if not 0 <= margin <= 1:
        raise ValueError(f"adopt_margin: expected a success-rate difference in [0, 1], got {margin}")
    d = paired_difference(kept_episodes, candidate_episodes)
    lo, hi = d.ci95_points
    adopted = lo >= -100 * margin
    figure = f"{d.gain_points:+.1f} [{lo:+.1f}, {hi:+.1f}] points against {kept} over {d.n} real jobs"
    if adopted:
        reason = f"{figure}: not shown worse by more than {100 * margin:.0f} points"
    else:
        reason = f"{figure}: it may be worse by more than {100 * margin:.0f} points, so the loop keeps {kept}"
    return {"round": round_, "candidate": candidate, "kept_before": kept, "adopted": bool(adopted),
            "kept": candidate if adopted else kept, "diff_points": d.gain_points, "ci95_points": [lo, hi],
            "jobs": d.n, "margin": margin, "reason": reason}


def task_adoption(kept: str, candidate: str, kept_episodes: list[dict], candidate_episodes: list[dict],
                  margin: float) -> dict[int, dict]:
    """`adoption` task by task: {task_id: record}, each decided on that task's paired jobs alone.

    Why per task: one RL run fine-tunes every task, and its judge is sound on some tasks and blind on others; a
    whole-policy decision then either keeps a collapse on one task or throws away a gain on another (docs/results.md,
    "Protocol v2: imagination's own gain"). policies/task_switch.py deploys the decisions as one checkpoint."""
    tasks = sorted({int(r["task_id"]) for r in kept_episodes})
    out = {}
    for t in tasks:
        mine = [r for r in kept_episodes if int(r["task_id"]) == t]
        theirs = [r for r in candidate_episodes if int(r["task_id"]) == t]
        out[t] = adoption(0, candidate, kept, mine, theirs, margin) | {"task": t}
    return out


def adoption_lines(records: list[dict]) -> list[str]:
    """Markdown for the report: each round's decision and the policy the loop ended with."""
    out = ["## Which policy the loop kept", ""]
    if not records:
        return out + ["No round was decided (the loop ran no RL round with a real evaluation).", ""]
    out += ["A round's policy replaces the kept one only when its real evaluation, paired job by job, shows it no "
            "worse by more than the margin (`adopt_margin`); otherwise the next round starts from the kept one.", "",
            "| round | candidate | kept before | against it (points, 95%) | adopted | kept after |",
            "|---|---|---|---|---|---|"]
    for r in records:
        lo, hi = r["ci95_points"]
        out.append(f"| {r['round']} | {r['candidate']} | {r['kept_before']} | {r['diff_points']:+.1f} [{lo:+.1f}, "
                   f"{hi:+.1f}] | {'yes' if r['adopted'] else 'no'} | {r['kept']} |")
    last = records[-1]
    return out + ["", f"The loop's policy: **{last['kept']}**. Why: {last['reason']}.", ""]


__all__ = ["adoption", "adoption_lines", "task_adoption"]
