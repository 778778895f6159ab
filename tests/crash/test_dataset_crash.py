"""The dataset writer killed (SIGKILL, a real subprocess) before and after its commit file, then resumed.

A killed append leaves a dataset that opens with the committed episodes only; the next writer removes the
leftovers, and the resumed dataset's files are byte for byte those of an uninterrupted run (the README:
"an episode exists iff its index is below total_episodes"; docs/dataset.md, Guarantees).
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from envs.dataset import EpisodeDataset
from tests.crash.drivers import synthetic_episode
from tests.crash.harness import run_driver
from tests.envs.test_dataset import assert_episode_equal

N = 4


def files(root: Path) -> dict[str, bytes]:
    """Every file of the dataset (the writer's lock file aside) by relative path."""
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and p.name != ".writer.lock"}


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("uninterrupted") / "ds"
    run_driver("dataset", str(root), str(N))
    return root


def test_killed_around_the_commit_resumes_to_the_same_files(reference: Path, tmp_path: Path) -> None:
    root = tmp_path / "ds"
    # 1. killed during the first append, after its episode files and stats.json, before info.json
    run_driver("dataset", str(root), str(N), crash="dataset.before_commit:1")
    assert json.loads((root / "meta/info.json").read_text())["total_episodes"] == 0
    assert (root / "data/chunk-000/file-000.parquet").is_file()  # the uncommitted episode's leftovers
    assert len(EpisodeDataset(root, verify=True)) == 0  # invisible: the dataset opens, empty
    # 2. resumed, killed just after the second commit (episodes 0 and 1 are in)
    run_driver("dataset", str(root), str(N), crash="dataset.after_commit:2")
    ds = EpisodeDataset(root, verify=True)
    assert len(ds) == 2
    for i in range(2):
        assert_episode_equal(ds[i], synthetic_episode(i))
    # 3. resumed, killed before the last commit (episode 3's files and stats written, not committed)
    run_driver("dataset", str(root), str(N), crash="dataset.before_commit:2")
    assert len(EpisodeDataset(root, verify=True)) == 3
    # 4. resumed to the end: the same files, byte for byte, as the run that was never killed
    run_driver("dataset", str(root), str(N))
    assert files(root) == files(reference)
    ds = EpisodeDataset(root, verify=True)
    for i in range(N):
        assert_episode_equal(ds[i], synthetic_episode(i))
