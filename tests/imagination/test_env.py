"""ImaginationVectorEnv: Gymnasium contract, spaces equal to the real env's, keyframe resets,
success-head termination, horizon, uncertainty truncation, autoreset."""
from dataclasses import replace

import numpy as np
import pytest
import torch
from gymnasium import spaces
from gymnasium.utils.env_checker import check_env

from imagination.env import ImaginationConfig, ImaginationEnv, ImaginationVectorEnv
from imagination.episodes import StartEpisode
from imagination.keyframes import Keyframe, KeyframeConfig, KeyframeSampler, step_weights
from imagination.rewards.grasp import JUDGE_FILE, GraspJudge, judge_for_run
from tests.episodes import grasp_label_dir
from tests.imagination.conftest import H
from tests.imagination.conftest import start_episodes as _episodes
from world_models.denoiser import DenoiserConfig
from world_models.model import WorldModel, WorldModelConfig
from world_models.proprio import ProprioConfig, ProprioModel, fit_proprio


def _bias_success(wm, value: float):
    """Force the success head's output: its last layer's bias decides every logit."""
    last = [m for m in wm.head.modules() if isinstance(m, torch.nn.Linear) or isinstance(m, torch.nn.Conv2d)][-1]
    with torch.no_grad():
        last.weight.zero_()
        assert last.bias is not None
        last.bias.fill_(value)


def test_check_env_and_real_env_spaces(models):
    from envs.spaces import action_space, observation_space

    wm, prop = models
    env = ImaginationEnv(wm, prop, _episodes(), ImaginationConfig(max_steps=20))
    check_env(env, skip_render_check=True)
    assert env.observation_space == observation_space(1, H, H, 8)
    assert env.action_space == action_space(4)


def test_keyframe_reset_starts_from_requested_frames(models):
    wm, prop = models
    eps = _episodes()
    venv = ImaginationVectorEnv(wm, prop, eps, num_envs=2)
    obs, info = venv.reset(seed=0, options={"keyframes": [Keyframe(1, 7), Keyframe(2, 0)]})
    np.testing.assert_array_equal(obs["image"][0], eps[1].frames[7])
    np.testing.assert_array_equal(obs["image"][1], eps[2].frames[0])
    np.testing.assert_allclose(obs["state"][0], eps[1].state[7])
    assert obs["instruction"] == ("pick up bowl 1", "pick up bowl 2")
    assert list(info["t"]) == [7, 0]
    with pytest.raises(ValueError, match="one per env"):
        venv.reset(options={"keyframes": [Keyframe(0, 0)]})


def test_keyframe_modes():
    action = np.zeros((100, 7), np.float32)
    action[:, 6] = np.where(np.arange(100) < 40, -1.0, 1.0)
    assert np.flatnonzero(step_weights(action, KeyframeConfig(mode="start"))).tolist() == [0]
    hard = step_weights(action, KeyframeConfig(mode="hard"))
    assert hard.argmax() == 40 and hard[40] > 5 * hard[5] and hard[90] == 0  # last 20% excluded
    ts = [k.t for k in KeyframeSampler([action], KeyframeConfig(mode="hard")).sample(500, np.random.default_rng(0))]
    assert abs(np.median(ts) - 40) < 10
    with pytest.raises(ValueError, match="keyframe mode"):
        step_weights(action, KeyframeConfig(mode="random"))


def test_success_head_terminates_and_autoresets(models):
    wm, prop = models
    _bias_success(wm, 10.0)  # the head says "success" on every frame
    venv = ImaginationVectorEnv(wm, prop, _episodes(), num_envs=2, config=ImaginationConfig(success_threshold=0.9))
    venv.reset(seed=1)
    obs, reward, term, trunc, info = venv.step(np.zeros((2, 4, 7), np.float32))
    assert term.all() and not trunc.any() and (reward == 1.0).all() and list(info["steps"]) == [1, 1]
    obs, reward, term, trunc, info = venv.step(np.zeros((2, 4, 7), np.float32))
    assert info["reset"].all() and not term.any() and (reward == 0).all()
    _bias_success(wm, -10.0)
    venv = ImaginationVectorEnv(wm, prop, _episodes(), num_envs=1, config=ImaginationConfig(max_steps=10))
    venv.reset(seed=0, options={"keyframes": [Keyframe(0, 0)]})
    steps = []
    for _ in range(3):
        obs, reward, term, trunc, info = venv.step(np.zeros((1, 4, 7), np.float32))
        steps.append(int(info["steps"][0]))
    assert steps == [4, 4, 2] and trunc[0] and not term[0] and info["t"][0] == 10


