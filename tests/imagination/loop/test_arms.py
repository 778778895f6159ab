"""The arms beside imagined RL (imagination/loop/arms.py): the real-data control imitates exactly the recorded real
episodes the recipe consumed, the anchor control applies the recipe's anchor as many times as the recipe did, and the
own gain is taken against the best control."""
from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch

from imagination.loop import arms
from imagination.loop.arms import (
    Budget,
    anchor_control,
    anchor_updates,
    consumed,
    control_config,
    dataset_budget,
    label_budget,
    own_gain,
    recipe_budget,
)
from imagination.rl.training import ImagineRLConfig
from policies.base import Policy
from policies.bc import BCConfig, load_episodes
from policies.vla import VLAConfig, VLAPolicy
from robot_data.dataset import DatasetConfig, EpisodeDataset, EpisodeWriter
from tests.episodes import grasping_episode

SIZE, T = 16, 12


def _dataset(root: Path, rows: list[tuple[int, bool, str]], seed: int) -> str:
    """A recorded dataset of (task, success, source) episodes."""
    rng = np.random.default_rng(seed)
    with EpisodeWriter(root, DatasetConfig(views=("agentview",), image_size=(SIZE, SIZE), fps=10)) as w:
        for k, (task, ok, source) in enumerate(rows):
            ep = grasping_episode(rng, T + k, SIZE, task, ok, source, k, {})
            w.append(replace(ep, perturbation="early_release") if source == "perturbed" else ep)
    return str(root)


@pytest.fixture(scope="module")
def recipe(tmp_path_factory) -> ImagineRLConfig:
    """A recipe config over two recorded datasets (the collected data, the start's own rollouts) and one
    label-collection folder, with a start policy saved beside them."""
    root = tmp_path_factory.mktemp("arms")
    data = _dataset(root / "data", [(5, True, "expert"), (5, True, "expert"), (6, True, "expert"),
                                    (6, False, "perturbed"), (6, True, "perturbed")], 0)
    own = _dataset(root / "own", [(5, True, "policy"), (5, False, "policy"), (6, True, "policy")], 1)
    labels = root / "near_miss"
    labels.mkdir()
    for k in range(3):
        np.savez(labels / f"task05_ep{k:04d}.npz", action=np.zeros((7 + k, 7), np.float32))
    torch.manual_seed(0)
    policy = VLAPolicy(VLAConfig(views=["agentview"], image_size=SIZE, chunk_len=4, conv_channels=[8, 16],
                                 image_features=16, language_features=8, state_features=8, hidden=32))
    policy.set_state_stats(np.zeros(8, np.float32), np.ones(8, np.float32))
    policy.save(root / "bc.pt")
    cfg = ImagineRLConfig(policy=str(root / "bc.pt"), start_data=data, bc_coef=1.0, out_dir=str(root / "rl"))
    cfg.imagination.grasp_train_data = [data, own]  # the start data again: counted once
    cfg.imagination.grasp_label_dirs = [str(labels)]
    cfg.rl.minibatch_size = 4
    return cfg


def test_the_real_data_control_imitates_every_successful_episode_the_recipe_consumed(recipe, tmp_path):
    image, labels = consumed(recipe)
    assert image == [recipe.start_data, recipe.imagination.grasp_train_data[1]] and labels == \
        recipe.imagination.grasp_label_dirs
    start_bc = BCConfig(data_dir=recipe.start_data, episodes_per_task=1, steps=700, lr=5e-4,
                        policy=VLAConfig(views=["agentview"], image_size=SIZE, chunk_len=4))
    cfg = control_config(recipe, start_bc, str(tmp_path / "control"))
    episodes, _ = load_episodes(cfg)
    successful = [(m.task_id, m.source, m.length) for path in image for m in EpisodeDataset(path).meta if m.success]
    assert sorted((e.task_id, e.source, len(e.action)) for e in episodes) == sorted(successful)
    assert len(episodes) == 4 + 2  # every kind of source, not only the experts; no per-task cap
    assert cfg.init_policy == recipe.policy and (cfg.steps, cfg.lr) == (700, 5e-4)  # the start's own BC settings
    # its budget is what it imitated; the recipe's is every episode it read, labels included
    assert dataset_budget(recipe.start_data, success_only=True, per_task=1) == Budget(2, T + T + 2)
    assert label_budget(labels[0]) == Budget(3, 7 + 8 + 9)
    everything = sum((m.length for path in image for m in EpisodeDataset(path).meta), 0)
    assert recipe_budget(recipe) == Budget(5 + 3 + 3, everything + 24)


