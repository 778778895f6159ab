"""A recipe judged on its seeds: each seed's real evaluation against a baseline's on the same jobs.

    python bench/seeds.py outputs/bench/rl_gain/gate750/eval_bc/results.json \\
        outputs/bench/rl_gain/bal/gate_seed0/results.json outputs/bench/rl_gain/bal/gate_seed1/results.json ...
    python bench/seeds.py old/eval_rl/results.json new/eval_rl/results.json new/eval_rl1/results.json \\
        --baseline-seeds old/eval_rl1/results.json     # two recipes, each on its seeds: new's mean - old's mean

Prints each seed's successes, the job-by-job mean over seeds against the baseline in points with its paired
95% interval (imagination/eval/stats.py `seed_average`), and the spread of the seeds, then
`BENCH seeds seeds=N gain_points=... gain_ci95=[..] seed_sd_points=... PASS|FAIL`. PASS needs the interval's
lower end above 0 (the effect is shown) and a gain of at least --threshold points.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from imagination.eval.stats import seed_average
from infra.errors import run_main


def _episodes(path: str) -> list[dict]:
    p = Path(path)
    if not p.is_file():
        raise SystemExit(f"{path}: not a file (an eval_policy results.json)")
    return json.loads(p.read_text())["episodes"]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("baseline", help="results.json of the baseline (e.g. the BC start) on the jobs")
    ap.add_argument("seeds", nargs="+", help="results.json of each seed of the recipe, on the same jobs")
    ap.add_argument("--threshold", type=float, default=10.0, help="minimum gain in points")
    ap.add_argument("--baseline-seeds", nargs="+", default=[], metavar="RESULTS",
                    help="results.json of the baseline's other seeds, when the baseline is a recipe run with several "
                         "seeds too: it is then the job-by-job mean of `baseline` and these")
    args = ap.parse_args(argv)
    avg = seed_average(_episodes(args.baseline), [_episodes(p) for p in args.seeds],
                       before_seeds=[_episodes(p) for p in args.baseline_seeds])
    d = avg.difference
    n = d.n
    print(f"baseline: {d.before * n:.1f}/{n}, the mean of {1 + len(args.baseline_seeds)} seeds" if args.baseline_seeds
          else f"baseline: {round(d.before * n)}/{n}")
    for path, rate in zip(args.seeds, avg.per_seed):
        print(f"  seed {path}: {round(rate * n)}/{n} ({100 * (rate - d.before):+.1f} points)")
    lo, hi = d.ci95_points
    ok = lo > 0 and d.gain_points >= args.threshold
    print(f"BENCH seeds seeds={len(args.seeds)} baseline_seeds={1 + len(args.baseline_seeds)} jobs={n} "
          f"before={d.before:.3f} after={d.after:.3f} "
          f"gain_points={d.gain_points:+.1f} gain_ci95=[{lo:+.1f},{hi:+.1f}] seed_sd_points={avg.seed_sd_points:.1f} "
          f"threshold_points={args.threshold:+.0f} {'PASS' if ok else 'FAIL'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(run_main(main))
