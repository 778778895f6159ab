"""The adaptation of a policy to the world model's frames (imagination/rl/frame_adapt.py,
scripts/adapt_to_imagination.py), on the tiny square world (tests/conftest.py square_setup) with a gripper that
closes and opens in every episode."""
import json
from dataclasses import replace

import numpy as np
import pytest
import torch

from imagination.env import ImaginationConfig
from imagination.imagine import open_imagination
from imagination.rl.frame_adapt import (
    FrameAdaptConfig,
    adapt,
    imagined_pairs,
    pair_mse,
    recorded_pairs,
    release_starts,
    start_targets,
)
from policies.base import Policy
from robot_data.dataset import DatasetConfig, EpisodeWriter
from tests.world_models.conftest import SIZE, square_episode

CLOSE, RELEASE, T = 4, 22, 32


@pytest.fixture(scope="module")
def grip_data(tmp_path_factory):
    """Square episodes whose gripper closes at step CLOSE and opens at step RELEASE."""
    root = tmp_path_factory.mktemp("grip") / "data"
    rng = np.random.default_rng(1)
    with EpisodeWriter(root, DatasetConfig(views=("agentview",), image_size=(SIZE, SIZE), fps=10)) as w:
        for _ in range(4):
            ep = square_episode(rng, T)
            ep.action[:, 6] = -1.0
            ep.action[CLOSE:RELEASE, 6] = 1.0
            w.append(ep)
    return root


def _env(square_setup, data, num_envs):
    _, wm, policy_file, proprio = square_setup
    policy = Policy.load(policy_file)
    policy.eval()
    env = open_imagination(wm, str(data), proprio, num_envs=num_envs,
                           config=ImaginationConfig(max_steps=10_000, success_threshold=2.0), policy=policy)
    return env, policy


def test_pairs_start_before_each_release_and_pair_imagined_with_recorded_steps(square_setup, grip_data):
    env, policy = _env(square_setup, grip_data, num_envs=3)
    starts = release_starts(env, [8, 12], align=4)
    # 8 and 12 steps before the release at 22, rounded down to the chunk grid: steps 12 and 8 of every episode
    assert sorted((kf.episode, kf.t) for kf in starts) == sorted((e, t) for e in range(4) for t in (12, 8))
    imagined, window = imagined_pairs(env, starts, chunks=2)
    assert len(imagined) == len(window) == 2 * len(starts)  # two chunks of every start (3 envs: 3 batches)
    assert imagined.image.shape == window.image.shape == (len(imagined), 1, SIZE, SIZE, 3)
    # the recorded side is the recording itself at each chunk's first step, with its recorded chunk as the target
    ep = env.episodes[starts[0].episode]
    assert np.array_equal(window.image[0], env.policy_views(ep.frames[starts[0].t][None])[0])
    assert np.allclose(window.target[0], ep.action[starts[0].t: starts[0].t + env.K])
    assert np.allclose(imagined.target, window.target)
    # the first chunk starts on the recorded frame; the second reads what the world model imagined
    second = np.arange(1, len(imagined), 2)
    assert np.abs(imagined.image[second].astype(int) - window.image[second].astype(int)).mean() > 0


def test_adaptation_fits_the_imagined_steps_to_the_policys_own_recorded_chunks(square_setup, grip_data):
    env, policy = _env(square_setup, grip_data, num_envs=4)
    imagined, window = imagined_pairs(env, release_starts(env, [12], align=4), chunks=3)
    recorded = recorded_pairs(env)
    assert len(recorded) == 4 * T
    start_targets(policy, imagined, window, recorded)
    # the targets are the policy's own chunks: it fits its recorded steps exactly before it moves
    assert pair_mse(policy, recorded) == pytest.approx(0.0, abs=1e-12)
    before = pair_mse(policy, imagined)
    torch.manual_seed(0)
    logs = adapt(policy, imagined, recorded, FrameAdaptConfig(steps=60, lr=3e-3, batch_size=8, real_weight=1.0))
    assert logs[-1]["step"] == 59
    assert pair_mse(policy, imagined) < before


def test_the_script_writes_the_adapted_policy_and_its_figures(square_setup, grip_data, tmp_path):
    from scripts.adapt_to_imagination import main

    _, wm, policy_file, proprio = square_setup
    cfg = FrameAdaptConfig(policy=str(policy_file), world_model=str(wm), proprio=str(proprio), data=str(grip_data),
                           out_dir=str(tmp_path / "adapted"), leads=[12], imagined_steps=8, steps=5, batch_size=4,
                           num_threads=1)
    out = main(cfg)
    saved = json.loads((tmp_path / "adapted" / "adapt.json").read_text())
    assert saved["pairs"] == out["pairs"] == 4 * 2 and saved["starts"] == 4
    assert saved["before"]["recorded_mse"] == pytest.approx(0.0, abs=1e-12)
    Policy.load(out["policy_path"])  # a policy file RL can start from


