"""A policy class of the user's own package (docs/policies.md): refused by Policy.load unless allowed explicitly
(a config's policy_modules, or an entry point of group wm_vla_rl.policies), loaded once allowed, and trained in
imagination (the tiny square world of tests/imagination/rl/test_training.py). Also the contract RL relies on:
policies.gaussian's clipped Gaussian is the built-in VLA's, and `noise_log_std` is the parameter RL sets.

The user's package is written into a temporary folder put on sys.path, outside this project's packages, and
dropped from sys.modules before each load that must import it (an imported module counts as allowed)."""
from __future__ import annotations

import math
import sys
import textwrap
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch

from imagination.eval.evaluate import load_policy as eval_load_policy
from imagination.eval.jobs import EvalConfig
from imagination.rl.training import train_rl
from infra.checkpoint import CheckpointError
from policies.base import POLICY_ENTRY_POINTS, Policy, RandomPolicy, import_policy_modules
from policies.gaussian import GaussianChunkConfig, GaussianChunkPolicy, clipped_gaussian_log_prob, gaussian_entropy
from policies.serving import ServeConfig
from policies.serving import load_policy as serve_load_policy
from policies.vla import VLAPolicy
from tests.imagination.rl.test_training import _config
from tests.policies.conftest import make_obs, tiny_config
from tests.world_models.conftest import SIZE

PACKAGE = "my_lab_policies"
MODULE = f"{PACKAGE}.tiny"
CLASS = f"{MODULE}:TinyPolicy"

# the user's module: a GaussianChunkPolicy subclass, its network only (pooled pixels and state -> mean, value)
SOURCE = '''
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

from policies.base import ACTION_DIM, batch_obs
from policies.gaussian import GaussianChunkConfig, GaussianChunkPolicy


@dataclass
class TinyConfig(GaussianChunkConfig):
    views: list[str] = field(default_factory=lambda: ["agentview"])
    image_size: int = 32
    hidden: int = 32


class TinyPolicy(GaussianChunkPolicy):
    config_class = TinyConfig

    def __init__(self, config=None):
        super().__init__(config or TinyConfig())
        c = self.config
        self.net = nn.Sequential(nn.Linear(len(c.views) * 3 * 16 + 8, c.hidden), nn.Tanh())
        self.mean_head = nn.Linear(c.hidden, c.chunk_len * ACTION_DIM)
        self.value_head = nn.Linear(c.hidden, 1)

    def mean_and_value(self, obs):
        x = batch_obs(obs, self.device)
        b, v, h, w, _ = x["image"].shape
        img = x["image"].reshape(b * v, h, w, 3).permute(0, 3, 1, 2).float() / 255.0
        pooled = F.adaptive_avg_pool2d(img, 4).reshape(b, -1)
        hidden = self.net(torch.cat([pooled, x["state"]], dim=-1))
        mean = torch.tanh(self.mean_head(hidden)).reshape(b, self.chunk_len, ACTION_DIM)
        return mean, self.value_head(hidden).squeeze(-1)
'''


def _forget_package() -> None:
    for name in [m for m in sys.modules if m == PACKAGE or m.startswith(PACKAGE + ".")]:
        del sys.modules[name]


@pytest.fixture
def own_package(tmp_path, monkeypatch) -> Iterator[Path]:
    """The folder holding the user's package `my_lab_policies` (on sys.path; not imported)."""
    root = tmp_path / "site"
    (root / PACKAGE).mkdir(parents=True)
    (root / PACKAGE / "__init__.py").write_text("")
    (root / PACKAGE / "tiny.py").write_text(textwrap.dedent(SOURCE))
    monkeypatch.syspath_prepend(str(root))
    _forget_package()
    yield root
    _forget_package()


def _tiny(**config):
    """A TinyPolicy instance, built from the user's module (imported here, as the user's own code would)."""
    import importlib

    module = importlib.import_module(MODULE)
    torch.manual_seed(0)
    return module.TinyPolicy(module.TinyConfig(chunk_len=4, **config))


