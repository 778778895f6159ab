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
    assert result["heldout"]["moves"] == [] and "heldout_move" not in result["history"][-1]  # no bound: not read
    assert best == min(i for i, s in scores.items() if s == max(scores.values()))  # ties keep the earlier policy
    # the kept file scores what the check recorded for its iteration (same starts, same noise)
    from imagination.rl.early_stop import heldout_success
    from imagination.rl.run_envs import heldout_env, load_rl_env
    env = heldout_env(cfg, load_rl_env(cfg, tmp_path / "run", Policy.load(result["policy_path"])))
    assert heldout_success(env, Policy.load(result["policy_path"]), cfg.seed) == pytest.approx(scores[best])


def test_heldout_starts_rl_scores_from_each_episodes_start_under_rls_keyframes(square_setup, tmp_path):
    # held-out episodes whose gripper shuts over steps 8-20 (released at 20): placement starts 8 before the release,
    # aligned to 4, fall at step 12 of each; the check imagines from there with RL's own settings
    from imagination.env import ImaginationConfig
    from imagination.keyframes import KeyframeConfig
    from imagination.rl.early_stop import heldout_success
    from imagination.rl.run_envs import heldout_env, load_rl_env
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


def test_an_iterate_that_moved_past_the_bound_is_never_kept_and_replays_the_same():
    s = EarlyStopper(patience=3, max_move=0.05)
    # iteration 4 scores best but moved 0.08 > 0.05: not kept, and it counts as a check without a new best
    assert [s.observe(i, v, m) for i, v, m in [(0, 0.3, None), (2, 0.4, 0.01), (4, 0.6, 0.08), (6, 0.5, 0.04)]] \
        == [True, True, False, True]
    assert (s.best_iteration, s.best_score, s.moves) == (6, 0.5, [(2, 0.01), (4, 0.08), (6, 0.04)])
    again = EarlyStopper.replay(3, 0.0, s.scores, s.moves, max_move=0.05)
    assert (again.best_iteration, again.since_best, again.moves) == (6, 0, s.moves)
    assert EarlyStopper.replay(3, 0.0, s.scores, s.moves).best_iteration == 4  # no bound: the best score wins
    for bad in (-0.1, float("nan")):
        with pytest.raises(ValueError, match="heldout.max_move"):
            HeldoutConfig(every=1, max_move=bad).validate()
    with pytest.raises(ValueError, match="heldout.move_every"):
        HeldoutConfig(every=1, move_every=0).validate()


def _held_episodes(folder, close_at: int, n: int = 4, length: int = 32):
    """n square episodes whose gripper closes from step `close_at` on (never when close_at >= length)."""
    from robot_data.dataset import DatasetConfig, EpisodeWriter
    from tests.world_models.conftest import square_episode

    rng = np.random.default_rng(5)
    with EpisodeWriter(folder, DatasetConfig(views=("agentview",), image_size=(SIZE, SIZE), fps=10)) as w:
        for _ in range(n):
            ep = square_episode(rng, length)
            ep.action[:, 6] = -1.0
            ep.action[close_at:, 6] = 1.0
            w.append(ep)


def test_the_move_is_read_on_the_frames_before_the_first_close(square_setup, tmp_path):
    from imagination.rl.early_stop import approach_observations, mean_chunks, move_from
    from imagination.rl.run_envs import heldout_env, load_rl_env

    _held_episodes(tmp_path / "held", close_at=12)
    cfg = replace(_config(square_setup, tmp_path / "run", iterations=1),
                  heldout=HeldoutConfig(every=1, start_data=str(tmp_path / "held"), max_episodes=4))
    policy = Policy.load(square_setup[2])
    env = heldout_env(cfg, load_rl_env(cfg, tmp_path / "run", policy))
    obs = approach_observations(env, every=4)
    assert obs is not None and len(obs["instruction"]) == 4 * 3  # steps 0, 4, 8 of each: 12 closes
    assert obs["image"].shape == (12, 1, SIZE, SIZE, 3) and obs["state"].shape == (12, 8)
    assert np.array_equal(obs["image"][1], env.episodes[0].frames[4])
    start = mean_chunks(policy, obs)
    assert start.shape == (12, policy.chunk_len, 7) and move_from(start, policy, obs) == 0.0
    moved = Policy.load(square_setup[2])
    with torch.no_grad():
        for p in moved.parameters():
            p.add_(0.05 * torch.randn_like(p))
    assert move_from(start, moved, obs) > 0.0
    # "before_release" reads on up to the lead before the first release: _held_episodes never let go, so all of it
    carry = approach_observations(env, every=4, phase="before_release")
    assert carry is not None and len(carry["instruction"]) == 4 * 8  # steps 0, 4, ..., 28 of each
    with pytest.raises(ValueError, match="heldout.move_phase"):
        HeldoutConfig(every=1, move_phase="after_grasp").validate()
    # episodes that close at their first step leave nothing to read
    _held_episodes(tmp_path / "closed", close_at=0)
    closed = heldout_env(replace(cfg, heldout=replace(cfg.heldout, start_data=str(tmp_path / "closed"))), env)
    assert approach_observations(closed) is None


def test_rl_with_a_move_bound_below_every_iterate_keeps_the_start(square_setup, tmp_path):
    _held_episodes(tmp_path / "held", close_at=20)
    held = HeldoutConfig(every=2, patience=10, start_data=str(tmp_path / "held"), max_episodes=4)
    cfg = replace(_config(square_setup, tmp_path / "run", iterations=4, checkpoint_every=2),
                  heldout=replace(held, max_move=1e-9))
    result = train_rl(cfg, progress=False)
    moves = result["heldout"]["moves"]
    assert [i for i, _ in moves] == [2, 4] and all(m > 1e-9 for _, m in moves)  # RL moved the policy
    assert [row["heldout_move"] for row in result["history"] if "heldout_move" in row] == [m for _, m in moves]
    assert result["heldout"]["best_iteration"] == 0
    assert _same_weights(Policy.load(result["policy_path"]), Policy.load(square_setup[2]))
    again = train_rl(cfg, progress=False)  # resumed past its end: the moves come back from its record
    assert again["heldout"]["moves"] == moves and again["heldout"]["best_iteration"] == 0
