"""Tiny synthetic datasets and models for the world-model tests.

The "moving square" world: a bright square on a dark background, moved by the action's first two
components (dx, dy) by up to `speed` pixels per step; success once it reaches the right quarter.
A model that follows actions must move its predicted square the same way.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from robot_data.dataset import DatasetConfig, Episode, EpisodeWriter
from world_models.denoiser import DenoiserConfig
from world_models.heads import HeadConfig
from world_models.model import WorldModelConfig

SIZE = 16  # image side in pixels
SQ = 4  # square side
SPEED = 2.0  # pixels per step at |action| = 1


def render(pos: np.ndarray, size: int = SIZE) -> np.ndarray:
    """uint8 [size, size, 3] with the square's top-left corner at pos = (x, y) (rounded)."""
    img = np.full((size, size, 3), (20, 30, 40), np.uint8)
    x, y = (int(round(v)) for v in pos)
    img[y:y + SQ, x:x + SQ] = (230, 200, 60)
    return img


def square_episode(rng: np.random.Generator, T: int, size: int = SIZE) -> Episode:
    pos = rng.uniform(0, size - SQ, size=2)
    frames, actions, success = [], [], []
    a = rng.uniform(-1, 1, size=2)
    for _ in range(T):
        if rng.random() < 0.3:  # actions persist for a few steps, like a real controller's
            a = rng.uniform(-1, 1, size=2)
        frames.append(render(pos, size))
        act = np.zeros(7, np.float32)
        act[:2] = a
        actions.append(act)
        pos = np.clip(pos + SPEED * a, 0, size - SQ)
        success.append(pos[0] >= size - SQ - 1)
    return Episode(
        frames={"agentview": np.stack(frames)}, state=np.zeros((T, 8), np.float32), action=np.stack(actions),
        reward=np.array(success, np.float32), success=np.array(success, bool), instruction="move the square",
        suite="synthetic", task_id=0, source="expert",
    )


def write_square_dataset(root: Path, episodes: int = 6, T: int = 24, seed: int = 0) -> Path:
    rng = np.random.default_rng(seed)
    with EpisodeWriter(root, DatasetConfig(views=("agentview",), image_size=(SIZE, SIZE), fps=10)) as w:
        for _ in range(episodes):
            w.append(square_episode(rng, T))
    return root


def tiny_model_config(context_frames: int = 2, chunk_len: int = 4, size: int = SIZE) -> WorldModelConfig:
    return WorldModelConfig(
        views=["agentview"],
        denoiser=DenoiserConfig(image_size=size, channels=3, context_frames=context_frames, chunk_len=chunk_len,
                                block_out_channels=[16, 32], layers_per_block=1, norm_num_groups=8),
        head=HeadConfig(channels=[8, 16]),
    )


@pytest.fixture(scope="session")
def square_data(tmp_path_factory) -> Path:
    return write_square_dataset(tmp_path_factory.mktemp("squares") / "data", episodes=8, T=32)


@pytest.fixture(autouse=True)
def _one_thread():
    # the machine is shared: keep each test on one core
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def tiny_train_config(data: Path, out: Path, steps: int, **overrides):
    """A TrainWorldModelConfig for the square world: tiny model, C=2, K=4, one thread."""
    from world_models.clips import ClipConfig
    from world_models.training import TrainWorldModelConfig

    cfg = TrainWorldModelConfig(
        out_dir=str(out), clips=ClipConfig(data_dir=str(data), context_frames=2, chunk_len=4),
        model=tiny_model_config(), steps=steps, batch_size=16, lr=5e-3, lr_schedule="constant_with_warmup",
        warmup_steps=20, log_every=50, sample_every=0, checkpoint_every=10_000, num_threads=1,
    )
    for k, v in overrides.items():
        setattr(cfg, k, v)
    return cfg


@pytest.fixture(scope="session")
def trained_square(square_data, tmp_path_factory):
    """A tiny world model trained 500 steps on the square world (~1 min on one core), with its losses.

    Style augmentation and bootstrapping are off here: this model checks that the denoiser learns
    the action-conditioned dynamics; those two features have tests of their own.
    """
    from world_models.training import Trainer

    torch.set_num_threads(1)
    cfg = tiny_train_config(square_data, tmp_path_factory.mktemp("square_run"), steps=500)
    cfg.augment.enabled = False
    cfg.bootstrap.enabled = False
    trainer = Trainer(cfg)
    losses = [trainer.step()["denoise"] for _ in range(cfg.steps)]
    trainer.save_checkpoint()
    return trainer.unwrapped().eval(), losses, cfg


def tiny_checkpoint_config(data: Path, out: Path, steps: int):
    """tiny_train_config with a smaller denoiser, batch 4, a checkpoint every 2 steps, the last 2 kept: for
    tests of checkpoint saving, resuming and loading."""
    cfg = tiny_train_config(data, out, steps=steps, batch_size=4, checkpoint_every=2, keep_checkpoints=2)
    cfg.model = tiny_model_config()
    cfg.model.denoiser.block_out_channels = [8, 16]
    cfg.model.denoiser.norm_num_groups = 4
    return cfg