def test_uncertainty_truncates(models):
    wm, prop = models
    _bias_success(wm, -10.0)
    cfg = ImaginationConfig(uncertainty="truncate", uncertainty_threshold=0.0, sampling_steps=1)
    venv = ImaginationVectorEnv(wm, prop, _episodes(), num_envs=2, config=cfg)
    venv.reset(seed=0)
    _, reward, term, trunc, info = venv.step(np.zeros((2, 4, 7), np.float32))
    assert (info["uncertainty"] > 0).all() and trunc.all()
    cfg.uncertainty_threshold = 1e9
    venv = ImaginationVectorEnv(wm, prop, _episodes(), num_envs=2, config=cfg)
    venv.reset(seed=0)
    _, _, _, trunc, _ = venv.step(np.zeros((2, 4, 7), np.float32))
    assert not trunc.any()


def test_bad_actions_and_config(models):
    wm, prop = models
    venv = ImaginationVectorEnv(wm, prop, _episodes(), num_envs=2)
    venv.reset(seed=0)
    with pytest.raises(ValueError, match="actions"):
        venv.step(np.zeros((2, 3, 7), np.float32))
    with pytest.raises(ValueError, match=r"\[-1, 1\]"):
        venv.step(np.full((2, 4, 7), 3.0, np.float32))
    with pytest.raises(ValueError, match="uncertainty"):
        ImaginationVectorEnv(wm, prop, _episodes(), config=ImaginationConfig(uncertainty="maybe"))


def test_proprio_model_learns_integrator():
    from world_models.proprio import chunk_pairs

    rng = np.random.default_rng(0)
    actions = [rng.uniform(-1, 1, (60, 7)).astype(np.float32) for _ in range(7)]
    # state_{t+1} = state_t + 0.05 * action_t (first 7 dims), like the OSC controller's delta commands
    states = [np.concatenate([np.zeros((1, 8)), np.cumsum(np.pad(0.05 * a[:-1], ((0, 0), (0, 1))), 0)])
              .astype(np.float32) for a in actions]
    model, losses = fit_proprio(states[:6], actions[:6], ProprioConfig(chunk_len=4, steps=600, hidden=64))
    assert losses[-1] < 0.25 * losses[0]
    s0, hist, a, target, mask = (torch.from_numpy(x) for x in chunk_pairs(states[6:], actions[6:], 4, 8))
    model_err = ((model.predict(s0, a, hist) - target).abs().mean(-1) * mask).sum() / mask.sum()
    still_err = ((s0[:, None] - target).abs().mean(-1) * mask).sum() / mask.sum()
    assert model_err < 0.5 * still_err  # held-out episode: far better than "the robot does not move"


def test_masked_reset_keeps_other_envs(models):
    wm, prop = models
    eps = _episodes()
    venv = ImaginationVectorEnv(wm, prop, eps, num_envs=2, config=ImaginationConfig(success_threshold=1.01))
    venv.reset(seed=0, options={"keyframes": [Keyframe(0, 3), Keyframe(1, 3)]})
    obs, *_ = venv.step(np.zeros((2, 4, 7), np.float32))
    obs2, info = venv.reset(options={"reset_mask": [False, True], "keyframes": [None, Keyframe(2, 5)]})
    np.testing.assert_array_equal(obs2["image"][0], obs["image"][0])  # env 0 untouched
    np.testing.assert_array_equal(obs2["image"][1], eps[2].frames[5])
    assert list(info["t"]) == [7, 5]


def test_noise_groups_share_the_world_models_noise_and_only_there(models):
    """noise_group=2: envs 0-1 and 2-3 draw one noise each; from one keyframe with the same actions a group's envs
    imagine the same frames, and the two groups do not (without groups no two envs do)."""
    wm, prop = models
    eps = _episodes()
    act = np.zeros((4, 4, 7), np.float32)
    frames = {}
    for g in (1, 2):
        venv = ImaginationVectorEnv(wm, prop, eps, num_envs=4,
                                    config=ImaginationConfig(success_threshold=1.01, noise_group=g))
        venv.reset(seed=0, options={"keyframes": [Keyframe(0, 3)] * 4})
        frames[g] = venv.step(act)[0]["image"].astype(int)
    same = [[np.array_equal(frames[g][i], frames[g][j]) for j in range(4)] for g in (1, 2) for i in range(4)]
    assert same[4:] == [[True, True, False, False], [True, True, False, False],
                        [False, False, True, True], [False, False, True, True]]
    assert not any(same[i][j] for i in range(4) for j in range(4) if i != j)
    with pytest.raises(ValueError, match="noise_group"):
        ImaginationVectorEnv(wm, prop, eps, num_envs=4, config=ImaginationConfig(noise_group=3))


