"""Scripted expert for the LIBERO-10 (LIBERO-Long) tasks, on privileged state.

LIBERO-10 goals are conjunctions of the goals LIBERO-Object and LIBERO-Goal already script
(items into the basket, the moka pot onto the stove, the stove knob, a bowl into a drawer), so
``LongExpert`` is a ``GoalExpert`` with a different planner (``plan_long_skills``):

* ``In(item, <object>_contain_region)`` of an observed container (the basket) becomes a place
  into the object itself: the Object expert's drop already aims at its containment region.
* ``Close(<drawer region>)`` after putting something into that drawer becomes a ``close_drawer``
  step at the end (the fingertips push the drawer's front panel along the slide's axis, read
  from the simulator); a drawer that is never opened is already closed, so its Close() needs no
  skill. A drawer that starts open (task 3's bottom drawer) is not pulled again (``OpenDrawer``).
* ``Close(<fixture with a hinged door>)`` (the microwave) becomes a ``close_door`` step at the
  end: the fingertips push the door's outer face along its swing (``CloseDoor``).
* ``Turnon`` goes first: the knob twist is short and the arm then does not sweep past objects
  it has just placed on the stove.
* Several items on one fixture site (both moka pots on the stove) get side-by-side slots.

Placement variants: the moka pot is grasped by its handle (``HandlePlace``, its top is wider
than the gripper) and carried over the other items; a compartment of a container (the caddy's
back one) is a drop into the container at that compartment's site (``CompartmentPlace``); a
bare table region (right of the plate) is a set-down on the table surface at its centre; a
region inside a fixture with a door and a roof (the microwave) is reached through its open
side (``InsertPlace``: in by the handle as far as the hand clears the roof, then pushed deeper).

Goals no skill covers raise ``UnsupportedGoal`` naming the task at ``reset``. The closing skills live in
``robot_data/experts/closing.py``, the placements beyond the Goal expert's in ``robot_data/experts/long_places.py``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import partial

import numpy as np

from robot_data.experts.closing import CloseDoor, CloseDoorConfig, CloseDrawer, CloseDrawerConfig, hinged_doors
from robot_data.experts.goal import (
    BowlPlace,
    GoalExpert,
    GoalExpertConfig,
    ItemPlace,
    Locate,
    UnsupportedGoal,
    _problem,
    plan_skills,
    site_surface,
    too_wide_for_top_grasp,
)
from robot_data.experts.long_places import CompartmentPlace, HandlePlace, InsertConfig, InsertPlace
from robot_data.experts.primitives import collision_boxes, surface_height

CONTAIN = "_contain_region"




def plan_long_skills(
    goal_state: list[list[str]],
    language: str,
    drawers: dict[str, str],
    observed: set[str],
    slot: float = 0.08,
    doors: dict[str, str] | None = None,
) -> list[tuple[str, ...]]:
    """Skill sequence for a LIBERO-10 goal: [(skill, *arguments)].

    ``observed``: names of the objects with a pose in the observation (containers among them);
    ``slot``: spacing (m) of items placed on the same site, given as extra (dx, dy) arguments;
    ``doors``: hinged fixtures (the microwave) -> their door's hinge joint.
    """
    doors = doors or {}
    goals: list[list[str]] = []
    closes: list[str] = []
    filled: set[str] = set()
    for pred in goal_state:
        name, args = pred[0].lower(), list(pred[1:])
        if name == "close" and len(args) == 1:
            closes.append(args[0])
            continue
        if name == "in" and len(args) == 2:
            if args[1] in drawers:
                filled.add(args[1])
            elif args[1].endswith(CONTAIN) and args[1][: -len(CONTAIN)] in observed:
                args[1] = args[1][: -len(CONTAIN)]
        goals.append([name, *args])
    # Knob first (see the module docstring); otherwise the BDDL order.
    goals.sort(key=lambda g: g[0] != "turnon")
    plan = plan_skills(goals, language, drawers)
    # Several items on one site (both moka pots on the stove): side by side along x, far one first.
    # (An object container such as the basket has room enough: its own drop point serves all.)
    shared = [
        i for i, st in enumerate(plan)
        if st[0] == "place" and st[2] not in observed and sum(p[2:3] == st[2:3] for p in plan) > 1
    ]
    for k, i in enumerate(shared):
        dx = slot * ((len(shared) - 1) / 2 - k)
        plan[i] = (*plan[i], str(dx), "0.0")
    for region in closes:
        if region in doors:
            # Shut last: whatever goes inside (the mug into the microwave) has to pass the open door first.
            plan.append(("close_door", doors[region]))
            continue
        if region not in drawers:
            raise UnsupportedGoal(f"no scripted skill for the goal predicate ['Close', {region!r}]")
        if region in filled:  # only a drawer this plan opens needs closing
            plan.append(("close_drawer", drawers[region]))
    return plan


@dataclass
class LongExpertConfig(GoalExpertConfig):
    """The Goal expert's config plus the drawer push."""

    close: CloseDrawerConfig = None  # type: ignore[assignment]
    door: CloseDoorConfig = None  # type: ignore[assignment]
    insert: InsertConfig = None  # type: ignore[assignment]
    handle_items: tuple[str, ...] = ("moka_pot",)  # items grasped by their handle (HandlePlace)
    handle_reach: float = 0.05  # a handle's boxes lie this far or more from the item's origin
    carry_margin: float = 0.02  # a carried pot's bottom above the other items' tops

    def __post_init__(self) -> None:
        if self.close is None:
            self.close = CloseDrawerConfig()
        if self.door is None:
            self.door = CloseDoorConfig()
        if self.insert is None:
            self.insert = InsertConfig()


