"""The Reward protocol (imagination/rewards/): the env ends and rewards episodes as the judge says, a judge of the
user's own plugs in, and `build_reward` refuses what no judge can honour with one clear error."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from imagination.env import ImaginationConfig, ImaginationVectorEnv
from imagination.keyframes import Keyframe
from imagination.rewards.base import REWARDS, build_reward, reads_simulator
from imagination.rewards.head import HeadReward
from tests.imagination.conftest import start_episodes as _episodes


class EndsAtSecondAction:
    """A judge of one's own: every episode ends at its chunk's second action, with P(success) 0.7."""

    default_threshold = 0.5
    graded = True
    reads_frames = True  # the env hands it the chunk's frames

    def __init__(self) -> None:
        self.started: list[tuple[int, int, int]] = []
        self.advanced: list[tuple[int, int]] = []

    def start_limit(self, episode, max_steps):
        return 5

    def start(self, i, episode_index, episode, t):
        self.started.append((i, episode_index, t))

    def chunk(self, envs, t, before, acts, states, success_logits, frames):
        self.frames = frames
        prob = np.zeros((len(envs), acts.shape[1]), np.float32)
        prob[:, 1] = 0.7
        return prob, np.ones(len(envs), np.int64)

    def advance(self, j, i, n):
        self.advanced.append((i, n))


def test_the_env_ends_and_rewards_episodes_as_a_judge_of_ones_own_says(models):
    wm, prop = models
    judge = EndsAtSecondAction()
    venv = ImaginationVectorEnv(wm, prop, _episodes(), num_envs=2, config=ImaginationConfig(max_steps=50),
                                reward=judge)
    assert venv.success_threshold == 0.5 and venv.reward is judge
    venv.reset(seed=0, options={"keyframes": [Keyframe(0, 2), Keyframe(1, 0)]})
    assert judge.started == [(0, 0, 2), (1, 1, 0)]
    _, reward, terminated, truncated, info = venv.step(np.zeros((2, 4, 7), np.float32))
    assert terminated.all() and not truncated.any() and info["steps"].tolist() == [2, 2]
    np.testing.assert_allclose(reward, [0.7, 0.7])  # graded: the probability where it ended
    assert info["success"].all() and judge.advanced == [(0, 2), (1, 2)]
    assert judge.frames.shape == (2, 4, 3, 16, 16) and judge.frames.min() >= -1 and judge.frames.max() <= 1
    # keyframes are drawn only before the judge's limit
    assert max(k.t for k in venv.keyframes.sample(200, np.random.default_rng(0))) < 5


def test_the_head_reads_the_success_logits():
    head = HeadReward(0.3)
    prob, end = head.chunk(np.array([0, 1]), np.zeros(2), torch.zeros(2, 8), torch.zeros(2, 4, 7),
                           torch.zeros(2, 4, 8), torch.tensor([[0.0, 2.0, -2.0, 0.0]] * 2))
    np.testing.assert_allclose(prob[0], torch.sigmoid(torch.tensor([0.0, 2.0, -2.0, 0.0])).numpy())
    assert end.tolist() == [-1, -1] and head.default_threshold == 0.3 and not head.graded


def test_build_reward_refuses_what_no_judge_honours(models):
    wm, _ = models
    with pytest.raises(ValueError, match=r"reward: expected one of \['head', 'state', 'grasp', 'goal'\]"):
        build_reward(ImaginationConfig(reward="pixels"), wm, _episodes(), 1)
    with pytest.raises(ValueError, match="object_reader: only reward 'grasp' reads it"):
        build_reward(ImaginationConfig(object_reader="reader.pt"), wm, _episodes(), 1)
    assert isinstance(build_reward(ImaginationConfig(), wm, _episodes(), 1), HeadReward)
    assert REWARDS == ("head", "state", "grasp", "goal")
    assert [reads_simulator(ImaginationConfig(reward=r)) for r in REWARDS] == [False, True, True, False]
