"""Train the state reward (world_models/object_state.py) on a dataset's per-step simulator labels.

    python scripts/train_state_reward.py data_dir=outputs/bench/rl_gain/data out=outputs/state_reward.pt
    python scripts/train_state_reward.py data_dir=... 'label_dirs=[outputs/data/sim_labels/libero_spatial]'

data_dir is a recorded dataset labelled by scripts/label_episodes.py; label_dirs add episodes simulated
without rendering by scripts/collect_labels.py (near-miss grasps: the failure boundary), and
train_data_dirs more labelled recorded datasets (e.g. the policy's own real rollouts, whose grasps are not
the expert's), all for training only.

Every `holdout_every`-th labelled episode is held out; on those, the object is carried along the
recorded robot states from the first row and the highest success probability is compared with the
episode's real outcome (AUC within task). Writes the model and <out>.json with the figures.
"""
from __future__ import annotations

from imagination.eval.state_reward import TrainStateRewardConfig, train_state_reward
from infra.cli import run_script


def main(cfg: TrainStateRewardConfig) -> dict:
    return train_state_reward(cfg)


if __name__ == "__main__":
    run_script(main, TrainStateRewardConfig, __doc__, group="state_reward")
