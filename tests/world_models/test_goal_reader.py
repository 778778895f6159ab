"""The goal reader on the square world: the goal "(on square right_edge)" holds when the square touches the right
edge, its progress is the square's distance from it. Labels are written in the goal-label layout, as
scripts/label_goals.py writes them from LIBERO replays."""
import dataclasses

import numpy as np
import pytest
import torch

from robot_data.dataset import EpisodeDataset
from robot_data.goal_labels import GoalReplay, Predicate, goal_label_path, write_goal_labels
from tests.world_models.conftest import SIZE, SQ, write_square_dataset
from world_models.goal_reader import (
    GoalReader,
    GoalReaderConfig,
    fit_goal_reader,
)
from world_models.goal_reader_training import (
    TrainGoalReaderConfig,
    goal_frames,
    progress_anchors,
    train_goal_reader,
)

GOAL = Predicate("on", ("square", "right_edge"))
TINY = GoalReaderConfig(channels=[8, 8], keypoints=8, steps=300, batch_size=32)


def _square_x(frames: np.ndarray) -> np.ndarray:
    """Left column of the square in each frame [T, H, W, 3]."""
    cols = (frames[..., 0] > 150).any(axis=1)  # [T, W]
    return cols.argmax(axis=1).astype(np.float32)


def label_squares(root) -> None:
    ds = EpisodeDataset(root, verify=False)
    for i in range(len(ds)):
        x = _square_x(ds[i].frames["agentview"])  # row t: before action t
        holds = (x >= SIZE - SQ - 1)[:, None]
        progress = ((SIZE - SQ - x) / 100)[:, None].astype(np.float32)  # "metres" from the edge
        # the layout's rows are after each action: the next frame's, the last one repeated
        after = lambda a: np.concatenate([a[1:], a[-1:]])  # noqa: E731
        replay = GoalReplay([GOAL], after(holds), after(progress), holds[0], progress[0])
        goal_label_path(root, i).parent.mkdir(exist_ok=True)
        write_goal_labels(goal_label_path(root, i), replay, {"task_id": 0, "suite": "synthetic"})


@pytest.fixture(scope="module")
def labelled(tmp_path_factory):
    root = write_square_dataset(tmp_path_factory.mktemp("goal") / "data", episodes=16, T=24, seed=3)
    label_squares(root)
    return root


def test_goal_frames_align_labels_with_the_frames_they_describe(labelled):
    data = goal_frames([str(labelled)], "agentview")
    assert data["images"].shape == (16 * 24, SIZE, SIZE, 3) and data["holds"].shape == (16 * 24, 1)
    assert data["predicates"] == {0: [str(GOAL)]} and data["suite"] == "synthetic"
    x = _square_x(data["images"])
    np.testing.assert_array_equal(data["holds"][:, 0], x >= SIZE - SQ - 1)  # frame t, labels before action t
    np.testing.assert_allclose(data["progress"][:, 0], (SIZE - SQ - x) / 100, atol=1e-6)
    assert 0 < data["holds"].sum() < len(x)


def test_the_reader_reads_the_goal_on_held_out_episodes_and_loads_as_trained(labelled, tmp_path):
    torch.set_num_threads(1)
    result = train_goal_reader(TrainGoalReaderConfig(data_dirs=[str(labelled)], out_dir=str(tmp_path),
                                                     holdout_every=4, reader=TINY), progress_bar=False)
    held = result["heldout"]
    assert held["episodes"] == 4 and result["train"]["episodes"] == 12
    assert held["frame_auc"] > 0.9, held  # a frame where the square touches the edge reads as the goal
    assert held["progress_abs_error_median"][0] < 0.03  # under 3 px of 16
    reader, extra = GoalReader.load(tmp_path / "reader.pt")
    assert extra["trained_on"]["heldout"]["frame_auc"] == held["frame_auc"]
    data = goal_frames([str(labelled)], "agentview")
    p, prog = reader.read(data["images"][:20], data["task_id"][:20])
    assert p.shape == (20, 1) and ((p >= 0) & (p <= 1)).all() and np.isfinite(prog).all()
    np.testing.assert_allclose(reader.goal_prob(data["images"][:20], data["task_id"][:20]), p[:, 0])
    with pytest.raises(ValueError, match=r"goal reader: it knows the goal predicates of synthetic tasks \[0\], "
                                         r"not of tasks \[3\]"):
        reader.read(data["images"][:2], np.array([0, 3]))
    # the progress anchors travel with the file: the square's distance on first frames, and where it touches
    assert reader.progress_anchors is not None
    start, goal = reader.progress_anchors[0, 0]
    first = np.r_[True, data["episode"][1:] != data["episode"][:-1]]
    assert start == pytest.approx(np.median(data["progress"][first & ~data["holds"][:, 0], 0]))
    assert goal == pytest.approx(np.median(data["progress"][data["holds"][:, 0], 0])) and goal < start


