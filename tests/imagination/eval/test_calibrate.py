"""Success-threshold calibration: the threshold choice on hand-computed cases, the open-loop replay's
per-episode maximum, the checkpoint carrying the threshold into the imagined env, and the script."""
import json

import numpy as np
import pytest
import torch

from imagination.env import ImaginationConfig, ImaginationVectorEnv
from imagination.episodes import StartEpisode
from imagination.eval.calibrate import balanced_accuracy, pick_threshold, replay_success_prob
from robot_data.dataset import DatasetConfig, Episode, EpisodeWriter
from world_models.denoiser import DenoiserConfig
from world_models.model import WorldModel, WorldModelConfig
from world_models.proprio import ProprioConfig, ProprioModel

H, K = 16, 4


def _wm() -> WorldModel:
    torch.manual_seed(0)
    d = DenoiserConfig(image_size=H, channels=3, context_frames=2, chunk_len=K, block_out_channels=[8, 16],
                       norm_num_groups=4)
    return WorldModel(WorldModelConfig(views=["agentview"], denoiser=d))


def _proprio() -> ProprioModel:
    return ProprioModel(ProprioConfig(chunk_len=K, hidden=16, layers=1))


def _bias_success(wm: WorldModel, value: float) -> None:
    with torch.no_grad():
        wm.head.out.weight.zero_()
        wm.head.out.bias.fill_(value)


class BrightnessHead(torch.nn.Module):
    """A success head that reads the imagined frame's mean brightness: logit = 10 * mean pixel ([-1, 1])."""

    def forward(self, frames, anchor):  # frames [B, K, ch, H, W]
        m = frames.mean(dim=(2, 3, 4))
        return 10 * m, torch.zeros_like(m)


def _episode(level: int, T: int, task: int = 0) -> StartEpisode:
    frames = np.full((T, 1, H, H, 3), level, np.uint8)
    return StartEpisode(frames, np.zeros((T, 8), np.float32), np.zeros((T, 7), np.float32), "task", task)


def test_pick_threshold_hand_cases():
    # 0.5 misses the success at 0.3 (balanced accuracy 0.75); the midpoint 0.25 separates all four
    c = pick_threshold(np.array([0.1, 0.2, 0.3, 0.8]), np.array([False, False, True, True]))
    assert c.threshold == pytest.approx(0.25) and c.balanced_accuracy == 1.0 and c.balanced_accuracy_at_default == 0.75
    assert (c.positives, c.negatives) == (2, 2)
    # an optimistic head: failures fire too; only a threshold above them separates
    c = pick_threshold(np.array([0.6, 0.7, 0.8, 0.95]), np.array([False, False, True, True]))
    assert c.threshold == pytest.approx(0.75)
    # already separated at 0.5: ties go to the default
    assert pick_threshold(np.array([0.1, 0.9]), np.array([False, True])).threshold == 0.5
    # imbalance: 1 failure among 4; "everything succeeds" (0.05) scores 0.5, not 0.75
    probs, labels = np.array([0.1, 0.4, 0.45, 0.9, 0.3]), np.array([True, True, True, True, False])
    c = pick_threshold(probs, labels)
    assert c.threshold == pytest.approx(0.35) and c.balanced_accuracy == pytest.approx(0.875)
    assert balanced_accuracy(probs, labels, 0.05) == 0.5


def test_pick_threshold_errors():
    with pytest.raises(ValueError, match="both real successes and real failures"):
        pick_threshold(np.array([0.2, 0.7]), np.array([True, True]))
    with pytest.raises(ValueError, match="probs and labels"):
        pick_threshold(np.array([0.2, 0.7]), np.array([True]))


def test_replay_takes_each_episodes_highest_probability(monkeypatch):
    wm = _wm()
    _bias_success(wm, 2.0)
    probs = replay_success_prob(wm, _proprio(), [_episode(10, 9), _episode(200, 13)], batch_size=1)
    np.testing.assert_allclose(probs, 1 / (1 + np.exp(-2.0)), rtol=1e-5)
    # a head that reads brightness: the replay of a bright scene scores above that of a dark one
    monkeypatch.setattr(wm, "head", BrightnessHead())
    probs = replay_success_prob(wm, _proprio(), [_episode(20, 9), _episode(235, 13), _episode(30, 5)])
    assert probs.shape == (3,) and probs[1] > 0.9 > 0.1 > max(probs[0], probs[2])
    c = pick_threshold(probs, np.array([False, True, False]))
    assert c.balanced_accuracy == 1.0 and probs[0] < c.threshold < probs[1]
    with pytest.raises(ValueError, match="episodes"):
        replay_success_prob(wm, _proprio(), [])


