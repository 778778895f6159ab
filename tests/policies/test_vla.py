"""The built-in VLA: RL distribution (sample/evaluate agree, entropy), proprio features, sizes."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy.spatial.transform import Rotation

from policies.vla import VLAConfig, VLAPolicy, axis_angle_to_matrix
from tests.policies.conftest import make_obs, tiny_config


@pytest.fixture(scope="module")
def policy() -> VLAPolicy:
    torch.manual_seed(0)
    return VLAPolicy(tiny_config(init_log_std=-0.5)).eval()


def test_sample_log_prob_equals_evaluate(policy):
    obs = make_obs(batch=5)
    actions, log_prob, value = policy.sample(obs, generator=torch.Generator().manual_seed(0))
    lp, _, val = policy.evaluate(obs, actions)
    torch.testing.assert_close(lp, log_prob)
    torch.testing.assert_close(val, value)
    # a wide std puts some samples on the [-1, 1] bounds; the check above covered those too
    assert (actions.abs() == 1.0).any() and (actions.abs() < 1.0).any()


def test_per_dimension_log_probs_sum_to_the_chunk_log_prob(policy):
    obs = make_obs(batch=3)
    actions, log_prob, _ = policy.sample(obs, generator=torch.Generator().manual_seed(1))
    per_dim, _, _ = policy.evaluate(obs, actions, per_dim=True)
    assert per_dim.shape == (3, policy.chunk_len, 7)
    torch.testing.assert_close(per_dim.sum(dim=(1, 2)), log_prob)


def test_log_prob_is_gaussian_inside_and_tail_mass_on_bounds(policy):
    obs = make_obs(batch=2)
    out = policy(obs)
    mean, std = out.mean.detach(), out.log_std.detach().exp()
    inside = (mean * 0.5).clone()
    inside[0, 0, 0] = 1.0  # one action on the upper bound
    expected = torch.distributions.Normal(mean, std).log_prob(inside)
    expected[0, 0, 0] = math.log(0.5 * math.erfc((1.0 - mean[0, 0, 0].item()) / (std[0, 0].item() * math.sqrt(2))))
    lp, _, _ = policy.evaluate(obs, inside)
    torch.testing.assert_close(lp, expected.sum((1, 2)), rtol=1e-5, atol=1e-4)


def test_entropy_matches_gaussian_formula(policy):
    _, ent, _ = policy.evaluate(make_obs(batch=3), torch.zeros(3, 4, 7))
    log_std = policy.log_std.detach().clamp(policy.config.log_std_min, policy.config.log_std_max)
    expected = (0.5 * math.log(2 * math.pi * math.e) + log_std).sum()
    torch.testing.assert_close(ent, expected.expand(3))
    assert torch.allclose(ent, torch.distributions.Normal(0.0, log_std.exp()).entropy().sum().expand(3))


def test_evaluate_has_gradients_for_ppo(policy):
    obs = make_obs(batch=2)
    actions, _, _ = policy.sample(obs)
    lp, ent, value = policy.evaluate(obs, actions)
    (lp.mean() + ent.mean() + value.mean()).backward()
    assert policy.log_std.grad is not None and policy.log_std.grad.abs().sum() > 0
    assert policy.action_head.weight.grad.abs().sum() > 0 and policy.value_head[-1].weight.grad.abs().sum() > 0
    policy.zero_grad()


def test_sampling_is_reproducible_with_a_generator(policy):
    obs = make_obs(batch=2)
    a1 = policy.sample(obs, generator=torch.Generator().manual_seed(7))[0]
    a2 = policy.sample(obs, generator=torch.Generator().manual_seed(7))[0]
    a3 = policy.sample(obs, generator=torch.Generator().manual_seed(8))[0]
    assert torch.equal(a1, a2) and not torch.equal(a1, a3)


def test_axis_angle_to_matrix_matches_scipy_and_is_continuous_at_half_turn():
    rng = np.random.default_rng(0)
    aa = rng.normal(size=(50, 3)) * 1.5
    aa[0] = 0.0  # the identity: no division by zero
    ours = axis_angle_to_matrix(torch.tensor(aa, dtype=torch.float64)).numpy().reshape(-1, 3, 3)
    np.testing.assert_allclose(ours, Rotation.from_rotvec(aa).as_matrix(), atol=1e-10)
    # gripper pointing down: (pi - e) about +u and (pi - e) about -u are nearly the same orientation,
    # far apart as axis-angle vectors, close as matrices
    u = np.array([1.0, 0.2, 0.0]) / np.linalg.norm([1.0, 0.2, 0.0])
    a, b = torch.tensor(u * (np.pi - 1e-3)), torch.tensor(-u * (np.pi - 1e-3))
    assert (a - b).norm() > 6.0
    assert (axis_angle_to_matrix(a) - axis_angle_to_matrix(b)).norm() < 1e-2


def test_images_of_another_size_are_resized():
    p = VLAPolicy(tiny_config()).eval()
    small, big = make_obs(batch=2, size=16), make_obs(batch=2, size=16)
    big["image"] = small["image"].repeat(2, axis=2).repeat(2, axis=3)  # 32 px, same content
    torch.testing.assert_close(p.predict_action_chunk(big), p.predict_action_chunk(small))


def test_default_size_is_cpu_friendly():
    p = VLAPolicy(VLAConfig())
    image = sum(x.numel() for x in p.image_encoder.parameters())
    total = sum(x.numel() for x in p.parameters() if x.requires_grad)
    assert image < 600_000 and total < 1_000_000, (image, total)


def test_state_stats_validation():
    p = VLAPolicy(tiny_config())
    with pytest.raises(ValueError, match="8 values"):
        p.set_state_stats(np.zeros(7), np.ones(7))
    p.set_state_stats(np.zeros(8), np.zeros(8))  # a constant dimension: std floored, no division by zero
    assert torch.isfinite(p.predict_action_chunk(make_obs(batch=1))).all()
