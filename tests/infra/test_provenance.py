"""infra.provenance: the versions record every results file carries, in and outside a git checkout."""
from __future__ import annotations

import json
import platform
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from infra import provenance as prov


def test_versions_name_the_simulator_stack_and_the_project():
    v = prov.versions()
    assert set(v) == {"python", "mujoco", "robosuite", "libero", "torch", "diffusers", "numpy", "wm-vla-rl",
                      "git_commit", "git_dirty"}
    assert v["python"] == platform.python_version()
    assert v["torch"] == torch.__version__ and v["numpy"] == np.__version__
    assert v["wm-vla-rl"] == "0.1.0"  # setup.py's version, through the (editable) install
    json.dumps(v)  # plain data: goes into results.json as it is


def test_versions_read_metadata_without_importing_the_simulator():
    # importing mujoco loads its renderer; a results file must not cost that (or fail where GL is absent)
    code = "import sys; from infra.provenance import versions; versions(); print('mujoco' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=prov.REPO_ROOT)
    assert out.stdout.strip() == "False"


def test_git_commit_in_a_checkout():
    if not (prov.REPO_ROOT / ".git").exists():
        pytest.skip("not run from a git checkout")
    head = subprocess.run(["git", "-C", str(prov.REPO_ROOT), "rev-parse", "HEAD"], capture_output=True,
                          text=True, check=True).stdout.strip()
    v = prov.versions()
    assert v["git_commit"] == head and len(head) == 40 and isinstance(v["git_dirty"], bool)


def test_outside_a_checkout_or_without_git_the_commit_is_none(tmp_path: Path, monkeypatch):
    monkeypatch.setattr(prov, "REPO_ROOT", tmp_path)  # an installed copy: no .git next to the packages
    assert prov.git_commit() is None and prov.versions()["git_dirty"] is None
    (tmp_path / ".git").mkdir()  # looks like a checkout, but git finds no repository there
    assert prov.git_commit() is None
    monkeypatch.setenv("PATH", str(tmp_path))  # no git executable at all
    assert prov.git_commit() is None and prov.git_dirty() is None


def test_a_missing_distribution_reads_none(monkeypatch):
    monkeypatch.setitem(prov.DISTRIBUTIONS, "absent", "wm-vla-rl-no-such-distribution")
    v = prov.versions()
    assert v["absent"] is None
    assert "not installed: absent" in prov.versions_line(v)


def test_provenance_block_and_report_section():
    rec = prov.provenance(7, [(0, 3, 11), (1, 4, 12)])
    assert rec["seed"] == 7 and rec["jobs"] == [[0, 3, 11], [1, 4, 12]]
    assert json.loads(json.dumps(rec)) == rec
    assert "jobs" not in prov.provenance(0)  # imagined RL: no jobs of its own
    described = prov.provenance({"rl": 1, "eval": 0}, {"tasks": [0, 1]})
    assert described["seed"] == {"rl": 1, "eval": 0} and described["jobs"] == {"tasks": [0, 1]}
    md = "\n".join(prov.provenance_markdown(rec))
    assert "## Reproducibility" in md and f"torch {torch.__version__}" in md and "seed: 7" in md
    assert "not recorded" in "\n".join(prov.provenance_markdown(None))
