"""Clip sampling: alignment of frames/actions/labels, padding, split by episode, resumable sampler."""
import numpy as np
import pytest
import torch

from world_models.clips import ClipSampler, EpisodeArrays, load_episodes, make_clip, split_episodes, to_model_frames


def _numbered_episode(T: int = 12) -> EpisodeArrays:
    # frame t is filled with the value t, action t is (t+1) in every component: alignment is readable
    frames = np.stack([np.full((4, 4, 3), t, np.uint8) for t in range(T)])
    actions = np.stack([np.full(7, t + 1, np.float32) for t in range(T)])
    success = np.zeros(T, bool)
    success[-1:] = True  # solved by the last action
    return EpisodeArrays(frames, actions, success, index=0, task_id=0, instruction="x")


def test_clip_alignment_in_the_middle():
    ep = _numbered_episode()
    c = make_clip(ep, t=5, context_frames=2, chunk_len=3)
    assert c["context"][:, 0, 0, 0].tolist() == [4, 5]  # frames t-C+1..t
    assert c["target"][:, 0, 0, 0].tolist() == [6, 7, 8]  # frames t+1..t+K
    assert c["actions"][:, 0].tolist() == [6, 7, 8]  # actions t..t+K-1 (value = index + 1)
    assert c["history"][:, 0, 0, 0].tolist() == [1, 2]  # frames t-K-C+1..t-K
    assert c["prev_actions"][:, 0].tolist() == [3, 4, 5]  # actions t-K..t-1
    assert c["anchor"][0, 0, 0] == 0


def test_padding_before_start_and_after_end():
    ep = _numbered_episode()
    c = make_clip(ep, t=0, context_frames=3, chunk_len=4)
    assert c["context"][:, 0, 0, 0].tolist() == [0, 0, 0]  # frame 0 repeated
    assert c["prev_actions"].tolist() == np.zeros((4, 7)).tolist()  # zero actions before the start
    end = make_clip(ep, t=10, context_frames=2, chunk_len=4)
    assert end["target"][:, 0, 0, 0].tolist() == [11, 11, 11, 11]  # last frame repeated
    assert end["actions"][:, 0].tolist() == [11, 12, 0, 0]  # zero actions past the end
    assert end["done"].tolist() == [0, 1, 1, 1]  # step 11 is the last: the episode stops there
    assert end["success"].tolist() == [0, 1, 1, 1]  # success after action 11, and it stays


def test_split_is_by_episode_and_deterministic():
    train, held = split_episodes(20, 0.2, seed=3)
    assert len(held) == 4 and not set(train) & set(held) and sorted(train + held) == list(range(20))
    assert (train, held) == split_episodes(20, 0.2, seed=3)
    assert split_episodes(1, 0.5, seed=0) == ([0], [])
    with pytest.raises(ValueError, match="holdout_fraction"):
        split_episodes(10, 1.0, seed=0)


def test_sampler_batch_shapes_range_and_resume(square_data):
    eps = load_episodes(square_data, ["agentview"])
    s = ClipSampler(eps, context_frames=2, chunk_len=4, seed=0)
    b = s.sample(5)
    assert b["context"].shape == (5, 2, 3, 16, 16) and b["context"].dtype == torch.float32
    assert b["target"].shape == (5, 4, 3, 16, 16) and b["anchor"].shape == (5, 3, 16, 16)
    assert b["actions"].shape == (5, 4, 7) and b["success"].shape == (5, 4) and b["done"].shape == (5, 4)
    assert b["target"].min() >= -1 and b["target"].max() <= 1
    state = s.state_dict()
    nxt = s.sample(3)
    s2 = ClipSampler(eps, context_frames=2, chunk_len=4, seed=123)
    s2.load_state_dict(state)
    again = s2.sample(3)
    assert all(torch.equal(nxt[k], again[k]) for k in nxt)


def test_views_stack_as_channels(tmp_path):
    from robot_data.dataset import DatasetConfig, EpisodeWriter
    from tests.world_models.conftest import square_episode

    ep = square_episode(np.random.default_rng(0), 10)
    ep.frames["wrist"] = 255 - ep.frames["agentview"]
    with EpisodeWriter(tmp_path, DatasetConfig(views=("agentview", "wrist"), image_size=(16, 16))) as w:
        w.append(ep)
    both = load_episodes(tmp_path, ["agentview", "wrist"])[0]
    assert both.frames.shape == (10, 16, 16, 6)
    x = to_model_frames(both.frames)
    assert x.shape == (10, 6, 16, 16)
    assert torch.allclose(x[:, 3:], -x[:, :3], atol=1e-5)
    with pytest.raises(ValueError, match="views"):
        load_episodes(tmp_path, ["top"])
