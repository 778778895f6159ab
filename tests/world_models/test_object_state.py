"""The state reward (world_models/object_state.py) on a toy pick-and-place whose physics is known:
the object follows the gripper when the fingers close within 2 cm of it, and the goal holds when it
rests within 3 cm of the target. The models must learn both rules from episodes, as they would from
recorded LIBERO episodes."""
import numpy as np
import pytest
import torch

from world_models.object_state import (
    LabelledEpisode,
    StateReward,
    StateRewardConfig,
    fit_state_reward,
    object_pairs,
    track,
)

OBJ0, TARGET = np.array([0.0, 0.0, 0.9]), np.array([0.2, 0.0, 0.9])


def toy_episode(offset: np.ndarray, T: int = 40) -> LabelledEpisode:
    """Move above the object + offset, close, lift 10 cm, carry to the target, lower, open."""
    waypoints = [OBJ0 + offset + [0, 0, 0.1], OBJ0 + offset, OBJ0 + offset, OBJ0 + offset + [0, 0, 0.1],
                 TARGET + offset + [0, 0, 0.1], TARGET + offset, TARGET + offset, TARGET + offset + [0, 0, 0.1]]
    closed_from, open_from = 10, 30
    eef = np.concatenate([np.linspace(a, b, 5, endpoint=False) for a, b in zip(waypoints[:-1], waypoints[1:])] +
                         [np.repeat(waypoints[-1][None], T - 35, 0)])[:T]
    grip = np.where((np.arange(T) >= closed_from) & (np.arange(T) < open_from), 0.0, 0.04)
    state = np.concatenate([eef, np.zeros((T, 3)), np.stack([grip, -grip], 1)], 1).astype(np.float32)
    holds = np.linalg.norm(offset) < 0.02
    obj, grasped = np.repeat(OBJ0[None], T, 0), np.zeros(T, bool)
    for t in range(1, T):
        grasped[t] = holds and closed_from < t < open_from
        fallen = obj[t - 1] if obj[t - 1][2] <= 0.9 + 1e-9 else obj[t - 1] * [1, 1, 0] + [0, 0, 0.9]
        obj[t] = eef[t] - offset if grasped[t] else fallen
    success = np.zeros(T, bool)
    success[:-1] = (np.linalg.norm(obj[1:, :2] - TARGET[:2], axis=1) < 0.03) & ~grasped[1:]
    return LabelledEpisode(state, obj.astype(np.float32), np.repeat(TARGET[None], T, 0).astype(np.float32), grasped,
                           success)


@pytest.fixture(scope="module")
def fitted():
    rng = np.random.default_rng(0)
    # grasps from 0 to 4 cm off in every direction: half of them hold (as a near-miss expert's would)
    r, a = rng.uniform(0, 0.04, 80), rng.uniform(0, 2 * np.pi, 80)
    offsets = [np.array([ri * np.cos(ai), ri * np.sin(ai), 0.0]) for ri, ai in zip(r, a)]
    eps = [toy_episode(o) for o in offsets]
    torch.manual_seed(0)
    return fit_state_reward(eps, StateRewardConfig(chunk_len=4, hidden=64, layers=2, steps=1500, batch_size=128,
                                                          success_inputs="all"))  # the toy's goal needs an open gripper


def test_object_model_carries_a_held_object_and_leaves_a_missed_one(fitted):
    model, log = fitted
    assert np.mean(log["object_loss"][-100:]) < 0.2 * np.mean(log["object_loss"][:100])
    hit, miss = toy_episode(np.array([0.01, 0.0, 0.0])), toy_episode(np.array([0.035, 0.0, 0.0]))
    hit_obj, hit_p = track(model, hit, 8)
    miss_obj, miss_p = track(model, miss, 8)
    assert hit_obj[:, 2].max() - 0.9 > 0.05  # carried up with the gripper
    assert miss_obj[:, 2].max() - 0.9 < 0.03  # stays on the table
    assert np.linalg.norm(hit_obj[-1, :2] - TARGET[:2]) < 0.04 and np.linalg.norm(miss_obj[-1, :2] - OBJ0[:2]) < 0.04
    assert hit_p.max() > 0.5 > miss_p.max()


def test_save_load_round_trip_and_clear_errors(fitted, tmp_path):
    model, _ = fitted
    model.save(tmp_path / "r.pt")
    again = StateReward.load(tmp_path / "r.pt")
    x = torch.zeros(2, 3)
    assert torch.equal(model.success_logit(x, x, torch.zeros(2), torch.zeros(2, 2), torch.zeros(2)),
                       again.success_logit(x, x, torch.zeros(2), torch.zeros(2, 2), torch.zeros(2)))
    (tmp_path / "junk.pt").write_bytes(b"not a checkpoint")
    with pytest.raises(ValueError, match="junk.pt"):
        StateReward.load(tmp_path / "junk.pt")
    with pytest.raises(ValueError, match="next_states"):
        model.object_step(torch.zeros(2, 3), torch.zeros(2), torch.zeros(2), torch.zeros(2, 8), torch.zeros(2, 3, 8))
    with pytest.raises(ValueError, match="2 rows"):
        object_pairs([toy_episode(np.zeros(3), T=40)][:0], 4)


def test_geometry_success_ignores_the_gripper():
    model = StateReward(StateRewardConfig(chunk_len=4, hidden=16, layers=1))
    x, lift = torch.randn(3, 3), torch.randn(3)
    held = model.success_logit(x, torch.zeros(3, 3), lift, torch.full((3, 2), 0.04), torch.ones(3))
    free = model.success_logit(x, torch.zeros(3, 3), lift, torch.zeros(3, 2), torch.zeros(3))
    assert torch.equal(held, free)
    with pytest.raises(ValueError, match="success_inputs"):
        StateReward(StateRewardConfig(success_inputs="pixels"))
