"""Perturbed skills: one labelled defect on a pick-and-place, knob, drawer, push or close skill.

The Object, Goal and LIBERO-10 experts are built from the same skills (``ObjectExpert`` and its placements,
``SpatialExpert``'s rim pinch for bowls, ``TurnKnob``, ``OpenDrawer``, ``PushObject``), so their perturbed
variants are those skills with a mixin of hooks, not one perturbed copy per suite. Each kind is defined for
every skill, so any kind can perturb any task (``Perturbation`` in perturbed.py holds the magnitudes):

    kind           pick and place (item / bowl)           knob, drawer                     push
    near_miss      grasp point offset (uniform in         knob: grip off its axis;         pusher off the push line
                   [0, 5 cm], any direction), no retry    drawer: grip in front of the bar  by up to 5 cm
    early_release  let go during the carry, half way      let go half way to LIBERO's      stop half way to the region
                   and beyond the target's edge           on / open threshold
    offset_target  place on the target's edge (any         stop 25% short of the threshold  push goal 6 cm short
                   direction; >= 6 cm off)                (a near-success)
    wrong_azimuth  bowls only (as on LIBERO-Spatial)      -                                -

The closing skills of LIBERO-10 (``CloseDrawer``, ``CloseDoor``: a push on a panel, no grasp) take the two
kinds of a push that stops early: early_release stops it half way shut, offset_target 25% of the way short
(a near-success). A grasp offset has no meaning there, so near_miss perturbs another skill of the plan.
LIBERO-10's placement through a microwave's open side (``InsertPlace``) takes every kind of an item
placement; its offset_target slides the item 6 cm less far in and skips the push deeper: the mug is left
part way through the opening (a near-success; 3 cm short still succeeds).

(``noise`` is added by the whole expert, not by one skill: see perturbed_suites.py.) ``perturb`` turns a
built skill into its perturbed variant in place; the skills are built by the Goal / LIBERO-10 planners with
per-step arguments, which a second construction path would have to duplicate.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

import numpy as np

from robot_data.experts.closing import CloseDoor, CloseDrawer
from robot_data.experts.long_places import InsertPlace
from robot_data.experts.object import ObjectExpert
from robot_data.experts.perturbed import BowlPerturbation, Perturbation, PerturbationKind, noisy_action, release_short
from robot_data.experts.primitives import collision_boxes
from robot_data.experts.skills import OpenDrawer, PushObject, TurnKnob
from robot_data.experts.spatial import SpatialExpert

K = PerturbationKind
SKILL_KINDS = (K.NEAR_MISS, K.EARLY_RELEASE, K.OFFSET_TARGET)  # what every skill supports
HOLD_STEPS = 12  # a knob stopped short is held still this long before letting go

if TYPE_CHECKING:  # the mixins' super() calls resolve to these skills at run time
    _Item = ObjectExpert
    _Knob = TurnKnob
    _Drawer = OpenDrawer
    _Push = PushObject
    _Close = CloseDrawer
    _Insert = InsertPlace
else:
    _Item = _Knob = _Drawer = _Push = _Close = _Insert = object


def _heading(rng: np.random.Generator) -> np.ndarray:
    angle = float(rng.uniform(0.0, 2.0 * np.pi))
    return np.array([np.cos(angle), np.sin(angle), 0.0])


def articulation_threshold(raw_env, name: str, key: str) -> float:
    """|the qpos at which LIBERO's predicate flips| for the fixture whose name prefixes ``name``.

    ``key``: "default_turnon_ranges" (a knob, on above the range's minimum) or "default_open_ranges" (a
    drawer, open beyond the range end nearer closed). ValueError when no fixture carries the range.
    """
    inner = getattr(raw_env, "env", raw_env)
    fixtures = {**getattr(inner, "fixtures_dict", {}), **getattr(inner, "objects_dict", {})}
    for fixture_name, fixture in fixtures.items():
        ranges = getattr(fixture, "object_properties", {}).get("articulation", {}).get(key)
        if name.startswith(fixture_name) and ranges:
            return float(min(abs(v) for v in ranges))
    raise ValueError(f"no fixture prefixing {name!r} has an articulation range {key!r}")


def target_corners(raw_env, sim, name: str) -> np.ndarray:
    """Corners [K, 3] of a placement target: an object's collision boxes, else those of the fixture holding
    the site ``name`` (cabinet, stove), else a bare table region's box (half sizes size[:2] in the site frame,
    as LIBERO's under() reads them). Empty when none applies."""
    corners = collision_boxes(sim, include=(f"{name}_",)).corners()
    sites = getattr(getattr(raw_env, "env", raw_env), "object_sites_dict", {}) if raw_env is not None else {}
    site = sites.get(name)
    if len(corners) or site is None:
        return corners
    if site.parent_name:
        return collision_boxes(sim, include=(f"{site.parent_name}_",)).corners()
    s = sim.model.site_name2id(name)
    rot = np.array(sim.data.site_xmat[s]).reshape(3, 3)
    half = np.asarray(site.size, dtype=np.float64)[:2]
    local = np.array([[sx * half[0], sy * half[1], 0.0] for sx in (-1, 1) for sy in (-1, 1)])
    return np.array(sim.data.site_xpos[s]) + local @ rot


