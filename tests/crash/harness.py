"""Run a project script or a driver in a real subprocess, SIGKILLed at a named point (infra/crash_points.py).

    proc = run_script("scripts/train_bc.py", [...], crash="bc.checkpoint_saved:2")   # asserts it was killed
    proc = run_script("scripts/train_bc.py", [...])                                  # asserts it exited 0

The child gets PYTHONPATH pointing at the checkout these tests belong to (derived from this file's
location), one CPU thread and headless rendering.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def child_env(crash: str | None) -> dict[str, str]:
    env = dict(os.environ)
    env.pop("VLA_CRASH_AT", None)
    if crash:
        env["VLA_CRASH_AT"] = crash
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])])
    env.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", MUJOCO_GL=os.environ.get("MUJOCO_GL", "egl"),
               TOKENIZERS_PARALLELISM="false")
    return env


def run(argv: list[str], crash: str | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    """Run `python argv...` from the repository root; with `crash`, assert it died by SIGKILL there,
    else assert it exited 0. Returns the completed process (stdout and stderr as text)."""
    proc = subprocess.run([sys.executable, *argv], cwd=REPO, env=child_env(crash), capture_output=True, text=True,
                          timeout=timeout)
    if crash:
        assert proc.returncode == -signal.SIGKILL, (
            f"expected a SIGKILL at {crash}, got exit {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    else:
        assert proc.returncode == 0, f"exit {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc


def run_script(script: str, overrides: list[str], crash: str | None = None,
               timeout: float = 300) -> subprocess.CompletedProcess:
    return run([script, *overrides], crash, timeout)


def run_driver(name: str, *args: str, crash: str | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    """tests/crash/drivers.py <name> <args...> (library calls no script makes on its own)."""
    return run(["-m", "tests.crash.drivers", name, *args], crash, timeout)
