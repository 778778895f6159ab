"""The reward gate's ceiling: how well does reality predict itself on the gate's jobs?

    python bench/gate_ceiling.py                          # the protocol's BC and RL policies, 3 repeats each,
                                                          # another reset seed per repeat
    python bench/gate_ceiling.py --perturb noise          # the same reset, N(0, 2) pixel noise in what the
                                                          # policy sees (one noise seed per repeat)
    python bench/gate_ceiling.py --repeats 5 --noise-std 4 --perturb noise

The gate (bench/reward_signal.py) asks an imagined judge to rank each policy's recorded real episodes on
its 50 jobs, success against failure within each task, at a within-task AUC >= 0.80. This bench runs every
policy again on the same jobs in real LIBERO, K times, each time perturbed by much less than any world
model's error:
  seed   another reset seed (the evaluation seed 1, 2, ...): the fixtures LIBERO places on every reset
         (cabinet, stove) move by their placement noise; objects start from the same official init state;
  noise  the same reset as the recorded episode, with Gaussian noise (std --noise-std in 0-255 units,
         about 42 dB PSNR at 2) added to the policy's images only (EvalConfig.obs_noise).
Each job's success rate over the K repeats is then scored as the gate scores an imagined probability
(imagination/eval/repeatability.py): the within-task AUC against the recorded outcome, its 95% bootstrap
interval, the same with 1..K repeats, and how often a repeat agrees with the recording. It needs the gate's
recorded evaluations (<root>/gate/eval_<name>/results.json, made by bench/reward_signal.py); repeats go to
<root>/gate_ceiling/<seed|noise<std>>/<name>_r<k>/ and a finished one is reused.

PASS means reality reaches the gate's threshold: the pooled within-task AUC with K repeats >= 0.80. A FAIL
says no judge short of an exact copy of the world, imagined or not, can pass the gate on these jobs, and
by how much. Exit 1 on FAIL, 2 when an input is missing. Writes <out>/gate_ceiling.json.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import replace
from pathlib import Path

os.environ.setdefault("MUJOCO_GL", "egl")

from bench.protocol import RLGainProtocol  # noqa: E402  (after MUJOCO_GL is set above)
from infra.errors import run_main  # noqa: E402


def _report(name: str, figs: dict) -> list[str]:
    lo, hi = figs["auc_within_task_ci95"]
    by_k = ", ".join(f"{k + 1}: {a:.2f}" for k, a in enumerate(figs["auc_by_repeats"]))
    lines = [f"{name}: recorded {figs['reference_successes']}/{figs['jobs']}, repeats "
             f"{'/'.join(str(s) for s in figs['repeat_successes'])}; agreement {figs['agreement']:.2f}; AUC within "
             f"task {figs['auc_within_task']:.3f} [{lo:.2f}, {hi:.2f}] on {figs['pairs']} pairs; by repeats {by_k}",
             f"  {'task':>4}  {'recorded':>8}  {'repeats':>7}"]
    lines += [f"  {r['task_id']:>4}  {r['reference_successes']:>4}/{r['jobs']:<3}  {r['repeat_rate']:>7.2f}"
              for r in figs["calibration"]]
    lines.append("  largest per-task |repeat - recorded| of each single repeat: "
                 + ", ".join(f"{g:.2f}" for g in figs["max_calibration_gap_by_repeat"]))
    return lines


def one_repeat_gaps(figs: dict, names: list[str]) -> list[float]:
    """Per repeat, the largest per-task |repeat rate - recorded rate| over every policy: the gate's calibration
    check (imagination/eval/reward_gate.py, per policy and task) with one real repeat in the judge's place."""
    return [max(figs[n]["max_calibration_gap_by_repeat"][k] for n in names)
            for k in range(len(figs[names[0]]["max_calibration_gap_by_repeat"]))]


