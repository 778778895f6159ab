"""meta/seal.sha256: the sha256 of every meta file EpisodeWriter committed, sealed by its own digest.

Data parquets and mp4s are checked against the sha256 their meta/episodes row records; this file covers
what records them and what no row can: meta/info.json, stats.json, tasks.parquet and every
meta/episodes parquet. Without it a flipped bit that still parses (a digit of total_frames or fps, a
letter of a feature or task name) is read as data. The format is sha256sum's, one line per accepted
digest, sorted, and a last line holding the sha256 of all the bytes above it:

    # EpisodeWriter seal v1: ...
    <sha256>  meta/episodes/chunk-000/file-000.parquet
    <sha256>  meta/info.json
    ...
    <sha256 of the lines above>  meta/seal.sha256

A file may have two lines while a commit is under way: the writer first writes a seal that accepts the
old and the new version of every meta file it is about to replace ("opening" it), then replaces them,
commits info.json and writes the seal of the new state alone. So after a kill at any point every meta
file matches the seal on disk, and a reader that opens mid-commit sees each file in a version the seal
accepts; a reader that saw the seal change under it simply reads again (`read_meta`).

The seal is optional: a dataset without one (lerobot's, or ours from before the seal) opens unchecked.
A dataset another tool extended after us (its new episodes' rows record no sha256 of ours) has a stale
seal; it opens unchecked too, with a warning, and our writer re-seals it when it next appends.
"""
from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from pathlib import Path

from infra.atomic import atomic_write_bytes
from robot_data.dataset.errors import DatasetCorruptError
from robot_data.dataset.integrity import bytes_digest as digest
from robot_data.dataset.layout import INFO_PATH, STATS_PATH, TASKS_PATH, read_info
from robot_data.dataset.rows import episodes_files, read_rows

logger = logging.getLogger(__name__)

SEAL_PATH = "meta/seal.sha256"
_HEADER = (b"# EpisodeWriter seal v1: sha256 of each meta file (a file with two lines: a commit was under way, "
           b"either version is accepted); the last line is the sha256 of all the lines above it\n")
_LINE = re.compile(rb"([0-9a-f]{64})  ([A-Za-z0-9_./-]+)\n")
_ATTEMPTS = 5  # reads of the meta files, should a writer commit in between each time

Entries = dict[str, frozenset[str]]  # relative path -> the digests accepted for it


def format_seal(entries: Entries) -> bytes:
    body = _HEADER + b"".join(f"{d}  {rel}\n".encode() for rel in sorted(entries) for d in sorted(entries[rel]))
    return body + f"{digest(body)}  {SEAL_PATH}\n".encode()


def parse_seal(data: bytes) -> Entries:
    """The entries of a seal file's bytes; DatasetCorruptError naming it when they are not exactly what a
    writer wrote (any flipped bit: the last line's digest covers every byte above it)."""
    body, _, last = data.rstrip(b"\n").rpartition(b"\n")
    body += b"\n"
    match = _LINE.fullmatch(last + b"\n")
    if not data.startswith(_HEADER) or match is None or match[2].decode() != SEAL_PATH or not data.endswith(b"\n"):
        raise DatasetCorruptError(f"{SEAL_PATH}: malformed (its header or its last line, the seal, is damaged)")
    if match[1].decode() != digest(body) or len(data) != len(body) + len(match[0]):
        raise DatasetCorruptError(f"{SEAL_PATH}: its content does not match its own sha256 (changed since written)")
    entries: dict[str, set[str]] = {}
    for line in body[len(_HEADER):].splitlines(keepends=True):
        m = _LINE.fullmatch(line)
        if m is None:  # unreachable for a file whose digest matched, unless a writer wrote garbage
            raise DatasetCorruptError(f"{SEAL_PATH}: malformed line {line[:80]!r}")
        entries.setdefault(m[2].decode(), set()).add(m[1].decode())
    return {rel: frozenset(ds) for rel, ds in entries.items()}


def write_seal(root: Path, entries: Entries) -> None:
    """Atomically replace the seal (only when its content changes: reopening a writer writes nothing)."""
    data = format_seal(entries)
    if _read_optional(root / SEAL_PATH) != data:
        atomic_write_bytes(root / SEAL_PATH, data)


def merge(old: Entries, new: Entries) -> Entries:
    """The seal of a transition from `old` to `new`: each file in either version (see the module docstring)."""
    return {rel: old.get(rel, frozenset()) | new.get(rel, frozenset()) for rel in old.keys() | new.keys()}


@dataclass
class MetaSnapshot:
    """The bytes of the meta files, read once and checked against the seal (when there is one and it is
    current); the reader parses these bytes, never a newer version of the file."""

    info: bytes
    tasks: bytes | None  # None: no such file
    stats: bytes | None
    episodes: dict[str, bytes]  # meta/episodes files by relative path: the sealed ones, else all on disk
    sealed: bool  # checked against a seal


