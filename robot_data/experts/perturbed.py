"""Perturbed experts: scripted episodes that nearly succeed or fail on purpose, labelled.

A world model trained only on expert successes never sees a bowl slip, drop or land beside the
plate, so it cannot tell a policy that those outcomes exist. ``PerturbedExpert`` runs the same
state machine as ``SpatialExpert`` with one controlled defect:

    noise          Gaussian noise on the arm action (std = 0.3 * strength, action units) that
                   persists for a few steps (an AR(1) process), so it is not averaged away.
    wrong_azimuth  grasp at a poorly ranked rim azimuth, too far out and too high on the wall,
                   without retrying: the fingers miss the wall or pinch only its edge and slip.
    early_release  open the gripper during the carry once the bowl has covered 0.5 * strength of
                   the way to the plate, and always >= 10 cm from its centre: it drops beside.
    offset_target  place the bowl at 0.06 * strength m (random direction) from the plate centre:
                   it lands half on / beside the plate (near-success).
    near_miss      close the gripper at a horizontal offset from the planned grasp point, of
                   magnitude uniform in [0, 0.05 * strength] m and uniform direction, without
                   retrying. Measured on task 0: up to ~4 cm the fingers still pinch the rim (the
                   expert succeeds); at 5 cm most directions close on nothing (never lifted) and
                   some pinch the rim's edge, lift the bowl and let it slip. strength > 1 gives
                   more failures. Not in DEFAULT_PERTURBATIONS, so the datasets that existing
                   configs collect stay what they were.

Each episode's label is ``expert.perturbation_label`` (the kind string), which
``run_expert_episode`` copies into ``ExpertEpisodeResult.perturbation``; details (strength,
offsets) are in ``expert.perturbation_info``.

The hooks live in ``BowlPerturbation``, so the bowl placements of the Goal and LIBERO-10 experts
reuse them; the other suites' perturbed experts are in perturbed_skills.py / perturbed_suites.py.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING, Any

import numpy as np

from robot_data.experts.spatial import ExpertConfig, SpatialExpert

# The mixin's super() calls resolve to SpatialExpert's methods at run time; mypy needs to see that base.
if TYPE_CHECKING:
    _BowlBase = SpatialExpert
else:
    _BowlBase = object


class PerturbationKind(str, Enum):
    NONE = "none"
    NOISE = "noise"
    WRONG_AZIMUTH = "wrong_azimuth"
    EARLY_RELEASE = "early_release"
    OFFSET_TARGET = "offset_target"
    NEAR_MISS = "near_miss"


# The perturbation kinds a dataset can request (everything but "none").
PERTURBATION_KINDS: tuple[str, ...] = tuple(k.value for k in PerturbationKind if k is not PerturbationKind.NONE)
# What a collection cycles through unless told otherwise: fixed, so a config collects the same
# episodes after a new kind is added.
DEFAULT_PERTURBATIONS: tuple[str, ...] = ("noise", "wrong_azimuth", "early_release", "offset_target")


@dataclass
class Perturbation:
    """One perturbation: ``kind`` and a dimensionless ``strength`` (1.0 = default, 0 = none).

    The base magnitudes below are what strength 1.0 means for each kind.
    """

    kind: PerturbationKind | str = PerturbationKind.NOISE
    strength: float = 1.0
    noise_std: float = 0.3  # action units (1.0 == 5 cm / 0.5 rad per step)
    noise_corr: float = 0.7  # AR(1) coefficient: noise persists over ~3 steps
    radial_shift: float = 0.05  # m outward from the rim wall (wrong_azimuth)
    height_shift: float = 0.015  # m up along the bowl axis (wrong_azimuth)
    release_fraction: float = 0.5  # fraction of the carry left when releasing (early_release)
    release_min_dist: float = 0.10  # m; never release closer than this to the plate centre
    place_offset: float = 0.06  # m from the plate centre (offset_target)
    near_miss_max_m: float = 0.05  # m; the grasp offset is uniform in [0, this * strength] (near_miss)
    # m; fixes the near-miss offset's magnitude (the direction is still drawn), e.g. for tests.
    near_miss_offset_m: float | None = None
    # offset_target on a knob / drawer: stop this share (x strength) short of what LIBERO's predicate needs.
    short_of_goal: float = 0.25

    def __post_init__(self) -> None:
        try:
            self.kind = PerturbationKind(self.kind)
        except ValueError:
            valid = [k.value for k in PerturbationKind]
            raise ValueError(f"unknown perturbation kind {self.kind!r}; expected one of {valid}") from None
        if not np.isfinite(self.strength) or self.strength < 0:
            raise ValueError(f"strength must be a finite number >= 0, got {self.strength!r}")
        fixed = self.near_miss_offset_m
        if fixed is not None and (not np.isfinite(fixed) or fixed < 0):
            raise ValueError(f"near_miss_offset_m must be None or a finite number of metres >= 0, got {fixed!r}")
        if not np.isfinite(self.near_miss_max_m) or self.near_miss_max_m < 0:
            raise ValueError(f"near_miss_max_m must be a finite number of metres >= 0, got {self.near_miss_max_m!r}")
        for name in ("release_fraction", "short_of_goal"):
            value = getattr(self, name)
            if not np.isfinite(value) or not 0 <= value <= 1:
                raise ValueError(f"{name} must be a number in [0, 1], got {value!r}")

    @property
    def label(self) -> str:
        return PerturbationKind(self.kind).value  # __post_init__ made kind a PerturbationKind

    def grasp_miss(self, rng: np.random.Generator) -> float:
        """A near-miss offset's size (m): uniform in [0, near_miss_max_m * strength], or the fixed one."""
        size = float(rng.uniform(0.0, self.near_miss_max_m * self.strength))
        return size if self.near_miss_offset_m is None else float(self.near_miss_offset_m)


