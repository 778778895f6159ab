"""Train the frame autoencoder (a diffusers AutoencoderKL) that the latent world model runs on.

    python scripts/train_autoencoder.py --config quick        # CPU, 128 px agentview, 8x downsampling
    python scripts/train_autoencoder.py --config full         # GPU, 256 px, both views
    python scripts/train_autoencoder.py --config quick steps=300 data_dir=/tmp/data out_dir=/tmp/ae

Writes to out_dir: config.yaml, split.json, checkpoint.pt (re-running the same command resumes from
it), autoencoder.pt (world_models.autoencoder.Autoencoder.load; give it to the world model as
model.autoencoder_from=...) and result.json (held-out reconstruction PSNR / SSIM, also printed).
"""
from __future__ import annotations

from infra.cli import run_script
from world_models.autoencoder_training import TrainAutoencoderConfig, train_autoencoder


def main(cfg: TrainAutoencoderConfig) -> dict:
    return train_autoencoder(cfg)


if __name__ == "__main__":
    run_script(main, TrainAutoencoderConfig, __doc__, group="autoencoder")