def test_a_control_in_its_folder_is_reused_only_for_the_real_episodes_it_imitated(recipe, tmp_path):
    """Arm b trained once is reused by a recipe that consumed the same episodes, or more without a success to imitate;
    a recipe that consumed another success, or fewer datasets, is refused by name instead of handed the old b."""
    start_bc = BCConfig(data_dir=recipe.start_data, steps=2, batch_size=2,
                        policy=VLAConfig(views=["agentview"], image_size=SIZE, chunk_len=4))
    out = str(tmp_path / "control")
    first = arms.real_data_control(recipe, start_bc, out)
    weights = Path(first["policy_path"]).stat().st_mtime_ns
    assert arms.real_data_control(recipe, start_bc, out) == first  # the same recipe: reused, not trained again
    failures = _dataset(tmp_path / "failures", [(5, False, "policy")], 4)
    more = replace(recipe, imagination=replace(recipe.imagination, grasp_train_data=[
        *recipe.imagination.grasp_train_data, failures]))
    assert arms.real_data_control(more, start_bc, out) == first  # nothing in it b would imitate
    success = _dataset(tmp_path / "success", [(6, True, "policy")], 5)
    other = replace(recipe, imagination=replace(recipe.imagination, grasp_train_data=[
        *recipe.imagination.grasp_train_data, success]))
    with pytest.raises(ValueError, match=r"imitated other real episodes than the recipe consumes now \(beyond "
                                         r"them: \[\]; left out: \[.*success"):
        arms.real_data_control(other, start_bc, out)
    fewer = replace(recipe, imagination=replace(recipe.imagination, grasp_train_data=[recipe.start_data]))
    with pytest.raises(ValueError, match=r"beyond them: \[.*own"):
        arms.real_data_control(fewer, start_bc, out)
    assert Path(first["policy_path"]).stat().st_mtime_ns == weights  # never trained again


def test_starts_from_the_policys_own_rollouts_anchor_on_bc_data_which_the_budget_counts(recipe):
    own = recipe.imagination.grasp_train_data[1]
    cfg = replace(recipe, start_data=own, bc_data=recipe.start_data)
    assert consumed(cfg)[0] == [own, recipe.start_data]  # each dataset once, the anchor's included
    assert recipe_budget(cfg) == recipe_budget(recipe)
    policy = Policy.load(recipe.policy)
    with pytest.raises(ValueError, match="has no successful expert episode to anchor on"):
        arms.bc_anchor(replace(cfg, bc_data=""), policy)  # the own rollouts hold no demonstration
    assert torch.isfinite(arms.bc_anchor(cfg, policy)())  # bc_data's demonstrations


def test_the_held_out_checks_start_episodes_are_consumed_when_the_check_runs(recipe, tmp_path):
    gate = _dataset(tmp_path / "gate", [(5, True, "policy"), (6, False, "policy")], 2)
    off = replace(recipe, heldout=replace(recipe.heldout, start_data=gate))  # every = 0: no check, nothing read
    assert consumed(off) == consumed(recipe)
    on = replace(recipe, heldout=replace(recipe.heldout, start_data=gate, every=2))
    assert consumed(on)[0] == [*consumed(recipe)[0], gate]
    assert recipe_budget(on) == recipe_budget(recipe) + dataset_budget(gate)
    start_bc = BCConfig(data_dir=recipe.start_data, policy=VLAConfig(views=["agentview"], image_size=SIZE, chunk_len=4))
    episodes, _ = load_episodes(control_config(on, start_bc, str(tmp_path / "control")))
    assert sum(e.source == "policy" for e in episodes) == 2 + 1  # the own rollouts' 2 successes and the gate's 1


