"""imagination.imagine: assembling an imagination env from paths or objects (argument errors, the fitted
proprio model's chunk length, the policy's views) and the one episode loop (padding and freezing,
recorded extras, highest success probability, open-loop replay of recorded actions)."""
import math

import numpy as np
import pytest
import torch

from imagination.env import ImaginationConfig, ImaginationVectorEnv
from imagination.episodes import StartEpisode
from imagination.eval.calibrate import replay_success_prob
from imagination.imagine import imagine, open_imagination, open_proprio, policy_mean, recorded_actions, recorded_ends
from imagination.keyframes import Keyframe, KeyframeConfig
from policies.vla import VLAConfig, VLAPolicy
from robot_data.dataset import DatasetConfig, Episode, EpisodeWriter
from world_models.denoiser import DenoiserConfig
from world_models.model import WorldModel, WorldModelConfig
from world_models.proprio import ProprioConfig, ProprioModel

H, K = 16, 4


def _wm(bias: float | None = None) -> WorldModel:
    torch.manual_seed(0)
    d = DenoiserConfig(image_size=H, channels=3, context_frames=2, chunk_len=K, block_out_channels=[8, 16],
                       norm_num_groups=4)
    wm = WorldModel(WorldModelConfig(views=["agentview"], denoiser=d))
    if bias is not None:  # every frame's success probability is sigmoid(bias)
        with torch.no_grad():
            wm.head.out.weight.zero_()
            wm.head.out.bias.fill_(bias)
    return wm


def _proprio(chunk_len: int = K) -> ProprioModel:
    return ProprioModel(ProprioConfig(chunk_len=chunk_len, hidden=16, layers=1))


def _episodes(lengths=(9, 13, 6)) -> list[StartEpisode]:
    rng = np.random.default_rng(0)
    return [StartEpisode(rng.integers(0, 255, (T, 1, H, H, 3), dtype=np.uint8),
                         rng.normal(size=(T, 8)).astype(np.float32),
                         rng.uniform(-1, 1, (T, 7)).astype(np.float32), f"task {i}", i) for i, T in enumerate(lengths)]


def _policy(views=("agentview",), chunk_len: int = K) -> VLAPolicy:
    torch.manual_seed(0)
    return VLAPolicy(VLAConfig(views=list(views), image_size=H, chunk_len=chunk_len, conv_channels=[8, 8]))


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    root = tmp_path_factory.mktemp("imagine")
    with EpisodeWriter(root / "data", DatasetConfig(views=("agentview",), image_size=(H, H))) as w:
        for e in _episodes((10, 12, 8)):
            w.append(Episode(frames={"agentview": e.frames[:, 0]}, state=e.state, action=e.action,
                             reward=np.zeros(len(e.action), np.float32), success=np.zeros(len(e.action), bool),
                             instruction=e.instruction, suite="libero_spatial", task_id=e.task_id, source="expert"))
    _wm().save(root / "wm.pt")
    return root


def test_open_imagination_names_the_bad_argument(files, tmp_path):
    wm, data = files / "wm.pt", files / "data"
    with pytest.raises(FileNotFoundError, match="world_model"):
        open_imagination(tmp_path / "missing.pt", data, _proprio())
    for bad in ("", tmp_path / "nodata"):
        with pytest.raises(FileNotFoundError, match="start_data"):
            open_imagination(wm, bad, _proprio())
    with pytest.raises(ValueError, match="start_data"):
        open_imagination(wm, data, _proprio(), indices=[])
    with pytest.raises(ValueError, match="start_data"):
        open_imagination(wm, [], _proprio())
    with pytest.raises(FileNotFoundError, match="proprio"):
        open_imagination(wm, data, str(tmp_path / "proprio.pt"))
    with pytest.raises(ValueError, match="proprio: chunk_len 8 differs"):
        open_imagination(wm, data, _proprio(chunk_len=8))
    with pytest.raises(ValueError, match="policy: chunk_len 8 differs"):
        open_imagination(wm, data, _proprio(), policy=_policy(chunk_len=8))
    with pytest.raises(ValueError, match="proprio: no proprio model given"):
        open_proprio(_wm())


