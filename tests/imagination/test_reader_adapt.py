"""The goal reader adapted to imagined frames (imagination/reader_adapt.py), on the square world: a reader trained on
real frames, a tiny world model, and every imagined frame paired with the labels of the recorded step it stands for."""
import dataclasses
import json

import numpy as np
import pytest
import torch

from imagination.env import ImaginationConfig
from imagination.episodes import StartEpisode, load_start_episodes
from imagination.imagine import open_imagination
from imagination.keyframes import Keyframe
from imagination.reader_adapt import (
    ReaderAdaptConfig,
    adapt_goal_reader,
    adapt_starts,
    imagine_frames,
    imagined_labels,
    labelled_episodes,
)
from tests.world_models.conftest import SIZE, tiny_model_config, write_square_dataset
from tests.world_models.test_goal_reader import TINY, label_squares
from world_models.goal_reader import GoalReader
from world_models.goal_reader_training import TrainGoalReaderConfig, train_goal_reader
from world_models.model import WorldModel


def _episode(T: int, close: int = -1, release: int = -1) -> StartEpisode:
    action = np.zeros((T, 7), np.float32)
    action[:, 6] = -1.0
    if close >= 0:
        action[close:release if release >= 0 else T, 6] = 1.0
    return StartEpisode(frames=np.zeros((T, 1, SIZE, SIZE, 3), np.uint8), state=np.zeros((T, 8), np.float32),
                        action=action, instruction="x", task_id=0)


def test_starts_come_before_the_release_and_before_the_end_of_an_episode_that_never_lets_go():
    placed, held = _episode(80, close=20, release=60), _episode(50, close=10)
    starts = adapt_starts([placed, held], leads=[24, 8], end_leads=[16], align=8)
    # the placed episode: 60-24=36 and 60-8=52, rounded down to 32 and 48; the held one: 50-16=34 -> 32
    assert starts == [Keyframe(0, 32), Keyframe(0, 48), Keyframe(1, 32)]
    assert adapt_starts([placed], leads=[], end_leads=[16], align=1) == []  # it released: no end start
    assert adapt_starts([_episode(10)], leads=[8], end_leads=[16], align=1) == []  # too short for the lead


@pytest.fixture(scope="module")
def square_world(tmp_path_factory):
    torch.set_num_threads(1)
    root = tmp_path_factory.mktemp("reader_adapt")
    data = write_square_dataset(root / "data", episodes=8, T=24, seed=3)
    label_squares(data)
    train_goal_reader(TrainGoalReaderConfig(data_dirs=[str(data)], out_dir=str(root / "reader"), holdout_every=0,
                                            reader=TINY), progress_bar=False)
    torch.manual_seed(0)
    WorldModel(tiny_model_config()).save(root / "wm.pt")
    return root, data


def test_every_imagined_frame_follows_the_recorded_action_it_is_labelled_with(square_world):
    root, data = square_world
    episodes, labels = labelled_episodes([str(data)], ["agentview"])
    assert len(episodes) == len(labels) == 8
    env = open_imagination(str(root / "wm.pt"), episodes, num_envs=3,
                           config=ImaginationConfig(max_steps=10_000, success_threshold=2.0))
    judge = env.reward
    starts = [Keyframe(0, 4), Keyframe(1, 16), Keyframe(2, 0), Keyframe(3, 20)]
    frames = imagine_frames(env, starts, chunks=2, view=0, seed=0)
    assert env.reward is judge  # the tap is taken off again
    K = env.K
    want = []  # each start: the actions it imagines through, those inside the recording (24 steps)
    for kf in starts:
        want += [(kf.episode, a) for a in range(kf.t, kf.t + 2 * K) if a < 24]
    assert sorted(zip(frames["episode"].tolist(), frames["after"].tolist())) == sorted(want)
    assert frames["images"].shape == (len(want), SIZE, SIZE, 3) and frames["images"].dtype == np.uint8
    pairs = imagined_labels(frames, episodes, labels, slots=1)
    for n in range(len(pairs["images"])):  # the recording's label after the same action
        e, a = int(frames["episode"][n]), int(frames["after"][n])
        assert pairs["holds"][n, 0] == bool(labels[e]["holds"][a, 0])
        np.testing.assert_allclose(pairs["progress"][n, 0], labels[e]["progress"][a, 0])


def test_the_adapted_reader_reads_imagined_frames_nearer_their_labels_and_is_saved(square_world, tmp_path):
    root, data = square_world
    cfg = ReaderAdaptConfig(reader=str(root / "reader" / "reader.pt"), world_model=str(root / "wm.pt"),
                            data_dirs=[str(data)], out_dir=str(tmp_path / "adapted"), leads=[8], end_leads=[16],
                            align=4, imagined_steps=8, steps=200, lr=1e-3, num_envs=4, num_threads=1)
    result = adapt_goal_reader(cfg)
    saved = json.loads((tmp_path / "adapted" / "adapt.json").read_text())
    assert saved["starts"] == 8 and saved["imagined_frames"] == 8 * 8 and saved["real_frames"] == 8 * 24
    # an untrained world model imagines noise: the real-frame reader misreads it, the adapted one learns its labels
    before, after = result["before"]["imagined"], result["after"]["imagined"]
    assert after["progress_abs_error_median"] < before["progress_abs_error_median"]
    adapted, extra = GoalReader.load(tmp_path / "adapted" / "reader.pt")
    original, _ = GoalReader.load(root / "reader" / "reader.pt")
    assert extra["adapted_from"] == cfg.reader
    torch.testing.assert_close(adapted.progress_mean, original.progress_mean)  # the progress scale is kept
    assert any(not torch.equal(a, b) for a, b in zip(adapted.state_dict().values(), original.state_dict().values()))


def test_bad_settings_name_their_field(square_world, tmp_path):
    root, data = square_world
    good = ReaderAdaptConfig(reader=str(root / "reader" / "reader.pt"), world_model=str(root / "wm.pt"),
                             data_dirs=[str(data)], out_dir=str(tmp_path))
    with pytest.raises(ValueError, match="imagined_share"):
        adapt_goal_reader(dataclasses.replace(good, imagined_share=0.0))
    with pytest.raises(ValueError, match="data_dirs"):
        adapt_goal_reader(dataclasses.replace(good, data_dirs=[]))
    with pytest.raises(FileNotFoundError, match="world_model"):
        adapt_goal_reader(dataclasses.replace(good, world_model=str(tmp_path / "none.pt")))
    unlabelled = write_square_dataset(tmp_path / "unlabelled", episodes=2, T=24, seed=5)
    with pytest.raises(ValueError, match="no episode with goal labels"):
        labelled_episodes([str(unlabelled)], ["agentview"])
    assert load_start_episodes(str(unlabelled), ["agentview"])  # the data itself loads: only the labels are missing


def test_a_recorded_chunk_repeats_the_last_action_past_the_recordings_end():
    ep = _episode(10, close=3, release=8)
    ep.action[:, 0] = np.arange(10)
    np.testing.assert_array_equal(ep.recorded_chunk(2, 4), ep.action[2:6])
    tail = ep.recorded_chunk(8, 4)  # two recorded actions, then the last one twice
    np.testing.assert_array_equal(tail[:, 0], [8, 9, 9, 9])
    np.testing.assert_array_equal(ep.recorded_chunk(12, 3), np.repeat(ep.action[-1:], 3, 0))
    assert tail.dtype == np.float32 and tail.shape == (4, 7)
