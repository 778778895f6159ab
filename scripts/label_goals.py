"""Label a recorded dataset with its goal predicates at every step, by replaying its episodes
(robot_data/goal_labels.py).

    python scripts/label_goals.py data_dir=outputs/data/libero_10
    python scripts/label_goals.py data_dir=outputs/data/libero_10 episodes=[0,1,2]

Writes <data_dir>/goal_labels/episode_NNNNNN.npz for every episode not labelled yet: per step, whether each
predicate of the task's BDDL goal holds (LIBERO's own evaluator; their conjunction is the recorded success flag)
and how near it is (a distance in metres, or a fixture's joint position). An episode whose replay does not
reproduce its recording is skipped, or labelled up to where it diverged, with the reason; a task whose goal has a
predicate with no evaluator stops the script with one line naming it.
"""
from __future__ import annotations

import os
from pathlib import Path

os.environ.setdefault("MUJOCO_GL", "egl")  # before the simulator is imported: headless rendering

from infra.cli import run_script  # noqa: E402
from robot_data.goal_labels import LabelGoalsConfig, label_goal_dataset  # noqa: E402
from robot_data.sim_labels import stats_lines  # noqa: E402


def main(cfg: LabelGoalsConfig) -> dict:
    if not (Path(cfg.data_dir) / "meta" / "info.json").is_file():
        raise SystemExit(f"data_dir: {cfg.data_dir} is not an episode dataset (no meta/info.json)")
    stats = label_goal_dataset(cfg.data_dir, cfg.episodes, progress=cfg.progress, tol=cfg.tol,
                               keep_prefix=cfg.keep_prefix)
    print("\n".join(stats_lines(stats, "goal labels")))
    return stats


if __name__ == "__main__":
    run_script(main, LabelGoalsConfig, __doc__, group="label_goals")
