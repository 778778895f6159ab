"""Collect scripted-expert and perturbed-expert episodes from real LIBERO (resumable).

    python scripts/collect.py --config quick                     # the demo's small dataset
    python scripts/collect.py episodes_per_task=50 num_workers=2  # all 10 LIBERO-Spatial tasks
    python scripts/collect.py episodes_per_task=50 num_workers=64 backend=ray ray_address=auto  # a Ray cluster

Writes a LeRobot v3 dataset to out_dir, `summary.json` (success per task and source) and a few
side-by-side preview videos in out_dir/previews/. Re-running the same command resumes.
"""
from __future__ import annotations

from infra.cli import run_script
from robot_data.collection import CollectConfig, collect_dataset


def main(cfg: CollectConfig) -> dict:
    return collect_dataset(cfg)


if __name__ == "__main__":
    run_script(main, CollectConfig, __doc__, group="collect")
