"""The report's "Imagination's own gain": each RL phase of the loop against the better of its two controls on the
same real jobs, BC (the start) and the real-data control (BC fine-tuned on every real episode round 1's RL consumed,
no world model; imagination/loop/arms.py), paired job by job, and how many jobs would resolve the difference."""
from __future__ import annotations

import math
from collections.abc import Mapping

from imagination.eval.stats import paired_difference
from imagination.loop.arms import own_gain

RESOLVE_POINTS = 10.0  # the half-width of the paired 95% interval that would tell a +10-point gain from none


def jobs_to_resolve(n: int, half_width_points: float, target_points: float = RESOLVE_POINTS) -> int:
    """Jobs whose paired 95% interval would be `target_points` wide on each side, when n jobs gave
    `half_width_points`: the half-width shrinks as 1/sqrt(jobs)."""
    if half_width_points <= 0:
        return n
    return max(n, math.ceil(n * (half_width_points / target_points) ** 2))


def own_gain_lines(phases: list[dict], real: Mapping[str, dict | None]) -> list[str]:
    """Markdown: each arm against BC, and each RL phase's own gain against the better control, with intervals."""
    out = ["## Imagination's own gain", ""]
    ran = {p["name"]: r for p in phases if (r := real.get(p["name"]))}
    if "bc" not in ran or "control" not in ran:
        return out + ["Not measured: it needs the real evaluations of BC and of the real-data control "
                      "(`control_arm: true`, a fresh out_dir).", ""]
    labels = {p["name"]: p["label"] for p in phases}
    controls = {name: ran[name]["episodes"] for name in ("bc", "control")}
    out += ["Every arm on the same real jobs, paired job by job (95% intervals, points). The own gain is an RL "
            "phase's success minus the better control's: what imagination added beyond training BC and using the "
            "same real episodes directly.", ""]
    rows = []
    for p in phases:
        if p["name"] == "bc" or p["name"] not in ran:
            continue
        d = paired_difference(ran["bc"]["episodes"], ran[p["name"]]["episodes"])
        vs_bc = f"{d.gain_points:+.1f} [{d.ci95_points[0]:+.1f}, {d.ci95_points[1]:+.1f}]"
        own, need = "-", "-"
        if p.get("rl"):
            best, avg = own_gain(controls, [ran[p["name"]]["episodes"]])
            g = avg.difference
            lo, hi = g.ci95_points
            own = f"{g.gain_points:+.1f} [{lo:+.1f}, {hi:+.1f}] against {labels[best]}"
            need = str(jobs_to_resolve(g.n, (hi - lo) / 2))
        rows.append([p["label"], f"{ran[p['name']]['overall']['successes']}/{ran[p['name']]['overall']['episodes']}",
                     vs_bc, own, need])
    out += ["| arm | real success | against BC | own gain | jobs for a +-10-point interval |",
            "|---|---|---|---|---|"] + ["| " + " | ".join(r) + " |" for r in rows] + [""]
    out += [f"BC: {ran['bc']['overall']['successes']}/{ran['bc']['overall']['episodes']}. Where the interval includes "
            "0 the effect is not shown; the last column says how many paired jobs (`eval.episodes_per_task` x "
            "tasks) would make the interval +-10 points at the spread measured here (`bench/rl_gain.py` runs the "
            "full protocol).", ""]
    return out


__all__ = ["RESOLVE_POINTS", "jobs_to_resolve", "own_gain_lines"]
