"""World-model training with accelerate: CPU, one GPU, or many (`accelerate launch`).

    cfg = TrainWorldModelConfig(clips=ClipConfig(data_dir="outputs/data/libero_spatial_quick"))
    result = train(cfg)      # or: python scripts/train_world_model.py --config quick

Out dir layout:
    config.yaml                      the resolved config (written by scripts/train_world_model.py)
    split.json                       dataset episode indices used for training and held out
    world_model.pt                   latest weights + config (WorldModel.load), rewritten at each checkpoint
    checkpoints/step_NNNNNNN/        accelerate state: model, optimizer, LR scheduler, RNG states and
                                     the sampler/generator state (exact resume); written to a temporary
                                     folder and renamed, the newest `keep_checkpoints` kept
    samples/step_NNNNNNN.mp4         real | predicted open-loop replay of a held-out episode
    logs/                            tensorboard scalars

Exact resume: every random draw of a step (clips, style, bootstrapping, noise levels, noise, head
augmentation) comes from the clip sampler's numpy generator and one torch generator, both saved in
the checkpoint, so a resumed run computes the same next-step loss as an uninterrupted one.
"""
from __future__ import annotations

import dataclasses
import json
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from accelerate import Accelerator
from accelerate.utils import set_seed
from diffusers.optimization import get_scheduler
from tqdm import tqdm

from envs.dataset import encode_video
from world_models.augment import StyleAugConfig, augment_clip
from world_models.clips import ClipConfig, ClipSampler, load_episodes, split_episodes, to_model_frames, to_uint8
from world_models.losses import BootstrapConfig, WorldModelObjective, bootstrap_context, draw_noise
from world_models.metrics import psnr_per_frame
from world_models.model import WorldModel, WorldModelConfig


@dataclass
class TrainWorldModelConfig:
    out_dir: str = "outputs/world_model/quick"
    clips: ClipConfig = field(default_factory=ClipConfig)
    model: WorldModelConfig = field(default_factory=WorldModelConfig)
    augment: StyleAugConfig = field(default_factory=StyleAugConfig)
    bootstrap: BootstrapConfig = field(default_factory=BootstrapConfig)
    steps: int = 2000
    batch_size: int = 8
    lr: float = 3e-4
    weight_decay: float = 0.0
    lr_schedule: str = "cosine"  # any diffusers.optimization scheduler name
    warmup_steps: int = 100
    grad_clip: float = 1.0
    head_weight: float = 0.1  # weight of the success/done BCE against the denoising loss
    head_on_predictions: bool = True  # also train the heads on the denoiser's clean estimates
    seed: int = 0
    num_threads: int = 0  # torch CPU threads; 0 = torch's default
    mixed_precision: str = "no"  # accelerate: "no", "fp16", "bf16"
    log_every: int = 25
    sample_every: int = 500  # 0 = never; a real | predicted mp4 of a held-out episode
    sample_horizon: int = 32  # steps of that replay
    checkpoint_every: int = 500
    keep_checkpoints: int = 2
    resume: bool = True  # continue from the newest checkpoint in out_dir if there is one


class TrainState:
    """Everything besides model/optimizer/scheduler a resumed run needs (registered with accelerate)."""

    def __init__(self, sampler: ClipSampler, generator: torch.Generator):
        self.step = 0
        self.sampler = sampler
        self.generator = generator

    def state_dict(self) -> dict:
        return {"step": self.step, "sampler": self.sampler.state_dict(), "generator": self.generator.get_state()}

    def load_state_dict(self, state: dict) -> None:
        self.step = int(state["step"])
        self.sampler.load_state_dict(state["sampler"])
        self.generator.set_state(state["generator"])


def model_config_for_data(cfg: TrainWorldModelConfig, image_size: int) -> WorldModelConfig:
    """The model config with its data-dependent fields (views, C, K, channels, image size) from the data."""
    den = dataclasses.replace(cfg.model.denoiser, image_size=image_size, channels=3 * len(cfg.clips.views),
                              context_frames=cfg.clips.context_frames, chunk_len=cfg.clips.chunk_len)
    return dataclasses.replace(cfg.model, views=list(cfg.clips.views), denoiser=den)


