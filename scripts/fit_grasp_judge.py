"""Fit the grasp judge (reward "grasp", imagination/rewards/grasp.py) and write it to one file.

    python scripts/fit_grasp_judge.py 'train_data=[DATA,OWN_ROLLOUTS]' 'label_dirs=[NEAR_MISSES]' out=judge.pt
    python scripts/fit_grasp_judge.py ... until=release grasp_point.ensemble=5 grasp_point.pessimism=1.0
    python scripts/imagine_rl.py --config grasp_floor imagination.grasp_judge=judge.pt   # RL judged by it

The judge is a classifier of the real outcome from where the gripper closes (until=close) or closes and lets go
(until=release), relative to the object's start (world_models/grasp_point.py). It learns from labelled recorded
datasets (scripts/label_episodes.py) and near-miss grasps (scripts/collect_labels.py). The file holds the fitted
classifier, the data it was fit on, each task's episodes and successes, and the in-sample AUC (how well the
features separate the outcomes they were fit on; bench/reward_signal.py measures it against real outcomes on jobs
it never saw). An RL run given imagination.grasp_train_data and no imagination.grasp_judge runs this step itself
into its out_dir.
"""
from __future__ import annotations

from imagination.rewards.grasp import FitGraspJudgeConfig, fit_grasp_judge
from infra.cli import run_script


def main(cfg: FitGraspJudgeConfig) -> dict:
    return fit_grasp_judge(cfg)


if __name__ == "__main__":
    run_script(main, FitGraspJudgeConfig, __doc__, group="grasp_judge")
