"""Training the frame autoencoder (world_models.autoencoder) on a dataset's frames, with exact resume.

    cfg = TrainAutoencoderConfig(data_dir="outputs/data/libero_spatial_128")
    result = train_autoencoder(cfg)      # or: python scripts/train_autoencoder.py --config quick

Out dir layout:
    config.yaml       the resolved config (written by train_autoencoder)
    split.json        dataset episode indices used for training and held out (the world model's split
                      rule, world_models.clips.split_episodes, so the same seed holds out the same episodes)
    checkpoint.pt     weights, optimizer, step and both random states, rewritten atomically every
                      `checkpoint_every` steps; re-running the command resumes from it exactly
    autoencoder.pt    the trained model (Autoencoder.load) with its measured latent scale and shift
    result.json       reconstruction PSNR / SSIM on held-out frames, timings, latent shape, and the
                      moving-region ceiling: the gain over the still frame (bench/wm_fidelity.py's
                      moving_gain_db) of a latent world model that predicted every latent exactly

Loss: L1 reconstruction of single-view frames + kl_weight x KL(posterior || N(0, 1)). No perceptual or
adversarial term: their pretrained weights are not available offline here, and a world model
imagining a robot scene needs positions right more than textures sharp.
"""
from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm

from envs.frames import to_model_frames
from infra.atomic import atomic_torch_save, atomic_write_json
from infra.checkpoint import CheckpointError, expect_format, load_torch
from infra.cli import save_config
from robot_data.dataset import ReaderConfig
from world_models.autoencoder import Autoencoder, AutoencoderConfig
from world_models.clips import load_episodes, split_episodes
from world_models.metrics import psnr_per_frame, ssim_per_frame
from world_models.region import masked_psnr, moving_mask, pooled_mean

_FORMAT = "wm-vla-rl/autoencoder_train_state"
LOSSES = ("l1", "mse")


@dataclass
class TrainAutoencoderConfig:
    out_dir: str = "outputs/autoencoder/quick"
    data_dir: str = "outputs/data/libero_spatial_128"
    views: list[str] = field(default_factory=lambda: ["agentview"])  # frames of every listed view are pooled
    features: ReaderConfig = field(default_factory=ReaderConfig)  # which of data_dir's features are the views
    model: AutoencoderConfig = field(default_factory=AutoencoderConfig)  # image_size must match the data
    holdout_fraction: float = 0.15  # share of episodes kept out of training (split by episode)
    holdout_min: int = 1
    split_seed: int = 0
    steps: int = 3000
    batch_size: int = 8
    lr: float = 5e-4
    loss: str = "l1"  # reconstruction loss: "l1" (sharper edges without a perceptual term) or "mse"
    kl_weight: float = 1e-6  # small, as in Stable Diffusion's VAE: a near-deterministic latent the
    # denoiser can rely on, regularised only enough to keep its scale bounded
    eval_frames: int = 256  # held-out frames (evenly spaced over the held-out episodes) for PSNR / SSIM
    scale_frames: int = 256  # training frames on which latent mean and std set shift_factor / scaling_factor
    checkpoint_every: int = 250
    resume: bool = True  # continue from out_dir/checkpoint.pt if there is one
    seed: int = 0
    num_threads: int = 1  # torch CPU threads; 0 = torch's default
    device: str = "cpu"  # where the model trains: cpu, cuda or cuda:N; frames stay in host memory, each batch is sent


def _pooled_frames(episodes: list, views: int) -> np.ndarray:
    """uint8 [N, H, W, 3]: every frame of every view of `episodes` (EpisodeArrays, frames [T, H, W, 3V])."""
    if not episodes:
        return np.zeros((0, 1, 1, 3), np.uint8)
    frames = np.concatenate([ep.frames for ep in episodes])
    N, H, W, _ = frames.shape
    return frames.reshape(N, H, W, views, 3).transpose(0, 3, 1, 2, 4).reshape(N * views, H, W, 3)


def _chunks(frames: np.ndarray, size: int = 64) -> list[np.ndarray]:
    """uint8 [N, H, W, 3] in pieces of `size` frames: encode / decode of a few hundred frames at bounded memory."""
    return [frames[i:i + size] for i in range(0, len(frames), size)]


def _device(name: str) -> torch.device:
    """torch.device of `device`; ValueError naming the field when it is malformed or names a GPU torch cannot see."""
    try:
        device = torch.device(name)
    except RuntimeError:
        raise ValueError(f"device: expected cpu, cuda or cuda:N, got {name!r}") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device: {name!r} asked for, but torch sees no CUDA device here; use device=cpu")
    if device.type not in ("cpu", "cuda"):
        raise ValueError(f"device: expected cpu, cuda or cuda:N, got {name!r}")
    return device


def _evenly(n: int, k: int) -> np.ndarray:
    return np.unique(np.linspace(0, n - 1, min(k, n)).round().astype(np.int64)) if n else np.zeros(0, np.int64)