def read_meta(root: Path) -> MetaSnapshot:
    """The meta files of the dataset at `root`, checked against meta/seal.sha256 where it exists.

    DatasetCorruptError names the first file that does not match (or the seal itself, when damaged).
    Episodes files the seal lists but that are gone are skipped here: a writer recovering from a kill
    removes uncommitted ones before it re-seals, and a missing committed one is reported by `read_rows`."""
    for _ in range(_ATTEMPTS):
        seal_bytes = _read_optional(root / SEAL_PATH)
        snap, mismatched = _read_and_check(root, None if seal_bytes is None else parse_seal(seal_bytes))
        if not mismatched:
            return snap
        if _read_optional(root / SEAL_PATH) == seal_bytes:
            break  # the seal did not move: the files really differ from it
    if INFO_PATH in mismatched:  # a damaged info.json that no longer parses is best named with its bad field
        try:
            read_info(root / INFO_PATH, "expected 'v3.0'", any_v3=True, data=snap.info)
        except DatasetCorruptError:
            raise
        except ValueError as err:  # another codebase_version: from a flipped bit, as the seal says
            raise DatasetCorruptError(f"{INFO_PATH} does not match its sha256 in {SEAL_PATH}: {err}") from None
    snap.episodes = {p.relative_to(root).as_posix(): p.read_bytes() for p in episodes_files(root)}
    if _extended_by_another_tool(root, snap):
        logger.warning("%s: meta files changed since EpisodeWriter sealed them (%s), by a tool that records no "
                       "sha256 of its episodes (e.g. lerobot): read unchecked; our writer re-seals it on its next "
                       "append", root, ", ".join(mismatched))
        snap.sealed = False
        return snap
    rel = mismatched[0]
    what = "is missing" if not (root / rel).is_file() else "does not match its sha256 in " + SEAL_PATH
    raise DatasetCorruptError(f"{rel} {what} (changed since EpisodeWriter committed it)")


def reseal(root: Path) -> None:
    """Seal the meta files as they are now (those the seal lists, else all of them). For a deliberate edit of a
    meta file (a repair, a test); our writer keeps its seal current by itself."""
    data = _read_optional(root / SEAL_PATH)
    rels = set(parse_seal(data)) if data is not None else {INFO_PATH, TASKS_PATH, STATS_PATH}
    rels |= {p.relative_to(root).as_posix() for p in episodes_files(root)}
    write_seal(root, {rel: frozenset([digest((root / rel).read_bytes())]) for rel in sorted(rels)
                      if (root / rel).is_file()})


def _read_and_check(root: Path, entries: Entries | None) -> tuple[MetaSnapshot, list[str]]:
    """The snapshot and the files that differ from `entries` (none are checked when there is no seal)."""
    meta = {rel: _read_optional(root / rel) for rel in (INFO_PATH, TASKS_PATH, STATS_PATH)}
    info = meta[INFO_PATH]
    if info is None:
        raise FileNotFoundError(f"{root / INFO_PATH} not found")
    if entries is None:
        episodes = {p.relative_to(root).as_posix(): p.read_bytes() for p in episodes_files(root)}
        return MetaSnapshot(info, meta[TASKS_PATH], meta[STATS_PATH], episodes, sealed=False), []
    episodes = {}
    for rel in sorted(r for r in entries if r.startswith("meta/episodes/")):
        data = _read_optional(root / rel)
        if data is not None:
            episodes[rel] = data
    mismatched = [rel for rel, data in (*meta.items(), *episodes.items())
                  if (data is not None or rel in entries)
                  and (data is None or digest(data) not in entries.get(rel, ()))]
    return MetaSnapshot(info, meta[TASKS_PATH], meta[STATS_PATH], episodes, sealed=True), mismatched


def _extended_by_another_tool(root: Path, snap: MetaSnapshot) -> bool:
    """Whether the committed episodes, as info.json counts them, include one whose row records no sha256 of
    its data file: written by another tool after us. A flipped bit cannot add such a row."""
    try:
        info, _ = read_info(root / INFO_PATH, "", any_v3=True, data=snap.info)
        rows = read_rows(root, int(info["total_episodes"]), int(info["chunks_size"]), sources=snap.episodes)
    except (DatasetCorruptError, ValueError, KeyError, TypeError):
        return False
    return any(not isinstance(row.get("data/sha256"), str) for row in rows)


def _read_optional(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None


__all__ = ["SEAL_PATH", "Entries", "MetaSnapshot", "format_seal", "merge", "parse_seal", "read_meta",
           "reseal", "write_seal"]
