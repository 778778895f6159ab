"""Scripted expert for the LIBERO-Goal tasks (one kitchen scene, ten goals), on privileged state.

The goal predicates of the task's BDDL (``parsed_problem["goal_state"]``) pick a short sequence
of skills (``plan_skills``), each a closed-loop state machine with the expert interface:

* ``place``: pick an object and put it on / in a target. A dish too wide for the open gripper
  (the akita bowl) is pinched by its rim (``SpatialExpert``'s grasp planner); compact items
  (cream cheese, wine bottle) get a top grasp (``ObjectExpert``). The target is an observed
  object (plate, bowl) or a fixture site (stove cook region, cabinet top, the wine rack's
  tilted plank), whose support point comes from the fixture's collision boxes and the site's
  frame (LIBERO's under() band).
* ``open_drawer``: pinch the drawer's handle bar with a horizontal gripper and pull (skills.py).
  Putting something in a drawer (``place_in_drawer``) opens it first; an object the opened
  drawer would crowd is pushed clear beforehand (``clear``).
* ``turn_knob``: grasp the stove knob on its hinge axis and twist (skills.py).
* ``push``: push an object along the table to a region (skills.py); chosen when the
  instruction says "push", since the goal predicate alone (On) reads like a placement.

Goals no skill covers raise ``UnsupportedGoal`` naming the task at ``reset``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import partial

import numpy as np

from robot_data.experts.object import ObjectExpert, ObjectExpertConfig
from robot_data.experts.primitives import collision_boxes, container_drop, plan_top_grasp, surface_height
from robot_data.experts.skills import OpenDrawer, PushObject, SkillConfig, TurnKnob, drawer_already_open, slide_joint
from robot_data.experts.spatial import ExpertConfig, SpatialExpert

UNDER_BAND = 0.10  # height band above a site's surface in which LIBERO's under() holds (m)
GOAL_SKILLS = ("place", "place_in_drawer", "open_drawer", "turn_knob", "push", "clear")


class UnsupportedGoal(NotImplementedError):
    """The task's goal needs a skill this expert does not script (yet)."""


@dataclass
class GoalExpertConfig:
    """Per-skill configs plus the carry margins over raised targets (m)."""

    bowl: ExpertConfig = field(default_factory=ExpertConfig)
    item: ObjectExpertConfig = field(default_factory=lambda: ObjectExpertConfig(drop_height=0.012))
    skill: SkillConfig = field(default_factory=SkillConfig)
    bowl_carry: float = 0.12  # bowl grip site above a target surface while carrying (bowl is ~5 cm tall)
    item_rim_clearance: float = 0.02  # item bottom above a flat target surface while carrying
    item_press: float = -0.01  # item bottom target below a fixture's surface at release (stalls on contact)
    drawer_crowd: float = 0.12  # an object this close to an open drawer's footprint is pushed away first
    clear_push: float = 0.06  # ... by this much along the drawer's opening direction
    drawer_margin: float = 0.015  # objects in an opening drawer's path end up this far beyond its front
    region_margin: float = 0.02  # a pushed object stops this far inside the target region's edge
    footprint: float = 0.015  # radius of an item's base, for the support height on a tilted fixture
    drawer_clearance: float = 0.068  # bowl centre out from the cabinet face in an opened drawer (radius 5.4 cm)


def plan_skills(goal_state: list[list[str]], language: str, drawers: dict[str, str]) -> list[tuple[str, ...]]:
    """Skill sequence for a conjunction of BDDL goal predicates: [(skill, *arguments)].

    ``goal_state`` as parsed by LIBERO, e.g. [["on", "akita_black_bowl_1", "plate_1"]];
    ``drawers`` maps drawer region sites to their slide joints. Putting something in a drawer
    opens it first. UnsupportedGoal for predicates without a skill.
    """
    plan: list[tuple[str, ...]] = []
    for pred in goal_state:
        name, args = pred[0].lower(), tuple(pred[1:])
        if name == "open" and len(args) == 1 and args[0] in drawers:
            plan.append(("open_drawer", drawers[args[0]]))
        elif name == "in" and len(args) == 2 and args[1] in drawers:
            plan += [("open_drawer", drawers[args[1]]), ("place_in_drawer", *args)]
        elif name == "turnon" and len(args) == 1:
            plan.append(("turn_knob", args[0]))
        elif name == "on" and len(args) == 2:
            plan.append(("push" if "push" in language.lower().split() else "place", *args))
        elif name == "in" and len(args) == 2:
            plan.append(("place", *args))
        else:
            raise UnsupportedGoal(f"no scripted skill for the goal predicate {pred}")
    return plan


