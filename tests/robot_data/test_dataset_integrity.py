"""Every file read for decoding is checked against its recorded sha256, verify=False included, once per process;
every meta file against meta/seal.sha256 when the dataset is opened.

Single bits are flipped at random offsets (fixed seeds) in every kind of file the writer produces: each is
detected, with one DatasetCorruptError naming the file.
"""
from __future__ import annotations

import pickle
import re
import shutil
import zlib
from pathlib import Path

import numpy as np
import pytest

from robot_data.dataset import DatasetCorruptError, EpisodeDataset, EpisodeWriter
from robot_data.dataset.integrity import clear_digest_cache, files_hashed
from robot_data.dataset.seal import SEAL_PATH
from tests.robot_data.test_dataset import VIEWS, make_episodes, write

FLIPS = 6  # random single-bit flips per file kind (the older, per-read tests)
KIND_FLIPS = 10  # random single-bit flips per file kind in the every-kind test (about 0.1 s each)


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


# every kind of file EpisodeWriter writes (sim_labels/ and previews/ are written beside the dataset by other
# code, and EpisodeDataset reads neither)
META_KINDS = ["meta/info.json", "meta/stats.json", "meta/tasks.parquet",
              "meta/episodes/chunk-000/file-001.parquet", "meta/seal.sha256"]
EPISODE_KINDS = ["data/chunk-000/file-001.parquet", "videos/observation.images.agentview/chunk-000/file-001.mp4",
                 "videos/observation.images.wrist/chunk-000/file-001.mp4"]


def open_and_read(root: Path) -> None:
    """Open as the pipeline does and read everything a caller can get: episodes, stats, tasks, metadata."""
    ds = EpisodeDataset(root, verify=False)
    for i in range(len(ds)):
        ds[i]
    assert ds.stats.keys() and ds.tasks and ds.meta


def test_every_file_kind_is_covered(intact: Path) -> None:
    """The kinds flipped below are all the kinds of file the writer leaves (the lock file aside)."""
    kinds = {re.sub(r"file-\d+", "file-001", p.relative_to(intact).as_posix()) for p in intact.rglob("*")
             if p.is_file() and p.name != ".writer.lock"}
    assert kinds == set(META_KINDS) | set(EPISODE_KINDS)


@pytest.mark.parametrize("rel", META_KINDS + EPISODE_KINDS)
def test_every_random_bit_flip_in_every_file_kind_is_detected(intact: Path, rel: str) -> None:
    """KIND_FLIPS random single-bit flips per kind (seeded by the kind), each in place and undone after. A meta
    file's flip is refused when the dataset is opened, by the reader and by a writer (which must never
    re-seal it); an episode file's when it is read. A flip that stops a file decoding names it too."""
    path = intact / rel
    original = path.read_bytes()
    rng = np.random.default_rng(zlib.crc32(rel.encode()))
    try:
        for _ in range(KIND_FLIPS):
            raw = bytearray(original)
            offset, bit = int(rng.integers(len(raw))), int(rng.integers(8))
            raw[offset] ^= 1 << bit
            path.write_bytes(bytes(raw))
            clear_digest_cache()  # the in-place write may keep the file's (inode, size, mtime) identity
            where = f"byte {offset} bit {bit} of {rel}"
            with pytest.raises(DatasetCorruptError) as err:
                if rel in META_KINDS:
                    EpisodeDataset(intact, verify=False)
                else:
                    open_and_read(intact)
            assert rel in str(err.value), f"{where}: {err.value}"
            if rel in META_KINDS:
                with pytest.raises(DatasetCorruptError, match=re.escape(rel)):
                    EpisodeWriter(intact).close()
                assert path.read_bytes() == raw, f"{where}: a writer rewrote the damaged file"
    finally:
        path.write_bytes(original)
        clear_digest_cache()
    open_and_read(intact)  # intact again


def test_a_dataset_without_a_seal_opens_unchecked(intact: Path, tmp_path: Path) -> None:
    """The seal is optional (lerobot writes none): without it the meta files are read as they are, and the
    next writer to append seals the dataset again."""
    root = tmp_path / "ds"
    shutil.copytree(intact, root)
    (root / SEAL_PATH).unlink()
    assert not EpisodeDataset(root, verify=True).sealed
    EpisodeWriter(root).close()  # an open alone re-derives it
    assert (root / SEAL_PATH).read_bytes() == (intact / SEAL_PATH).read_bytes()
    assert EpisodeDataset(root).sealed


def test_a_reader_that_saw_the_seal_before_a_commit_reads_again(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """A reader that read the seal, then meta files a writer committed since, finds them not matching; as the
    seal has moved meanwhile, it reads again instead of calling the dataset corrupt."""
    from robot_data.dataset import seal as seal_module

    root = tmp_path / "ds"
    episodes = make_episodes()
    write(root, episodes[:1])
    old_seal = (root / SEAL_PATH).read_bytes()
    write(root, episodes[1:2])  # the commit the reader raced with
    real_read = seal_module._read_optional
    stale = [old_seal]  # the first read of the seal returns the one from before the commit

    def racing_read(path: Path) -> bytes | None:
        return stale.pop() if path == root / SEAL_PATH and stale else real_read(path)

    monkeypatch.setattr(seal_module, "_read_optional", racing_read)
    ds = EpisodeDataset(root, verify=True)
    assert len(ds) == 2 and ds.sealed and not stale


def test_a_flipped_bit_in_a_sim_labels_file_is_named_or_changes_nothing(tmp_path: Path) -> None:
    """sim_labels/*.npz (written beside a dataset by robot_data.sim_labels, read by the state reward): a zip whose
    members carry a CRC-32, so a flip in any array or the info is caught; the error must name the file, not
    escape as a bare BadZipFile or EOFError. A flip in a byte nothing reads (a header's version field, say)
    leaves every label as written."""
    from robot_data.sim_labels import load_labels, write_labels

    rng = np.random.default_rng(5)
    T = 20
    labels = {"object_pos": rng.standard_normal((T, 3)).astype(np.float32),
              "target_pos": rng.standard_normal((T, 3)).astype(np.float32), "grasped": rng.random(T) > 0.5}
    path = tmp_path / "sim_labels" / "episode_000000.npz"
    write_labels(path, labels, {"objects": ["bowl", "plate"], "task_id": 0, "length": T})
    original, want = path.read_bytes(), load_labels(path)
    named = 0
    for _ in range(4 * KIND_FLIPS):
        raw = bytearray(original)
        raw[int(rng.integers(len(raw)))] ^= 1 << int(rng.integers(8))
        path.write_bytes(bytes(raw))
        try:
            got = load_labels(path)
        except ValueError as err:
            assert str(path) in str(err)
            named += 1
            continue
        assert got["info"] == want["info"] and all(np.array_equal(got[k], want[k]) for k in labels)
    assert named >= 2 * KIND_FLIPS  # most bytes are CRC-covered member data
