"""A dataset whose cameras and state go by names of its own (not ours, not LeRobot's LIBERO ones) trains the
world model and BC and starts imagined RL once the command line names them: clips.features / features /
imagination.features, an robot_data.dataset.ReaderConfig each (infra.cli parses them like any nested config)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from infra.cli import load_config
from tests.robot_data.lerobot_layout import write_lerobot_dataset
from tests.robot_data.test_dataset import make_episode

CAMERAS = {"agentview": "observation.images.cam_high", "wrist": "observation.images.cam_left_wrist"}
MAPPING = "{agentview: observation.images.cam_high, wrist: observation.images.cam_left_wrist}"
STATE = "observation.joint_positions"


@pytest.fixture(scope="module")
def odd_keys(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list]:
    rng = np.random.default_rng(0)
    episodes = [make_episode(rng, T=T, noise=False, instruction=f"task {T % 2}") for T in (12, 9, 15, 10)]
    root = tmp_path_factory.mktemp("odd") / "aloha_like"
    write_lerobot_dataset(root, episodes, per_file=2, cameras=CAMERAS, state_key=STATE)
    return root, episodes


def test_odd_keys_train_and_start_through_the_configured_mapping(odd_keys, tmp_path: Path) -> None:
    from imagination.imagine import _fit_arrays
    from imagination.rl.run_envs import load_rl_env
    from imagination.rl.training import ImagineRLConfig
    from policies.bc import BCConfig, train_bc_on_data
    from robot_data.dataset import EpisodeDataset
    from tests.policies.conftest import tiny_config
    from tests.world_models.conftest import tiny_model_config
    from world_models.model import WorldModel
    from world_models.proprio import ProprioConfig, fit_proprio
    from world_models.training import Trainer, TrainWorldModelConfig

    root, episodes = odd_keys
    torch.set_num_threads(1)
    with pytest.raises(ValueError, match="no feature 'observation.state'"):
        EpisodeDataset(root)  # automatic mapping: these keys need naming

    # world model: clips.features from the command line
    wm_cfg = load_config(TrainWorldModelConfig, overrides=[
        f"clips.data_dir={root}", f"clips.features.cameras={MAPPING}", f"clips.features.state={STATE}",
        "clips.views=[agentview]", "clips.context_frames=2", "clips.chunk_len=4", f"out_dir={tmp_path / 'wm'}",
        "steps=2", "batch_size=4", "sample_every=0", "num_threads=1", "augment.enabled=false",
        "bootstrap.enabled=false"])
    assert wm_cfg.clips.features.cameras == CAMERAS and wm_cfg.clips.features.state == STATE
    wm_cfg.model = tiny_model_config(size=32)
    trainer = Trainer(wm_cfg)
    assert len(trainer.train_episodes) + len(trainer.held_out) == 4
    assert np.isfinite(trainer.step()["denoise"])
    trainer.unwrapped().eval().save(tmp_path / "wm.pt")

    # BC: features (and cameras.agentview=... one key at a time works too)
    bc_cfg = load_config(BCConfig, overrides=[
        f"data_dir={root}", "features.cameras.agentview=observation.images.cam_high", f"features.state={STATE}",
        f"out_dir={tmp_path / 'bc'}", "steps=2", "batch_size=4", "checkpoint_every=1000", "log_every=1"])
    bc_cfg.policy = tiny_config(views=["agentview"])
    result = train_bc_on_data(bc_cfg)
    assert result["steps"] == 2 and np.isfinite(result["final_loss"])

    # imagined RL: imagination.features names how start_data is read
    states = [e.state for e in episodes]
    proprio, _ = fit_proprio(states, [e.action for e in episodes],
                             ProprioConfig(chunk_len=4, hidden=16, layers=1, steps=5))
    proprio.save(tmp_path / "proprio.pt")
    rl_cfg = load_config(ImagineRLConfig, overrides=[
        f"start_data={root}", f"world_model={tmp_path / 'wm.pt'}", f"proprio={tmp_path / 'proprio.pt'}",
        f"imagination.features.cameras={MAPPING}", f"imagination.features.state={STATE}",
        "num_groups=1", "group_size=2", "imagination.max_steps=8", "imagination.reward=head"])  # no labels here
    env = load_rl_env(rl_cfg, tmp_path / "rl")
    obs, _ = env.reset(seed=0)
    assert obs["image"].shape == (2, 1, 32, 32, 3) and env.wm.cfg.views == WorldModel.load(tmp_path / "wm.pt").cfg.views
    fit_states, _ = _fit_arrays(str(root), rl_cfg.imagination.features)  # a proprio fit reads the same keys
    for got, want in zip(fit_states, states):
        np.testing.assert_array_equal(got, want)