def test_policy_views_show_a_subset_of_the_imagined_views(models):
    """A two-view model (agentview + wrist) shown to a policy that reads agentview only: obs carry that
    view alone, and they still come from the imagined frames after a step."""
    _, prop = models
    torch.manual_seed(0)
    d = DenoiserConfig(image_size=H, channels=6, context_frames=2, chunk_len=4, block_out_channels=[8, 16],
                       norm_num_groups=4)
    wm2 = WorldModel(WorldModelConfig(views=["agentview", "wrist"], denoiser=d))
    rng = np.random.default_rng(1)
    eps = [StartEpisode(rng.integers(0, 255, (30, 2, H, H, 3), dtype=np.uint8), e.state, e.action, e.instruction,
                        e.task_id) for e in _episodes()]
    full = ImaginationVectorEnv(wm2, prop, eps, num_envs=2, config=ImaginationConfig(max_steps=20))
    shown = ImaginationVectorEnv(wm2, prop, eps, num_envs=2,
                                 config=ImaginationConfig(max_steps=20, policy_views=["wrist"]))
    assert isinstance(shown.single_observation_space, spaces.Dict)
    assert isinstance(full.single_observation_space, spaces.Dict)
    assert shown.single_observation_space["image"].shape == (1, H, H, 3)
    assert full.single_observation_space["image"].shape == (2, H, H, 3)
    kf = {"keyframes": [Keyframe(0, 5), Keyframe(2, 9)]}
    obs_full, _ = full.reset(seed=3, options=kf)
    obs, _ = shown.reset(seed=3, options=kf)
    real_wrist = np.stack([eps[0].frames[5, 1], eps[2].frames[9, 1]])  # [2, H, W, 3]
    np.testing.assert_array_equal(obs["image"][:, 0], real_wrist)
    np.testing.assert_array_equal(shown.policy_views(eps[0].frames[:3]), eps[0].frames[:3, 1:])  # the public view
    actions = np.zeros((2, 4, 7), np.float32)
    obs_full, *_ = full.step(actions)
    obs, *_ = shown.step(actions)
    np.testing.assert_array_equal(obs["image"][:, 0], obs_full["image"][:, 1])  # same seed, same imagined wrist view
    assert not np.array_equal(obs["image"][:, 0], real_wrist)
    assert shown.observation_space.contains(obs)
    with pytest.raises(ValueError, match="policy_views: the policy reads views"):
        ImaginationVectorEnv(wm2, prop, eps, config=ImaginationConfig(policy_views=["eye_in_hand"]))
    with pytest.raises(ValueError, match="policy_views"):
        ImaginationVectorEnv(wm2, prop, eps, config=ImaginationConfig(policy_views=["wrist", "wrist"]))


def _labelled(eps):
    """The same episodes with simulator labels: an object that starts 5 cm from the first eef position."""
    out = []
    for e in eps:
        T = len(e.state)
        obj = np.repeat((e.state[0, :3] + [0.05, 0.0, 0.0])[None], T, 0).astype(np.float32)
        sim = {"object_pos": obj, "target_pos": obj + np.array([0.2, 0.0, 0.0], np.float32),
               "grasped": np.zeros(T, bool)}
        out.append(StartEpisode(e.frames, e.state, e.action, e.instruction, e.task_id, sim))
    return out


def test_state_reward_carries_the_object_along_the_proprio_states(models, tmp_path):
    """reward 'state': success probabilities are the state reward's along the proprio model's predicted
    states, the object carried from chunk to chunk from the keyframe's labels (what `track` does on records)."""
    from world_models.object_state import LabelledEpisode, StateReward, StateRewardConfig, track

    wm, prop = models
    torch.manual_seed(1)
    sr = StateReward(StateRewardConfig(chunk_len=4, hidden=16, layers=1))
    with torch.no_grad():  # a success net whose output depends on its inputs visibly
        for p in sr.parameters():
            p.mul_(5.0)
    sr.save(tmp_path / "sr.pt")
    eps = _labelled(_episodes())
    venv = ImaginationVectorEnv(wm, prop, eps, num_envs=1, config=ImaginationConfig(
        max_steps=100, success_threshold=float("inf"), reward="state", state_reward=str(tmp_path / "sr.pt")))
    venv.reset(seed=0, options={"keyframes": [Keyframe(1, 3)]})
    acts = np.random.default_rng(0).uniform(-1, 1, (2, 1, 4, 7)).astype(np.float32)
    probs, states = [], [torch.as_tensor(eps[1].state[3])[None]]
    for a in acts:
        with torch.no_grad():
            states.append(prop.predict(states[-1][-1:], torch.as_tensor(a))[0])
        probs.append(venv.step(a)[4]["success_prob"][0])
    rows = torch.cat(states).numpy()  # the keyframe's state, then 2 chunks of predicted states
    sim = eps[1].sim
    rec = LabelledEpisode(rows, np.repeat(sim["object_pos"][3:4], len(rows), 0),
                          np.repeat(sim["target_pos"][3:4], len(rows), 0),
                          np.zeros(len(rows), bool), np.zeros(len(rows), bool))
    rec.object_pos[0] = sim["object_pos"][3]
    _, expected = track(StateReward.load(tmp_path / "sr.pt"), rec, 0)
    np.testing.assert_allclose(probs, [expected[:4].max(), expected[4:].max()], rtol=1e-5)
    assert len(set(np.round(expected, 4))) > 1  # not a constant: the test can tell the steps apart