Locate = Callable[[object], np.ndarray]  # raw_env -> support point [3] of a target site


class BowlPlace(SpatialExpert):
    """Rim-pinch the bowl (SpatialExpert) and set it down on ``target``: an object or a site.

    ``locate`` finds a site target's support point when the skill starts (a drawer has only
    just been opened then); None means the target is an observed object (its origin).
    """

    def __init__(self, bowl: str, target: str, locate: Locate | None, config: ExpertConfig, carry: float):
        super().__init__(config)
        self._names = (bowl, target)
        self._locate, self._carry = locate, carry
        self._target_point: np.ndarray | None = None

    def reset(self, raw_env, raw_obs: dict) -> None:
        if self._locate is not None:
            self._target_point = self._locate(raw_env)
            # Carry the bowl high enough to clear a raised target (cabinet top, drawer walls).
            lift = max(self.cfg.lift_z, float(self._target_point[2]) + self._carry)
            self.cfg = replace(self.cfg, lift_z=lift)
        super().reset(raw_env, raw_obs)

    def _objects(self, raw_env) -> tuple[str, str]:
        return self._names

    def _observed(self) -> tuple[str, ...]:
        return self._names if self._locate is None else self._names[:1]

    def _place_point(self, obs: dict) -> np.ndarray:
        if self._target_point is None:
            return super()._place_point(obs)
        return self._target_point


class ItemPlace(ObjectExpert):
    """Top-grasp an item (ObjectExpert) and drop it into / onto ``target``: an object or a site."""

    def __init__(self, item: str, target: str, locate: Locate | None, config: ObjectExpertConfig):
        super().__init__(config)
        self._names = (item, target)
        self._locate = locate  # None: the target is an object; drop into its collision boxes
        self._env = None
        self._drop_offset: np.ndarray | None = None

    def reset(self, raw_env, raw_obs: dict) -> None:
        self._env = raw_env
        super().reset(raw_env, raw_obs)
        key = f"{self.container}_pos"
        # A movable container (the bowl) may be nudged: the drop point follows its origin.
        self._drop_offset = self._drop_xy - np.asarray(raw_obs[key])[:2] if key in raw_obs else None

    def _policy(self, obs: dict) -> np.ndarray:
        if self._drop_offset is not None:
            self._drop_xy = np.asarray(obs[f"{self.container}_pos"])[:2] + self._drop_offset
        return super()._policy(obs)

    def _objects(self, raw_env) -> tuple[str, str]:
        return self._names

    def _drop_target(self, sim) -> tuple[np.ndarray, float, float]:
        if self._locate is None:
            return super()._drop_target(sim)
        point = self._locate(self._env)
        return point[:2], float(point[2]), float(point[2])  # a flat support: floor = rim


def _problem(raw_env):
    """The LIBERO env under the OffScreenRenderEnv/ControlEnv wrapper (it holds the parsed BDDL)."""
    inner = getattr(raw_env, "env", raw_env)
    if not hasattr(inner, "parsed_problem"):
        raise ValueError("raw_env carries no parsed BDDL problem; is this a LIBERO env?")
    return inner