def reach(corners: np.ndarray, xy: np.ndarray, direction: np.ndarray) -> float:
    """How far ``corners`` [K, 3] reach from ``xy`` [2] along the unit ``direction`` [2] (m; 0 when empty)."""
    return float(((corners[:, :2] - xy) @ direction).max()) if len(corners) else 0.0


class _Perturbed:
    """What every perturbed skill shares: the perturbation, its rng and its info for the episode record."""

    perturbation: Perturbation
    perturbation_info: dict[str, Any]
    rng: np.random.Generator

    def _init_perturbation(self, perturbation: Perturbation, rng: np.random.Generator) -> None:
        self.perturbation, self.rng = perturbation, rng
        self.perturbation_info = {}

    @property
    def perturbation_label(self) -> str:
        return self.perturbation.label

    def _stop_share(self) -> float:
        """Share of the way to the predicate's threshold at which an articulation stops (early_release,
        offset_target); 1 for the other kinds."""
        p = self.perturbation
        if p.kind == K.EARLY_RELEASE:
            return 1.0 - p.release_fraction * p.strength
        if p.kind == K.OFFSET_TARGET:
            return 1.0 - p.short_of_goal * p.strength
        return 1.0


class ItemPerturbation(_Perturbed, _Item):
    """``ObjectExpert`` (and the Goal / LIBERO-10 item placements built on it) with one defect."""

    def _init_perturbation(self, perturbation: Perturbation, rng: np.random.Generator) -> None:
        super()._init_perturbation(perturbation, rng)
        if perturbation.kind == K.NEAR_MISS:
            self.cfg = dataclasses.replace(self.cfg, max_regrasps=0)  # a retry would fix the bad grasp
        self._near_miss = np.zeros(3)
        self._place_offset = np.zeros(3)
        self._noise = np.zeros(6)

    def reset(self, raw_env, raw_obs: dict) -> None:
        p, s = self.perturbation, self.perturbation.strength
        self._noise = np.zeros(6)
        self._carry_start: float | None = None
        self._release_min = p.release_min_dist
        # Drawn up front, per kind, so the rng stream does not depend on timing.
        self._near_miss = p.grasp_miss(self.rng) * _heading(self.rng) if p.kind == K.NEAR_MISS else np.zeros(3)
        self._place_dir = _heading(self.rng) if p.kind == K.OFFSET_TARGET else np.zeros(3)
        self._place_offset = np.zeros(3)
        self.perturbation_info = {"perturbation": p.label, "strength": float(s)}
        if p.kind == K.NEAR_MISS:
            self.perturbation_info["grasp_offset_m"] = self._near_miss[:2].round(4).tolist()
        super().reset(raw_env, raw_obs)
        if p.kind == K.OFFSET_TARGET:
            self.perturbation_info["place_offset_m"] = self._place_offset[:2].round(4).tolist()

    def _grasp_offset(self) -> np.ndarray:
        return super()._grasp_offset() + self._near_miss

    def _edge(self, xy: np.ndarray, direction: np.ndarray) -> float:
        """How far the target reaches from ``xy`` along the unit ``direction`` [2] (m; 0 without geometry)."""
        # ItemPlace keeps the raw env (its target may be a fixture site); the Object expert's is the basket.
        return reach(target_corners(getattr(self, "_env", None), self._sim, self.container), xy, direction)

    def _drop_target(self, sim) -> tuple[np.ndarray, float, float]:
        self._sim = sim
        xy, floor, rim = super()._drop_target(sim)
        p = self.perturbation
        if p.kind == K.OFFSET_TARGET:
            # Onto the target's edge: 6 cm inside the basket (~10 cm to its rim) or the cabinet top would
            # still succeed, so the drop point moves by the target's own extent along the drawn direction
            # (the item lands on the rim or edge and falls either way), at least by place_offset.
            edge = self._edge(xy, self._place_dir[:2])
            self._place_offset = max(edge, p.place_offset) * p.strength * self._place_dir
        return xy + self._place_offset[:2], floor, rim

    def _policy(self, obs: dict) -> np.ndarray:
        p = self.perturbation
        if p.kind == K.EARLY_RELEASE and self._phase == "carry" and p.strength > 0:
            rel = np.asarray(obs[f"{self.item}_pos"])[:2] - self._drop_xy
            dist = float(np.linalg.norm(rel))
            if self._carry_start is None:
                self._carry_start = dist
                # As for the bowl: never over the target, where a dropped item can still land right. A big
                # target (basket, cabinet top) is cleared by its own extent towards the item, plus 3 cm.
                reach = self._edge(self._drop_xy, rel / max(dist, 1e-9)) + 0.03
                self._release_min = max(p.release_min_dist, reach)
            release_short(self, dist, self._release_min, p)
        return super()._policy(obs)

    def act(self, raw_obs: dict) -> np.ndarray:
        self._noise, action = noisy_action(super().act(raw_obs), self._noise, self.perturbation, self.rng)
        return action


