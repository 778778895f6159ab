"""The world model refined on the recipe's own rollouts (imagination/loop/refine.py, bench/rl_gain.py
--refine-world-model): the loop's fine-tune of the protocol's model on its data and every own episode, made once;
or one of another preset trained afresh on them (--world-model-preset)."""
from __future__ import annotations

import json
from dataclasses import replace

import pytest
import torch
import yaml

from imagination.loop.config import LoopConfig
from imagination.loop.refine import refine_world_model, retrain_world_model
from infra.cli import save_config
from tests.world_models.conftest import tiny_train_config, write_square_dataset
from world_models.model import WorldModel
from world_models.training import train_world_model


def test_the_refined_model_trains_on_the_data_and_every_own_episode_once(tmp_path):
    torch.set_num_threads(1)
    data = write_square_dataset(tmp_path / "data", episodes=6, T=24, seed=0)
    own = write_square_dataset(tmp_path / "own", episodes=3, T=24, seed=1)
    base = tiny_train_config(data, tmp_path / "wm", steps=4)
    train_world_model(base)
    parent = json.loads((tmp_path / "wm" / "split.json").read_text())

    loop = replace(LoopConfig(), world_model=base)
    out = tmp_path / "refined"
    path = refine_world_model(loop, str(tmp_path / "wm" / "world_model.pt"), str(data), str(own), str(out), 3,
                              ["agentview"])
    assert path == str(out / "world_model.pt")
    WorldModel.load(path)  # a model imagination can load
    split = json.loads((out / "split.json").read_text())
    # the data's held-out episodes stay held out; every own episode trains
    assert split["held_out"] == parent["held_out"] and split["train"] == parent["train"]
    assert split["extra_train"] == {str(own): [0, 1, 2]}
    cfg = yaml.safe_load((out / "config.yaml").read_text())
    assert cfg["steps"] == 3 and cfg["init_from"] == str(tmp_path / "wm" / "world_model.pt")
    assert cfg["bootstrap"]["prob_start"] == base.bootstrap.prob_end  # the loop's fine-tune settings
    assert cfg["clips"]["source_weights"]["policy"] == loop.policy_weight

    before = (out / "world_model.pt").stat().st_mtime_ns
    assert refine_world_model(loop, "unused", str(data), str(own), str(out), 3, ["agentview"]) == path
    assert (out / "world_model.pt").stat().st_mtime_ns == before  # made once, then reused
    with pytest.raises(ValueError, match="--refine-world-model: expected fine-tune steps >= 1, got 0"):
        refine_world_model(loop, path, str(data), str(own), str(tmp_path / "none"), 0, ["agentview"])


def test_a_model_of_another_preset_trains_afresh_on_the_same_split_and_every_own_episode(tmp_path):
    torch.set_num_threads(1)
    data = write_square_dataset(tmp_path / "data", episodes=6, T=24, seed=0)
    own = write_square_dataset(tmp_path / "own", episodes=3, T=24, seed=1)
    base = tiny_train_config(data, tmp_path / "wm", steps=2)
    base.clips.holdout_fraction, base.clips.split_seed = 0.34, 3  # a split the preset's own settings would not make
    train_world_model(base)
    parent = json.loads((tmp_path / "wm" / "split.json").read_text())
    wider = tiny_train_config(data, tmp_path / "unused", steps=3)  # the "preset": another size, its own split
    wider.model.denoiser.block_out_channels = [8, 16]
    save_config(wider, tmp_path / "wider.yaml")

    out = tmp_path / "wider"
    path = retrain_world_model(str(tmp_path / "wider.yaml"), str(tmp_path / "wm" / "world_model.pt"), str(data),
                               str(own), str(out))
    assert path == str(out / "world_model.pt")
    model = WorldModel.load(path)
    assert list(model.cfg.denoiser.block_out_channels) == [8, 16]  # the preset's model, not the protocol's
    split = json.loads((out / "split.json").read_text())
    assert split["held_out"] == parent["held_out"] and split["train"] == parent["train"]
    assert split["extra_train"] == {str(own): [0, 1, 2]}
    cfg = yaml.safe_load((out / "config.yaml").read_text())
    assert cfg["steps"] == 3 and not cfg["init_from"] and cfg["out_dir"] == str(out)

    before = (out / "world_model.pt").stat().st_mtime_ns
    assert retrain_world_model("unused", str(tmp_path / "wm" / "world_model.pt"), str(data), str(own),
                               str(out)) == path
    assert (out / "world_model.pt").stat().st_mtime_ns == before  # made once, then reused
    (out / "done.json").unlink()  # as if stopped after a checkpoint: the model file alone does not count as done
    assert retrain_world_model(str(tmp_path / "wider.yaml"), str(tmp_path / "wm" / "world_model.pt"), str(data),
                               str(own), str(out)) == path
    assert (out / "done.json").is_file()
    with pytest.raises(FileNotFoundError, match="--world-model-preset: .*config.yaml not found"):
        retrain_world_model("quick", str(tmp_path / "nowhere" / "world_model.pt"), str(data), str(own),
                            str(tmp_path / "none"))
