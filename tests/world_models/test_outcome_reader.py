"""The outcome reader on the square world: an episode succeeds when its square reaches the right quarter; its
"gripper" closes at a step of its own, the outcome window counts from there."""
import numpy as np
import pytest
import torch

from robot_data.dataset import DatasetConfig, EpisodeWriter
from tests.world_models.conftest import SIZE, square_episode
from world_models.goal_reader import GoalReader, GoalReaderConfig
from world_models.goal_reader_training import TrainGoalReaderConfig, train_goal_reader
from world_models.outcome_reader import OUTCOME_PREDICATE, outcome_frames, outcome_window_start

TINY = GoalReaderConfig(channels=[8, 8], keypoints=8, steps=300, batch_size=32)
T = 24


def close_at(episode: int) -> int:
    return 4 + episode % 5  # steps 4-8: the windows differ from episode to episode


@pytest.fixture(scope="module")
def squares(tmp_path_factory):
    root = tmp_path_factory.mktemp("outcome") / "data"
    rng = np.random.default_rng(2)
    with EpisodeWriter(root, DatasetConfig(views=("agentview",), image_size=(SIZE, SIZE), fps=10)) as w:
        for i in range(20):
            ep = square_episode(rng, T)
            ep.action[close_at(i):, 6] = 1.0  # the gripper shuts here and stays shut
            w.append(ep)
    return root


def test_the_window_counts_from_the_first_close_and_every_frame_carries_its_episodes_outcome(squares):
    from robot_data.dataset import EpisodeDataset

    data = outcome_frames([str(squares)], "agentview", [-2, 10])
    ds = EpisodeDataset(squares, verify=False)
    assert data["predicates"] == {0: [OUTCOME_PREDICATE]} and data["suite"] == "synthetic"
    assert data["holds"].shape == (len(data["images"]), 1) and np.isnan(data["progress"]).all()
    for e in range(len(ds)):
        ep = ds[e]
        rows = data["episode"] == e
        t0 = close_at(e)
        assert outcome_window_start(ep.action) == t0
        np.testing.assert_array_equal(data["step"][rows], np.arange(-2, 11))
        np.testing.assert_array_equal(data["images"][rows], ep.frames["agentview"][t0 - 2:t0 + 11])
        assert (data["holds"][rows, 0] == ep.episode_success).all() and data["success"][e] == ep.episode_success
    assert 0 < data["success"].sum() < len(ds)  # both outcomes: the reader has something to tell apart
    # a window running past an episode's end keeps the frames it has; one wholly past it is skipped
    late = outcome_frames([str(squares)], "agentview", [10, 100])
    assert all((late["step"][late["episode"] == e] == np.arange(10, T - close_at(e))).all() for e in range(20))
    with pytest.raises(ValueError, match=r"data_dirs: no episode .* has frames in the outcome window \[100, 200\]"):
        outcome_frames([str(squares)], "agentview", [100, 200])


def test_an_episode_that_never_closes_the_gripper_counts_from_half_way():
    assert outcome_window_start(np.zeros((30, 7))) == 15


def test_the_outcome_reader_ranks_held_out_episodes_late_in_the_window_and_loads_as_a_goal_reader(squares, tmp_path):
    torch.set_num_threads(1)
    cfg = TrainGoalReaderConfig(data_dirs=[str(squares)], out_dir=str(tmp_path), holdout_every=4, target="outcome",
                                outcome_window=[0, 15], reader=TINY)
    result = train_goal_reader(cfg, progress_bar=False)
    assert result["target"] == "outcome" and result["outcome_window"] == [0, 15]
    by_step = result["heldout"]["within_task_auc_by_step"]
    assert sorted(by_step) == [0, 8]
    # the last frames show where the square went: the verdict there tells held-out successes from failures
    assert by_step[8] > 0.75, by_step
    reader, extra = GoalReader.load(tmp_path / "reader.pt")
    assert reader.predicates == {0: [OUTCOME_PREDICATE]} and extra["trained_on"]["target"] == "outcome"
    p, _ = reader.read(np.zeros((3, SIZE, SIZE, 3), np.uint8), np.zeros(3, np.int64))
    assert p.shape == (3, 1) and ((p >= 0) & (p <= 1)).all()


def test_a_bad_target_or_window_is_refused_by_name(squares, tmp_path):
    with pytest.raises(ValueError, match=r"target: expected 'goal' or 'outcome', got 'value'"):
        train_goal_reader(TrainGoalReaderConfig(data_dirs=[str(squares)], out_dir=str(tmp_path), target="value"))
    with pytest.raises(ValueError, match=r"outcome_window: expected \[first, last\] .* got \[8, 2\]"):
        outcome_frames([str(squares)], "agentview", [8, 2])