def test_state_reward_needs_a_checkpoint_and_labelled_starts(models, tmp_path):
    from world_models.object_state import StateReward, StateRewardConfig

    wm, prop = models
    with pytest.raises(ValueError, match="state_reward"):
        ImaginationVectorEnv(wm, prop, _labelled(_episodes()), 1, ImaginationConfig(reward="state"))
    StateReward(StateRewardConfig(chunk_len=4, hidden=8, layers=1)).save(tmp_path / "sr.pt")
    with pytest.raises(ValueError, match="simulator labels"):
        ImaginationVectorEnv(wm, prop, _episodes(), 1,
                             ImaginationConfig(reward="state", state_reward=str(tmp_path / "sr.pt")))
    StateReward(StateRewardConfig(chunk_len=8, hidden=8, layers=1)).save(tmp_path / "sr8.pt")
    with pytest.raises(ValueError, match="chunk_len"):
        ImaginationVectorEnv(wm, prop, _labelled(_episodes()), 1,
                             ImaginationConfig(reward="state", state_reward=str(tmp_path / "sr8.pt")))
    with pytest.raises(ValueError, match="reward"):
        ImaginationVectorEnv(wm, prop, _labelled(_episodes()), 1, ImaginationConfig(reward="pixels"))


def test_state_reward_draws_keyframes_only_where_the_labels_reach(models, tmp_path):
    from world_models.object_state import StateReward, StateRewardConfig

    wm, prop = models
    StateReward(StateRewardConfig(chunk_len=4, hidden=8, layers=1)).save(tmp_path / "sr.pt")
    eps = _labelled(_episodes())
    eps[0].sim = {k: v[:5] for k, v in eps[0].sim.items()}  # its replay diverged after row 4
    venv = ImaginationVectorEnv(wm, prop, eps, 1, ImaginationConfig(
        reward="state", state_reward=str(tmp_path / "sr.pt"), keyframes=KeyframeConfig(mode="uniform")))
    drawn = venv.keyframes.sample(500, np.random.default_rng(0))
    assert max(k.t for k in drawn if k.episode == 0) < 5 and max(k.t for k in drawn if k.episode == 1) >= 5
    with pytest.raises(ValueError, match="cover frames 0-4"):
        venv.reset(options={"keyframes": [Keyframe(0, 7)]})


def test_grasp_reward_ends_the_episode_at_the_first_close_with_the_classifier_probability(models, tmp_path):
    """reward 'grasp': no reward while the gripper stays open; the chunk that commands it shut ends the episode
    there, with reward P(success) of the grasp-point classifier at the proprio model's predicted state."""
    from world_models.grasp_point import features_at

    wm, prop = models
    labels = grasp_label_dir(tmp_path / "labels")
    eps = _labelled(_episodes())
    venv = ImaginationVectorEnv(wm, prop, eps, 1, judge_for_run(ImaginationConfig(
        max_steps=100, reward="grasp", grasp_label_dirs=[labels], keyframes=KeyframeConfig(mode="start")), tmp_path))
    venv.reset(seed=0, options={"keyframes": [Keyframe(1, 0)]})
    open_chunk = np.zeros((1, 4, 7), np.float32)
    open_chunk[..., 6] = -1.0
    _, reward, terminated, truncated, info = venv.step(open_chunk)
    assert reward[0] == 0 and not terminated[0] and not truncated[0] and info["steps"][0] == 4
    before = venv._state[0].numpy().copy()
    close_chunk = open_chunk.copy()
    close_chunk[0, 2:, 6] = 1.0  # shut from the chunk's third action on
    with torch.no_grad():
        after = prop.predict(torch.as_tensor(before)[None], torch.as_tensor(close_chunk))[0].numpy()
    _, reward, terminated, truncated, info = venv.step(close_chunk)
    sim = eps[1].sim
    assert isinstance(venv.reward, GraspJudge)
    expected = venv.reward.classifier.predict(
        features_at(after[1], 4 + 2, sim["object_pos"][0], sim["target_pos"][0])[None], np.array([1]))[0]
    assert terminated[0] and not truncated[0] and info["steps"][0] == 3
    assert reward[0] == pytest.approx(expected, rel=1e-5) and info["success"][0] == (expected >= 0.5)
    # the classifier learned the rule: a close on the object beats one 4 cm away
    near, far = (features_at(np.r_[sim["object_pos"][0] + d, np.zeros(5)], 6, sim["object_pos"][0],
                             sim["target_pos"][0]) for d in ([0.0, 0.0, 0.02], [0.04, 0.0, 0.02]))
    p = venv.reward.classifier.predict(np.stack([near, far]), np.array([1, 1]))
    assert p[0] > 0.5 > p[1]
    # the one loop counts an episode a success by the classifier's verdict, not by its ending
    from imagination.imagine import imagine

    run = imagine(venv, lambda obs: close_chunk, [Keyframe(1, 0)], seed=0)
    assert run.length[0] == 1 and run.success[0] == (run.episode_return[0] >= 0.5)


