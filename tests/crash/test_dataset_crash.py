"""The dataset writer killed (SIGKILL, a real subprocess) around its commit file and its seal, then resumed.

A killed append leaves a dataset that opens with the committed episodes only; the next writer removes the
leftovers, and the resumed dataset's files are byte for byte those of an uninterrupted run (the README:
"an episode exists iff its index is below total_episodes"; docs/dataset.md, Guarantees).
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from robot_data.dataset import EpisodeDataset
from robot_data.dataset.seal import SEAL_PATH
from tests.crash.drivers import synthetic_episode
from tests.crash.harness import run_driver
from tests.robot_data.test_dataset import assert_episode_equal

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


def seal_lines(root: Path, rel: str) -> int:
    """How many digests meta/seal.sha256 accepts for `rel` (2 while a commit is under way)."""
    return sum(line.endswith(f"  {rel}") for line in (root / SEAL_PATH).read_text().splitlines())


def test_killed_around_the_commit_resumes_to_the_same_files(reference: Path, tmp_path: Path) -> None:
    root = tmp_path / "ds"
    # 1. killed during the first append, after its episode files, the opened seal and stats.json, before info.json
    run_driver("dataset", str(root), str(N), crash="dataset.before_commit:1")
    assert json.loads((root / "meta/info.json").read_text())["total_episodes"] == 0
    assert (root / "data/chunk-000/file-000.parquet").is_file()  # the uncommitted episode's leftovers
    assert seal_lines(root, "meta/stats.json") == 2  # the old and the new stats.json are both accepted
    ds = EpisodeDataset(root, verify=True)
    assert len(ds) == 0 and ds.sealed  # invisible: the dataset opens, empty, checked against the open seal
    # 2. resumed, killed just after the second commit (episodes 0 and 1 are in), the seal not yet closed
    run_driver("dataset", str(root), str(N), crash="dataset.after_commit:2")
    assert seal_lines(root, "meta/info.json") == 2
    ds = EpisodeDataset(root, verify=True)
    assert len(ds) == 2 and ds.sealed
    for i in range(2):
        assert_episode_equal(ds[i], synthetic_episode(i))
    # 3. resumed: the reopening writer closes the seal; episode 2 committed; killed once episode 3's seal is
    # opened, before tasks.parquet and stats.json change
    run_driver("dataset", str(root), str(N), crash="dataset.seal_opened:2")
    ds = EpisodeDataset(root, verify=True)
    assert len(ds) == 3 and ds.sealed
    assert seal_lines(root, "meta/info.json") == 2 and seal_lines(root, "meta/episodes/chunk-000/file-003.parquet") == 1
    # 4. resumed, killed before the last commit (episode 3's files and stats written, not committed)
    run_driver("dataset", str(root), str(N), crash="dataset.before_commit:1")
    assert len(EpisodeDataset(root, verify=True)) == 3
    # 5. resumed to the end: the same files, byte for byte, as the run that was never killed (the seal too)
    run_driver("dataset", str(root), str(N))
    assert files(root) == files(reference)
    assert all(seal_lines(root, rel) == 1 for rel in ("meta/info.json", "meta/stats.json", "meta/tasks.parquet"))
    ds = EpisodeDataset(root, verify=True)
    for i in range(N):
        assert_episode_equal(ds[i], synthetic_episode(i))
    assert ds.stats.keys()  # stats.json agrees with the per-episode stats (else DatasetCorruptError)
