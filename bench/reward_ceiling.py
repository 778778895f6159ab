"""Where imagination loses the outcome: the grasp point read at three stages, against real outcomes.

    python bench/reward_ceiling.py                  # the rl_gain protocol's world model, BC and gate episodes
    python bench/reward_ceiling.py --train-data outputs/bench/rl_gain/data outputs/bench/rl_gain/own_rollouts/data

The reward gate (bench/reward_signal.py) asks whether imagination tells the policy's real failures from its
successes, and both rewards fail it. This bench says which stage loses the signal. A grasp-point classifier
(world_models/grasp_point.py: where the gripper first closes relative to the object's start position) is
fit on training-side episodes with known outcomes (the protocol's labelled data, near-miss label episodes,
optionally the policy's own labelled rollouts: init states 0-9 only) and then reads the gate's real
episodes of the policy (init states 10-19) three ways:

    recorded     the robot states the simulator recorded: how much of the outcome the grasp point holds
    predicted    the recorded actions through imagination's proprio model (open loop): what its drift costs
    closed_loop  the policy acting on imagined frames from the episode's first frame (world model + proprio):
                 what a reward built on the grasp point would see in imagined RL

Each stage prints the within-task AUC against the real outcomes with its 95% bootstrap interval and the
imagined against real success count per task. `BENCH reward_ceiling ... PASS|FAIL`: PASS when the
closed-loop AUC reaches the reward gate's threshold (0.80); the exit status is 1 otherwise, 2 when an
input is missing (the gate's episodes are recorded by bench/reward_signal.py).
"""
from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import numpy as np
import torch

from bench.protocol import RLGainProtocol
from envs.errors import run_main
from envs.sim_labels import read_sim_labels
from imagination.env import ImaginationConfig
from imagination.eval.reward_gate import THRESHOLD_AUC, within_task_auc_interval
from imagination.imagine import ImaginedEpisodes, imagine, open_imagination, policy_mean, recorded_actions
from imagination.keyframes import Keyframe
from policies.base import Policy
from world_models.grasp_point import dataset_features, fit_grasp_point, grasp_features, place_features
from world_models.proprio import ProprioModel


def imagined_features(run: ImaginedEpisodes, proprio: ProprioModel, starts: list[np.ndarray],
                      targets: list[np.ndarray], place: bool = False) -> list[np.ndarray]:
    """Grasp (place=True: grasp-and-release) features of each imagined episode: every step's robot state
    rebuilt from the chunk-start states the run kept and the proprio model's prediction within each chunk."""
    assert run.state is not None  # imagine(keep_obs=True)
    out = []
    for e in range(len(run.keyframes)):
        rows = np.flatnonzero(run.env == e)
        rows = rows[np.argsort(run.step[rows])]
        acts = torch.as_tensor(run.actions[rows])  # [n, K, 7]
        # the actions before each chunk, as the env fed them: the previous chunks' (the run starts at frame 0)
        flat = torch.cat([torch.zeros(proprio.cfg.history, 7), acts.reshape(-1, 7)])
        K, H = acts.shape[1], proprio.cfg.history
        history = torch.stack([flat[j * K:j * K + H] for j in range(len(rows))])
        with torch.no_grad():  # [n, K, S]: the state after each action of each chunk
            after = proprio.predict(torch.as_tensor(run.state[rows]), acts, history).numpy()
        states = np.concatenate([np.concatenate([run.state[r][None], after[j, :-1]]) for j, r in enumerate(rows)])
        featurize = place_features if place else grasp_features
        out.append(featurize(states, run.actions[rows].reshape(-1, 7), starts[e], targets[e]))
    return out


def stage_line(name: str, probs: np.ndarray, real: np.ndarray, tasks: np.ndarray) -> tuple[str, float]:
    est = within_task_auc_interval(probs, real, tasks)
    per_task = " ".join(f"{t}:{int((probs[tasks == t] >= 0.5).sum())}/{int(real[tasks == t].sum())}"
                        for t in np.unique(tasks))
    return (f"{name:12s} AUC within task {est.point:.2f} [{est.ci95[0]:.2f}, {est.ci95[1]:.2f}] on {est.pairs} pairs;"
            f" predicted/real successes per task {per_task}"), est.point


