"""Run code inside the side venvs that hold other projects' packages (`make interop-venvs`).

lerobot 0.4.x and openpi-client pin what our own venv cannot take (lerobot: torch < 2.11, av < 16;
openpi-client: numpy < 2), so each lives in a venv of its own next to `.venv`, and tests talk to it
through a subprocess: a short script in, JSON out. A test that needs a venv that was not built is
skipped with the command that builds it; CI builds them (.ci/run), so there the tests run for real.
"""
from __future__ import annotations

import json
import os
import subprocess
import textwrap
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[1]
# venv name -> (environment variable that overrides its python, the Makefile target that builds it)
VENVS = {"lerobot": ("LEROBOT_PYTHON", "lerobot-venv"), "openpi": ("OPENPI_PYTHON", "openpi-venv")}


def venv_python(name: str) -> Path | None:
    """The python of the side venv `name` ("lerobot" or "openpi"), or None when it was not built."""
    env, _ = VENVS[name]
    path = Path(os.environ[env]) if os.environ.get(env) else REPO / f".venv-{name}" / "bin" / "python"
    return path if path.is_file() else None


def require_venv(name: str) -> Path:
    """The side venv's python; skips the calling test, saying how to build it, when there is none."""
    python = venv_python(name)
    env, target = VENVS[name]
    if python is None and os.environ.get(env):  # asked for by name: a wrong path is an error, not a skip
        pytest.fail(f"{env}={os.environ[env]!r} is not a file")
    if python is None:
        pytest.skip(f"the {name} venv is not built: run `make {target}` (or set {env} to its python)")
    return python


def run_in_venv(name: str, script: str, args: list[str] | None = None, timeout: float = 600.0) -> Any:
    """Run `script` (dedented) with the side venv's python and return the JSON it prints last.

    The script runs outside our package (cwd is /, PYTHONPATH is cleared), so it can only use what the
    side venv installed: the point is to check our files and server against the other project's code,
    not against ours. Proxies are cleared
    because websocket clients would route a loopback connection through one.
    """
    python = require_venv(name)
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy",
                        "all_proxy")}
    env["NO_PROXY"] = env["no_proxy"] = "127.0.0.1,localhost"
    env["HF_HUB_OFFLINE"] = "1"  # lerobot must read the local root, never the Hub
    proc = subprocess.run([str(python), "-c", textwrap.dedent(script), *(args or [])], capture_output=True,
                          text=True, timeout=timeout, env=env, cwd="/")
    if proc.returncode != 0:
        raise AssertionError(f"{name} venv script failed (exit {proc.returncode}):\n{proc.stderr[-6000:]}")
    lines = [line for line in proc.stdout.splitlines() if line.strip()]
    if not lines:
        raise AssertionError(f"{name} venv script printed nothing; stderr:\n{proc.stderr[-3000:]}")
    return json.loads(lines[-1])


__all__ = ["REPO", "require_venv", "run_in_venv", "venv_python"]
