"""Goal-predicate labels (robot_data.goal_labels): the goal parsed and refused, the sidecar written and read
back, and on real LIBERO one recorded expert episode per suite labelled by replay, whose predicates agree with
LIBERO's own success check at every step.

The pure tests need no simulator. The real ones record one short expert episode per suite in a camera-less env
(nothing rendered; ~3 s), write it to a one-episode dataset and label it (another env, ~3 s): ~12 s a suite.
"""
from __future__ import annotations

import os
from dataclasses import replace

import numpy as np
import pytest

from robot_data.goal_labels import (
    PREDICATES,
    GoalReplay,
    Predicate,
    before_actions,
    goal_label_path,
    load_goal_labels,
    parse_goal,
    read_goal_labels,
    write_goal_labels,
)

os.environ.setdefault("MUJOCO_GL", "egl")


# ---------------------------------------------------------------- the goal, parsed and refused
def test_parse_goal_keeps_the_conjuncts_in_order():
    goal = [["turnon", "flat_stove_1"], ["On", "moka_pot_1", "flat_stove_1_cook_region"]]
    predicates = parse_goal(goal, "libero_10 task 2")
    assert predicates == [Predicate("turnon", ("flat_stove_1",)),
                          Predicate("on", ("moka_pot_1", "flat_stove_1_cook_region"))]
    assert [str(p) for p in predicates] == ["(turnon flat_stove_1)", "(on moka_pot_1 flat_stove_1_cook_region)"]
    assert [p.progress_kind for p in predicates] == ["joint", "distance_m"]


def test_a_goal_without_an_evaluator_is_refused_with_one_clear_error():
    with pytest.raises(ValueError, match=r"libero_90 task 7: .*'stack', in \(stack a_1 b_1\), .*refused"):
        parse_goal([["on", "a_1", "b_1"], ["stack", "a_1", "b_1"]], "libero_90 task 7")
    with pytest.raises(ValueError, match=r"'not', in \(not \(open drawer_1\)\)"):  # a negation: no evaluator
        parse_goal([["not", ["open", "drawer_1"]]], "some task")
    with pytest.raises(ValueError, match=r"'on', in \(on a_1\), expects 2 object"):
        parse_goal([["on", "a_1"]], "some task")
    with pytest.raises(ValueError, match="one or more predicates"):
        parse_goal([], "some task")


@pytest.mark.libero
def test_every_task_of_every_suite_has_a_goal_with_evaluators(libero):
    from libero.libero.envs.bddl_utils import robosuite_parse_problem

    seen = set()
    for suite in ("libero_spatial", "libero_object", "libero_goal", "libero_10", "libero_90"):
        for task_id in range(libero.suite_info(suite).num_tasks):
            goal = robosuite_parse_problem(libero.get_task(suite, task_id).bddl_file)["goal_state"]
            seen |= {p.name for p in parse_goal(goal, f"{suite} task {task_id}")}
    assert seen == set(PREDICATES) - {"up"}  # LIBERO's "up" is in no suite's goal


# ---------------------------------------------------------------- the sidecar
def test_written_labels_read_back(tmp_path):
    predicates = [Predicate("open", ("wooden_cabinet_1_middle_region",)), Predicate("in", ("bowl_1", "basket_1"))]
    holds = np.array([[False, False], [True, False], [True, True]])
    progress = np.array([[0.01, 0.3], [0.02, 0.2], [0.03, np.nan]], np.float32)
    replay = GoalReplay(predicates, holds, progress, np.array([False, False]), np.array([0.0, 0.4], np.float32))
    path = goal_label_path(tmp_path, 4)
    write_goal_labels(path, replay, {"task_id": 0, "length": 3, "rows": 3})
    assert path == tmp_path / "goal_labels" / "episode_000004.npz"
    labels = read_goal_labels(tmp_path, 4)
    assert labels is not None and read_goal_labels(tmp_path, 5) is None
    np.testing.assert_array_equal(labels["holds"], holds)
    np.testing.assert_array_equal(labels["progress"], progress)  # nan included
    assert labels["predicates"] == ["(open wooden_cabinet_1_middle_region)", "(in bowl_1 basket_1)"]
    assert labels["info"]["progress"] == ["joint", "distance_m"] and labels["info"]["rows"] == 3
    before, before_progress = before_actions(labels)
    np.testing.assert_array_equal(before, [[False, False], [False, False], [True, False]])
    assert before_progress[0, 1] == pytest.approx(0.4)
    with pytest.raises(ValueError, match="nothing to write"):
        write_goal_labels(path, replace(replay, holds=None, reason="diverged: ..."), {})
    path.write_bytes(path.read_bytes()[:40])  # a cut file: one clear error naming it
    with pytest.raises(ValueError, match="episode_000004.npz: not a readable goal labels file"):
        load_goal_labels(path)