def site_surface(raw_env, site: str, footprint: float = 0.0) -> np.ndarray:
    """Support point [3] of a fixture site: where an object's origin should end up on it.

    Level sites (cabinet top, stove): the site xy, on the top of the fixture's collision boxes
    there. Tilted sites (the wine rack's plank): LIBERO's under() measures along the site's
    third row, so the point moves into the middle of that band, then drops onto the plank's
    actual surface, the highest point under an object footprint of radius ``footprint``.
    """
    inner, sim = _problem(raw_env), raw_env.sim
    sites = getattr(inner, "object_sites_dict", {})
    if site not in sites or not sites[site].parent_name:
        raise UnsupportedGoal(f"{site!r} is not a fixture site")
    s = sim.model.site_name2id(site)
    up = np.array(sim.data.site_xmat[s]).reshape(3, 3)[2]  # LIBERO's under() measures along this row
    centre = np.array(sim.data.site_xpos[s])
    boxes = collision_boxes(sim, include=(f"{sites[site].parent_name}_",))
    if abs(up[2]) >= 0.95:
        floor, _ = container_drop(boxes, centre[:2])
        return np.array([centre[0], centre[1], floor])
    if up[2] <= 0:
        raise UnsupportedGoal(f"{site!r} faces downwards")
    size_z = float(np.asarray(sites[site].size, dtype=np.float64)[2])
    point = centre + up * (size_z + UNDER_BAND / 2)
    top = float(boxes.corners()[:, 2].max())
    angles = np.linspace(0, 2 * np.pi, 8, endpoint=False)
    ring = [point[:2] + footprint * np.array([np.cos(a), np.sin(a)]) for a in angles]
    floor = max(surface_height(boxes, xy, top, centre[2] - 0.1) for xy in [point[:2], *ring])
    return np.array([point[0], point[1], floor])


def drawer_surface(raw_env, site: str, clearance: float) -> np.ndarray:
    """Support point [3] in an opened drawer: on its floor, ``clearance`` out from the cabinet face.

    The part of the drawer still under the cabinet cannot be reached from above, so the point is
    measured along the opening direction from the cabinet's front (its static boxes), centred
    across the drawer on the region site.
    """
    inner, sim = _problem(raw_env), raw_env.sim
    sites = inner.object_sites_dict
    parent = sites[site].parent_name
    drawer_joints = {j for s in sites.values() if s.parent_name == parent for j in (s.joints or [])}
    bodies = tuple(sim.model.body_id2name(sim.model.jnt_bodyid[sim.model.joint_name2id(j)]) for j in drawer_joints)
    _, u, _ = slide_joint(sim, sites[site].joints[0])
    face = float((collision_boxes(sim, include=(f"{parent}_",), exclude=bodies).corners() @ u).max())
    centre = np.array(sim.data.site_xpos[sim.model.site_name2id(site)])
    point = centre + u * (face + clearance - float(centre @ u))
    body = sim.model.body_id2name(sim.model.jnt_bodyid[sim.model.joint_name2id(sites[site].joints[0])])
    floor, _ = container_drop(collision_boxes(sim, include=(body,)), point[:2])
    return np.array([point[0], point[1], floor])


def open_drawer_gap(sim, joint: str, xy: np.ndarray) -> tuple[float, np.ndarray]:
    """(distance [m] from ``xy`` to the drawer's footprint once fully open, opening direction [3])."""
    _, u, open_q = slide_joint(sim, joint)
    body = sim.model.body_id2name(sim.model.jnt_bodyid[sim.model.joint_name2id(joint)])
    q = float(sim.data.qpos[sim.model.jnt_qposadr[sim.model.joint_name2id(joint)]])
    corners = collision_boxes(sim, include=(body,)).corners()[:, :2] + u[:2] * abs(open_q - q)
    lo, hi = corners.min(axis=0), corners.max(axis=0)
    return float(np.linalg.norm(np.maximum(np.maximum(lo - xy, xy - hi), 0.0))), u


def drawer_obstruction(sim, joint: str, obj: str, margin: float, lifted: bool = False) -> tuple[float, np.ndarray]:
    """(push [m] along the opening direction that takes ``obj`` out of the drawer's path, direction [3]).

    The path is the drawer's swept volume from now to fully open; an object overlapping it
    across and in height must end up ``margin`` beyond the open drawer's front. ``lifted``: the
    object will be lifted past the drawer's height (it goes into the drawer), so any height
    counts. 0 when clear.
    """
    _, u, open_q = slide_joint(sim, joint)
    jid = sim.model.joint_name2id(joint)
    body = sim.model.body_id2name(sim.model.jnt_bodyid[jid])
    travel = abs(open_q - float(sim.data.qpos[sim.model.jnt_qposadr[jid]]))
    drawer = collision_boxes(sim, include=(body,)).corners()
    item = collision_boxes(sim, include=(f"{obj}_",)).corners()
    if len(item) == 0:
        return 0.0, u
    across = np.cross([0.0, 0.0, 1.0], u)
    overlap_across = item @ across
    d_across = drawer @ across
    if overlap_across.max() < d_across.min() - margin or overlap_across.min() > d_across.max() + margin:
        return 0.0, u
    if not lifted and (item[:, 2].max() < drawer[:, 2].min() or item[:, 2].min() > drawer[:, 2].max()):
        return 0.0, u
    if float((item @ u).mean()) < float((drawer @ u).max()):
        # Beside the drawer (LIBERO-10's wine bottle next to the open bottom drawer), not in front of it:
        # the front never reaches it, and pushing it out along the drawer would drag it past the drawer's side.
        return 0.0, u
    front = float((drawer @ u).max()) + travel
    return max(0.0, front + margin - float((item @ u).min())), u


