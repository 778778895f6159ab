"""Can imagined RL's reward tell a real failure from a real success? The closed-loop check.

    python scripts/closed_loop_check.py world_model=outputs/world_model/gpu64/world_model.pt \\
        start_data=outputs/data/spatial64 policies=[bc/policy.pt,rl/policy.pt] \\
        real_results=[eval_bc/results.json,eval_rl/results.json] max_steps=160

For every policy, the jobs of its real evaluation (`scripts/eval_policy.py` in a LIBERO suite:
the same tasks, init states and seeds) run again inside the world model, the policy acting on
imagined frames, with a success head that never ends an episode. Each job's highest imagined
success probability is then compared with its real outcome:

  AUC              chance that a real success scores higher than a real failure (0.5 = no signal)
  AUC within task  the same over pairs of one task: what GRPO's groups, which compare episodes from
                   one keyframe, can learn from. A model that only knows which task is hard gets 0.5.

From the decisive moment instead (`branch_data=`): every policy's own real episodes recorded in that
dataset (the loop's data/, `source: policy`) continue in imagination from `lead_steps` before the
policy first closes the gripper, the real frames up to there as context. This is what RL starting
from the policy's own keyframes sees; no real_results are needed:

    python scripts/closed_loop_check.py world_model=round1/world_model/world_model.pt \\
        branch_data=data policies=[round1/rl/policy.pt]

Run it before imagined RL: when the within-task AUC is near 0.5, the head rewards the world model's
idea of success, and RL improves imagined success without improving real success
(docs/notebook/loop.md, "The closed-loop check").
Writes out_dir/closed_loop.json (every job, both outcomes) and closed_loop.png (histograms);
each policy's imagined run is kept in out_dir/<policy name>/ and reused when run again.
"""
from __future__ import annotations

from imagination.eval.closed_loop_check import CheckConfig, check_closed_loop
from infra.cli import run_script


def main(cfg: CheckConfig) -> dict:
    return check_closed_loop(cfg)


if __name__ == "__main__":
    run_script(main, CheckConfig, __doc__, group="closed_loop")
