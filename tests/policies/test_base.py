"""The policy contract: shapes, dtypes, select_action queue, input validation, save/load."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from policies.base import ObservationError, Policy, RandomPolicy, RandomPolicyConfig, batch_obs
from policies.vla import VLAPolicy
from tests.policies.conftest import make_obs, tiny_config


@pytest.fixture(scope="module")
def policy() -> VLAPolicy:
    torch.manual_seed(0)
    return VLAPolicy(tiny_config()).eval()


def test_policy_is_abstract():
    with pytest.raises(TypeError, match="abstract"):
        Policy(RandomPolicyConfig())  # type: ignore[abstract]  # what the test checks


@pytest.mark.parametrize("make", [lambda: VLAPolicy(tiny_config()),
                                  lambda: RandomPolicy(RandomPolicyConfig(chunk_len=4))])
def test_contract_shapes_and_dtypes(make):
    p, obs = make(), make_obs(batch=3)
    chunk = p.predict_action_chunk(obs)
    assert chunk.shape == (3, 4, 7) and chunk.dtype == torch.float32 and p.chunk_len == 4
    assert chunk.abs().max() <= 1.0 and not chunk.requires_grad
    actions, log_prob, value = p.sample(obs, generator=torch.Generator().manual_seed(0))
    assert actions.shape == (3, 4, 7) and actions.dtype == torch.float32 and actions.abs().max() <= 1.0
    assert log_prob.shape == (3,) and value.shape == (3,)
    lp, ent, val = p.evaluate(obs, actions)
    assert lp.shape == ent.shape == val.shape == (3,)
    assert torch.isfinite(lp).all() and torch.isfinite(ent).all()
    assert p.select_action(obs).shape == (3, 7)


def test_numpy_and_torch_inputs_agree(policy):
    obs = make_obs(batch=2)
    as_torch = {"image": torch.from_numpy(obs["image"]), "state": torch.from_numpy(obs["state"]),
                "instruction": list(obs["instruction"])}
    torch.testing.assert_close(policy.predict_action_chunk(obs), policy.predict_action_chunk(as_torch))


def test_select_action_pops_the_chunk_then_replans(policy):
    obs, other = make_obs(batch=2, seed=0), make_obs(batch=2, seed=1)
    policy.reset()
    chunk = policy.predict_action_chunk(obs)
    popped = [policy.select_action(obs)] + [policy.select_action(other) for _ in range(3)]
    # the queue is served from the first chunk even though the observation changed
    torch.testing.assert_close(torch.stack(popped, 1), chunk)
    torch.testing.assert_close(policy.select_action(other), policy.predict_action_chunk(other)[:, 0])
    policy.reset()  # reset drops what is left of the queue
    torch.testing.assert_close(policy.select_action(obs), chunk[:, 0])


def test_n_action_steps_replans_early():
    p = VLAPolicy(tiny_config(n_action_steps=2)).eval()
    obs, other = make_obs(seed=0), make_obs(seed=1)
    p.select_action(obs), p.select_action(obs)
    torch.testing.assert_close(p.select_action(other), p.predict_action_chunk(other)[:, 0])


def test_select_action_rejects_batch_change_within_episode(policy):
    policy.reset()
    policy.select_action(make_obs(batch=2))
    with pytest.raises(ValueError, match="batch size changed"):
        policy.select_action(make_obs(batch=3))
    policy.reset()


@pytest.mark.parametrize("mutate, match", [
    (lambda o: o.pop("image"), r"missing key\(s\) \['image'\]"),
    (lambda o: o.pop("instruction"), "missing key"),
    (lambda o: o.update(image=o["image"][0]), "add a batch dimension"),
    (lambda o: o.update(image=o["image"][..., :2]), r"uint8 \[B, V, H, W, 3\]"),
    (lambda o: o.update(image=o["image"].astype(np.float32)), "dtype uint8"),
    (lambda o: o.update(state=o["state"][:2]), r"obs\['state'\]"),
    (lambda o: o.update(instruction="one string"), "sequence of 3 strings"),
    (lambda o: o.update(instruction=("a", "b")), "expected 3 strings"),
    (lambda o: o.update(image=o["image"][:, :1]), "expects 2 views"),
    (lambda o: o.update(state=o["state"][:, :5]), r"\[B, 8\]"),
])
def test_bad_observations_raise_clear_errors(policy, mutate, match):
    obs = make_obs(batch=3)
    mutate(obs)
    with pytest.raises(ObservationError, match=match):
        policy.predict_action_chunk(obs)


def test_bad_actions_and_configs_raise(policy):
    with pytest.raises(ValueError, match=r"\[B, K, 7\]"):
        policy.evaluate(make_obs(batch=3), torch.zeros(3, 5, 7))
    with pytest.raises(ValueError, match="n_action_steps"):
        VLAPolicy(tiny_config(n_action_steps=9))
    with pytest.raises(ObservationError, match="batched observation"):
        batch_obs([1, 2, 3])  # type: ignore[arg-type]  # not a mapping, on purpose


def test_save_load_round_trip_restores_class_config_weights(tmp_path, policy):
    policy.set_state_stats(torch.arange(8.0), torch.full((8,), 2.0))
    obs = make_obs(batch=2)
    expected = policy.predict_action_chunk(obs)
    gen = lambda: torch.Generator().manual_seed(3)  # noqa: E731
    sampled = policy.sample(obs, generator=gen())
    path = tmp_path / "sub" / "policy.pt"
    policy.save(path)
    assert not list(path.parent.glob("*.tmp"))  # written atomically, nothing left behind
    loaded = Policy.load(path)
    assert type(loaded) is VLAPolicy and loaded.config == policy.config and not loaded.training
    torch.testing.assert_close(loaded.predict_action_chunk(obs), expected, rtol=0, atol=0)
    for a, b in zip(loaded.sample(obs, generator=gen()), sampled):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    torch.testing.assert_close(loaded.state_mean, torch.arange(8.0))
    # the instruction embeddings travel with the checkpoint: no language model needed for them
    assert set(loaded.get_extra_state()["instructions"]) == set(obs["instruction"])


def test_load_checks_class_and_format(tmp_path):
    path = tmp_path / "random.pt"
    RandomPolicy(RandomPolicyConfig(chunk_len=3, seed=5)).save(path)
    loaded = Policy.load(path)
    assert isinstance(loaded, RandomPolicy) and loaded.config.seed == 5 and loaded.chunk_len == 3
    with pytest.raises(TypeError, match="not a VLAPolicy"):
        VLAPolicy.load(path)
    torch.save({"weights": torch.zeros(1)}, tmp_path / "other.pt")
    with pytest.raises(ValueError, match="not a policy checkpoint"):
        Policy.load(tmp_path / "other.pt")


def test_random_policy_log_prob_is_uniform_density():
    p = RandomPolicy(RandomPolicyConfig(chunk_len=2, seed=0))
    obs = make_obs(batch=4)
    a, lp, v = p.sample(obs, generator=torch.Generator().manual_seed(0))
    lp2, ent, _ = p.evaluate(obs, a)
    torch.testing.assert_close(lp, lp2)
    torch.testing.assert_close(lp, torch.full((4,), -14 * np.log(2.0), dtype=torch.float32))
    torch.testing.assert_close(ent, -lp)
    assert torch.equal(v, torch.zeros(4))
    assert p.evaluate(obs, torch.full((4, 2, 7), 1.5))[0].eq(-np.inf).all()