class InsertPerturbation(ItemPerturbation, _Insert):
    """``InsertPlace`` (the mug into the microwave) with one defect. Its drop point is the end of a slide
    and a push through the enclosure's open side, not a point to drop onto, so ``offset_target`` is the
    slide and push that stop early: the item is slid in ``place_offset`` (x strength) less far than the
    clean skill slides it, set down there, part way through the opening, and not pushed in to the region's
    centre (a near-success)."""

    def reset(self, raw_env, raw_obs: dict) -> None:
        p = self.perturbation
        self._slide_short = p.place_offset * p.strength if p.kind == K.OFFSET_TARGET else 0.0
        super().reset(raw_env, raw_obs)
        if p.kind == K.OFFSET_TARGET:
            self.perturbation_info.pop("place_offset_m", None)
            self.perturbation_info["slide_short_m"] = round(self._slide_short, 4)

    def _hand_limit(self, obs: dict) -> float:
        return super()._hand_limit(obs) - self._slide_short

    def _drop_target(self, sim) -> tuple[np.ndarray, float, float]:
        self._sim = sim
        return super(ItemPerturbation, self)._drop_target(sim)  # no edge offset: the defect is the push's

    def _policy(self, obs: dict) -> np.ndarray:
        if self.perturbation.kind == K.OFFSET_TARGET and self._phase == "line_up":
            self.perturbation_info["outside_opening_m"] = round(self._open.front - self._outermost(), 4)
            self._goto("retreat")
        return super()._policy(obs)


class KnobPerturbation(_Perturbed, _Knob):
    """``TurnKnob`` gripping off the knob's axis, or letting go before the stove counts as on."""

    def reset(self, raw_env, raw_obs: dict) -> None:
        p = self.perturbation
        miss = p.grasp_miss(self.rng) * _heading(self.rng) if p.kind == K.NEAR_MISS else np.zeros(3)
        super().reset(raw_env, raw_obs)
        self.perturbation_info = {"perturbation": p.label, "strength": float(p.strength)}
        self._point = self._point + miss
        if p.kind == K.NEAR_MISS:
            self.perturbation_info["grasp_offset_m"] = miss[:2].round(4).tolist()
        if p.kind in (K.EARLY_RELEASE, K.OFFSET_TARGET):
            stop = self._stop_share() * articulation_threshold(raw_env, self.fixture, "default_turnon_ranges")
            # The clean twist aims 1 rad past the grasp; here the wrist aims at the stop angle, slower.
            self.cfg = dataclasses.replace(self.cfg, knob_target=stop, knob_turn=stop)
            self.perturbation_info["stop_rad"] = round(stop, 4)
        self._held = p.kind not in (K.EARLY_RELEASE, K.OFFSET_TARGET)
        self._r_hold, self._p_hold = np.eye(3), np.zeros(3)

    def _policy(self, obs: dict) -> np.ndarray:
        if self._phase == "hold":
            if self._t >= HOLD_STEPS:
                self._goto("release")
            else:
                return self._servo(obs, self._p_hold, self._r_hold, 1.0)
        action = super()._policy(obs)
        if self._phase == "release" and not self._held:
            # The knob joint is barely damped: let go while it turns and it coasts on past "on" (measured:
            # 0.27 -> 0.47 rad and rising). Hold it still first, so it stays where the turn stopped.
            self._held, self._r_hold = True, self._site_rotation(obs)
            self._p_hold = np.asarray(obs["robot0_eef_pos"], dtype=np.float64)
            self._goto("hold")
            return self._servo(obs, self._p_hold, self._r_hold, 1.0)
        return action