def test_bad_settings_name_the_field(square_setup, grip_data, tmp_path):
    from scripts.adapt_to_imagination import main

    with pytest.raises(ValueError, match="leads"):
        FrameAdaptConfig(policy="p", world_model="w", data="d", out_dir="o", leads=[0]).validate()
    with pytest.raises(ValueError, match="target"):
        FrameAdaptConfig(policy="p", world_model="w", data="d", out_dir="o", target="demos").validate()
    _, wm, policy_file, proprio = square_setup
    with pytest.raises(FileNotFoundError, match="data"):
        main(FrameAdaptConfig(policy=str(policy_file), world_model=str(wm), proprio=str(proprio),
                              data=str(tmp_path / "none"), out_dir=str(tmp_path / "o")))
    with pytest.raises(ValueError, match="data"):  # no episode releases 40 steps after its close
        main(FrameAdaptConfig(policy=str(policy_file), world_model=str(wm), proprio=str(proprio),
                              data=str(grip_data), out_dir=str(tmp_path / "o"), leads=[40], num_threads=1))


def _adapting_rl(square_setup, grip_data, out_dir, adapt_dir: str = ""):
    """A one-iteration GRPO run on the square world that adapts its start first (5 steps on grip_data)."""
    from imagination.keyframes import KeyframeConfig
    from imagination.rl.algo import RLConfig
    from imagination.rl.training import ImagineRLConfig

    data, wm, policy_file, proprio = square_setup
    return ImagineRLConfig(
        policy=str(policy_file), world_model=str(wm), start_data=str(data), proprio=str(proprio), sources=[],
        out_dir=str(out_dir), iterations=1, num_groups=2, group_size=2, num_threads=1, videos=0,
        exploration="uniform", bc_coef=0.0, imagination=ImaginationConfig(max_steps=8, keyframes=KeyframeConfig(
            mode="start")), rl=RLConfig(algo="grpo", lr=1e-3, kl_coef=0.0, epochs=1, minibatch_size=4),
        adapt=FrameAdaptConfig(data=str(grip_data), leads=[12], imagined_steps=8, steps=5, batch_size=4,
                               out_dir=adapt_dir))


def test_an_rl_run_that_adapts_starts_from_the_adapted_policy_and_adapts_once(square_setup, grip_data, tmp_path,
                                                                                capsys):
    from imagination.rl.training import train_rl

    policy_file = square_setup[2]
    cfg = _adapting_rl(square_setup, grip_data, tmp_path / "rl")
    result = train_rl(cfg)
    adapted = tmp_path / "rl" / "adapt" / "policy.pt"
    assert result["start_policy"] == str(adapted)
    saved = json.loads((tmp_path / "rl" / "adapt" / "adapt.json").read_text())
    assert saved["config"]["policy"] == str(policy_file) and saved["config"]["steps"] == 5
    assert saved["config"]["device"] == cfg.imagination.device  # adapted where the run imagines
    start, moved = Policy.load(policy_file).state_dict(), Policy.load(adapted).state_dict()
    assert any(not torch.equal(start[k], moved[k]) for k in start if isinstance(start[k], torch.Tensor))
    written = adapted.stat().st_mtime_ns
    capsys.readouterr()
    again = train_rl(replace(cfg, iterations=2))  # resumed: the adaptation is reused, not run again
    assert again["start_policy"] == str(adapted) and adapted.stat().st_mtime_ns == written
    assert "[adapt] reusing" in capsys.readouterr().out
    # another adaptation setting is another adapted start
    third = train_rl(replace(cfg, out_dir=str(tmp_path / "rl2"), adapt=replace(cfg.adapt, steps=0)))
    assert third["start_policy"] == str(policy_file) and not (tmp_path / "rl2" / "adapt").exists()


def test_seeds_given_one_adapt_folder_share_one_adaptation(square_setup, grip_data, tmp_path, capsys):
    """Two RL seeds with the same adapt.out_dir (bench/rl_gain.py gives a recipe's seeds one) adapt once, whatever
    threads or device each runs with; a changed adaptation setting in that folder adapts again."""
    from imagination.rl.training import train_rl

    shared = tmp_path / "adapt"
    cfg = _adapting_rl(square_setup, grip_data, tmp_path / "s0", adapt_dir=str(shared))
    first = train_rl(cfg)
    assert first["start_policy"] == str(shared / "policy.pt") and not (tmp_path / "s0" / "adapt").exists()
    written = (shared / "policy.pt").stat().st_mtime_ns
    capsys.readouterr()
    second = train_rl(replace(cfg, seed=1, out_dir=str(tmp_path / "s1"), num_threads=2))
    assert second["start_policy"] == first["start_policy"]
    assert (shared / "policy.pt").stat().st_mtime_ns == written and "[adapt] reusing" in capsys.readouterr().out
    made = json.loads((shared / "adapt.json").read_text())  # as if made on a GPU: still this run's adaptation
    made["config"]["device"] = "cuda"
    del made["config"]["action_guidance"]  # and written before the field existed: made without guidance
    (shared / "adapt.json").write_text(json.dumps(made))
    train_rl(replace(cfg, seed=2, out_dir=str(tmp_path / "s3")))
    assert (shared / "policy.pt").stat().st_mtime_ns == written and "[adapt] reusing" in capsys.readouterr().out
    # the run's action guidance is the adaptation's: another guidance, another adaptation
    guided = replace(cfg, out_dir=str(tmp_path / "s4"), imagination=replace(cfg.imagination, action_guidance=1.0))
    train_rl(guided)
    assert json.loads((shared / "adapt.json").read_text())["config"]["action_guidance"] == 1.0
    train_rl(replace(cfg, out_dir=str(tmp_path / "s2"), adapt=replace(cfg.adapt, steps=6)))
    assert json.loads((shared / "adapt.json").read_text())["config"]["steps"] == 6  # adapted again
