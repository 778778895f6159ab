"""Open-loop fidelity of a trained world model on held-out real episodes.

    python scripts/eval_world_model.py checkpoint=outputs/world_model/quick/world_model.pt
    python scripts/eval_world_model.py checkpoint=... max_steps=64 steps=3 episodes=[3,7]

Each episode is replayed from its first frame with its real actions, the whole episode (or
max_steps) autoregressively: the model's context only ever holds its own predictions. Predicted
frame t is compared with the real frame after action t: PSNR and SSIM per step and averaged, over
the whole frame and over the moving region (where the real frame differs from the first), each next
to the first frame held still; the imagined end-effector track and the goal object carried along it
(with simulator labels) against the recorded ones; and F1 of the success head against the
simulator's labels (on imagined frames, and on the real frames for reference; with no success step
within the horizon F1 is 0 by convention). Every figure has a bootstrap interval over episodes. The
held-out episodes are those of the run's split.json (next to the checkpoint) unless `episodes` names
others (include_new, more_data: see world_models/fidelity.py). Writes to out_dir: eval.json (all
figures), psnr_vs_horizon.png, and videos/ep*.mp4 (real | imagined | abs diff x2).
"""
from __future__ import annotations

from infra.cli import run_script
from world_models.fidelity import EvalWorldModelConfig, evaluate_world_model


def main(cfg: EvalWorldModelConfig) -> dict:
    return evaluate_world_model(cfg)


if __name__ == "__main__":
    run_script(main, EvalWorldModelConfig, __doc__, group="eval_world_model")
