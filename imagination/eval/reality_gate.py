"""The gate against reality: is an imagined judge as good as a real re-run of the same jobs?

`bench/reward_signal.py`'s verdict holds a judge to fixed thresholds (within-task AUC >= 0.80, every
per-task |imagined - real| <= 0.15; `imagination.eval.reward_gate.gate_verdict`). On the protocol's policies
one real re-run of the very same jobs fails both: it ranks the recorded outcomes at 0.72-0.79, and its
largest per-task gap was 0.20-0.30 on 6 of 6 repeats (docs/notebook/loop.md, "The gate's ceiling"). A judge that
imagines each job once cannot be expected to do better than reality repeated once, so those thresholds
ask for more than the world gives. This verdict asks what can be asked: that the judge be *not shown
worse than one real re-run* (`bench/gate_ceiling.py`'s repeats, reset seeds) on the same jobs:

    ranks:      the judge's within-task AUC interval lies above 0.5 (it ranks real outcomes at all), and
                the paired interval of judge - reality (one repeat, `repeatability.judge_gap`) reaches 0
                (it is not shown to rank them worse than a re-run does);
    calibrated: the exact joint paired test (`reward_gate.joint_calibration_p_value`) gives p >= 0.05: its
                per-task errors are not shown larger than a re-run's, which passes that test 95% of the
                time by construction (3 of 3 re-runs measured did).

    ref, reps = load_reality(ceiling_dir, gate_dir, names)     # recorded and repeated real episodes, pooled
    gap = judge_gap(judge_probs(records, names), ref, reps)
    v = reality_verdict(auc_ci95, gap, joint_p)
    against_reality(records, policies, ceiling_dir, gate_dir, auc_ci95, joint_p)   # all of it, or why not

Jobs of several policies are pooled as the gate pools them: a policy's job is its own job, so each
policy's init-state ids are moved apart by `POLICY_STRIDE` (`tag_jobs`).
"""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from imagination.eval.repeatability import JobKey, judge_gap
from imagination.eval.reward_gate import Verdict

POLICY_STRIDE = 10_000  # init-state ids of policy i become 10_000 i + id when policies' jobs are pooled
ALPHA = 0.05  # "shown": a 95% interval or a test at 5%


def tag_jobs(episodes: list[dict], policy: int) -> list[dict]:
    """Episode records whose init_state_id also names the policy (its index), so that jobs of several pool apart."""
    return [{**e, "init_state_id": POLICY_STRIDE * policy + int(e["init_state_id"])} for e in episodes]


def pool_jobs(per_policy: list[list[dict]]) -> list[dict]:
    """The episode records of several policies (per_policy[i]: policy i's) as one list, tagged by `tag_jobs`."""
    return [e for i, episodes in enumerate(per_policy) for e in tag_jobs(episodes, i)]


def judge_probs(records: list[dict], names: list[str]) -> dict[JobKey, float]:
    """An imagined judge's probability per pooled job, from the gate's records (policy, task_id, init_state_id,
    max_success_prob), keyed as `tag_jobs` keys the real episodes of policy names[i]."""
    out: dict[JobKey, float] = {}
    for r in records:
        if r["policy"] not in names:
            raise ValueError(f"records: policy {r['policy']!r} is not one of {names}")
        key = (int(r["task_id"]), POLICY_STRIDE * names.index(r["policy"]) + int(r["init_state_id"]))
        if key in out:
            raise ValueError(f"records: {r['policy']}'s job (task {key[0]}, init state {r['init_state_id']}) "
                             "appears twice")
        out[key] = float(r["max_success_prob"])
    return out


def _episodes(path: Path) -> list[dict]:
    if not path.is_file():
        raise FileNotFoundError(f"{path} not found: `python bench/gate_ceiling.py` writes the repeats, "
                                "`python bench/reward_signal.py` the recorded gate evaluations")
    return list(json.loads(path.read_text())["episodes"])


def load_reality(ceiling_dir: str | Path, gate_dir: str | Path, names: list[str]
                 ) -> tuple[list[dict], list[list[dict]]]:
    """Reality on the gate's jobs, pooled over policies: the recorded episodes (gate_dir/eval_<name>) and each
    repeat's (ceiling_dir/<name>_r<k>, k = 1 .. the repeats its gate_ceiling.json names). Returns
    (reference [N records], repeats [K][N records]) with init-state ids tagged by policy (`tag_jobs`)."""
    ceiling_dir, gate_dir = Path(ceiling_dir), Path(gate_dir)
    saved = json.loads((ceiling_dir / "gate_ceiling.json").read_text())
    repeats = int(saved["repeats"])
    if repeats < 1:
        raise ValueError(f"{ceiling_dir / 'gate_ceiling.json'}: repeats: expected at least 1, got {repeats}")

    def pooled(root: Path, folder: str) -> list[dict]:  # folder: a pattern of the policy's name {n}
        return pool_jobs([_episodes(root / folder.format(n=n) / "results.json") for n in names])

    reference = pooled(gate_dir, "eval_{n}")
    reps = [pooled(ceiling_dir, f"{{n}}_r{k}") for k in range(1, repeats + 1)]
    return reference, reps


