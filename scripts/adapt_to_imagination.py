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

from imagination.rl.frame_adapt import FrameAdaptConfig, run_adapt
from infra.cli import run_script


def main(cfg: FrameAdaptConfig) -> dict:
    return run_adapt(cfg)


if __name__ == "__main__":
    run_script(main, FrameAdaptConfig, __doc__, group="adapt")
