"""Behaviour cloning of the built-in VLA on the expert episodes of a dataset.

    python scripts/train_bc.py --config quick        # CPU: 64 px, the demo dataset, a few minutes
    python scripts/train_bc.py --config full         # GPU: every LIBERO-Spatial task, longer
    python scripts/train_bc.py --config quick steps=500 tasks=[0] out_dir=/tmp/bc policy.chunk_len=4
    accelerate launch --num_processes 2 scripts/train_bc.py --config full device=cuda  # data-parallel: docs/scale.md

Writes to out_dir: config.yaml, policy.pt (`policies.base.Policy.load`), checkpoint.pt (exact
resume: re-running the same command continues from it; resume=false starts over), loss.csv and
logs/ (tensorboard --logdir out_dir/logs). Evaluate the result in real LIBERO with
scripts/eval_policy.py checkpoint=out_dir/policy.pt.
"""
from __future__ import annotations

from infra.cli import run_script
from policies.bc import BCConfig, train_bc_on_data


def main(cfg: BCConfig) -> dict:
    return train_bc_on_data(cfg)


if __name__ == "__main__":
    run_script(main, BCConfig, __doc__, group="bc")
