"""average_policies: the mean of the weights, the same class and config, and a refusal of different networks."""
from __future__ import annotations

import pytest
import torch

from policies.base import Policy
from policies.soup import average_policies, main
from policies.vla import VLAPolicy
from tests.policies.conftest import make_obs, tiny_config


def _policies(n: int) -> list[VLAPolicy]:
    out = []
    for seed in range(n):
        torch.manual_seed(seed)
        out.append(VLAPolicy(tiny_config()).eval())
    return out


def test_weights_are_the_mean(tmp_path):
    ps = _policies(3)
    paths = [tmp_path / f"p{i}.pt" for i in range(3)]
    for p, path in zip(ps, paths):
        p.save(path)
    main(["--out", str(tmp_path / "soup.pt"), *map(str, paths)])
    soup = Policy.load(tmp_path / "soup.pt")
    assert isinstance(soup, VLAPolicy)
    checked = 0
    for key, value in soup.state_dict().items():
        if torch.is_tensor(value) and value.is_floating_point():
            torch.testing.assert_close(value, sum(p.state_dict()[key] for p in ps) / 3)
            checked += 1
    assert checked > 4
    obs = make_obs(batch=2)
    assert not torch.allclose(soup.predict_action_chunk(obs), ps[0].predict_action_chunk(obs))


def test_one_policy_is_itself_and_different_networks_are_refused():
    (p,) = _policies(1)
    obs = make_obs(batch=2)
    torch.testing.assert_close(average_policies([p]).predict_action_chunk(obs), p.predict_action_chunk(obs))
    with pytest.raises(ValueError, match="another config"):
        average_policies([p, VLAPolicy(tiny_config(hidden=32))])
    with pytest.raises(ValueError, match="at least one"):
        average_policies([])