class GoalExpert:
    """Runs the skills ``plan_skills`` picks for the episode's goal, one after another.

    ``reset(raw_env, raw_obs)`` once per episode after settling, then ``act(raw_obs)`` per step
    (same interface as ``ObjectExpert``). ``phase`` is "<skill>:<skill phase>".
    """

    @property
    def perturbation_label(self) -> str:
        return "none"  # the clean expert; perturbed variants override this
    suite = "libero_goal"  # named in UnsupportedGoal messages

    def __init__(self, config: GoalExpertConfig | None = None, rng: np.random.Generator | None = None):
        self.cfg = config or GoalExpertConfig()
        self.rng = rng if rng is not None else np.random.default_rng(0)
        self._skills: list = []
        self._names: list[str] = []
        self._i = 0

    @property
    def phase(self) -> str:
        if not self._skills:
            return "done"
        return f"{self._names[self._i]}:{self._skills[self._i].phase}"

    @property
    def regrasps(self) -> int:
        return int(sum(getattr(s, "regrasps", 0) for s in self._skills))

    def reset(self, raw_env, raw_obs: dict) -> None:
        inner = _problem(raw_env)
        problem = inner.parsed_problem
        language = " ".join(problem.get("language_instruction", []))
        try:
            sites = getattr(inner, "object_sites_dict", {})
            drawers = {name: site.joints[0] for name, site in sites.items() if getattr(site, "joints", None)}
            plan = self._clear_drawers(raw_env, raw_obs, self._plan(problem["goal_state"], language, drawers))
            self._skills = [self._build(raw_env, raw_obs, step) for step in plan]
        except UnsupportedGoal as err:
            raise UnsupportedGoal(f"{self.suite} task {language!r}: {err}") from None
        self._names = [step[0] for step in plan]
        self._env, self._i = raw_env, 0
        self._planned()
        self._skills[0].reset(raw_env, raw_obs)

    def _planned(self) -> None:
        """Called once the skills are built, before the first starts; a hook for perturbed experts."""

    def _plan(self, goal_state: list[list[str]], language: str, drawers: dict[str, str]) -> list[tuple[str, ...]]:
        """The skill sequence for the goal (a hook for experts of other suites)."""
        return plan_skills(goal_state, language, drawers)

    def _clear_drawers(self, raw_env, raw_obs: dict, plan: list[tuple[str, ...]]) -> list[tuple[str, ...]]:
        """Before opening a drawer, push away the objects it would hit or crowd ("clear" steps).

        Objects in the drawer's path (the plate in front of the middle drawer) block it and pull
        the handle out of the fingers: they move beyond the drawer's open front. The object that
        goes into the drawer is lifted, so it must clear the open front panel too; and the hand
        (~21 x 7 cm, reaching ~10 cm above the fingertips) finds no rim azimuth with room beside it.
        """
        out: list[tuple[str, ...]] = []
        sim = raw_env.sim
        names = sorted(k[: -len("_pos")] for k in raw_obs if k.endswith("_pos") and not k.startswith("robot0"))
        names = [n for n in names if "_to_" not in n]
        for i, step in enumerate(plan):
            if step[0] == "open_drawer":
                nxt = plan[i + 1] if i + 1 < len(plan) else ()
                cargo = nxt[1] if nxt and nxt[0] == "place_in_drawer" else None
                for name in names:
                    push, u = drawer_obstruction(sim, step[1], name, self.cfg.drawer_margin, lifted=name == cargo)
                    # The crowding rule is for the hand reaching past a drawer front it has just pulled out; a
                    # drawer that is already open (OpenDrawer leaves it) keeps its distance to the cargo.
                    if name == cargo and not drawer_already_open(sim, step[1], self._open_share()):
                        gap, _ = open_drawer_gap(sim, step[1], np.asarray(raw_obs[f"{name}_pos"])[:2])
                        push = max(push, self.cfg.clear_push if gap < self.cfg.drawer_crowd else 0.0)
                    if push > 0:
                        out.append(("clear", name, *(str(v) for v in u[:2] * push)))
            out.append(step)
        return out

    def _open_share(self) -> float:
        """Share of a drawer's travel at which ``OpenDrawer`` leaves it as it is (already open)."""
        return self.cfg.skill.drawer_min_open * self.cfg.skill.drawer_open_fraction

    def _build(self, raw_env, raw_obs: dict, step: tuple[str, ...]):
        cfg = self.cfg
        kind, args = step[0], step[1:]
        if kind == "open_drawer":
            return OpenDrawer(args[0], cfg.skill)
        if kind == "turn_knob":
            return TurnKnob(args[0], cfg.skill)
        if kind == "clear":
            goal = np.asarray(raw_obs[f"{args[0]}_pos"])[:2] + np.array([float(args[1]), float(args[2])])
            return PushObject(args[0], goal, cfg.skill)
        if kind == "push":
            obj_xy = np.asarray(raw_obs[f"{args[0]}_pos"])[:2]
            return PushObject(args[0], region_goal(raw_env, args[1], obj_xy, cfg.region_margin), cfg.skill)
        obj, target = args
        locate: Locate | None = None
        if kind == "place_in_drawer":
            locate = partial(drawer_surface, site=target, clearance=cfg.drawer_clearance)
        elif f"{target}_pos" not in raw_obs:
            site_surface(raw_env, target)  # fail now, at reset, on a target no skill can reach
            locate = partial(site_surface, site=target, footprint=cfg.footprint)
        if too_wide_for_top_grasp(raw_env.sim, obj, cfg.item):
            # A dish wider than the open gripper: pinch its rim (SpatialExpert's planner).
            return BowlPlace(obj, target, locate, cfg.bowl, cfg.bowl_carry)
        # On a fixture, set the item down with a slight press: contact is part of LIBERO's On().
        item_cfg = cfg.item if locate is None else replace(
            cfg.item, rim_clearance=cfg.item_rim_clearance, drop_height=cfg.item_press
        )
        return ItemPlace(obj, target, locate, item_cfg)

    def act(self, raw_obs: dict) -> np.ndarray:
        """One control step: raw LIBERO observation -> action float32 [7] in [-1, 1]."""
        if self._skills[self._i].phase == "done" and self._i + 1 < len(self._skills):
            self._i += 1
            self._skills[self._i].reset(self._env, raw_obs)  # plan from the scene as it is now
        return self._skills[self._i].act(raw_obs)