class DrawerPerturbation(_Perturbed, _Drawer):
    """``OpenDrawer`` closing its fingers in front of the handle bar, or letting go before the drawer counts
    as open."""

    def reset(self, raw_env, raw_obs: dict) -> None:
        p = self.perturbation
        # Out along the pull axis: the fingers close on air in front of the bar. (Up or down they would
        # catch the neighbouring drawers' handles, which is another task's contact.)
        miss = p.grasp_miss(self.rng) if p.kind == K.NEAR_MISS else 0.0
        if p.kind == K.NEAR_MISS:
            self.cfg = dataclasses.replace(self.cfg, drawer_retries=0)
        super().reset(raw_env, raw_obs)
        self.perturbation_info = {"perturbation": p.label, "strength": float(p.strength)}
        self._handle = self._handle + self._u * miss
        if p.kind == K.NEAR_MISS:
            self.perturbation_info["grasp_offset_m"] = round(miss, 4)
        if p.kind in (K.EARLY_RELEASE, K.OFFSET_TARGET):
            stop = self._stop_share() * articulation_threshold(raw_env, self.joint, "default_open_ranges")
            self._target_q = self._sign * stop  # pull until the slide has moved `stop` towards open
            self.perturbation_info["stop_m"] = round(stop, 4)


class PushPerturbation(_Perturbed, _Push):
    """``PushObject`` off the object's centre line, stopped half way, or aimed beside the region."""

    def reset(self, raw_env, raw_obs: dict) -> None:
        p, s = self.perturbation, self.perturbation.strength
        self._lateral = p.grasp_miss(self.rng) * float(self.rng.choice([-1.0, 1.0])) if p.kind == K.NEAR_MISS else 0.0
        goal = np.asarray(self.goal_xy, dtype=np.float64)
        shift = np.zeros(2)
        if p.kind == K.OFFSET_TARGET:
            # Short along the push: the clean goal is 2 cm inside the region's near edge, and a region is
            # wide enough that a sideways miss of a few cm still counts.
            back = np.asarray(raw_obs[f"{self.obj}_pos"], dtype=np.float64)[:2] - goal
            shift = p.place_offset * s * back / max(float(np.linalg.norm(back)), 1e-9)
        self.goal_xy = goal + shift
        self._push_start: float | None = None
        super().reset(raw_env, raw_obs)
        self.perturbation_info = {"perturbation": p.label, "strength": float(s)}
        if p.kind == K.NEAR_MISS:
            self.perturbation_info["lateral_offset_m"] = round(self._lateral, 4)
        if p.kind == K.OFFSET_TARGET:
            self.perturbation_info["goal_offset_m"] = shift.round(4).tolist()

    def _lateral_offset(self) -> float:
        return self._lateral

    def _policy(self, obs: dict) -> np.ndarray:
        p = self.perturbation
        if p.kind == K.EARLY_RELEASE and self._phase == "push":
            dist = float(np.linalg.norm(np.asarray(obs[f"{self.obj}_pos"])[:2] - self.goal_xy))
            if self._push_start is None:
                self._push_start = dist
            if dist <= self._push_start * self._stop_share():
                self.perturbation_info["stop_dist_m"] = round(dist, 4)
                self._goto("retreat")
        return super()._policy(obs)


