"""Perturbed experts for every suite: the clean expert of a suite with one labelled defect.

LIBERO-Spatial has ``PerturbedExpert`` (perturbed.py). LIBERO-Object's expert is a single item skill,
so its perturbed expert is that skill with ``ItemPerturbation``. The Goal and LIBERO-10 experts run a
plan of skills; ``PerturbedPlan`` perturbs one of them, drawn at random among the plan's skills (the
"clear" pushes that only make room for a drawer excepted), so a two-goal LIBERO-10 task yields both
"first goal failed" and "first goal done, second missed" episodes. ``noise`` perturbs the whole episode.

Labels follow the Spatial design: ``perturbation_label`` is the kind, ``perturbation_info`` the details
(strength, offsets, and for a plan which skill: "<index>:<skill>").
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from robot_data.experts.goal import GoalExpert
from robot_data.experts.long import LongExpert
from robot_data.experts.object import ObjectExpert, ObjectExpertConfig
from robot_data.experts.perturbed import (
    DEFAULT_PERTURBATIONS,
    PERTURBATION_KINDS,
    Perturbation,
    PerturbationKind,
    PerturbedExpert,
    noisy_action,
)
from robot_data.experts.perturbed_skills import ItemPerturbation, perturb, supports

K = PerturbationKind
# The kinds each suite's perturbed expert supports; wrong_azimuth is the bowl's rim pinch, Spatial only.
_PLAN_KINDS = ("noise", "near_miss", "early_release", "offset_target")
SUITE_PERTURBATIONS: dict[str, tuple[str, ...]] = {
    "libero_spatial": PERTURBATION_KINDS,
    "libero_object": _PLAN_KINDS,
    "libero_goal": _PLAN_KINDS,
    "libero_10": _PLAN_KINDS,
}
# What a collection cycles through when it names no kinds. Spatial's stays the original four, so the
# datasets existing configs collect do not change; the other suites take all of theirs.
_DEFAULTS = {"libero_spatial": DEFAULT_PERTURBATIONS}


def default_perturbations(suite: str) -> tuple[str, ...]:
    """The kinds a collection of ``suite`` cycles through by default."""
    return _DEFAULTS.get(suite, SUITE_PERTURBATIONS.get(suite, ()))


if TYPE_CHECKING:
    _PlanBase = GoalExpert
else:
    _PlanBase = object


class PerturbedPlan(_PlanBase):
    """Mixin over ``GoalExpert`` (or ``LongExpert``): one skill of the plan perturbed, or noise throughout."""

    perturbation: Perturbation

    def _init_perturbation(self, perturbation: Perturbation) -> None:
        self.perturbation = perturbation
        self._info: dict[str, Any] = {}
        self._target: Any = None
        self._noise = np.zeros(6)

    @property
    def perturbation_label(self) -> str:
        return self.perturbation.label

    @property
    def perturbed_skill(self) -> Any:
        """The skill of the plan that carries the defect (None for noise, or before ``reset``)."""
        return self._target

    @property
    def perturbation_info(self) -> dict[str, Any]:
        """The episode's details: the plan-level ones, then those of the perturbed skill (once it started)."""
        return {**self._info, **dict(getattr(self._target, "perturbation_info", {}))}

    def _planned(self) -> None:
        p = self.perturbation
        self._noise, self._target = np.zeros(6), None
        pick = float(self.rng.uniform())  # drawn for every kind: the stream does not depend on the plan
        self._info = {"perturbation": p.label, "strength": float(p.strength)}
        if p.kind == K.NOISE:
            return
        options = [i for i, (name, skill) in enumerate(zip(self._names, self._skills))
                   if name != "clear" and supports(skill, p.kind)]
        if not options:
            raise ValueError(f"perturbation: no skill of the plan {self._names} takes {p.label!r}")
        i = options[int(pick * len(options)) % len(options)]
        self._target = perturb(self._skills[i], p, self.rng)
        self._info["skill"] = f"{i}:{self._names[i]}"

    def act(self, raw_obs: dict) -> np.ndarray:
        self._noise, action = noisy_action(super().act(raw_obs), self._noise, self.perturbation, self.rng)
        return action


class PerturbedGoalExpert(PerturbedPlan, GoalExpert):
    def __init__(self, perturbation: Perturbation | str, rng: np.random.Generator | None = None):
        super().__init__(rng=rng)
        self._init_perturbation(_as_perturbation(perturbation))


class PerturbedLongExpert(PerturbedPlan, LongExpert):
    def __init__(self, perturbation: Perturbation | str, rng: np.random.Generator | None = None):
        super().__init__(rng=rng)
        self._init_perturbation(_as_perturbation(perturbation))


class PerturbedObjectExpert(ItemPerturbation, ObjectExpert):
    """``ObjectExpert`` with one defect (``ItemPerturbation``; noise on the whole episode)."""

    def __init__(
        self,
        perturbation: Perturbation | str,
        config: ObjectExpertConfig | None = None,
        rng: np.random.Generator | None = None,
    ):
        super().__init__(config, rng)
        self._init_perturbation(_as_perturbation(perturbation), self.rng)


def _as_perturbation(perturbation: Perturbation | str) -> Perturbation:
    return perturbation if isinstance(perturbation, Perturbation) else Perturbation(kind=perturbation)


_PERTURBED: dict[str, Any] = {
    "libero_spatial": PerturbedExpert,
    "libero_object": PerturbedObjectExpert,
    "libero_goal": PerturbedGoalExpert,
    "libero_10": PerturbedLongExpert,
}


def make_perturbed_expert(
    suite: str, perturbation: Perturbation | str, rng: np.random.Generator | None = None
) -> PerturbedExpert | PerturbedObjectExpert | PerturbedGoalExpert | PerturbedLongExpert:
    """The perturbed expert of ``suite``; ValueError for a suite without one or a kind it does not support."""
    if suite not in _PERTURBED:
        raise ValueError(f"suite: perturbed experts exist for {sorted(_PERTURBED)}, got {suite!r}")
    p = _as_perturbation(perturbation)
    if p.label not in SUITE_PERTURBATIONS[suite]:
        raise ValueError(f"perturbation: {suite} supports {list(SUITE_PERTURBATIONS[suite])}, got {p.label!r}")
    return _PERTURBED[suite](p, rng=rng)


__all__ = [
    "SUITE_PERTURBATIONS",
    "PerturbedGoalExpert",
    "PerturbedLongExpert",
    "PerturbedObjectExpert",
    "PerturbedPlan",
    "default_perturbations",
    "make_perturbed_expert",
]
