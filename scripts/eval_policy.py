"""Evaluate a policy checkpoint in real LIBERO or in imagination: success per task with 95% Wilson intervals.

    python scripts/eval_policy.py checkpoint=outputs/bc/quick/policy.pt tasks=[0,1,2] episodes_per_task=10
    python scripts/eval_policy.py checkpoint=random env=libero_spatial tasks=[0]   # random baseline
    python scripts/eval_policy.py checkpoint=policy.pt env=libero_goal num_envs=4 max_steps=300

env is one of the LIBERO suites (libero_spatial, libero_object, libero_goal, libero_10, libero_90),
or `imagination`: the same jobs run inside a world model, each starting at frame 0 of a real episode
of the same task and init state (policy ranking compares the two):

    python scripts/eval_policy.py checkpoint=policy.pt env=imagination \
        world_model=outputs/world_model/quick/world_model.pt start_data=outputs/data/libero_spatial_quick
Episode j of a task starts from official init state (init_state_offset + j) with a seed fixed by
(seed, task, j), so two checkpoints evaluated with the same command face the same episodes.
Render as the training data was rendered (fast_render, image size; the policy's views and size are
read from its checkpoint).

Writes out_dir/results.json (per-task and overall success, 95% Wilson interval, per-episode records,
timing) and out_dir/videos/*.mp4 (the first `videos` episodes, views side by side).

Other envs: pass your own factory to imagination.evaluate.evaluate(..., env_factory=...).
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a source checkout

from imagination.evaluate import EvalConfig, evaluate
from scripts.cli import parse_config, save_config


def main(cfg: EvalConfig) -> dict:
    save_config(cfg, Path(cfg.out_dir) / "config.yaml")
    result = evaluate(cfg)
    o, t = result["overall"], result["timing"]
    print(f"{result['policy']} on {cfg.env} ({cfg.checkpoint}): success {o['successes']}/{o['episodes']} = "
          f"{o['success_rate']:.2f}  95% CI [{o['ci95'][0]:.2f}, {o['ci95'][1]:.2f}]")
    for task, row in result["per_task"].items():
        print(f"  task {task:>2}: {row['successes']}/{row['episodes']}  CI [{row['ci95'][0]:.2f}, {row['ci95'][1]:.2f}]"
              f"  mean steps {row['mean_steps']:.0f}  {row['instruction']}")
    print(f"  {t['seconds']:.0f} s, {t['env_steps_per_second']:.1f} env steps/s, {t['episodes_per_minute']:.1f} episodes/min")
    print(f"  results: {Path(cfg.out_dir) / 'results.json'}")
    return result


if __name__ == "__main__":
    main(parse_config(EvalConfig, __doc__, group="eval"))
