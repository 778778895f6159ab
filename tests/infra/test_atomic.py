"""Atomic writes (infra/atomic.py): the target is replaced whole or not at all, and no temporary file is left."""
import json
import os
import stat
from pathlib import Path

import pytest
import torch

from infra.atomic import (
    atomic_file,
    atomic_torch_save,
    atomic_write,
    atomic_write_bytes,
    atomic_write_json,
    atomic_write_text,
)


def _leftovers(folder: Path, target: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p != target)


def test_each_variant_writes_the_new_content_and_leaves_nothing_beside_it(tmp_path):
    target = tmp_path / "deep" / "er" / "out.json"  # parent folders are created
    assert atomic_write_json(target, {"a": [1, 2]}, indent=2) == target
    assert json.loads(target.read_text()) == {"a": [1, 2]} and target.read_text().startswith("{\n  ")
    atomic_write_text(target, "é\n")
    assert target.read_text(encoding="utf-8") == "é\n"
    atomic_write_bytes(target, b"\x00\x01")
    assert target.read_bytes() == b"\x00\x01"
    atomic_torch_save(target, {"w": torch.arange(3)})
    assert torch.equal(torch.load(target, weights_only=True)["w"], torch.arange(3))
    atomic_write(str(target), lambda tmp: tmp.write_text("from a callback"))  # str paths too
    assert target.read_text() == "from a callback"
    assert _leftovers(target.parent, target) == []


def test_a_failing_writer_leaves_the_old_file_intact_and_no_temporary_file(tmp_path):
    target = tmp_path / "model.pt"
    target.write_bytes(b"old content")
    seen = []

    def half_then_fail(tmp: Path) -> None:
        seen.append(tmp)
        assert tmp.parent == target.parent and tmp != target
        tmp.write_bytes(b"half of the new")
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError, match="disk full"):
        atomic_write(target, half_then_fail)
    assert target.read_bytes() == b"old content"
    assert not seen[0].exists() and _leftovers(tmp_path, target) == []


def test_an_interrupt_or_an_unserialisable_object_leaves_the_old_file(tmp_path):
    target = tmp_path / "results.json"
    atomic_write_json(target, {"ok": True})

    def interrupted(tmp: Path) -> None:
        tmp.write_text("{")
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        atomic_write(target, interrupted)
    with pytest.raises(TypeError):
        atomic_write_json(target, {"bad": object()})
    with pytest.raises(Exception):  # noqa: B017 (pickling a lambda fails with a type that varies by version)
        atomic_torch_save(target, {"f": lambda: None})
    assert json.loads(target.read_text()) == {"ok": True}
    assert _leftovers(tmp_path, target) == []


def test_a_new_file_is_not_created_when_the_writer_fails(tmp_path):
    target = tmp_path / "new.txt"
    with pytest.raises(ValueError):
        with atomic_file(target) as tmp:
            tmp.write_text("partial")
            raise ValueError("no")
    assert list(tmp_path.iterdir()) == []


def test_the_file_gets_the_usual_permissions_not_mkstemps_0600(tmp_path):
    target = tmp_path / "config.yaml"
    atomic_write_text(target, "a: 1\n")
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE(target.stat().st_mode) == 0o666 & ~umask
