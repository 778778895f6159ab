"""Adapt a policy to the world model's frames before imagined RL (imagination/rl/frame_adapt.py).

    python scripts/adapt_to_imagination.py policy=outputs/bench/rl_gain_v2/bc/policy.pt \
        world_model=outputs/bench/rl_gain_v2/world_model/world_model.pt \
        proprio=outputs/bench/rl_gain_v2/own_rollouts/proprio.pt \
        data=outputs/bench/rl_gain_v2/own_rollouts/data out_dir=outputs/bench/rl_gain_v2/adapted

Each of the policy's own recorded rollouts in `data` is imagined open loop with its recorded actions from `leads`
steps before its recorded release; the policy is fit to act on the imagined frames and predicted state as it acts on
the recorded observation of the same step, beside every recorded step of the same episodes. Writes out_dir/policy.pt
and out_dir/adapt.json (the fit's figures before and after). Then `bench/closed_loop_inputs.py --policy
out_dir/policy.pt` says whether it now acts in imagination as it does in reality, and
`scripts/imagine_rl.py policy=out_dir/policy.pt` starts RL from it.
"""
from __future__ import annotations

import json
import time
from pathlib import Path

import torch

from imagination.env import ImaginationConfig
from imagination.imagine import open_imagination
from imagination.rl.frame_adapt import (
    FrameAdaptConfig,
    adapt,
    imagined_pairs,
    pair_mse,
    recorded_pairs,
    release_starts,
    start_targets,
)
from infra.atomic import atomic_write_text
from infra.cli import run_script
from policies.base import Policy


def main(cfg: FrameAdaptConfig) -> dict:
    cfg.validate()
    for name in ("policy", "world_model", "proprio"):
        path = getattr(cfg, name)
        if path and not Path(path).is_file():
            raise FileNotFoundError(f"{name}: {path!r} is not a file")
    if not Path(cfg.data).is_dir():
        raise FileNotFoundError(f"data: {cfg.data!r} is not a dataset directory")
    torch.set_num_threads(cfg.num_threads)
    torch.manual_seed(cfg.seed)
    t0 = time.time()
    policy = Policy.load(cfg.policy)
    policy.eval()
    probe = open_imagination(cfg.world_model, cfg.data, cfg.proprio, num_envs=1,
                             config=ImaginationConfig(max_steps=10_000, success_threshold=2.0), policy=policy)
    starts = release_starts(probe, list(cfg.leads), policy.n_action_steps)
    if not starts:
        raise ValueError(f"data: no episode of {cfg.data} releases {min(cfg.leads)} steps or more after its close")
    env = open_imagination(probe.wm, probe.episodes, probe.proprio, num_envs=min(64, len(starts)),
                           config=ImaginationConfig(max_steps=10_000, success_threshold=2.0), policy=policy)
    chunks = -(-cfg.imagined_steps // env.K)
    imagined, window = imagined_pairs(env, starts, chunks, cfg.seed)
    recorded = recorded_pairs(env)
    if cfg.target == "start":
        window_actions = window.target.copy()
        start_targets(policy, imagined, window, recorded)
        window.target, window.mask = imagined.target, imagined.mask  # the window now scores against the same chunks
        print(f"the start against its recorded actions in the window: "
              f"{float(((window.target - window_actions) ** 2).mean()):.5f}")

    def fit() -> dict:
        return {"imagined_mse": pair_mse(policy, imagined), "recorded_window_mse": pair_mse(policy, window),
                "recorded_mse": pair_mse(policy, recorded)}

    before = fit()
    print(f"{len(starts)} starts, {len(imagined)} imagined steps, {len(recorded)} recorded steps; before: {before}")
    logs = adapt(policy, imagined, recorded, cfg)
    after = fit()
    print(f"after {cfg.steps} steps: {after}")
    out = Path(cfg.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    policy.save(out / "policy.pt")
    result = {"policy_path": str(out / "policy.pt"), "starts": len(starts), "pairs": len(imagined),
              "before": before, "after": after, "log": logs, "seconds": time.time() - t0}
    atomic_write_text(out / "adapt.json", json.dumps(result, indent=2))
    return result


if __name__ == "__main__":
    run_script(main, FrameAdaptConfig, __doc__, group="adapt")