def test_tasks_with_fewer_predicates_get_nan_in_the_other_slots():
    reader = GoalReader(TINY, "libero_10", {0: ["(on a b)", "(on c d)"], 1: ["(open e)"]}, SIZE)
    images = np.zeros((2, SIZE, SIZE, 3), np.uint8)
    holds, progress = reader.read(images, np.array([0, 1]))
    assert np.isfinite(holds[0]).all() and np.isfinite(holds[1, 0]) and np.isnan(holds[1, 1])
    assert np.isnan(progress[1, 1])
    p = reader.goal_prob(images, np.array([0, 1]))
    assert p[0] == pytest.approx(holds[0].prod()) and p[1] == pytest.approx(holds[1, 0])  # a product over the goal
    with pytest.raises(ValueError, match="expected images uint8"):
        reader.read(images[..., :2], np.array([0, 1]))


def test_a_read_in_batches_is_the_read_in_one_pass():
    """read() runs `batch` frames at a time (a dataset's every frame at once ran a 24 GiB machine out of memory on
    LIBERO-10): each frame keeps its own task's slots and scale, whatever batch it falls in."""
    torch.manual_seed(0)
    reader = GoalReader(TINY, "libero_10", {0: ["(on a b)", "(on c d)"], 1: ["(open e)"]}, SIZE)
    reader.progress_std.uniform_(0.5, 2.0)  # per task: a frame read with another task's row would show
    reader.progress_mean.uniform_(-1.0, 1.0)
    images = np.random.default_rng(0).integers(0, 256, (11, SIZE, SIZE, 3), dtype=np.uint8)
    tasks = np.array([0, 1, 1, 0, 1, 0, 0, 1, 0, 1, 1])
    whole = reader.read(images, tasks, batch=len(tasks))
    for batch in (1, 3, 4):
        parts = reader.read(images, tasks, batch=batch)
        for a, b in zip(parts, whole):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    holds, progress = reader.read(images[:0], tasks[:0])
    assert holds.shape == progress.shape == (0, 2)
    with pytest.raises(ValueError, match="batch: expected a number of frames >= 1"):
        reader.read(images, tasks, batch=0)


def test_progress_anchors_place_a_read_between_the_start_and_the_goal():
    reader = GoalReader(TINY, "libero_10", {0: ["(on a b)", "(open e)"], 3: ["(open e)"]}, SIZE)
    task = np.array([0, 0, 0, 0, 3, 3])
    episode = np.array([0, 0, 0, 1, 2, 2])
    holds = np.array([[0, 0], [0, 0], [1, 1], [0, 0], [0, 0], [0, 0]], bool)  # task 3's drawer never opened
    progress = np.array([[0.3, 0.0], [0.2, -0.05], [0.04, -0.15], [0.5, 0.0], [0.0, np.nan], [-0.01, np.nan]])
    reader.progress_anchors = progress_anchors(reader, task, episode, holds, progress)
    np.testing.assert_allclose(reader.progress_anchors[0], [[0.4, 0.04], [0.0, -0.15]])  # median of the 2 starts
    frac = reader.goal_fraction(np.array([[0.4, 0.0], [0.22, -0.075], [0.0, -0.3]]), np.zeros(3, int))
    np.testing.assert_allclose(frac, [[0.0, 0.0], [0.5, 0.5], [1.0, 1.0]])  # clipped past the goal
    with pytest.raises(ValueError, match=r"task 3's predicates \['\(open e\)'\] have no progress anchors"):
        reader.goal_fraction(np.zeros((1, 2)), np.array([3]))
    reader.progress_anchors = None
    with pytest.raises(ValueError, match="no progress anchors .* train it again"):
        reader.goal_fraction(np.zeros((1, 2)), np.array([0]))


def test_fine_tuning_draws_only_the_weighted_frames_and_keeps_the_readers_scale(labelled):
    data = goal_frames([str(labelled)], "agentview")
    few = dataclasses.replace(TINY, steps=20)
    first = fit_goal_reader(data["images"], data["task_id"], data["holds"], data["progress"], "synthetic",
                            data["predicates"], few, progress_bar=False)
    # every frame but the first two weighted 0: those two are all it is fit on; their labels are set far off, so the
    # fit moves the progress read on them and the scale (progress_mean/std) stays the first reader's
    progress = data["progress"].copy()
    progress[:2] = 5.0
    weights = np.zeros(len(progress))
    weights[:2] = 1.0
    tuned = fit_goal_reader(data["images"], data["task_id"], data["holds"], progress, "synthetic",
                            data["predicates"], dataclasses.replace(few, steps=60, lr=3e-3), progress_bar=False,
                            init=first, weights=weights)
    torch.testing.assert_close(tuned.progress_mean, first.progress_mean)
    torch.testing.assert_close(tuned.progress_std, first.progress_std)
    before, after = first.read(data["images"][:2], data["task_id"][:2])[1], tuned.read(data["images"][:2],
                                                                                        data["task_id"][:2])[1]
    assert np.abs(after - 5.0).max() < np.abs(before - 5.0).min()
    with pytest.raises(ValueError, match="weights"):
        fit_goal_reader(data["images"], data["task_id"], data["holds"], progress, "synthetic", data["predicates"],
                        few, progress_bar=False, weights=np.zeros(len(progress)))
    with pytest.raises(ValueError, match="init"):
        fit_goal_reader(data["images"], data["task_id"], data["holds"], progress, "libero_10", data["predicates"],
                        few, progress_bar=False, init=first)
