"""Reading our checkpoint files without running code, with one error that names the file when one is unusable.

    blob = load_torch(path, "world model")              # torch.load(weights_only=True), errors name the path
    blob = expect_format(blob, path, "world model", "vla_world_model", ("config", "state_dict"))
    restore(model, blob["state_dict"], path, "world model")
    check_safetensors(folder / "model.safetensors", "world-model checkpoint")

Why: torch.load without weights_only unpickles arbitrary objects, so a planted file runs its code as soon
as it is loaded. With weights_only=True torch rebuilds tensors, dicts, lists, tuples, numbers, strings and
None only, and refuses any other class before it is built. Every checkpoint the project writes holds only
those (configs and RNG states as plain data, JSON text or tensors), so nothing is lost by refusing the rest.

torch's own errors for unusable files are unhelpful to a person: an empty file gives a bare EOFError,
random bytes an UnpicklingError whose text advises weights_only=False (the very thing not to do), and
neither names the file. `CheckpointError` says which file, what kind it should have been and what is wrong.
"""
from __future__ import annotations

import os
import pickle
import re
import warnings
from collections.abc import Iterable
from pathlib import Path
from typing import Any, TypeVar

import torch

from infra.atomic import atomic_torch_save

T = TypeVar("T")


class CheckpointError(ValueError):
    """A checkpoint file is empty, truncated or damaged, not of the expected kind, or holds Python objects
    that loading would have to run code to build (refused)."""


_GLOBAL = re.compile(r"GLOBAL ([\w.]+)")


def load_torch(path: str | os.PathLike, what: str, map_location: str | torch.device | None = "cpu",
               mmap: bool = False) -> Any:
    """`torch.load(path, weights_only=True)`; FileNotFoundError if missing, CheckpointError naming `path`
    and `what` (e.g. "world model") if it cannot be read as plain data and tensors. mmap=True maps the
    tensor data instead of reading it (a cheap check of a file something else will load)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: {what} not found" + (" (it is a folder)" if path.is_dir() else ""))
    if path.stat().st_size == 0:
        raise CheckpointError(f"{path}: empty file (0 bytes), not a {what} (a save that never finished?)")
    try:
        with warnings.catch_warnings():  # torch's note on a raw pickle's protocol: noise next to our error
            warnings.filterwarnings("ignore", message="Detected pickle protocol")
            return torch.load(path, map_location=map_location, weights_only=True, mmap=mmap)
    except pickle.UnpicklingError as err:
        found = _GLOBAL.search(str(err))
        if found:  # a class outside the plain-data set: a payload, or a file not written by this project
            raise CheckpointError(f"{path}: refused: holds a Python object ({found.group(1)}) besides tensors and "
                                  f"plain data; building it could run code, so it is not loaded (not a {what} "
                                  f"written by this project?)") from None
        raise CheckpointError(f"{path}: not a readable {what}: damaged or not a torch file "
                              f"({_torch_reason(err)})") from None
    except (EOFError, RuntimeError, OSError, ValueError) as err:  # truncated zip, short read, bad header
        raise CheckpointError(f"{path}: not a readable {what}: truncated or damaged ({_torch_reason(err)})") from None


def check_safetensors(path: str | os.PathLike, what: str) -> None:
    """CheckpointError naming `path` unless it is a safetensors file whose header covers the whole file.

    Reads the header only: safetensors checks that the tensors it lists fill the file exactly, which
    catches empty, truncated and random files without loading the weights."""
    from safetensors import SafetensorError, safe_open

    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"{path}: missing from the {what}")
    try:
        with safe_open(str(path), framework="pt"):
            pass
    except (SafetensorError, OSError) as err:
        raise CheckpointError(f"{path}: not a readable {what} file: truncated or damaged "
                              f"({_first_line(err)})") from None


def expect_format(blob: Any, path: str | os.PathLike, what: str, fmt: str | None, keys: Iterable[str],
                  version: int | None = None) -> dict:
    """`blob` as a dict, after checking its "format" tag (when `fmt` is given), that it holds `keys`, and its
    "version" (when `version` is given)."""
    if not isinstance(blob, dict) or (fmt is not None and blob.get("format") != fmt):
        raise CheckpointError(f"{path}: not a {what} (expected a file with format {fmt!r})" if fmt else
                              f"{path}: not a {what} (expected a dict of plain data and tensors)")
    missing = [k for k in keys if k not in blob]
    if missing:
        raise CheckpointError(f"{path}: {what} lacks {missing} (damaged, or written by another version)")
    if version is not None and blob.get("version") != version:
        raise CheckpointError(f"{path}: {what} version {blob.get('version')} is not supported (expected {version})")
    return blob


MODEL_KEYS = ("config", "state_dict")


def save_model_file(path: str | os.PathLike, fmt: str, config: dict, state_dict: Any, version: int | None = None,
                    **extra: Any) -> None:
    """The one layout of a model file: {"format", "version" (when given), "config", "state_dict", **extra},
    written atomically (infra.atomic). `load_model_file` reads it back with the matching checks."""
    blob: dict[str, Any] = {"format": fmt}
    if version is not None:
        blob["version"] = version
    atomic_torch_save(path, {**blob, "config": config, "state_dict": state_dict, **extra})


def load_model_file(path: str | os.PathLike, what: str, fmt: str, version: int | None = None,
                    map_location: str | torch.device | None = "cpu", keys: Iterable[str] = MODEL_KEYS) -> dict:
    """A file of `save_model_file`, checked: format tag, `keys` present, version (when given); CheckpointError
    naming `path` otherwise."""
    return expect_format(load_torch(path, what, map_location), path, what, fmt, keys, version)


def config_from(cls: type[T], data: Any, path: str | os.PathLike, what: str) -> T:
    """`cls(**data)`: the config dataclass a checkpoint stores as a dict, or CheckpointError naming the file."""
    try:
        return cls(**data)
    except (TypeError, ValueError) as err:
        raise CheckpointError(f"{path}: its {what} config is unusable ({_first_line(err)})") from None


def restore(module: Any, state: Any, path: str | os.PathLike, what: str) -> None:
    """`module.load_state_dict(state)` with a mismatch reported against the file, not a bare RuntimeError."""
    try:
        module.load_state_dict(state)
    except (RuntimeError, KeyError, ValueError, TypeError) as err:
        raise CheckpointError(f"{path}: its {what} state does not fit ({_first_line(err)})") from None


# torch's texts for unreadable files, as a few words each; the texts themselves advise weights_only=False
_REASONS = (("central directory", "not a complete zip archive"),
            ("mmap can only be used", "not a zip-format torch file"),
            ("Unsupported operand", "unexpected pickle opcode"), ("invalid load key", "unexpected bytes"))


def _torch_reason(err: BaseException) -> str:
    text = str(err)
    if isinstance(err, EOFError):
        return "the file ends too early"
    reason = next((words for needle, words in _REASONS if needle in text), None)
    if reason is None and "weights_only" not in text:
        reason = _first_line(err)
    return f"{type(err).__name__}: {reason}" if reason else type(err).__name__


def _first_line(err: BaseException) -> str:
    lines = [ln.strip() for ln in str(err).splitlines() if ln.strip()]
    return lines[0][:200] if lines else type(err).__name__


__all__ = ["MODEL_KEYS", "CheckpointError", "check_safetensors", "config_from", "expect_format", "load_model_file",
           "load_torch", "restore", "save_model_file"]
