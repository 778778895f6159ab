"""GRPO/PPO math on hand-computed cases: group advantages, GAE, the clipped surrogate, the KL estimator."""
import math

import numpy as np
import pytest
import torch

from imagination.rl.algo import (
    Batch,
    RLConfig,
    clipped_surrogate,
    gae,
    group_advantages,
    kl_k2,
    kl_k3,
    make_optimizer,
    update,
)


def test_group_advantages_normalize_within_each_group():
    returns = torch.tensor([1.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 2.0, 0.0])
    groups = torch.tensor([0, 0, 0, 0, 1, 1, 1, 1, 2, 2])
    adv = group_advantages(returns, groups, eps=0.0 + 1e-12)
    # group 0: mean 0.5, population std 0.5; group 1: no signal; group 2: mean 1, std 1
    torch.testing.assert_close(adv, torch.tensor([1.0, -1.0, -1.0, 1.0, 0.0, 0.0, 0.0, 0.0, 1.0, -1.0]))


def test_group_std_floor_shrinks_groups_of_near_equal_graded_rewards():
    returns = torch.tensor([0.97, 0.99, 0.2, 0.8])
    groups = torch.tensor([0, 0, 1, 1])
    plain = group_advantages(returns, groups)
    floored = group_advantages(returns, groups, std_floor=0.1)
    # plain GRPO: both groups +-1; with the floor, group 0's std (0.01) counts as 0.1, group 1's (0.3) is above it
    torch.testing.assert_close(plain, torch.tensor([-1.0, 1.0, -1.0, 1.0]), atol=1e-3, rtol=0)
    torch.testing.assert_close(floored, torch.tensor([-0.1, 0.1, -1.0, 1.0]), atol=1e-3, rtol=0)


def test_gae_matches_hand_computation():
    rewards = torch.tensor([[0.0], [0.0], [1.0]])
    values = torch.tensor([[0.5], [0.6], [0.7]])
    dones = torch.tensor([[0.0], [0.0], [1.0]])
    adv, ret = gae(rewards, values, dones, torch.tensor([9.0]), gamma=0.9, lam=0.8)
    # t=2: 1 - 0.7 = 0.3 (terminal: the last value 9 is not used)
    # t=1: 0.9*0.7 - 0.6 + 0.72*0.3 = 0.246;  t=0: 0.9*0.6 - 0.5 + 0.72*0.246 = 0.21712
    torch.testing.assert_close(adv[:, 0], torch.tensor([0.21712, 0.246, 0.3]))
    torch.testing.assert_close(ret, adv + values)


def test_gae_does_not_leak_across_episode_ends_and_bootstraps_the_last_value():
    rewards, values = torch.tensor([[1.0], [0.0]]), torch.tensor([[0.2], [0.3]])
    adv, _ = gae(rewards, values, torch.tensor([[1.0], [0.0]]), torch.tensor([0.5]), gamma=1.0, lam=1.0)
    torch.testing.assert_close(adv[:, 0], torch.tensor([0.8, 0.2]))  # 1 - 0.2 ; 0 + 0.5 - 0.3


def test_clipped_surrogate_values_gradients_and_stats():
    new = torch.full((2,), math.log(1.5), requires_grad=True)  # ratio 1.5 for both samples
    loss, stats = clipped_surrogate(new, torch.zeros(2), torch.tensor([1.0, -1.0]), clip=0.2)
    # A=+1: max(-1.5, -1.2) = -1.2 (clipped, no gradient); A=-1: max(1.5, 1.2) = 1.5
    assert loss.item() == pytest.approx((-1.2 + 1.5) / 2)
    loss.backward()
    torch.testing.assert_close(new.grad, torch.tensor([0.0, 0.75]))
    assert stats["clip_fraction"] == 1.0
    assert stats["approx_kl"] == pytest.approx(0.5 - math.log(1.5))


def test_kl_k3_is_zero_on_the_reference_nonnegative_and_unbiased():
    lp = torch.tensor([0.0, -1.0])
    torch.testing.assert_close(kl_k3(lp, lp), torch.zeros(2))
    assert kl_k3(torch.tensor([0.0]), torch.tensor([math.log(0.5)])).item() == pytest.approx(0.5 + math.log(2) - 1)
    # samples of N(0, 1) against the reference N(0.5, 1): KL = 0.5^2 / 2 = 0.125
    x = torch.randn(200_000, generator=torch.Generator().manual_seed(0))
    pi, ref = torch.distributions.Normal(0.0, 1.0), torch.distributions.Normal(0.5, 1.0)
    est = kl_k3(pi.log_prob(x), ref.log_prob(x))
    assert (est >= 0).all() and est.mean().item() == pytest.approx(0.125, abs=0.005)