class AutoencoderTrainer:
    """Data, model, optimizer and random state; `step()` runs one optimisation step, `save`/`load` resume."""

    def __init__(self, cfg: TrainAutoencoderConfig):
        if cfg.loss not in LOSSES:
            raise ValueError(f"loss: expected one of {LOSSES}, got {cfg.loss!r}")
        if cfg.batch_size < 1 or cfg.steps < 0:
            raise ValueError(f"batch_size must be >= 1 and steps >= 0, got {cfg.batch_size}, {cfg.steps}")
        if cfg.num_threads > 0:
            torch.set_num_threads(cfg.num_threads)
        self.device = _device(cfg.device)
        self.cfg = cfg
        self.out = Path(cfg.out_dir)
        episodes = load_episodes(cfg.data_dir, cfg.views, features=cfg.features)
        size = episodes[0].frames.shape[1]
        if size != cfg.model.image_size or episodes[0].frames.shape[2] != size:
            raise ValueError(f"model.image_size: {cfg.model.image_size} px but {cfg.data_dir} holds "
                             f"{tuple(episodes[0].frames.shape[1:3])} px frames")
        train_idx, held_idx = split_episodes(len(episodes), cfg.holdout_fraction, cfg.split_seed, cfg.holdout_min)
        self.out.mkdir(parents=True, exist_ok=True)
        atomic_write_json(self.out / "split.json", {"data_dir": str(cfg.data_dir),
                                                    "train": [episodes[i].index for i in train_idx],
                                                    "held_out": [episodes[i].index for i in held_idx]}, indent=1)
        V = len(cfg.views)
        self.train_frames = _pooled_frames([episodes[i] for i in train_idx], V)
        self.held_episodes = [episodes[i] for i in held_idx]  # frames uint8 [T, H, W, 3V] each
        self.held_out = [ep.index for ep in self.held_episodes]
        torch.manual_seed(cfg.seed)  # the initial weights
        self.model = Autoencoder(cfg.model).to(self.device)
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=cfg.lr)
        self.rng = np.random.default_rng(cfg.seed)
        self.generator = torch.Generator().manual_seed(cfg.seed + 1)
        self.step_count = 0

    def step(self) -> dict[str, float]:
        cfg = self.cfg
        idx = self.rng.integers(0, len(self.train_frames), size=cfg.batch_size)
        x = to_model_frames(self.train_frames[idx]).to(self.device)  # [B, 3, H, W] in [-1, 1]
        self.model.train()
        post = self.model.posterior(x)
        # drawn on the CPU generator wherever the model runs: one resumable random state for every device
        z = post.mean + post.std * torch.randn(post.mean.shape, generator=self.generator).to(self.device)
        y = self.model.raw_decode(z)
        rec = (y - x).abs().mean() if cfg.loss == "l1" else (y - x).pow(2).mean()
        kl = post.kl().mean() / x[0].numel()  # per pixel, like the reconstruction term
        loss = rec + cfg.kl_weight * kl
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        self.optimizer.step()
        self.step_count += 1
        return {"loss": float(loss.detach()), "rec": float(rec.detach()), "kl": float(kl.detach())}

    # ---------------------------------------------------------------- resume
    def checkpoint_path(self) -> Path:
        return self.out / "checkpoint.pt"

    def save(self) -> None:
        atomic_torch_save(self.checkpoint_path(), {
            "format": _FORMAT, "step": self.step_count, "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(), "generator": self.generator.get_state(),
            # the numpy state holds 128-bit ints: JSON text keeps the file loadable with weights_only=True
            "rng": json.dumps(self.rng.bit_generator.state)})

    def load(self) -> bool:
        """Restore out_dir/checkpoint.pt; False when there is none, CheckpointError naming it when it does not fit."""
        path = self.checkpoint_path()
        if not path.is_file():
            return False
        what = "autoencoder training checkpoint"
        blob = expect_format(load_torch(path, what), path, what, _FORMAT,
                             ("step", "model", "optimizer", "generator", "rng"))
        try:
            self.model.load_state_dict(blob["model"])
            self.optimizer.load_state_dict(blob["optimizer"])
            self.generator.set_state(blob["generator"])
            self.rng.bit_generator.state = json.loads(blob["rng"])
        except (RuntimeError, ValueError, KeyError, TypeError) as err:
            raise CheckpointError(f"{path}: does not fit this run ({type(err).__name__}: {err}); "
                                  f"resume=false starts over") from None
        self.step_count = int(blob["step"])
        return True

    # ---------------------------------------------------------------- figures
    @torch.no_grad()
    def set_scale(self) -> None:
        """shift_factor / scaling_factor from the latents' mean and std on `scale_frames` training frames."""
        self.model.eval()
        self.model.cfg.shift_factor, self.model.cfg.scaling_factor = 0.0, 1.0
        frames = self.train_frames[_evenly(len(self.train_frames), self.cfg.scale_frames)]
        z = torch.cat([self.model.encode(to_model_frames(c).to(self.device)) for c in _chunks(frames)])
        self.model.cfg.shift_factor = float(z.mean())
        self.model.cfg.scaling_factor = float(1.0 / z.std().clamp_min(1e-6))

    @torch.no_grad()
    def evaluate(self) -> dict[str, float]:
        """Mean PSNR (dB) / SSIM of encode -> decode on evenly spaced held-out frames (training frames if none)."""
        held = _pooled_frames(self.held_episodes, len(self.cfg.views))
        frames = held if len(held) else self.train_frames
        self.model.eval()
        psnr, ssim = [], []
        for chunk in _chunks(frames[_evenly(len(frames), self.cfg.eval_frames)]):
            x = to_model_frames(chunk).to(self.device)
            y = self.model.decode(self.model.encode(x)).clamp(-1, 1)
            psnr.append(psnr_per_frame(y, x).cpu())
            ssim.append(ssim_per_frame(y, x).cpu())
        return {"psnr": float(torch.cat(psnr).mean()), "ssim": float(torch.cat(ssim).mean()),
                "frames": int(sum(len(p) for p in psnr))}

    @torch.no_grad()
    def moving_ceiling(self) -> dict[str, float]:
        """Moving-region PSNR (world_models.region) of encode -> decode on every frame of each held-out episode,
        and of the episode's first frame held still. Their difference bounds a latent world model's moving-region
        gain on this autoencoder: a model whose latents were exact would score the reconstruction. NaN figures
        when no episode is held out or nothing moves."""
        self.model.eval()
        rec_rows, still_rows = [], []
        for ep in self.held_episodes:
            real = to_model_frames(ep.frames)  # [T, 3V, H, W]
            rec = torch.cat([self.model.decode(self.model.encode(to_model_frames(c).to(self.device))).clamp(-1, 1)
                             .cpu() for c in _chunks(ep.frames)])
            mask = moving_mask(real, real[0])
            rec_rows.append(masked_psnr(rec, real, mask).numpy())
            still_rows.append(masked_psnr(real[:1].expand_as(real), real, mask).numpy())
        rec_db, still_db = pooled_mean(rec_rows), pooled_mean(still_rows)
        return {"moving_psnr": rec_db, "still_moving_psnr": still_db, "moving_gain_ceiling_db": rec_db - still_db}


