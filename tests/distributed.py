"""Launch project scripts as 2 data-parallel CPU processes with `accelerate launch` (gloo), as a user would.

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
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

from infra.crash_points import ENV as CRASH_ENV

REPO = Path(__file__).resolve().parents[1]


@dataclass
class Launch:
    """One `accelerate launch` of `script` (relative to the repository) with `args`.

    crash: a VLA_CRASH_AT point (infra/crash_points.py) where every process SIGKILLs itself, as a stopped
    job would die; the launch must then end that way."""

    script: str
    args: list[str]
    crash: str | None = None


def free_ports(n: int) -> list[int]:
    """n distinct TCP ports nothing listens on now: concurrent launches must not share accelerate's 29500."""
    with ExitStack() as stack:
        socks = [stack.enter_context(socket.socket()) for _ in range(n)]
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [int(s.getsockname()[1]) for s in socks]


def launch_command(run: Launch, port: int, processes: int = 2) -> list[str]:
    """The `accelerate launch` command line of `run`."""
    return [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", str(processes),
            "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no",
            "--main_process_port", str(port), str(REPO / run.script), *run.args]


def _env(crash: str | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != CRASH_ENV}
    # the checkout these tests belong to, not whatever copy of the package the venv has installed
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])])
    env.update(ACCELERATE_USE_CPU="true", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", CUDA_VISIBLE_DEVICES="")
    if crash:
        env[CRASH_ENV] = crash
    return env


def accelerate_launch(*runs: Launch, processes: int = 2, timeout: float = 180.0) -> list[tuple[str, str]]:
    """Start every run at once (independent runs side by side: where there are cores to spare the test
    takes as long as the slowest), wait for all; (stdout, stderr) of each, or AssertionError naming the
    first that ended otherwise than asked (with its stderr's tail)."""
    procs = [subprocess.Popen(launch_command(run, port, processes), cwd=REPO, env=_env(run.crash),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for run, port in zip(runs, free_ports(len(runs)))]
    outputs = []
    try:
        for run, proc in zip(runs, procs):
            out, err = proc.communicate(timeout=timeout)
            killed = proc.returncode != 0 and "SIGKILL" in err
            if (run.crash is None and proc.returncode != 0) or (run.crash is not None and not killed):
                asked = "to succeed" if run.crash is None else f"to die at {run.crash}"
                raise AssertionError(f"{run.script} under accelerate launch was {asked} but ended with exit "
                                     f"{proc.returncode}:\n{err[-6000:]}")
            outputs.append((out, err))
    finally:
        for proc in procs:  # only the launches started here, and only those still running after a failure
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    return outputs
