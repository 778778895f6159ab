"""Imagined RL that stops on a held-out signal and keeps the best policy (imagination/rl/early_stop.py),
on the tiny square world of tests/imagination/rl/test_training.py."""
import json
from dataclasses import replace

import numpy as np
import pytest
import torch

from imagination.rl.early_stop import EarlyStopper, HeldoutConfig
from imagination.rl.training import train_rl
from policies.base import Policy
from tests.imagination.rl.test_training import _config
from tests.world_models.conftest import SIZE


def test_stopper_keeps_the_best_score_and_stops_after_patience_checks_without_one():
    s = EarlyStopper(patience=2)
    assert [s.observe(i, v) for i, v in [(0, 0.3), (5, 0.5), (10, 0.5), (15, 0.4)]] == [True, True, False, False]
    assert (s.best_iteration, s.best_score, s.should_stop) == (5, 0.5, True)
    s = EarlyStopper(patience=2, min_delta=0.05)
    assert [s.observe(i, v) for i, v in [(0, 0.3), (5, 0.33), (10, 0.4)]] == [True, False, True]
    assert not s.should_stop
    # a resumed run rebuilds the same state from its recorded checks
    again = EarlyStopper.replay(2, 0.05, s.scores)
    assert (again.best_iteration, again.since_best, again.scores) == (10, 0, s.scores)


def test_bad_heldout_settings_are_refused():
    with pytest.raises(ValueError, match="heldout.patience"):
        HeldoutConfig(every=1, patience=0).validate()
    with pytest.raises(ValueError, match="heldout.every"):
        HeldoutConfig(every=-1).validate()


def _same_weights(a: Policy, b: Policy) -> bool:
    """Same mean action chunk on a fixed observation (RL also sets the exploration noise, so log_std differs)."""
    obs = {"image": np.full((1, 1, SIZE, SIZE, 3), 100, np.uint8), "state": np.zeros((1, 8), np.float32),
           "instruction": ["move the square"]}
    return torch.equal(a.predict_action_chunk(obs), b.predict_action_chunk(obs))


def test_rl_that_cannot_beat_the_start_stops_early_and_returns_the_start_policy(square_setup, tmp_path):
    # threshold 0: every imagined episode succeeds at once, so no RL iterate can beat the start (and GRPO's
    # all-success groups do not move it either: this test is about stopping and resuming)
    cfg = replace(_config(square_setup, tmp_path / "run", iterations=6, checkpoint_every=1),
                  heldout=HeldoutConfig(every=1, patience=2, max_episodes=8))
    cfg.imagination = replace(cfg.imagination, success_threshold=0.0)
    result = train_rl(cfg, progress=False)
    assert len(result["history"]) == 2 and result["heldout"]["stopped_early"]  # 2 checks without a new best
    assert result["heldout"]["best_iteration"] == 0 and result["heldout"]["scores"] == [(0, 1.0), (1, 1.0), (2, 1.0)]
    assert result["policy_path"].endswith("best_policy.pt")
    assert _same_weights(Policy.load(result["policy_path"]), Policy.load(square_setup[2]))
    assert [row["heldout_success"] for row in result["history"]] == [1.0, 1.0]
    # resumed after it stopped: nothing more is trained, the same best is returned
    again = train_rl(replace(cfg, iterations=10), progress=False)
    assert len(again["history"]) == 2 and again["policy_path"] == result["policy_path"]
    assert json.loads((tmp_path / "run" / "result.json").read_text())["heldout"]["best_iteration"] == 0


def test_the_kept_policy_is_the_one_with_the_best_heldout_score(square_setup, tmp_path):
    cfg = replace(_config(square_setup, tmp_path / "run", iterations=8, checkpoint_every=4),
                  heldout=HeldoutConfig(every=2, patience=10, max_episodes=32))
    result = train_rl(cfg, progress=False)
    scores = dict((int(i), s) for i, s in result["heldout"]["scores"])
    best = result["heldout"]["best_iteration"]
    assert sorted(scores) == [0, 2, 4, 6, 8] and scores[best] == max(scores.values())
    assert best == min(i for i, s in scores.items() if s == max(scores.values()))  # ties keep the earlier policy
    # the kept file scores what the check recorded for its iteration (same starts, same noise)
    from imagination.rl.early_stop import heldout_success
    from imagination.rl.training import heldout_env, load_rl_env
    env = heldout_env(cfg, load_rl_env(cfg, tmp_path / "run", Policy.load(result["policy_path"])))
    assert heldout_success(env, Policy.load(result["policy_path"]), cfg.seed) == pytest.approx(scores[best])


def test_heldout_starts_rl_scores_from_each_episodes_start_under_rls_keyframes(square_setup, tmp_path):
    # held-out episodes whose gripper shuts over steps 8-20 (released at 20): placement starts 8 before the release,
    # aligned to 4, fall at step 12 of each; the check imagines from there with RL's own settings
    from imagination.env import ImaginationConfig
    from imagination.keyframes import KeyframeConfig
    from imagination.rl.early_stop import heldout_success
    from imagination.rl.training import heldout_env, load_rl_env
    from robot_data.dataset import DatasetConfig, EpisodeWriter
    from tests.world_models.conftest import square_episode

    rng = np.random.default_rng(3)
    with EpisodeWriter(tmp_path / "held", DatasetConfig(views=("agentview",), image_size=(SIZE, SIZE), fps=10)) as w:
        for _ in range(5):
            ep = square_episode(rng, 32)
            ep.action[:, 6] = -1.0
            ep.action[8:20, 6] = 1.0
            w.append(ep)
    keyframes = KeyframeConfig(mode="release", release_lead=8, hard_width=1.0, align=4)
    cfg = replace(_config(square_setup, tmp_path / "run", iterations=2), start_data=str(tmp_path / "held"),
                  heldout=HeldoutConfig(every=1, start_data=str(tmp_path / "held"), starts="rl", max_episodes=5))
    cfg.imagination = ImaginationConfig(max_steps=32, imagined_steps=8, keyframes=keyframes)
    policy = Policy.load(square_setup[2])
    env = heldout_env(cfg, load_rl_env(cfg, tmp_path / "run", policy))
    assert [(k.episode, k.t) for k in env.keyframes.modes()] == [(e, 12) for e in range(5)]
    score = heldout_success(env, policy, cfg.seed)
    assert 0.0 <= score <= 1.0 and score * 5 == round(score * 5)  # one imagined episode per held-out start
    assert heldout_success(env, policy, cfg.seed) == score  # fixed starts and noise: the same score again
    # the default still starts the check at frame 0, whatever RL's keyframes
    frame0 = heldout_env(replace(cfg, heldout=replace(cfg.heldout, starts="start")), env)
    assert {k.t for k in frame0.keyframes.modes()} == {0}
    with pytest.raises(ValueError, match="heldout.starts: expected one of"):
        HeldoutConfig(starts="release").validate()
