"""Simulate labelled expert and near-miss episodes without rendering (robot_data/label_collection.py).

    python scripts/collect_labels.py tasks=[0,1] episodes_per_task=40 kinds=[near_miss,near_miss,near_miss,expert]

Writes one .npz per episode (robot state, action, success, object/target positions, grasped) under
out_dir, resuming where a stopped run left off; `robot_data.label_collection.load_labelled(out_dir)` gives
them as `world_models.object_state.LabelledEpisode`s for `fit_state_reward`.
"""
from __future__ import annotations

import json
import os

os.environ.setdefault("MUJOCO_GL", "egl")  # before the simulator is imported: headless rendering

from infra.cli import run_script  # noqa: E402
from robot_data.label_collection import LabelCollectConfig, collect_labels, validate  # noqa: E402


def main(cfg: LabelCollectConfig) -> dict:
    try:
        validate(cfg)
    except ValueError as err:
        raise SystemExit(f"config: {err}") from None
    stats = collect_labels(cfg)
    print(f"labelled episodes: {stats['written']} written, {stats['already']} already in {cfg.out_dir} "
          f"({stats['episodes_per_s']:.2f} episodes/s); outcomes {stats['outcomes']}")
    print(json.dumps(stats))
    return stats


if __name__ == "__main__":
    run_script(main, LabelCollectConfig, __doc__, group="collect_labels")
