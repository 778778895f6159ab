"""Two evaluations of the same jobs compared job by job (scripts/compare_evals.py): the paired difference with its
95% interval overall and per task, the jobs gained and lost, and how the failures happened in each.

Why a tool of its own: every recipe choice is a comparison of a policy with its start on the same (task, init state,
seed) jobs, and the paired interval (imagination/eval/stats.py) is the figure that decides it; two success rates
side by side are not.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from envs.outcome import failure_counts
from imagination.eval.stats import PairedDifference, paired_difference


@dataclass
class CompareConfig:
    before: str = ""  # an eval_policy.py out_dir (or its results.json): the baseline
    after: str = ""  # another, of the same jobs
    confidence: float = 0.95

    def validate(self) -> None:
        for name in ("before", "after"):
            if not getattr(self, name):
                raise ValueError(f"{name}: required, an eval_policy.py out_dir or its results.json")
        if not 0 < self.confidence < 1:
            raise ValueError(f"confidence: expected a number in (0, 1), got {self.confidence}")


def load_results(path: str, name: str) -> dict:
    """results.json of an evaluation: `path` is the file or the out_dir holding it."""
    p = Path(path)
    p = p / "results.json" if p.is_dir() else p
    if not p.is_file():
        raise FileNotFoundError(f"{name}: {p} not found (expected an eval_policy.py out_dir or its results.json)")
    results = json.loads(p.read_text())
    if "episodes" not in results:
        raise ValueError(f"{name}: {p} holds no episode records (expected eval_policy.py's results.json)")
    return results


def _line(label: str, d: PairedDifference, confidence: float) -> str:
    lo, hi = d.ci95_points
    return (f"{label}: {round(d.before * d.n)}/{d.n} -> {round(d.after * d.n)}/{d.n}   {d.gain_points:+.1f} points "
            f"[{lo:+.1f}, {hi:+.1f}] ({100 * confidence:.0f}%), {d.improved} gained, {d.worsened} lost")


def compare_evaluations(cfg: CompareConfig) -> dict:
    """The paired comparison of cfg.after against cfg.before, overall and per task; prints it and returns
    {"overall": {...}, "per_task": {task: {...}}} (each: n, before, after, gain_points, ci95_points, gained, lost)."""
    cfg.validate()
    before, after = load_results(cfg.before, "before")["episodes"], load_results(cfg.after, "after")["episodes"]

    def summary(d: PairedDifference) -> dict:
        return {"n": d.n, "before": d.before, "after": d.after, "gain_points": d.gain_points,
                "ci95_points": list(d.ci95_points), "gained": d.improved, "lost": d.worsened}

    overall = paired_difference(before, after, cfg.confidence)
    print(_line("all jobs", overall, cfg.confidence))
    per_task = {}
    for task in sorted({int(r["task_id"]) for r in before}):
        d = paired_difference([r for r in before if int(r["task_id"]) == task],
                              [r for r in after if int(r["task_id"]) == task], cfg.confidence)
        print(_line(f"task {task}", d, cfg.confidence))
        per_task[task] = summary(d)
    for label, records in (("before", before), ("after", after)):
        if kinds := failure_counts(records):
            print(f"{label} failures: " + ", ".join(f"{k} {n}" for k, n in sorted(kinds.items())))
    return {"overall": summary(overall), "per_task": per_task}


__all__ = ["CompareConfig", "compare_evaluations", "load_results"]