def one_repeat_joint_p(figs: dict, names: list[str]) -> list[float]:
    """Per repeat, the gate's joint paired test (reward_gate.joint_calibration_p_value) with that repeat as the
    judge of every policy's recorded outcomes, all policies' tasks together as reward_signal.py tests them."""
    from imagination.eval.reward_gate import TaskAgreement, joint_calibration_p_value

    return [joint_calibration_p_value([TaskAgreement(**a) for n in names
                                       for a in figs[n]["paired_calibration_by_repeat"][k]])
            for k in range(len(figs[names[0]]["paired_calibration_by_repeat"]))]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--root", default=RLGainProtocol().root, help="the rl_gain protocol's folder (bench/protocol.py)")
    p.add_argument("--policies", nargs="+", default=[], help="policy checkpoints (default: the protocol's BC, and "
                                                             "the RL policy of bench/rl_gain.py when it exists)")
    p.add_argument("--names", nargs="+", default=[], help="one label per policy: its recorded evaluation is "
                                                          "<gate-dir>/eval_<name>/results.json (default: bc, rl)")
    p.add_argument("--gate-dir", default="", help="where bench/reward_signal.py put the gate (default <root>/gate)")
    p.add_argument("--perturb", choices=("seed", "noise"), default="seed", help="what changes between repeats")
    p.add_argument("--repeats", type=int, default=3, help="repeated real evaluations per policy (K)")
    p.add_argument("--noise-std", type=float, default=2.0, help="--perturb noise: pixel noise std (0-255 units)")
    p.add_argument("--judge", default="", help="a bench/reward_signal.py result (reward_signal.json) on the same "
                                               "policies: its imagined judge is set against reality with one repeat "
                                               "(default: <gate-dir>/grasp_reward/reward_signal.json when it exists)")
    p.add_argument("--out-dir", default="", help="repeats and gate_ceiling.json (default <root>/gate_ceiling/"
                                                 "seed or noise<std>)")
    args = p.parse_args(argv)
    if args.repeats < 1:
        print(f"gate_ceiling: --repeats: expected an integer >= 1, got {args.repeats}", file=sys.stderr)
        return 2
    if args.perturb == "noise" and args.noise_std <= 0:
        print(f"gate_ceiling: --noise-std: expected a std > 0 (0-255 units), got {args.noise_std}", file=sys.stderr)
        return 2
    proto = RLGainProtocol(root=args.root)
    try:
        policies, names = proto.gate_policies(args.policies, args.names)
    except ValueError as err:
        print(f"gate_ceiling: {err}", file=sys.stderr)
        return 2
    gate = Path(args.gate_dir or proto.path("gate"))
    recorded = {n: gate / f"eval_{n}" / "results.json" for n in names}
    gone = [f"policy {n} {x}" for n, x in zip(names, policies) if not Path(x).is_file()]
    gone += [f"recorded gate evaluation {recorded[n]}" for n in names if not recorded[n].is_file()]
    if gone:
        print("gate_ceiling: missing " + ", ".join(gone) + "; `python bench/rl_gain.py` builds the protocol and "
              "`python bench/reward_signal.py` records the gate's evaluations", file=sys.stderr)
        return 2

    from imagination.eval.evaluate import evaluate_or_reuse
    from imagination.eval.reality_gate import judge_probs, pool_jobs
    from imagination.eval.repeatability import judge_gap, repeat_figures
    from imagination.eval.reward_gate import THRESHOLD_AUC, THRESHOLD_GAP
    from infra.atomic import atomic_write_json

    folder = args.perturb if args.perturb == "seed" else f"noise{args.noise_std:g}"  # one folder per noise level
    out = Path(args.out_dir or Path(proto.path("gate_ceiling")) / folder)
    what = (f"reset seeds {proto.seed + 1}-{proto.seed + args.repeats}" if args.perturb == "seed" else
            f"pixel noise std {args.noise_std:g} in the policy's images, noise seeds 1-{args.repeats}")
    print(f"gate ceiling: {proto.suite} tasks {list(proto.tasks)} x init states {proto.gate_offset}-"
          f"{proto.bench_offset - 1}; {args.repeats} repeats per policy, {what}")
    refs, reps = [], []
    figs: dict[str, dict] = {}
    for name, ckpt in zip(names, policies):
        ref = json.loads(recorded[name].read_text())
        if ref["config"].get("checkpoint") != ckpt:
            print(f"gate_ceiling: {recorded[name]} evaluated {ref['config'].get('checkpoint')}, not {ckpt}; "
                  "give --names that match the recorded evaluations", file=sys.stderr)
            return 2
        base = proto.gate_eval_config(ckpt, "")
        runs = []
        for k in range(1, args.repeats + 1):
            cfg = (replace(base, seed=proto.seed + k) if args.perturb == "seed" else
                   replace(base, obs_noise=args.noise_std, obs_noise_seed=k))
            runs.append(evaluate_or_reuse(replace(cfg, out_dir=str(out / f"{name}_r{k}"), videos=0),
                                          f"{name} repeat {k}"))
        figs[name] = repeat_figures(ref["episodes"], [r["episodes"] for r in runs])
        refs.append(ref["episodes"])
        reps.append([r["episodes"] for r in runs])
    # pooled as the gate pools: pairs within a task, across policies (a policy's job is its own job)
    pooled_ref = pool_jobs(refs)
    pooled_reps = [pool_jobs([rep[k] for rep in reps]) for k in range(args.repeats)]
    figs["all"] = repeat_figures(pooled_ref, pooled_reps)
    lines = [line for n in names for line in _report(n, figs[n])]
    if len(names) > 1:
        lines += _report("all", figs["all"])
    print("\n".join(lines))
    judge_path = Path(args.judge or gate / "grasp_reward" / "reward_signal.json")
    gap = None
    if args.judge or judge_path.is_file():
        saved = json.loads(judge_path.read_text())
        judged, ours = saved.get("policies"), dict(zip(names, policies))
        if judged != ours:
            print(f"gate_ceiling: --judge: {judge_path} judged {judged}, not {ours}", file=sys.stderr)
            if args.judge:
                return 2
        else:
            gap = judge_gap(judge_probs(saved["records"], names), pooled_ref, pooled_reps)
            lo, hi = gap["gap_ci95"]
            print(f"imagined judge ({judge_path}, reward {saved.get('reward')}): AUC within task "
                  f"{gap['judge_auc_within_task']:.2f}; reality with one repeat "
                  f"{gap['reality_auc_within_task_1_repeat']:.2f}; judge - reality {gap['gap']:+.2f} "
                  f"[{lo:+.2f}, {hi:+.2f}] (paired bootstrap over jobs)")
    pooled = figs["all"]
    gaps = one_repeat_gaps(figs, names)
    passing = sum(g <= THRESHOLD_GAP + 1e-9 for g in gaps)
    print(f"the gate's calibration check with one real repeat as the judge: largest per-task gap "
          f"{', '.join(f'{g:.2f}' for g in gaps)} (repeats 1-{len(gaps)}); {passing} of {len(gaps)} within "
          f"{THRESHOLD_GAP:.2f}")
    joint = one_repeat_joint_p(figs, names)
    calibrated = sum(q >= 0.05 for q in joint)
    print(f"the gate's paired joint test with one real repeat as the judge: p = "
          f"{', '.join(f'{q:.2g}' for q in joint)} (repeats 1-{len(joint)}); {calibrated} of {len(joint)} not shown "
          "miscalibrated (p >= 0.05), as a judge as good as reality should be in 95% of repeats")
    ok = pooled["auc_within_task"] >= THRESHOLD_AUC
    result = {"protocol": proto.describe(), "perturb": args.perturb, "noise_std": args.noise_std,
              "repeats": args.repeats, "policies": dict(zip(names, policies)), "threshold_auc": THRESHOLD_AUC,
              "figures": figs, "judge": {"path": str(judge_path), **gap} if gap else None,
              "max_calibration_gap_1_repeat": gaps, "joint_calibration_p_1_repeat": joint,
              "verdict": "PASS" if ok else "FAIL"}
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_json(out / "gate_ceiling.json", result, indent=2)
    print(f"written: {out / 'gate_ceiling.json'}")
    lo, hi = pooled["auc_within_task_ci95"]
    noise = f" noise_std={args.noise_std:g}" if args.perturb == "noise" else ""
    print(f"BENCH gate_ceiling perturb={args.perturb}{noise} repeats={args.repeats} policies={','.join(names)} "
          f"jobs={pooled['jobs']} pairs={pooled['pairs']} agreement={pooled['agreement']:.2f} "
          f"auc_within_task={pooled['auc_within_task']:.2f} auc_within_task_ci95=[{lo:.2f},{hi:.2f}] "
          f"auc_1_repeat={pooled['auc_by_repeats'][0]:.2f} gap_1_repeat_max={max(gaps):.2f} "
          f"gap_1_repeat_passing={passing}/{len(gaps)} joint_p_1_repeat_min={min(joint):.2g} "
          f"joint_1_repeat_not_shown={calibrated}/{len(joint)} "
          + (f"judge_gap={gap['gap']:+.2f} judge_gap_ci95=[{gap['gap_ci95'][0]:+.2f},{gap['gap_ci95'][1]:+.2f}] "
             if gap else "") + f"threshold_auc={THRESHOLD_AUC:.2f} "
          f"{'PASS' if ok else 'FAIL'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(run_main(main))
