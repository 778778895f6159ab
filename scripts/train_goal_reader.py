"""Train the goal reader (world_models/goal_reader.py): which of each task's goal predicates hold, read from one
camera frame, supervised by the goal-predicate labels of recorded episodes.

    python scripts/label_goals.py data_dir=DATA                      # first: per-step predicate labels, by replay
    python scripts/train_goal_reader.py 'data_dirs=[DATA,OWN_ROLLOUTS]' out_dir=outputs/goal_reader
    python scripts/train_goal_reader.py ... reader.steps=6000 reader.device=cuda holdout_every=0

Every `holdout_every`-th episode of each task is held out. Writes out_dir/reader.pt and out_dir/result.json: on the
training and the held-out episodes, how the reader's goal probability ranks frames where the whole goal holds
against the others (frame AUC), and successful episodes against failed ones by their highest goal probability
(episode AUC), pooled and per task, and its progress error per predicate slot. At RL time the goal judge
(imagination.reward=goal, imagination.goal_reader=out_dir/reader.pt) reads imagined frames with it.

    python scripts/train_goal_reader.py target=outcome 'data_dirs=[DATA,OWN_ROLLOUTS]' out_dir=outputs/outcome_reader

`target=outcome` trains an outcome reader instead (world_models/outcome_reader.py): whether the episode succeeds,
read from a frame of `outcome_window` (control steps from the first gripper close; no goal labels needed), and
prints how its verdict ranks each task's successes against its failures at each step of the window. The goal judge
reads it the same way: judge a short imagined window from before the grasp (imagination.imagined_steps=32).
"""
from __future__ import annotations

from infra.cli import run_script
from world_models.goal_reader_training import TrainGoalReaderConfig, train_goal_reader


def main(cfg: TrainGoalReaderConfig) -> dict:
    result = train_goal_reader(cfg)
    for part in ("train", "heldout"):
        if part in result:
            f = result[part]
            print(f"{part}: {f['episodes']} episodes, {f['frames']} frames; frame AUC {f['frame_auc']:.3f}, "
                  f"episode AUC {f['episode_auc']:.3f}; " + ", ".join(
                      f"task {t}: {v['successes']}/{v['episodes']} episode AUC {v['episode_auc']:.3f}"
                      for t, v in f["per_task"].items()))
            if "within_task_auc_by_step" in f:
                print(f"{part}: within-task AUC of the outcome verdict k steps after the first close: " + ", ".join(
                    f"{k}: {a:.2f}" for k, a in f["within_task_auc_by_step"].items()))
    print(f"written to {cfg.out_dir}/reader.pt ({result['train_seconds']} s of training)")
    return result


if __name__ == "__main__":
    run_script(main, TrainGoalReaderConfig, __doc__, group="goal_reader")
