"""bench/goal_judge.py end to end on the square world: a goal reader trained on labelled episodes, a tiny world
model, and other episodes scored on real frames, imagined frames and the success head."""
import json

import numpy as np
import pytest
import torch

from bench import goal_judge
from tests.world_models.conftest import tiny_model_config, write_square_dataset
from tests.world_models.test_goal_reader import TINY, label_squares
from world_models.goal_reader_training import TrainGoalReaderConfig, train_goal_reader
from world_models.model import WorldModel


def test_the_bench_scores_every_episode_three_ways_and_prints_its_figures(tmp_path, capsys):
    torch.set_num_threads(1)
    train = write_square_dataset(tmp_path / "train", episodes=12, T=24, seed=3)
    label_squares(train)
    train_goal_reader(TrainGoalReaderConfig(data_dirs=[str(train)], out_dir=str(tmp_path / "reader"),
                                            holdout_every=0, reader=TINY), progress_bar=False)
    scored = write_square_dataset(tmp_path / "scored", episodes=10, T=20, seed=4)
    torch.manual_seed(0)
    WorldModel(tiny_model_config()).save(tmp_path / "wm.pt")
    code = goal_judge.main(["--reader", str(tmp_path / "reader" / "reader.pt"), "--world-model",
                            str(tmp_path / "wm.pt"), "--data", str(scored), "--out-dir", str(tmp_path / "out")])
    out = capsys.readouterr().out
    assert code in (0, 1) and "BENCH goal_judge episodes=10 " in out and out.strip().endswith(("PASS", "FAIL"))
    saved = json.loads((tmp_path / "out" / "goal_judge.json").read_text())
    assert len(saved["records"]) == 10
    assert set(saved["auc"]) == {f"{stage}_{s}" for stage in ("recorded", "imagined") for s in
                                 ("goal_last", "goal_max", "progress_last")} | {"head_last", "head_max"}
    for key in ("recorded_goal_last", "recorded_goal_max", "imagined_goal_last", "head_max"):
        p = np.array([r[key] for r in saved["records"]])
        assert ((p >= 0) & (p <= 1)).all(), key
    rec = [r["recorded_goal_last"] <= r["recorded_goal_max"] for r in saved["records"]]
    assert all(rec)  # the last frame is one of the frames the highest is taken over
    if sum(r["success"] for r in saved["records"]) not in (0, 10):  # both outcomes: an AUC exists
        assert 0 <= saved["auc"]["recorded_goal_last"]["point"] <= 1
    # only the last 8 steps imagined, from a keyframe near each episode's end
    args = ["--reader", str(tmp_path / "reader" / "reader.pt"), "--world-model", str(tmp_path / "wm.pt"), "--data",
            str(scored), "--out-dir", str(tmp_path / "short"), "--last-steps", "8"]
    assert goal_judge.main(args) in (0, 1) and "last_steps=8 " in capsys.readouterr().out
    assert json.loads((tmp_path / "short" / "goal_judge.json").read_text())["last_steps"] == 8
    # a reader compared with itself on the same imagined frames: paired, so every difference is exactly 0
    same = args[:-4] + ["--out-dir", str(tmp_path / "same"), "--last-steps", "8", "--compare-reader",
                        str(tmp_path / "reader" / "reader.pt")]
    assert goal_judge.main(same) in (0, 1) and " minus_compared_progress_last=+0.000 " in capsys.readouterr().out
    both = json.loads((tmp_path / "same" / "goal_judge.json").read_text())
    for r in both["records"]:
        assert r["compared_progress_last"] == r["imagined_progress_last"]
        assert r["compared_goal_last"] == r["imagined_goal_last"]
    assert goal_judge.main(same[:-1] + ["missing.pt"]) == 2
    # two world models on the same episodes and actions, read by the same reader
    torch.manual_seed(1)
    WorldModel(tiny_model_config()).save(tmp_path / "wm_other.pt")
    models = args[:-4] + ["--out-dir", str(tmp_path / "models"), "--last-steps", "8", "--compare-world-model"]
    assert goal_judge.main(models + [str(tmp_path / "wm.pt")]) in (0, 1)  # a model against itself: exactly 0
    assert " minus_compared_goal_last=+0.000 " in capsys.readouterr().out
    itself = json.loads((tmp_path / "models" / "goal_judge.json").read_text())
    assert all(r["compared_goal_last"] == r["imagined_goal_last"] for r in itself["records"])
    assert goal_judge.main(models + [str(tmp_path / "wm_other.pt")]) in (0, 1)
    assert "--world-model minus its comparison" in capsys.readouterr().out
    other = json.loads((tmp_path / "models" / "goal_judge.json").read_text())
    assert other["compare_world_model"] == str(tmp_path / "wm_other.pt")
    assert any(r["compared_goal_last"] != r["imagined_goal_last"] for r in other["records"])  # other frames
    diff = other["minus_compared"]["goal_last"]
    if not np.isnan(diff["point"]):  # both outcomes in some task: the difference is the two AUCs'
        aucs = other["auc"]
        assert np.isclose(diff["point"], aucs["imagined_goal_last"]["point"] - aucs["compared_goal_last"]["point"])
    with pytest.raises(SystemExit):  # one comparison at a time
        goal_judge.main(models + [str(tmp_path / "wm.pt"), "--compare-reader", args[1]])
    assert goal_judge.main(["--reader", "missing.pt", "--world-model", "x", "--data", "y"]) == 2
