"""Fit imagination's proprio model (the robot state after each action of a chunk) on recorded datasets.

    python scripts/fit_proprio.py 'data=[outputs/bench/rl_gain/data,outputs/bench/rl_gain/own_rollouts/data]' \\
        out=outputs/bench/rl_gain/proprio_own.pt model.chunk_len=8

Without a proprio file, imagination fits one on its start data (the demonstrations). A policy's own
rollouts move the arm in ways the demonstrations do not, and fitted on both the model drifts less where
the policy acts (docs/notebook/loop.md, "A proprio model that reads the arm's velocity"). Pass the file as
`proprio=` to imagine_rl, eval_policy (imagined) and the benches. The chunk length must be the world model's.
"""
from __future__ import annotations

import json

from infra.cli import run_script
from world_models.proprio import FitProprioConfig, fit_proprio_on_data


def main(cfg: FitProprioConfig) -> dict:
    try:
        result = fit_proprio_on_data(cfg)
    except ValueError as err:
        raise SystemExit(str(err)) from None
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    run_script(main, FitProprioConfig, __doc__, group="fit_proprio")
