"""Shared pieces of the imagination tests: a tiny world model and proprio model, and random start episodes."""
import numpy as np
import pytest
import torch

from imagination.episodes import StartEpisode
from world_models.denoiser import DenoiserConfig
from world_models.model import WorldModel, WorldModelConfig
from world_models.proprio import ProprioConfig, ProprioModel

H = 16


def start_episodes(n=3, T=30, seed=0):
    rng = np.random.default_rng(seed)
    eps = []
    for e in range(n):
        frames = rng.integers(0, 255, (T, 1, H, H, 3), dtype=np.uint8)
        action = rng.uniform(-1, 1, (T, 7)).astype(np.float32)
        action[:, 6] = np.where(np.arange(T) < T // 2, -1.0, 1.0)  # one grasp event at T/2
        state = np.cumsum(rng.normal(0, 0.01, (T, 8)), 0).astype(np.float32)
        eps.append(StartEpisode(frames, state, action, f"pick up bowl {e}", e))
    return eps


@pytest.fixture(scope="module")
def models():
    torch.manual_seed(0)
    d = DenoiserConfig(image_size=H, channels=3, context_frames=2, chunk_len=4, block_out_channels=[8, 16],
                       norm_num_groups=4)
    wm = WorldModel(WorldModelConfig(views=["agentview"], denoiser=d))
    prop = ProprioModel(ProprioConfig(chunk_len=4, hidden=32, layers=1))
    return wm, prop


