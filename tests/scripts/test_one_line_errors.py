"""Scripts and benchmarks report bad input as one line naming the field or path, exit status 2, run as a
user runs them (real subprocesses); --traceback or VLA_TRACEBACK=1 shows the full trace instead."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.envs.test_dataset import make_episodes, write

REPO = Path(__file__).resolve().parents[2]


def _run(args: list[str], cwd: Path, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, cwd=cwd, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(REPO), **env})


def _one_line(out: subprocess.CompletedProcess, prog: str, *named: str) -> str:
    assert out.returncode == 2, out.stderr
    lines = out.stderr.splitlines()
    assert len(lines) == 1, out.stderr
    assert lines[0].startswith(f"{prog}: ") and all(n in lines[0] for n in named), lines[0]
    return lines[0]


@pytest.mark.slow
def test_a_bad_config_value_names_its_field(tmp_path):
    out = _run([str(REPO / "scripts/train_bc.py"), "--config", "quick", "steps=abc"], tmp_path)
    _one_line(out, "train_bc", "steps", "abc")


@pytest.mark.slow
def test_a_missing_input_names_its_path(tmp_path):
    out = _run([str(REPO / "scripts/train_world_model.py"), "--config", "quick", f"out_dir={tmp_path / 'wm'}",
                f"clips.data_dir={tmp_path / 'nowhere'}"], tmp_path)
    _one_line(out, "train_world_model", str(tmp_path / "nowhere"))


@pytest.mark.slow
def test_a_damaged_dataset_names_its_file(tmp_path):
    data = tmp_path / "data"
    write(data, make_episodes()[:1])
    info = json.loads((data / "meta/info.json").read_text())
    (data / "meta/info.json").write_text(json.dumps({k: v for k, v in info.items() if k != "features"}))
    out = _run([str(REPO / "scripts/train_world_model.py"), "--config", "quick", f"out_dir={tmp_path / 'wm'}",
                f"clips.data_dir={data}"], tmp_path)
    _one_line(out, "train_world_model", str(data / "meta/info.json"), "features")


@pytest.mark.slow
def test_a_damaged_checkpoint_names_its_file_in_a_script_and_a_benchmark(tmp_path):
    empty = tmp_path / "policy.pt"
    empty.write_bytes(b"")
    line = _one_line(_run([str(REPO / "scripts/serve_policy.py"), f"checkpoint={empty}"], tmp_path),
                     "serve_policy", str(empty), "empty file")
    assert "weights_only" not in line
    noise = tmp_path / "wm.pt"
    noise.write_bytes(bytes(range(256)) * 8)
    _one_line(_run([str(REPO / "bench/wm_speed.py"), "--checkpoint", str(noise)], tmp_path), "wm_speed", str(noise))


@pytest.mark.slow
@pytest.mark.parametrize("how", ["flag", "env"])
def test_the_full_trace_on_request(tmp_path, how):
    args = [str(REPO / "scripts/train_bc.py"), "--config", "quick", "steps=abc"]
    out = _run(args + ["--traceback"], tmp_path) if how == "flag" else _run(args, tmp_path, VLA_TRACEBACK="1")
    assert out.returncode == 2
    assert "Traceback (most recent call last)" in out.stderr and "steps" in out.stderr
