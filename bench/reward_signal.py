"""The reward gate, run before every RL experiment: does the world model's reward see real outcomes?

    python bench/reward_signal.py                       # the rl_gain protocol's world model, BC and RL policy,
                                                        # judged by its recipe's reward ("grasp")
    python bench/reward_signal.py --reward head         # the world model's success head instead
    python bench/reward_signal.py --branch              # also from 8 steps before each episode's first grasp
    python bench/reward_signal.py --world-model other/world_model.pt --out-dir outputs/bench/gate_other
    python bench/reward_signal.py --policies bc/policy.pt rl/policy.pt --names bc rl
    python bench/reward_signal.py --reward state --state-reward outputs/bench/rl_gain/state_reward/state_reward.pt
    python bench/reward_signal.py --init-state-offset 0 --verdict thresholds   # the training jobs, in
                                                        # <root>/gate_init0 (reality's repeats are of the gate's)
    python bench/reward_signal.py --verdict thresholds  # the issue's fixed thresholds decide instead
    python bench/reward_signal.py --task-bias outputs/bench/rl_gain/gate_init0/grasp_reward/reward_signal.json
                                                        # the judge with per-task offsets fit there,
                                                        # into <gate-dir>/grasp_reward_task_bias

Imagined RL optimizes whatever the success head says while the policy acts on imagined frames. On the
protocol's gate jobs (bench/protocol.py: LIBERO-Spatial tasks 0-4 x init states 10-19, seed 0; nothing
the world model trained on, and none of the benchmark's), for each policy:
1. evaluate it in real LIBERO (fast rendering, 2 simulators, the quick preset's eval settings) and record
   its episodes into the gate dataset (<gate-dir>/data, extra.policy = the checkpoint); a finished
   evaluation of the same checkpoint on the same jobs is reused, and nothing is recorded twice;
2. run the same jobs in imagination (imagination/eval/closed_loop.py): each starts at the real episode's
   first frame, the head never ends an episode, and each job keeps its highest success probability;
   the proprio model is fitted on the training data and cached;
3. score it (imagination/eval/reward_gate.py): the within-task AUC of that probability against the real
   outcome with a 95% bootstrap interval (jobs resampled within each task) and the number of pairs it
   rests on, the overall AUC, and per task the imagined success rate (probability >= the world
   model's calibrated threshold) against the real one.
With --reward grasp (the default, what the rl_gain recipe trains on), step 2 is the policy acting on
imagined frames from each recorded episode's first frame, and the probability is the grasp-point
classifier's P(success) at the imagined first close (imagination/eval/grasp_gate.py; the classifier fit on
the recipe's training-side data, the recipe's proprio model), counted a success at >= 0.5.
The issue's fixed thresholds: the within-task AUC of all policies' jobs pooled >= 0.80 and every policy's
per-task |imagined - real| <= 0.15 (verdict=thresholds; the exit status with --verdict thresholds). Writes
<out-dir>/reward_signal.json (every job and figure). --branch also continues each recorded episode in
imagination from `--lead-steps` before the policy first closes the gripper and reports the same
figures for that start (not part of the verdict).

Beside the verdict it prints how the calibration check sits against its own noise (10 jobs a task):
exact_judge_pass_chance, the chance that a judge as likely to succeed as reality would pass it on these jobs,
and gap_p_value, how often such a judge shows a largest gap as large as the observed one (docs/notebook/loop.md,
"The calibration check's own noise"). Then, job by job, the paired tests (imagination/eval/reward_gate.py:
TaskAgreement): per task the exact McNemar test of the jobs imagined a success that really failed against the
other way round, Holm-corrected over every policy's tasks (shown_miscalibrated=K/M), and the exact joint test of
all of them together (joint_calibration_p: below 0.05, the judge is shown less calibrated than a real re-run).

Then the judge against reality (imagination/eval/reality_gate.py), where bench/gate_ceiling.py has re-run the same
policies on the same jobs (reset seeds): PASS when the judge is not shown worse than one real re-run, i.e. its
within-task AUC interval lies above 0.5, the paired interval of its AUC minus a re-run's reaches 0, and the joint
paired test gives p >= 0.05 (verdict_vs_reality). This is the gate's verdict and exit status (1 on FAIL, 2 when
an input or reality's repeats are missing, checked before imagining): the fixed thresholds above ask more than one
real re-run gives on the protocol's jobs, so no judge can be expected to pass them (docs/notebook/loop.md,
"The gate against reality"). --verdict thresholds makes them decide instead (needed on other jobs than the gate's, e.g.
--init-state-offset 0, which reality's repeats do not cover).

--task-bias fits one logit offset per task (imagination/eval/task_bias.py) on the start policy's jobs of a run on
the training init states (--init-state-offset 0, its own --gate-dir), applies it to the grasp judge here, and
prints the `imagination.grasp_point.task_bias=[...]` override that makes imagined RL judge alike.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
from pathlib import Path
from typing import Any

os.environ.setdefault("MUJOCO_GL", "egl")

from bench import gate_side  # noqa: E402  (after MUJOCO_GL is set above)
from bench.protocol import RLGainProtocol  # noqa: E402
from infra.errors import run_main

LEAD_STEPS = 8


def _missing_line(needed: list[tuple[str, str, str, bool]]) -> str | None:
    """One line naming the missing inputs (label, path shown, file that must exist, is the protocol's own)
    and what makes them; None when nothing is missing."""
    gone = [(label, path, own) for label, path, must, own in needed if not path or not Path(must).exists()]
    if not gone:
        return None
    line = "reward_signal: missing " + ", ".join(f"{label} {path or '(not given)'}" for label, path, _ in gone)
    if any(own for _, _, own in gone):
        return line + ("; `python bench/rl_gain.py` builds the protocol's "
                       "(or give --world-model, --policies, --train-data)")
    return line + "; give existing files"


def _table(name: str, checkpoint: str, figs: dict, holm: list[float] | None = None) -> list[str]:
    """The policy's lines: its AUC, then per task real and imagined successes, the gap and, where `holm` (the
    Holm-adjusted p of each row of figs["paired_calibration"]) is given, the paired test of the gap."""
    from imagination.eval.reward_gate import THRESHOLD_GAP  # imported late, as main's imports are

    lo, hi = figs["auc_within_task_ci95"]
    paired = f"  {'imag+real-':>10}  {'imag-real+':>10}  {'p':>5}  {'p_holm':>6}" if holm else ""
    lines = [f"{name} ({checkpoint}): real {figs['real_successes']}/{figs['jobs']}, imagined "
             f"{figs['imagined_successes']}/{figs['jobs']}; AUC within task {figs['auc_within_task']:.3f} "
             f"[{lo:.2f}, {hi:.2f}] on {figs['pairs']} pairs ({figs['tasks_with_both_outcomes']} tasks with both "
             f"outcomes), AUC {figs['auc']:.3f}",
             f"  {'task':>4}  {'real':>7}  {'imagined':>8}  {'gap':>6}{paired}"]
    for i, r in enumerate(figs["calibration"]):
        line = (f"  {r['task_id']:>4}  {r['real_successes']:>3}/{r['jobs']:<3}  "
                f"{r['imagined_successes']:>4}/{r['jobs']:<3}  {r['gap']:>+6.2f}")
        if holm:
            a = figs["paired_calibration"][i]
            line += f"  {a['optimistic']:>10}  {a['pessimistic']:>10}  {a['p_value']:>5.3f}  {holm[i]:>6.3f}"
        lines.append(line)
    lines.append(f"  largest |imagined - real| {figs['max_calibration_gap']:.2f}; a judge as likely to succeed as "
                 f"reality would stay within {THRESHOLD_GAP:.2f} on every task with probability "
                 f"{figs['exact_judge_pass_chance']:.2f}, and show a gap this large with probability "
                 f"{figs['exact_judge_gap_p_value']:.2f}")
    return lines


def _json_safe(x: Any) -> Any:
    if isinstance(x, float) and math.isnan(x):
        return None
    if isinstance(x, dict):
        return {k: _json_safe(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_json_safe(v) for v in x]
    return x


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--root", default=RLGainProtocol().root, help="the rl_gain protocol's folder (bench/protocol.py)")
    p.add_argument("--world-model", default="", help="world model to check (default: the protocol's)")
    p.add_argument("--policies", nargs="+", default=[], help="policy checkpoints (default: the protocol's BC, and "
                                                             "the RL policy of bench/rl_gain.py when it exists)")
    p.add_argument("--names", nargs="+", default=[], help="one label per policy (default: bc, rl, or folder names)")
    p.add_argument("--train-data", default="", help="the world model's training data: fits the proprio model and "
                                                    "configures a new gate dataset (default: the protocol's)")
    p.add_argument("--gate-dir", default="", help="real side: gate dataset (data/) and real evaluations "
                                                  "(eval_<name>/); default <root>/gate, or <root>/gate_init<N> for "
                                                  "--init-state-offset N")
    p.add_argument("--out-dir", default="", help="imagined runs and reward_signal.json; default: --gate-dir, its "
                                                 "state_reward/ or grasp_reward/ (grasp_reward_task_bias/ with "
                                                 "--task-bias)")
    p.add_argument("--branch", action="store_true", help="also from --lead-steps before each recorded episode's "
                                                         "first grasp (imagination.eval.closed_loop.branch_records)")
    p.add_argument("--lead-steps", type=int, default=LEAD_STEPS)
    p.add_argument("--imagined-envs", type=int, default=25, help="imagined episodes per batch")
    p.add_argument("--imagined-samples", type=int, default=1,
                   help="--reward grasp: imagined runs per job (world-model noise seeds 0, 1, ...), combined by "
                        "--combine")
    p.add_argument("--combine", choices=("mean", "min"), default="mean",
                   help="--reward grasp: mean = P(success) over the runs; min = a success only where all runs agree")
    p.add_argument("--reward", choices=["grasp", "head", "state"], default="grasp",
                   help="what judges success in imagination: the grasp-point classifier of the rl_gain recipe, the "
                        "world model's success head, or a state reward (world_models/object_state.py) carried along "
                        "the imagined robot states")
    p.add_argument("--grasp-train-data", nargs="+", default=[], help="--reward grasp: labelled datasets the "
                   "classifier is fit on (default: the protocol's data and the BC policy's own rollouts)")
    p.add_argument("--grasp-label-dirs", nargs="*", default=None, help="--reward grasp: label-collection folders "
                   "it is also fit on (default: the protocol's near-miss grasps)")
    p.add_argument("--proprio", default="", help="ProprioModel file (default: --reward grasp, the recipe's; else one "
                                                 "fitted on the training data)")
    p.add_argument("--state-reward", default="", help="StateReward checkpoint for --reward state "
                                                      "(scripts/train_state_reward.py)")
    p.add_argument("--init-state-offset", type=int, default=None,
                   help="first init state of the jobs (default: the protocol's gate, 10). 0: the training init "
                        "states, where --task-bias is fit; never the benchmark's")
    p.add_argument("--task-bias", default="", help="--reward grasp: a reward_signal.json of a run on the training "
                   "init states (--init-state-offset 0); the judge's per-task logit offsets are fit on its records "
                   "of one policy (imagination/eval/task_bias.py) and applied here")
    p.add_argument("--task-bias-policy", default="", help="whose records in --task-bias fit the offsets (default: "
                   "the first policy there, the start)")
    p.add_argument("--device", default="cpu", help="where the world model runs (cpu, cuda)")
    p.add_argument("--verdict", choices=("reality", "thresholds"), default="reality",
                   help="what decides PASS and the exit status: reality (default) = the judge is not shown "
                        "worse than one real re-run of the same jobs (imagination/eval/reality_gate.py; needs "
                        "bench/gate_ceiling.py's repeats of these policies on the gate's jobs); thresholds = the fixed "
                        "AUC >= 0.80 and per-task gap <= 0.15, which a real re-run fails too "
                        "(docs/notebook/loop.md, \"The gate against reality\")")
    args = p.parse_args(argv)
    if args.reward == "grasp" and args.branch:
        print("reward_signal: --branch: the branch check runs with --reward head or state", file=sys.stderr)
        return 2
    if args.reward == "state" and not Path(args.state_reward).is_file():
        print(f"reward_signal: --state-reward: {args.state_reward or '(not given)'} is not a file; --reward state "
              "needs one (scripts/train_state_reward.py)", file=sys.stderr)
        return 2
    proto = RLGainProtocol(root=args.root)
    offset = proto.gate_offset if args.init_state_offset is None else args.init_state_offset
    if not 0 <= offset <= proto.bench_offset - proto.gate_init_states:
        print(f"reward_signal: --init-state-offset: expected 0-{proto.bench_offset - proto.gate_init_states} "
              f"(jobs {offset}-{offset + proto.gate_init_states - 1} would reach the benchmark's init states "
              f"{proto.bench_offset}-), got {offset}", file=sys.stderr)
        return 2
    if args.task_bias and args.reward != "grasp":
        print("reward_signal: --task-bias: the per-task offsets calibrate reward 'grasp' only", file=sys.stderr)
        return 2
    try:
        task_bias = gate_side.task_bias_from_json(args.task_bias, args.task_bias_policy) if args.task_bias else None
    except ValueError as err:
        print(f"reward_signal: --task-bias: {err}", file=sys.stderr)
        return 2
    # another job set than the gate's gets its own folder by default, so the gate's recorded episodes stay apart
    gate = Path(args.gate_dir or proto.path("gate" if offset == proto.gate_offset else f"gate_init{offset}"))
    if (line := gate_side.other_jobs(gate / "data", offset, offset + proto.gate_init_states - 1)) is not None:
        print(f"reward_signal: {line}", file=sys.stderr)
        return 2
    wm_path = args.world_model or proto.path("world_model_file")
    train_data = args.train_data or proto.path("data")
    try:
        policies, names = proto.gate_policies(args.policies, args.names)
    except ValueError as err:
        print(f"reward_signal: {err}", file=sys.stderr)
        return 2
    needed = [("world model", wm_path, wm_path, not args.world_model)]
    if not args.world_model:  # the protocol calibrates its model's success threshold after training it
        calibration = str(Path(wm_path).parent / "calibration.json")
        needed.append(("world model calibration", calibration, calibration, True))
    needed += [("training data", train_data, str(Path(train_data, "meta", "info.json")), not args.train_data)]
    needed += [(f"policy {n}", x, x, not args.policies) for n, x in zip(names, policies)]
    grasp_data = list(args.grasp_train_data) or [train_data, proto.path("own_rollouts/data")]
    grasp_dirs = (list(args.grasp_label_dirs) if args.grasp_label_dirs is not None
                  else [proto.near_miss_path()])
    if args.reward == "grasp":
        needed += [("grasp classifier data", d, str(Path(d, "meta", "info.json")), not args.grasp_train_data)
                   for d in grasp_data]
        needed += [("near-miss labels", d, d, args.grasp_label_dirs is None) for d in grasp_dirs]
        recipe_proprio = args.proprio or proto.path("own_proprio_file")
        needed += [("proprio model", recipe_proprio, recipe_proprio, not args.proprio)]
    if (line := _missing_line(needed)) is not None:
        print(line, file=sys.stderr)
        return 2
    policy_map = dict(zip(names, policies))
    ceiling_dir = Path(proto.path("gate_ceiling")) / "seed"
    if args.verdict == "reality":  # checked before any imagining: the verdict needs reality's repeats
        from imagination.eval.reality_gate import reality_missing

        if offset != proto.gate_offset:
            print(f"reward_signal: --verdict reality: the real repeats are of the gate's jobs (init states "
                  f"{proto.gate_offset}-{proto.gate_offset + proto.gate_init_states - 1}); on init states {offset}- "
                  "give --verdict thresholds", file=sys.stderr)
            return 2
        if (why := reality_missing(ceiling_dir, policy_map)) is not None:
            print(f"reward_signal: --verdict reality: {why}; `python bench/gate_ceiling.py` (with the same "
                  "--policies) re-runs the gate's jobs, or give --verdict thresholds", file=sys.stderr)
            return 2

    from imagination.eval.closed_loop import ClosedLoopConfig, branch_records, closed_loop_records
    from imagination.eval.grasp_gate import GraspGateConfig, fit_gate_classifier, grasp_gate_records
    from imagination.eval.reality_gate import against_reality, reality_fields, reality_line
    from imagination.eval.reward_gate import (
        THRESHOLD_AUC,
        THRESHOLD_GAP,
        calibration_checks,
        gate_figures,
        gate_verdict,
    )
    from infra.atomic import atomic_write_json
    from infra.provenance import provenance
    from robot_data.dataset import EpisodeDataset, EpisodeWriter
    from world_models.grasp_point import GraspPointConfig
    from world_models.model import WorldModel

    out = gate_side.out_dir_for(args.out_dir, gate, args.reward, bool(task_bias))
    gate_data = gate / "data"
    if not (gate_data / "meta" / "info.json").is_file():
        EpisodeWriter(gate_data, EpisodeDataset(train_data, verify=False).config).close()
    wm = WorldModel.load(wm_path)
    # the head's threshold is calibrated per checkpoint; the state reward's probability is trained as one
    threshold = float(wm.cfg.head.success_threshold) if args.reward == "head" else 0.5
    own = not args.world_model and not args.train_data
    if args.reward == "grasp":
        proprio = args.proprio or proto.path("own_proprio_file")
    else:
        cached = Path(proto.path("proprio_file")) if own else out / "proprio.pt"
        proprio = args.proprio or gate_side.gate_proprio(cached, train_data, wm.chunk_len)
    last = offset + proto.gate_init_states - 1
    print(f"reward gate: {proto.suite} tasks {list(proto.tasks)} x init states {offset}-{last}, seed "
          f"{proto.seed}; world model {wm_path} (success threshold {threshold:.3f})")
    cl = ClosedLoopConfig(world_model=wm_path, start_data=str(gate_data), proprio=proprio, num_envs=args.imagined_envs,
                          reward=args.reward, state_reward=args.state_reward, device=args.device)
    rows: list[dict] = []
    branch_rows: list[dict] = []
    grasp_clf = None  # --reward grasp: fit once, judges every policy
    for name, ckpt in zip(names, policies):
        size = gate_side.render_size(gate_data, ckpt)
        eval_cfg = proto.gate_eval_config(ckpt, str(gate / f"eval_{name}"), size, offset)
        real = gate_side.real_gate_eval(eval_cfg, gate_data, name)
        if args.reward != "head":  # imagined jobs start the object where the simulator had it
            from robot_data.sim_labels import label_dataset
            label_dataset(str(gate_data))
        if args.reward == "grasp":
            gcfg = GraspGateConfig(world_model=wm_path, proprio=proprio, train_data=grasp_data,
                                   label_dirs=grasp_dirs, num_envs=args.imagined_envs,
                                   samples=args.imagined_samples, combine=args.combine,
                                   grasp_point=GraspPointConfig(task_bias=task_bias["bias"] if task_bias else []))
            grasp_clf = grasp_clf or fit_gate_classifier(gcfg)
            rows += [{"policy": name, **r} for r in
                     grasp_gate_records(str(gate_data), ckpt, gcfg, ["closed_loop"], grasp_clf)["closed_loop"]]
            continue
        imagined_dir = out / f"imagined_{name}"
        inputs = [wm_path, proprio, str(gate / f"eval_{name}" / "results.json")]
        inputs += [args.state_reward] if args.reward == "state" else []
        gate_side.drop_stale(imagined_dir / "results.json", *inputs)
        rows += [{"policy": name, **r} for r in closed_loop_records(real, ckpt, cl, str(imagined_dir))]
        if args.branch:
            branch_rows += [{"policy": name, **r} for r in branch_records(str(gate_data), ckpt, cl, args.lead_steps)]

    def figures(records: list[dict]) -> dict[str, dict]:
        return {n: gate_figures([r for r in records if n in ("all", r["policy"])], threshold) for n in [*names, "all"]}

    figs = figures(rows)
    checks = calibration_checks(figs, names)  # every checked policy's every task together
    holm, shown, joint_p = checks.holm, checks.shown, checks.joint_p
    lines = []
    for name, ckpt in zip(names, policies):
        lines += _table(name, ckpt, figs[name], holm[name])
    if len(names) > 1:
        lines += _table("all", "every policy's jobs pooled", figs["all"])
    lines.append(f"paired test of each gap (exact McNemar on the jobs where imagined and real outcome differ, "
                 f"Holm over {checks.tests} tasks): shown miscalibrated: "
                 + (", ".join(f"{n} task {t}" for n, t in shown) if shown else "none at these jobs")
                 + f"; all of them together (exact joint test): p = {joint_p:.2g}, "
                 + ("beyond the jobs' noise" if joint_p < 0.05 else "not beyond the jobs' noise"))
    branch = figures(branch_rows) if args.branch else None
    if branch:
        lines.append(f"from {args.lead_steps} steps before the first grasp of each recorded episode "
                     "(not in the verdict):")
        for name, ckpt in zip(names, policies):
            lines += _table(name, ckpt, branch[name])
    pooled = figs["all"]
    max_gap, exact_chance, gap_p, jobs_needed = checks.max_gap, checks.exact_chance, checks.gap_p, checks.jobs_needed
    verdict = gate_verdict(pooled["auc_within_task"], max_gap)
    print("\n".join(lines))
    if not verdict.measurable:
        per_task = ", ".join(f"task {r['task_id']} {r['real_successes']}/{r['jobs']}" for r in pooled["calibration"])
        print(f"cannot measure: no task has both a real success and a real failure among the gate's jobs "
              f"(real successes: {per_task}); the within-task AUC needs both")
    elif not verdict.passed:
        print("the fixed thresholds: FAIL: " + "; ".join(verdict.reasons))
    print(f"a judge as likely to succeed as reality passes the calibration check with chance {exact_chance:.3f} "
          f"at {proto.gate_init_states} jobs a task; 80% of the time only from "
          + (f"{jobs_needed} jobs a task on" if jobs_needed else "more than 300 jobs a task")
          + " (each task at its real rate here)")
    ceilings = gate_side.ceilings(Path(proto.path("gate_ceiling")), policy_map)
    for perturb, c in ceilings.items():
        print(f"reality's own ceiling on these jobs ({c['path']}): real re-runs ({perturb}) rank the recorded outcomes "
              f"at AUC within task {c['auc_within_task']:.2f} [{c['ci95'][0]:.2f}, {c['ci95'][1]:.2f}] with "
              f"{c['repeats']} repeats, {c['auc_1_repeat']:.2f} with one")
    reality = against_reality(rows, policy_map, ceiling_dir, gate, pooled["auc_within_task_ci95"], joint_p)
    print(reality_line(reality, joint_p))
    grasp_fields = {"grasp_train_data": grasp_data, "grasp_label_dirs": grasp_dirs,
                    "imagined_samples": args.imagined_samples, "combine": args.combine, "task_bias": task_bias}
    if task_bias:
        print(f"per-task logit offsets of the judge, fit on {task_bias['policy']}'s jobs in {task_bias['from']}: "
              f"{task_bias['bias'][:max(proto.tasks) + 1]} (tasks 0-{max(proto.tasks)}); imagined RL judges alike with "
              f"imagination.grasp_point.task_bias={json.dumps(task_bias['bias'], separators=(',', ':'))}")
    result = {"protocol": proto.describe(), "world_model": wm_path, "reward": args.reward,
              "state_reward": args.state_reward, "success_threshold": threshold,
              **(grasp_fields if args.reward == "grasp" else {}),
              "train_data": train_data, "proprio": proprio, "gate_data": str(gate_data), "init_states": [offset, last],
              "policies": policy_map, "jobs_per_policy": len(proto.tasks) * proto.gate_init_states,
              "thresholds": {"auc_within_task": THRESHOLD_AUC, "max_calibration_gap": THRESHOLD_GAP},
              "figures": figs, "max_calibration_gap": max_gap, "exact_judge_pass_chance": exact_chance,
              "jobs_for_exact_judge": jobs_needed, "exact_judge_gap_p_value": gap_p, "paired_holm_p": holm,
              "joint_calibration_p_value": joint_p,
              "shown_miscalibrated": [{"policy": n, "task_id": t} for n, t in shown], "verdict": verdict.label,
              "ceilings": ceilings, "against_reality": reality,
              "measurable": verdict.measurable, "reasons": list(verdict.reasons), "records": rows,
              "provenance": provenance(proto.seed, {"suite": proto.suite, "tasks": list(proto.tasks),
                                                    "init_states": [offset, last]})}
    if branch:
        result["branch"] = {"lead_steps": args.lead_steps, "figures": branch, "records": branch_rows}
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_json(out / "reward_signal.json", _json_safe(result), indent=2)
    print(f"written: {out / 'reward_signal.json'}")
    if args.verdict == "reality" and not reality["measured"]:  # the repeats were there before imagining
        print("reward_signal: --verdict reality: " + reality["why"], file=sys.stderr)
        return 2
    lo, hi = pooled["auc_within_task_ci95"]
    samples = f" samples={args.imagined_samples} combine={args.combine}" if args.reward == "grasp" else ""
    samples += " task_bias=fit" if task_bias else ""
    samples += f" init_states={offset}-{last}" if offset != proto.gate_offset else ""
    print(f"BENCH reward_signal reward={args.reward}{samples} policies={','.join(names)} "
          f"jobs={result['jobs_per_policy']} pairs={pooled['pairs']} "
          f"auc_within_task={pooled['auc_within_task']:.2f} auc_within_task_ci95=[{lo:.2f},{hi:.2f}] "
          f"auc={pooled['auc']:.2f} max_calibration_gap={max_gap:.2f} threshold_auc={THRESHOLD_AUC:.2f} "
          f"threshold_gap={THRESHOLD_GAP:.2f} exact_judge_pass_chance={exact_chance:.3f} "
          f"jobs_for_exact_judge={jobs_needed if jobs_needed else '>300'} gap_p_value={gap_p:.3f} "
          f"shown_miscalibrated={len(shown)}/{checks.tests} "
          f"joint_calibration_p={joint_p:.2g} "
          + reality_fields(reality)
          + (f"verdict=against_reality {reality['verdict']}" if args.verdict == "reality" else
             f"verdict=thresholds {verdict.label}"))
    passed = reality["verdict"] == "PASS" if args.verdict == "reality" else verdict.passed
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(run_main(main))  # input errors as one line, exit 2 (infra/errors.py)
