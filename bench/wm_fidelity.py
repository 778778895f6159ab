"""World-model fidelity: open-loop replay of held-out real LIBERO-Spatial episodes.

    python bench/wm_fidelity.py                      # trains the quick preset first if its checkpoint is missing
    python bench/wm_fidelity.py --checkpoint outputs/world_model/quick/world_model.pt --horizon 64

Each held-out episode of the run's split is replayed from its first frame with its real actions for
`--horizon` steps, autoregressively (world_models/fidelity.py). Prints the PSNR/SSIM averaged
over steps and episodes, the same PSNR for a "nothing moves" predictor (the first frame held still),
the success-head F1 over the *whole* held-out episodes (a 64-step window of a LIBERO episode rarely
holds its success; the perturbed failures in the held-out set are the hard negatives), and a final
`BENCH wm_fidelity ... PASS|FAIL` line; exits 1 below the thresholds (SSIM >= 0.80 and PSNR >= 24 dB by default).
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from envs.cli import load_config
from world_models.fidelity import EvalWorldModelConfig, evaluate_world_model
from world_models.training import TrainWorldModelConfig, train_world_model


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--checkpoint", default="outputs/world_model/quick/world_model.pt")
    p.add_argument("--data-dir", default="", help="dataset (default: the quick preset's, or the run's split.json)")
    p.add_argument("--preset", default="quick", help="training preset used when the checkpoint is missing")
    p.add_argument("--horizon", type=int, default=64, help="open-loop steps per episode")
    p.add_argument("--steps", type=int, default=0, help="sampler steps (0 = the model's default)")
    p.add_argument("--device", default="cpu", help="where the model runs (cpu, cuda)")
    p.add_argument("--min-ssim", type=float, default=0.80)
    p.add_argument("--min-psnr", type=float, default=24.0)
    args = p.parse_args(argv)

    ckpt = Path(args.checkpoint)
    train_s = 0.0
    if not ckpt.is_file():
        overrides = [f"out_dir={ckpt.parent}"] + ([f"clips.data_dir={args.data_dir}"] if args.data_dir else [])
        cfg = load_config(TrainWorldModelConfig, args.preset, overrides, group="world_model")
        print(f"no checkpoint at {ckpt}: training the {args.preset!r} preset on {cfg.clips.data_dir}", flush=True)
        t0 = time.perf_counter()
        train_world_model(cfg)
        train_s = time.perf_counter() - t0
    res = evaluate_world_model(EvalWorldModelConfig(
        checkpoint=str(ckpt), data_dir=args.data_dir, max_steps=args.horizon, steps=args.steps, device=args.device,
        out_dir=str(ckpt.parent / f"bench_fidelity_h{args.horizon}")))
    whole = evaluate_world_model(EvalWorldModelConfig(
        checkpoint=str(ckpt), data_dir=args.data_dir, max_steps=0, steps=args.steps, videos=2, device=args.device,
        out_dir=str(ckpt.parent / "bench_fidelity_whole")))
    ok = res["ssim"] >= args.min_ssim and res["psnr"] >= args.min_psnr
    psnr_at = res["psnr_per_step"]
    print(f"BENCH wm_fidelity episodes={len(res['episodes'])} horizon={args.horizon} sampler={res['sampler']} "
          f"steps={res['sampler_steps']} psnr={res['psnr']:.2f} ssim={res['ssim']:.3f} "
          f"psnr_last={psnr_at[-1]:.2f} static_psnr={res['static_psnr']:.2f} static_ssim={res['static_ssim']:.3f} "
          f"whole_episode_success_f1={whole['success_f1']:.2f} (real frames {whole['success_f1_real_frames']:.2f}, "
          f"{whole['success_labels']} success steps) episode_outcome_f1={whole['episode_success_f1']:.2f} "
          f"train_s={train_s:.0f} threshold_ssim={args.min_ssim} threshold_psnr={args.min_psnr} "
          f"{'PASS' if ok else 'FAIL'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
