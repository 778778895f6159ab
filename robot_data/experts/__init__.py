"""Scripted LIBERO experts (privileged state) and perturbed variants for dataset generation.

``SpatialExpert`` picks up the black bowl and places it on the plate (100/100 on the official
init states, ~100 steps); ``ObjectExpert`` puts a LIBERO-Object grocery item in the basket;
``GoalExpert`` chains pick-and-place, knob and push skills from a LIBERO-Goal task's goal;
``LongExpert`` composes those skills (plus closing a drawer or a door, and placing through a fixture's
open side) for LIBERO-10;
``PerturbedExpert`` adds one labelled defect to the Spatial expert (``PERTURBATION_KINDS``),
``make_perturbed_expert(suite, kind, rng)`` to any suite's (perturbed_suites.py, perturbed_skills.py);
``run_expert_episode`` rolls any of them out in a raw LIBERO env with the standard protocol;
``make_expert(suite, rng)`` builds the clean expert of a suite.
"""

import numpy as np

from robot_data.experts.goal import GOAL_SKILLS, GoalExpert, GoalExpertConfig, UnsupportedGoal
from robot_data.experts.long import LongExpert, LongExpertConfig
from robot_data.experts.object import OBJECT_PHASES, ObjectExpert, ObjectExpertConfig
from robot_data.experts.perturbed import (
    DEFAULT_PERTURBATIONS,
    PERTURBATION_KINDS,
    Perturbation,
    PerturbationKind,
    PerturbedExpert,
)
from robot_data.experts.perturbed_suites import (
    SUITE_PERTURBATIONS,
    PerturbedGoalExpert,
    PerturbedLongExpert,
    PerturbedObjectExpert,
    default_perturbations,
    make_perturbed_expert,
)
from robot_data.experts.runner import ExpertEpisodeResult, run_expert_episode
from robot_data.experts.spatial import PHASES, ExpertConfig, SpatialExpert

# The clean scripted expert of each suite that has one.
EXPERTS: dict[str, type[SpatialExpert] | type[ObjectExpert] | type[GoalExpert] | type[LongExpert]] = {
    "libero_spatial": SpatialExpert,
    "libero_object": ObjectExpert,
    "libero_goal": GoalExpert,
    "libero_10": LongExpert,
}


def make_expert(suite: str, rng: np.random.Generator | None = None) -> SpatialExpert | ObjectExpert | GoalExpert:
    """The clean scripted expert for ``suite``; ValueError for a suite without one."""
    if suite not in EXPERTS:
        raise ValueError(f"suite: scripted experts exist for {sorted(EXPERTS)}, got {suite!r}")
    return EXPERTS[suite](rng=rng)


__all__ = [
    "DEFAULT_PERTURBATIONS",
    "EXPERTS",
    "GOAL_SKILLS",
    "GoalExpert",
    "GoalExpertConfig",
    "LongExpert",
    "LongExpertConfig",
    "UnsupportedGoal",
    "OBJECT_PHASES",
    "ObjectExpert",
    "ObjectExpertConfig",
    "make_expert",
    "PERTURBATION_KINDS",
    "PHASES",
    "ExpertConfig",
    "ExpertEpisodeResult",
    "Perturbation",
    "PerturbationKind",
    "PerturbedExpert",
    "PerturbedGoalExpert",
    "PerturbedLongExpert",
    "PerturbedObjectExpert",
    "SUITE_PERTURBATIONS",
    "default_perturbations",
    "make_perturbed_expert",
    "SpatialExpert",
    "run_expert_episode",
]
