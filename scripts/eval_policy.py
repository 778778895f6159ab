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
(seed, task, j), so two checkpoints evaluated with the same command face the same episodes. An
init_state_offset of 10000 + k starts episode j on drawn layout k + j instead: a fresh placement of
the task's objects that no official init state holds (envs/libero_suites.py, DRAWN_LAYOUT_BASE).
Render as the training data was rendered (fast_render, image size; the policy's views and size are
read from its checkpoint).

Writes out_dir/results.json (per-task and overall success, 95% Wilson interval, per-episode records,
timing) and out_dir/videos/*.mp4 (the first `videos` episodes, views side by side). A real evaluation keeps
each finished episode in out_dir/episodes.partial.jsonl until results.json is written: re-running the same
command after a stop runs only the episodes that had not finished (deterministic policies of a checkpoint file).

record_to=DATA_DIR appends every real episode to that dataset as source `policy` (failures and
near-successes flagged, `extra.policy` = the checkpoint): data to fine-tune the world model on the
policy's own mistakes, to start imagined RL from the states it reaches (`sources=[policy]`), or to
check the reward from there (`scripts/closed_loop_check.py branch_data=`). Use init states the
benchmark does not (init_state_offset=20), so the benchmark's jobs stay unseen.

Several suites, reported per suite and averaged as papers do (out_dir/suites.md):

    python scripts/eval_policy.py checkpoint=policy.pt 'suites=[libero_spatial,libero_object]' episodes_per_task=10

Other envs: pass your own factory to imagination.eval.evaluate.evaluate(..., env_factory=...).
"""
from __future__ import annotations

from imagination.eval.real_rollouts import EvalPolicyConfig, evaluate_policy
from imagination.eval.suites import evaluate_suites
from infra.cli import run_script


def main(cfg: EvalPolicyConfig) -> dict:
    return evaluate_suites(cfg) if cfg.suites else evaluate_policy(cfg)


if __name__ == "__main__":
    run_script(main, EvalPolicyConfig, __doc__, group="eval")
