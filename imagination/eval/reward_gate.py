"""The reward gate's figures: does the success head, in closed loop, see real outcomes?

Imagined RL optimizes whatever the world model's success head says while the policy acts on imagined
frames. `bench/reward_signal.py` re-runs real jobs in imagination (`imagination.eval.closed_loop`) and, from
each job's highest imagined success probability and its real outcome, computes what this module does:

    est = within_task_auc_interval(probs, labels, task_ids)   # AUC within task, 95% bootstrap interval
    rows = calibration_table(probs, labels, task_ids, thr)    # per task: imagined vs real success rate
    v = gate_verdict(est.point, max_calibration_gap(rows))    # PASS: AUC >= 0.80 and every |gap| <= 0.15
    exact_judge_pass_chance(rows)                             # how often a judge as good as reality would pass it
    jobs_for_exact_judge(rows)                                # how many jobs a task it needs to pass 80% of the time
    exact_judge_gap_p_value(rows, max_calibration_gap(rows))  # ... and show a gap this large: beyond noise?
    tests = paired_calibration(probs, labels, task_ids, thr)  # per task: is this judge shown miscalibrated?
    holm_adjust([t.p_value for t in tests])                   # ... corrected for the number of tasks checked
    joint_calibration_p_value(tests)                          # all tasks together: as calibrated as reality?
    figs = gate_figures(records, thr)                          # all of it for closed_loop_records' dicts

Inputs are per job: probs float [N] (highest imagined success probability), labels bool [N] (real
success), task_ids int [N]. "Within task" means pairs of one task only (as in
`imagination.eval.closed_loop.outcome_separation`): GRPO compares episodes from one keyframe, so a head that
only knows which task is hard gives it nothing. Its interval resamples jobs with replacement within
each task (the number of jobs per task fixed), with a fixed seed, and takes the percentile interval of
the resampled within-task AUCs; resamples that draw no pair of a success and a failure are left out.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from imagination.eval.closed_loop import outcome_separation

THRESHOLD_AUC = 0.80  # the within-task AUC a reward must reach before RL is worth running
THRESHOLD_GAP = 0.15  # the largest |imagined - real| success rate allowed on any task
_TOL = 1e-9  # rates are k/n: 0.65 - 0.5 is 0.15000000000000002 in floating point, and must pass


def _arrays(probs: Any, labels: Any, task_ids: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    p, y, t = np.asarray(probs, float), np.asarray(labels, bool), np.asarray(task_ids)
    if not (p.ndim == 1 and p.shape == y.shape == t.shape):
        raise ValueError(f"probs, labels, task_ids: expected three 1-D arrays of one length, got "
                         f"{p.shape}, {y.shape}, {t.shape}")
    return p, y, t


@dataclass(frozen=True)
class AUCEstimate:
    """The within-task AUC of one set of jobs and its bootstrap interval."""

    point: float  # nan when no task has both a real success and a real failure
    ci95: tuple[float, float]  # percentile interval of the resampled AUCs (nan, nan) when unmeasurable
    pairs: int  # (success, failure) pairs of one task the point estimate rests on
    tasks: int  # tasks with both outcomes: the only ones that give pairs
    resamples: int  # bootstrap resamples with at least one pair (the interval's sample)


def within_task_auc_interval(probs: Any, labels: Any, task_ids: Any, resamples: int = 2000, seed: int = 0,
                             confidence: float = 0.95) -> AUCEstimate:
    """Within-task AUC of probs [N] against labels [N] (tasks task_ids [N]) with a bootstrap interval.

    Each resample draws, for every task, as many of its jobs as it has, with replacement; a job drawn
    w times counts w times in every pair it is part of (ties count half, as in the point estimate)."""
    p, y, t = _arrays(probs, labels, task_ids)
    if resamples < 1 or not 0 < confidence < 1:
        raise ValueError(f"resamples >= 1 and 0 < confidence < 1 expected, got {resamples}, {confidence}")
    sep = outcome_separation(p, y, t)
    informative = [k for k in np.unique(t) if y[t == k].any() and not y[t == k].all()]
    pairs = sum(int(y[t == k].sum() * (~y[t == k]).sum()) for k in informative)
    if not informative:
        return AUCEstimate(float("nan"), (float("nan"), float("nan")), 0, 0, 0)
    aucs = resampled_within_task_aucs(p[None], y, t, resamples, seed)[0]
    aucs = aucs[~np.isnan(aucs)]
    a = (1 - confidence) / 2
    lo, hi = (float(x) for x in np.quantile(aucs, [a, 1 - a]))
    return AUCEstimate(float(sep.auc_within_task), (lo, hi), pairs, len(informative), len(aucs))


def resampled_within_task_aucs(scores: np.ndarray, labels: np.ndarray, task_ids: np.ndarray, resamples: int,
                               seed: int) -> np.ndarray:
    """Within-task AUCs [S, R] of S scorers (scores [S, N]) on R bootstrap resamples of the jobs, the same
    resampled jobs for every scorer (so their differences are paired); nan where a resample draws no pair."""
    y, t = np.asarray(labels, bool), np.asarray(task_ids)
    rng = np.random.default_rng(seed)
    u, n_pairs = np.zeros((len(scores), resamples)), np.zeros(resamples)
    for k in [k for k in np.unique(t) if y[t == k].any() and not y[t == k].all()]:
        sk, yk = scores[:, t == k], y[t == k]
        n = len(yk)
        # wins[s, i, j]: success i over failure j for scorer s (1, ties 1/2); 0 where i is no success or j no failure
        wins = ((sk[:, :, None] > sk[:, None, :]) + 0.5 * (sk[:, :, None] == sk[:, None, :])) * np.outer(yk, ~yk)
        counts = rng.multinomial(n, np.full(n, 1.0 / n), size=resamples).astype(float)  # [R, n]
        u += np.einsum("ri,sij,rj->sr", counts, wins, counts)
        n_pairs += (counts @ yk) * (counts @ ~yk)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(n_pairs > 0, u / n_pairs, np.nan)


@dataclass(frozen=True)
class TaskCalibration:
    """One task's imagined success (max probability >= the model's threshold) against its real success."""

    task_id: int
    jobs: int
    real_successes: int
    imagined_successes: int

    @property
    def real_rate(self) -> float:
        return self.real_successes / self.jobs

    @property
    def imagined_rate(self) -> float:
        return self.imagined_successes / self.jobs

    @property
    def gap(self) -> float:
        """imagined - real success rate: > 0 the head is optimistic on this task, < 0 pessimistic."""
        return self.imagined_rate - self.real_rate

    def as_dict(self) -> dict[str, float | int]:
        return {**asdict(self), "real_rate": self.real_rate, "imagined_rate": self.imagined_rate, "gap": self.gap}

    @classmethod
    def from_dict(cls, row: dict[str, Any]) -> TaskCalibration:
        """The row back from `as_dict` (its derived rates and gap are recomputed, not read)."""
        return cls(*(int(row[k]) for k in ("task_id", "jobs", "real_successes", "imagined_successes")))


def calibration_table(probs: Any, labels: Any, task_ids: Any, threshold: float) -> list[TaskCalibration]:
    """Per task (ascending id): jobs, real successes, imagined successes (probs [N] >= threshold)."""
    p, y, t = _arrays(probs, labels, task_ids)
    return [TaskCalibration(int(k), int((t == k).sum()), int(y[t == k].sum()), int((p[t == k] >= threshold).sum()))
            for k in np.unique(t)]


def max_calibration_gap(rows: list[TaskCalibration]) -> float:
    """The largest |imagined - real| success rate over the tasks (nan without any task)."""
    return max((abs(r.gap) for r in rows), default=float("nan"))


def _all_within(rows: list[TaskCalibration], gap: float, inclusive: bool) -> float:
    """P(every task's |imagined - real| <= gap (< gap unless inclusive)) when, on each task, the imagined and the
    real success count are independent Binomial(jobs, p) draws, p the task's observed real rate."""
    chance = 1.0
    for r in rows:
        n, p = r.jobs, r.real_rate
        pmf = np.array([math.comb(n, k) * p ** k * (1 - p) ** (n - k) for k in range(n + 1)])
        gaps = np.abs(np.arange(n + 1)[:, None] / n - np.arange(n + 1)[None, :] / n)  # [imagined, real]
        inside = gaps <= gap + _TOL if inclusive else gaps < gap - _TOL
        chance *= float((np.outer(pmf, pmf) * inside).sum())
    return chance


def exact_judge_pass_chance(rows: list[TaskCalibration], threshold_gap: float = THRESHOLD_GAP) -> float:
    """The chance that a judge as likely to succeed as reality passes the calibration check on these jobs.

    Why: the check compares two success counts of `jobs` episodes each, so sampling noise alone moves the
    gap. Here, on each task, the imagined and the real success count are independent Binomial(jobs, p) draws
    with p the task's observed real rate (the plug-in estimate), i.e. a judge whose every imagined outcome is
    as likely as a real re-run's. Returns P(every task's |imagined - real| <= threshold_gap), exactly (a sum
    over the count pairs, tasks independent). With 10 jobs a task at p = 0.5 it is 0.50 per task."""
    return _all_within(rows, threshold_gap, inclusive=True)


def jobs_for_exact_judge(rows: list[TaskCalibration], chance: float = 0.8, threshold_gap: float = THRESHOLD_GAP,
                         max_jobs: int = 300) -> int | None:
    """How many jobs a task the calibration check needs before a judge as likely to succeed as reality passes it
    with at least `chance`: the smallest n from which on (up to max_jobs) `exact_judge_pass_chance` of the same
    tasks, each with n jobs at its observed real rate, stays >= chance. None when it never does up to max_jobs.

    Why "stays": k/n moves in steps, so the chance is not monotonic in n (on the gate's policies it is 0.12 at
    20 jobs and 0.16 at 30, but 0.60 at 60 and 0.54 at 66); the first n alone could be a lucky step."""
    if not rows:
        return None
    found = None
    for n in range(max(r.jobs for r in rows), max_jobs + 1):
        scaled = [TaskCalibration(r.task_id, n, round(r.real_rate * n), 0) for r in rows]
        if _all_within(scaled, threshold_gap, inclusive=True) >= chance:
            found = n if found is None else found
        else:
            found = None
    return found


def exact_judge_gap_p_value(rows: list[TaskCalibration], observed_gap: float) -> float:
    """How often a judge as likely to succeed as reality (see `exact_judge_pass_chance`) shows a largest
    per-task |imagined - real| of `observed_gap` or more on these jobs: small (< 0.05) means the judge's
    miscalibration is beyond the noise of this many jobs, large means the jobs cannot tell it from noise."""
    return 1.0 - _all_within(rows, observed_gap, inclusive=False)


@dataclass(frozen=True)
class TaskAgreement:
    """One task's imagined outcomes against the real ones, job by job, and whether they differ beyond chance.

    Why paired: the imagined and the real episode of a job start from the same state, so a judge as good as
    reality is a second real re-run of each job. Then a job is as likely to be imagined a success and really
    a failure (`optimistic`) as the other way round (`pessimistic`), whatever each job's own chance is: no
    plug-in rate is needed, unlike `exact_judge_pass_chance`. `p_value` is the exact McNemar test of that: the
    two-sided binomial test of `optimistic` out of the `optimistic + pessimistic` discordant jobs at 1/2
    (1.0 without a discordant job). A task is shown miscalibrated when its p, corrected over every task
    checked (`holm_adjust`), is below 0.05. With 10 jobs a task that needs 8 or more discordant jobs, all
    one way, when 5 tasks are checked (9 at 10): a test that fails to reject here shows the jobs are too few,
    not that the judge is calibrated."""

    task_id: int
    jobs: int
    optimistic: int  # imagined success, real failure
    pessimistic: int  # imagined failure, real success
    p_value: float

    def as_dict(self) -> dict[str, float | int]:
        return asdict(self)


def paired_calibration(probs: Any, labels: Any, task_ids: Any, threshold: float) -> list[TaskAgreement]:
    """Per task (ascending id): the discordant jobs of imagined (probs [N] >= threshold) against real success
    (labels [N]) and their exact McNemar p-value (see `TaskAgreement`)."""
    from scipy.stats import binomtest  # a test's library, not hand-summed tails

    p, y, t = _arrays(probs, labels, task_ids)
    imagined = p >= threshold
    rows = []
    for k in np.unique(t):
        m = t == k
        opt, pes = int((imagined[m] & ~y[m]).sum()), int((~imagined[m] & y[m]).sum())
        pv = binomtest(opt, opt + pes, 0.5).pvalue if opt + pes else 1.0
        rows.append(TaskAgreement(int(k), int(m.sum()), opt, pes, float(min(pv, 1.0))))
    return rows


def joint_calibration_p_value(rows: list[TaskAgreement]) -> float:
    """Is the judge, over all these tasks together, as calibrated as a real re-run? Exact p-value.

    Why jointly: at 10 jobs no single task's paired test can reject after correction (see `TaskAgreement`),
    yet many tasks each a few jobs off, in whichever direction, add up. The statistic is the sum over tasks of
    McNemar's (optimistic - pessimistic)^2 / (optimistic + pessimistic), so opposite errors on two tasks do not
    cancel (they would in a pooled rate). Its null distribution is exact: each discordant job is imagined a
    success or really one with chance 1/2, independently (a judge as good as reality), convolved over tasks.
    Returns P(statistic >= observed) (1.0 without a discordant job)."""
    dist = {0.0: 1.0}  # statistic value -> probability, tasks so far
    observed = 0.0
    for r in rows:
        d = r.optimistic + r.pessimistic
        if d == 0:
            continue
        observed += (r.optimistic - r.pessimistic) ** 2 / d
        task: dict[float, float] = {}
        for o in range(d + 1):
            v = round((2 * o - d) ** 2 / d, 9)  # rounded: equal values from different counts must merge
            task[v] = task.get(v, 0.0) + math.comb(d, o) / 2 ** d
        merged: dict[float, float] = {}
        for a, pa in dist.items():
            for b, pb in task.items():
                key = round(a + b, 9)
                merged[key] = merged.get(key, 0.0) + pa * pb
        dist = merged
    return float(min(1.0, sum(p for v, p in dist.items() if v >= observed - _TOL)))


def holm_adjust(p_values: list[float]) -> list[float]:
    """Holm's step-down adjustment of m p-values (same order back): with them, "adjusted p < alpha" for any
    of the m tests keeps the chance of a false call at <= alpha whichever of the nulls hold."""
    m = len(p_values)
    order = sorted(range(m), key=lambda i: p_values[i])
    adjusted, running = [0.0] * m, 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p_values[i]))  # monotone: never below an earlier step
        adjusted[i] = running
    return adjusted