def test_open_imagination_from_paths_or_objects(files):
    env = open_imagination(str(files / "wm.pt"), str(files / "data"), _proprio(), 2, indices=[2, 0])
    assert env.num_envs == 2 and [len(e.action) for e in env.episodes] == [8, 10]
    eps = _episodes()
    env = open_imagination(_wm(), eps, _proprio(), indices=[1])
    assert env.episodes == [eps[1]]


def test_fitted_proprio_takes_the_world_models_chunk_length_and_is_cached(files, tmp_path, monkeypatch):
    import imagination.imagine

    # a short fit (the default takes ~15 s): what matters is the chunk length it is given
    monkeypatch.setattr(imagination.imagine, "ProprioConfig",
                        lambda chunk_len: ProprioConfig(chunk_len=chunk_len, hidden=16, layers=1, steps=20))
    cache = tmp_path / "proprio.pt"
    _proprio(chunk_len=8).save(cache)  # a cached model of another chunk length is fitted again
    env = open_imagination(files / "wm.pt", files / "data", indices=[0], proprio_cache=cache)
    assert env.proprio.cfg.chunk_len == K != ProprioConfig().chunk_len
    assert ProprioModel.load(cache).cfg.chunk_len == K
    stamp = cache.stat().st_mtime_ns
    again = open_imagination(files / "wm.pt", files / "data", proprio_cache=cache)
    assert cache.stat().st_mtime_ns == stamp  # loaded, not fitted again
    assert all(torch.equal(a, b)
               for a, b in zip(env.proprio.state_dict().values(), again.proprio.state_dict().values()))


def test_policy_decides_the_views_obs_show(files):
    env = open_imagination(files / "wm.pt", files / "data", _proprio(), policy=_policy(["agentview"]))
    assert env.cfg.policy_views == ["agentview"]
    with pytest.raises(ValueError, match="policy_views"):
        open_imagination(files / "wm.pt", files / "data", _proprio(), policy=_policy(["wrist"]))


def test_imagine_pads_freezes_and_records_extras(monkeypatch):
    wm = _wm(bias=2.0)
    env = ImaginationVectorEnv(wm, _proprio(), _episodes(), 3,
                               ImaginationConfig(max_steps=12, success_threshold=math.inf))
    batches: list[int] = []
    predict = wm.predict_encoded  # the env predicts in the denoiser's space

    def counted(context, *a):
        batches.append(len(context))
        return predict(context, *a)

    monkeypatch.setattr(wm, "predict_encoded", counted)

    def act(obs):
        return {"actions": np.zeros((3, K, 7), np.float32), "value": torch.arange(3.0), "tag": np.arange(3) * 10}

    starts = [Keyframe(0, 0), Keyframe(1, 8)]
    run = imagine(env, act, starts, seed=0, keep_obs=True)
    assert batches == [2, 1, 1]  # the padded env never runs; env 1 is frozen after its one chunk
    assert env._frozen.tolist() == [True, True, True]
    assert run.env.tolist() == [0, 1, 0, 0] and run.step.tolist() == [0, 0, 1, 2] and run.t.tolist() == [0, 8, 4, 8]
    assert run.done.tolist() == [False, True, False, True]
    value = run.extras["value"]
    assert isinstance(value, torch.Tensor) and torch.equal(value, torch.tensor([0.0, 1.0, 0.0, 0.0]))
    assert run.extras["tag"].tolist() == [0, 10, 0, 0]
    assert run.length.tolist() == [3, 1] and run.final_t.tolist() == [12, 12] and run.keyframes == starts
    assert run.image is not None and run.image.shape == (4, 1, H, H, 3)
    assert run.instruction == ["task 0", "task 1", "task 0", "task 0"]
    assert not run.success.any() and run.episode_return.tolist() == [0.0, 0.0]
    np.testing.assert_allclose(run.max_success_prob, 1 / (1 + math.exp(-2.0)), rtol=1e-5)
    again = imagine(env, act, starts, seed=0, keep_obs=True, keep_images=False)  # images recorded by the source
    assert again.image is None and again.instruction == run.instruction
    assert again.state is not None and run.state is not None and np.array_equal(again.state, run.state)
    with pytest.raises(ValueError, match="starts"):
        imagine(env, act, [Keyframe(0, 0)] * 4, seed=0)