def reality_verdict(auc_ci95: tuple[float, float] | list[float], gap: dict[str, Any], joint_p: float,
                    alpha: float = ALPHA) -> Verdict:
    """PASS when the judge is not shown worse than one real re-run (module docstring): its within-task AUC
    interval `auc_ci95` lies above 0.5, the upper end of `gap["gap_ci95"]` (judge - reality, `judge_gap`) is
    >= 0, and `joint_p` >= alpha. An undefined figure fails, with its reason."""
    lo, _ = auc_ci95
    glo, ghi = gap["gap_ci95"]
    if any(math.isnan(x) for x in (lo, glo, ghi, joint_p)):
        return Verdict(False, False, ("a figure is undefined (no task with both a real success and a real "
                                      "failure among the jobs?)",))
    reasons = []
    if lo <= 0.5:
        reasons.append(f"not shown to rank real outcomes at all: within-task AUC interval reaches 0.5 "
                       f"(lower end {lo:.2f})")
    if ghi < 0:
        reasons.append(f"ranks real outcomes worse than one real re-run: judge - reality "
                       f"{gap['gap']:+.2f} [{glo:+.2f}, {ghi:+.2f}]")
    if joint_p < alpha:
        reasons.append(f"errs by task more than a real re-run: joint paired p = {joint_p:.2g} < {alpha:g}")
    return Verdict(not reasons, True, tuple(reasons))


def reality_missing(ceiling_dir: str | Path, policies: dict[str, str]) -> str | None:
    """Why the real repeats in ceiling_dir cannot judge these policies (name -> checkpoint, in pooling order): no
    gate_ceiling.json, other policies, or a repeat's evaluation missing; None when all are there. Cheap: callers
    check it before imagining anything."""
    path = Path(ceiling_dir) / "gate_ceiling.json"
    if not path.is_file():
        return f"no real repeats of these jobs ({path} not found)"
    saved = json.loads(path.read_text())
    if saved.get("policies") != policies:
        return f"{path} repeated the policies {saved.get('policies')}, not {policies}"
    repeats = int(saved.get("repeats", 0))
    gone = [f"{n}_r{k}" for n in policies for k in range(1, repeats + 1)
            if not (Path(ceiling_dir) / f"{n}_r{k}" / "results.json").is_file()]
    if repeats < 1 or gone:
        return f"{path}: the repeats' evaluations are missing ({', '.join(gone) or 'it names none'})"
    return None


def against_reality(records: list[dict], policies: dict[str, str], ceiling_dir: str | Path, gate_dir: str | Path,
                    auc_ci95: tuple[float, float] | list[float], joint_p: float) -> dict[str, Any]:
    """The judge of the gate's `records` (policies: name -> checkpoint, in pooling order) against the real
    repeats in ceiling_dir. Returns {"measured": False, "why": ...} when there are none for these policies
    and jobs; else {"measured": True, "ceiling": its gate_ceiling.json, the `judge_gap` figures,
    "verdict": "PASS" / "FAIL", "reasons": [...]}."""
    path = Path(ceiling_dir) / "gate_ceiling.json"
    if (why := reality_missing(ceiling_dir, policies)) is not None:
        return {"measured": False, "why": why}
    names = list(policies)
    try:
        reference, repeats = load_reality(ceiling_dir, gate_dir, names)
        gap = judge_gap(judge_probs(records, names), reference, repeats)
    except FileNotFoundError as err:  # a repeat's evaluation was removed
        return {"measured": False, "why": str(err)}
    except ValueError as err:  # the repeats ran other jobs (another gate dir or init states)
        return {"measured": False, "why": f"{path}: {err}"}
    verdict = reality_verdict(auc_ci95, gap, joint_p)
    return {"measured": True, "ceiling": str(path), "repeats": len(repeats), **gap, "verdict": verdict.label,
            "reasons": list(verdict.reasons)}


def reality_line(result: dict[str, Any], joint_p: float) -> str:
    """One line saying what `against_reality` found, or why it could not compare."""
    if not result["measured"]:
        return (f"against one real re-run: not measured, {result['why']}; `python bench/gate_ceiling.py` repeats the "
                "gate's jobs")
    lo, hi = result["gap_ci95"]
    return (f"against one real re-run ({result['ceiling']}, {result['repeats']} repeats): judge - reality "
            f"{result['gap']:+.2f} [{lo:+.2f}, {hi:+.2f}] in within-task AUC, joint paired p {joint_p:.2g}: "
            f"{result['verdict']}" + (" (" + "; ".join(result["reasons"]) + ")" if result["reasons"] else ""))


def reality_fields(result: dict[str, Any]) -> str:
    """The BENCH line's fields for `against_reality`'s result, each followed by a space."""
    if not result["measured"]:
        return "verdict_vs_reality=unmeasured "
    lo, hi = result["gap_ci95"]
    return (f"judge_vs_reality={result['gap']:+.2f} judge_vs_reality_ci95=[{lo:+.2f},{hi:+.2f}] "
            f"verdict_vs_reality={result['verdict']} ")


__all__ = ["ALPHA", "POLICY_STRIDE", "against_reality", "judge_probs", "load_reality", "pool_jobs",
           "reality_fields", "reality_line", "reality_missing", "reality_verdict", "tag_jobs"]