class LongExpert(GoalExpert):
    """``GoalExpert`` driven by ``plan_long_skills``, with a ``close_drawer`` skill."""

    suite = "libero_10"

    def __init__(self, config: LongExpertConfig | None = None, rng: np.random.Generator | None = None):
        super().__init__(config or LongExpertConfig(), rng)
        self._observed: set[str] = set()
        self._doors: dict[str, str] = {}

    def reset(self, raw_env, raw_obs: dict) -> None:
        self._observed = {k[: -len("_pos")] for k in raw_obs if k.endswith("_pos") and not k.startswith("robot0")}
        self._doors = hinged_doors(raw_env)
        super().reset(raw_env, raw_obs)

    def _plan(self, goal_state: list[list[str]], language: str, drawers: dict[str, str]) -> list[tuple[str, ...]]:
        return plan_long_skills(goal_state, language, drawers, self._observed, doors=self._doors)

    def _build(self, raw_env, raw_obs: dict, step: tuple[str, ...]):
        cfg = self.cfg
        assert isinstance(cfg, LongExpertConfig)
        if step[0] == "close_drawer":
            return CloseDrawer(step[1], cfg.skill, cfg.close)
        if step[0] == "close_door":
            return CloseDoor(step[1], cfg.skill, cfg.door)
        if step[0] != "place":
            return super()._build(raw_env, raw_obs, step)
        obj, target = step[1], step[2]
        locate: Locate | None = None
        parent: str | None = "object"
        if f"{target}_pos" not in raw_obs:
            # A fixture site (the stove's cook region) or a bare table region (no parent body).
            parent = getattr(_problem(raw_env).object_sites_dict.get(target), "parent_name", None)
            if parent and target.endswith(CONTAIN) and not obj.startswith(cfg.handle_items):
                return CompartmentPlace(obj, parent, target, cfg.item)  # one compartment of a container
            if parent and parent in self._doors:
                # Inside a fixture with a door (the microwave): in through its open side, under its roof.
                item_cfg = replace(cfg.item, rim_clearance=cfg.item_rim_clearance)
                return InsertPlace(obj, target, parent, item_cfg, cfg.insert)
            base: Locate = partial(site_surface, site=target, footprint=cfg.footprint) if parent else partial(
                region_point, site=target
            )
            base(raw_env)  # fail now, at reset, on a target no skill can reach
            offset = np.array([float(v) for v in step[3:5]]) if len(step) > 3 else np.zeros(2)
            locate = partial(_shifted, base=base, offset=offset)
        handle = obj.startswith(cfg.handle_items)
        if locate is None and not handle:
            return super()._build(raw_env, raw_obs, step[:3])
        if not handle and too_wide_for_top_grasp(raw_env.sim, obj, cfg.item):
            return BowlPlace(obj, target, locate, cfg.bowl, cfg.bowl_carry)
        # As GoalExpert sets items down on a fixture: a slight press (contact is part of On()).
        item_cfg = cfg.item if locate is None else replace(
            cfg.item, rim_clearance=cfg.item_rim_clearance, drop_height=cfg.item_press
        )
        if handle or not parent:
            # A tall pot, or an item going to a bare table spot, sweeps the other items over when
            # carried low: carry its bottom over all of them.
            others = collision_boxes(raw_env.sim, include=tuple(f"{n}_" for n in self._observed - {obj, target}))
            top = float(others.corners()[:, 2].max()) if len(others) else 0.0
            floor = float(locate(raw_env)[2]) if locate is not None else float(np.asarray(raw_obs[f"{target}_pos"])[2])
            clearance = max(item_cfg.rim_clearance, top + cfg.carry_margin - floor)
            item_cfg = replace(item_cfg, rim_clearance=clearance)
        if handle:
            return HandlePlace(obj, target, locate, item_cfg, cfg.handle_reach)
        return ItemPlace(obj, target, locate, item_cfg)


def region_point(raw_env, site: str, reach: float = 0.2) -> np.ndarray:
    """Support point [3] of a bare table region site: its centre, on the table surface there.

    The site itself sits a few cm under the table top; the surface is the highest static
    (fixture) box under the centre, within ``reach`` of the site's height.
    """
    sim, inner = raw_env.sim, _problem(raw_env)
    s = sim.model.site_name2id(site)
    centre = np.array(sim.data.site_xpos[s], dtype=np.float64)
    movable = tuple(f"{name}_" for name in getattr(inner, "objects_dict", {}))
    boxes = collision_boxes(sim, exclude=movable)
    floor = surface_height(boxes, centre[:2], centre[2] + reach, centre[2] - reach)
    return np.array([centre[0], centre[1], floor])


def _shifted(raw_env, base: Locate, offset: np.ndarray) -> np.ndarray:
    """``base``'s support point moved by ``offset`` [2] in xy (a slot for one of several items)."""
    point = np.asarray(base(raw_env), dtype=np.float64).copy()
    point[:2] += offset
    return point