class ClosePerturbation(_Perturbed, _Close):
    """``CloseDrawer`` or ``CloseDoor`` backing off before the fixture is shut: the push stops once it has
    closed ``_stop_share()`` of the way from where the fixture started (m of slide, or rad of swing)."""

    def reset(self, raw_env, raw_obs: dict) -> None:
        super().reset(raw_env, raw_obs)
        self._open_at_start = self._remaining()
        p = self.perturbation
        self.perturbation_info = {"perturbation": p.label, "strength": float(p.strength),
                                  "open_at_start": round(self._open_at_start, 4)}

    def _policy(self, obs: dict) -> np.ndarray:
        left = self._remaining()  # how far from shut: the drawer's slide (m) or the door's swing (rad)
        if self._phase == "push" and left <= (1.0 - self._stop_share()) * self._open_at_start:
            self.perturbation_info["stopped_open"] = round(left, 4)
            self._goto("back_off")
        return super()._policy(obs)


class BowlSkillPerturbation(BowlPerturbation):
    """``BowlPerturbation`` with the skills' ``_init_perturbation(perturbation, rng)`` signature, for the Goal /
    LIBERO-10 bowl placements (Spatial's ``PerturbedExpert`` keeps its plate offset as it was)."""

    def _init_perturbation(self, perturbation: Perturbation, rng: np.random.Generator | None = None) -> None:
        if rng is not None:
            self.rng = rng
        super()._init_perturbation(perturbation)

    def reset(self, raw_env, raw_obs: dict) -> None:
        super().reset(raw_env, raw_obs)
        if self.perturbation.kind == K.OFFSET_TARGET:
            # As for items: 6 cm off the centre of a stove or cabinet top still succeeds, so the bowl goes
            # onto the target's edge (the fixture's extent along the drawn direction), at least 6 cm off.
            size = float(np.linalg.norm(self._place_offset))
            direction = self._place_offset[:2] / max(size, 1e-9)
            point = super()._place_point(raw_obs)[:2] - self._place_offset[:2]  # the clean place point
            edge = reach(target_corners(raw_env, raw_env.sim, self.plate), point, direction)
            self._place_offset = self._place_offset * max(1.0, edge * self.perturbation.strength / max(size, 1e-9))
            self.perturbation_info["place_offset_m"] = self._place_offset[:2].round(4).tolist()


# Skill base class -> (its mixin, the kinds it supports), most specific first.
MIXINS: tuple[tuple[type, type, tuple[PerturbationKind, ...]], ...] = (
    (SpatialExpert, BowlSkillPerturbation, (*SKILL_KINDS, K.WRONG_AZIMUTH)),
    (InsertPlace, InsertPerturbation, SKILL_KINDS),
    (ObjectExpert, ItemPerturbation, SKILL_KINDS),
    (TurnKnob, KnobPerturbation, SKILL_KINDS),
    (OpenDrawer, DrawerPerturbation, SKILL_KINDS),
    (PushObject, PushPerturbation, SKILL_KINDS),
    (CloseDrawer, ClosePerturbation, (K.EARLY_RELEASE, K.OFFSET_TARGET)),
    (CloseDoor, ClosePerturbation, (K.EARLY_RELEASE, K.OFFSET_TARGET)),
)
_CLASSES: dict[type, type] = {}


def supports(skill: object, kind: PerturbationKind | str) -> bool:
    """Whether ``perturb`` can give ``skill`` a defect of ``kind``."""
    return any(isinstance(skill, base) and PerturbationKind(kind) in kinds for base, _, kinds in MIXINS)


def perturb(skill: Any, perturbation: Perturbation, rng: np.random.Generator) -> Any:
    """Turn ``skill`` (built, not yet reset) into its perturbed variant in place; returns it."""
    for base, mixin, kinds in MIXINS:
        if isinstance(skill, base):
            if perturbation.kind not in kinds:
                raise ValueError(f"perturbation: {type(skill).__name__} has no {perturbation.label!r} defect")
            cls = type(skill)
            if cls not in _CLASSES:
                _CLASSES[cls] = type(f"Perturbed{cls.__name__}", (mixin, cls), {})
            perturbed: Any = skill
            perturbed.__class__ = _CLASSES[cls]
            perturbed._init_perturbation(perturbation, rng)
            return perturbed
    raise ValueError(f"perturbation: no perturbed variant of {type(skill).__name__}")


__all__ = ["MIXINS", "SKILL_KINDS", "articulation_threshold", "perturb", "supports"]