@dataclass(frozen=True)
class Verdict:
    passed: bool
    measurable: bool  # False when the within-task AUC is undefined (no task with both real outcomes)
    reasons: tuple[str, ...]  # why it failed (empty on PASS)

    @property
    def label(self) -> str:
        return "PASS" if self.passed else "FAIL"


def gate_verdict(auc_within_task: float, max_gap: float, threshold_auc: float = THRESHOLD_AUC,
                 threshold_gap: float = THRESHOLD_GAP) -> Verdict:
    """PASS needs the pooled within-task AUC >= threshold_auc and the largest per-task |imagined - real|
    gap (over every checked policy) <= threshold_gap; both edges pass. An undefined AUC fails."""
    if math.isnan(auc_within_task):
        return Verdict(False, False, ("no task has both a real success and a real failure among the jobs, "
                                      "so the within-task AUC cannot be measured",))
    reasons = []
    if auc_within_task < threshold_auc - _TOL:
        reasons.append(f"within-task AUC {auc_within_task:.3f} < {threshold_auc:.2f}")
    if math.isnan(max_gap) or max_gap > threshold_gap + _TOL:
        reasons.append(f"largest per-task |imagined - real| {max_gap:.3f} > {threshold_gap:.2f}")
    return Verdict(not reasons, True, tuple(reasons))


