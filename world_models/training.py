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
import shutil
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from accelerate import Accelerator
from accelerate.utils import set_seed
from diffusers.optimization import get_scheduler
from tqdm import tqdm

from envs.frames import channels_to_views, tile_views, to_model_frames, to_uint8
from infra.atomic import atomic_write_json, fsync_dir, fsync_file
from infra.checkpoint import CheckpointError
from infra.cli import save_config
from infra.crash_points import crash_point
from robot_data.dataset import encode_preview
from world_models.augment import StyleAugConfig, augment_clip
from world_models.autoencoder import Autoencoder
from world_models.clips import (
    ClipConfig,
    ClipSampler,
    EpisodeArrays,
    episode_weights,
    load_episodes,
    split_episodes,
)
from world_models.losses import (
    BootstrapConfig,
    WorldModelObjective,
    bootstrap_context,
    draw_noise,
    hide_actions,
    noise_context,
)
from world_models.metrics import psnr_per_frame
from world_models.model import WorldModel, WorldModelConfig
from world_models.train_checkpoint import (
    CORRUPT_SUFFIX,
    STEP_DIR,
    check_process_count,
    drop_accelerate_rng,
    migrate_legacy,
    read_train_state,
    save_train_state,
    set_global_rng,
    verify,
)


@dataclass
class TrainWorldModelConfig:
    out_dir: str = "outputs/world_model/quick"
    clips: ClipConfig = field(default_factory=ClipConfig)
    model: WorldModelConfig = field(default_factory=WorldModelConfig)  # ignored with init_from
    augment: StyleAugConfig = field(default_factory=StyleAugConfig)
    bootstrap: BootstrapConfig = field(default_factory=BootstrapConfig)
    steps: int = 2000
    batch_size: int = 8
    lr: float = 3e-4
    weight_decay: float = 0.0
    lr_schedule: str = "cosine"  # any diffusers.optimization scheduler name
    warmup_steps: int = 100
    grad_clip: float = 1.0
    context_noise: float = 0.0  # max std of Gaussian noise added to context frames (std ~ U(0, max) per
    # clip; GameNGen-style): teaches the model to look through the grain its own predictions carry
    head_weight: float = 0.1  # weight of the success/done BCE against the denoising loss
    head_on_predictions: bool = True  # also train the heads on the denoiser's clean estimates
    # extra denoising-loss weight where the target differs from the anchor (what moves: the arm, the object),
    # 0 = a uniform loss. Why: most of a frame never moves, so a uniform loss spends most of its signal there
    moving_weight: float = 0.0
    moving_threshold: float = 0.1  # |target - anchor| (in the denoiser's space, any channel) counted as moving
    seed: int = 0
    num_threads: int = 0  # torch CPU threads; 0 = torch's default
    mixed_precision: str = "no"  # accelerate: "no", "fp16", "bf16"
    log_every: int = 25
    sample_every: int = 500  # 0 = never; a real | predicted mp4 of a held-out episode
    sample_horizon: int = 32  # steps of that replay
    checkpoint_every: int = 500
    keep_checkpoints: int = 2
    resume: bool = True  # continue from the newest checkpoint in out_dir if there is one
    # a world_model.pt (WorldModel.save) to fine-tune: its weights and model config start a run that has
    # no checkpoint in out_dir yet; "" = train from scratch
    init_from: str = ""
    # latent mode: an autoencoder.pt (scripts/train_autoencoder.py) whose latents the model runs on; its
    # image_size must match the data. "" = pixel space. Ignored with init_from (the model file says which)
    autoencoder_from: str = ""
    # latent mode: encode every training frame once up front and draw clips from the latents (fast; needs
    # augment.enabled=false) instead of encoding each clip at every step (slow; style augmentation works)
    latent_cache: bool = True


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


