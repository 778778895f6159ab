"""Real LIBERO success before and after imagined RL, from the same BC checkpoint and the same initial states.

    python bench/rl_gain.py --run outputs/demo            # BC, world model and data of a finished `make demo`
    python bench/rl_gain.py --bc bc/policy.pt --world-model wm/world_model.pt --data data --episodes-per-task 20
    python bench/rl_gain.py --bc bc/policy.pt --rl-run gpu/rl          # RL already run (e.g. on a GPU machine)

1. evaluate the BC policy in real LIBERO: tasks x episodes-per-task jobs (task, official init state, seed);
2. RL in imagination from that policy with the rl preset (default: configs/loop/quick.yaml's rl section);
   the in-process LIBERO step counter is read before and after, so "real env steps during RL" is measured;
3. evaluate the RL policy on exactly the same jobs.
Prints both rates with 95% Wilson intervals, the gain in points and `BENCH rl_gain ... PASS|FAIL`;
exits 1 when the gain is below --threshold points (quick preset: +10; our full-preset goal is +30).
With --rl-run, step 2 is read from a finished `scripts/imagine_rl.py` out_dir instead (its policy.pt
and result.json, whose real_env_steps that run counted itself); the policy must start from --bc.
Each step's results are kept in --out-dir and reused by a re-run (RL resumes from its checkpoint).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("MUJOCO_GL", "egl")

from omegaconf import OmegaConf

from envs.libero_env import LiberoEnv
from imagination.evaluate import EvalConfig, evaluate
from imagination.loop import LoopConfig
from imagination.rl_training import train_rl
from scripts.cli import load_config


def _evaluate(cfg: EvalConfig, label: str) -> dict:
    path = Path(cfg.out_dir) / "results.json"
    if path.exists():  # a finished evaluation of the same jobs: reuse it
        old = json.loads(path.read_text())
        if old["config"]["checkpoint"] == cfg.checkpoint and old["overall"]["episodes"] == cfg.episodes_per_task * len(cfg.tasks):
            print(f"{label}: reusing {path}")
            return old
    return evaluate(cfg)


def _halves(history: list[dict], key: str) -> str:
    """'a -> b': mean of `key` over the first and the second half of the RL iterations that drew it."""
    vals = [row[key] for row in history if key in row]
    if len(vals) < 2:
        return "n/a"
    h = len(vals) // 2
    return f"{sum(vals[:h]) / h:.2f} -> {sum(vals[h:]) / (len(vals) - h):.2f}"


def per_task_lines(before: dict, after: dict, history: list[dict]) -> list[str]:
    """Real success per task before -> after (two evaluate() results), imagined success per task during
    RL, and how the real failures happened (envs.outcome; results written before it have no such line)."""
    lines = []
    for t in sorted(before["per_task"], key=int):
        pb, pa = before["per_task"][t], after["per_task"][t]
        lines.append(f"task {t}: BC {pb['successes']}/{pb['episodes']}  ->  RL {pa['successes']}/{pa['episodes']}   "
                     f"imagined during RL {_halves(history, f'imagined_success_task{t}')}   {pb['instruction']}")
    for label, r in (("BC", before), ("RL", after)):
        if "failures" in r["overall"]:
            lines.append(f"{label} failures: " + (", ".join(f"{k} {n}" for k, n in r["overall"]["failures"].items())
                                                  or "none"))
    return lines


def finished_rl_run(run: Path, bc: str) -> dict:
    """result.json of a finished imagine_rl.py out_dir, checked to have started from the BC policy `bc`."""
    for name in ("result.json", "policy.pt", "config.yaml"):
        if not (run / name).is_file():
            raise SystemExit(f"--rl-run: {run / name} not found (expected a finished scripts/imagine_rl.py out_dir)")
    started = str(OmegaConf.load(run / "config.yaml").get("policy", ""))
    # the run may have been made on another machine, under another path: the file name must match
    if Path(started).name != Path(bc).name:
        raise SystemExit(f"--rl-run: that run started from {started!r}, not from --bc {bc!r}")
    rl = json.loads((run / "result.json").read_text())
    return dict(rl, policy_path=str(run / "policy.pt"))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--run", default="", help="a finished loop run (make demo): takes bc/, world_model/ and data/ from it")
    p.add_argument("--bc", default="", help="BC policy (Policy.save file)")
    p.add_argument("--world-model", default="", help="world model file")
    p.add_argument("--data", default="", help="dataset whose episodes start imagined ones")
    p.add_argument("--rl-run", default="", help="a finished imagine_rl.py out_dir to evaluate instead of running RL "
                                                "here (its config.yaml must name --bc as the starting policy)")
    p.add_argument("--preset", default="quick", help="loop preset whose rl section configures the RL (configs/loop/)")
    p.add_argument("--rl", nargs="*", default=[], help="extra overrides of that rl section, e.g. iterations=20")
    p.add_argument("--tasks", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--episodes-per-task", type=int, default=17, help="17 x 3 tasks = 51 episodes per arm")
    p.add_argument("--num-envs", type=int, default=2)
    p.add_argument("--out-dir", default="outputs/bench/rl_gain")
    p.add_argument("--threshold", type=float, default=10.0, help="minimum gain in percentage points")
    args = p.parse_args(argv)
    run = Path(args.run) if args.run else None
    bc = args.bc or (str(run / "bc" / "policy.pt") if run else "")
    wm = args.world_model or (str(run / "world_model" / "world_model.pt") if run else "")
    data = args.data or (str(run / "data") if run else "")
    needed = (("--bc", bc),) if args.rl_run else (("--bc", bc), ("--world-model", wm), ("--data", data))
    for name, path in needed:
        if not path or not Path(path).exists():
            p.error(f"{name}: {path or '(not given)'} does not exist; give it or --run with a finished `make demo` run")
    out = Path(args.out_dir)
    loop = load_config(LoopConfig, args.preset, [f"rl.{o}" for o in args.rl], group="loop")
    base = replace(loop.eval, tasks=args.tasks, episodes_per_task=args.episodes_per_task, num_envs=args.num_envs,
                   videos=2)

    before = _evaluate(replace(base, checkpoint=bc, out_dir=str(out / "eval_bc")), "BC")
    if args.rl_run:
        rl = finished_rl_run(Path(args.rl_run), bc)
        real_steps = rl["real_env_steps"]  # counted by LiberoEnv in the process that ran the RL
    else:
        rl_cfg = replace(loop.rl, policy=bc, world_model=wm, start_data=data, out_dir=str(out / "rl"))
        steps_before = LiberoEnv.process_steps
        rl = train_rl(rl_cfg)
        real_steps = LiberoEnv.process_steps - steps_before  # LiberoEnv steps simulated in this process during RL
    after = _evaluate(replace(base, checkpoint=rl["policy_path"], out_dir=str(out / "eval_rl")), "RL")

    b, a = before["overall"], after["overall"]
    gain = 100 * (a["success_rate"] - b["success_rate"])
    print("\n".join(per_task_lines(before, after, rl["history"])))
    ok = gain >= args.threshold
    print(f"imagined success during RL: {rl['first'].get('imagined_success_rate', 0):.2f} -> "
          f"{rl['last'].get('imagined_success_rate', 0):.2f} over {rl['iterations']} iterations ({rl['seconds']:.0f} s)")
    print(f"BENCH rl_gain episodes={b['episodes']} before={b['success_rate']:.3f} "
          f"before_ci95=[{b['ci95'][0]:.2f},{b['ci95'][1]:.2f}] after={a['success_rate']:.3f} "
          f"after_ci95=[{a['ci95'][0]:.2f},{a['ci95'][1]:.2f}] gain_points={gain:+.1f} "
          f"real_env_steps_during_rl={real_steps} threshold_points={args.threshold:+.0f} {'PASS' if ok else 'FAIL'}")
    return 0 if ok and real_steps == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