def test_grasp_until_release_holds_on_and_judges_where_the_carried_object_is_let_go(models, tmp_path):
    """grasp_until="release": the close does not end the episode; the first open after it does, with the
    classifier's P(success) of the grasp and the release; one held to the horizon is read at its last step."""
    from world_models.grasp_point import release_features_at

    wm, prop = models
    labels = grasp_label_dir(tmp_path / "labels")
    eps = _labelled(_episodes())
    sim = eps[1].sim
    venv = ImaginationVectorEnv(wm, prop, eps, 1, judge_for_run(ImaginationConfig(
        max_steps=16, reward="grasp", grasp_until="release", grasp_label_dirs=[labels],
        keyframes=KeyframeConfig(mode="start")), tmp_path))
    venv.reset(seed=0, options={"keyframes": [Keyframe(1, 0)]})
    chunk = np.zeros((1, 4, 7), np.float32)
    chunk[0, :, 6] = [-1, -1, 1, 1]  # shut at the third action
    before = venv._state[0].numpy().copy()
    with torch.no_grad():
        after = prop.predict(torch.as_tensor(before)[None], torch.as_tensor(chunk))[0].numpy()
    _, reward, terminated, truncated, info = venv.step(chunk)
    assert reward[0] == 0 and not terminated[0] and not truncated[0] and info["steps"][0] == 4
    close_state = after[1]  # the state before the closing action
    held = np.zeros((1, 4, 7), np.float32)
    held[0, :, 6] = [1, -1, -1, -1]  # opens at the second action of the next chunk
    before = venv._state[0].numpy().copy()
    with torch.no_grad():
        after = prop.predict(torch.as_tensor(before)[None], torch.as_tensor(held))[0].numpy()
    _, reward, terminated, truncated, info = venv.step(held)
    assert isinstance(venv.reward, GraspJudge)
    expected = venv.reward.classifier.predict(release_features_at(
        close_state, 2, after[0], 5, sim["object_pos"][0], sim["target_pos"][0])[None], np.array([1]))[0]
    assert terminated[0] and info["steps"][0] == 2 and reward[0] == pytest.approx(expected, rel=1e-5)
    # held shut to the horizon (16 steps): the last chunk's last action is read as the release
    venv.reset(seed=0, options={"keyframes": [Keyframe(1, 0)]})
    shut = np.ones((1, 4, 7), np.float32)
    for k in range(4):
        _, reward, terminated, truncated, info = venv.step(shut)
        assert terminated[0] == (k == 3) and not truncated[0]
    assert info["steps"][0] == 4 and 0 < reward[0] < 1
    # grasp_held="fail": the same held episode ends at the same step, paid 0; a release is paid as before
    fail = ImaginationVectorEnv(wm, prop, eps, 1, judge_for_run(ImaginationConfig(
        max_steps=16, reward="grasp", grasp_until="release", grasp_held="fail", grasp_label_dirs=[labels],
        keyframes=KeyframeConfig(mode="start")), tmp_path))
    fail.reset(seed=0, options={"keyframes": [Keyframe(1, 0)]})
    for k in range(4):
        _, reward, terminated, truncated, info = fail.step(shut)
        assert terminated[0] == (k == 3) and not truncated[0] and reward[0] == 0
    assert info["steps"][0] == 4
    fail.reset(seed=0, options={"keyframes": [Keyframe(1, 0)]})
    fail.step(chunk)
    _, reward, terminated, _, _ = fail.step(held)
    assert terminated[0] and reward[0] == pytest.approx(expected, rel=1e-5)
    with pytest.raises(ValueError, match="grasp_held: expected one of"):
        ImaginationVectorEnv(wm, prop, eps, 1, replace(fail.cfg, grasp_held="keep"))
    with pytest.raises(ValueError, match="grasp_until"):
        judge_for_run(ImaginationConfig(reward="grasp", grasp_until="lift", grasp_label_dirs=[labels]), tmp_path / "x")
    with pytest.raises(ValueError, match="was fit for grasp_until 'release'"):  # the file's ending is the env's
        ImaginationVectorEnv(wm, prop, eps, 1,
                             ImaginationConfig(reward="grasp", grasp_judge=str(tmp_path / JUDGE_FILE)))


