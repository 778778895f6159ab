"""Why a real pick-and-place episode failed, read from the simulator: did the object ever leave the table?

A success rate says how often; a researcher deciding what to fix (the grasp, the carry, the placement)
needs to know how the failures happened. For LIBERO tasks whose goal is one `(On A B)` or `(In A B)`
predicate (LIBERO-Spatial, -Object, most of -10, and the Goal tasks that move one object onto a fixture's
region), the env tracks A during the episode:

    object_lift_m       the highest A rose above its height at the start (metres)
    target_distance_m   horizontal distance from A to B's body at the end (metres)
    grasp_distance_m    horizontal distance from the grip site to A's origin when the policy first
                        commanded the gripper to close (nan before that): how far off the grasp was

and an episode's outcome is one of

    success             the task's goal predicate holds
    never lifted        A never rose LIFT_M: the grasp missed (or never happened)
    lifted, not placed  A rose, but the goal does not hold: dropped on the way, or put down off target

Other goals (open a drawer, turn on the stove) have no such object: both figures are nan and the
outcome is "failure". Privileged simulator state, so real envs only: imagination has no objects.
"""
from __future__ import annotations

import math

import numpy as np

LIFT_M = 0.03  # a bowl rocked by a missed grasp moves ~1 cm; a carried one rises 8+ cm
OUTCOMES = ("success", "never lifted", "lifted, not placed", "failure")
FIGURES = ("object_lift_m", "target_distance_m", "grasp_distance_m")  # the keys of `ObjectTracker.info`


def pick_place_objects(raw_env, raw_obs: dict) -> tuple[str, str] | None:
    """(moved object, target) of a task whose goal is a single on/in predicate, or None."""
    goal = raw_env.env.parsed_problem["goal_state"]
    if len(goal) != 1 or len(goal[0]) != 3 or goal[0][0].lower() not in ("on", "in"):
        return None
    obj, region = goal[0][1], goal[0][2]
    # An "in" goal names a region of the target ("basket_1_contain_region"): its body is the object of
    # interest the region belongs to.
    targets = [region] + [o for o in raw_env.obj_of_interest if region.startswith(o)]
    target = next((t for t in targets if f"{t}_pos" in raw_obs and t != obj), None)
    if target is None and region in raw_env.env.sim.model.site_names:
        # a fixture's region ("wooden_cabinet_1_top_side" on LIBERO-Goal): no observation of its own, a site
        target = region
    if f"{obj}_pos" not in raw_obs or target is None:
        return None
    return obj, target


def position(raw_env, raw_obs: dict, name: str) -> np.ndarray:
    """Where `name` (of `pick_place_objects`) is now, float64 [3] (m): its observation `<name>_pos`, or for a
    fixture's region, its site in the scene."""
    key = f"{name}_pos"
    if key in raw_obs:
        return np.asarray(raw_obs[key], np.float64)
    return np.array(raw_env.env.sim.data.get_site_xpos(name), np.float64)


class ObjectTracker:
    """Follows the goal's object through one episode: `reset` at the start, `update` after every step."""

    def __init__(self) -> None:
        self.objects: tuple[str, str] | None = None
        self._env = None  # the raw env of `reset`: a fixture's region is read from its scene
        self._z0 = 0.0
        self.lift = self.distance = self.grasp = math.nan

    def reset(self, raw_env, raw_obs: dict) -> None:
        self.objects = pick_place_objects(raw_env, raw_obs)
        self._env = raw_env
        self.lift = self.distance = self.grasp = math.nan
        if self.objects is not None:
            self._z0 = float(raw_obs[f"{self.objects[0]}_pos"][2])
            self.lift = 0.0
            self.update(raw_obs)

    def update(self, raw_obs: dict, action: np.ndarray | None = None) -> None:
        """After a step; `action` [7] is the one that led here (its last entry > 0 closes the gripper)."""
        if self.objects is None:
            return
        obj, target = (position(self._env, raw_obs, o) for o in self.objects)
        self.lift = max(self.lift, float(obj[2]) - self._z0)
        self.distance = float(np.linalg.norm(obj[:2] - target[:2]))
        if math.isnan(self.grasp) and action is not None and action[6] > 0:
            self.grasp = float(np.linalg.norm(np.asarray(raw_obs["robot0_eef_pos"])[:2] - obj[:2]))

    def info(self) -> dict[str, float]:
        return dict(zip(FIGURES, (self.lift, self.distance, self.grasp)))


def outcome(success: bool, object_lift_m: float) -> str:
    """One of OUTCOMES for an ended episode (object_lift_m nan: the task has no pick-and-place object)."""
    if success:
        return "success"
    if math.isnan(object_lift_m):
        return "failure"
    return "lifted, not placed" if object_lift_m >= LIFT_M else "never lifted"


def failure_counts(records: list[dict]) -> dict[str, int]:
    """How many failed records (with an "outcome") fall in each failure category; {} when none has one."""
    failed = [r["outcome"] for r in records if "outcome" in r and r["outcome"] != "success"]
    return {k: failed.count(k) for k in OUTCOMES[1:] if k in failed}


__all__ = ["FIGURES", "LIFT_M", "OUTCOMES", "ObjectTracker", "failure_counts", "outcome", "pick_place_objects"]
