"""Does imagined RL raise real LIBERO success? The same BC policy before and after RL, on the same jobs.

    python bench/rl_gain.py                      # the fixed protocol end to end (bench/protocol.py): builds or
                                                 # reuses data, world model, BC and the recipe's inputs under
                                                 # outputs/bench/rl_gain, runs the recipe, evaluates both arms
    python bench/rl_gain.py --rl seed=1 --out-dir outputs/bench/rl_gain/run_seed1   # another seed of the recipe
    python bench/rl_gain.py --recipe grasp --out-dir outputs/bench/rl_gain/run_grasp  # another configs/rl preset
    python bench/rl_gain.py --bc bc/policy.pt --world-model wm/world_model.pt --data data   # your own start
    python bench/rl_gain.py --root outputs/bench/rl_gain_noise16 --bc-augment-noise 16   # a variant of the protocol
                        # whose BC trains with pixel noise; link data/, world_model/ and near_miss_labels_s16/ of
                        # outputs/bench/rl_gain into its root to share them
    python bench/rl_gain.py --bc bc/policy.pt --rl-run gpu/rl          # RL already run (e.g. on a GPU machine)

The protocol (docs/loop.md, "The benchmark's protocol"): LIBERO-Spatial tasks 0-4; the world model, BC
and RL train on init states 0-9, the reward gate (bench/reward_signal.py) uses 10-19, and the benchmark
scores 20-49: 150 real episodes per arm, the same (task, init state, seed) jobs before and after.
1. evaluate the BC policy in real LIBERO on those jobs (fast rendering, one simulator per core);
2. RL in imagination from that policy with the recipe (default configs/rl/grasp_floor.yaml: the grasp-point
   reward on a proprio model fitted on the policy's own rollouts, docs/loop.md). With the protocol's own
   start, its inputs are built first on init states 0-9 (bench/protocol.py `build_recipe`); with your own
   start, the preset's paths are used as they are. The in-process LIBERO step counter is read before and
   after RL, so "real env steps during RL" is measured;
3. evaluate the RL policy on exactly the same jobs.
Prints per-task rates, the gain in points with its paired 95% interval (imagination/eval/stats.py) and
`BENCH rl_gain ... PASS|FAIL`. PASS needs a gain >= --threshold points (+10), the interval's lower end
above 0, and 0 real env steps during RL; the exit status is 1 otherwise. It also says whether the BC
start has headroom (15-65% real success on every task) and whether RL plus both evaluations fit the
90-minute budget. Each step's results are kept in --out-dir and reused by a re-run (RL resumes).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import replace
from pathlib import Path
from typing import cast

os.environ.setdefault("MUJOCO_GL", "egl")

from omegaconf import DictConfig, OmegaConf

from bench.protocol import RLGainProtocol, build, build_recipe, recipe_config
from envs.cli import load_config, save_config
from envs.errors import run_main
from envs.libero_env import LiberoEnv
from imagination.eval.evaluate import evaluate_or_reuse
from imagination.eval.stats import paired_difference
from imagination.loop.config import LoopConfig
from imagination.rl.training import ImagineRLConfig, train_rl

HEADROOM = (0.15, 0.65)  # per-task BC success that leaves RL something to gain and something to learn from
BUDGET_MINUTES = 90  # RL plus both real evaluations on 2 cores


def headroom_line(before: dict) -> str:
    """Whether the BC start leaves room on every task (HEADROOM), with the tasks outside it."""
    out = {t: r["success_rate"] for t, r in before["per_task"].items()
           if not HEADROOM[0] <= r["success_rate"] <= HEADROOM[1]}
    lo, hi = (round(100 * x) for x in HEADROOM)
    if not out:
        return f"BC headroom: every task within {lo}-{hi}% real success"
    return (f"BC headroom: tasks outside {lo}-{hi}%: " + ", ".join(f"task {t} {100 * v:.0f}%" for t, v in out.items())
            + " (a task at its ceiling gives GRPO all-success groups; at the floor, no success to reinforce)")


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


def run_rl(cfg: ImagineRLConfig) -> dict:
    """train_rl(cfg), with cfg saved first as <out_dir>/config.yaml as scripts/imagine_rl.py saves it: the run then
    records its recipe and overrides (a judge's offsets, a seed), and `--rl-run` can evaluate it again."""
    save_config(cfg, Path(cfg.out_dir) / "config.yaml")
    return train_rl(cfg)


def finished_rl_run(run: Path, bc: str) -> dict:
    """result.json of a finished imagine_rl.py out_dir, checked to have started from the BC policy `bc`."""
    for name in ("result.json", "policy.pt", "config.yaml"):
        if not (run / name).is_file():
            raise SystemExit(f"--rl-run: {run / name} not found (expected a finished scripts/imagine_rl.py out_dir)")
    run_cfg = cast(DictConfig, OmegaConf.load(run / "config.yaml"))  # an ImagineRLConfig saved as a mapping
    started = str(run_cfg.get("policy", ""))
    # the run may have been made on another machine, under another path: the file name must match
    if Path(started).name != Path(bc).name:
        raise SystemExit(f"--rl-run: that run started from {started!r}, not from --bc {bc!r}")
    rl = json.loads((run / "result.json").read_text())
    return dict(rl, policy_path=str(run / "policy.pt"))


def main(argv: list[str] | None = None) -> int:
    proto = RLGainProtocol()
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--root", default=proto.root, help="the protocol's folder: what it builds or reuses (a variant's "
                                                      "own, e.g. with --bc-augment-noise)")
    p.add_argument("--bc-augment-noise", type=float, default=proto.bc_augment_noise,
                   help="the protocol's BC start trained with pixel noise up to this std (0-255 units; BCConfig."
                        "augment_noise); a variant of the protocol: give it its own --root")
    p.add_argument("--bc-steps", type=int, default=proto.bc_steps,
                   help="the protocol's BC start trained for this many steps; a variant of the protocol unless it is "
                        "the default: give it its own --root")
    p.add_argument("--bc-task-weights", type=float, nargs="*", default=list(proto.bc_task_weights),
                   help="the protocol's BC start trained with these per-task shares of its draws (BCConfig."
                        "task_weights, task 0 first); a variant of the protocol unless they are the default")
    p.add_argument("--run", default="",
                   help="a finished loop run (make demo): takes bc/, world_model/ and data/ from it")
    p.add_argument("--bc", default="", help="BC policy (Policy.save file); with none of --run/--bc/--world-model/"
                                            "--data, the protocol's own are built or reused")
    p.add_argument("--world-model", default="", help="world model file")
    p.add_argument("--data", default="", help="dataset whose episodes start imagined ones")
    p.add_argument("--rl-run", default="", help="a finished imagine_rl.py out_dir to evaluate instead of running RL "
                                                "here (its config.yaml must name --bc as the starting policy)")
    p.add_argument("--preset", default="quick", help="loop preset whose stage configs build the protocol's data, "
                                                     "world model and BC, and set the evaluation (configs/loop/)")
    p.add_argument("--recipe", default=proto.recipe, help="RL preset (configs/rl/); with the protocol's own start, "
                                                          "pointed at the protocol's inputs")
    p.add_argument("--rl", nargs="*", default=[], help="extra overrides of the recipe, e.g. seed=1 iterations=20")
    p.add_argument("--tasks", type=int, nargs="+", default=list(proto.tasks))
    p.add_argument("--episodes-per-task", type=int, default=proto.bench_episodes_per_task,
                   help="30 x 5 tasks = 150 episodes per arm")
    p.add_argument("--init-state-offset", type=int, default=proto.bench_offset,
                   help="first init state of the benchmark's jobs (the protocol trains on 0-9, gates on 10-19)")
    p.add_argument("--num-envs", type=int, default=2, help="real simulators in parallel (one per core)")
    p.add_argument("--image-size", type=int, default=0,
                   help="render both arms at this size, which the policy resizes to its own (0: the policy's size); "
                        "e.g. 128 for RL on a 128 px world model, so the policy is scored on the frames it trained on")
    p.add_argument("--out-dir", default="", help="where RL and both evaluations go (default <root>/run)")
    p.add_argument("--threshold", type=float, default=10.0, help="minimum gain in percentage points")
    args = p.parse_args(argv)
    loop = load_config(LoopConfig, args.preset, group="loop")
    proto = replace(proto, recipe=args.recipe, root=args.root, bc_augment_noise=args.bc_augment_noise,
                    bc_steps=args.bc_steps, bc_task_weights=tuple(args.bc_task_weights))
    out = Path(args.out_dir or proto.path("run"))
    run = Path(args.run) if args.run else None
    rl_cfg: ImagineRLConfig | None = None
    if not (run or args.bc or args.world_model or args.data):  # the protocol end to end
        built = build(proto, loop)
        bc, wm, data = built["bc"], built["world_model"], built["data"]
        if not args.rl_run:
            built.update(build_recipe(proto, built, loop))
            rl_cfg = recipe_config(proto, built, str(out / "rl"), args.rl)
    else:
        bc = args.bc or (str(run / "bc" / "policy.pt") if run else "")
        wm = args.world_model or (str(run / "world_model" / "world_model.pt") if run else "")
        data = args.data or (str(run / "data") if run else "")
    needed = (("--bc", bc),) if args.rl_run else (("--bc", bc), ("--world-model", wm), ("--data", data))
    for name, path in needed:
        if not path or not Path(path).exists():
            p.error(f"{name}: {path or '(not given)'} does not exist; give it, --run with a finished `make demo` run, "
                    "or no path at all to build the protocol's own")
    base = replace(loop.eval, tasks=args.tasks, episodes_per_task=args.episodes_per_task, num_envs=args.num_envs,
                   init_state_offset=args.init_state_offset, seed=proto.seed, fast_render=True, videos=2,
                   image_size=args.image_size)

    before = evaluate_or_reuse(replace(base, checkpoint=bc, out_dir=str(out / "eval_bc")), "BC")
    print(headroom_line(before))
    if args.rl_run:
        rl = finished_rl_run(Path(args.rl_run), bc)
        real_steps = rl["real_env_steps"]  # counted by LiberoEnv in the process that ran the RL
    else:
        if rl_cfg is None:
            rl_cfg = replace(load_config(ImagineRLConfig, args.recipe, args.rl, group="rl"), policy=bc, world_model=wm,
                             start_data=data, out_dir=str(out / "rl"))
        steps_before = LiberoEnv.process_steps
        rl = run_rl(rl_cfg)
        real_steps = LiberoEnv.process_steps - steps_before  # LiberoEnv steps simulated in this process during RL
    after = evaluate_or_reuse(replace(base, checkpoint=rl["policy_path"], out_dir=str(out / "eval_rl")), "RL")

    diff = paired_difference(before["episodes"], after["episodes"])
    print("\n".join(per_task_lines(before, after, rl["history"])))
    print(f"imagined success during RL: {rl['first'].get('imagined_success_rate', 0):.2f} -> "
          f"{rl['last'].get('imagined_success_rate', 0):.2f} over {rl['iterations']} iterations "
          f"({rl['seconds']:.0f} s)")
    minutes = (rl["seconds"] + before["timing"]["seconds"] + after["timing"]["seconds"]) / 60
    print(f"paired: {diff.improved} jobs gained, {diff.worsened} lost of {diff.n}; RL + both real evaluations "
          f"{minutes:.0f} min (budget {BUDGET_MINUTES})")
    lo, hi = diff.ci95_points
    ok = diff.gain_points >= args.threshold and lo > 0 and real_steps == 0
    tasks = " ".join(f"task{t}={r['successes']}/{r['episodes']}->{after['per_task'][t]['successes']}"
                     for t, r in sorted(before["per_task"].items(), key=lambda kv: int(kv[0])))
    print(f"BENCH rl_gain episodes={diff.n} before={diff.before:.3f} after={diff.after:.3f} "
          f"gain_points={diff.gain_points:+.1f} gain_ci95=[{lo:+.1f},{hi:+.1f}] {tasks} "
          f"real_env_steps_during_rl={real_steps} minutes={minutes:.0f} threshold_points={args.threshold:+.0f} "
          f"{'PASS' if ok else 'FAIL'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(run_main(main))  # input errors as one line, exit 2 (envs/errors.py)
