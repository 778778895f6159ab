"""Train the action-conditioned video world model (denoiser + success/done head) on recorded episodes.

    python scripts/train_world_model.py --config quick          # CPU, 64 px, <= 30 min on 2 cores
    accelerate launch scripts/train_world_model.py --config full  # GPU(s)
    python scripts/train_world_model.py --config quick steps=200 clips.data_dir=/tmp/data out_dir=/tmp/wm
    # fine-tune a trained model on a grown dataset, drawing policy episodes 3x and failed ones 2x as often
    python scripts/train_world_model.py --config quick init_from=outputs/world_model/quick/world_model.pt \\
        out_dir=outputs/world_model/ft1 clips.data_dir=outputs/data/grown steps=500 \\
        'clips.source_weights={policy:3.0}' clips.failure_weight=2.0

Writes to out_dir: config.yaml, split.json, world_model.pt (WorldModel.load), checkpoints/ (exact
resume: re-running the same command continues from the newest one), samples/*.mp4 (real | predicted)
and logs/ (tensorboard --logdir out_dir/logs). Nested fields are set with dots:
model.denoiser.block_out_channels=[32,64,64].
"""
from __future__ import annotations

from infra.cli import run_script
from world_models.training import TrainWorldModelConfig, train_world_model


def main(cfg: TrainWorldModelConfig) -> dict:
    return train_world_model(cfg)


if __name__ == "__main__":
    run_script(main, TrainWorldModelConfig, __doc__, group="world_model")