class Trainer:
    """Owns data, model, optimizer and the accelerate state; `step()` runs one optimisation step."""

    def __init__(self, cfg: TrainWorldModelConfig, accelerator: Accelerator | None = None):
        self.cfg = cfg
        self.out = Path(cfg.out_dir)
        if cfg.num_threads > 0:
            torch.set_num_threads(cfg.num_threads)
        self.acc = accelerator or Accelerator(mixed_precision=cfg.mixed_precision, log_with="tensorboard",
                                              project_dir=str(self.out / "logs"))
        set_seed(cfg.seed)
        episodes = load_episodes(cfg.clips.data_dir, cfg.clips.views)
        if cfg.clips.max_episodes > 0:
            episodes = episodes[: cfg.clips.max_episodes]
        train_idx, held_idx = split_episodes(len(episodes), cfg.clips.holdout_fraction, cfg.clips.split_seed,
                                             cfg.clips.holdout_min)
        self.train_episodes = [episodes[i] for i in train_idx]
        self.held_out = [episodes[i] for i in held_idx]
        if self.acc.is_main_process:  # which episodes evaluation must keep away from (eval_world_model.py)
            self.out.mkdir(parents=True, exist_ok=True)
            (self.out / "split.json").write_text(json.dumps({
                "data_dir": str(cfg.clips.data_dir), "train": [episodes[i].index for i in train_idx],
                "held_out": [episodes[i].index for i in held_idx]}, indent=1))
        image_size = episodes[0].frames.shape[1]
        if episodes[0].frames.shape[2] != image_size:
            raise ValueError(f"frames must be square, got {episodes[0].frames.shape[1:3]}")
        self.model = WorldModel(model_config_for_data(cfg, image_size))
        objective = WorldModelObjective(self.model, cfg.head_weight, cfg.head_on_predictions)
        optimizer = torch.optim.AdamW(self.model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
        lr_sched = get_scheduler(cfg.lr_schedule, optimizer, num_warmup_steps=cfg.warmup_steps * self.acc.num_processes,
                                 num_training_steps=cfg.steps * self.acc.num_processes)
        self.objective, self.optimizer, self.lr_sched = self.acc.prepare(objective, optimizer, lr_sched)
        # each process draws its own clips; the torch generator drives every other random choice
        seed = cfg.seed + 1000 * self.acc.process_index
        self.state = TrainState(ClipSampler(self.train_episodes, cfg.clips.context_frames, cfg.clips.chunk_len, seed),
                                torch.Generator().manual_seed(seed + 1))
        self.acc.register_for_checkpointing(self.state)

    @property
    def step_count(self) -> int:
        return self.state.step

    def unwrapped(self) -> WorldModel:
        return self.acc.unwrap_model(self.objective).model

    # ------------------------------------------------------------------ one step
    def step(self) -> dict[str, float]:
        cfg, gen = self.cfg, self.state.generator
        model = self.unwrapped()
        batch = self.state.sampler.sample(cfg.batch_size, self.acc.device)
        batch = augment_clip(batch, cfg.augment, gen)
        prob = cfg.bootstrap.probability(self.state.step)
        batch, mask = bootstrap_context(model, batch, prob, cfg.bootstrap.sample_steps, gen)
        sigma, noise, degraded = draw_noise(model, batch, gen)
        self.objective.train()
        with self.acc.autocast():
            losses = self.objective(batch, sigma, noise, degraded)
        self.acc.backward(losses["loss"])
        if cfg.grad_clip > 0:
            self.acc.clip_grad_norm_(self.objective.parameters(), cfg.grad_clip)
        self.optimizer.step()
        self.lr_sched.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.state.step += 1
        out = {k: float(v.detach()) for k, v in losses.items()}
        out.update(lr=self.lr_sched.get_last_lr()[0], bootstrap_prob=prob, bootstrapped=float(mask.float().mean()))
        return out

    # ------------------------------------------------------------------ checkpoints
    def checkpoint_dir(self) -> Path:
        return self.out / "checkpoints"

    def save_checkpoint(self) -> Path:
        """accelerate state into a temporary folder, renamed into place; then the WorldModel file."""
        self.acc.wait_for_everyone()
        final = self.checkpoint_dir() / f"step_{self.state.step:07d}"
        if self.acc.is_main_process:
            tmp = final.with_name(final.name + ".tmp")
            shutil.rmtree(tmp, ignore_errors=True)
        self.acc.wait_for_everyone()
        self.acc.save_state(str(final.with_name(final.name + ".tmp")), safe_serialization=True)
        if self.acc.is_main_process:
            shutil.rmtree(final, ignore_errors=True)
            final.with_name(final.name + ".tmp").replace(final)
            self.unwrapped().save(self.out / "world_model.pt")
            for old in self.list_checkpoints()[: -max(self.cfg.keep_checkpoints, 1)]:
                shutil.rmtree(old, ignore_errors=True)
        self.acc.wait_for_everyone()
        return final

    def list_checkpoints(self) -> list[Path]:
        d = self.checkpoint_dir()
        return sorted(p for p in d.glob("step_*") if p.is_dir() and not p.name.endswith(".tmp")) if d.is_dir() else []

    def load_checkpoint(self, path: Path | None = None) -> bool:
        """Restore the newest (or the given) checkpoint; False when there is none."""
        ckpts = self.list_checkpoints()
        path = path or (ckpts[-1] if ckpts else None)
        if path is None:
            return False
        self.acc.load_state(str(path))
        return True

    # ------------------------------------------------------------------ samples
    @torch.no_grad()
    def sample_video(self, path: Path, steps: int | None = None) -> float:
        """Open-loop replay of the first held-out episode (train if none): real | predicted mp4; mean PSNR."""
        ep = (self.held_out or self.train_episodes)[0]
        model = self.unwrapped().eval()
        T = min(self.cfg.sample_horizon, len(ep) - 1)
        frames = to_model_frames(ep.frames[: T + 1]).to(self.acc.device)
        actions = torch.from_numpy(ep.actions[:T])[None].to(self.acc.device)
        gen = torch.Generator().manual_seed(self.cfg.seed)
        pred, _, _ = model.rollout(frames[0][None], None, actions, steps=steps, generator=gen)
        real = frames[1:]
        psnr = float(psnr_per_frame(pred[0], real).mean())
        side = np.concatenate([to_uint8(real), to_uint8(pred[0])], axis=2)  # [T, H, 2W, ch]
        views = [side[..., 3 * v: 3 * v + 3] for v in range(side.shape[-1] // 3)]
        encode_video(path, np.concatenate(views, axis=1), fps=10, codec="h264", crf=20)
        return psnr


def train(cfg: TrainWorldModelConfig, trainer: Trainer | None = None) -> dict:
    """Run (or resume) training to cfg.steps; returns final figures and paths."""
    trainer = trainer or Trainer(cfg)
    acc = trainer.acc
    if cfg.resume and trainer.load_checkpoint():
        acc.print(f"resumed from step {trainer.step_count}")
    hparams = {k: v for k, v in dataclasses.asdict(cfg).items() if isinstance(v, (int, float, str, bool))}
    acc.init_trackers("world_model", config=hparams)
    bar = tqdm(total=cfg.steps, initial=trainer.step_count, desc="world model", disable=not acc.is_main_process)
    last: dict[str, float] = {}
    t0, n0 = time.perf_counter(), trainer.step_count
    while trainer.step_count < cfg.steps:
        last = trainer.step()
        step = trainer.step_count
        bar.update(1)
        if step % cfg.log_every == 0 or step == cfg.steps:
            acc.log({f"train/{k}": v for k, v in last.items()}, step=step)
            bar.set_postfix(loss=f"{last['loss']:.4f}", mse=f"{last['mse']:.4f}")
        if cfg.sample_every > 0 and (step % cfg.sample_every == 0 or step == cfg.steps) and acc.is_main_process:
            psnr = trainer.sample_video(trainer.out / "samples" / f"step_{step:07d}.mp4")
            acc.log({"sample/psnr": psnr}, step=step)
        if step % cfg.checkpoint_every == 0 or step == cfg.steps:
            trainer.save_checkpoint()
    bar.close()
    elapsed = time.perf_counter() - t0
    acc.end_training()
    if not trainer.list_checkpoints():  # nothing trained in this call and nothing saved before
        trainer.save_checkpoint()
    return {"steps": trainer.step_count, "final": last, "seconds": elapsed,
            "seconds_per_step": elapsed / max(trainer.step_count - n0, 1),
            "model_path": str(trainer.out / "world_model.pt"), "out_dir": str(trainer.out),
            "held_out_episodes": [ep.index for ep in trainer.held_out]}
