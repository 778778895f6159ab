"""LIBERO vector env in subprocesses (or one env in this process): batching, per-env reset options, autoreset
declaration."""
import numpy as np
import pytest
from gymnasium.vector import AutoresetMode

from envs.libero_env import LiberoEnvConfig
from envs.vector_env import LiberoSyncVectorEnv, LiberoVectorEnv, libero_vector_env

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


def test_one_env_in_this_process_gives_the_worker_process_episode():
    cfg = LiberoEnvConfig(chunk_len=4, max_steps=12, fast_render=True, views=("agentview",))
    actions = np.random.default_rng(0).uniform(-1, 1, (3, 1, 4, 7)).astype(np.float32)
    runs = []
    for venv in (libero_vector_env(cfg, 1, [2], AutoresetMode.DISABLED),
                 LiberoVectorEnv(cfg, 1, [2], AutoresetMode.DISABLED)):
        try:
            obs, info = venv.reset(seed=[5], options={"init_state_id": [6], "reset_mask": [True]})
            steps = [venv.step(a) for a in actions]
            runs.append((type(venv), obs, info, steps))
        finally:
            venv.close()
    (kind_a, obs_a, info_a, steps_a), (kind_b, obs_b, info_b, steps_b) = runs
    assert kind_a is LiberoSyncVectorEnv and kind_b is LiberoVectorEnv
    assert list(info_a["init_state_id"]) == list(info_b["init_state_id"]) == [6]
    for x, y in [(obs_a, obs_b), *((sa[0], sb[0]) for sa, sb in zip(steps_a, steps_b))]:
        np.testing.assert_array_equal(x["image"], y["image"])
        np.testing.assert_array_equal(x["state"], y["state"])
    for sa, sb in zip(steps_a, steps_b):
        for i in (1, 2, 3):
            np.testing.assert_array_equal(sa[i], sb[i])
    assert steps_a[-1][3].all()  # truncated at max_steps in both