def test_kl_k3_stays_finite_when_the_policy_is_far_from_the_reference():
    # q = 100 overflows exp in float32 (e^88); capped, the value is finite and the sample adds no gradient
    lp = torch.tensor([-100.0], requires_grad=True)
    est = kl_k3(lp, torch.tensor([0.0]))
    assert torch.isfinite(est).all() and est.item() > 1e8
    est.sum().backward()
    assert lp.grad is not None and lp.grad.item() == 0.0


def test_kl_k2_value_and_its_gradient_is_the_kl_gradient():
    assert kl_k2(torch.tensor([0.0]), torch.tensor([math.log(0.5)])).item() == pytest.approx(0.5 * math.log(2) ** 2)
    # samples of pi = N(mu=0, 1) (not reparameterized), reference N(0.5, 1): d KL / d mu = mu - 0.5 = -0.5
    x = torch.randn(400_000, generator=torch.Generator().manual_seed(0))
    mu = torch.zeros((), requires_grad=True)
    lp = torch.distributions.Normal(mu, 1.0).log_prob(x)
    kl_k2(lp, torch.distributions.Normal(0.5, 1.0).log_prob(x)).mean().backward()
    assert mu.grad is not None and mu.grad.item() == pytest.approx(-0.5, abs=0.01)


class _Gaussian(torch.nn.Module):
    """The smallest chunked Gaussian policy update() can train: one learned mean and log-std."""

    def __init__(self):
        super().__init__()
        self.mean, self.log_std = torch.nn.Parameter(torch.zeros(2, 7)), torch.nn.Parameter(torch.zeros(()))

    def evaluate(self, obs, actions, per_dim=False):
        lp = torch.distributions.Normal(self.mean.expand_as(actions), self.log_std.exp()).log_prob(actions)
        n = actions.shape[0]
        return (lp if per_dim else lp.sum(dim=(1, 2))), self.log_std.expand(n), torch.zeros(n)


