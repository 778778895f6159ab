"""TaskSwitchPolicy: each env's rows come from the policy its instruction is routed to (policy 0 otherwise); it
saves, loads, and refuses routes and sub-policies it cannot honour."""
from __future__ import annotations

import pytest
import torch

from policies.base import Policy
from policies.task_switch import TaskSwitchConfig, TaskSwitchPolicy
from policies.vla import VLAPolicy
from tests.policies.conftest import INSTRUCTIONS, make_obs, tiny_config, two_policies


def test_rows_follow_the_instruction():
    start, tuned = two_policies()
    switch = TaskSwitchPolicy.from_policies([start, tuned], {INSTRUCTIONS[1]: 1})
    obs = make_obs(batch=4)  # instructions 0, 1, 0, 1
    assert switch.route(obs).tolist() == [0, 1, 0, 1]
    out, a, b = switch.predict_action_chunk(obs), start.predict_action_chunk(obs), tuned.predict_action_chunk(obs)
    assert not torch.allclose(a, b)  # two different networks, or the check below proves nothing
    torch.testing.assert_close(out[[0, 2]], a[[0, 2]])
    torch.testing.assert_close(out[[1, 3]], b[[1, 3]])
    actions = torch.rand(4, switch.chunk_len, 7) * 2 - 1
    lp, ent, value = switch.evaluate(obs, actions)
    assert lp.shape == ent.shape == value.shape == (4,)
    torch.testing.assert_close(lp[[0, 2]], start.evaluate(obs, actions)[0][[0, 2]])
    torch.testing.assert_close(lp[[1, 3]], tuned.evaluate(obs, actions)[0][[1, 3]])
    sampled, log_prob, _ = switch.sample(obs, torch.Generator().manual_seed(0))
    assert sampled.shape == (4, switch.chunk_len, 7) and log_prob.shape == (4,)


def test_an_unrouted_instruction_goes_to_the_default():
    start, tuned = two_policies()
    switch = TaskSwitchPolicy.from_policies([start, tuned], {"an instruction no env has": 1})
    obs = make_obs(batch=3)
    assert switch.route(obs).tolist() == [0, 0, 0]
    torch.testing.assert_close(switch.predict_action_chunk(obs), start.predict_action_chunk(obs))


def test_save_load_round_trip(tmp_path):
    start, tuned = two_policies()
    switch = TaskSwitchPolicy.from_policies([start, tuned], {INSTRUCTIONS[0]: 1})
    switch.save(tmp_path / "switch.pt")
    loaded = Policy.load(tmp_path / "switch.pt")
    assert isinstance(loaded, TaskSwitchPolicy) and loaded.config.routes == {INSTRUCTIONS[0]: 1}
    obs = make_obs(batch=2)
    torch.testing.assert_close(loaded.predict_action_chunk(obs), switch.predict_action_chunk(obs))


def test_refusals():
    start, _ = two_policies()
    with pytest.raises(ValueError, match="chunk_len"):
        TaskSwitchPolicy.from_policies([start, VLAPolicy(tiny_config(chunk_len=6))], {})
    spec = TaskSwitchPolicy.from_policies([start], {}).config.policies
    with pytest.raises(ValueError, match=r"routes\['x'\]: expected an index in \[0, 1\)"):
        TaskSwitchPolicy(TaskSwitchConfig(chunk_len=start.chunk_len, policies=spec, routes={"x": 1}))
    with pytest.raises(ValueError, match="policies: expected at least one"):
        TaskSwitchPolicy(TaskSwitchConfig(chunk_len=4))


def test_the_command_routes_suite_tasks_by_their_instruction(tmp_path):
    from envs.libero_suites import get_task
    from policies.task_switch import main

    start, tuned = two_policies()
    start.save(tmp_path / "bc.pt")
    tuned.save(tmp_path / "rl.pt")
    main(["--default", str(tmp_path / "bc.pt"), "--routed", str(tmp_path / "rl.pt"), "--suite", "libero_spatial",
          "--tasks", "7", "--out", str(tmp_path / "switch.pt")])
    loaded = Policy.load(tmp_path / "switch.pt")
    assert isinstance(loaded, TaskSwitchPolicy)
    assert loaded.config.routes == {get_task("libero_spatial", 7).language: 1}
