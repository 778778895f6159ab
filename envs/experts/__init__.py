"""Scripted LIBERO-Spatial experts (privileged state) and perturbed variants for dataset generation."""

from envs.experts.runner import ExpertEpisodeResult, run_expert_episode
from envs.experts.spatial import ExpertConfig, SpatialExpert

__all__ = ["ExpertConfig", "ExpertEpisodeResult", "SpatialExpert", "run_expert_episode"]