def test_the_goal_readers_training_data_is_consumed_and_a_dataset_without_a_success_adds_nothing(recipe, tmp_path):
    """Reward "goal": the datasets its reader was trained on (result.json beside reader.pt) are real episodes the
    recipe consumed; the control imitates their successes, and a dataset of failures only is left out of its fit."""
    failures = _dataset(tmp_path / "failures", [(5, False, "policy"), (6, False, "policy")], 3)
    reader = tmp_path / "goal_reader"
    reader.mkdir()
    cfg = replace(recipe, imagination=replace(recipe.imagination, reward="goal", grasp_train_data=[],
                                              grasp_label_dirs=[], goal_reader=str(reader / "reader.pt")))
    with pytest.raises(FileNotFoundError, match="result.json not found"):
        consumed(cfg)
    (reader / "result.json").write_text(json.dumps({"data_dirs": [recipe.start_data, failures]}))
    assert consumed(cfg) == ([recipe.start_data, failures], [])
    assert recipe_budget(cfg) == dataset_budget(recipe.start_data) + dataset_budget(failures)
    start_bc = BCConfig(data_dir=recipe.start_data, policy=VLAConfig(views=["agentview"], image_size=SIZE, chunk_len=4))
    control = control_config(cfg, start_bc, str(tmp_path / "control"))
    assert (control.data_dir, control.extra_data_dirs) == (recipe.start_data, [])
    (reader / "result.json").write_text(json.dumps({"data_dirs": [failures]}))
    with pytest.raises(ValueError, match="no successful real episode"):
        control_config(replace(cfg, start_data=failures), start_bc, str(tmp_path / "control"))


def test_the_anchor_control_repeats_the_recipes_anchor_updates_and_no_rl(recipe, tmp_path, monkeypatch):
    calls: list[int] = []
    real = arms.bc_anchor

    def counted(cfg, policy, generator=None):
        anchor = real(cfg, policy, generator)

        def step() -> torch.Tensor:
            calls.append(1)
            return anchor()
        return step

    monkeypatch.setattr(arms, "bc_anchor", counted)
    history = [{"iteration": 1, "updates": 6.0}, {"iteration": 2, "updates": 4.0}]
    out = anchor_control(recipe, {"history": history}, str(tmp_path / "anchor"))
    assert out["updates"] == 10 == len(calls)
    start, moved = Policy.load(recipe.policy).state_dict(), Policy.load(out["policy_path"]).state_dict()
    assert any(not torch.equal(start[k], moved[k]) for k in start if isinstance(start[k], torch.Tensor))
    assert json.loads((tmp_path / "anchor" / "control.json").read_text()) == out
    assert anchor_control(recipe, {"history": history}, str(tmp_path / "anchor")) == out and len(calls) == 10  # reused
    kept = {"history": [*history, {"iteration": 3, "updates": 6.0}], "heldout": {"best_iteration": 2}}
    assert anchor_updates(kept) == 10  # the held-out check kept iteration 2: iteration 3's updates are not its
    assert anchor_updates({**kept, "heldout": {"best_iteration": 0}}) == 0  # it kept the start
    with pytest.raises(ValueError, match="does not count its updates"):
        anchor_control(recipe, {"history": [{"iteration": 1}]}, str(tmp_path / "old"))
    with pytest.raises(ValueError, match="bc_coef"):
        anchor_control(replace(recipe, bc_coef=0.0), {"history": history}, str(tmp_path / "none"))


def test_an_anchor_control_is_reused_only_for_the_same_anchor(recipe, tmp_path):
    """A second run in the same folder (a loop round, more iterations, another anchor) is refused by name instead of
    being scored with the first run's arm c; a record written before it kept its anchor is checked on its count."""
    history = [{"iteration": 1, "updates": 2.0}]
    out = anchor_control(recipe, {"history": history}, str(tmp_path / "anchor"))
    assert out["start"] == recipe.policy and out["updates"] == 2 and out["bc_coef"] == recipe.bc_coef
    with pytest.raises(ValueError, match=r"anchor control: .* updates 2 \(now 3\)"):
        anchor_control(recipe, {"history": [{"iteration": 1, "updates": 3.0}]}, str(tmp_path / "anchor"))
    with pytest.raises(ValueError, match="bc_coef"):
        anchor_control(replace(recipe, bc_coef=recipe.bc_coef * 2), {"history": history}, str(tmp_path / "anchor"))
    with pytest.raises(ValueError, match="start"):
        anchor_control(recipe, {**{"history": history}, "start_policy": str(tmp_path / "other.pt")},
                       str(tmp_path / "anchor"))
    old = tmp_path / "old_record"
    old.mkdir()
    (old / "control.json").write_text(json.dumps({"policy_path": out["policy_path"], "updates": 2}))
    assert anchor_control(recipe, {"history": history}, str(old))["updates"] == 2  # as it was written



