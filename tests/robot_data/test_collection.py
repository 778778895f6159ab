"""Collection: deterministic plan, input validation, and a real resumable LIBERO collection."""
import json

import numpy as np
import pytest

from robot_data.collection import CollectConfig, make_plan, validate
from robot_data.dataset import EpisodeDataset


def test_plan_is_deterministic_and_mixes_perturbations():
    cfg = CollectConfig(tasks=[0, 1], episodes_per_task=10, perturbed_fraction=0.3)
    plan = make_plan(cfg)
    assert plan == make_plan(cfg) and len(plan) == 20
    for task in (0, 1):
        kinds = [p.perturbation for p in plan if p.task_id == task]
        assert sum(k != "" for k in kinds) == 3
    assert len({p.seed for p in plan}) == 20
    assert [p.init_state_id for p in plan if p.task_id == 0] == list(range(10))


@pytest.mark.parametrize(
    "changes, field",
    [
        ({"tasks": [10]}, "tasks"),
        ({"perturbations": ["teleport"]}, "perturbations"),
        ({"suite": "libero_90"}, "suite"),  # no scripted expert
        ({"perturbed_fraction": 1.5}, "perturbed_fraction"),
        ({"episodes_per_task": 0}, "episodes_per_task"),
        ({"post_success_steps": -1}, "post_success_steps"),
        ({"backend": "slurm"}, "backend"),
    ],
)
def test_bad_config_names_the_field(changes, field):
    with pytest.raises(ValueError, match=field):
        validate(CollectConfig(**changes))


@pytest.mark.libero
@pytest.mark.slow
def test_collect_real_episodes_and_resume(tmp_path):
    from robot_data.collection import collect_dataset

    cfg = CollectConfig(
        out_dir=str(tmp_path / "data"), tasks=[0], episodes_per_task=2, perturbed_fraction=0.5,
        perturbations=["early_release"], views=["agentview"], preview_videos=2, seed=3,
    )
    summary = collect_dataset(cfg)
    ds = EpisodeDataset(tmp_path / "data")
    assert len(ds) == 2
    by_source = {m.source: m for m in ds.meta}
    assert by_source["expert"].success and by_source["expert"].perturbation == ""
    assert not by_source["perturbed"].success and by_source["perturbed"].perturbation == "early_release"
    ep = ds[by_source["expert"].episode_index]
    assert ep.frames["agentview"].shape[1:] == (64, 64, 3)
    # The first success is followed by post_success_steps recorded steps of the solved scene.
    first = int(np.argmax(ep.success))
    assert not ep.success[:first].any() and ep.success[first:].all()
    assert len(ep) - first == 1 + cfg.post_success_steps
    assert np.abs(ep.action).max() <= 1.0 and ep.state.shape == (len(ep), 8)
    assert summary["0"]["expert"] == {"success": 1, "episodes": 1}
    assert json.loads((tmp_path / "data" / "summary.json").read_text()) == summary
    assert len(list((tmp_path / "data" / "previews").glob("*.mp4"))) == 2

    # Same command again: nothing new. A larger plan: only the missing episode is collected.
    collect_dataset(cfg)
    assert len(EpisodeDataset(tmp_path / "data")) == 2
    cfg.episodes_per_task = 3
    collect_dataset(cfg)
    ds = EpisodeDataset(tmp_path / "data")
    assert len(ds) == 3 and sorted(m.extra["plan_index"] for m in ds.meta) == [0, 1, 2]

    # Another collection into the same folder (another seed): refused before anything is recorded, since its
    # episode 0 would be skipped as done although the folder holds a different one.
    cfg.seed = 4
    with pytest.raises(ValueError, match="out_dir: .* another collection"):
        collect_dataset(cfg)
    assert len(EpisodeDataset(tmp_path / "data")) == 3


def test_a_folder_of_another_plan_is_refused_by_task_index_and_style():
    from pathlib import Path

    from robot_data.collection import PlanItem, _check_same_plan

    plan = [PlanItem(0, 0, 0, "", 11, plan_seed=3), PlanItem(0, 1, 1, "early_release", 12, plan_seed=3),
            PlanItem(0, 1, 1, "early_release", 12, 1, plan_seed=3)]
    done = {(it.task_id, it.index, it.style): it for it in plan[:2]}
    _check_same_plan(Path("d"), plan, done)  # a resume of the same plan, the style variant still to record
    # a grown plan draws other episode seeds and perturbations for the same collection seed: kept
    _check_same_plan(Path("d"), plan, {**done, (0, 1, 0): PlanItem(0, 1, 1, "", 99, plan_seed=3)})
    # an episode recorded before collections stored their seed is compared by its init state only
    _check_same_plan(Path("d"), plan, {**done, (0, 1, 0): PlanItem(0, 1, 1, "", 99)})
    for other in (PlanItem(0, 1, 6, "early_release", 12, plan_seed=3),  # another init_state_offset
                  PlanItem(0, 1, 1, "early_release", 12, plan_seed=4),  # another collection seed
                  PlanItem(0, 1, 6, "early_release", 12)):  # an older episode from another init state
        with pytest.raises(ValueError, match=f"init state {other.init_state_id} \\(collection seed {other.plan_seed}"):
            _check_same_plan(Path("d"), plan, {**done, (0, 1, 0): other})


def test_style_variants_extend_the_plan():
    cfg = CollectConfig(tasks=[0], episodes_per_task=3, style_variants=2)
    plan = make_plan(cfg)
    assert len(plan) == 9 and len({p.key for p in plan}) == 9
    originals = [p for p in plan if p.style == 0]
    variants = [p for p in plan if p.style > 0]
    # A variant replays its original (same init state and seed) under its own style seed.
    assert {(p.index, p.seed) for p in variants} == {(p.index, p.seed) for p in originals}
    assert all(p.style_seed == 0 for p in originals) and len({p.style_seed for p in variants}) == 6


@pytest.mark.parametrize("preset, suite", [("quick_object", "libero_object"), ("quick_goal", "libero_goal"),
                                           ("quick_10", "libero_10")])
def test_quick_preset_per_suite_is_valid(preset, suite):
    from infra.cli import load_config
    from robot_data.collection import plan_size

    cfg = load_config(CollectConfig, preset, group="collect")
    validate(cfg)  # the suite has an expert; clean episodes only where it has no perturbed ones
    assert cfg.suite == suite and cfg.out_dir.endswith(f"{suite}_quick") and plan_size(cfg) == 18


def test_several_suites_are_planned_and_validated_one_after_another():
    from infra.cli import load_config
    from robot_data.collection import per_suite, plan_size

    cfg = load_config(CollectConfig, "quick_mixed", group="collect")
    validate(cfg)
    assert [c.suite for c in per_suite(cfg)] == ["libero_spatial", "libero_object"]
    assert all(c.suites == [] and c.tasks == [0, 1, 2] for c in per_suite(cfg))
    assert plan_size(cfg) == 2 * 18 and per_suite(CollectConfig()) == [CollectConfig()]
    with pytest.raises(ValueError, match=r"suites: expected distinct LIBERO suite names"):
        validate(CollectConfig(suites=["libero_object", "libero_object"]))
    # each suite is checked on its own: Object has 10 tasks, so task 10 names the field
    with pytest.raises(ValueError, match="tasks"):
        validate(CollectConfig(suites=["libero_spatial", "libero_object"], tasks=[10]))
    with pytest.raises(ValueError, match="suite"):
        validate(CollectConfig(suites=["libero_spatial", "libero_90"]))
