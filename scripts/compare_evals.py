"""Compare two real evaluations of the same jobs, job by job (imagination/eval/compare.py).

    python scripts/compare_evals.py before=outputs/eval/bc after=outputs/eval/rl

Both must be eval_policy.py out_dirs (or their results.json) of the same (task, init state, seed) jobs: the same
tasks, episodes_per_task, init_state_offset and seed. Prints the paired difference in points with its 95% interval
overall and per task, the jobs gained and lost, and how the failures happened in each (when recorded).
"""
from __future__ import annotations

from imagination.eval.compare import CompareConfig, compare_evaluations
from infra.cli import run_script


def main(cfg: CompareConfig) -> dict:
    return compare_evaluations(cfg)


if __name__ == "__main__":
    run_script(main, CompareConfig, __doc__, group="compare")
