"""bench/object_reader.py's choice of protocol and tasks: a suite's protocol, the tasks a grasp recipe imagines, and
one clear error for a recipe whose judge reads no object position or for inputs not built yet."""
import pytest

import bench.object_reader as object_reader


def test_a_recipe_that_pays_the_goal_is_refused(capsys):
    with pytest.raises(SystemExit):
        object_reader.main(["--suite", "libero_goal", "--recipe", "goal_window"])
    assert "--recipe: expected a recipe with reward grasp" in capsys.readouterr().err


def test_missing_inputs_name_the_command_that_builds_them(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)  # the suite's root (outputs/bench/...) holds nothing here
    assert object_reader.main(["--suite", "libero_goal", "--recipe", "goal_grasp"]) == 2
    err = capsys.readouterr().err
    assert "outputs/bench/rl_gain_v2_goal/data" in err
    assert "python bench/rl_gain.py --suite libero_goal --recipe goal_grasp builds them" in err



def test_a_near_miss_plan_is_read_from_its_own_folder(tmp_path, monkeypatch, capsys):
    """--near-miss-kinds points the judge check at the grasps bench/rl_gain.py simulated with that plan."""
    monkeypatch.chdir(tmp_path)
    assert object_reader.main(["--suite", "libero_spatial", "--recipe", "spatial_grasp",
                               "--near-miss-kinds", "near_miss"]) == 2
    err = capsys.readouterr().err
    assert "outputs/bench/rl_gain_v2/near_miss_labels_s16_near_miss" in err
    assert "--recipe spatial_grasp --near-miss-kinds near_miss builds them" in err


def test_judged_episodes_keep_only_the_tasks_asked(tmp_path, monkeypatch):
    """Episodes of other tasks (LIBERO-Goal's drawers: no object to read) are not judged."""
    import numpy as np

    import robot_data.sim_labels as sim_labels
    from robot_data.dataset import DatasetConfig, Episode, EpisodeWriter

    T = 4
    with EpisodeWriter(str(tmp_path / "data"), DatasetConfig(views=("agentview",), image_size=(8, 8))) as w:
        for task in (0, 2, 2):
            w.append(Episode(frames={"agentview": np.full((T, 8, 8, 3), task, np.uint8)},
                             state=np.zeros((T, 8), np.float32), action=np.zeros((T, 7), np.float32),
                             reward=np.zeros(T, np.float32), success=np.zeros(T, bool), instruction=f"task {task}",
                             suite="libero_goal", task_id=task, source="expert"))
    labels = {"object_pos": np.ones((T, 3)), "target_pos": np.zeros((T, 3))}
    monkeypatch.setattr(sim_labels, "read_sim_labels", lambda root, i: labels)
    got = object_reader.judged_episodes([str(tmp_path / "data")], "agentview", [2])
    assert got["task"] == [2, 2] and all(int(im.max()) == 2 for im in got["image"])
    assert len(object_reader.judged_episodes([str(tmp_path / "data")], "agentview")["task"]) == 3  # () = every task
