"""A world-model training run's config, and what the run builds from it before its first step: the model config
fitted to the data, the model a fine-tune starts from, the autoencoder of latent mode, the fine-tune's held-out
split, and the frames encoded as latents. world_models/training.py's Trainer runs them; the benchmarks that build a
model of a run's shape call model_config_for_data alone."""
from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from envs.frames import to_model_frames
from world_models.augment import StyleAugConfig
from world_models.autoencoder import Autoencoder
from world_models.clips import ClipConfig, ClipSampler, EpisodeArrays
from world_models.losses import BootstrapConfig
from world_models.model import WorldModel, WorldModelConfig


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
