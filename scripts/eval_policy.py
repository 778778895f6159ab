"""Evaluate a policy checkpoint in real LIBERO or in imagination: success per task with 95% Wilson intervals.

    python scripts/eval_policy.py checkpoint=outputs/bc/quick/policy.pt tasks=[0,1,2] episodes_per_task=10
    python scripts/eval_policy.py checkpoint=random env=libero_spatial tasks=[0]   # random baseline
    python scripts/eval_policy.py checkpoint=policy.pt env=libero_goal num_envs=4 max_steps=300

env is one of the LIBERO suites (libero_spatial, libero_object, libero_goal, libero_10, libero_90),
or `imagination`: the same jobs run inside a world model, each starting at frame 0 of a real episode
of the same task and init state (policy ranking compares the two):

    python scripts/eval_policy.py checkpoint=policy.pt env=imagination \\
        world_model=outputs/world_model/quick/world_model.pt start_data=outputs/data/libero_spatial_quick
Episode j of a task starts from official init state (init_state_offset + j) with a seed fixed by
(seed, task, j), so two checkpoints evaluated with the same command face the same episodes.
Render as the training data was rendered (fast_render, image size; the policy's views and size are
read from its checkpoint).

Writes out_dir/results.json (per-task and overall success, 95% Wilson interval, per-episode records,
timing) and out_dir/videos/*.mp4 (the first `videos` episodes, views side by side).

record_to=DATA_DIR appends every real episode to that dataset as source `policy` (failures and
near-successes flagged, `extra.policy` = the checkpoint): data to fine-tune the world model on the
policy's own mistakes, to start imagined RL from the states it reaches (`sources=[policy]`), or to
check the reward from there (`scripts/closed_loop_check.py branch_data=`). Use init states the
benchmark does not (init_state_offset=20), so the benchmark's jobs stay unseen.

Other envs: pass your own factory to imagination.eval.evaluate.evaluate(..., env_factory=...).
"""
from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a source checkout

from envs.cli import parse_config, save_config
from envs.dataset.layout import INFO_PATH
from imagination.eval.evaluate import evaluate, load_policy
from imagination.eval.jobs import EvalConfig
from imagination.eval.real_rollouts import evaluate_and_record


@dataclass
class EvalPolicyConfig(EvalConfig):
    record_to: str = ""  # a dataset folder: append every real episode to it (source policy); "" = do not record


def main(cfg: EvalConfig) -> dict:
    record_to = getattr(cfg, "record_to", "")
    if record_to and cfg.env == "imagination":
        raise SystemExit("record_to: only real episodes are recorded; use a LIBERO suite as env")
    if record_to and not Path(record_to, INFO_PATH).is_file():
        raise SystemExit(f"record_to: {record_to} is not a dataset folder (expected {record_to}/{INFO_PATH}, "
                         "as scripts/collect.py writes it)")
    save_config(cfg, Path(cfg.out_dir) / "config.yaml")
    if record_to:
        result = evaluate_and_record(cfg, load_policy(cfg), record_to, {"policy": cfg.checkpoint})
    else:
        result = evaluate(cfg)
    o, t = result["overall"], result["timing"]
    print(f"{result['policy']} on {cfg.env} ({cfg.checkpoint}): success {o['successes']}/{o['episodes']} = "
          f"{o['success_rate']:.2f}  95% CI [{o['ci95'][0]:.2f}, {o['ci95'][1]:.2f}]")
    for task, row in result["per_task"].items():
        print(f"  task {task:>2}: {row['successes']}/{row['episodes']}  CI [{row['ci95'][0]:.2f}, {row['ci95'][1]:.2f}]"
              f"  mean steps {row['mean_steps']:.0f}  {row['instruction']}")
    if o.get("failures"):
        print("  failures: " + ", ".join(f"{k} {n}" for k, n in o["failures"].items()))
    print(f"  {t['seconds']:.0f} s, {t['env_steps_per_second']:.1f} env steps/s, "
          f"{t['episodes_per_minute']:.1f} episodes/min")
    print(f"  results: {Path(cfg.out_dir) / 'results.json'}")
    if record_to:
        r = result["recorded"]
        print(f"  recorded into {record_to}: {r['episodes']} episodes ({r['successes']} successes, "
              f"{r['failures']} failures, {r['near_successes']} near-successes)")
    return result


if __name__ == "__main__":
    main(parse_config(EvalPolicyConfig, __doc__, group="eval"))
