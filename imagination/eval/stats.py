"""Statistics for comparing two evaluations of the same jobs: the paired difference and its interval.

Two policies evaluated on the same (task, init state, seed) jobs are paired data: each job gives a
difference d_j = after_j - before_j in {-1, 0, +1}. Jobs that both policies solve (or both fail) add
no variance, so the paired interval is much narrower than the difference of two independent Wilson
intervals (about +-1.4/sqrt(n) at 50-70% success, docs/loop.md, "The benchmark's protocol"). The interval is
Student's t on the mean of the d_j, which is what a paired t-test reports; at n >= 150 it is the normal interval.

    diff = paired_difference(before["episodes"], after["episodes"])   # results.json episode records
    diff.gain_points, diff.ci95_points                                 # e.g. +12.0, (4.1, 19.9)
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import stats

JobKey = tuple[str, int, int, int]  # (suite, task_id, init_state_id, seed); suite "" in a one-suite evaluation


@dataclass(frozen=True)
class PairedDifference:
    """after - before over n paired jobs, as rates in [0, 1] and their difference in [-1, 1]."""

    n: int
    before: float
    after: float
    diff: float  # mean of after_j - before_j
    ci95: tuple[float, float]  # 95% interval of diff (t on the paired differences)
    improved: int  # jobs failed before and solved after
    worsened: int  # jobs solved before and failed after

    @property
    def gain_points(self) -> float:
        return 100.0 * self.diff

    @property
    def ci95_points(self) -> tuple[float, float]:
        return 100.0 * self.ci95[0], 100.0 * self.ci95[1]


def _key(record: dict) -> JobKey:
    try:
        # task ids repeat across suites: a loop over several suites tags each record with its suite
        # (imagination.eval.suites.merge_results), and a job is only the same job within one suite
        return str(record.get("suite", "")), int(record["task_id"]), int(record["init_state_id"]), int(record["seed"])
    except KeyError as err:
        raise ValueError(f"episode record: expected keys task_id, init_state_id, seed and success, "
                         f"missing {err}") from None


def paired_difference(before: list[dict], after: list[dict], confidence: float = 0.95) -> PairedDifference:
    """Pair two lists of episode records (results.json "episodes") by job and compare their successes.

    Both lists must hold exactly the same jobs: a benchmark whose arms ran different jobs is not paired,
    and silently dropping the unmatched ones would bias it."""
    b = {_key(r): bool(r["success"]) for r in before}
    a = {_key(r): bool(r["success"]) for r in after}
    if len(b) != len(before) or len(a) != len(after):
        raise ValueError("episode records: a (task_id, init_state_id, seed) job appears twice in one evaluation "
                         "(several suites: tag each record with its \"suite\")")
    if set(a) != set(b):
        only_b, only_a = sorted(set(b) - set(a))[:3], sorted(set(a) - set(b))[:3]
        raise ValueError(f"paired evaluations must run the same jobs: before-only {only_b}, after-only {only_a} "
                         "(first three shown; evaluate both policies with the same tasks, init states and seeds)")
    if not b:
        raise ValueError("paired evaluations: no episodes")
    keys = sorted(b)
    x = np.array([b[k] for k in keys], float)
    y = np.array([a[k] for k in keys], float)
    d = y - x
    n, mean = len(d), float(d.mean())
    if n > 1 and d.std(ddof=1) > 0:
        half = float(stats.t.ppf(0.5 + confidence / 2, n - 1) * d.std(ddof=1) / math.sqrt(n))
    else:  # every job changed the same way (or one job): no spread to estimate
        half = 0.0
    return PairedDifference(n=n, before=float(x.mean()), after=float(y.mean()), diff=mean,
                            ci95=(mean - half, mean + half), improved=int((d > 0).sum()), worsened=int((d < 0).sum()))


@dataclass(frozen=True)
class SeedAverage:
    """A recipe run with several seeds, each evaluated on the same jobs as a baseline: the job-by-job mean over
    seeds against the baseline (`difference`: its per-job d_j are fractions), and each seed's own rate."""

    difference: PairedDifference
    per_seed: tuple[float, ...]  # each seed's success rate on the jobs

    @property
    def seed_sd_points(self) -> float:
        """Standard deviation of the seeds' success rates, in points (0 with one seed)."""
        return 100.0 * float(np.std(self.per_seed, ddof=1)) if len(self.per_seed) > 1 else 0.0


def seed_average(before: list[dict], afters: list[list[dict]], confidence: float = 0.95,
                 before_seeds: list[list[dict]] | None = None) -> SeedAverage:
    """Compare a baseline's episode records with those of several seeds of one recipe, all on the same jobs.

    Why: the seed of an imagined-RL run moves its real result by as much as the recipe does (docs/notebook/loop.md,
    "Seeds first": 35 to 19 of 50 gate jobs over five seeds of one recipe), so a recipe is judged on its seeds'
    mean. Per job the seeds' mean success minus the baseline's; the interval is Student's t over the jobs, as in
    `paired_difference` (it covers the job sample, not the seeds, which the spread reports apart).
    before_seeds: the baseline's other seeds when the baseline is a recipe too (two recipes compared, each on its
    seeds); the baseline is then the job-by-job mean of `before` and them."""
    if not afters:
        raise ValueError("afters: expected the episode records of at least one seed")
    befores = [before, *(before_seeds or [])]
    pairs = [paired_difference(before, after, confidence) for after in afters]  # checks every seed's jobs
    for other in befores[1:]:
        paired_difference(before, other, confidence)  # and every baseline seed's
    keys = sorted(_key(r) for r in before)

    def by_job(records: list[dict]) -> list[float]:
        got = {_key(r): float(bool(r["success"])) for r in records}
        return [got[k] for k in keys]

    seeds = np.array([by_job(after) for after in afters])
    base = np.array([by_job(b) for b in befores]).mean(0)
    d = seeds.mean(0) - base
    n, mean = len(d), float(d.mean())
    half = (float(stats.t.ppf(0.5 + confidence / 2, n - 1) * d.std(ddof=1) / math.sqrt(n))
            if n > 1 and d.std(ddof=1) > 0 else 0.0)
    diff = PairedDifference(n=n, before=float(base.mean()), after=float(seeds.mean()), diff=mean,
                            ci95=(mean - half, mean + half), improved=int((d > 0).sum()), worsened=int((d < 0).sum()))
    return SeedAverage(diff, tuple(float(p.after) for p in pairs))


__all__ = ["PairedDifference", "SeedAverage", "paired_difference", "seed_average"]
