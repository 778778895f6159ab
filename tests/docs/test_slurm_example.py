"""docs/slurm/ray_eval.sbatch cannot run here (no SLURM). bash parses it, and with DRY_RUN=1 it prints every
command it would run; each of those parses: `ray start` by Ray's own option parser, `python scripts/eval_policy.py`
by the project's config loader, with the values the script computes (addresses, CPU and env counts)."""
from __future__ import annotations

import os
import shlex
import subprocess
from pathlib import Path

import pytest

from envs.libero_suites import suite_info
from imagination.eval.real_rollouts import EvalPolicyConfig
from infra.cli import load_config

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "docs" / "slurm" / "ray_eval.sbatch"


def _dry_run(nodes: list[str], cpus: int) -> list[list[str]]:
    env = {"PATH": os.environ["PATH"], "DRY_RUN": "1", "SLURM_JOB_NODELIST": ",".join(nodes),
           "SLURM_CPUS_PER_TASK": str(cpus), "SLURM_JOB_ID": "7", "CHECKPOINT": "outputs/rl/run/policy.pt"}
    out = subprocess.run(["bash", str(SCRIPT)], env=env, capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    return [shlex.split(line) for line in out.stdout.splitlines()]


def test_bash_parses_the_script_and_it_refuses_to_run_without_a_checkpoint():
    assert subprocess.run(["bash", "-n", str(SCRIPT)]).returncode == 0
    env = {"PATH": os.environ["PATH"], "DRY_RUN": "1", "SLURM_JOB_NODELIST": "n1", "SLURM_CPUS_PER_TASK": "8"}
    out = subprocess.run(["bash", str(SCRIPT)], env=env, capture_output=True, text=True, timeout=30)
    assert out.returncode != 0 and "CHECKPOINT" in out.stderr


def test_every_command_of_the_script_parses():
    pytest.importorskip("ray", reason="the [cluster] extra (ray) is not installed: pip install -e '.[cluster]'")
    from ray.scripts.scripts import start

    commands = _dry_run(["n1", "n2", "n3"], cpus=32)
    ray_starts = [c[c.index("ray") + 2:] for c in commands if c[0] == "srun"]
    assert all(c[c.index("ray") + 1] == "start" for c in commands if c[0] == "srun")
    parsed = [start.make_context("ray start", args).params for args in ray_starts]  # click: unknown flags raise
    [head] = [p for p in parsed if p["head"]]
    workers = [p for p in parsed if not p["head"]]
    assert head["node_ip_address"] == "n1" and head["port"] == 6379 and head["num_cpus"] == 30 and head["block"]
    assert len(workers) == 2 and all(p["address"] == "n1:6379" and p["num_cpus"] == 32 and p["block"] for p in workers)

    [evaluation] = [c for c in commands if c[0] == "python"]
    assert evaluation[1] == "scripts/eval_policy.py" and (REPO / evaluation[1]).is_file()
    cfg = load_config(EvalPolicyConfig, None, evaluation[2:], group="eval")
    assert cfg.backend == "ray" and cfg.ray_address == "n1:6379" and cfg.checkpoint == "outputs/rl/run/policy.pt"
    assert cfg.num_envs == 3 * 32 - 2 and cfg.episodes_per_task == 50 and cfg.out_dir == "outputs/eval/slurm_7"
    assert [suite_info(s).num_tasks for s in cfg.suites] == [10, 10, 10, 10]
