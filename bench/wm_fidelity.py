"""World-model fidelity: open-loop replay of real LIBERO-Spatial episodes the model never trained on.

    python bench/wm_fidelity.py                      # after `make demo`: its world model and data
    python bench/wm_fidelity.py --checkpoint outputs/bench/rl_gain/world_model/world_model.pt \\
        --more-data outputs/bench/rl_gain/gate/data --episodes 24

Each episode is replayed from its first frame with its real actions for `--horizon` steps,
autoregressively (world_models/fidelity.py). The episodes: the run's held-out ones (split.json next
to the checkpoint), those recorded into its dataset after it was trained (the demo's policy
rollouts), and every episode of --more-data; --episodes of them, successes and failures alternating.
Whole-frame PSNR/SSIM are dominated by the static table and walls, so the verdict is taken where
the arm and the object are: PSNR over the moving region (pixels where the real frame differs from
the episode's first frame, dilated; world_models/region.py), against the first frame held still on
the same pixels. Also printed: whole-frame PSNR/SSIM and their still-frame figures, the imagined
end-effector track's error against the recorded one (a proprio model fitted on the training
episodes, or --proprio), the goal object's position carried along it against the simulator's
(when the data has simulator labels: scripts/label_episodes.py; a state reward fitted on the
training episodes, or --state-reward), and the success-head F1 over *whole* episodes (a 64-step
window of a LIBERO episode rarely holds its success). Every figure has a 95% bootstrap interval over
episodes (`_ci95=[lo,hi]`). The final line is `BENCH wm_fidelity ... PASS|FAIL`: PASS needs the
moving-region gain over the still frame at least --min-moving-gain-db (4 dB) on at least
--min-episodes (12) episodes; exit 1 otherwise, 2 when an input is missing.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from bench.inputs import demo_path, report_missing
from infra.errors import run_main

MIN_MOVING_GAIN_DB = 4.0  # moving-region PSNR over the still frame's; the goal is 8 dB
MIN_EPISODES = 12  # fewer cannot tell one model from another (3 episodes gave intervals wider than the gaps)


def _fmt(res: dict, key: str, digits: int = 2, cm: bool = False) -> str:
    """`name=v name_ci95=[lo,hi]`, or `name=n/a` for a figure with no value (no labels, nothing moved);
    cm: a distance in metres, printed in centimetres as name = key_cm."""
    v, ci = res.get(key), res["ci95"].get(key)
    name, scale = (f"{key}_cm", 100.0) if cm else (key, 1.0)
    if v is None or v != v:
        return f"{name}=n/a"
    lo, hi = (x * scale for x in ci) if ci else (float("nan"),) * 2
    return f"{name}={v * scale:.{digits}f} {name}_ci95=[{lo:.{digits}f},{hi:.{digits}f}]"


def _inputs(args: argparse.Namespace) -> list[tuple[str, str, bool]]:
    from robot_data.dataset import is_dataset  # here, not at the top: --help stays free of the dataset stack

    ckpt = Path(args.checkpoint)
    needed = [("world model", str(ckpt), ckpt.is_file())]
    split = ckpt.parent / "split.json"
    if not args.data:  # the dataset is the run's, named in its split.json
        needed.append(("its split.json", str(split), split.is_file() or not ckpt.is_file()))
        if split.is_file():
            data = json.loads(split.read_text())["data_dir"]
            needed.append(("dataset", data, is_dataset(data)))
    else:
        needed.append(("dataset", args.data, is_dataset(args.data)))
    needed += [("dataset", d, is_dataset(d)) for d in args.more_data]
    return needed


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--checkpoint", default=demo_path("world_model"), help="a WorldModel file (with its split.json)")
    p.add_argument("--data", default="", help="its dataset (default: the run's, from split.json)")
    p.add_argument("--more-data", nargs="*", default=[], help="other datasets it never trained on (all episodes)")
    p.add_argument("--episodes", type=int, default=24, help="episodes replayed (0 = every one not trained on)")
    p.add_argument("--horizon", type=int, default=64, help="open-loop steps per episode")
    p.add_argument("--steps", type=int, default=0, help="sampler steps (0 = the model's default)")
    p.add_argument("--proprio", default="", help="a ProprioModel file ('' = fitted on the training episodes)")
    p.add_argument("--state-reward", default="", help="a StateReward file ('' = fitted on the training episodes' "
                                                         "simulator labels when they have them; 'none')")
    p.add_argument("--out-dir", default="", help="figures and videos (default: <checkpoint folder>/bench_fidelity)")
    p.add_argument("--device", default="cpu", help="where the model runs (cpu, cuda)")
    p.add_argument("--threads", type=int, default=0, help="torch threads (0 = torch's default)")
    p.add_argument("--min-moving-gain-db", type=float, default=MIN_MOVING_GAIN_DB)
    p.add_argument("--min-episodes", type=int, default=MIN_EPISODES)
    args = p.parse_args(argv)
    if report_missing("wm_fidelity", _inputs(args), instead="give --checkpoint, --data"):
        return 2

    from world_models.fidelity import EvalWorldModelConfig, evaluate_world_model

    out = Path(args.out_dir) if args.out_dir else Path(args.checkpoint).parent / "bench_fidelity"
    common = dict(checkpoint=args.checkpoint, data_dir=args.data, include_new=True, more_data=list(args.more_data),
                  max_episodes=args.episodes, steps=args.steps, device=args.device, num_threads=args.threads)
    res = evaluate_world_model(EvalWorldModelConfig(**common, max_steps=args.horizon, proprio=args.proprio,
                                                    state_reward=args.state_reward, out_dir=str(out / "horizon")))
    # the same episodes whole, with the same fitted track models: the object ends where the episode does
    whole = evaluate_world_model(EvalWorldModelConfig(**common, max_steps=0, videos=2, proprio=res["proprio"],
                                                      state_reward=res["state_reward"], out_dir=str(out / "whole")))
    n = len(res["episodes"])
    gain = res["moving_gain_db"]
    ok = n >= args.min_episodes and gain == gain and gain >= args.min_moving_gain_db
    if res["tracks_note"]:
        print(f"not scored: {res['tracks_note']}")
    print(f"BENCH wm_fidelity episodes={n} successes={res['successes']} failures={res['failures']} "
          f"horizon={args.horizon} sampler={res['sampler']} steps={res['sampler_steps']} "
          f"{_fmt(res, 'psnr')} {_fmt(res, 'ssim', digits=3)} psnr_last={res['psnr_per_step'][-1]:.2f} "
          f"{_fmt(res, 'static_psnr')} {_fmt(res, 'static_ssim', digits=3)} "
          f"{_fmt(res, 'moving_psnr')} {_fmt(res, 'static_moving_psnr')} {_fmt(res, 'moving_gain_db')} "
          f"{_fmt(res, 'moving_ssim', digits=3)} {_fmt(res, 'static_moving_ssim', digits=3)} "
          f"{_fmt(res, 'moving_fraction', digits=3)} "
          f"{_fmt(whole, 'eef_err', 1, cm=True)} "
          f"{_fmt(whole, 'eef_err_end', 1, cm=True)} "
          f"{_fmt(whole, 'object_err', 1, cm=True)} "
          f"{_fmt(whole, 'object_err_end', 1, cm=True)} "
          f"{_fmt(whole, 'object_err_recorded', 1, cm=True)} "
          f"object_episodes={whole['object_episodes']} "
          f"whole_episode_success_f1={whole['success_f1']:.2f} (real frames {whole['success_f1_real_frames']:.2f}, "
          f"{whole['success_labels']} success steps) episode_outcome_f1={whole['episode_success_f1']:.2f} "
          f"threshold_moving_gain_db={args.min_moving_gain_db} min_episodes={args.min_episodes} "
          f"{'PASS' if ok else 'FAIL'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(run_main(main))  # input errors as one line, exit 2 (infra/errors.py)
