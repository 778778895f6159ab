"""What policies made of other policies share (policies/phase_switch.py, policies/task_switch.py): each sub-policy
is stored in the composite's config as {"class": "module:Class", "config": {...}}, rebuilt through the same
allow-list as any checkpoint (`policies.base._policy_class`), and must read the same inputs and predict the same
chunks as the composite, or the env would render for one and the other would misread it."""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

from infra.checkpoint import config_from
from policies.base import Policy, _policy_class


def policy_spec(policy: Policy) -> dict[str, Any]:
    """{"class": "module:Class", "config": {...}}: what a composite's config stores of a sub-policy."""
    return {"class": f"{type(policy).__module__}:{type(policy).__qualname__}", "config": asdict(policy.config)}


def build_sub_policy(spec: dict[str, Any], name: str) -> Policy:
    """The policy `spec` describes, with fresh weights (the composite's state dict fills them); `name` is the
    config field, for the errors."""
    if set(spec) != {"class", "config"}:
        raise ValueError(f"{name}: expected {{'class': 'module:Class', 'config': {{...}}}}, got keys {sorted(spec)}")
    cls = _policy_class(str(spec["class"]), name)
    if not (isinstance(cls, type) and issubclass(cls, Policy)):
        raise ValueError(f"{name}: {spec['class']!r} is not a Policy")
    return cls(config_from(cls.config_class, spec["config"], name, "policy"))


def check_same_inputs(sub: Policy, chunk_len: int, views: Sequence[str], image_size: int, name: str) -> None:
    """ValueError unless `sub` predicts chunks of `chunk_len` from `views` at `image_size` (a field it does not
    have counts as equal)."""
    wanted: dict[str, Any] = {"chunk_len": chunk_len, "views": list(views), "image_size": image_size}
    for key, want in wanted.items():
        got: Any = getattr(sub.config, key, want)
        if (list(got) if key == "views" else got) != want:
            raise ValueError(f"{name}: {key} {got!r} differs from the composite's {want!r}; every policy must read "
                             "the same inputs and predict the same chunks")


__all__ = ["build_sub_policy", "check_same_inputs", "policy_spec"]
