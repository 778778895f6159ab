"""Where imagination loses the outcome: the grasp point read at three stages, against real outcomes.

    python bench/reward_ceiling.py                  # the rl_gain protocol's world model, BC and gate episodes,
                                                    # with its recipe's classifier data and proprio model
    python bench/reward_ceiling.py --policy outputs/bench/rl_gain/run/rl/policy.pt   # the RL policy's episodes

The reward gate (bench/reward_signal.py) asks whether imagination tells the policy's real failures from its
successes, and both rewards fail it. This bench says which stage loses the signal. A grasp-point classifier
(world_models/grasp_point.py: where the gripper first closes relative to the object's start position) is
fit on training-side episodes with known outcomes (by default what the rl_gain recipe fits it on: the
protocol's labelled data, the BC policy's own labelled rollouts and near-miss label episodes, init states
0-9 only; bench/recipe_inputs.py `build_recipe`) and then reads the gate's real episodes of the policy (init
states 10-19) three ways (imagination/eval/grasp_gate.py):

    recorded     the robot states the simulator recorded: how much of the outcome the grasp point holds
    predicted    the recorded actions through imagination's proprio model (open loop): what its drift costs
    closed_loop  the policy acting on imagined frames from the episode's first frame (world model + proprio):
                 what a reward built on the grasp point would see in imagined RL

With `--until release --lead N` both imagined stages start N steps before each episode's recorded release,
holding the recording's grasp: what the judge of imagined RL's placement starts sees; with `--until close --lead N`
they start N steps before its first close (grasp starts). The starts are rounded down to the steps at which the
policy chose its chunks for real (its n_action_steps; `--align 0` keeps them where they fall).

Each stage prints the within-task AUC against the real outcomes with its 95% bootstrap interval and the
imagined against real success count per task. `BENCH reward_ceiling ... PASS|FAIL`: PASS when the
closed-loop AUC reaches the reward gate's threshold (0.80); the exit status is 1 otherwise, 2 when an
input is missing (the gate's episodes are recorded by bench/reward_signal.py).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import torch

from bench.protocol import RLGainProtocol
from imagination.eval.grasp_gate import STAGES, GraspGateConfig, grasp_gate_records
from imagination.eval.reward_gate import THRESHOLD_AUC, within_task_auc_interval
from infra.errors import run_main
from policies.base import Policy


def stage_line(name: str, records: list[dict]) -> tuple[str, float]:
    probs = np.array([r["max_success_prob"] for r in records])
    real = np.array([r["real_success"] for r in records])
    tasks = np.array([r["task_id"] for r in records])
    est = within_task_auc_interval(probs, real, tasks)
    per_task = " ".join(f"{t}:{int((probs[tasks == t] >= 0.5).sum())}/{int(real[tasks == t].sum())}"
                        for t in np.unique(tasks))
    return (f"{name:12s} AUC within task {est.point:.2f} [{est.ci95[0]:.2f}, {est.ci95[1]:.2f}] on {est.pairs} pairs;"
            f" predicted/real successes per task {per_task}"), est.point


def main(argv: list[str] | None = None) -> int:
    proto = RLGainProtocol()
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--train-data", nargs="+", default=[proto.path("data"), proto.path("own_rollouts/data")],
                   help="labelled recorded datasets (scripts/label_episodes.py) of the training init states")
    p.add_argument("--label-dirs", nargs="*", default=[proto.near_miss_path()],
                   help="scripts/collect_labels.py out_dirs (those that do not exist are skipped)")
    p.add_argument("--gate-data", default=proto.path("gate/data"), help="the gate's recorded, labelled episodes")
    p.add_argument("--policy", default=proto.path("bc_file"), help="whose gate episodes are read, and who acts")
    p.add_argument("--world-model", default=proto.path("world_model_file"))
    p.add_argument("--proprio", default=proto.path("own_proprio_file"), help="ProprioModel file (the recipe's)")
    p.add_argument("--imagined-envs", type=int, default=10)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--samples", type=int, default=1, help="closed-loop imagined runs per episode (seeds --seed, "
                                                          "--seed+1, ...), their probabilities combined by --combine")
    p.add_argument("--combine", choices=("mean", "min"), default="mean",
                   help="mean: P(success) over the world model's noise; min: a success only where all runs agree")
    p.add_argument("--until", choices=("close", "release"), default="close",
                   help="judge the grasp alone, or the grasp and where the carried object is let go "
                        "(imagination.grasp_until)")
    p.add_argument("--lead", type=int, default=0,
                   help="imagine from this many steps before each episode's recorded event: with --until release its "
                        "release, holding its grasp (imagined RL's placement starts; episodes that release sooner "
                        "after their close are left out); with --until close its first close (grasp starts; "
                        "episodes that close sooner are left out)")
    p.add_argument("--align", type=int, default=None,
                   help="with --lead: round each start down to a multiple of this many steps, the steps at which the "
                        "policy chose its chunks for real (default: the policy's own n_action_steps, e.g. 8); "
                        "0: no rounding")
    p.add_argument("--no-closed-loop", action="store_true",
                   help="stop after the predicted stage (e.g. episodes of a policy that is no longer on disk); "
                        "the BENCH line then has no verdict and the exit status is 0")
    args = p.parse_args(argv)
    for name, path in (("--world-model", args.world_model), ("--proprio", args.proprio), ("--policy", args.policy),
                       ("--gate-data", args.gate_data), *(("--train-data", d) for d in args.train_data)):
        if not Path(path).exists():
            print(f"{name}: {path} not found; `python bench/reward_signal.py` records and labels the gate's "
                  "episodes, `python bench/rl_gain.py` builds the rest")
            return 2
    torch.set_num_threads(1)
    if args.align is None:  # a recorded policy decided at its chunk boundaries only: start there
        args.align = Policy.load(args.policy).n_action_steps if args.lead > 0 else 0
    cfg = GraspGateConfig(world_model=args.world_model, proprio=args.proprio, train_data=list(args.train_data),
                          label_dirs=[d for d in args.label_dirs if Path(d).is_dir()], until=args.until,
                          lead=args.lead, align=args.align, num_envs=args.imagined_envs, seed=args.seed,
                          samples=args.samples, combine=args.combine)
    stages = STAGES[:2] if args.no_closed_loop else STAGES
    try:
        runs = grasp_gate_records(args.gate_data, args.policy, cfg, stages)
    except ValueError as err:
        print(f"{err}; run `python bench/reward_signal.py` first")
        return 2
    n = len(runs["recorded"])
    print(f"grasp-point classifier fit on {args.train_data} and the label folders;\n"
          f"{n} gate episodes of {args.policy} ({sum(r['real_success'] for r in runs['recorded'])} real successes)")
    points: dict[str, float] = {}
    for name in stages:
        line, points[name] = stage_line(name, runs[name])
        print(line)
    aligned = f" align={args.align}" if args.align else ""
    head = (f"BENCH reward_ceiling until={args.until} lead={args.lead}{aligned} samples={args.samples} "
            f"combine={args.combine} "
            f"episodes={n} recorded={points['recorded']:.2f} predicted={points['predicted']:.2f}")
    if args.no_closed_loop:
        print(f"{head} closed_loop=not_run")
        return 0
    ok = points["closed_loop"] >= THRESHOLD_AUC
    print(f"{head} closed_loop={points['closed_loop']:.2f} threshold_closed_loop={THRESHOLD_AUC:.2f} "
          f"{'PASS' if ok else 'FAIL'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(run_main(main))  # input errors as one line, exit 2 (infra/errors.py)
