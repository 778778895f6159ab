"""Open-loop fidelity of a trained world model on held-out real episodes (scripts/eval_world_model.py).

Each episode is replayed from its first frame with its real actions, the whole episode (or
max_steps) autoregressively: the model's context only ever holds its own predictions. Predicted
frame t is compared with the real frame after action t: PSNR and SSIM per step and averaged, and
F1 of the success head against the simulator's labels (on imagined frames, and on the real
frames for reference; with no success step within the horizon F1 is 0 by convention). The
held-out episodes are those of the run's split.json (next to the checkpoint) unless `episodes` names
others. Writes to out_dir: eval.json (all figures), psnr_vs_horizon.png, and videos/ep*.mp4
(real | imagined | abs diff x2).
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from envs.atomic import atomic_write_json
from envs.cli import save_config
from envs.dataset import encode_video
from world_models.clips import load_episodes, to_model_frames, to_uint8
from world_models.metrics import f1, psnr_per_frame, ssim_per_frame
from world_models.model import WorldModel


@dataclass
class EvalWorldModelConfig:
    checkpoint: str = "outputs/world_model/quick/world_model.pt"
    data_dir: str = ""  # "" = the data_dir of the run's split.json
    episodes: list[int] = field(default_factory=list)  # [] = the run's held-out episodes
    max_steps: int = 0  # 0 = whole episodes
    steps: int = 0  # sampler steps; 0 = the model's default
    scheduler: str = ""  # "" = the model's; or edm_euler / flow_match_euler
    out_dir: str = ""  # "" = <checkpoint folder>/eval
    videos: int = 2  # side-by-side mp4s of the first episodes
    seed: int = 0
    num_threads: int = 0  # 0 = torch's default
    device: str = "cpu"  # where the model runs: cpu, cuda, cuda:1 (metrics are computed on the CPU)


def _episodes_to_use(cfg: EvalWorldModelConfig) -> tuple[str, list[int] | None]:
    split_path = Path(cfg.checkpoint).parent / "split.json"
    split = json.loads(split_path.read_text()) if split_path.is_file() else None
    data_dir = cfg.data_dir or (split["data_dir"] if split else "")
    if not data_dir:
        raise ValueError(f"data_dir: not given and no {split_path} to take it from")
    if cfg.episodes:
        return data_dir, list(cfg.episodes)
    if split is None or not split["held_out"]:
        raise ValueError(f"episodes: not given and {split_path} lists no held-out episodes; "
                         "name some with episodes=[...]")
    return data_dir, list(split["held_out"])


def _plot(path: Path, psnr: np.ndarray, ssim: np.ndarray, baseline: np.ndarray) -> None:
    import matplotlib

    matplotlib.use("Agg")  # headless
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(1, 2, figsize=(10, 3.5))
    steps = np.arange(1, len(psnr) + 1)
    ax[0].plot(steps, psnr, label="world model")
    ax[0].plot(steps, baseline, "--", label="first frame held still")
    ax[0].set(xlabel="steps into the episode (open loop)", ylabel="PSNR (dB)", title="PSNR vs horizon")
    ax[0].legend()
    ax[1].plot(steps, ssim)
    ax[1].set(xlabel="steps into the episode (open loop)", ylabel="SSIM", title="SSIM vs horizon")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def evaluate_world_model(cfg: EvalWorldModelConfig) -> dict:
    """Replay the episodes open loop; writes eval.json, psnr_vs_horizon.png and videos; returns eval.json's content."""
    if cfg.num_threads > 0:
        torch.set_num_threads(cfg.num_threads)
    device = torch.device(cfg.device)
    model = WorldModel.load(cfg.checkpoint).to(device)
    if cfg.scheduler:
        model.set_scheduler(cfg.scheduler)
    data_dir, indices = _episodes_to_use(cfg)
    out = Path(cfg.out_dir) if cfg.out_dir else Path(cfg.checkpoint).parent / "eval"
    save_config(cfg, out / "eval_config.yaml")
    steps = cfg.steps or None
    per_ep, psnr_rows, ssim_rows, base_rows, base_ssim_rows = [], [], [], [], []
    succ_logits, succ_labels, done_logits, done_labels, succ_real, succ_real_labels = [], [], [], [], [], []
    for n, ep in enumerate(load_episodes(data_dir, model.cfg.views, indices)):
        # replay A actions; the frame after the last recorded action is not in the dataset, so frames
        # are compared for the first T = min(A, len - 1) steps while the heads are scored on all A
        A = len(ep) if cfg.max_steps <= 0 else min(cfg.max_steps, len(ep))
        T = min(A, len(ep) - 1)
        if T < 1:
            continue
        real = to_model_frames(ep.frames[: T + 1])
        actions = torch.from_numpy(ep.actions[:A])[None]
        gen = torch.Generator().manual_seed(cfg.seed + n)
        pred_all, s_log, d_log = model.rollout(real[0][None].to(device), None, actions.to(device), steps=steps,
                                               generator=gen)
        pred_all, s_log, d_log = pred_all.float().cpu(), s_log.float().cpu(), d_log.float().cpu()
        pred = pred_all[0, :T]
        with torch.no_grad():  # the head on the real frames: tells head errors from imagination errors
            s_real, _ = model.head(real[1:][None].to(device), real[0][None].to(device))
        succ_real.append(s_real[0].float().cpu())
        succ_real_labels.append(torch.from_numpy(ep.success[:T].astype(np.float32)))
        psnr, ssim = psnr_per_frame(pred, real[1:]), ssim_per_frame(pred, real[1:])
        still = real[:1].expand(T, -1, -1, -1)  # the "nothing moves" reference
        base, base_ssim = psnr_per_frame(still, real[1:]), ssim_per_frame(still, real[1:])
        done = ep.success[:A] | (np.arange(A) >= len(ep) - 1)
        succ_logits.append(s_log[0])
        succ_labels.append(torch.from_numpy(ep.success[:A].astype(np.float32)))
        done_logits.append(d_log[0])
        done_labels.append(torch.from_numpy(done.astype(np.float32)))
        psnr_rows.append(psnr.numpy())
        ssim_rows.append(ssim.numpy())
        base_rows.append(base.numpy())
        base_ssim_rows.append(base_ssim.numpy())
        per_ep.append({"episode": ep.index, "task_id": ep.task_id, "steps": T, "psnr": float(psnr.mean()),
                       "ssim": float(ssim.mean()), "static_psnr": float(base.mean()),
                       "static_ssim": float(base_ssim.mean()),
                       "success": bool(ep.success[:A].any()), "predicted_success": bool((s_log[0] > 0).any())})
        if n < cfg.videos:
            r, p = to_uint8(real[1:]), to_uint8(pred)
            diff = np.clip(np.abs(r.astype(np.int16) - p.astype(np.int16)) * 2, 0, 255).astype(np.uint8)
            side = np.concatenate([r, p, diff], axis=2)  # [T, H, 3W, ch]
            side = np.concatenate([side[..., 3 * v: 3 * v + 3] for v in range(side.shape[-1] // 3)], axis=1)
            encode_video(out / "videos" / f"ep{ep.index:04d}.mp4", side.repeat(2, 1).repeat(2, 2), fps=10,
                         codec="h264", crf=20)
    if not per_ep:
        raise ValueError("no episode with at least 2 frames to evaluate")
    H = max(len(r) for r in psnr_rows)

    def by_step(rows: list[np.ndarray]) -> np.ndarray:  # mean over the episodes that reach each step
        a = np.full((len(rows), H), np.nan)
        for i, r in enumerate(rows):
            a[i, : len(r)] = r
        return np.nanmean(a, axis=0)

    psnr_s, ssim_s, base_s = by_step(psnr_rows), by_step(ssim_rows), by_step(base_rows)
    frames_all = np.concatenate(psnr_rows)
    result = {
        "checkpoint": cfg.checkpoint, "data_dir": data_dir, "episodes": [e["episode"] for e in per_ep],
        "sampler": model.cfg.sampler.scheduler, "sampler_steps": steps or model.cfg.sampler.steps,
        "psnr": float(frames_all.mean()), "ssim": float(np.concatenate(ssim_rows).mean()),
        "static_psnr": float(np.concatenate(base_rows).mean()),
        "static_ssim": float(np.concatenate(base_ssim_rows).mean()),
        "success_f1": f1(torch.cat(succ_logits), torch.cat(succ_labels)),
        "done_f1": f1(torch.cat(done_logits), torch.cat(done_labels)),
        "success_f1_real_frames": f1(torch.cat(succ_real), torch.cat(succ_real_labels)),
        "success_labels": int(torch.cat(succ_labels).sum()),
        # the outcome an RL episode is scored by: did the head fire at any step, against the simulator
        "episode_success_f1": f1(torch.tensor([1.0 if e["predicted_success"] else -1.0 for e in per_ep]),
                                 torch.tensor([float(e["success"]) for e in per_ep])),
        "psnr_per_step": psnr_s.tolist(), "ssim_per_step": ssim_s.tolist(), "static_psnr_per_step": base_s.tolist(),
        "per_episode": per_ep,
    }
    out.mkdir(parents=True, exist_ok=True)
    _plot(out / "psnr_vs_horizon.png", psnr_s, ssim_s, base_s)
    atomic_write_json(out / "eval.json", result, indent=1)
    print(f"open loop over {len(per_ep)} episodes ({sum(e['steps'] for e in per_ep)} steps): "
          f"PSNR {result['psnr']:.2f} dB (first frame held still: {result['static_psnr']:.2f}), "
          f"SSIM {result['ssim']:.3f} (still: {result['static_ssim']:.3f}), "
          f"success F1 {result['success_f1']:.2f} (on real frames {result['success_f1_real_frames']:.2f}; "
          f"{result['success_labels']} success steps), done F1 {result['done_f1']:.2f}, "
          f"episode outcome F1 {result['episode_success_f1']:.2f}")
    print(f"  {out / 'eval.json'}  {out / 'psnr_vs_horizon.png'}")
    return result


__all__ = ["EvalWorldModelConfig", "evaluate_world_model"]