def test_imagine_ends_episodes_on_success_and_keeps_their_highest_probability():
    wm = _wm()
    env = ImaginationVectorEnv(wm, _proprio(), _episodes(), 4,
                               ImaginationConfig(max_steps=12, success_threshold=math.inf))
    run = imagine(env, policy_mean(_policy()), [Keyframe(e, 0) for e in range(3)], seed=1)
    for e in range(3):
        assert run.max_success_prob[e] == run.success_prob[run.env == e].max()
    # the highest first-chunk probability as threshold: the same first chunks (same seed) pass it once
    first = run.success_prob[run.step == 0]
    env = ImaginationVectorEnv(wm, _proprio(), _episodes(), 4,
                               ImaginationConfig(max_steps=12, success_threshold=float(first.max())))
    again = imagine(env, policy_mean(_policy()), [Keyframe(e, 0) for e in range(3)], seed=1)
    assert again.success[first.argmax()] and again.length[first.argmax()] == 1
    threshold = float(first.max())
    assert (again.success == (again.max_success_prob >= threshold)).all()
    assert (again.episode_return == again.success).all()


def _replay_by_hand(wm, proprio, eps, seed):
    """The open-loop replay written out: recorded actions chunk by chunk, then still with the last
    gripper command; each episode's maximum counts only chunks that start within its recording."""
    lengths = np.array([len(e.action) for e in eps])
    env = ImaginationVectorEnv(wm, proprio, eps, len(eps), ImaginationConfig(
        max_steps=int(lengths.max()), success_threshold=math.inf, keyframes=KeyframeConfig(mode="start")))
    env.reset(seed=seed, options={"keyframes": [Keyframe(i, 0) for i in range(len(eps))]})
    t, best = np.zeros(len(eps), np.int64), np.zeros(len(eps), np.float32)
    while (t < lengths).any():
        actions = np.zeros((len(eps), K, 7), np.float32)
        for i, ep in enumerate(eps):
            rec = ep.action[t[i]: t[i] + K]
            actions[i, : len(rec)] = rec
            actions[i, len(rec):, 6] = ep.action[-1, 6]
        _, _, _, truncated, info = env.step(actions)
        live = t < lengths
        best[live] = np.maximum(best[live], info["success_prob"][live])
        t = np.asarray(info["t"])
    return best


def test_recorded_actions_replay_equals_replay_success_prob():
    wm, proprio, eps = _wm(), _proprio(), _episodes()
    env = ImaginationVectorEnv(wm, proprio, eps, 3, ImaginationConfig(
        max_steps=13, success_threshold=math.inf, keyframes=KeyframeConfig(mode="start")))
    run = imagine(env, recorded_actions(env), [Keyframe(i, 0) for i in range(3)], seed=5)
    probs = run.max_success_prob_before(recorded_ends(eps))
    np.testing.assert_array_equal(probs, replay_success_prob(wm, proprio, eps, seed=5))
    np.testing.assert_array_equal(probs, _replay_by_hand(wm, proprio, eps, 5))
    assert run.length.tolist() == [4, 4, 4]  # every env runs to the longest recording (13 steps: 4 chunks)
    last = run.actions[(run.env == 0) & (run.t == 8)][0]  # episode 0 (9 steps) from step 8: one recorded action left
    np.testing.assert_array_equal(last[0], eps[0].action[8])
    np.testing.assert_array_equal(last[1:, :6], 0.0)
    np.testing.assert_array_equal(last[1:, 6], eps[0].action[-1, 6])
    assert recorded_ends(eps, max_steps=10).tolist() == [9, 10, 6]