def _saved(path: Path, **config) -> Policy:
    policy = _tiny(**config)
    policy.save(path)
    _forget_package()  # a later load must import it itself
    return policy


def _same(a: Policy, b: Policy) -> bool:
    sa, sb = a.state_dict(), b.state_dict()
    return sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)


def test_a_class_of_an_unlisted_module_is_refused_and_its_module_not_imported(own_package, tmp_path):
    _saved(tmp_path / "policy.pt")
    with pytest.raises(CheckpointError, match="outside this project's packages") as err:
        Policy.load(tmp_path / "policy.pt")
    message = str(err.value)
    assert "refused (importing it would run its code)" in message
    # says how to allow it: the config field, and the entry-point group
    assert f"policy_modules=[{MODULE}]" in message and POLICY_ENTRY_POINTS in message, message
    assert MODULE not in sys.modules and PACKAGE not in sys.modules  # the file chose no import


def test_the_allow_list_loads_it_in_code_evaluation_and_serving(own_package, tmp_path):
    saved = _saved(tmp_path / "policy.pt")
    loaded = Policy.load(tmp_path / "policy.pt", modules=[MODULE])
    assert type(loaded).__module__ == MODULE and type(loaded).__name__ == "TinyPolicy"
    assert _same(loaded, saved) and not loaded.training
    for load in (lambda: eval_load_policy(EvalConfig(checkpoint=str(tmp_path / "policy.pt"), policy_modules=[MODULE])),
                 lambda: serve_load_policy(ServeConfig(checkpoint=str(tmp_path / "policy.pt"),
                                                       policy_modules=[MODULE]))):
        _forget_package()
        assert _same(load(), saved)
    # the Hub layout too
    saved.save_pretrained(tmp_path / "hub")
    _forget_package()
    with pytest.raises(CheckpointError, match="policy_modules"):
        Policy.from_pretrained(tmp_path / "hub")
    assert _same(Policy.from_pretrained(tmp_path / "hub", modules=[MODULE]), saved)
    # the Hub export of it (scripts/export_hub.py) takes the same allow-list
    from imagination.export import ExportHubConfig, export_checkpoint

    _forget_package()
    with pytest.raises(CheckpointError, match="policy_modules"):
        export_checkpoint(ExportHubConfig(checkpoint=str(tmp_path / "policy.pt"), out=str(tmp_path / "exported")))
    _forget_package()
    export_checkpoint(ExportHubConfig(checkpoint=str(tmp_path / "policy.pt"), out=str(tmp_path / "exported"),
                                      policy_modules=[MODULE]))
    _forget_package()
    assert _same(Policy.from_pretrained(tmp_path / "exported", modules=[MODULE]), saved)


def test_a_bad_allow_list_is_named(own_package):
    with pytest.raises(ValueError, match=r"policy_modules: cannot import 'my_lab_policies.missing'"):
        import_policy_modules([f"{PACKAGE}.missing"])
    with pytest.raises(ValueError, match="not a module name"):
        import_policy_modules(["my_lab_policies/tiny.py"])
    with pytest.raises(ValueError, match=r"write policy_modules=\[my_lab_policies.tiny\]"):
        import_policy_modules(MODULE)


def test_an_entry_point_of_an_installed_package_allows_its_class(own_package, tmp_path):
    import importlib

    saved = _saved(tmp_path / "policy.pt")
    dist = own_package / "my_lab-0.1.dist-info"  # what `pip install` of a package declaring the entry point writes
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: my-lab\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text(f"[{POLICY_ENTRY_POINTS}]\ntiny = {CLASS}\n")
    importlib.invalidate_caches()
    # another class of that module is not declared: refused, nothing imported
    blob = torch.load(tmp_path / "policy.pt", weights_only=True)
    torch.save({**blob, "class": f"{MODULE}:Other"}, tmp_path / "other.pt")
    with pytest.raises(CheckpointError, match="outside this project's packages"):
        Policy.load(tmp_path / "other.pt")
    assert MODULE not in sys.modules
    assert _same(Policy.load(tmp_path / "policy.pt"), saved)


