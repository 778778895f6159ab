"""Every file read for decoding is checked against its recorded sha256, verify=False included, once per process.

Single bits are flipped at random offsets (fixed seeds) in each kind of episode file: a data parquet,
an mp4 of each view, and the meta/episodes parquet that records the other files' hashes.
"""
from __future__ import annotations

import pickle
import shutil
from pathlib import Path

import numpy as np
import pytest

from envs.dataset import DatasetCorruptError, EpisodeDataset
from envs.dataset.integrity import clear_digest_cache, files_hashed
from tests.envs.test_dataset import VIEWS, make_episodes, write

FLIPS = 6  # random single-bit flips per file kind


@pytest.fixture(scope="module")
def intact(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("intact") / "ds"
    write(root, make_episodes())  # 3 episodes, views agentview + wrist, 32 px
    return root


def read_everything(root: Path) -> bytes:
    """Every episode as the pipeline reads it (verify=False, then ds[i]), serialised for comparison."""
    ds = EpisodeDataset(root, verify=False)
    episodes = [ds[i] for i in range(len(ds))]
    return pickle.dumps([(ep.frames, ep.state, ep.action, ep.reward, ep.success, ep.instruction, ep.extra)
                         for ep in episodes] + [ds.meta])


def flipped_copy(intact: Path, dest: Path, rel: str, rng: np.random.Generator) -> int:
    """A copy of the dataset with one bit of `rel` flipped at a random offset; returns the offset."""
    shutil.copytree(intact, dest)
    path = dest / rel
    raw = bytearray(path.read_bytes())
    offset = int(rng.integers(len(raw)))
    raw[offset] ^= 1 << int(rng.integers(8))
    path.write_bytes(bytes(raw))
    return offset


def test_intact_dataset_reads_and_hashes_each_file_once(intact: Path) -> None:
    clear_digest_cache()
    before = files_hashed()
    first = read_everything(intact)
    n_files = 3 * (1 + len(VIEWS))  # each episode's data parquet and one mp4 per view
    assert files_hashed() - before == n_files
    # reading again, a second dataset object, a verify=True open and single views: no file hashed again
    assert read_everything(intact) == first
    ds = EpisodeDataset(intact, verify=True)
    for i in range(len(ds)):
        for view in VIEWS:
            ds.load_view(i, view)
    assert files_hashed() - before == n_files
    # a file written since (new mtime) is hashed again
    rel = "data/chunk-000/file-001.parquet"
    (intact / rel).write_bytes((intact / rel).read_bytes())
    EpisodeDataset(intact, verify=False)[1]
    assert files_hashed() - before == n_files + 1


@pytest.mark.parametrize("seed, rel", [
    (2, "data/chunk-000/file-001.parquet"),
    (3, "videos/observation.images.agentview/chunk-000/file-001.mp4"),
    (4, "videos/observation.images.wrist/chunk-000/file-001.mp4"),
])
def test_a_flipped_bit_in_a_hashed_file_is_detected_on_read(intact: Path, tmp_path: Path, seed: int,
                                                            rel: str) -> None:
    rng = np.random.default_rng(seed)
    for k in range(FLIPS):
        root = tmp_path / f"flip{k}"
        flipped_copy(intact, root, rel, rng)
        ds = EpisodeDataset(root, verify=False)  # the fast open the pipeline uses
        ds[0]  # the other episodes are untouched and read fine
        ds[2]
        with pytest.raises(DatasetCorruptError, match=f"^episode 1: {rel} checksum mismatch"):
            ds[1]
        if rel.endswith(".mp4"):  # the view alone, as the world-model clips read it
            view = rel.split("/")[1].removeprefix("observation.images.")
            with pytest.raises(DatasetCorruptError, match=f"^episode 1: {rel} checksum mismatch"):
                ds.load_view(1, view)
        with pytest.raises(DatasetCorruptError, match=f"^episode 1: {rel} checksum mismatch"):
            EpisodeDataset(root, verify=True)


def test_a_flipped_bit_in_the_episodes_parquet_never_changes_what_is_read(intact: Path, tmp_path: Path) -> None:
    """The meta/episodes parquet carries the hashes and is not itself hashed: its page checksums and
    row checks catch a flip in any byte that is read; a flip elsewhere (e.g. in the footer's column
    statistics) changes nothing that is read, which is checked here bit for bit."""
    rel = "meta/episodes/chunk-000/file-001.parquet"
    want = read_everything(intact)
    rng = np.random.default_rng(1)
    detected = 0
    for k in range(3 * FLIPS):
        root = tmp_path / f"flip{k}"
        offset = flipped_copy(intact, root, rel, rng)
        try:
            got = read_everything(root)
        except DatasetCorruptError as err:
            # named by episode where a row is read, by file where the file cannot be (it may hold many episodes)
            assert str(err).startswith((f"episode 1: {rel} ", f"{rel} is unreadable")), (offset, str(err))
            detected += 1
        else:
            assert got == want, f"a flip at byte {offset} of {rel} changed what is read, silently"
    assert detected >= FLIPS  # most of the file is data pages under checksums


@pytest.mark.parametrize("rel", ["meta/stats.json", "meta/tasks.parquet"])
def test_a_flipped_bit_in_the_unhashed_meta_files_is_named_or_changes_nothing_read(intact: Path, tmp_path: Path,
                                                                                   rel: str) -> None:
    """stats.json and tasks.parquet are rewritten by every append, so no episode row records their sha256.
    A flip there must either raise one DatasetCorruptError naming the file (bad JSON, stats that disagree with
    the per-episode stats in meta/episodes, a parquet page whose checksum fails, an unreadable table) or leave
    what is read unchanged; never a raw decoder error, never a silently changed value."""
    original = EpisodeDataset(intact, verify=False)
    tasks, before = original.tasks, original.stats
    rng = np.random.default_rng(7)
    named = 0
    for k in range(30):
        dest = tmp_path / f"flip{k}"
        flipped_copy(intact, dest, rel, rng)
        try:
            ds = EpisodeDataset(dest, verify=False)
            stats = ds.stats
        except DatasetCorruptError as err:
            assert rel in str(err)
            named += 1
            continue
        assert ds.tasks == tasks  # a flip outside the content (padding, metadata, whitespace)
        assert stats.keys() == before.keys() and all(
            np.array_equal(stats[k][n], before[k][n], equal_nan=True) for k in before for n in before[k])
    assert named > 0  # the flips that matter are caught, not only survived
