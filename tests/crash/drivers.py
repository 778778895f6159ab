"""Library calls run as their own process by the crash tests (python -m tests.crash.drivers <name> ...).

    dataset <root> <n>          append synthetic episodes 0..n-1 to an EpisodeWriter dataset, skipping the
                                ones already committed (what collection's resume does with its plan)
    loop_stage <out> <bc.json>  the loop's "bc" stage: LoopState.stage over train_bc_on_data, as run_loop does
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np


def synthetic_episode(i: int):
    """Episode i of the synthetic dataset: a pure function of i (two 32 px views, noise frames)."""
    from tests.robot_data.test_dataset import make_episode

    return make_episode(np.random.default_rng(1000 + i), T=8 + i, task_id=i % 3, instruction=f"task {i % 3}",
                        extra={"plan_index": i})


def dataset(root: str, n: str) -> None:
    from robot_data.dataset import DatasetConfig, EpisodeWriter

    with EpisodeWriter(Path(root), DatasetConfig(image_size=(32, 32))) as writer:
        for i in range(len(writer), int(n)):
            writer.append(synthetic_episode(i))


def loop_stage(out: str, bc_json: str) -> None:
    from imagination.loop.config import LoopConfig, LoopState
    from infra.cli import load_config
    from policies.bc import BCConfig, train_bc_on_data

    bc_cfg = load_config(BCConfig, None, json.loads(Path(bc_json).read_text()), group="bc")
    state = LoopState(LoopConfig(out_dir=out))
    result = state.stage("bc", lambda: train_bc_on_data(bc_cfg))
    print("RESULT " + json.dumps(result, sort_keys=True))


if __name__ == "__main__":
    {"dataset": dataset, "loop_stage": loop_stage}[sys.argv[1]](*sys.argv[2:])