def train_autoencoder(cfg: TrainAutoencoderConfig) -> dict:
    """Train (or resume) to cfg.steps, write autoencoder.pt and result.json; returns the result and prints it."""
    save_config(cfg, Path(cfg.out_dir) / "config.yaml")
    trainer = AutoencoderTrainer(cfg)
    if cfg.resume and trainer.load():
        print(f"resumed from step {trainer.step_count}")
    bar = tqdm(total=cfg.steps, initial=trainer.step_count, desc="autoencoder")
    t0, n0 = time.perf_counter(), trainer.step_count
    last: dict[str, float] = {}
    while trainer.step_count < cfg.steps:
        last = trainer.step()
        bar.update(1)
        bar.set_postfix(rec=f"{last['rec']:.4f}", kl=f"{last['kl']:.2f}")
        if trainer.step_count % cfg.checkpoint_every == 0 or trainer.step_count == cfg.steps:
            trainer.save()
    bar.close()
    elapsed = time.perf_counter() - t0
    trainer.set_scale()
    model_path = trainer.out / "autoencoder.pt"
    trainer.model.save(model_path)
    figures = trainer.evaluate()
    ceiling = trainer.moving_ceiling()
    m = trainer.model.cfg
    result = {
        "steps": trainer.step_count, "seconds": elapsed, "seconds_per_step": elapsed / max(trainer.step_count - n0, 1),
        "final": last, "held_out_psnr": figures["psnr"], "held_out_ssim": figures["ssim"],
        "eval_frames": figures["frames"], "held_out_episodes": trainer.held_out,
        "held_out_moving_psnr": ceiling["moving_psnr"], "held_out_still_moving_psnr": ceiling["still_moving_psnr"],
        "moving_gain_ceiling_db": ceiling["moving_gain_ceiling_db"],
        "params_m": sum(p.numel() for p in trainer.model.parameters()) / 1e6,
        "latent_shape": [m.latent_channels * len(cfg.views), m.latent_size, m.latent_size],
        "scaling_factor": m.scaling_factor, "shift_factor": m.shift_factor, "model_path": str(model_path),
    }
    atomic_write_json(trainer.out / "result.json", result, indent=1)
    print(f"autoencoder: {model_path}  ({result['steps']} steps, {result['seconds_per_step']:.3f} s/step, "
          f"{result['params_m']:.2f}M params, latents {result['latent_shape']})")
    print(f"  held-out reconstruction ({figures['frames']} frames): PSNR {figures['psnr']:.2f} dB  "
          f"SSIM {figures['ssim']:.3f}")
    print(f"  moving region, every held-out frame: reconstruction {ceiling['moving_psnr']:.2f} dB, still frame "
          f"{ceiling['still_moving_psnr']:.2f} dB: a latent world model's gain is at most "
          f"{ceiling['moving_gain_ceiling_db']:+.2f} dB")
    return result
