"""PhaseSwitchPolicy: each env's rows come from the policy of its gripper phase; it saves, loads and refuses
sub-policies that read other inputs."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from policies.base import Policy
from policies.phase_switch import PhaseSwitchConfig, PhaseSwitchPolicy, main
from policies.vla import VLAPolicy
from tests.policies.conftest import make_obs, tiny_config, two_policies


def _obs_with_gaps(gaps: list[float]) -> dict:
    obs = make_obs(batch=len(gaps))
    obs["state"][:, 6] = np.array(gaps) / 2
    obs["state"][:, 7] = -np.array(gaps) / 2
    return obs


def test_rows_follow_the_gripper_phase():
    approach, hold = two_policies()
    switch = PhaseSwitchPolicy.from_policies(approach, hold, open_gap=0.06)
    obs = _obs_with_gaps([0.078, 0.01, 0.07, 0.0])  # open, closed, open, closed
    assert switch.holding(obs).tolist() == [False, True, False, True]
    out, a, h = switch.predict_action_chunk(obs), approach.predict_action_chunk(obs), hold.predict_action_chunk(obs)
    assert not torch.allclose(a, h)  # two different networks, or the check below proves nothing
    torch.testing.assert_close(out[[0, 2]], a[[0, 2]])
    torch.testing.assert_close(out[[1, 3]], h[[1, 3]])
    actions = torch.rand(4, switch.chunk_len, 7) * 2 - 1
    lp = switch.evaluate(obs, actions)[0]
    torch.testing.assert_close(lp[[0, 2]], approach.evaluate(obs, actions)[0][[0, 2]])
    torch.testing.assert_close(lp[[1, 3]], hold.evaluate(obs, actions)[0][[1, 3]])


def test_save_load_round_trip(tmp_path):
    approach, hold = two_policies()
    a_path, h_path, out = tmp_path / "a.pt", tmp_path / "h.pt", tmp_path / "switch.pt"
    approach.save(a_path)
    hold.save(h_path)
    main(["--approach", str(a_path), "--hold", str(h_path), "--out", str(out), "--open-gap", "0.05"])
    loaded = Policy.load(out)
    assert isinstance(loaded, PhaseSwitchPolicy) and loaded.config.open_gap == 0.05
    assert list(loaded.config.views) == list(approach.config.views)
    assert loaded.config.image_size == approach.config.image_size
    obs = _obs_with_gaps([0.078, 0.0])
    ref = PhaseSwitchPolicy.from_policies(approach, hold, open_gap=0.05)
    torch.testing.assert_close(loaded.predict_action_chunk(obs), ref.predict_action_chunk(obs))


def test_refuses_sub_policies_that_differ():
    approach, _ = two_policies()
    other = VLAPolicy(tiny_config(chunk_len=6))
    with pytest.raises(ValueError, match="chunk_len"):
        PhaseSwitchPolicy.from_policies(approach, other)
    with pytest.raises(ValueError, match="PhaseSwitchConfig.hold: expected"):
        PhaseSwitchPolicy(PhaseSwitchConfig(chunk_len=4, approach=PhaseSwitchPolicy.from_policies(
            approach, approach).config.approach, hold={"config": {}}))
