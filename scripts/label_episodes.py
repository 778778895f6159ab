"""Label a recorded dataset with per-step simulator quantities by replaying its episodes (robot_data/sim_labels.py).

    python scripts/label_episodes.py data_dir=outputs/bench/rl_gain/data

Writes <data_dir>/sim_labels/episode_NNNNNN.npz (object and target positions, grasped) for every episode
not labelled yet, which `world_models.object_state.labelled_episodes` and the imagination's state reward
read. An episode whose replay does not reproduce its recorded robot states is skipped, with the reason.
"""
from __future__ import annotations

import os
from pathlib import Path

os.environ.setdefault("MUJOCO_GL", "egl")  # before the simulator is imported: headless rendering

from infra.cli import run_script  # noqa: E402
from robot_data.sim_labels import LabelEpisodesConfig, label_dataset, stats_lines  # noqa: E402


def main(cfg: LabelEpisodesConfig) -> dict:
    if not (Path(cfg.data_dir) / "meta" / "info.json").is_file():
        raise SystemExit(f"data_dir: {cfg.data_dir} is not an episode dataset (no meta/info.json)")
    stats = label_dataset(cfg.data_dir, progress=cfg.progress, tol=cfg.tol)
    print("\n".join(stats_lines(stats, "labels")))
    return stats


if __name__ == "__main__":
    run_script(main, LabelEpisodesConfig, __doc__, group="label_episodes")