def gate_figures(records: list[dict], threshold: float, resamples: int = 2000, seed: int = 0) -> dict[str, Any]:
    """Every figure of one set of jobs: records carry task_id, real_success and max_success_prob (as
    `closed_loop_records` / `branch_records` write them). Returns a JSON-ready dict: jobs, real and
    imagined successes, auc, auc_within_task with ci95, pairs and tasks_with_both_outcomes, calibration
    (a row per task) and max_calibration_gap."""
    if not records:
        raise ValueError("records: no jobs to score")
    probs = np.array([r["max_success_prob"] for r in records], float)
    labels = np.array([r["real_success"] for r in records], bool)
    tasks = np.array([r["task_id"] for r in records])
    sep = outcome_separation(probs, labels, tasks)
    est = within_task_auc_interval(probs, labels, tasks, resamples=resamples, seed=seed)
    rows = calibration_table(probs, labels, tasks, threshold)
    gap = max_calibration_gap(rows)
    paired = paired_calibration(probs, labels, tasks, threshold)
    return {"jobs": len(records), "real_successes": int(labels.sum()),
            "imagined_successes": int((probs >= threshold).sum()), "auc": sep.auc, "auc_within_task": est.point,
            "auc_within_task_ci95": list(est.ci95), "pairs": est.pairs,
            "tasks_with_both_outcomes": est.tasks, "bootstrap_resamples": est.resamples, "bootstrap_seed": seed,
            "calibration": [r.as_dict() for r in rows], "max_calibration_gap": gap,
            "exact_judge_pass_chance": exact_judge_pass_chance(rows),
            "exact_judge_gap_p_value": exact_judge_gap_p_value(rows, gap),
            "paired_calibration": [r.as_dict() for r in paired],
            "joint_calibration_p_value": joint_calibration_p_value(paired)}