def too_wide_for_top_grasp(sim, obj: str, cfg: ObjectExpertConfig) -> bool:
    """Whether no horizontal section of ``obj`` near its top fits between the open fingers."""
    corners = collision_boxes(sim, include=(f"{obj}_",)).corners()
    if len(corners) == 0:
        raise UnsupportedGoal(f"no collision geoms found for {obj!r}")
    grasp = plan_top_grasp(corners, cfg.grasp_depth, cfg.floor_clearance, cfg.max_width)
    return grasp.widths[0] > cfg.max_width


def region_goal(raw_env, site: str, obj_xy: np.ndarray, margin: float) -> np.ndarray:
    """Push goal xy [2] in a table region site: its point nearest the object, ``margin`` inside.

    LIBERO's under() accepts the whole box (half sizes ``size[:2]`` in the site frame), so the
    shortest push stops just inside the near edge, short of whatever lies beyond the centre
    (the cream cheese gets wedged between the plate and the stove there).
    """
    inner, sim = _problem(raw_env), raw_env.sim
    s = sim.model.site_name2id(site)
    centre = np.array(sim.data.site_xpos[s][:2])
    rot = np.array(sim.data.site_xmat[s]).reshape(3, 3)[:2, :2]  # site frame (under() uses mat @ delta)
    sites = getattr(inner, "object_sites_dict", {})
    if site not in sites:
        return centre
    half = np.maximum(np.asarray(sites[site].size, dtype=np.float64)[:2] - margin, 0.0)
    local = np.clip(rot @ (np.asarray(obj_xy, dtype=np.float64) - centre), -half, half)
    return centre + rot.T @ local