# ---------------------------------------------------------------- real LIBERO
# The shortest expert task of each suite (~80-160 steps); LIBERO-10's has two stages: the knob, then the pot.
SHORT = {"libero_spatial": 0, "libero_object": 0, "libero_goal": 0, "libero_10": 2}
GOALS = {"libero_spatial": ["(on akita_black_bowl_1 plate_1)"],
         "libero_object": ["(in alphabet_soup_1 basket_1_contain_region)"],
         "libero_goal": ["(open wooden_cabinet_1_middle_region)"],
         "libero_10": ["(turnon flat_stove_1)", "(on moka_pot_1 flat_stove_1_cook_region)"]}


@pytest.mark.slow
@pytest.mark.libero
@pytest.mark.parametrize("suite", list(SHORT))
def test_predicates_agree_with_libero_success_on_a_recorded_episode(libero, suite, tmp_path):
    from robot_data.collection import PlanItem, record_episode
    from robot_data.dataset import DatasetConfig, EpisodeDataset, EpisodeWriter
    from robot_data.goal_labels import label_goal_dataset, replay_goal_labels
    from robot_data.sim_labels import replay_env

    task = SHORT[suite]
    env = replay_env(suite, task)  # camera-less: the recording needs no pixels, only its actions and flags
    try:
        episode = record_episode(env, PlanItem(task, 0, 0, "", 11), post_success_steps=3)
        T = len(episode)
        assert episode.episode_success and episode.success[-1]
        with EpisodeWriter(tmp_path, DatasetConfig(views=("agentview",), image_size=(16, 16))) as writer:
            writer.append(replace(episode, frames={"agentview": np.zeros((T, 16, 16, 3), np.uint8)}))
        tampered = None
        if suite == "libero_goal":  # a replay pushed off its recording: no labels, or those of the steps before
            meta = EpisodeDataset(tmp_path, verify=False).meta[0]
            action = episode.action.copy()
            action[10:20, 0] = np.where(action[10:20, 0] > 0, -0.5, 0.5)  # 10 steps the other way in x
            assert replay_goal_labels(env, meta, action, episode.state, episode.success).holds is None
            tampered = replay_goal_labels(env, meta, action, episode.state, episode.success, keep_prefix=True)
    finally:
        env.close()

    stats = label_goal_dataset(tmp_path, progress=False)
    assert stats["labelled"] == 1 and stats["skipped"] == {} and stats["max_state_diff"] < 1e-4, stats
    labels = read_goal_labels(tmp_path, 0)
    assert labels is not None and labels["predicates"] == GOALS[suite]
    holds, progress = labels["holds"], labels["progress"]
    assert holds.shape == progress.shape == (T, len(GOALS[suite])) and labels["info"]["rows"] == T
    # LIBERO's check is the conjunction: where it is true every predicate holds, and where one fails it is false
    np.testing.assert_array_equal(holds.all(axis=1), episode.success)
    assert holds[episode.success].all()
    assert not labels["start_holds"].all()  # the task is not solved at the start
    assert np.isfinite(progress).all() and np.isfinite(labels["start_progress"]).all()
    for p, kind in enumerate(labels["info"]["progress"]):
        if kind == "distance_m":  # the object ends much nearer its target (its origin may rest some cm above it)
            assert progress[-1, p] < 0.6 * labels["start_progress"][p] and progress[-1, p] < 0.15
        else:  # a joint: the fixture moved
            assert abs(progress[-1, p] - labels["start_progress"][p]) > 1e-3
    if len(GOALS[suite]) > 1:  # multi-stage: the knob holds on its own first, then both
        first = [int(np.argmax(holds[:, p])) for p in range(holds.shape[1])]
        assert first[0] < first[1] and holds[first[0]:, 0].all()
    if tampered is not None:
        row = int(tampered.reason.split("at row ")[1])  # the first row whose robot state differs
        assert tampered.reason.startswith("diverged") and tampered.holds is not None and 10 < row < T
        np.testing.assert_array_equal(tampered.holds, holds[:row - 1])  # after action row-1 it already differed
    assert label_goal_dataset(tmp_path, progress=False)["already"] == 1  # resumable
    assert EpisodeDataset(tmp_path, verify=False).meta[0].success