def main(argv: list[str] | None = None) -> int:
    proto = RLGainProtocol()
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--train-data", nargs="+", default=[proto.path("data")],
                   help="labelled recorded datasets (scripts/label_episodes.py) of the training init states")
    p.add_argument("--label-dirs", nargs="*", default=[proto.path("near_miss_labels_s16"),
                                                       proto.path("near_miss_labels")],
                   help="scripts/collect_labels.py out_dirs (those that do not exist are skipped)")
    p.add_argument("--gate-data", default=proto.path("gate/data"), help="the gate's recorded, labelled episodes")
    p.add_argument("--policy", default=proto.path("bc_file"), help="whose gate episodes are read, and who acts")
    p.add_argument("--world-model", default=proto.path("world_model_file"))
    p.add_argument("--proprio", default=proto.path("proprio_file"), help="ProprioModel file (bench/reward_signal.py's)")
    p.add_argument("--imagined-envs", type=int, default=10)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--until", choices=("close", "release"), default="close",
                   help="judge the grasp alone, or the grasp and where the carried object is let go "
                        "(imagination.grasp_until)")
    p.add_argument("--no-closed-loop", action="store_true",
                   help="stop after the predicted stage (e.g. episodes of a policy that is no longer on disk); "
                        "the BENCH line then has no verdict and the exit status is 0")
    args = p.parse_args(argv)
    for name, path in (("--world-model", args.world_model), ("--proprio", args.proprio), ("--policy", args.policy),
                       ("--gate-data", args.gate_data), *(("--train-data", d) for d in args.train_data)):
        if not Path(path).exists():
            print(f"{name}: {path} not found; `python bench/reward_signal.py --reward state --state-reward ...` "
                  "records and labels the gate's episodes, `python bench/rl_gain.py` builds the rest")
            return 2
    torch.set_num_threads(1)
    place = args.until == "release"
    clf = fit_grasp_point(args.train_data, [d for d in args.label_dirs if Path(d).is_dir()], place=place)
    gate_feats, gate_tasks, gate_real, idx = dataset_features(args.gate_data, args.policy, place)
    if not idx:
        print(f"--gate-data: {args.gate_data} holds no labelled episode of {args.policy}; "
              "run `python bench/reward_signal.py --reward state --state-reward ...` first")
        return 2
    real, tasks = np.array(gate_real), np.array(gate_tasks)
    print(f"grasp-point classifier fit on {args.train_data} and the label folders;\n"
          f"{len(idx)} gate episodes of {args.policy} ({int(real.sum())} real successes)")
    points: dict[str, float] = {}
    line, points["recorded"] = stage_line("recorded", clf.predict(np.array(gate_feats), tasks), real, tasks)
    print(line)
    policy = Policy.load(args.policy)
    policy.eval()
    # the success threshold is out of reach: nothing ends an episode before the horizon, as in the gate
    env = open_imagination(args.world_model, args.gate_data, args.proprio, num_envs=args.imagined_envs,
                           config=ImaginationConfig(max_steps=220, success_threshold=2.0), indices=idx, policy=policy)
    # dataset_features kept only the labelled episodes: none of these is None
    sims = cast(list[dict[str, Any]], [read_sim_labels(args.gate_data, i) for i in idx])
    starts, targets = [s["object_pos"][0] for s in sims], [s["target_pos"][0] for s in sims]
    stages: list[tuple[str, Callable[[], Any]]] = [("predicted", lambda: recorded_actions(env)),
                                                   ("closed_loop", lambda: policy_mean(policy))]
    for name, make_act in stages[:1] if args.no_closed_loop else stages:
        feats: list[np.ndarray] = []
        for b in range(0, len(idx), env.num_envs):
            k = list(range(b, min(b + env.num_envs, len(idx))))
            run = imagine(env, make_act(), [Keyframe(i, 0) for i in k], seed=args.seed, keep_obs=True)
            feats += imagined_features(run, env.proprio, [starts[i] for i in k], [targets[i] for i in k], place)
        line, points[name] = stage_line(name, clf.predict(np.array(feats), tasks), real, tasks)
        print(line)
    head = (f"BENCH reward_ceiling until={args.until} episodes={len(idx)} recorded={points['recorded']:.2f} "
            f"predicted={points['predicted']:.2f}")
    if args.no_closed_loop:
        print(f"{head} closed_loop=not_run")
        return 0
    ok = points["closed_loop"] >= THRESHOLD_AUC
    print(f"{head} closed_loop={points['closed_loop']:.2f} threshold_closed_loop={THRESHOLD_AUC:.2f} "
          f"{'PASS' if ok else 'FAIL'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(run_main(main))  # input errors as one line, exit 2 (envs/errors.py)
