"""A LeRobot policy (ACT, made and saved by lerobot itself) served by scripts/serve_lerobot_policy.py in the
lerobot venv and evaluated here as `checkpoint=ws://...` (policies/remote.py). Skipped, with the command that
builds the venv, when it is missing; CI builds it."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from imagination.eval.jobs import EvalConfig
from policies.remote import RemotePolicy, RemotePolicyConfig
from tests.interop import REPO, require_venv, run_in_venv

# An untrained ACT policy small enough for a CPU test (no pretrained backbone: nothing is downloaded), saved
# with its normalizing processors, the way lerobot's training saves one; then reloaded from the folder with
# lerobot's own API and asked for its actions on one observation. argv: folder.
MAKE_ACT = """
import json, sys
import torch
from lerobot.configs.types import FeatureType, PolicyFeature
from lerobot.policies.act.configuration_act import ACTConfig
from lerobot.policies.act.modeling_act import ACTPolicy
from lerobot.policies.factory import make_pre_post_processors

torch.manual_seed(0)
img = lambda: PolicyFeature(type=FeatureType.VISUAL, shape=(3, 32, 32))
cams = ("observation.images.image", "observation.images.image2")
cfg = ACTConfig(input_features={**{c: img() for c in cams},
                                "observation.state": PolicyFeature(type=FeatureType.STATE, shape=(8,))},
                output_features={"action": PolicyFeature(type=FeatureType.ACTION, shape=(7,))},
                chunk_size=4, n_action_steps=4, dim_model=32, n_heads=2, dim_feedforward=64, n_encoder_layers=1,
                n_decoder_layers=1, use_vae=False, pretrained_backbone_weights=None, device="cpu")
stats = {"observation.state": {"mean": torch.zeros(8), "std": torch.ones(8)},
         "action": {"mean": torch.zeros(7), "std": torch.full((7,), 0.5)},
         **{c: {"mean": torch.full((3, 1, 1), 0.5), "std": torch.full((3, 1, 1), 0.25)} for c in cams}}
policy = ACTPolicy(cfg)
pre, post = make_pre_post_processors(cfg, dataset_stats=stats)
for part in (policy, pre, post):
    part.save_pretrained(sys.argv[1])

# then lerobot's own API on one observation, as a user would call it: the actions the server must return
import numpy as np
from lerobot.configs.policies import PreTrainedConfig
from lerobot.policies.factory import get_policy_class

folder = sys.argv[1]
cfg = PreTrainedConfig.from_pretrained(folder)
policy = get_policy_class(cfg.type).from_pretrained(folder, config=cfg).eval()
pre, post = make_pre_post_processors(cfg, pretrained_path=folder)
img = (np.arange(2 * 32 * 32 * 3) % 251).astype(np.float32).reshape(2, 32, 32, 3) / 255.0
batch = {"observation.images.image": torch.from_numpy(img[0]).permute(2, 0, 1)[None],
         "observation.images.image2": torch.from_numpy(img[1]).permute(2, 0, 1)[None],
         "observation.state": torch.linspace(-0.5, 0.5, 8)[None], "task": ["put the bowl on the plate"]}
batch = pre(batch)
policy.reset()
with torch.no_grad():
    acts = [post(policy.select_action(batch))[0].tolist() for _ in range(4)]