def test_the_anchor_control_starts_where_the_recipe_started(recipe, tmp_path):
    """A recipe that adapts its start (ImagineRLConfig.adapt) names the adapted policy in result.json's start_policy:
    the anchor control starts from it, not from the unadapted one."""
    torch.manual_seed(1)
    other = VLAPolicy(VLAConfig(views=["agentview"], image_size=SIZE, chunk_len=4, conv_channels=[8, 16],
                                image_features=16, language_features=8, state_features=8, hidden=32))
    other.set_state_stats(np.zeros(8, np.float32), np.ones(8, np.float32))
    other.save(tmp_path / "adapted.pt")
    kept_start = {"history": [{"iteration": 1, "updates": 3.0}], "heldout": {"best_iteration": 0},
                  "start_policy": str(tmp_path / "adapted.pt")}
    out = anchor_control(recipe, kept_start, str(tmp_path / "anchor"))  # 0 updates: the control is its start
    got, want = Policy.load(out["policy_path"]).state_dict(), other.state_dict()
    assert all(torch.equal(got[k], want[k]) for k in want if isinstance(want[k], torch.Tensor))


def _episodes(outcomes: list[bool]) -> list[dict]:
    return [{"task_id": 0, "init_state_id": 20 + j, "seed": j, "success": ok} for j, ok in enumerate(outcomes)]


def test_the_own_gain_is_taken_against_the_best_control():
    start = _episodes([True, False, False, False] * 5)
    control = _episodes([True, True, False, False] * 5)
    seeds = [_episodes([True, True, True, False] * 5), _episodes([True, True, False, True] * 5)]
    best, avg = own_gain({"start": start, "control": control}, seeds)
    assert best == "control"
    assert avg.difference.gain_points == pytest.approx(25.0)  # 75% averaged over seeds against the control's 50%
    with pytest.raises(ValueError, match="control arm"):
        own_gain({}, seeds)


def test_the_control_imitates_a_label_folders_successes_from_its_copy_with_frames(recipe, tmp_path, capsys):
    """A label folder (scripted grasps simulated without cameras) has no frames to imitate: without its copy with
    frames (robot_data/label_frames.py) b says so; with the copy, b imitates its successes too."""
    start_bc = BCConfig(data_dir=recipe.start_data, policy=VLAConfig(views=["agentview"], image_size=SIZE, chunk_len=4))
    without = control_config(recipe, start_bc, str(tmp_path / "control"))
    assert "no copy with frames" in capsys.readouterr().out
    (labels,) = recipe.imagination.grasp_label_dirs
    framed = _dataset(Path(labels + "_frames"), [(5, True, "expert"), (5, True, "perturbed")], 4)
    try:
        with_copy = control_config(recipe, start_bc, str(tmp_path / "control"))
        assert [with_copy.data_dir, *with_copy.extra_data_dirs] == [without.data_dir, *without.extra_data_dirs, framed]
        assert len(load_episodes(with_copy)[0]) == len(load_episodes(without)[0]) + 2
        assert "no copy with frames" not in capsys.readouterr().out
    finally:  # the module's recipe is shared: leave its folders as they were
        import shutil

        shutil.rmtree(framed)


def test_the_anchor_control_records_how_far_its_updates_moved_the_start(recipe, tmp_path):
    """max_param_change is 0.0 exactly when the control holds the start's own weights (the bench then reuses the
    start's episodes instead of replaying them) and positive once an anchor moved it."""
    still = anchor_control(recipe, {"history": [{"iteration": 1, "updates": 0.0}]}, str(tmp_path / "still"))
    assert still["updates"] == 0 and still["max_param_change"] == 0.0
    start, same = Policy.load(recipe.policy).state_dict(), Policy.load(still["policy_path"]).state_dict()
    assert all(torch.equal(start[k], same[k]) for k in start if isinstance(start[k], torch.Tensor))
    moved = anchor_control(recipe, {"history": [{"iteration": 1, "updates": 3.0}]}, str(tmp_path / "moved"))
    assert moved["max_param_change"] > 0.0
    # a record written before the field existed gets it from its saved weights when it is reused
    for folder, expect_zero in (("still", True), ("moved", False)):
        done = tmp_path / folder / "control.json"
        record = json.loads(done.read_text())
        done.write_text(json.dumps({k: v for k, v in record.items() if k != "max_param_change"}))
        updates = 0.0 if expect_zero else 3.0
        again = anchor_control(recipe, {"history": [{"iteration": 1, "updates": updates}]}, str(tmp_path / folder))
        assert (again["max_param_change"] == 0.0) == expect_zero and again["max_param_change"] >= 0.0
