"""Calibrate a world model's success threshold on real episodes replayed in imagination.

    python scripts/calibrate_success.py checkpoint=outputs/world_model/quick/world_model.pt
    python scripts/calibrate_success.py checkpoint=... data_dir=outputs/loop/round1/data out=calibrated.pt

Every episode of the data set (or `episodes`), successes and failures alike, is replayed from its
first frame with its recorded actions, open loop; the head's highest success probability along each
replay is compared with the simulator's outcome, and the threshold that best separates them
(balanced accuracy) is written into the checkpoint (`head.success_threshold`). Imagined envs,
`eval_policy.py --env imagination`, RL and the benchmarks then use it unless they set their own.
The data need real failures: policy rollouts recorded by the loop, or perturbed expert episodes.
Writes calibration.json (every episode's figure) and calibration.png next to the output checkpoint;
calibration.json, the record, comes after the checkpoint, and an earlier run's record is removed first.
"""
from __future__ import annotations

from imagination.eval.calibrate import CalibrateConfig, calibrate_success
from infra.cli import run_script


def main(cfg: CalibrateConfig) -> dict:
    return calibrate_success(cfg)


if __name__ == "__main__":
    run_script(main, CalibrateConfig, __doc__, group="calibrate_success")
