"""Does the world model's judge order one start's action sequences as the simulator does? The counterfactual check.

    python scripts/counterfactual_check.py policy=rl/policy.pt world_model=wm/world_model.pt suite=libero_goal \\
        "tasks=[2]" reward=goal goal_reader=reader/reader.pt proprio=rl/proprio.pt window=40 action_guidance=3

From each start (task x official init state, `init_state_offset` on) the policy runs in real LIBERO, then
`variants` times from the same moment (`lead_steps` before its first grasp) with exploration noise for `window`
steps; the simulator says which variants succeed. Each variant's actions are replayed in imagination from that
moment and judged. Prints the AUC within start (0.5: nothing a GRPO group could learn) with its 95% interval over
the starts whose variants split in reality (imagination/eval/counterfactual.py says why this, and how).
Writes out_dir/<name>.json (every variant, both outcomes), out_dir/data and out_dir/variants.json (the real
variants). A later run in the same out_dir with the same real settings (policy, tasks, starts, variants, noise,
lead_steps, window, seed) judges the recorded variants again without the simulator: another world model, judge,
action_guidance or imagined_steps, each under its own name=:

    python scripts/counterfactual_check.py --config out/counterfactual.yaml action_guidance=1 name=w1
"""
from __future__ import annotations

from imagination.eval.counterfactual import CounterfactualConfig, check_counterfactual
from infra.cli import run_script


def main(cfg: CounterfactualConfig) -> dict:
    return check_counterfactual(cfg)


if __name__ == "__main__":
    run_script(main, CounterfactualConfig, __doc__, group="counterfactual")
