"""A policy per task: each env's instruction picks which of several policies acts for it.

Why: one imagined-RL run fine-tunes a single network on every task, but its judge is not equally sound on every
task. On protocol v2 the recipe gained on the task its judge separates and collapsed on one it does not, in two
seeds of three (docs/results.md, "Protocol v2: imagination's own gain"). A per-task gate
(imagination/loop/adopt.py `task_adoption`) keeps the fine-tuned policy only on the tasks where its real
evaluation, on jobs the benchmark does not score, shows it no worse than the start, and keeps the start on the
others. This class deploys that decision as one checkpoint, so evaluation, serving and the robot load it like any
policy.

The route is read from obs["instruction"], per env and at every chunk, so the policy keeps no episode state;
an instruction with no route goes to policy 0 (the default, usually the start):

    switch = TaskSwitchPolicy.from_policies([bc, rl], {"pick up the black bowl ... on the plate": 1})
    switch.save("routed/policy.pt")        # Policy.load restores it with every network

    python -m policies.task_switch --default bc/policy.pt --routed rl/policy.pt --suite libero_spatial \
        --tasks 7 8 --out routed/policy.pt
"""
from __future__ import annotations

import argparse
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

from policies.base import Policy, PolicyConfig, batch_obs, check_actions
from policies.composite import build_sub_policy, check_same_inputs, policy_spec


@dataclass
class TaskSwitchConfig(PolicyConfig):
    # every sub-policy as {"class": "module:Class", "config": {...}}; policies[0] acts for unrouted instructions
    policies: list[dict[str, Any]] = field(default_factory=list)
    routes: dict[str, int] = field(default_factory=dict)  # instruction -> index into `policies`
    # what the envs must render for it (evaluation reads these off a policy's config); every sub-policy's own
    views: list[str] = field(default_factory=lambda: ["agentview", "wrist"])
    image_size: int = 64


def _rows(value: Any, rows: torch.Tensor) -> Any:
    """The entries `rows` of one batched observation value (a tensor, an array or a list of strings)."""
    if isinstance(value, torch.Tensor):
        return value[rows.to(value.device)]
    if isinstance(value, (list, tuple)):
        return [value[r] for r in rows.tolist()]
    return value[rows.cpu().numpy()]


class TaskSwitchPolicy(Policy):
    """policies[routes.get(instruction, 0)] acts for each env."""

    config_class = TaskSwitchConfig
    config: TaskSwitchConfig

    def __init__(self, config: TaskSwitchConfig):
        super().__init__(config)
        if not config.policies:
            raise ValueError("TaskSwitchConfig.policies: expected at least one policy spec, got none")
        subs = [build_sub_policy(s, f"TaskSwitchConfig.policies[{i}]") for i, s in enumerate(config.policies)]
        for text, i in config.routes.items():
            if not 0 <= int(i) < len(subs):
                raise ValueError(f"TaskSwitchConfig.routes[{text!r}]: expected an index in [0, {len(subs)}), got {i}")
        for i, sub in enumerate(subs):
            check_same_inputs(sub, config.chunk_len, config.views, config.image_size, f"TaskSwitchConfig.policies[{i}]")
        self.subs = torch.nn.ModuleList(subs)

    @classmethod
    def from_policies(cls, policies: list[Policy], routes: Mapping[str, int]) -> TaskSwitchPolicy:
        """A switch holding copies of every policy's weights; policies[0] is the default."""
        first = policies[0]
        cfg = TaskSwitchConfig(chunk_len=first.chunk_len, n_action_steps=first.config.n_action_steps,
                               policies=[policy_spec(p) for p in policies],
                               routes={str(k): int(v) for k, v in routes.items()},
                               views=list(getattr(first.config, "views", ["agentview", "wrist"])),
                               image_size=int(getattr(first.config, "image_size", 64)))
        switch = cls(cfg)
        for mine, theirs in zip(switch.subs, policies):
            mine.load_state_dict(theirs.state_dict())
        return switch.to(first.device).eval()

    def route(self, obs: Mapping[str, Any]) -> torch.Tensor:
        """long [B]: the index of the policy that acts for each env."""
        text = batch_obs(obs, self.device)["instruction"]
        return torch.tensor([int(self.config.routes.get(t, 0)) for t in text], device=self.device)

    def _merge(self, obs: Mapping[str, Any], call: Any, idx: torch.Tensor | None = None) -> tuple[torch.Tensor, ...]:
        """Each sub-policy's outputs on the envs routed to it, put back in batch order. `call(sub, sub_obs, rows)`
        returns a tensor or a tuple of tensors with the batch first; rows: long [b], the envs it acts for. idx: the
        route, when the caller has it already."""
        idx = self.route(obs) if idx is None else idx
        out: list[torch.Tensor] | None = None
        for i in idx.unique().tolist():
            rows = (idx == i).nonzero().flatten()
            part = {k: _rows(v, rows) for k, v in obs.items()}
            res = call(self.subs[i], part, rows)
            res = res if isinstance(res, tuple) else (res,)
            if out is None:
                out = [torch.zeros((idx.shape[0], *r.shape[1:]), dtype=r.dtype, device=r.device) for r in res]
            for o, r in zip(out, res):
                o[rows.to(o.device)] = r
        assert out is not None  # the batch has at least one env
        return tuple(out)

    @torch.no_grad()
    def predict_action_chunk(self, obs: Mapping[str, Any]) -> torch.Tensor:
        return self._merge(obs, lambda sub, o, rows: sub.predict_action_chunk(o))[0]

    def evaluate(self, obs, actions, per_dim=False):
        idx = self.route(obs)
        a = check_actions(actions, len(idx), self.chunk_len, self.device)
        return self._merge(obs, lambda sub, o, rows: sub.evaluate(o, a[rows], per_dim), idx)

    @torch.no_grad()
    def sample(self, obs, generator=None):
        return self._merge(obs, lambda sub, o, rows: sub.sample(o, generator))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--default", required=True, help="policy checkpoint that acts for every other task")
    parser.add_argument("--routed", required=True, help="policy checkpoint that acts for --tasks")
    parser.add_argument("--suite", required=True, help="the LIBERO suite whose task ids --tasks names")
    parser.add_argument("--tasks", type=int, nargs="+", required=True, help="task ids routed to --routed")
    parser.add_argument("--out", required=True, help="where to write the switch's checkpoint")
    args = parser.parse_args(argv)
    from envs.libero_suites import get_task

    # the class by its package path: run as `python -m`, this module is __main__, a name Policy.load refuses
    from policies.task_switch import TaskSwitchPolicy as Switch
    routes = {get_task(args.suite, t).language: 1 for t in args.tasks}
    Switch.from_policies([Policy.load(args.default), Policy.load(args.routed)], routes).save(args.out)
    print(f"wrote {args.out}: {args.routed} for {args.suite} tasks {args.tasks}, {args.default} for the others")


if __name__ == "__main__":
    main()
