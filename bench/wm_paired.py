"""Is world model B better than world model A on the same held-out episodes? Paired, episode by episode.

    python bench/wm_paired.py A/horizon/eval.json B/horizon/eval.json
    python bench/wm_paired.py A/horizon/eval.json B/horizon/eval.json --threshold 0.5   # B by at least 0.5 dB

Both files are `bench/wm_fidelity.py` results (its `<out-dir>/horizon/eval.json`) on the same episodes. For each
episode it takes B's moving-region PSNR gain over the still frame minus A's (the still frame is the same for both,
so this is B's moving-region PSNR minus A's), and the same for whole-frame PSNR. It prints the mean of each with a
95% bootstrap interval (episodes resampled, 10,000 times by default). Why paired: two models scored on the same 18
episodes share each episode's difficulty. Their separate intervals (about +-0.5 dB each) overlap even when
the same episodes move together, and the paired interval is several times narrower.

PASS when the paired interval of the moving-region difference lies above --threshold (default 0: B shown better);
exit 1 otherwise, and 2 when an input is unusable (missing, other episodes, another horizon).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from infra.errors import run_main
from world_models.region import bootstrap_interval


def _episodes(path: str) -> tuple[dict[tuple[str, int], dict], int]:
    """(data_dir, episode) -> its per-episode record, and the horizon, of a wm_fidelity eval.json."""
    p = Path(path)
    if not p.is_file():
        raise ValueError(f"{path} is not a file (bench/wm_fidelity.py writes <out-dir>/horizon/eval.json)")
    saved = json.loads(p.read_text())
    rows = saved.get("per_episode")
    if not rows:
        raise ValueError(f"{path}: expected a bench/wm_fidelity.py result with per_episode records")
    return {(str(r["data_dir"]), int(r["episode"])): r for r in rows}, int(rows[0]["steps"])


def paired_mean(diffs: np.ndarray, resamples: int, seed: int = 0) -> tuple[float, float, float]:
    """Mean of the per-episode differences [N] and its 95% percentile bootstrap interval, episodes resampled
    (world_models.region.bootstrap_interval, as wm_fidelity's own intervals are drawn)."""
    lo, hi = bootstrap_interval([np.array([d]) for d in diffs], resamples=resamples, seed=seed)
    return float(diffs.mean()), lo, hi


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("a", help="the reference model's eval.json")
    p.add_argument("b", help="the compared model's eval.json")
    p.add_argument("--threshold", type=float, default=0.0, help="dB the interval's lower end must exceed")
    p.add_argument("--resamples", type=int, default=10_000)
    args = p.parse_args(argv)
    try:
        (a, steps_a), (b, steps_b) = _episodes(args.a), _episodes(args.b)
    except ValueError as err:
        print(f"wm_paired: {err}", file=sys.stderr)
        return 2
    if set(a) != set(b) or steps_a != steps_b:
        print(f"wm_paired: the two results must score the same episodes at one horizon; {args.a} has {len(a)} "
              f"episodes at {steps_a} steps, {args.b} {len(b)} at {steps_b} ({len(set(a) & set(b))} shared)",
              file=sys.stderr)
        return 2
    keys = sorted(a)
    figures = {}
    for name, field in (("moving", "moving_psnr"), ("whole", "psnr")):
        d = np.array([float(b[k][field]) - float(a[k][field]) for k in keys])
        figures[name] = paired_mean(d, args.resamples)
    gain_a = float(np.mean([a[k]["moving_psnr"] - a[k]["static_moving_psnr"] for k in keys]))
    gain_b = float(np.mean([b[k]["moving_psnr"] - b[k]["static_moving_psnr"] for k in keys]))
    (m, lo, hi), (w, wlo, whi) = figures["moving"], figures["whole"]
    print(f"{len(keys)} episodes, {steps_a} steps: moving-region gain over the still frame (episode mean) "
          f"A {gain_a:+.2f} dB, B {gain_b:+.2f} dB")
    print(f"B - A, paired: moving region {m:+.2f} dB [{lo:+.2f}, {hi:+.2f}], whole frame {w:+.2f} dB "
          f"[{wlo:+.2f}, {whi:+.2f}]; {sum(float(b[k]['moving_psnr']) > float(a[k]['moving_psnr']) for k in keys)} "
          f"of {len(keys)} episodes better in the moving region")
    passed = lo > args.threshold
    print(f"BENCH wm_paired episodes={len(keys)} gain_a={gain_a:+.2f} gain_b={gain_b:+.2f} moving_diff={m:+.2f} "
          f"moving_diff_ci95=[{lo:+.2f},{hi:+.2f}] whole_diff={w:+.2f} whole_diff_ci95=[{wlo:+.2f},{whi:+.2f}] "
          f"threshold={args.threshold:+.2f} {'PASS' if passed else 'FAIL'}")
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(run_main(main))