def test_grasp_until_release_starts_holding_with_the_recordings_grasp(models, tmp_path):
    """A keyframe after the recording's close (keyframes mode "release"): the grasp is the recording's (its step
    and robot state), the imagined release is judged against it, and imagined_steps ends a held episode early."""
    from world_models.grasp_point import release_features_at

    wm, prop = models
    labels = grasp_label_dir(tmp_path / "labels")
    eps = _labelled(_episodes())
    eps[1].action[25:, 6] = -1.0  # the recording shuts at 15 and lets go at 25
    cfg = judge_for_run(ImaginationConfig(max_steps=100, imagined_steps=8, reward="grasp", grasp_until="release",
                                          grasp_label_dirs=[labels], keyframes=KeyframeConfig(mode="release",
                                                                                              release_lead=6)),
                        tmp_path)
    venv = ImaginationVectorEnv(wm, prop, eps, 1, cfg)
    assert {(k.episode, k.t) for k in venv.keyframes.sample(200, np.random.default_rng(0))} <= \
        {(1, t) for t in range(25)}  # only the episode that lets go, before it does
    venv.reset(seed=0, options={"keyframes": [Keyframe(1, 20)]})
    chunk = np.ones((1, 4, 7), np.float32)
    chunk[0, 2:, 6] = -1.0  # opens at the third action
    before = venv._state[0].numpy().copy()
    with torch.no_grad():
        after = prop.predict(torch.as_tensor(before)[None], torch.as_tensor(chunk))[0].numpy()
    _, reward, terminated, _, info = venv.step(chunk)
    sim = eps[1].sim
    assert isinstance(venv.reward, GraspJudge)
    expected = venv.reward.classifier.predict(release_features_at(
        eps[1].state[15], 15, after[1], 22, sim["object_pos"][0], sim["target_pos"][0])[None], np.array([1]))[0]
    assert terminated[0] and info["steps"][0] == 3 and reward[0] == pytest.approx(expected, rel=1e-5)
    venv.reset(seed=0, options={"keyframes": [Keyframe(1, 20)]})  # held shut: read 8 steps after the start
    for k in range(2):
        _, reward, terminated, truncated, info = venv.step(np.ones((1, 4, 7), np.float32))
        assert terminated[0] == (k == 1) and not truncated[0]
    assert info["t"][0] == 28 and 0 < reward[0] < 1
    with pytest.raises(ValueError, match="before the recording's first release after its close \\(frame 25\\)"):
        venv.reset(options={"keyframes": [Keyframe(1, 27)]})


def test_grasp_reward_needs_a_fitted_judge_and_starts_before_the_recorded_close(models, tmp_path):
    """The env loads the judge by path and never fits it: without a file it says which step writes one; the
    step itself needs labelled episodes."""
    wm, prop = models
    with pytest.raises(ValueError, match="grasp_judge: reward 'grasp' reads a fitted judge file"):
        ImaginationVectorEnv(wm, prop, _labelled(_episodes()), 1, ImaginationConfig(
            reward="grasp", grasp_label_dirs=["labels"]))
    with pytest.raises(ValueError, match="grasp_train_data"):
        judge_for_run(ImaginationConfig(reward="grasp"), tmp_path)
    with pytest.raises(FileNotFoundError, match="grasp_judge: 'missing.pt' is not a file"):
        ImaginationVectorEnv(wm, prop, _labelled(_episodes()), 1, ImaginationConfig(reward="grasp",
                                                                                  grasp_judge="missing.pt"))
    labels = grasp_label_dir(tmp_path / "labels")
    cfg = judge_for_run(ImaginationConfig(reward="grasp", grasp_label_dirs=[labels]), tmp_path)
    with pytest.raises(ValueError, match="simulator labels"):
        ImaginationVectorEnv(wm, prop, _episodes(), 1, cfg)
    venv = ImaginationVectorEnv(wm, prop, _labelled(_episodes()), 1, replace(
        cfg, keyframes=KeyframeConfig(mode="uniform")))
    assert max(k.t for k in venv.keyframes.sample(300, np.random.default_rng(0))) < 15  # the recordings close at 15
    with pytest.raises(ValueError, match="first closes the gripper"):
        venv.reset(options={"keyframes": [Keyframe(0, 20)]})


def test_episode_arrays_and_start_episodes_are_conversions_of_one_episode():
    # the two in-memory forms hold the same pixels: channel block v of EpisodeArrays is view v of StartEpisode
    from envs.frames import channels_to_views
    from tests.world_models.conftest import square_episode
    from world_models.clips import EpisodeArrays

    ep = square_episode(np.random.default_rng(1), 9)
    ep.frames["wrist"] = 255 - ep.frames["agentview"]
    arrays = EpisodeArrays.from_episode(ep, ["wrist", "agentview"], index=4)
    start = StartEpisode.from_episode(ep, ["wrist", "agentview"])
    assert arrays.frames.shape == (9, 16, 16, 6) and start.frames.shape == (9, 2, 16, 16, 3)
    np.testing.assert_array_equal(channels_to_views(arrays.frames, 2), start.frames)
    np.testing.assert_array_equal(arrays.frames[..., :3], ep.frames["wrist"])
    assert (arrays.index, arrays.task_id, arrays.instruction, arrays.source) == (4, ep.task_id, ep.instruction,
                                                                                 ep.source)
    assert arrays.episode_success == ep.episode_success and arrays.actions.dtype == np.float32
    assert start.state is ep.state and start.action is ep.action and start.sim is None
    assert (start.instruction, start.task_id) == (ep.instruction, ep.task_id)


