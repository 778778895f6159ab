"""Scripts and benchmarks report bad input as one line naming the field or path, exit status 2, run as a
user runs them (real subprocesses); --traceback or VLA_TRACEBACK=1 shows the full trace instead."""
from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import TypeGuard

import pytest

from tests.robot_data.test_dataset import make_episodes, write

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


ENTRY_POINTS = sorted(p for d in ("scripts", "bench") for p in (REPO / d).glob("*.py") if p.name != "__init__.py")
WRAPPERS = {"run_script": "infra.cli", "run_main": "infra.errors"}


def _is_main_guard(node: ast.stmt) -> TypeGuard[ast.If]:
    return (isinstance(node, ast.If) and isinstance(node.test, ast.Compare)
            and isinstance(node.test.left, ast.Name) and node.test.left.id == "__name__"
            and any(isinstance(c, ast.Constant) and c.value == "__main__" for c in node.test.comparators))


def _wrapped_call(stmt: ast.stmt) -> str | None:
    """The wrapper a `__main__` statement calls: `run_script(...)` or `sys.exit(run_main(...))`; else None."""
    call = stmt.value if isinstance(stmt, ast.Expr) else None
    if isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and call.func.attr == "exit" and call.args:
        call = call.args[0]  # sys.exit(run_main(main))
    if isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id in WRAPPERS:
        return call.func.id
    return None


def test_every_entry_point_reports_input_errors_through_the_wrapper():
    """Statically: every script and benchmark with a `__main__` block runs only `run_script`/`run_main` there,
    imported from the project's module, so no bad input can end in a traceback. A module beside them with a
    main() but no `__main__` block is flagged too (an entry point someone forgot to wire)."""
    offenders, entry_points = [], 0
    for path in ENTRY_POINTS:
        name = str(path.relative_to(REPO))
        tree = ast.parse(path.read_text(), filename=name)
        guards = [n for n in tree.body if _is_main_guard(n)]
        if not guards:
            if any(isinstance(n, ast.FunctionDef) and n.name == "main" for n in tree.body):
                offenders.append(f"{name}: a main() but no __main__ block")
            continue
        entry_points += 1
        imported = {a.asname or a.name: n.module for n in tree.body if isinstance(n, ast.ImportFrom) for a in n.names}
        for guard in guards:
            for stmt in guard.body + guard.orelse:
                wrapper = _wrapped_call(stmt)
                if wrapper is None:
                    offenders.append(f"{name}:{stmt.lineno}: runs {ast.unparse(stmt)!r} outside the wrapper")
                elif imported.get(wrapper) != WRAPPERS[wrapper]:
                    offenders.append(f"{name}: {wrapper} not imported from {WRAPPERS[wrapper]}")
    assert offenders == []
    assert entry_points >= 25  # 16 scripts + 10 benchmarks today: the glob found them


@pytest.mark.slow
@pytest.mark.parametrize("script, override, named", [
    ("collect", "tasks=[99]", ("tasks", "[99]")),  # a bad value, found after the config is read
    ("eval_policy", "checkpoint={missing}", ("checkpoint", "{missing}")),
    ("imagine_rl", "policy={missing}", ("policy", "{missing}")),
])
def test_more_scripts_name_the_bad_field_or_path(tmp_path, script, override, named):
    missing = str(tmp_path / "nowhere" / "policy.pt")
    args = [str(REPO / f"scripts/{script}.py"), override.format(missing=missing), f"out_dir={tmp_path / 'out'}"]
    _one_line(_run(args, tmp_path), script, *(n.format(missing=missing) for n in named))


@pytest.mark.slow
@pytest.mark.parametrize("script, args", [
    ("train_bc", ["--config", "quick", "data_dir={data}", "steps=2", "success_only=false",
                  "sources=[expert,perturbed]"]),
    ("train_world_model", ["--config", "quick", "clips.data_dir={data}"]),
])
def test_a_flipped_bit_in_a_video_stops_a_pipeline_script_naming_the_episode_and_file(tmp_path, script, args):
    """The check against the recorded sha256 reaches the scripts: a training run on a dataset whose mp4
    has one flipped bit stops before training, with one line naming the episode and the file."""
    data = tmp_path / "data"
    write(data, make_episodes()[:2])
    rel = "videos/observation.images.agentview/chunk-000/file-001.mp4"  # episode 1's first view
    raw = bytearray((data / rel).read_bytes())
    raw[len(raw) // 2] ^= 0x10  # inside the encoded frames
    (data / rel).write_bytes(bytes(raw))
    out = _run([str(REPO / f"scripts/{script}.py"), *(a.format(data=data) for a in args),
                f"out_dir={tmp_path / 'out'}"], tmp_path)
    _one_line(out, script, "episode 1", rel, "checksum mismatch")
    assert not (tmp_path / "out" / "policy.pt").exists() and not (tmp_path / "out" / "world_model.pt").exists()
