"""The exploration check before imagined RL (imagination/rl/exploration_check.py), on the square world's tiny world
model (tests/world_models/conftest.py): mean against sampled chunks from the same starts, and what train_rl records."""
import json
from dataclasses import replace

import numpy as np
import pytest
import torch

from imagination.env import ImaginationConfig, ImaginationVectorEnv
from imagination.episodes import load_start_episodes, task_keys
from imagination.keyframes import KeyframeConfig
from imagination.rl.exploration_check import ExplorationGap, exploration_gap
from imagination.rl.training import train_rl
from policies.base import Policy
from tests.imagination.rl.test_training import _config
from world_models.model import WorldModel
from world_models.proprio import ProprioModel


def _set_noise(policy: Policy, log_std: float) -> None:
    noise = policy.noise_log_std()
    assert noise is not None  # the square world's VLA samples Gaussian chunks
    with torch.no_grad():
        noise.fill_(log_std)


def _env(setup, n: int = 16) -> ImaginationVectorEnv:
    data, wm, _, proprio = setup
    return ImaginationVectorEnv(WorldModel.load(wm), ProprioModel.load(proprio),
                                load_start_episodes(str(data), ["agentview"]), n,
                                ImaginationConfig(max_steps=12, keyframes=KeyframeConfig(mode="start")))


def test_noise_too_small_to_matter_reads_as_the_mean(square_setup):
    policy = Policy.load(square_setup[2])
    policy.eval()
    _set_noise(policy, -20.0)  # std 2e-9: every sampled chunk is the mean to float precision
    gap = exploration_gap(_env(square_setup), policy, 12, seed=3)
    assert sum(gap.episodes.values()) == 12
    assert gap.sampled == gap.mean
    assert not gap.drops(0.0)


def test_wide_noise_changes_what_the_judge_reads(square_setup):
    """The untrained policy barely moves the square; noise of std e (2.7) pushes it about, so the sampled chunks'
    imagined success differs from the mean's on these starts: the check sees the noise, not only the policy."""
    policy = Policy.load(square_setup[2])
    policy.eval()
    env = _env(square_setup)
    quiet = [exploration_gap(env, policy, 16, seed=s) for s in range(3)]
    _set_noise(policy, 1.0)
    loud = [exploration_gap(env, policy, 16, seed=s) for s in range(3)]
    assert [g.mean for g in loud] == [g.mean for g in quiet]  # the mean chunks do not depend on the noise
    # success is a share of 16 episodes: one seed's two readings may tie by chance, three seeds' all tying would not
    assert any(g.sampled != g.mean for g in loud), [(g.mean, g.sampled) for g in loud]


def test_drops_and_the_warning_name_the_tasks_past_the_tolerance():
    gap = ExplorationGap(episodes={"task5": 10, "task6": 10, "task7": 10},
                         mean={"task5": 0.7, "task6": 1.0, "task7": 0.9},
                         sampled={"task5": 0.8, "task6": 0.0, "task7": 0.6})
    assert gap.drops(0.25) == pytest.approx({"task6": 1.0, "task7": 0.3})
    assert gap.drops(0.5) == pytest.approx({"task6": 1.0})
    text = gap.report(0.5)
    assert "task6 (-1.00)" in text and "task7 (-" not in text and "WARNING" in text
    assert "WARNING" not in gap.report(1.0)
    assert gap.as_dict()["task6"] == {"episodes": 10, "mean": 1.0, "sampled": 0.0}
    assert not gap.under_reads(0.0) and "; real" not in text  # no recorded outcomes: nothing set against reality


def test_under_reads_name_the_tasks_the_judge_reads_below_reality():
    gap = ExplorationGap(episodes={"task5": 10, "task6": 10, "task8": 10},
                         mean={"task5": 0.9, "task6": 0.06, "task8": 0.5},
                         sampled={"task5": 0.9, "task6": 0.06, "task8": 0.5},
                         recorded={"task5": 0.5, "task6": 0.9, "task8": 0.8})
    assert gap.under_reads(0.25) == pytest.approx({"task6": 0.84, "task8": 0.3})
    assert gap.under_reads(0.5) == pytest.approx({"task6": 0.84})  # task5's over-read is never warned about
    text = gap.report(0.5)
    assert "task6: 0.06 -> 0.06 (10 starts; real 0.90)" in text
    assert "below the recordings' real success on task6 (-0.84)" in text and "task8 (-" not in text
    assert gap.as_dict()["task5"] == {"episodes": 10, "mean": 0.9, "sampled": 0.9, "recorded": 0.5}


def test_recorded_is_the_share_of_the_starts_recordings_that_succeeded(square_setup):
    """Every start is frame 0 of one recording: `recorded` is the mean of those recordings' own success flags, per
    task, and is left out when one start episode records no outcome."""
    env = _env(square_setup)
    policy = Policy.load(square_setup[2])
    policy.eval()
    gap = exploration_gap(env, policy, 16, seed=1)
    starts = env.keyframes.sample(16, np.random.default_rng(1))  # the check draws its starts so
    keys, names = task_keys(env.episodes)
    for t, name in names.items():
        mine = [bool(env.episodes[kf.episode].success) for kf in starts if keys[kf.episode] == t]
        if mine:
            assert gap.recorded[name] == pytest.approx(np.mean(mine))
    assert set(gap.recorded) == set(gap.mean)
    env.episodes[0] = replace(env.episodes[0], success=None)
    assert exploration_gap(env, policy, 16, seed=1).recorded == {}


def test_num_starts_is_checked(square_setup):
    with pytest.raises(ValueError, match="num_starts: expected 1 to 16"):
        exploration_gap(_env(square_setup), Policy.load(square_setup[2]), 17, seed=0)


def test_train_rl_records_the_check_before_the_first_iteration(square_setup, tmp_path, capsys):
    cfg = _config(square_setup, tmp_path / "on", iterations=1, exploration_check=0.2)
    result = train_rl(cfg, progress=False)
    written = json.loads((tmp_path / "on" / "exploration_check.json").read_text())
    assert result["exploration_check"] == written
    assert written["tolerance"] == 0.2
    tasks = [k for k in written if k.startswith("task")]
    assert tasks and sum(written[k]["episodes"] for k in tasks) == 16  # half of the run's 4 x 8 envs
    expected = [k for k in tasks if written[k]["mean"] - written[k]["sampled"] > 0.2]
    assert written["warned_tasks"] == expected
    assert all("recorded" in written[k] for k in tasks)  # the square world's episodes record their outcome
    assert written["under_read_tasks"] == [k for k in tasks if written[k]["recorded"] - written[k]["mean"] > 0.2]
    assert "exploration check (imagined success of the start" in capsys.readouterr().out
    # started over in the same folder with the check off: the earlier run's check is not reported as this run's
    off = train_rl(replace(cfg, resume=False, exploration_check=0.0), progress=False)
    assert "exploration_check" not in off and not (tmp_path / "on" / "exploration_check.json").exists()
    with pytest.raises(ValueError, match=r"exploration_check: expected a share of episodes in \[0, 1\]"):
        train_rl(replace(cfg, out_dir=str(tmp_path / "bad"), exploration_check=1.5), progress=False)
    assert np.isfinite(result["first"]["imagined_success_rate"])
