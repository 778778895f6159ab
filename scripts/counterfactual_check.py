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

from pathlib import Path

import numpy as np

from imagination.eval.counterfactual import (
    CounterfactualConfig,
    imagined_verdicts,
    record_variants,
    recorded_variants,
    within_start,
)
from infra.atomic import atomic_write_json
from infra.cli import run_script, save_config
from infra.provenance import provenance
from policies.base import Policy
from world_models.model import WorldModel


def _check(cfg: CounterfactualConfig) -> None:
    for name in ("policy", "world_model"):
        if not Path(getattr(cfg, name)).is_file():
            raise SystemExit(f"{name}: expected a checkpoint file, got {getattr(cfg, name)!r}")
    if cfg.reward == "grasp" and not Path(cfg.grasp_judge).is_file():
        raise SystemExit(f"grasp_judge: reward grasp needs a judge file (scripts/fit_grasp_judge.py), "
                         f"got {cfg.grasp_judge!r}")
    if not cfg.tasks:
        raise SystemExit("tasks: expected one or more task ids of the suite, e.g. tasks=[2]")
    for name, least in (("variants", 2), ("init_states", 1), ("window", 1)):
        if int(getattr(cfg, name)) < least:
            raise SystemExit(f"{name}: expected an integer >= {least}, got {getattr(cfg, name)}")
    if not cfg.name or "/" in cfg.name:
        raise SystemExit(f"name: expected a file name for out_dir/<name>.json, got {cfg.name!r}")


def main(cfg: CounterfactualConfig) -> dict:
    _check(cfg)
    records = recorded_variants(cfg)
    save_config(cfg, Path(cfg.out_dir) / f"{cfg.name}.yaml")
    if records is None:
        policy = Policy.load(cfg.policy, map_location=cfg.device, modules=cfg.policy_modules)
        wm_cfg = WorldModel.load(cfg.world_model).cfg
        # what evaluation renders for the policy (imagination/eval/evaluate.py), and the world model's views beside
        views = tuple(dict.fromkeys([*wm_cfg.views, *getattr(policy.config, "views", ("agentview", "wrist"))]))
        records = record_variants(cfg, policy, views, int(getattr(policy.config, "image_size", 64)))
    else:
        print(f"reusing the {len(records)} real variants recorded in {cfg.out_dir} (variants.json)")
    verdicts = imagined_verdicts(cfg, records)
    for r, v in zip(records, verdicts):
        r["verdict"] = float(v)
    real = np.array([r["real_success"] for r in records])
    ids = np.array([r["start"] for r in records])
    summary = within_start(verdicts, real, ids)
    print(f"{cfg.suite} tasks {list(cfg.tasks)}, {summary['starts']} starts x {cfg.variants} variants: real success "
          f"{int(real.sum())}/{len(real)}, variants split in reality on {summary['split_starts']} starts")
    print(f"  AUC within start {summary['auc']:.3f}  95% CI [{summary['ci95'][0]:.3f}, {summary['ci95'][1]:.3f}]  "
          f"(0.5: the judge orders one start's action sequences no better than chance)")
    result = {"summary": summary, "variants": records,
              "provenance": provenance(cfg.seed, [(r["task_id"], r["init_state_id"], r["variant"]) for r in records])}
    atomic_write_json(Path(cfg.out_dir) / f"{cfg.name}.json", result, indent=2)
    print(f"  written: {Path(cfg.out_dir) / cfg.name}.json")
    return result


if __name__ == "__main__":
    run_script(main, CounterfactualConfig, __doc__, group="counterfactual")
