"""sha256 of dataset files, computed once per file per process and checked on every read.

The reader checks a file's recorded sha256 when it opens the file for decoding, not only when a
dataset is opened with verify=True: a flipped bit in an mp4 still decodes (to wrong pixels), so the
decoder cannot be relied on to notice. Hashing costs one pass over bytes that are read anyway, and the
digest is cached under the file's identity (device, inode, size, mtime), so a training run that
decodes an episode many times hashes it once; a file replaced or rewritten since is hashed again.

    source = open_checked(path)          # (digest, a BytesIO of the bytes) on first open, else (digest, path)
    digest = file_digest(path)           # cached hash without keeping the bytes (verify=True; the writer)
    digest = bytes_digest(data)          # bytes in memory (a file about to be written, a meta file read)
"""
from __future__ import annotations

import hashlib
import io
import os
import threading
from pathlib import Path

_BLOCK = 1 << 20
_lock = threading.Lock()
_digests: dict[tuple[int, int, int, int], str] = {}
_hashed = 0  # files hashed by this process (a cached digest does not count)


def _identity(path: Path) -> tuple[int, int, int, int]:
    st = os.stat(path)
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns


def _remember(key: tuple[int, int, int, int], digest: str) -> str:
    global _hashed
    with _lock:
        _digests[key] = digest
        _hashed += 1
    return digest


def bytes_digest(data: bytes) -> str:
    """Hex sha256 of `data`: the one hash every recorded checksum of a dataset uses."""
    return hashlib.sha256(data).hexdigest()


def file_digest(path: str | os.PathLike) -> str:
    """Hex sha256 of the file at `path`; computed on the first call for this file, then cached."""
    path = Path(path)
    key = _identity(path)
    cached = _digests.get(key)
    if cached is not None:
        return cached
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(_BLOCK), b""):
            digest.update(block)
    return _remember(key, digest.hexdigest())


def open_checked(path: str | os.PathLike) -> tuple[str, Path | io.BytesIO]:
    """(sha256, source to decode) of the file at `path`.

    On the first open in this process the bytes are read once, hashed and handed to the decoder from
    memory (so the file is not read twice); afterwards the cached digest comes with the path itself.
    The caller compares the digest with the recorded one before decoding the source.
    """
    path = Path(path)
    key = _identity(path)
    cached = _digests.get(key)
    if cached is not None:
        return cached, path
    data = path.read_bytes()
    return _remember(key, bytes_digest(data)), io.BytesIO(data)


def files_hashed() -> int:
    """How many files this process has hashed so far (cache hits excluded)."""
    return _hashed


def clear_digest_cache() -> None:
    """Forget every cached digest (the next read of each file hashes it again)."""
    with _lock:
        _digests.clear()
