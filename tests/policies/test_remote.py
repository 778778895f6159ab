"""A served policy evaluated like a checkpoint (policies/remote.py): the same actions and the same real
LIBERO outcomes as the policy in process."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from imagination.eval.jobs import EvalConfig
from policies.remote import RemotePolicy, RemotePolicyConfig, is_remote
from policies.serving import PolicyServer, ServeConfig
from policies.vla import VLAPolicy
from tests.policies.conftest import make_obs, tiny_config


@pytest.fixture()
def served():
    torch.manual_seed(0)
    policy = VLAPolicy(tiny_config(views=["agentview", "wrist"])).eval()
    with PolicyServer(policy, ServeConfig(port=0, max_batch=4)) as server:
        yield policy, server


def test_remote_actions_match_the_policy_in_process(served):
    policy, server = served
    remote = RemotePolicy(RemotePolicyConfig(url=server.url))
    try:
        # the server's metadata sets what the evaluation renders
        assert remote.chunk_len == 4 and remote.config.views == ["agentview", "wrist"]
        assert remote.config.image_size == 16
        obs = make_obs(batch=10)  # above the server's max_batch of 4: sent as 4 + 4 + 2
        np.testing.assert_allclose(remote.predict_action_chunk(obs).numpy(),
                                   policy.predict_action_chunk(obs).numpy(), atol=1e-6)
        remote.reset()
        assert remote.select_action(make_obs(batch=2)).shape == (2, 7)
        with pytest.raises(RuntimeError, match="cannot be trained with imagined RL"):
            remote.sample(obs)
        with pytest.raises(RuntimeError, match="no weights"):
            remote.save("x.pt")
    finally:
        remote.close()


def test_checkpoint_argument_names_a_server_or_fails_clearly(tmp_path):
    from imagination.eval.evaluate import load_policy

    assert is_remote("ws://10.0.0.2:8765") and is_remote("wss://h:1") and not is_remote("outputs/policy.pt")
    with pytest.raises(ValueError, match="url"):
        RemotePolicy(RemotePolicyConfig(url="http://127.0.0.1:1"))
    with pytest.raises(ValueError, match="deterministic"):
        load_policy(EvalConfig(checkpoint="ws://127.0.0.1:1", deterministic=False))
    with pytest.raises(Exception, match="cannot connect"):
        load_policy(EvalConfig(checkpoint="ws://127.0.0.1:1"))  # nothing listens on port 1
    with pytest.raises(FileNotFoundError, match="ws://host:port"):
        load_policy(EvalConfig(checkpoint=str(tmp_path / "missing.pt")))


@pytest.mark.libero
def test_real_libero_outcomes_equal_for_served_and_local(served, tmp_path):
    from imagination.eval.evaluate import evaluate

    policy, server = served
    def cfg(checkpoint: str, name: str) -> EvalConfig:
        return EvalConfig(checkpoint=checkpoint, env="libero_spatial", tasks=[0], episodes_per_task=2, num_envs=1,
                          max_steps=24, videos=0, fast_render=True, out_dir=str(tmp_path / name))

    local = evaluate(cfg("in-process", "local"), policy=policy, progress=False)
    remote = evaluate(cfg(server.url, "remote"), progress=False)
    keys = ("init_state_id", "seed", "steps", "success", "object_lift_m", "target_distance_m", "grasp_distance_m")
    assert [[e[k] for k in keys] for e in remote["episodes"]] == [[e[k] for k in keys] for e in local["episodes"]]
    assert remote["policy"] == "RemotePolicy" and remote["checkpoint"] == server.url
