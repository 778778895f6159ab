"""Post-train a policy with RL (GRPO or PPO) inside a trained world model: no real simulator involved.

    python scripts/imagine_rl.py --config quick                 # CPU: the demo's BC policy and world model
    python scripts/imagine_rl.py --config quick rl.algo=ppo iterations=10 out_dir=/tmp/rl_ppo
    python scripts/imagine_rl.py policy=bc/policy.pt world_model=wm/world_model.pt start_data=data tasks=[0]
    accelerate launch --num_processes 2 scripts/imagine_rl.py --config quick   # data-parallel: docs/scale.md

The policy must read the world model's views (the quick world model imagines agentview only, so
train the BC policy with policy.views=[agentview]). Writes to out_dir: policy.pt (evaluate it in
real LIBERO with scripts/eval_policy.py checkpoint=out_dir/policy.pt), checkpoint.pt (re-running
the same command resumes from it; resume=false starts over), metrics.csv, logs/ (tensorboard
--logdir out_dir/logs), videos/ (imagined episodes) and result.json.
"""
from __future__ import annotations

import os
from pathlib import Path

from imagination.rl.training import ImagineRLConfig, train_rl
from infra.cli import run_script, save_config


def main(cfg: ImagineRLConfig) -> dict:
    main_process = int(os.environ.get("RANK", "0")) == 0  # under `accelerate launch`, the one that writes and prints
    if main_process:
        save_config(cfg, Path(cfg.out_dir) / "config.yaml")
    result = train_rl(cfg)
    if not main_process:
        return result
    first, last = result["first"], result["last"]
    print(f"imagined success {first.get('imagined_success_rate', 0):.2f} -> "
          f"{last.get('imagined_success_rate', 0):.2f}, "
          f"return {first.get('imagined_return', 0):.2f} -> {last.get('imagined_return', 0):.2f} over "
          f"{result['iterations']} iterations ({result['seconds']:.0f} s, real env steps {result['real_env_steps']})")
    print(f"policy: {result['policy_path']}")
    return result


if __name__ == "__main__":
    run_script(main, ImagineRLConfig, __doc__, group="rl")