def _rollout_batch(policy: _Gaussian, n: int) -> tuple[dict, torch.Tensor, torch.Tensor]:
    """obs, n chunks of actions [n, 2, 7] and their per-dimension log-probabilities under `policy`."""
    obs = {"image": np.zeros((n, 1, 4, 4, 3), np.uint8), "state": np.zeros((n, 8), np.float32),
           "instruction": ["x"] * n}
    actions = torch.randn(n, 2, 7, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        old = policy.evaluate(obs, actions, per_dim=True)[0]
    return obs, actions, old


@pytest.mark.parametrize("estimator", ["k3", "k2"])
def test_update_skips_a_step_whose_gradient_is_not_finite(estimator):
    n, policy = 8, _Gaussian()
    obs, actions, old = _rollout_batch(policy, n)
    cfg = RLConfig(kl_estimator=estimator, minibatch_size=n, epochs=1)
    cfg.validate()
    adv = torch.linspace(-1, 1, n)
    opt = torch.optim.Adam(policy.parameters(), lr=0.1)
    bad = Batch(obs, actions, old, adv * float("inf"), adv, old.clone())
    logs = update(policy, opt, bad, cfg, np.random.default_rng(0))  # type: ignore[arg-type]  # a minimal stand-in
    assert logs["skipped_fraction"] == 1.0 and "grad_norm" not in logs
    assert torch.isfinite(policy.mean).all() and (policy.mean == 0).all()  # the weights did not move
    logs = update(policy, opt, Batch(obs, actions, old, adv, adv, old.clone()), cfg,  # type: ignore[arg-type]
                  np.random.default_rng(0))
    assert logs["skipped_fraction"] == 0.0 and np.isfinite(logs["grad_norm"]) and (policy.mean != 0).any()


def test_update_counts_its_minibatch_updates():
    """The count an anchor control (imagination/loop/arms.py) repeats: epochs x minibatches per epoch, the last one
    short."""
    n, policy = 10, _Gaussian()
    obs, actions, old = _rollout_batch(policy, n)
    adv = torch.linspace(-1, 1, n)
    calls: list[int] = []

    def anchor() -> torch.Tensor:
        calls.append(1)
        return policy.mean.pow(2).sum()

    cfg = RLConfig(minibatch_size=4, epochs=3)
    logs = update(policy, torch.optim.Adam(policy.parameters(), lr=0.1),  # type: ignore[arg-type]
                  Batch(obs, actions, old, adv, adv, old.clone()), cfg, np.random.default_rng(0), anchor)
    assert logs["updates"] == 9 == len(calls)  # 3 epochs x (4 + 4 + 2)


def test_warmup_raises_the_learning_rate_linearly_per_step_taken():
    """Adam's first step moves every weight by about lr: under a warmup of W updates it moves them by lr / W, and a
    skipped (non-finite) step does not advance the schedule."""
    n, policy = 8, _Gaussian()
    obs, actions, old = _rollout_batch(policy, n)
    adv = torch.linspace(-1, 1, n)
    cfg = RLConfig(minibatch_size=n, epochs=1, lr=0.1, warmup_updates=4, kl_coef=0.0)
    cfg.validate()
    opt, schedule = make_optimizer(policy, cfg)  # type: ignore[arg-type]  # a minimal stand-in
    assert opt.param_groups[0]["lr"] == pytest.approx(0.025)
    update(policy, opt, Batch(obs, actions, old, adv * float("inf"), adv), cfg,  # type: ignore[arg-type]
           np.random.default_rng(0), schedule=schedule)
    assert schedule.last_epoch == 0 and opt.param_groups[0]["lr"] == pytest.approx(0.025)
    update(policy, opt, Batch(obs, actions, old, adv, adv), cfg, np.random.default_rng(0),  # type: ignore[arg-type]
           schedule=schedule)
    moved = policy.mean.detach().abs()
    assert moved.max() <= 0.025 + 1e-6 and moved.max() > 0.02  # Adam's first step: about lr / W
    lrs = []
    for _ in range(4):
        update(policy, opt, Batch(obs, actions, old, adv, adv), cfg,  # type: ignore[arg-type]
               np.random.default_rng(0), schedule=schedule)
        lrs.append(opt.param_groups[0]["lr"])
    assert lrs == pytest.approx([0.075, 0.1, 0.1, 0.1])
    _, flat = make_optimizer(_Gaussian(), RLConfig(lr=0.1))  # type: ignore[arg-type]
    assert flat.get_last_lr() == [0.1]


@pytest.mark.parametrize("field,value,match", [("algo", "sac", "rl.algo"), ("clip", 0.0, "rl.clip"),
                                               ("kl_coef", -1.0, "rl.kl_coef"), ("gamma", 1.5, "rl.gamma"),
                                               ("kl_estimator", "k1", "rl.kl_estimator"),
                                               ("warmup_updates", -1, "rl.warmup_updates")])
def test_config_errors_name_the_field(field, value, match):
    cfg = RLConfig()
    setattr(cfg, field, value)
    with pytest.raises(ValueError, match=match):
        cfg.validate()


def test_batch_subset_moves_tensors_to_the_policy_device_and_keeps_obs_on_the_host():
    n = 6
    obs = {"image": np.zeros((n, 1, 4, 4, 3), np.uint8), "state": np.zeros((n, 8), np.float32),
           "instruction": [f"task {i}" for i in range(n)]}
    batch = Batch(obs, torch.arange(n * 2 * 7.0).reshape(n, 2, 7), torch.arange(n * 1.0), torch.ones(n),
                  torch.zeros(n), torch.arange(n * 1.0))
    idx = np.array([4, 1])
    host = batch.subset(idx)
    assert host.actions.device.type == "cpu" and torch.equal(host.log_prob, torch.tensor([4.0, 1.0]))
    assert host.obs["instruction"] == ["task 4", "task 1"]
    moved = batch.subset(idx, "meta")  # a device without data: proves every tensor field is moved
    for t in (moved.actions, moved.log_prob, moved.advantages, moved.returns, moved.ref_log_prob):
        assert t is not None and t.device.type == "meta"
    assert isinstance(moved.obs["image"], np.ndarray) and moved.obs["image"].shape == (2, 1, 4, 4, 3)


def test_rl_presets_load_and_the_gpu_one_runs_on_cuda():
    from imagination.rl.training import ImagineRLConfig
    from infra.cli import load_config

    for preset in ("quick", "full", "gpu64"):
        cfg = load_config(ImagineRLConfig, preset, ["iterations=3"], group="rl")
        cfg.rl.validate()
        assert cfg.iterations == 3 and cfg.num_groups * cfg.group_size >= 32
    gpu = load_config(ImagineRLConfig, "gpu64", [], group="rl")
    # "off" must arrive as the string (a bare YAML off is the boolean false)
    assert gpu.device == "cuda" and gpu.imagination.device == "cuda" and gpu.imagination.uncertainty == "off"