def test_imagined_env_uses_the_checkpoints_threshold(tmp_path):
    wm = _wm()
    _bias_success(wm, 0.0)  # probability 0.5 on every frame
    eps = [_episode(100, 20)]
    for saved, fires in [(0.4, True), (0.6, False)]:
        wm.cfg.head.success_threshold = saved
        wm.save(tmp_path / "wm.pt")
        loaded = WorldModel.load(tmp_path / "wm.pt")
        assert loaded.cfg.head.success_threshold == saved
        env = ImaginationVectorEnv(loaded, _proprio(), eps, 1, ImaginationConfig(max_steps=20))
        env.reset(seed=0)
        _, _, terminated, _, _ = env.step(np.zeros((1, K, 7), np.float32))
        assert bool(terminated[0]) is fires
    # an explicit threshold in the env's config wins over the checkpoint's
    env = ImaginationVectorEnv(loaded, _proprio(), eps, 1, ImaginationConfig(max_steps=20, success_threshold=0.3))
    env.reset(seed=0)
    assert env.step(np.zeros((1, K, 7), np.float32))[2][0]


def _write_data(root, outcomes):
    rng = np.random.default_rng(0)
    with EpisodeWriter(root, DatasetConfig(views=("agentview",), image_size=(H, H))) as w:
        for i, ok in enumerate(outcomes):
            T = 10
            success = np.zeros(T, bool)
            success[-1] = ok
            w.append(Episode(
                frames={"agentview": rng.integers(0, 255, (T, H, H, 3), dtype=np.uint8)},
                state=rng.normal(size=(T, 8)).astype(np.float32), action=rng.uniform(-1, 1, (T, 7)).astype(np.float32),
                reward=success.astype(np.float32), success=success, instruction="task 0", suite="libero_spatial",
                task_id=0, source="expert" if ok else "policy", init_state_id=i))


def test_script_writes_threshold_report_and_plot(tmp_path):
    from imagination.eval.calibrate import CalibrateConfig, calibrate_success

    _write_data(tmp_path / "data", [True, True, False])
    wm = _wm()
    _bias_success(wm, 1.0)
    wm.save(tmp_path / "wm.pt")
    _proprio().save(tmp_path / "proprio.pt")
    cfg = CalibrateConfig(checkpoint=str(tmp_path / "wm.pt"), data_dir=str(tmp_path / "data"),
                          proprio=str(tmp_path / "proprio.pt"), out=str(tmp_path / "cal" / "wm.pt"))
    result = calibrate_success(cfg)
    saved = WorldModel.load(tmp_path / "cal" / "wm.pt")
    assert saved.cfg.head.success_threshold == result["threshold"] == 0.5  # every replay scores sigmoid(1)
    report = json.loads((tmp_path / "cal" / "calibration.json").read_text())
    assert [e["real_success"] for e in report["episodes"]] == [True, True, False]
    assert [e["source"] for e in report["episodes"]] == ["expert", "expert", "policy"]
    assert report["episodes"][0]["max_success_prob"] == pytest.approx(1 / (1 + np.exp(-1.0)), rel=1e-5)
    assert (tmp_path / "cal" / "calibration.png").stat().st_size > 1000
    assert WorldModel.load(tmp_path / "wm.pt").cfg.head.success_threshold == 0.5  # the input is untouched
    with pytest.raises(SystemExit, match="checkpoint"):
        calibrate_success(CalibrateConfig(checkpoint=str(tmp_path / "missing.pt"), data_dir=str(tmp_path / "data")))
    with pytest.raises(SystemExit, match="data_dir"):
        calibrate_success(CalibrateConfig(checkpoint=str(tmp_path / "wm.pt"), data_dir=str(tmp_path / "nodata")))
    with pytest.raises(ValueError, match="both real successes and real failures"):
        calibrate_success(CalibrateConfig(checkpoint=str(tmp_path / "wm.pt"), data_dir=str(tmp_path / "data"),
                                          episodes=[0, 1], proprio=str(tmp_path / "proprio.pt"),
                                          out=str(tmp_path / "cal2" / "wm.pt")))


def test_script_fits_the_proprio_model_with_the_world_models_chunk_length(tmp_path, monkeypatch):
    import imagination.imagine
    from imagination.eval.calibrate import CalibrateConfig, calibrate_success

    fitted = []

    def short_fit(chunk_len):  # a short fit (the default takes ~15 s); record the chunk length it is given
        fitted.append(chunk_len)
        return ProprioConfig(chunk_len=chunk_len, hidden=16, layers=1, steps=10)

    monkeypatch.setattr(imagination.imagine, "ProprioConfig", short_fit)
    _write_data(tmp_path / "data", [True, False])
    wm = _wm()  # chunk length 4, not the proprio model's default 8
    _bias_success(wm, 1.0)
    wm.save(tmp_path / "wm.pt")
    result = calibrate_success(CalibrateConfig(checkpoint=str(tmp_path / "wm.pt"), data_dir=str(tmp_path / "data"),
                                               out=str(tmp_path / "cal" / "wm.pt")))
    assert fitted == [K] and len(result["episodes"]) == 2


def test_missing_outcome_names_the_outcome_the_data_lacks(tmp_path):
    from imagination.eval.calibrate import missing_outcome

    _write_data(tmp_path / "both", [True, False])
    _write_data(tmp_path / "wins", [True, True])
    _write_data(tmp_path / "losses", [False])
    assert missing_outcome(str(tmp_path / "both")) == ""
    assert missing_outcome(str(tmp_path / "wins")) == "the data has only successes"
    assert missing_outcome(str(tmp_path / "losses")) == "the data has only failures"
