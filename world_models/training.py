"""World-model training with accelerate: CPU, one GPU, or many (`accelerate launch`).

    cfg = TrainWorldModelConfig(clips=ClipConfig(data_dir="outputs/data/libero_spatial_quick"))
    result = train(cfg)      # or: python scripts/train_world_model.py --config quick

Out dir layout:
    config.yaml                      the resolved config (written by scripts/train_world_model.py)
    split.json                       dataset episode indices used for training and held out
    world_model.pt                   latest weights + config (WorldModel.load), rewritten at each checkpoint
                                     before that checkpoint is committed, so never older than the newest
                                     one; a run resumed at its last step rewrites it if it disagrees
    checkpoints/step_NNNNNNN/        accelerate state: model (safetensors), optimizer, LR scheduler, and
                                     train_state_<rank>.pt: step, sampler/generator and RNG states as
                                     tensors and JSON (exact resume; world_models/train_checkpoint.py);
                                     written to a temporary folder and renamed, the newest
                                     `keep_checkpoints` kept (on every path, resume included). Every file
                                     is read with weights_only=True, never unpickled freely. A resume
                                     whose newest checkpoint is damaged says so by path, renames it
                                     step_NNNNNNN.corrupt and resumes from the newest intact one.
    samples/step_NNNNNNN.mp4         real | predicted open-loop replay of a held-out episode
    logs/                            tensorboard scalars

Fine-tuning (e.g. on a dataset grown with policy episodes):

    python scripts/train_world_model.py --config quick init_from=outputs/world_model/quick/world_model.pt \\
        out_dir=outputs/world_model/ft1 clips.data_dir=outputs/data/grown steps=500 \\
        'clips.source_weights={policy:3.0}' clips.failure_weight=2.0

init_from takes the weights *and* the model config (architecture, views, C, K, image size) from
that file; `model` is ignored. Optimizer and LR schedule start fresh and `steps` counts the
fine-tune's own steps. The weights are only a starting point: once out_dir holds a checkpoint,
re-running the command resumes it exactly, as any run does. source_weights / failure_weight
(world_models.clips.ClipConfig) draw clips more often from the new or failed episodes.

Latent mode (e.g. 128 px): autoencoder_from=outputs/autoencoder/quick/autoencoder.pt (written by
scripts/train_autoencoder.py) makes the model run on that autoencoder's latents; its weights are copied
into world_model.pt and stay frozen. With latent_cache (default) every training frame is encoded once
before the first step and clips are drawn from those latents (no style augmentation: it changes pixels);
without it clips are drawn and style-augmented as frames and encoded at every step (~2 s a step for 8
clips at 128 px on one CPU thread). Everything after (bootstrapping, context noise, loss, heads) works
on latents.

Exact resume: every random draw of a step (clips, style, bootstrapping, noise levels, noise, head
augmentation) comes from the clip sampler's numpy generator and one torch generator, both saved in
the checkpoint, so a resumed run computes the same next-step loss as an uninterrupted one.
"""
from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path

import numpy as np
import torch
from accelerate import Accelerator
from accelerate.utils import set_seed
from diffusers.optimization import get_scheduler
from tqdm import tqdm

from envs.frames import channels_to_views, tile_views, to_model_frames, to_uint8
from infra.atomic import atomic_write_json
from infra.cli import save_config
from robot_data.dataset import encode_preview
from world_models.augment import augment_clip
from world_models.clips import (
    ClipSampler,
    episode_weights,
    load_episodes,
    split_episodes,
)
from world_models.losses import (
    WorldModelObjective,
    bootstrap_context,
    draw_noise,
    hide_actions,
    noise_context,
)
from world_models.metrics import psnr_per_frame
from world_models.model import WorldModel
from world_models.train_setup import (
    TrainWorldModelConfig,
    check_model_fits_data,
    encode_clips,
    encode_episodes,
    inherit_split,
    load_autoencoder,
    load_init_model,
    model_config_for_data,
    weighting_summary,
)
from world_models.trainer_checkpoints import TrainerCheckpoints

MIXED_PRECISION = ("no", "fp16", "bf16")


class TrainState:
    """Everything besides model/optimizer/scheduler a resumed run needs (saved by world_models.train_checkpoint,
    not registered with accelerate: accelerate would read it back with pickle's full powers)."""

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


