"""Choose a suite's protocol-v2 setting on its init states 0-19, and record it before any RL is scored there.

    python bench/choose_start.py --suite libero_object                      # tasks 0-9, 1 demonstration per task,
                                                                            # BC for 1000, 2000 and 4000 steps
    python bench/choose_start.py --suite libero_object --tasks 0 1 2 3 4 --steps 2000 4000

Protocol v2 (docs/loop.md, "Protocol v2: imagination's own gain") starts imagined RL from the best BC the
demonstrations give, and takes its headroom from the setting (few demonstrations, harder tasks), never from a
weakened start. This bench makes that choice for one suite the way it was made for LIBERO-Spatial: it collects the
protocol's training data (init states 0-9, the loop preset's collection), trains BC from `--demos` demonstrations
per task for each of `--steps`, evaluates every candidate on the choose jobs (init states 0-19, 20 per task), and
keeps the one with the most real success (the fewer steps on a tie). When that start's average success lies in
`--band` (20-70%: room to gain, and successes to learn from) the setting is written to <root>/setting.json, which
`bench/rl_gain.py --suite S` reads; outside the band nothing is written and the exit status is 1: change the setting
(other tasks, more or fewer demonstrations), not the start.

A setting is recorded once: after a recipe has been scored on the suite's benchmark jobs (its ledger,
bench/protocol.py ledger_path) it is refused again, because a setting chosen after looking at RL results is no longer
fixed before them.

Prints each candidate's real success per task and `BENCH choose_start suite=.. chosen_steps=.. rate=.. PASS|FAIL`.
Every BC and evaluation is kept under <root>/bc_sweep/bc<steps>/ and reused by a re-run, so a root holds one
setting's candidates (<root>/choosing.json): another --tasks or --demos under it is refused; give another --root.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from dataclasses import replace
from pathlib import Path

os.environ.setdefault("MUJOCO_GL", "egl")

from bench.ledger import scored_recipes
from bench.protocol import (
    RECORDED_SETTINGS,
    SUITE_ROOTS,
    RLGainProtocol,
    collect_data,
    ledger_path,
    setting_path,
    start_bc_config,
)
from bench.task_gate import gate_config
from imagination.eval.evaluate import evaluate_or_reuse
from imagination.loop.config import LoopConfig
from infra.atomic import atomic_write_json
from infra.cli import load_config
from infra.errors import run_main
from policies.bc import train_bc_on_data


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--suite", required=True, choices=sorted(SUITE_ROOTS), help="the LIBERO suite")
    p.add_argument("--tasks", type=int, nargs="+", default=list(range(10)), help="the suite's tasks in the setting")
    p.add_argument("--demos", type=int, default=1, help="successful expert demonstrations per task that BC imitates")
    p.add_argument("--steps", type=int, nargs="+", default=[1000, 2000, 4000], help="BC training steps to try")
    p.add_argument("--band", type=float, nargs=2, default=[0.20, 0.70], metavar=("LOW", "HIGH"),
                   help="the average real success the chosen start must lie in")
    p.add_argument("--root", default="", help="the suite protocol's folder (default bench/protocol.py SUITE_ROOTS)")
    p.add_argument("--preset", default="quick", help="loop preset whose collection, BC and evaluation it uses")
    p.add_argument("--num-envs", type=int, default=2, help="real simulators in parallel (one per core)")
    return p


def choose(args: argparse.Namespace) -> int:
    root = args.root or SUITE_ROOTS[args.suite]
    recorded = RECORDED_SETTINGS.get(args.suite)
    if recorded is not None and Path(root) == Path(recorded.root):
        raise ValueError(f"--root: {root} holds protocol v2's {args.suite} setting, chosen and recorded already "
                         "(bench/protocol.py RECORDED_SETTINGS); give another --root to choose a new one")
    if not args.steps or min(args.steps) < 1 or args.demos < 1:
        raise ValueError(f"--steps, --demos: expected positive integers, got {args.steps}, {args.demos}")
    if not 0.0 <= args.band[0] < args.band[1] <= 1.0:
        raise ValueError(f"--band: expected 0 <= LOW < HIGH <= 1, got {args.band}")
    if scored_recipes(ledger_path(root)):
        raise ValueError(f"{root}: recipes have been scored on this setting's benchmark jobs; a setting chosen "
                         "after RL results were seen is not fixed before them. Choose under a new --root")
    # One setting per root: the data, BCs and evaluations under it are reused by a re-run, so a re-run with other
    # tasks or demonstrations would score the old setting's candidates as the new one's
    trying = {"suite": args.suite, "tasks": list(args.tasks), "bc_demos_per_task": args.demos}
    tried = Path(root, "choosing.json")
    if tried.is_file() and (old := json.loads(tried.read_text())) != trying:
        raise ValueError(f"--root: {root} holds the candidates of {old}; choose {trying} under another --root")
    atomic_write_json(tried, trying)
    loop = load_config(LoopConfig, args.preset, group="loop")
    proto = RLGainProtocol(root=root, suite=args.suite, tasks=tuple(args.tasks), bc_demos_per_task=args.demos)
    choose_jobs = proto.bench_offset  # init states 0-19: the training and the gate's, never the benchmark's
    print(f"choosing the start of {proto.describe()} on init states 0-{choose_jobs - 1}")
    data = collect_data(proto, loop)
    # the choose jobs as bench/rl_gain.py's gate evaluates them: init states 0-19 of the setting's tasks
    choose = gate_config(replace(loop.eval, env=args.suite, tasks=list(args.tasks), seed=proto.seed,
                                 num_envs=args.num_envs, fast_render=True), choose_jobs)
    rows: dict[int, dict] = {}
    for steps in sorted(set(args.steps)):
        folder = Path(root, "bc_sweep", f"bc{steps}")
        bc = replace(start_bc_config(replace(proto, bc_steps=steps), loop), data_dir=data, out_dir=str(folder))
        if not (folder / "result.json").is_file():
            print(f"BC from {args.demos} demonstration(s) per task, {steps} steps -> {folder}")
            train_bc_on_data(bc)
        ev = replace(choose, checkpoint=str(folder / "policy.pt"), out_dir=str(folder / "eval_0_19"))
        rows[steps] = evaluate_or_reuse(ev, f"BC {steps} steps on the choose jobs")
    best = max(rows, key=lambda k: (rows[k]["overall"]["success_rate"], -k))
    for steps, r in rows.items():
        o, (lo, hi) = r["overall"], r["overall"]["ci95"]
        tasks = " / ".join(str(r["per_task"][str(t)]["successes"]) for t in args.tasks)
        print(f"BC {steps:5d} steps: {o['successes']}/{o['episodes']} [{100 * lo:.1f}, {100 * hi:.1f}]  "
              f"tasks {tasks} (of {choose_jobs}){'   <- the start' if steps == best else ''}")
    rate = rows[best]["overall"]["success_rate"]
    ok = args.band[0] <= rate <= args.band[1]
    if ok:
        chosen_bc = Path(root, "bc")
        if not chosen_bc.exists():  # the protocol's start is the chosen candidate itself, not a retrained copy
            shutil.copytree(Path(root, "bc_sweep", f"bc{best}"), chosen_bc, ignore=shutil.ignore_patterns("eval_*"))
        atomic_write_json(setting_path(root), {
            "suite": args.suite, "tasks": list(args.tasks), "bc_demos_per_task": args.demos, "bc_steps": best,
            "chosen_on": f"init states 0-{choose_jobs - 1}", "band": list(args.band),
            "candidates": {str(k): {"successes": r["overall"]["successes"], "episodes": r["overall"]["episodes"],
                                    "per_task": {t: v["successes"] for t, v in r["per_task"].items()}}
                           for k, r in rows.items()}}, indent=2)
        print(f"setting recorded in {setting_path(root)}: python bench/rl_gain.py --suite {args.suite}")
    else:
        print(f"the best start averages {100 * rate:.0f}%, outside {100 * args.band[0]:.0f}-{100 * args.band[1]:.0f}%:"
              " nothing recorded; change the setting (tasks, --demos), not the start")
    print(f"BENCH choose_start suite={args.suite} tasks={','.join(map(str, args.tasks))} demos={args.demos} "
          + " ".join(f"steps{k}={r['overall']['success_rate']:.3f}" for k, r in rows.items())
          + f" chosen_steps={best} rate={rate:.3f} band=[{args.band[0]:.2f},{args.band[1]:.2f}] "
          f"{'PASS' if ok else 'FAIL'}")
    return 0 if ok else 1


def main(argv: list[str] | None = None) -> int:
    return choose(parser().parse_args(argv))


if __name__ == "__main__":
    sys.exit(run_main(main))  # input errors as one line, exit 2 (infra/errors.py)
