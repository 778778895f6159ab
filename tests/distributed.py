"""Launch a project script as 2 data-parallel CPU processes with `accelerate launch` (gloo), as a user would.

accelerate's own `--cpu` flag starts one process unless MPI is installed (its multi-CPU launcher is
mpirun), so the processes are started by the torchrun launcher behind `--multi_gpu`, and
ACCELERATE_USE_CPU=true makes accelerate pick the CPU and gloo in each of them. On a machine without
GPUs that is the same distributed setup a multi-GPU run has, with gloo in place of NCCL.
"""
from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

from envs.crash_points import ENV as CRASH_ENV

REPO = Path(__file__).resolve().parents[1]


def free_port() -> int:
    """A TCP port nothing listens on now: concurrent launches must not share accelerate's default 29500."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def launch_command(script: str, args: list[str], processes: int = 2) -> list[str]:
    """The `accelerate launch` command line that runs `script` (relative to the repository) in `processes`."""
    return [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", str(processes),
            "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no",
            "--main_process_port", str(free_port()), str(REPO / script), *args]


def accelerate_launch(script: str, args: list[str], processes: int = 2, crash: str | None = None,
                      timeout: float = 120.0) -> subprocess.CompletedProcess:
    """Run `script` under `accelerate launch` on the CPU; its output, or AssertionError with its stderr's tail.

    crash: a VLA_CRASH_AT point (envs/crash_points.py) where every process SIGKILLs itself, as a stopped
    job would die; the launch must then end that way."""
    env = dict(os.environ)
    env.pop(CRASH_ENV, None)
    # the checkout these tests belong to, not whatever copy of the package the venv has installed
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])])
    env.update(ACCELERATE_USE_CPU="true", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", CUDA_VISIBLE_DEVICES="")
    if crash:
        env[CRASH_ENV] = crash
    proc = subprocess.run(launch_command(script, args, processes), cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=timeout)
    if crash:
        if proc.returncode == 0 or "SIGKILL" not in proc.stderr:
            raise AssertionError(f"{script} was to die at {crash} but ended with exit {proc.returncode}:\n"
                                 f"{proc.stderr[-6000:]}")
        return proc
    if proc.returncode != 0:
        raise AssertionError(f"{script} under accelerate launch failed (exit {proc.returncode}):\n"
                             f"{proc.stderr[-6000:]}")
    return proc