def ar1_noise(noise: np.ndarray, p: Perturbation, rng: np.random.Generator) -> np.ndarray:
    """The next value of the AR(1) arm-action noise [6] of the ``noise`` kind (std noise_std * strength)."""
    std = p.noise_std * p.strength
    innovation = rng.normal(0.0, std * np.sqrt(1.0 - p.noise_corr**2), size=6)
    return p.noise_corr * noise + innovation


def release_short(expert: Any, dist: float, floor: float, p: Perturbation) -> None:
    """The ``early_release`` kind: send `expert` to its release phase once the remaining carry distance `dist`
    falls to a fraction of the carry it started at (`expert._carry_start`), but never below `floor` metres."""
    left = max(expert._carry_start * (1.0 - p.release_fraction * p.strength), floor)
    if dist <= left:
        expert.perturbation_info["release_dist_m"] = round(dist, 4)
        expert._goto("release")


def noisy_action(action: np.ndarray, noise: np.ndarray, p: Perturbation, rng: np.random.Generator
                 ) -> tuple[np.ndarray, np.ndarray]:
    """(next noise [6], action [7] float32): the ``noise`` kind's AR(1) noise added to the arm's part of
    action and clipped to [-1, 1]; both unchanged unless that kind is active (strength > 0)."""
    if p.kind != PerturbationKind.NOISE or p.strength <= 0:
        return noise, action.astype(np.float32)
    noise = ar1_noise(noise, p, rng)
    out = action.copy()
    out[:6] = np.clip(out[:6] + noise, -1.0, 1.0)
    return noise, out.astype(np.float32)


