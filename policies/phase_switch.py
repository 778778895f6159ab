"""A policy in two phases: one policy reaches and grasps, another carries and places once the gripper closes.

Why: the "grasp" reward of imagined RL (imagination/rewards/grasp.py) ends each imagined episode at the first
gripper close, so RL only ever judges the reach and the grasp. What the fine-tuned network does after the
close is never rewarded, and on the rl_gain protocol it drifted: RL cut the never-lifted failures and added
lifted-but-not-placed ones (docs/notebook/loop.md, "RL on the grasp reward"). Deploying the fine-tuned policy for
the phase RL judged, and the policy RL started from for the rest, keeps each phase with the policy that was
trained for it.

The phase is read from the observation, per env and at every chunk, so the policy keeps no episode state:

    finger gap = state[:, 6] - state[:, 7]   (the two gripper joint positions, metres; ~0.078 wide open)
    gap >= open_gap  ->  `approach` acts      (before the grasp, and again if the gripper re-opens to retry)
    gap <  open_gap  ->  `hold` acts          (the gripper is closing or closed: carry and place)

Both sub-policies must predict chunks of the same length. Build one with `PhaseSwitchPolicy.from_policies`
and save it like any policy; `Policy.load` restores it with both networks:

    python -m policies.phase_switch --approach rl/policy.pt --hold bc/policy.pt --out rl/policy_switch.pt
"""
from __future__ import annotations

import argparse
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

from policies.base import Policy, PolicyConfig, batch_obs, check_actions
from policies.composite import build_sub_policy, check_same_inputs, policy_spec

GRIPPER_DIMS = (6, 7)  # obs["state"] columns of the two finger joints (policies/base.py's layout)


@dataclass
class PhaseSwitchConfig(PolicyConfig):
    approach: dict[str, Any] = field(default_factory=dict)  # {"class": "module:Class", "config": {...}}
    hold: dict[str, Any] = field(default_factory=dict)
    open_gap: float = 0.06  # m; the gap falls from ~0.078 to under 0.03 within ~5 steps of a close command
    # what the envs must render for it (evaluation reads these off a policy's config); both policies' own
    views: list[str] = field(default_factory=lambda: ["agentview", "wrist"])
    image_size: int = 64


class PhaseSwitchPolicy(Policy):
    """`approach` while the gripper is open, `hold` once it closes (per env, from obs["state"])."""

    config_class = PhaseSwitchConfig
    config: PhaseSwitchConfig

    def __init__(self, config: PhaseSwitchConfig):
        super().__init__(config)
        self.approach = build_sub_policy(config.approach, "PhaseSwitchConfig.approach")
        self.hold = build_sub_policy(config.hold, "PhaseSwitchConfig.hold")
        for name, sub in (("approach", self.approach), ("hold", self.hold)):
            check_same_inputs(sub, config.chunk_len, config.views, config.image_size, f"PhaseSwitchConfig.{name}")

    @classmethod
    def from_policies(cls, approach: Policy, hold: Policy, open_gap: float = 0.06) -> PhaseSwitchPolicy:
        """A switch holding copies of both policies' weights."""
        cfg = PhaseSwitchConfig(chunk_len=approach.chunk_len, n_action_steps=approach.config.n_action_steps,
                                approach=policy_spec(approach), hold=policy_spec(hold), open_gap=open_gap,
                                views=list(getattr(approach.config, "views", ["agentview", "wrist"])),
                                image_size=int(getattr(approach.config, "image_size", 64)))
        switch = cls(cfg)
        switch.approach.load_state_dict(approach.state_dict())
        switch.hold.load_state_dict(hold.state_dict())
        return switch.to(approach.device).eval()

    def holding(self, obs: Mapping[str, Any]) -> torch.Tensor:
        """bool [B]: the env's gripper is closing or closed, so `hold` acts."""
        state = batch_obs(obs, self.device)["state"]
        if state.shape[1] <= max(GRIPPER_DIMS):
            raise ValueError(f"obs['state']: expected the gripper joints in columns {GRIPPER_DIMS}, "
                             f"got {state.shape[1]} columns")
        return (state[:, GRIPPER_DIMS[0]] - state[:, GRIPPER_DIMS[1]]) < self.config.open_gap

    @staticmethod
    def _pick(holding: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        mask = holding.view(-1, *([1] * (a.dim() - 1)))
        return torch.where(mask, b, a)

    @torch.no_grad()
    def predict_action_chunk(self, obs: Mapping[str, Any]) -> torch.Tensor:
        return self._pick(self.holding(obs), self.approach.predict_action_chunk(obs),
                          self.hold.predict_action_chunk(obs))

    def evaluate(self, obs, actions, per_dim=False):
        h = self.holding(obs)
        check_actions(actions, h.shape[0], self.chunk_len, self.device)
        a, b = self.approach.evaluate(obs, actions, per_dim), self.hold.evaluate(obs, actions, per_dim)
        return tuple(self._pick(h, x, y) for x, y in zip(a, b))

    @torch.no_grad()
    def sample(self, obs, generator=None):
        h = self.holding(obs)
        a, b = self.approach.sample(obs, generator), self.hold.sample(obs, generator)
        return tuple(self._pick(h, x, y) for x, y in zip(a, b))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--approach", required=True, help="policy checkpoint that acts while the gripper is open")
    parser.add_argument("--hold", required=True, help="policy checkpoint that acts once the gripper closes")
    parser.add_argument("--out", required=True, help="where to write the switch's checkpoint")
    parser.add_argument("--open-gap", type=float, default=0.06, help="finger gap (m) under which `hold` acts")
    args = parser.parse_args(argv)
    # the class by its package path: run as `python -m`, this module is __main__, a name Policy.load refuses
    from policies.phase_switch import PhaseSwitchPolicy as Switch
    switch = Switch.from_policies(Policy.load(args.approach), Policy.load(args.hold), args.open_gap)
    switch.save(args.out)
    print(f"wrote {args.out}: approach={args.approach} hold={args.hold} open_gap={args.open_gap}")


if __name__ == "__main__":
    main()
