"""The grasp judge as a trained artifact: fitted by its own step into one file, loaded by path."""
import os
from dataclasses import replace

import numpy as np
import pytest

from imagination.env import ImaginationConfig
from imagination.rewards.grasp import (
    JUDGE_FILE,
    FitGraspJudgeConfig,
    fit_grasp_judge,
    judge_for_run,
    load_grasp_judge,
)
from tests.episodes import grasp_label_dir
from tests.imagination.conftest import start_episodes
from world_models.grasp_point import GraspPointClassifier, GraspPointConfig, fit_grasp_point


def _labelled(episodes):
    for e in episodes:
        T = len(e.action)
        e.sim = {"object_pos": np.tile([0.1, 0.0, 0.9], (T, 1)), "target_pos": np.tile([0.3, 0.0, 0.9], (T, 1)),
                 "grasped": np.zeros(T, bool)}
    return episodes


def test_the_fit_step_writes_what_the_judge_was_fit_on_and_predicts_as_a_fit_in_place(tmp_path, capsys):
    labels = grasp_label_dir(tmp_path / "labels")
    out = tmp_path / "judge" / "judge.pt"
    record = fit_grasp_judge(FitGraspJudgeConfig(label_dirs=[labels], out=str(out)))
    assert "in-sample AUC" in capsys.readouterr().out
    assert record["episodes"] == 60 and record["label_dirs"] == [labels] and record["until"] == "close"
    assert sum(v["episodes"] for v in record["per_task"].values()) == 60
    assert sum(v["successes"] for v in record["per_task"].values()) == record["successes"] > 0
    assert 0.5 < record["train_auc"] <= 1.0
    clf, extra = GraspPointClassifier.load(out)
    assert extra["fitted_on"] == record
    judge = load_grasp_judge(str(out), _labelled(start_episodes()), 2)
    rng = np.random.default_rng(0)
    feats, tasks = rng.normal(0, 0.03, (20, 8)), rng.integers(0, 3, 20)
    np.testing.assert_array_equal(judge.classifier.predict(feats, tasks),
                                  fit_grasp_point([], [labels]).predict(feats, tasks))


def test_a_run_fits_its_judge_once_and_refits_when_its_data_changes(tmp_path):
    labels, more = grasp_label_dir(tmp_path / "labels"), grasp_label_dir(tmp_path / "more", seed=1)
    cfg = ImaginationConfig(reward="grasp", grasp_label_dirs=[labels])
    got = judge_for_run(cfg, tmp_path / "run")
    path = tmp_path / "run" / JUDGE_FILE
    assert got.grasp_judge == str(path) and path.is_file()
    os.utime(path, (1, 1))
    assert judge_for_run(cfg, tmp_path / "run").grasp_judge == str(path) and path.stat().st_mtime == 1  # reused
    # a per-task offset applies on load: the same file serves
    biased = replace(cfg, grasp_point=GraspPointConfig(task_bias=[0.5] * 10))
    assert judge_for_run(biased, tmp_path / "run").grasp_judge == str(path) and path.stat().st_mtime == 1
    judge_for_run(replace(cfg, grasp_label_dirs=[labels, more]), tmp_path / "run")  # other data: fit again
    assert path.stat().st_mtime > 1 and GraspPointClassifier.load(path)[1]["fitted_on"]["episodes"] == 120
    # another reward, or a judge file given, is left as it is
    assert judge_for_run(ImaginationConfig(), tmp_path / "x") == ImaginationConfig()
    given = replace(cfg, grasp_judge="mine.pt")
    assert judge_for_run(given, tmp_path / "x") is given and not (tmp_path / "x").exists()


def test_loading_refuses_fit_settings_the_file_was_not_fit_with(tmp_path):
    labels = grasp_label_dir(tmp_path / "labels")
    out = str(tmp_path / "judge.pt")
    fit_grasp_judge(FitGraspJudgeConfig(label_dirs=[labels], out=out))
    eps = _labelled(start_episodes())
    with pytest.raises(ValueError, match="grasp_point.ensemble: 3, but .*judge.pt was fit with 1"):
        load_grasp_judge(out, eps, 1, cfg=GraspPointConfig(ensemble=3))
    with pytest.raises(ValueError, match="was fit for grasp_until 'close'"):
        load_grasp_judge(out, eps, 1, until="release")
    bias = [0.0] * 10
    bias[1] = -2.0
    judge = load_grasp_judge(out, eps, 1, cfg=GraspPointConfig(task_bias=bias))
    plain = load_grasp_judge(out, eps, 1)
    feats = np.zeros((2, 8))
    p, q = judge.classifier.predict(feats, np.array([0, 1])), plain.classifier.predict(feats, np.array([0, 1]))
    assert p[0] == q[0] and p[1] < q[1]