def test_env_carries_the_proprio_history_like_an_open_loop_track(models):
    """The env feeds the proprio model the actions executed before each chunk (the recording's before a
    mid-episode keyframe): its states equal an open-loop chain that does the same by hand."""
    from world_models.proprio import history_at

    wm, _ = models
    torch.manual_seed(1)
    prop = ProprioModel(ProprioConfig(chunk_len=4, history=6, hidden=16, layers=1))
    with torch.no_grad():  # an untrained net barely reads its input: make the history matter
        for p in prop.parameters():
            p.mul_(5.0)
    eps = _episodes()
    venv = ImaginationVectorEnv(wm, prop, eps, num_envs=2, config=ImaginationConfig(success_threshold=1.01))
    venv.reset(seed=0, options={"keyframes": [Keyframe(0, 0), Keyframe(1, 5)]})
    rng = np.random.default_rng(0)
    chunks = rng.uniform(-1, 1, (3, 2, 4, 7)).astype(np.float32)  # [steps, envs, K, 7]
    got = np.stack([venv.step(c)[0]["state"] for c in chunks])  # [steps, envs, S]
    for e, t0 in ((0, 0), (1, 5)):
        state = torch.as_tensor(eps[e].state[t0])[None]
        hist = torch.as_tensor(history_at(eps[e].action, t0, 6))[None]
        for k, c in enumerate(chunks[:, e]):
            act = torch.as_tensor(c)[None]
            if k == 0 and t0:  # the recorded actions before the keyframe change the prediction
                assert not np.allclose(prop.predict(state, act)[0, -1].numpy(), got[0, e], atol=1e-4)
            state = prop.predict(state, act, hist)[:, -1]
            hist = prop.next_history(hist, act)
            np.testing.assert_allclose(got[k, e], state[0].numpy(), rtol=1e-4, atol=1e-4)


def test_grasp_reward_carries_the_judges_per_task_offset(models, tmp_path):
    """imagination.grasp_point.task_bias: the same close, judged with its task's logit moved by -1.5, pays
    apply_task_bias of the plain judge's probability; the success count follows the moved probability."""
    from world_models.grasp_point import GraspPointConfig, apply_task_bias

    wm, prop = models
    labels = grasp_label_dir(tmp_path / "labels")
    eps = _labelled(_episodes())
    close_chunk = np.zeros((1, 4, 7), np.float32)
    close_chunk[0, :, 6] = 1.0
    task = eps[1].task_id
    bias = [0.0] * 10
    bias[task] = -1.5
    paid = []
    for task_bias in ([], bias):
        venv = ImaginationVectorEnv(wm, prop, eps, 1, judge_for_run(ImaginationConfig(
            max_steps=100, reward="grasp", grasp_label_dirs=[labels], keyframes=KeyframeConfig(mode="start"),
            grasp_point=GraspPointConfig(task_bias=task_bias)), tmp_path))  # one file: the bias applies on load
        venv.reset(seed=0, options={"keyframes": [Keyframe(1, 0)]})
        _, reward, terminated, _, info = venv.step(close_chunk)
        assert terminated[0] and info["success"][0] == (reward[0] >= 0.5)
        paid.append(float(reward[0]))
    assert paid[1] == pytest.approx(apply_task_bias(np.array([paid[0]]), np.array([task]), bias)[0], rel=1e-4)
    assert paid[1] < paid[0] and 0 < paid[0] < 1


def test_grasp_reward_with_an_object_reader_reads_no_simulator_label(models, tmp_path):
    """imagination.object_reader: the judge takes where the object and the target start from the reader reading each
    start episode's first frame. Start episodes without simulator labels run; labels that are there are not read."""
    from imagination.rewards.base import reads_simulator
    from world_models.object_reader import ObjectReaderConfig, fit_object_reader

    wm, prop = models
    labels = grasp_label_dir(tmp_path / "labels")
    eps = _episodes()
    rng = np.random.default_rng(0)
    reader = fit_object_reader(rng.integers(0, 255, (6, H, H, 3), dtype=np.uint8), np.array([0, 1, 2] * 2),
                               rng.normal(0, 0.1, (6, 3)), rng.normal(0, 0.1, (6, 3)), "libero_spatial",
                               ObjectReaderConfig(channels=[8, 8], keypoints=8, steps=3), progress=False)
    reader.save(tmp_path / "reader.pt")
    cfg = judge_for_run(ImaginationConfig(max_steps=100, reward="grasp", grasp_label_dirs=[labels],
                                          keyframes=KeyframeConfig(mode="start"),
                                          object_reader=str(tmp_path / "reader.pt")), tmp_path)
    assert reads_simulator(cfg) is False and reads_simulator(ImaginationConfig(reward="grasp")) is True
    read_obj, read_tgt = reader.read(np.stack([e.frames[0, 0] for e in eps]), np.array([e.task_id for e in eps]))
    for starts in (eps, _labelled(eps)):  # no labels; labels the judge must ignore
        venv = ImaginationVectorEnv(wm, prop, starts, 2, cfg)
        venv.reset(seed=0, options={"keyframes": [Keyframe(1, 0), Keyframe(2, 0)]})
        assert isinstance(venv.reward, GraspJudge)
        np.testing.assert_array_equal(venv.reward.obj0, read_obj[[1, 2]])
        np.testing.assert_array_equal(venv.reward.target0, read_tgt[[1, 2]])
        close = np.ones((2, 4, 7), np.float32)
        _, reward, terminated, _, _ = venv.step(close)
        assert terminated.all() and ((reward >= 0) & (reward <= 1)).all()  # the classifier's P(success)
    with pytest.raises(ValueError, match="only reward 'grasp' reads it"):
        ImaginationVectorEnv(wm, prop, eps, 1, ImaginationConfig(object_reader=str(tmp_path / "reader.pt")))
    other = [StartEpisode(e.frames, e.state, e.action, e.instruction, e.task_id, None, "libero_object") for e in eps]
    with pytest.raises(ValueError, match="trained on libero_spatial"):
        ImaginationVectorEnv(wm, prop, other, 1, cfg)