print(json.dumps({"actions": acts}))
"""


@pytest.fixture(scope="module")
def act_server(tmp_path_factory):
    python = require_venv("lerobot")
    folder = tmp_path_factory.mktemp("act")
    want = run_in_venv("lerobot", MAKE_ACT, [str(folder)], timeout=300)["actions"]
    env = {**os.environ, "PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1", "NO_PROXY": "127.0.0.1,localhost"}
    proc = subprocess.Popen([str(python), "scripts/serve_lerobot_policy.py", f"policy={folder}", "port=0"],
                            cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = "-"
        while line and not line.startswith("{"):  # lerobot prints its own lines first
            line = proc.stdout.readline() if proc.stdout else ""
        if not line:
            raise AssertionError(f"the server did not start:\n{proc.stderr.read() if proc.stderr else ''}")
        yield want, json.loads(line)
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_served_act_returns_lerobots_own_actions(act_server):
    want_list, info = act_server
    assert info["policy"] == "lerobot:act" and info["chunk_len"] == 4
    want = np.asarray(want_list, np.float32)
    remote = RemotePolicy(RemotePolicyConfig(url=info["url"]))
    try:
        assert remote.chunk_len == 4 and remote.config.image_size == 32
        img = (np.arange(2 * 32 * 32 * 3) % 251).astype(np.uint8).reshape(2, 32, 32, 3)
        obs = {"image": img[None], "state": np.linspace(-0.5, 0.5, 8, dtype=np.float32)[None],
               "instruction": ["put the bowl on the plate"]}
        got = remote.predict_action_chunk(obs)[0].numpy()
        np.testing.assert_allclose(got, np.clip(want, -1, 1), atol=2e-3)  # 8-bit pixels vs float ones
        # the pixels reach the policy (not the views' order: ACT's encoder treats its cameras' tokens as a set)
        other = remote.predict_action_chunk({**obs, "image": 255 - img[None]})[0].numpy()
        assert np.abs(other - got).max() > 1e-3
    finally:
        remote.close()


@pytest.mark.libero
def test_served_act_runs_in_real_libero(act_server, tmp_path):
    from imagination.eval.evaluate import evaluate

    _, info = act_server
    result = evaluate(EvalConfig(checkpoint=info["url"], env="libero_spatial", tasks=[0], episodes_per_task=1,
                                 num_envs=1, max_steps=16, videos=0, fast_render=True, out_dir=str(tmp_path)),
                      progress=False)
    assert result["policy"] == "RemotePolicy" and [e["steps"] for e in result["episodes"]] == [16]


def test_non_loopback_host_and_missing_policy_are_refused():
    for args, field in ((["policy=x", "host=0.0.0.0"], "host"), ([], "policy")):
        proc = subprocess.run([sys.executable, "scripts/serve_lerobot_policy.py", *args], cwd=REPO,
                              capture_output=True, text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(REPO)})
        assert proc.returncode == 2 and f"{field}:" in proc.stderr, proc.stderr


def test_served_act_runs_in_imagination(act_server, tmp_path):
    """The same served ACT policy in a world model: a tiny untrained one imagining its two cameras at 32 px."""
    import torch

    from imagination.eval.evaluate import evaluate
    from robot_data.dataset import DatasetConfig, Episode, EpisodeWriter
    from world_models.denoiser import DenoiserConfig
    from world_models.model import WorldModel, WorldModelConfig
    from world_models.proprio import ProprioConfig, ProprioModel

    _, info = act_server
    rng, views, T = np.random.default_rng(0), ("agentview", "wrist"), 12
    with EpisodeWriter(tmp_path / "data", DatasetConfig(views=views, image_size=(32, 32))) as w:
        w.append(Episode(frames={v: rng.integers(0, 255, (T, 32, 32, 3), dtype=np.uint8) for v in views},
                         state=rng.normal(size=(T, 8)).astype(np.float32),
                         action=rng.uniform(-1, 1, (T, 7)).astype(np.float32), reward=np.zeros(T, np.float32),
                         success=np.zeros(T, bool), instruction="put the bowl on the plate", suite="libero_spatial",
                         task_id=0, source="expert", init_state_id=0))
    torch.manual_seed(0)
    d = DenoiserConfig(image_size=32, channels=6, context_frames=2, chunk_len=4, block_out_channels=[8, 16],
                       norm_num_groups=4)
    WorldModel(WorldModelConfig(views=list(views), denoiser=d)).save(tmp_path / "wm.pt")
    ProprioModel(ProprioConfig(chunk_len=4, hidden=16, layers=1)).save(tmp_path / "proprio.pt")
    result = evaluate(EvalConfig(checkpoint=info["url"], env="imagination", world_model=str(tmp_path / "wm.pt"),
                                 start_data=str(tmp_path / "data"), proprio=str(tmp_path / "proprio.pt"), tasks=[0],
                                 episodes_per_task=1, num_envs=1, max_steps=8, videos=0, out_dir=str(tmp_path / "ev")),
                      progress=False)
    assert result["env"] == "imagination" and result["policy"] == "RemotePolicy"
    # an untrained success head may end the episode at any chunk: it ran, within the horizon
    assert len(result["episodes"]) == 1 and 1 <= result["episodes"][0]["steps"] <= 8
