"""One policy over several LIBERO suites, reported the way papers do: success per suite and their average.

    python scripts/eval_policy.py checkpoint=policy.pt 'suites=[libero_spatial,libero_object]' episodes_per_task=10

With env=imagination each suite is imagined from start_data's episodes of that suite (one world model over a
dataset that mixes them). Each suite runs as its own evaluation with the same settings (tasks, episodes per task,
init states, seeds) into out_dir/<suite>/ (results.json, videos, and with record_to its real episodes appended
to that dataset). Then out_dir/suites.json and suites.md hold the table: per suite the successes, the rate with
its 95% Wilson interval and the per-task rates; the average is over suites (each weighs the same, as published
tables average Spatial, Object, Goal and Long), next to the pooled rate over all episodes.
"""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any, TypeVar

from imagination.eval.evaluate import wilson_interval
from imagination.eval.jobs import EvalConfig
from imagination.eval.real_rollouts import EvalPolicyConfig, evaluate_policy
from infra.atomic import atomic_write_json, atomic_write_text

C = TypeVar("C", bound=EvalConfig)

SHORT = {"libero_spatial": "Spatial", "libero_object": "Object", "libero_goal": "Goal", "libero_10": "Long"}


def suite_table(results: dict[str, dict]) -> dict[str, Any]:
    """{suite: results.json of its evaluation} -> the per-suite table with the average and the pooled rate."""
    rows = {}
    for suite, r in results.items():
        o = r["overall"]
        rows[suite] = {"successes": o["successes"], "episodes": o["episodes"], "success_rate": o["success_rate"],
                       "ci95": list(o["ci95"]),
                       "per_task": {t: row["success_rate"] for t, row in r["per_task"].items()}}
    n = sum(r["episodes"] for r in rows.values())
    k = sum(r["successes"] for r in rows.values())
    pooled = {"successes": k, "episodes": n, "success_rate": k / max(1, n), "ci95": list(wilson_interval(k, n))}
    return {"suites": rows, "average": sum(r["success_rate"] for r in rows.values()) / max(1, len(rows)),
            "pooled": pooled}


def table_markdown(table: dict[str, Any], checkpoint: str) -> str:
    names = list(table["suites"])
    head = "| policy | " + " | ".join(SHORT.get(s, s) for s in names) + " | Average |"
    rule = "|---" * (len(names) + 2) + "|"
    cells = [f"{100 * r['success_rate']:.1f} [{100 * r['ci95'][0]:.0f}, {100 * r['ci95'][1]:.0f}]"
             for r in table["suites"].values()]
    row = f"| `{checkpoint}` | " + " | ".join(cells) + f" | {100 * table['average']:.1f} |"
    p = table["pooled"]
    return (f"{head}\n{rule}\n{row}\n\nSuccess % per suite [95% Wilson interval]; the average weighs suites equally. "
            f"Pooled over all {p['episodes']} episodes: {p['successes']} successes.\n")


def merge_results(results: dict[str, dict]) -> dict[str, Any]:
    """{suite: results.json of one evaluation} -> one results.json over all of them, for readers of a single
    evaluation (the loop's report and guard): every episode tagged with its suite, per_task keyed
    "<suite>/<task>" (task ids repeat across suites), overall pooled over all episodes, and the suite table."""
    from collections import defaultdict

    from imagination.eval.evaluate import summarize

    episodes = [{**e, "suite": s} for s, r in results.items() for e in r["episodes"]]
    per_task = {f"{s}/{t}": row for s, r in results.items() for t, row in r["per_task"].items()}
    recorded = [r["recorded"] for r in results.values() if r.get("recorded")]
    merged: dict[str, Any] = {"env": "+".join(results), "suites": suite_table(results), "per_task": per_task,
                              "overall": summarize(episodes, defaultdict(str))["overall"], "episodes": episodes}
    if recorded:
        merged["recorded"] = {k: sum(r[k] for r in recorded) for k in recorded[0]}
    return merged


def suite_config(cfg: C, suite: str) -> C:
    """cfg for one of several suites, into out_dir/<suite>/: in real LIBERO env is that suite; in imagination
    (env=imagination) env stays and the episodes start from start_data's episodes of that suite."""
    imagined = cfg.env == "imagination"
    return replace(cfg, out_dir=str(Path(cfg.out_dir) / suite), env=cfg.env if imagined else suite,
                   start_suite=suite if imagined else "")


def evaluate_suites(cfg: EvalPolicyConfig) -> dict[str, Any]:
    """Evaluate cfg's policy on each of cfg.suites (see the module docstring); returns the table."""
    if len(set(cfg.suites)) != len(cfg.suites):
        raise ValueError(f"suites: expected distinct suite names, got {cfg.suites}")
    if "imagination" in cfg.suites:
        raise ValueError("suites: LIBERO suites only; to evaluate in imagination set env=imagination as well")
    results = {s: evaluate_policy(replace(suite_config(cfg, s), suites=[])) for s in cfg.suites}
    table = suite_table(results)
    out = Path(cfg.out_dir)
    atomic_write_json(out / "suites.json", {"checkpoint": cfg.checkpoint, **table}, indent=2)
    md = table_markdown(table, cfg.checkpoint)
    atomic_write_text(out / "suites.md", md)
    print(md)
    return table


__all__ = ["evaluate_suites", "merge_results", "suite_config", "suite_table", "table_markdown"]