class Trainer(TrainerCheckpoints):
    """Owns data, model, optimizer and the accelerate state; `step()` runs one optimisation step."""

    def __init__(self, cfg: TrainWorldModelConfig, accelerator: Accelerator | None = None):
        self.cfg = cfg
        self.out = Path(cfg.out_dir)
        if cfg.num_threads > 0:
            torch.set_num_threads(cfg.num_threads)
        if accelerator is None and cfg.mixed_precision not in MIXED_PRECISION:
            # YAML 1.1 reads a bare `no` as false; infra.cli keeps the word in presets and overrides,
            # a YAML read elsewhere (one's own OmegaConf.load) still turns it into "False"
            hint = " (YAML reads a bare no as false: quote it, mixed_precision: 'no')" \
                if str(cfg.mixed_precision).lower() == "false" else ""
            raise ValueError(f"mixed_precision: expected one of {list(MIXED_PRECISION)}, "
                             f"got {cfg.mixed_precision!r}{hint}")
        self.acc = accelerator or Accelerator(mixed_precision=cfg.mixed_precision, log_with="tensorboard",
                                              project_dir=str(self.out / "logs"))
        set_seed(cfg.seed)
        # before the (slow) episode loading, so a wrong path fails at once
        init_model = load_init_model(cfg) if cfg.init_from else None
        episodes = load_episodes(cfg.clips.data_dir, cfg.clips.views, features=cfg.clips.features)
        if cfg.clips.max_episodes > 0:
            episodes = episodes[: cfg.clips.max_episodes]
        train_idx, held_idx = split_episodes(len(episodes), cfg.clips.holdout_fraction, cfg.clips.split_seed,
                                             cfg.clips.holdout_min)
        if cfg.init_from:
            train_idx, held_idx = inherit_split(Path(cfg.init_from).with_name("split.json"), cfg.clips.data_dir,
                                                episodes, train_idx, held_idx)
        self.train_episodes = [episodes[i] for i in train_idx]
        self.held_out = [episodes[i] for i in held_idx]
        extra = {d: load_episodes(d, cfg.clips.views, features=cfg.clips.features) for d in cfg.clips.extra_train_dirs}
        image_size = episodes[0].frames.shape[1]
        if episodes[0].frames.shape[2] != image_size:
            raise ValueError(f"frames must be square, got {episodes[0].frames.shape[1:3]}")
        for d, eps in extra.items():
            if eps and eps[0].frames.shape[1:] != episodes[0].frames.shape[1:]:
                raise ValueError(f"clips.extra_train_dirs: {d} holds frames {eps[0].frames.shape[1:]} "
                                 f"(H, W, 3 x views) but clips.data_dir holds {episodes[0].frames.shape[1:]}")
            self.train_episodes += eps
        if self.acc.is_main_process:  # which episodes evaluation must keep away from (eval_world_model.py)
            self.out.mkdir(parents=True, exist_ok=True)
            atomic_write_json(self.out / "split.json", {
                "data_dir": str(cfg.clips.data_dir), "train": [episodes[i].index for i in train_idx],
                "held_out": [episodes[i].index for i in held_idx],
                **({"extra_train": {d: [ep.index for ep in eps] for d, eps in extra.items()}} if extra else {})},
                indent=1)
        if init_model is not None:  # a checkpoint in out_dir, if any, replaces these weights in train()
            check_model_fits_data(init_model.cfg, cfg, image_size)
            self.model = init_model
        elif cfg.autoencoder_from:
            ae = load_autoencoder(cfg, image_size)
            self.model = WorldModel(model_config_for_data(cfg, image_size, ae))
            assert self.model.autoencoder is not None
            self.model.autoencoder.load_state_dict(ae.state_dict())
        else:
            self.model = WorldModel(model_config_for_data(cfg, image_size))
        objective = WorldModelObjective(self.model, cfg.head_weight, cfg.head_on_predictions, cfg.moving_weight,
                                        cfg.moving_threshold)
        # the frozen autoencoder (latent mode) stays out of the optimizer
        trainable = [p for p in self.model.parameters() if p.requires_grad]
        optimizer = torch.optim.AdamW(trainable, lr=cfg.lr, weight_decay=cfg.weight_decay)
        lr_sched = get_scheduler(cfg.lr_schedule, optimizer, num_warmup_steps=cfg.warmup_steps * self.acc.num_processes,
                                 num_training_steps=cfg.steps * self.acc.num_processes)
        self.objective, self.optimizer, self.lr_sched = self.acc.prepare(objective, optimizer, lr_sched)
        # each process draws its own clips; the torch generator drives every other random choice
        seed = cfg.seed + 1000 * self.acc.process_index
        weights = episode_weights(self.train_episodes, cfg.clips.source_weights, cfg.clips.failure_weight)
        # latent mode with latent_cache: clips come ready-encoded; pixel episodes stay for the sample videos
        self.cached = self.unwrapped().latent and cfg.latent_cache
        clip_episodes = self.train_episodes
        if self.cached:
            if cfg.augment.enabled:
                raise ValueError("augment.enabled: style augmentation changes pixels, but latent_cache=true draws "
                                 "clips from latents encoded once; set augment.enabled=false or latent_cache=false")
            n = sum(len(ep) for ep in self.train_episodes)
            self.acc.print(f"encoding {n} training frames to latents once (latent_cache)")
            clip_episodes = encode_episodes(self.unwrapped(), self.train_episodes, self.acc.device)
        sampler = ClipSampler(clip_episodes, cfg.clips.context_frames, cfg.clips.chunk_len, seed, weights)
        if cfg.clips.source_weights or cfg.clips.failure_weight != 1.0:
            self.acc.print(weighting_summary(sampler))
        # on the accelerator's device: a GPU run draws its noise there (world_models.rng); CPU runs unchanged
        self.state = TrainState(sampler, torch.Generator(device=self.acc.device).manual_seed(seed + 1))

    @property
    def step_count(self) -> int:
        return self.state.step

    # ------------------------------------------------------------------ one step
    def step(self) -> dict[str, float]:
        cfg, gen = self.cfg, self.state.generator
        model = self.unwrapped()
        batch = self.state.sampler.sample(cfg.batch_size, self.acc.device)
        batch = augment_clip(batch, cfg.augment, gen)  # with latent_cache it is disabled and returns the batch
        batch = batch if self.cached else encode_clips(model, batch)
        prob = cfg.bootstrap.probability(self.state.step)
        batch, mask = bootstrap_context(model, batch, prob, cfg.bootstrap.sample_steps, gen)
        batch = noise_context(batch, cfg.context_noise, gen, bounded=not model.latent)
        batch = hide_actions(model, batch, gen)
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
        if self.acc.num_processes > 1:  # each process drew its own clips: report the mean over all of them
            mean = self.acc.reduce(torch.stack([v.detach().float() for v in losses.values()]), reduction="mean")
            out = dict(zip(losses, mean.tolist()))
        else:
            out = {k: float(v.detach()) for k, v in losses.items()}
        out.update(lr=self.lr_sched.get_last_lr()[0], bootstrap_prob=prob, bootstrapped=float(mask.float().mean()))
        return out

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
        side = np.concatenate([to_uint8(real), to_uint8(pred[0])], axis=2)  # [T, H, 2W, 3V]: real | predicted
        tiled = tile_views(channels_to_views(side, side.shape[-1] // 3), vertical=True)  # [T, V*H, 2W, 3]
        encode_preview(path, tiled, fps=10)
        return psnr


def train(cfg: TrainWorldModelConfig, trainer: Trainer | None = None) -> dict:
    """Run (or resume) training to cfg.steps; returns final figures and paths."""
    trainer = trainer or Trainer(cfg)
    acc = trainer.acc
    if cfg.resume and trainer.load_checkpoint():
        acc.print(f"resumed from step {trainer.step_count}")
    elif cfg.init_from:
        acc.print(f"fine-tuning {cfg.init_from}")
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
    if not trainer.list_checkpoints():  # nothing trained in this call and nothing saved before
        trainer.save_checkpoint()
    elif trainer.step_count == n0 and acc.is_main_process and trainer.export_model():
        # resumed at the end: the model file must still be the newest checkpoint's weights
        acc.print(f"rewrote {trainer.model_path()} from the checkpoint of step {trainer.step_count}")
    if acc.is_main_process:
        trainer.prune_checkpoints()
    acc.wait_for_everyone()
    # last: with several processes it also destroys the process group the barriers above need
    acc.end_training()
    return {"steps": trainer.step_count, "final": last, "seconds": elapsed,
            "seconds_per_step": elapsed / max(trainer.step_count - n0, 1),
            "model_path": str(trainer.out / "world_model.pt"), "out_dir": str(trainer.out),
            "held_out_episodes": [ep.index for ep in trainer.held_out]}


def train_world_model(cfg: TrainWorldModelConfig) -> dict:
    """`train` with the resolved config saved as out_dir/config.yaml and a summary printed (by the main
    process alone under `accelerate launch`)."""
    trainer = Trainer(cfg)
    if trainer.acc.is_main_process:
        save_config(cfg, Path(cfg.out_dir) / "config.yaml")
    result = train(cfg, trainer)
    if not trainer.acc.is_main_process:
        return result
    final = {k: round(v, 5) for k, v in result["final"].items()}
    print(f"world model: {result['model_path']}  ({result['steps']} steps, {result['seconds_per_step']:.3f} s/step)")
    print(f"  last step: {json.dumps(final)}")
    print(f"  held-out episodes: {result['held_out_episodes']}")
    return result