class BowlPerturbation(_BowlBase):
    """The perturbed rim-pinch skill: hooks over ``SpatialExpert`` (module docstring), shared by the Spatial
    expert (``PerturbedExpert``) and the bowl placements of the Goal and LIBERO-10 experts (``perturbed_skills``).

    A class using it derives from ``SpatialExpert`` (or a subclass) and calls ``_init_perturbation`` once.
    """

    perturbation: Perturbation
    perturbation_info: dict

    def _init_perturbation(self, perturbation: Perturbation) -> None:
        self.perturbation = perturbation
        if perturbation.kind in (PerturbationKind.WRONG_AZIMUTH, PerturbationKind.NEAR_MISS):
            # A retry would simply fix the bad grasp; the point is to record the failure.
            self.cfg = dataclasses.replace(self.cfg, max_regrasps=0)
        self.perturbation_info = {}
        self._near_miss = np.zeros(3)
        self._ranking = False

    @property
    def perturbation_label(self) -> str:
        return self.perturbation.label

    def reset(self, raw_env, raw_obs: dict) -> None:
        p, s = self.perturbation, self.perturbation.strength
        self._noise = np.zeros(6)
        self._carry_start: float | None = None
        # Draw everything episode-specific up front so the rng stream does not depend on timing.
        angle = float(self.rng.uniform(0.0, 2.0 * np.pi))
        self._place_offset = p.place_offset * s * np.array([np.cos(angle), np.sin(angle), 0.0])
        self._bad_pick = float(self.rng.uniform())
        self._near_miss = np.zeros(3)
        if p.kind == PerturbationKind.NEAR_MISS:
            # Drawn only for this kind: the other kinds' rng streams (noise) stay as they were.
            size = p.grasp_miss(self.rng)
            heading = float(self.rng.uniform(0.0, 2.0 * np.pi))
            self._near_miss = size * np.array([np.cos(heading), np.sin(heading), 0.0])
        self.perturbation_info = {"perturbation": p.label, "strength": float(s)}
        super().reset(raw_env, raw_obs)
        if p.kind == PerturbationKind.OFFSET_TARGET:
            self.perturbation_info["place_offset_m"] = self._place_offset[:2].round(4).tolist()
        if p.kind == PerturbationKind.NEAR_MISS:
            self.perturbation_info["grasp_offset_m"] = self._near_miss[:2].round(4).tolist()

    def _grasp_offset(self) -> np.ndarray:
        p = self.perturbation
        if p.kind == PerturbationKind.WRONG_AZIMUTH:
            # Too far out (the wall ends up outside the finger gap) and too high on the wall.
            return np.array([p.radial_shift * p.strength, p.height_shift * p.strength])
        return super()._grasp_offset()

    def _grasp_frame(self, obs: dict, azimuth: float) -> tuple[np.ndarray, np.ndarray, float]:
        point, horizontal, slope = super()._grasp_frame(obs, azimuth)
        if self._ranking:
            return point, horizontal, slope  # the plan is the clean one: only its execution is off
        return point + self._near_miss, horizontal, slope

    def _rank_azimuths(self, obs: dict) -> list[float]:
        self._ranking = True
        try:
            return super()._rank_azimuths(obs)
        finally:
            self._ranking = False

    def _choose_azimuth(self, obs: dict) -> float:
        azimuth = super()._choose_azimuth(obs)
        if self.perturbation.kind == PerturbationKind.WRONG_AZIMUTH and self.perturbation.strength > 0:
            # A fixed random pick from the worse half of the ranking: cluttered or far side.
            ranked = self._rank_azimuths(obs)
            worse = ranked[len(ranked) // 2 :]
            azimuth = worse[int(self._bad_pick * len(worse)) % len(worse)]
            self.perturbation_info["azimuth_rad"] = round(azimuth, 4)
        return azimuth

    def _place_point(self, obs: dict) -> np.ndarray:
        point = super()._place_point(obs)
        if self.perturbation.kind == PerturbationKind.OFFSET_TARGET:
            return point + self._place_offset
        return point

    def _policy(self, obs: dict) -> np.ndarray:
        p = self.perturbation
        if p.kind == PerturbationKind.EARLY_RELEASE and self._phase == "carry" and p.strength > 0:
            # The clean place point: the plate (Spatial) or a fixture site's support point (Goal, LIBERO-10).
            bowl, plate = obs[f"{self.bowl}_pos"], super()._place_point(obs)
            dist = float(np.linalg.norm((plate - bowl)[:2]))
            if self._carry_start is None:
                self._carry_start = dist
            # Release once the remaining distance falls to a fraction of the carry, but never over
            # the plate (radius ~7 cm): a bowl dropped there can still slide to the centre.
            release_short(self, dist, p.release_min_dist, p)
        return super()._policy(obs)

    def act(self, raw_obs: dict) -> np.ndarray:
        self._noise, action = noisy_action(super().act(raw_obs), self._noise, self.perturbation, self.rng)
        return action


class PerturbedExpert(BowlPerturbation, SpatialExpert):
    """``SpatialExpert`` with one deliberate defect (see module docstring); rng drives it."""

    def __init__(
        self,
        perturbation: Perturbation | str,
        config: ExpertConfig | None = None,
        rng: np.random.Generator | None = None,
    ):
        if isinstance(perturbation, (str, PerturbationKind)):
            perturbation = Perturbation(kind=perturbation)
        super().__init__(config or ExpertConfig(), rng)
        self._init_perturbation(perturbation)