def test_observe_recorded_shows_the_recording_while_the_model_imagines(models):
    """observe "recorded": after every chunk the policy sees its start episode's recorded frame and state at the
    env's step (the last ones past the recording's end); the world model still imagines, and "imagined" (the
    default) shows what it imagined."""
    wm, prop = models
    eps = _episodes()
    T = len(eps[1].frames)
    shown = ImaginationVectorEnv(wm, prop, eps, num_envs=2, config=ImaginationConfig(max_steps=T + 8,
                                                                                   observe="recorded"))
    dreamt = ImaginationVectorEnv(wm, prop, eps, num_envs=2, config=ImaginationConfig(max_steps=T + 8))
    starts = {"keyframes": [Keyframe(1, 3), Keyframe(2, T - 2)]}
    shown.reset(seed=0, options=starts)
    dreamt.reset(seed=0, options=starts)
    actions = np.zeros((2, 4, 7), np.float32)
    obs, *_ , info = shown.step(actions)
    other, *_ = dreamt.step(actions)
    assert list(info["t"]) == [7, T + 2]
    np.testing.assert_array_equal(obs["image"][0], eps[1].frames[7])
    np.testing.assert_allclose(obs["state"][0], eps[1].state[7])
    np.testing.assert_array_equal(obs["image"][1], eps[2].frames[-1])  # past the end: the last recorded frame
    np.testing.assert_allclose(obs["state"][1], eps[2].state[-1])
    assert not np.array_equal(other["image"][0], eps[1].frames[7])  # the default shows the imagined frame
    np.testing.assert_array_equal(shown.render(), dreamt.render())  # both imagine the same frames
    # "recorded_image": the recorded frame with the state the proprio model predicts for these actions
    mixed = ImaginationVectorEnv(wm, prop, eps, num_envs=2, config=ImaginationConfig(max_steps=T + 8,
                                                                                    observe="recorded_image"))
    mixed.reset(seed=0, options=starts)
    seen, *_ = mixed.step(actions)
    np.testing.assert_array_equal(seen["image"], obs["image"])
    np.testing.assert_allclose(seen["state"], other["state"])  # the imagined state, as "imagined" shows it
    assert not np.allclose(seen["state"][0], eps[1].state[7])
    with pytest.raises(ValueError, match=r"observe: expected one of \['imagined', 'recorded', 'recorded_image'\], "
                                         "got 'real'"):
        ImaginationVectorEnv(wm, prop, eps, config=ImaginationConfig(observe="real"))


def test_action_guidance_is_passed_to_the_world_model_and_refused_without_a_null_action(models):
    """action_guidance w > 1 changes the imagined frames of a model trained with action dropout (same seed, same
    actions); 0 and 1 keep the model's own sampling; a model without a null action refuses w > 1 at construction."""
    wm, prop = models
    eps = _episodes()
    guided = WorldModel(replace(wm.cfg, denoiser=replace(wm.cfg.denoiser, action_dropout=0.1))).eval()
    assert guided.denoiser.null_actions is not None
    with torch.no_grad():
        guided.denoiser.null_actions.fill_(0.5)
    act = np.full((2, 4, 7), 0.2, np.float32)

    def first_frames(model, w):
        venv = ImaginationVectorEnv(model, prop, eps, num_envs=2,
                                    config=ImaginationConfig(success_threshold=1.01, action_guidance=w))
        venv.reset(seed=0, options={"keyframes": [Keyframe(0, 3)] * 2})
        return venv.step(act)[0]["image"].astype(int)

    own, one, twice = first_frames(guided, 0.0), first_frames(guided, 1.0), first_frames(guided, 3.0)
    assert np.array_equal(own, one) and not np.array_equal(own, twice)
    with pytest.raises(ValueError, match="action_guidance: 3.0 needs a world model trained with"):
        ImaginationVectorEnv(wm, prop, eps, num_envs=2, config=ImaginationConfig(action_guidance=3.0))
    with pytest.raises(ValueError, match="action_guidance: expected a finite number >= 0"):
        ImaginationVectorEnv(guided, prop, eps, num_envs=2, config=ImaginationConfig(action_guidance=-1.0))