@dataclass(frozen=True)
class CalibrationChecks:
    """The calibration half of the gate over several policies' jobs (`calibration_checks`)."""

    max_gap: float  # the largest |imagined - real| of any checked policy's task: what the verdict compares
    exact_chance: float  # every policy's `exact_judge_pass_chance` multiplied: they are independent jobs
    gap_p: float  # `exact_judge_gap_p_value` of max_gap over every checked task
    jobs_needed: int | None  # `jobs_for_exact_judge` over every checked task
    holm: dict[str, list[float]]  # per policy, its tasks' McNemar p-values after Holm over every checked task
    shown: list[tuple[str, int]]  # (policy, task) shown miscalibrated: Holm-adjusted p < 0.05
    joint_p: float  # `joint_calibration_p_value` of every checked task together
    tests: int  # how many tasks were checked


def calibration_checks(figs: dict[str, dict[str, Any]], names: list[str]) -> CalibrationChecks:
    """The calibration figures of `gate_figures` results `figs[name]` for each checked policy in `names`, taken
    together. Why together: the verdict's calibration check looks at each policy's each task, so the Holm
    correction counts each, the joint test adds them all, and the pass chances multiply."""
    tests = [(n, a) for n in names for a in figs[n]["paired_calibration"]]
    adjusted = holm_adjust([a["p_value"] for _, a in tests])
    checked = [TaskCalibration.from_dict(r) for n in names for r in figs[n]["calibration"]]
    max_gap = max(figs[n]["max_calibration_gap"] for n in names)
    return CalibrationChecks(
        max_gap=max_gap, exact_chance=math.prod(figs[n]["exact_judge_pass_chance"] for n in names),
        gap_p=exact_judge_gap_p_value(checked, max_gap), jobs_needed=jobs_for_exact_judge(checked),
        holm={n: [q for (m, _), q in zip(tests, adjusted) if m == n] for n in names},
        shown=[(n, int(a["task_id"])) for (n, a), q in zip(tests, adjusted) if q < 0.05],
        joint_p=joint_calibration_p_value([TaskAgreement(**a) for _, a in tests]), tests=len(tests))


__all__ = ["AUCEstimate", "CalibrationChecks", "THRESHOLD_AUC", "THRESHOLD_GAP", "TaskAgreement", "TaskCalibration",
           "Verdict", "calibration_checks", "calibration_table", "exact_judge_gap_p_value", "exact_judge_pass_chance",
           "gate_figures", "gate_verdict", "holm_adjust", "jobs_for_exact_judge", "joint_calibration_p_value",
           "max_calibration_gap", "paired_calibration", "resampled_within_task_aucs", "within_task_auc_interval"]
