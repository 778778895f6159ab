"""Small policies, observations and a synthetic episode dataset for the policy tests.

The synthetic task: a bright square sits somewhere in a 32 px image; the expert's action points from
the gripper position (state[:2]) towards the square, so a policy must read the image and the state.
"""
from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

from policies.vla import VLAConfig, VLAPolicy
from robot_data.dataset import DatasetConfig, Episode, EpisodeWriter

INSTRUCTIONS = ("put the black bowl on the plate", "open the top drawer of the cabinet")
SIZE = 32


def tiny_config(**overrides) -> VLAConfig:
    """A VLA small enough for fast CPU tests (16 px input after resizing, ~60k parameters)."""
    kw: dict[str, Any] = dict(image_size=16, conv_channels=[8, 16], image_features=32, language_features=16,
                              state_features=16, hidden=64, trunk_layers=2, chunk_len=4)
    kw.update(overrides)
    return VLAConfig(**kw)


def make_obs(batch: int = 3, views: int = 2, size: int = SIZE, seed: int = 0) -> dict:
    """A batched observation dict in the project's convention (numpy)."""
    rng = np.random.default_rng(seed)
    return {
        "image": rng.integers(0, 256, size=(batch, views, size, size, 3), dtype=np.uint8),
        "state": rng.normal(size=(batch, 8)).astype(np.float32),
        "instruction": tuple(INSTRUCTIONS[i % 2] for i in range(batch)),
    }


def square_episode(rng: np.random.Generator, T: int = 24, instruction: str = INSTRUCTIONS[0]) -> Episode:
    target = rng.uniform(0.2, 0.8, size=2)
    pos = rng.uniform(0.0, 1.0, size=2)
    frames, states, actions = [], [], []
    for _ in range(T):
        img = np.full((SIZE, SIZE, 3), 30, np.uint8)
        x, y = (target * (SIZE - 6)).astype(int)
        img[y:y + 6, x:x + 6] = (240, 220, 60)
        frames.append(img)
        state = np.zeros(8, np.float32)
        state[:2], state[3] = pos, np.pi  # gripper pointing down: axis-angle of length pi
        states.append(state)
        a = np.zeros(7, np.float32)
        a[:2] = np.clip((target - pos) * 4.0, -1, 1)
        a[6] = 1.0 if np.linalg.norm(target - pos) < 0.1 else -1.0
        actions.append(a)
        pos = pos + a[:2] * 0.05
    image = np.stack(frames)
    success = np.zeros(T, bool)
    success[-1] = True
    return Episode(frames={"agentview": image, "wrist": image[:, ::-1].copy()}, state=np.stack(states),
                   action=np.stack(actions), reward=success.astype(np.float32), success=success,
                   instruction=instruction, suite="synthetic", task_id=0, source="expert")


@pytest.fixture(scope="session")
def square_dataset(tmp_path_factory) -> str:
    """8 synthetic expert episodes (2 instructions) written with EpisodeWriter."""
    root = tmp_path_factory.mktemp("square_data") / "ds"
    rng = np.random.default_rng(0)
    with EpisodeWriter(root, DatasetConfig(views=("agentview", "wrist"), image_size=(SIZE, SIZE))) as w:
        for i in range(8):
            w.append(square_episode(rng, instruction=INSTRUCTIONS[i % 2]))
    return str(root)


def two_policies() -> tuple[VLAPolicy, VLAPolicy]:
    """Two tiny VLAs with different weights (seeds 0 and 1) and visible action noise, in eval mode."""
    torch.manual_seed(0)
    a = VLAPolicy(tiny_config(init_log_std=-0.5)).eval()
    torch.manual_seed(1)
    b = VLAPolicy(tiny_config(init_log_std=-0.5)).eval()
    return a, b
