"""scripts/fit_proprio.py: two recorded datasets in, a ProprioModel file out that imagination can load."""
import json

import numpy as np
import pytest

from robot_data.dataset import DatasetConfig, EpisodeWriter
from scripts.fit_proprio import main
from tests.episodes import grasping_episode
from world_models.proprio import FitProprioConfig, ProprioConfig, ProprioModel


def _dataset(root, seed):
    rng = np.random.default_rng(seed)
    with EpisodeWriter(root, DatasetConfig(views=("agentview",), image_size=(8, 8))) as w:
        for task in (0, 1):
            w.append(grasping_episode(rng, 14, 8, task, bool(task), "policy", 0, {}))


def test_fits_on_every_dataset_and_writes_a_loadable_model(tmp_path):
    _dataset(tmp_path / "a", 0)
    _dataset(tmp_path / "b", 1)
    out = tmp_path / "p" / "proprio.pt"
    cfg = FitProprioConfig(data=[str(tmp_path / "a"), str(tmp_path / "b")], out=str(out),
                           model=ProprioConfig(chunk_len=4, history=4, hidden=16, layers=1, steps=20))
    result = main(cfg)
    assert result["episodes"] == 4
    model = ProprioModel.load(out)
    assert (model.cfg.chunk_len, model.cfg.history) == (4, 4)
    assert json.loads(out.with_suffix(".json").read_text())["episodes"] == 4
    assert np.isfinite(result["train_eef_error_cm_median"])


def test_a_folder_that_is_not_a_dataset_is_named(tmp_path):
    with pytest.raises(SystemExit, match="data: .*not an episode dataset"):
        main(FitProprioConfig(data=[str(tmp_path)], out=str(tmp_path / "p.pt")))
