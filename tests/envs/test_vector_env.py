"""LIBERO vector env in subprocesses: batching, per-env reset options, autoreset declaration."""
import numpy as np
import pytest
from gymnasium.vector import AutoresetMode

from envs.libero_env import LiberoEnvConfig
from envs.vector_env import LiberoVectorEnv

pytestmark = [pytest.mark.libero, pytest.mark.slow]


def test_vector_env_two_workers():
    cfg = LiberoEnvConfig(chunk_len=8, max_steps=16, fast_render=True, views=("agentview",))
    venv = LiberoVectorEnv(cfg, num_envs=2, task_ids=[0, 3])
    try:
        assert venv.metadata["autoreset_mode"] == AutoresetMode.NEXT_STEP
        assert venv.single_action_space.shape == (8, 7) and venv.action_space.shape == (2, 8, 7)
        obs, info = venv.reset(seed=[1, 2], options={"init_state_id": [4, 7]})
        assert obs["image"].shape == (2, 1, 64, 64, 3) and obs["state"].shape == (2, 8)
        assert list(info["init_state_id"]) == [4, 7] and list(info["task_id"]) == [0, 3]
        assert obs["instruction"][0] != obs["instruction"][1]
        for _ in range(2):
            obs, reward, term, trunc, info = venv.step(np.zeros((2, 8, 7), np.float32))
        assert trunc.all() and not term.any() and reward.shape == (2,)
        with pytest.raises(ValueError, match="one per env"):
            venv.reset(options={"init_state_id": [1, 2, 3]})
    finally:
        venv.close()


def test_vector_env_rejects_bad_sizes():
    with pytest.raises(ValueError, match="num_envs"):
        LiberoVectorEnv(LiberoEnvConfig(), num_envs=0)
    with pytest.raises(ValueError, match="task_ids"):
        LiberoVectorEnv(LiberoEnvConfig(), num_envs=2, task_ids=[1])
