"""Scripted LIBERO-Spatial experts (privileged state) and perturbed variants for dataset generation.

``SpatialExpert`` picks up the black bowl and places it on the plate (100/100 on the official
init states, ~100 steps); ``PerturbedExpert`` adds one labelled defect (``PERTURBATION_KINDS``);
``run_expert_episode`` rolls either out in a raw LIBERO env with the standard protocol.
"""

from envs.experts.perturbed import (
    DEFAULT_PERTURBATIONS,
    PERTURBATION_KINDS,
    Perturbation,
    PerturbationKind,
    PerturbedExpert,
)
from envs.experts.runner import ExpertEpisodeResult, run_expert_episode
from envs.experts.spatial import PHASES, ExpertConfig, SpatialExpert

__all__ = [
    "DEFAULT_PERTURBATIONS",
    "PERTURBATION_KINDS",
    "PHASES",
    "ExpertConfig",
    "ExpertEpisodeResult",
    "Perturbation",
    "PerturbationKind",
    "PerturbedExpert",
    "SpatialExpert",
    "run_expert_episode",
]
