"""Fine-tuning a trained world model: init_from, resume over init, and episode-weighted clip sampling."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from infra.cli import load_config, parse_config
from robot_data.dataset import DatasetConfig, EpisodeWriter
from tests.world_models.conftest import SIZE, square_episode, tiny_model_config, tiny_train_config
from world_models.clips import ClipConfig, ClipSampler, EpisodeArrays, episode_weights, load_episodes
from world_models.model import WorldModel
from world_models.training import Trainer, TrainWorldModelConfig, train

# (source, length, episode-level success) of the mixed dataset, in dataset order
MIXED = [("expert", 20, True), ("expert", 20, True), ("expert", 20, True), ("expert", 20, True),
         ("policy", 12, True), ("policy", 12, False)]


@pytest.fixture(scope="module")
def mixed_data(tmp_path_factory) -> Path:
    """A grown dataset: four long expert episodes, then two short policy episodes (one failed)."""
    root = tmp_path_factory.mktemp("mixed") / "data"
    rng = np.random.default_rng(1)
    with EpisodeWriter(root, DatasetConfig(views=("agentview",), image_size=(SIZE, SIZE), fps=10)) as w:
        for source, T, solved in MIXED:
            ep = square_episode(rng, T)
            ep.source = source
            ep.success = np.zeros(T, bool)
            ep.success[-1] = solved  # the episode-level flag the dataset meta records is any(success)
            ep.reward = ep.success.astype(np.float32)
            w.append(ep)
    return root


def _episode_of(sampler: ClipSampler, flat: np.ndarray) -> np.ndarray:
    return np.searchsorted(sampler._starts, flat, side="right") - 1


# ---------------------------------------------------------------------------------------- weighting
def test_episodes_carry_source_and_episode_success(mixed_data):
    eps = load_episodes(mixed_data, ["agentview"])
    assert [(ep.source, len(ep), ep.episode_success) for ep in eps] == MIXED
    w = episode_weights(eps, {"policy": 3.0}, failure_weight=2.0)
    assert w.tolist() == [1, 1, 1, 1, 3, 6]
    # hand-built episodes default to expert, with the episode flag taken from the step flags
    ep = EpisodeArrays(np.zeros((3, 4, 4, 3), np.uint8), np.zeros((3, 7), np.float32), np.array([0, 0, 1], bool),
                       index=0, task_id=0, instruction="x")
    assert ep.source == "expert" and ep.episode_success is True


def test_default_sampling_is_unchanged(mixed_data):
    eps = load_episodes(mixed_data, ["agentview"])
    total = sum(len(ep) for ep in eps)
    plain = ClipSampler(eps, 2, 4, seed=7).draw(500)
    # the draw every existing run (and checkpoint) relies on: uniform flat (episode, step) indices
    assert np.array_equal(plain, np.random.default_rng(7).integers(0, total, size=500))
    # default config weights, and any equal weights, take that very path
    for weights in (episode_weights(eps, ClipConfig().source_weights, ClipConfig().failure_weight),
                    episode_weights(eps, {"expert": 2.5, "policy": 2.5}), None):
        s = ClipSampler(eps, 2, 4, seed=7, weights=weights)
        assert np.array_equal(s.draw(500), plain)
        assert np.allclose(s.episode_probabilities(), [len(ep) / total for ep in eps])
    a, b = ClipSampler(eps, 2, 4, seed=3), ClipSampler(eps, 2, 4, seed=3, weights=np.ones(len(eps)))
    ba, bb = a.sample(4), b.sample(4)
    assert all(torch.equal(ba[k], bb[k]) for k in ba)


def test_weighted_sampling_shifts_clips_to_weighted_episodes(mixed_data):
    eps = load_episodes(mixed_data, ["agentview"])
    lengths = np.array([len(ep) for ep in eps], float)
    n = 40_000
    unweighted = ClipSampler(eps, 2, 4, seed=0)
    plain = np.bincount(_episode_of(unweighted, unweighted.draw(n)), minlength=len(eps)) / n
    w = episode_weights(eps, {"policy": 3.0}, failure_weight=2.0)
    s = ClipSampler(eps, 2, 4, seed=0, weights=w)
    expected = w * lengths / (w * lengths).sum()  # episode share ~ weight x length
    assert np.allclose(s.episode_probabilities(), expected)
    flat = s.draw(n)
    share = np.bincount(_episode_of(s, flat), minlength=len(eps)) / n
    # 40k draws: the standard error of a share is below 0.003
    assert np.abs(share - expected).max() < 0.015, (share, expected)
    policy = np.array([ep.source == "policy" for ep in eps])
    assert plain[policy].sum() == pytest.approx(24 / 104, abs=0.015)
    assert share[policy].sum() == pytest.approx(expected[policy].sum(), abs=0.015)
    assert share[policy].sum() > 2.5 * plain[policy].sum()
    assert share[5] > 1.8 * share[4]  # the failed policy episode counts twice
    # steps stay uniform within an episode: every step of the short failed episode shows up, evenly
    steps = flat[_episode_of(s, flat) == 5] - s._starts[5]
    counts = np.bincount(steps, minlength=12)
    assert counts.min() > 0.7 * counts.mean() and counts.max() < 1.3 * counts.mean()


def test_weighted_sampler_zero_weights_and_resume(mixed_data):
    eps = load_episodes(mixed_data, ["agentview"])
    only_policy = ClipSampler(eps, 2, 4, seed=0, weights=episode_weights(eps, {"expert": 0.0}))
    assert set(_episode_of(only_policy, only_policy.draw(2000)).tolist()) == {4, 5}
    with pytest.raises(ValueError, match="weight 0"):
        ClipSampler(eps, 2, 4, weights=episode_weights(eps, {"expert": 0.0, "policy": 0.0}))
    s = ClipSampler(eps, 2, 4, seed=5, weights=episode_weights(eps, {"policy": 4.0}))
    s.sample(3)
    state = s.state_dict()
    nxt = s.sample(3)
    s2 = ClipSampler(eps, 2, 4, seed=99, weights=episode_weights(eps, {"policy": 4.0}))
    s2.load_state_dict(state)
    again = s2.sample(3)
    assert all(torch.equal(nxt[k], again[k]) for k in nxt)


@pytest.mark.parametrize("kwargs, field", [
    ({"source_weights": {"policy": -1.0}}, "clips.source_weights"),
    ({"source_weights": {"robot": 2.0}}, "clips.source_weights"),
    ({"source_weights": {"policy": "high"}}, "clips.source_weights"),
    ({"source_weights": {"policy": float("nan")}}, "clips.source_weights"),
    ({"failure_weight": -0.5}, "clips.failure_weight"),
])
def test_bad_weights_name_the_field(kwargs, field):
    with pytest.raises(ValueError, match=field):
        ClipConfig(**kwargs)
    with pytest.raises(ValueError, match=field):  # configs edited after construction are checked again
        episode_weights([], kwargs.get("source_weights", {}), kwargs.get("failure_weight", 1.0))


def test_weights_and_init_from_from_the_command_line():
    for overrides in (["clips.source_weights={policy:3.0}"], ["clips.source_weights={policy: 3}"],
                      ["clips.source_weights.policy=3"]):
        cfg = load_config(TrainWorldModelConfig, "quick", overrides, group="world_model")
        assert cfg.clips.source_weights == {"policy": 3.0}
    cfg = load_config(TrainWorldModelConfig, "quick", ["clips.source_weights={policy:3.0,perturbed:0.5}",
                                                       "clips.failure_weight=2", "init_from=/runs/a/world_model.pt"],
                      group="world_model")
    assert cfg.clips.source_weights == {"policy": 3.0, "perturbed": 0.5}
    assert cfg.clips.failure_weight == 2.0 and cfg.init_from == "/runs/a/world_model.pt"
    assert load_config(TrainWorldModelConfig, "quick", group="world_model").clips.source_weights == {}
    with pytest.raises(SystemExit):
        parse_config(TrainWorldModelConfig, "train", "world_model", ["clips.source_weights={policy:-3}"])


@pytest.mark.slow
def test_trainer_samples_with_the_configured_weights(mixed_data, tmp_path):
    cfg = tiny_train_config(mixed_data, tmp_path / "w", steps=1, batch_size=4)
    cfg.clips.holdout_fraction = 0.0
    cfg.clips.holdout_min = 0
    plain = Trainer(cfg).state.sampler
    assert plain.episode_probabilities() == pytest.approx([20 / 104] * 4 + [12 / 104] * 2)
    cfg.clips.source_weights = {"policy": 3.0}
    cfg.clips.failure_weight = 2.0
    weighted = Trainer(cfg)
    w = np.array([20, 20, 20, 20, 36, 72], float)
    assert weighted.state.sampler.episode_probabilities() == pytest.approx(w / w.sum())
    assert np.isfinite(weighted.step()["loss"])


# ---------------------------------------------------------------------------------------- init_from
def _source_model(trained_square) -> Path:
    """The world_model.pt of the 500-step square-world run (conftest), the model to fine-tune."""
    _, _, cfg = trained_square
    return Path(cfg.out_dir) / "world_model.pt"


def _finetune_config(square_data, out: Path, init_from: Path, steps: int):
    cfg = tiny_train_config(square_data, out, steps=steps, batch_size=8, checkpoint_every=steps, warmup_steps=2,
                            init_from=str(init_from))
    cfg.augment.enabled = False  # the first-step loss comparison below wants the same batch for both models
    cfg.bootstrap.enabled = False
    # a different architecture here: with init_from the model config comes from the file
    cfg.model.denoiser.block_out_channels = [8, 16]
    cfg.model.denoiser.norm_num_groups = 4
    return cfg


@pytest.mark.slow
def test_init_from_starts_from_the_file_and_trains_on(square_data, trained_square, tmp_path):
    src = _source_model(trained_square)
    source = WorldModel.load(src)
    cfg = _finetune_config(square_data, tmp_path / "ft", src, steps=3)
    trainer = Trainer(cfg)
    model = trainer.unwrapped()
    assert model.cfg == source.cfg  # not cfg.model
    start = model.state_dict()
    assert start.keys() == source.state_dict().keys()
    assert all(torch.equal(start[k], v) for k, v in source.state_dict().items())
    assert trainer.step_count == 0 and not trainer.optimizer.state  # fresh optimizer
    first = trainer.step()
    assert first["lr"] == pytest.approx(cfg.lr / cfg.warmup_steps)  # fresh schedule: step 1 of the warmup

    scratch_cfg = _finetune_config(square_data, tmp_path / "scratch", src, steps=3)
    scratch_cfg.init_from = ""
    scratch_cfg.model = tiny_model_config()
    scratch = Trainer(scratch_cfg).step()
    # the same first batch and noise: the trained weights already denoise it far better
    assert first["denoise"] < 0.7 * scratch["denoise"], (first, scratch)

    result = train(cfg, trainer)
    assert result["steps"] == 3  # the fine-tune's own steps, not 500 + 3
    assert [p.name for p in trainer.list_checkpoints()] == ["step_0000003"]
    tuned = WorldModel.load(tmp_path / "ft" / "world_model.pt")
    assert tuned.cfg == source.cfg
    assert any(not torch.equal(tuned.state_dict()[k], v) for k, v in source.state_dict().items())


@pytest.mark.slow
def test_rerun_resumes_its_own_checkpoint(square_data, trained_square, tmp_path, capsys):
    src = _source_model(trained_square)
    cfg = _finetune_config(square_data, tmp_path / "ft", src, steps=2)
    trainer = Trainer(cfg)
    train(cfg, trainer)
    expected = trainer.step()  # step 3 of an uninterrupted fine-tune
    tuned = WorldModel.load(tmp_path / "ft" / "world_model.pt").state_dict()

    # the same command again: the checkpoint wins over init_from, and nothing is left to do
    rerun = Trainer(cfg)
    assert train(cfg, rerun)["steps"] == 2
    assert "resumed from step 2" in capsys.readouterr().out
    got = rerun.unwrapped().state_dict()
    assert all(torch.equal(got[k], v) for k, v in tuned.items())
    # and extending it continues exactly where the interrupted run was
    cfg.steps = 3
    resumed = Trainer(cfg)
    assert resumed.load_checkpoint() and resumed.step_count == 2
    step = resumed.step()
    assert step["loss"] == expected["loss"] and step["lr"] == expected["lr"]


def test_init_from_errors_name_the_field(square_data, tmp_path):
    base = tiny_train_config(square_data, tmp_path / "run", steps=1)
    base.init_from = str(tmp_path / "missing" / "world_model.pt")
    with pytest.raises(FileNotFoundError, match="init_from: .*not found"):
        Trainer(base)
    base.init_from = str(tmp_path)
    with pytest.raises(FileNotFoundError, match="init_from: .*is a folder"):
        Trainer(base)
    not_a_model = tmp_path / "notes.pt"
    not_a_model.write_text("not a checkpoint")
    base.init_from = str(not_a_model)
    with pytest.raises(ValueError, match="init_from: .*not a world model"):
        Trainer(base)
    torch.save({"weights": torch.zeros(3)}, tmp_path / "other.pt")
    base.init_from = str(tmp_path / "other.pt")
    with pytest.raises(ValueError, match="init_from: .*not a world model"):
        Trainer(base)
    base.init_from = str(tmp_path / "run" / "world_model.pt")  # its own output: nothing would be fine-tuned
    WorldModel(tiny_model_config()).save(base.init_from)
    with pytest.raises(ValueError, match="init_from: .*this run's own output"):
        Trainer(base)


def test_init_from_must_fit_the_data(square_data, tmp_path):
    WorldModel(tiny_model_config(chunk_len=8)).save(tmp_path / "k8.pt")
    cfg = tiny_train_config(square_data, tmp_path / "run", steps=1, init_from=str(tmp_path / "k8.pt"))
    with pytest.raises(ValueError, match=r"init_from: .*clips.chunk_len=4 but the model has 8"):
        Trainer(cfg)


def test_fine_tune_keeps_the_parent_held_out_episodes_out_of_training(tmp_path):
    from types import SimpleNamespace

    from world_models.train_setup import inherit_split

    data = tmp_path / "data"
    data.mkdir()
    parent = tmp_path / "split.json"
    parent.write_text(json.dumps({"data_dir": str(data), "train": [0, 1, 3, 4], "held_out": [2]}))
    episodes = [SimpleNamespace(index=i) for i in range(8)]  # 3 new episodes: 5, 6, 7
    # a fresh split of the grown dataset that would train on the parent's held-out episode 2
    train, held = inherit_split(parent, str(data), episodes, [0, 2, 3, 4, 5, 6], [1, 7])
    assert held == [2, 7] and train == [0, 1, 3, 4, 5, 6]
    # another dataset: the parent's indices mean nothing there
    assert inherit_split(parent, str(tmp_path / "other"), episodes, [0, 1], [2]) == ([0, 1], [2])
