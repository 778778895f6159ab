"""The dataset's error type, in a module of its own so that layout, reader and writer can all raise it."""
from __future__ import annotations


class DatasetCorruptError(ValueError):
    """A dataset's files are missing, unreadable, malformed, or do not match their recorded checksums;
    the message names the file (and the episode, where there is one)."""


__all__ = ["DatasetCorruptError"]
