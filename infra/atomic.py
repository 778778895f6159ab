"""Atomic file writes: a file holds either its old content or the complete new one, never a partial file.

    atomic_write_json(out / "results.json", result, indent=2)
    atomic_write_text(path, html)
    atomic_write_bytes(path, data)
    atomic_torch_save(path, {"config": ..., "state_dict": ...})
    atomic_write(path, lambda tmp: fig.savefig(tmp, format="png"))   # any writer given a temporary path

The writer writes to a temporary file beside `path` (`.<name>.<random>.tmp`, same directory, so the
rename cannot cross filesystems); the file is then fsynced and renamed onto `path` with `os.replace`,
which is atomic on POSIX and Windows. If the writer raises (or the process is interrupted), the
temporary file is removed and `path` is untouched; a process killed outright can leave the temporary
file behind, never a partial `path`.

Standard library only (torch is imported by `atomic_torch_save` alone), so every package may import it.
"""
from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

# mkstemp creates 0600 files; give ours the usual 0666 & ~umask, as open() would.
_UMASK = os.umask(0)
os.umask(_UMASK)
FILE_MODE = 0o666 & ~_UMASK


def fsync_file(path: str | os.PathLike) -> None:
    """Flush a file's data to disk (so a rename after it cannot expose an empty file after a crash)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_dir(path: str | os.PathLike) -> None:
    """Persist directory entries (renames); a no-op where directories cannot be opened (Windows)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass  # some filesystems refuse fsync on directories; the rename itself is still atomic
    finally:
        os.close(fd)


@contextmanager
def atomic_file(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path beside `path`; when the block ends normally it is fsynced and renamed onto `path`.

    Creates `path`'s parent folders. On an exception the temporary file is removed and `path` is untouched.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    tmp = Path(name)
    try:
        yield tmp
        os.chmod(tmp, FILE_MODE)
        fsync_file(tmp)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)


def atomic_write(path: str | os.PathLike, write: Callable[[Path], Any]) -> Path:
    """Call `write(tmp)` to write the new content to a temporary path, then move it onto `path`; return `path`.

    `write` must write to the path it is given (it may open it, or pass it to savefig, np.save on a file
    object, shutil.copyfile, ...): the general form of the helpers below.
    """
    with atomic_file(path) as tmp:
        write(tmp)
    return Path(path)


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> Path:
    """Replace `path` with `data`, atomically."""
    return atomic_write(path, lambda tmp: tmp.write_bytes(data))


def atomic_write_text(path: str | os.PathLike, text: str, encoding: str = "utf-8") -> Path:
    """Replace `path` with `text`, atomically."""
    return atomic_write(path, lambda tmp: tmp.write_text(text, encoding=encoding))


def atomic_write_json(path: str | os.PathLike, obj: Any, **dumps_kwargs: Any) -> Path:
    """Replace `path` with `json.dumps(obj, **dumps_kwargs)`, atomically (the object is serialised first,
    so an unserialisable object leaves `path` as it was)."""
    return atomic_write_text(path, json.dumps(obj, **dumps_kwargs))


def atomic_torch_save(path: str | os.PathLike, obj: Any) -> Path:
    """`torch.save(obj, path)`, atomically: a reader never loads a truncated checkpoint."""
    import torch

    return atomic_write(path, lambda tmp: torch.save(obj, tmp))
