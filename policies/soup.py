"""Average the weights of policies fine-tuned from one start ("model soup"): one policy from several RL seeds.

Why: imagined RL from one start with different seeds ends at different policies, part of each update being
the seed's own exploitation of the world model. Averaging the weights keeps what the runs share. Measured on
the rl_gain gate (docs/notebook/loop.md, "After the benchmark"), five seeds' soup did not beat the best seed; the
tool stays for such checks.

    python -m policies.soup --out soup.pt run1/policy.pt run2/policy.pt run3/policy.pt

Only policies of one class and one config average: the same network fine-tuned, not different ones.
Tensors that are not floating point (counters, ids) and non-tensor extra state come from the first policy.
"""
from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import asdict

import torch

from policies.base import Policy


def average_policies(policies: Sequence[Policy]) -> Policy:
    """A new policy (the first one's class and config) whose float weights are the mean of `policies`'."""
    if not policies:
        raise ValueError("average_policies: expected at least one policy, got none")
    first = policies[0]
    for i, p in enumerate(policies[1:], 1):
        if type(p) is not type(first) or asdict(p.config) != asdict(first.config):
            raise ValueError(f"average_policies: policy {i} is a {type(p).__name__} with another config than "
                             f"policy 0 ({type(first).__name__}); only one network fine-tuned several times averages")
    states = [p.state_dict() for p in policies]
    mean = {}
    for key, value in states[0].items():
        if torch.is_tensor(value) and value.is_floating_point():
            mean[key] = torch.stack([s[key].float() for s in states]).mean(0).to(value.dtype)
        else:
            mean[key] = value
    soup = type(first)(first.config)
    soup.load_state_dict(mean)
    return soup.to(first.device).eval()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("policies", nargs="+", help="policy checkpoints (Policy.save) fine-tuned from one start")
    parser.add_argument("--out", required=True, help="where to write the averaged policy")
    args = parser.parse_args(argv)
    average_policies([Policy.load(p) for p in args.policies]).save(args.out)
    print(f"wrote {args.out}: the mean of {len(args.policies)} policies")


if __name__ == "__main__":
    main()