def model_config_for_data(cfg: TrainWorldModelConfig, image_size: int,
                          autoencoder: Autoencoder | None = None) -> WorldModelConfig:
    """The model config with its data-dependent fields (views, C, K, channels, image size) from the data,
    and the autoencoder's config in latent mode."""
    den = dataclasses.replace(cfg.model.denoiser, image_size=image_size, channels=3 * len(cfg.clips.views),
                              context_frames=cfg.clips.context_frames, chunk_len=cfg.clips.chunk_len)
    ae = None if autoencoder is None else dataclasses.replace(autoencoder.cfg)
    return dataclasses.replace(cfg.model, views=list(cfg.clips.views), denoiser=den, autoencoder=ae)


def load_autoencoder(cfg: TrainWorldModelConfig, image_size: int) -> Autoencoder:
    """The autoencoder named by cfg.autoencoder_from; one error naming the field if it does not fit the data."""
    path = Path(cfg.autoencoder_from)
    if not path.is_file():
        raise FileNotFoundError(f"autoencoder_from: {path} not found (expected the autoencoder.pt of "
                                f"scripts/train_autoencoder.py)")
    ae = Autoencoder.load(path)
    if ae.cfg.image_size != image_size:
        raise ValueError(f"autoencoder_from: {path} takes {ae.cfg.image_size} px frames but the data in "
                         f"clips.data_dir has {image_size} px")
    return ae


@torch.no_grad()
def encode_episodes(model: WorldModel, episodes: list[EpisodeArrays], device: torch.device | str = "cpu"
                    ) -> list[EpisodeArrays]:
    """Copies of `episodes` whose frames are the model's latents, float32 [T, h, w, C_lat V] (channels last,
    the layout of uint8 frames, so clips slice them alike; collate moves the channels first)."""
    return [dataclasses.replace(ep, frames=model.encode(to_model_frames(ep.frames).to(device))
                                .movedim(-3, -1).float().cpu().numpy()) for ep in episodes]


