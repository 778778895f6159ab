"""Real LIBERO collection (scripts/collect.py) SIGKILLed mid-episode and around the dataset commit, then resumed.

The README promises that a killed collection resumes and that its episodes are those of an uninterrupted
run: the plan fixes every episode's seed and initial state, MuJoCo is deterministic, and the writer only
ever shows committed episodes. Here the resumed dataset's files (data, videos, every meta file and the
seal) must equal, byte for byte, those of a run that was never killed. Tiny config: one task, two
20-step episodes, one 32 px view; each process takes ~10 s, most of it building the simulator.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from robot_data.dataset import EpisodeDataset
from tests.crash.harness import run_script
from tests.crash.test_dataset_crash import files

pytestmark = [pytest.mark.slow, pytest.mark.libero]

EPISODES = 2


def collect_args(out: Path) -> list[str]:
    return [f"out_dir={out}", "tasks=[0]", f"episodes_per_task={EPISODES}", "perturbed_fraction=0.5",
            "perturbations=[early_release]", "views=[agentview]", "image_size=32", "max_steps=20",
            "preview_videos=0", "seed=3"]


def dataset_files(root: Path) -> dict[str, bytes]:
    """The dataset's files: what collection writes beside it (summary.json, previews/) left out."""
    return {rel: data for rel, data in files(root).items() if rel.split("/")[0] in ("data", "videos", "meta")}


def test_collection_killed_mid_episode_and_around_the_commit_resumes_to_the_same_dataset(tmp_path: Path) -> None:
    ref, out = tmp_path / "reference", tmp_path / "run"
    run_script("scripts/collect.py", collect_args(ref))
    # 1. killed at step 10 of the first episode: the dataset exists and is empty
    run_script("scripts/collect.py", collect_args(out), crash="collect.step:10")
    assert len(EpisodeDataset(out, verify=True)) == 0
    # 2. resumed: episode 0 committed; killed with episode 1's files written, before info.json commits it
    run_script("scripts/collect.py", collect_args(out), crash="dataset.before_commit:2")
    assert len(EpisodeDataset(out, verify=True)) == 1
    assert (out / "data/chunk-000/file-001.parquet").is_file()  # the uncommitted episode's leftovers
    # 3. resumed: episode 1 recorded again and committed; killed right after info.json, the seal still open
    run_script("scripts/collect.py", collect_args(out), crash="dataset.after_commit:1")
    assert len(EpisodeDataset(out, verify=True)) == EPISODES
    # 4. resumed: nothing left to record; the seal is closed and the summary written
    run_script("scripts/collect.py", collect_args(out))
    assert dataset_files(out) == dataset_files(ref)
    assert json.loads((out / "summary.json").read_text()) == json.loads((ref / "summary.json").read_text())
    ds = EpisodeDataset(out, verify=True)
    assert sorted(m.extra["plan_index"] for m in ds.meta) == list(range(EPISODES))