def test_the_clipped_gaussian_log_probability_and_entropy():
    """The log-probability both the built-in VLA and the Gaussian base report, against scipy: the density inside
    (-1, 1), the tail mass on each bound; the entropy of the unclipped Gaussian over K x 7 dimensions."""
    from scipy import stats

    torch.manual_seed(0)
    mean = torch.tanh(torch.randn(5, 4, 7) * 2)
    log_std = torch.randn(4, 7) * 0.5 - 1.0
    actions = (mean + log_std.exp() * torch.randn(5, 4, 7) * 3).clamp(-1, 1)  # many on the bounds
    assert (actions.abs() == 1).any()
    m, sd, a = mean.double().numpy(), log_std.exp().double().numpy(), actions.double().numpy()
    want = np.where(a >= 1, stats.norm.logsf(1, m, sd), np.where(a <= -1, stats.norm.logcdf(-1, m, sd),
                                                                 stats.norm.logpdf(a, m, sd)))
    got = clipped_gaussian_log_prob(mean, log_std, actions, reduce=False)
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(clipped_gaussian_log_prob(mean, log_std, actions), got.sum(dim=(1, 2)))
    entropy = float(stats.norm.entropy(0, sd).sum())
    np.testing.assert_allclose(gaussian_entropy(log_std, 5, 4).numpy(), [entropy] * 5, rtol=1e-5)
    # a [7] log_std broadcasts as a [K, 7] one
    torch.testing.assert_close(gaussian_entropy(log_std[0], 5, 4), gaussian_entropy(log_std[0].expand(4, 7), 5, 4))


def test_sample_and_evaluate_agree_and_noise_log_std_is_the_parameter_rl_sets(own_package):
    policy = _tiny(views=["agentview", "wrist"])
    assert isinstance(policy, GaussianChunkPolicy) and isinstance(policy.config, GaussianChunkConfig)
    obs = make_obs(batch=3)
    actions, log_prob, value = policy.sample(obs, torch.Generator().manual_seed(0))
    lp, entropy, v = policy.evaluate(obs, actions)
    torch.testing.assert_close(lp, log_prob)
    torch.testing.assert_close(v, value)
    assert lp.requires_grad and entropy.shape == (3,)
    torch.testing.assert_close(policy.evaluate(obs, actions, per_dim=True)[0].sum(dim=(1, 2)), lp)
    torch.testing.assert_close(policy.predict_action_chunk(obs), policy.mean_and_value(obs)[0].detach())
    assert policy.noise_log_std() is policy.log_std
    assert VLAPolicy(tiny_config()).noise_log_std() is not None
    assert RandomPolicy().noise_log_std() is None


def test_an_own_policy_trains_in_imagination_and_its_result_loads_with_the_allow_list(
        square_setup, own_package, tmp_path):
    data, wm, _, proprio = square_setup
    start = _saved(tmp_path / "start.pt", image_size=SIZE)
    cfg = replace(_config((data, wm, tmp_path / "start.pt", proprio), tmp_path / "run", iterations=2),
                  num_groups=2, group_size=4, policy_modules=[MODULE], checkpoint_every=1, videos=0)
    result = train_rl(cfg, progress=False)
    assert result["iterations"] == 2 and result["real_env_steps"] == 0
    # RL set the exploration noise through noise_log_std (cfg.init_log_std = -1)
    assert [row["std"] for row in result["history"]] == pytest.approx([math.exp(-1.0)] * 2, rel=0.1)
    _forget_package()
    with pytest.raises(CheckpointError, match="policy_modules"):
        Policy.load(result["policy_path"])
    trained = Policy.load(result["policy_path"], modules=[MODULE])
    assert type(trained).__name__ == "TinyPolicy"
    before, after = start.state_dict(), trained.state_dict()
    moved = [k for k in before if k != "log_std" and not torch.equal(before[k], after[k])]
    assert "mean_head.weight" in moved, moved
    obs = {"image": np.zeros((2, 1, SIZE, SIZE, 3), np.uint8), "state": np.zeros((2, 8), np.float32),
           "instruction": ["move the square"] * 2}
    assert trained.predict_action_chunk(obs).shape == (2, 4, 7)