@torch.no_grad()
def encode_clips(model: WorldModel, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The clip's frames (history, context, target, anchor) as the model's latents; the batch itself in pixel mode."""
    if not model.latent:
        return batch
    return dict(batch, **{k: model.encode(batch[k]) for k in ("history", "context", "target", "anchor")})


def load_init_model(cfg: TrainWorldModelConfig) -> WorldModel:
    """The model named by cfg.init_from (weights and config), in train mode; one clear error if unusable."""
    path = Path(cfg.init_from)
    if path.is_dir():
        raise FileNotFoundError(f"init_from: {path} is a folder; give the world model file in it, "
                                f"e.g. {path / 'world_model.pt'}")
    if not path.is_file():
        raise FileNotFoundError(f"init_from: {path} not found (expected the world_model.pt of a world-model "
                                f"training run)")
    if path.resolve() == (Path(cfg.out_dir) / "world_model.pt").resolve():
        # that run's own checkpoints would be resumed instead: nothing would be fine-tuned
        raise ValueError(f"init_from: {path} is this run's own output (out_dir={cfg.out_dir}); "
                         f"fine-tune into a new out_dir")
    try:
        model = WorldModel.load(path)
    except Exception as e:  # torch.load raises many kinds on a file that is not a checkpoint at all
        raise ValueError(f"init_from: {path} is not a world model written by WorldModel.save "
                         f"({type(e).__name__}: {e})") from e
    return model.train()


def inherit_split(parent_split: Path, data_dir: str, episodes: list, train_idx: list[int],
                  held_idx: list[int]) -> tuple[list[int], list[int]]:
    """(train, held_out) positions for a fine-tune on a dataset that has grown since its parent's run.

    Why: a fresh split of the grown dataset would put some of the parent's held-out episodes into
    training, and the fine-tuned model's fidelity would then be measured on episodes it has seen.
    The parent's held-out episodes stay held out, its training episodes stay in training, and only
    episodes it never saw follow the new split. Without a parent split.json on the same data_dir,
    the new split stands.
    """
    if not parent_split.is_file():
        return train_idx, held_idx
    parent = json.loads(parent_split.read_text())
    if Path(parent.get("data_dir", "")).resolve() != Path(data_dir).resolve():
        return train_idx, held_idx
    p_train, p_held = set(parent["train"]), set(parent["held_out"])
    new_held = {episodes[i].index for i in held_idx}
    held = [i for i, ep in enumerate(episodes)
            if ep.index in p_held or (ep.index not in p_train and ep.index in new_held)]
    held_set = set(held)
    return [i for i in range(len(episodes)) if i not in held_set], held


def check_model_fits_data(model_cfg: WorldModelConfig, cfg: TrainWorldModelConfig, image_size: int) -> None:
    """Raise ValueError naming the clips fields that disagree with the data-dependent model config fields."""
    den = model_cfg.denoiser
    wrong = [f"clips.{name}={mine} but the model has {theirs}" for name, mine, theirs in (
        ("views", list(cfg.clips.views), list(model_cfg.views)),
        ("context_frames", cfg.clips.context_frames, den.context_frames),
        ("chunk_len", cfg.clips.chunk_len, den.chunk_len)) if mine != theirs]
    if image_size != den.image_size:
        wrong.append(f"the data in clips.data_dir has {image_size} px frames but the model takes {den.image_size} px")
    if wrong:
        raise ValueError(f"init_from: {cfg.init_from} does not fit this run: " + "; ".join(wrong))


def weighting_summary(sampler: ClipSampler) -> str:
    """One line: each source's share of training steps and, under the episode weights, of clips."""
    eps = sampler.episodes
    lengths = np.array([len(ep) for ep in eps], dtype=np.float64)
    steps, clips = lengths / lengths.sum(), sampler.episode_probabilities()
    parts = []
    for source in sorted({ep.source for ep in eps}):
        m = np.array([ep.source == source for ep in eps])
        parts.append(f"{source} {steps[m].sum():.0%} of steps -> {clips[m].sum():.0%} of clips")
    failed = np.array([not ep.episode_success for ep in eps])
    parts.append(f"failed episodes {steps[failed].sum():.0%} -> {clips[failed].sum():.0%}")
    return "clip sampling: " + ", ".join(parts)


class Trainer:
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

    def unwrapped(self) -> WorldModel:
        return self.acc.unwrap_model(self.objective).model

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

    # ------------------------------------------------------------------ checkpoints
    def checkpoint_dir(self) -> Path:
        return self.out / "checkpoints"

    def save_checkpoint(self) -> Path:
        """accelerate state into a temporary folder; then the WorldModel file; then the folder renamed into place.

        The model file is written before the rename that commits the checkpoint: a kill in between leaves
        a world_model.pt newer than the newest checkpoint (a resume retrains those steps exactly and writes
        it again), never one older than it.
        """
        self.acc.wait_for_everyone()
        final = self.checkpoint_dir() / f"step_{self.state.step:07d}"
        tmp = final.with_name(final.name + ".tmp")
        if self.acc.is_main_process:
            shutil.rmtree(tmp, ignore_errors=True)
        self.acc.wait_for_everyone()
        self.acc.save_state(str(tmp), safe_serialization=True)
        crash_point("wm.checkpoint.state_saved")
        save_train_state(tmp, self.acc.process_index, self.state.step, self.state.sampler.state_dict(),
                         self.state.generator)
        self.acc.wait_for_everyone()
        if self.acc.is_main_process:
            drop_accelerate_rng(tmp)  # their RNG states are in train_state_<rank>.pt
            for f in tmp.rglob("*"):  # on disk before the rename commits them (a power cut, not only a kill)
                if f.is_file():
                    fsync_file(f)
            self.unwrapped().save(self.model_path())
            crash_point("wm.checkpoint.before_commit")
            shutil.rmtree(final, ignore_errors=True)
            tmp.replace(final)
            fsync_dir(final.parent)
            crash_point("wm.checkpoint.after_commit")
            self.prune_checkpoints()
        self.acc.wait_for_everyone()
        return final

    def model_path(self) -> Path:
        return self.out / "world_model.pt"

    def prune_checkpoints(self) -> None:
        """Keep the newest `keep_checkpoints` checkpoints; drop temporary folders a killed save left behind."""
        for old in self.list_checkpoints()[: -max(self.cfg.keep_checkpoints, 1)]:
            shutil.rmtree(old, ignore_errors=True)
        d = self.checkpoint_dir()
        for tmp in d.glob("step_*.tmp") if d.is_dir() else []:
            shutil.rmtree(tmp, ignore_errors=True)

    def export_model(self) -> bool:
        """Rewrite world_model.pt from the current weights unless it holds exactly them; True if rewritten.

        Why: a run killed between committing its last checkpoint and writing the model file (or a file
        damaged since) would otherwise leave a stale or missing model behind a run that reports done.
        """
        path = self.model_path()
        model = self.unwrapped()
        if _holds_weights(path, model):
            return False
        model.save(path)
        return True

    def list_checkpoints(self) -> list[Path]:
        """Committed checkpoint folders, oldest first (not .tmp ones a killed save left, nor set-aside .corrupt)."""
        d = self.checkpoint_dir()
        return sorted(p for p in d.iterdir() if p.is_dir() and STEP_DIR.match(p.name)) if d.is_dir() else []

    def load_checkpoint(self, path: Path | None = None) -> bool:
        """Restore the given checkpoint, or the newest intact one; False when there is none.

        A damaged newer one (empty, truncated or foreign files, a refused pickle) is reported on stderr
        by path and renamed step_NNNNNNN.corrupt, so that neither a later resume nor the pruning of old
        checkpoints takes it for the newest. CheckpointError names every damaged folder when none is
        intact, and the given one when `path` is given."""
        ckpts = [path] if path is not None else self.list_checkpoints()[::-1]
        if self.acc.is_main_process:
            for ckpt in ckpts:
                migrate_legacy(ckpt)
        self.acc.wait_for_everyone()
        damaged: list[tuple[Path, CheckpointError]] = []
        for ckpt in ckpts:
            try:
                self._restore(ckpt)
            except CheckpointError as err:
                if path is not None:
                    raise
                damaged.append((ckpt, err))
                if self.acc.is_main_process:
                    print(f"warning: checkpoint {ckpt} is damaged, not resumed from: {err}", file=sys.stderr)
                continue
            self._set_aside(damaged)
            return True
        if damaged:
            raise CheckpointError(f"no intact checkpoint to resume from in {self.checkpoint_dir()} (resume=false "
                                  "starts over): " + "; ".join(str(err) for _, err in damaged))
        return False

    def _restore(self, ckpt: Path) -> None:
        """Every file of `ckpt` read safely first (train_checkpoint.verify), then loaded."""
        rank = self.acc.process_index
        check_process_count(ckpt, self.acc.num_processes)
        verify(ckpt, rank)
        state = read_train_state(ckpt, rank)
        try:
            self.acc.load_state(str(ckpt))
            self.state.load_state_dict(state)
        except (RuntimeError, ValueError, KeyError, TypeError, OSError) as err:  # shapes or states that do not fit
            raise CheckpointError(f"{ckpt}: does not fit this run ({type(err).__name__}: "
                                  f"{str(err).strip().splitlines()[0] if str(err).strip() else ''})") from None
        if "rng" in state:
            set_global_rng(state["rng"])

    def _set_aside(self, damaged: list[tuple[Path, CheckpointError]]) -> None:
        self.acc.wait_for_everyone()  # every process has read past them before they move
        if self.acc.is_main_process:
            for ckpt, _ in damaged:
                aside = ckpt.with_name(ckpt.name + CORRUPT_SUFFIX)
                shutil.rmtree(aside, ignore_errors=True)
                ckpt.replace(aside)
                print(f"warning: moved the damaged checkpoint to {aside}", file=sys.stderr)

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


def _holds_weights(path: Path, model: WorldModel) -> bool:
    """True when `path` is a WorldModel file with `model`'s config and exactly its weights."""
    try:
        saved = WorldModel.load(path)
    except Exception:  # missing, truncated or foreign: not the current model either way
        return False
    mine = {k: v.detach().cpu() for k, v in model.state_dict().items()}
    theirs = saved.state_dict()
    return (saved.cfg == model.cfg and mine.keys() == theirs.keys()
            and all(torch.equal(mine[k], theirs[k]) for k in mine))


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
