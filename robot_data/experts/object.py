"""Scripted expert for the LIBERO-Object tasks: pick up a grocery item, place it in the basket.

Privileged state, like ``SpatialExpert``: object poses come from the raw observation, collision
geometry from ``raw_env.sim`` at reset. Same OSC_POSE action convention (see spatial.py).

Strategy: every item (cans, bottles, cartons, flat boxes) stands upright on the floor, so a
top-down grasp works for all of them. The grip height and the closing axis come from the item's
collision boxes (``plan_top_grasp``): a few cm below the top of tall items, as low as the
fingertips allow on flat ones, closing across the narrowest horizontal width. Among the yaws that
fit the open gripper, the one whose finger sweep keeps clear of the neighbouring items wins. The
item is then carried above the basket rim, lowered until its bottom is just above the basket
floor and released.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from robot_data.experts.primitives import (
    Boxes,
    collision_boxes,
    container_drop,
    finger_probes,
    grasp_rotation,
    hand_to_site,
    plan_top_grasp,
    quat_xyzw_to_mat,
)
from robot_data.experts.servo import ServoControl

OBJECT_PHASES = (
    "approach",  # fly above the grasp point (staying high), turn the closing axis
    "descend",  # straight down to the grip height
    "close",  # close until the fingers stop
    "lift",  # rise; verify the item came up, else regrasp
    "regrasp",  # open, rise, re-plan from the item's current pose
    "carry",  # fly the item above the basket centre, bottom above the rim
    "lower",  # lower until the item's bottom is just above the basket floor
    "release",  # open the gripper
    "retreat",  # move up
    "done",
)


@dataclass
class ObjectExpertConfig:
    """Geometry, gains and timings (lengths in m, angles in rad, durations in steps)."""

    grasp_depth: float = 0.035  # grip site below the item's top (tall items)
    floor_clearance: float = 0.013  # ... but at least this above its bottom (fingertips reach ~1.3 cm lower)
    max_width: float = 0.068  # widest item section the open gripper (7.6 cm) closes on with margin
    half_open: float = 0.05  # finger distance from the grip site when open (for clearance probes)
    hover: float = 0.04  # approach waypoint: fingertips this far above the item's top
    width_penalty: float = 1.0  # score per metre of width along the closing axis
    turn_penalty: float = 0.02  # score per rad of wrist turn from the current closing axis
    clearance_cap: float = 0.04  # probe distances beyond this do not improve a yaw
    rim_clearance: float = 0.04  # item bottom above the basket rim while carrying
    drop_height: float = 0.02  # item bottom above the basket floor at release
    pos_gain: float = 1.5
    rot_gain: float = 1.0
    approach_tol: float = 0.008  # xy error that ends the approach
    rot_tol: float = 0.1
    preclose_height: float = 0.006  # start closing this close to the grip height
    min_close_steps: int = 5
    max_close_steps: int = 16
    close_settle: float = 4e-4  # finger motion per step below which the grip is settled
    empty_grip: float = 0.002  # finger opening below which nothing is held
    stall_steps: int = 8
    lift_check_rise: float = 0.04  # gripper rise at which the lift is verified
    rise_ratio: float = 0.5  # the item must rise at least this fraction of the gripper rise
    slip_tol: float = 0.03  # item sagging this far below the grip while carrying = dropped
    carry_tol: float = 0.01  # xy error (item vs basket centre) that starts the lowering
    release_steps: int = 6
    max_regrasps: int = 3


class ObjectExpert(ServoControl):
    """Closed-loop state machine for one LIBERO-Object episode (interface of ``SpatialExpert``).

    ``reset(raw_env, raw_obs)`` once per episode after settling, then ``act(raw_obs)`` per step.
    Deterministic given the simulator state; ``rng`` is kept for interface parity.
    """

    @property
    def perturbation_label(self) -> str:
        return "none"  # the clean expert; perturbed variants override this

    def __init__(self, config: ObjectExpertConfig | None = None, rng: np.random.Generator | None = None):
        self.cfg = config or ObjectExpertConfig()
        self.rng = rng if rng is not None else np.random.default_rng(0)
        self._phase = "done"
        self._attempts = 0
        self._t = 0
        self._history: list[float] = []  # distance still to go, for stall detection
        self._finger = 0.0
        self._lift_ok = False
        self._grip_z0 = 0.0  # grip-site z when the grip closed
        self._item_z0 = 0.0  # item z when the grip closed

    @property
    def phase(self) -> str:
        return self._phase

    @property
    def regrasps(self) -> int:
        return max(self._attempts - 1, 0)

    # ------------------------------------------------------------------ planning
    def reset(self, raw_env, raw_obs: dict) -> None:
        self.item, self.container = self._objects(raw_env)
        for key in ("robot0_eef_pos", "robot0_eef_quat", "robot0_gripper_qpos") + tuple(
            f"{self.item}_{k}" for k in ("pos", "quat")
        ):
            if key not in raw_obs:
                raise ValueError(f"raw observation lacks {key!r}; is this a LIBERO env?")
        sim = raw_env.sim
        self._r_hand_to_site = hand_to_site(sim, raw_obs)
        # Item corners in the item's own frame: re-posed from the observation at every re-plan.
        pos, rot = self._pose(raw_obs, self.item)
        corners = collision_boxes(sim, include=(f"{self.item}_",)).corners()
        if len(corners) == 0:
            raise ValueError(f"no collision geoms found for {self.item!r}")
        self._local_corners = (corners - pos) @ rot
        self._obstacles: Boxes = collision_boxes(sim, exclude=(f"{self.item}_", "floor"))
        self._drop_xy, self._floor_z, self._rim_z = self._drop_target(sim)
        self._goto("approach")
        self._attempts, self._finger, self._lift_ok = 0, 0.0, False
        self._plan(raw_obs)

    def _objects(self, raw_env) -> tuple[str, str]:
        """(item, container) body-name prefixes; a hook for experts of other suites."""
        objs = list(raw_env.obj_of_interest)
        if len(objs) != 2:
            raise ValueError(f"expected (item, container) objects of interest, got {objs}")
        return objs[0], objs[1]

    def _drop_target(self, sim) -> tuple[np.ndarray, float, float]:
        """Release point xy [2], floor z and rim z of the container (a hook, like ``_objects``).

        The drop point is the container's containment region (what LIBERO's In() checks), else
        the centre of its collision boxes.
        """
        box = collision_boxes(sim, include=(f"{self.container}_",))
        region = f"{self.container}_contain_region"
        names = [sim.model.site_id2name(i) for i in range(sim.model.nsite)]
        if region in names:
            drop_xy = np.array(sim.data.site_xpos[names.index(region)][:2])
        else:
            c = box.corners()
            drop_xy = (c.min(axis=0)[:2] + c.max(axis=0)[:2]) / 2
        floor_z, rim_z = container_drop(box, drop_xy)
        return drop_xy, floor_z, rim_z

    @staticmethod
    def _pose(obs: dict, name: str) -> tuple[np.ndarray, np.ndarray]:
        return np.asarray(obs[f"{name}_pos"], dtype=np.float64), quat_xyzw_to_mat(obs[f"{name}_quat"])

    def _plan(self, obs: dict) -> None:
        """Grasp point and closing axis from the item's current pose, stored in the item frame."""
        cfg = self.cfg
        pos, rot = self._pose(obs, self.item)
        grasp = plan_top_grasp(pos + self._local_corners @ rot.T, cfg.grasp_depth, cfg.floor_clearance, cfg.max_width)
        current = self._site_rotation(obs)[:, 0]
        best, best_score = grasp.angles[0], -np.inf
        for angle, width in zip(grasp.angles, grasp.widths):
            probes = finger_probes(grasp.point, angle, cfg.half_open, grasp.top - grasp.point[2] + cfg.hover)
            clear = np.minimum(self._obstacles.distance(probes), cfg.clearance_cap).sum()
            turn = np.arccos(min(abs(np.cos(angle - np.arctan2(current[1], current[0]))), 1.0))
            score = clear - cfg.width_penalty * width - cfg.turn_penalty * turn
            if score > best_score:
                best, best_score = angle, score
        axis = np.array([np.cos(best), np.sin(best), 0.0])
        axis = axis if axis @ current >= 0 else -axis  # fingers are interchangeable: turn the wrist less
        self._attempts += 1
        self._grasp_local = (grasp.point + self._grasp_offset() - pos) @ rot
        self._axis_local = axis @ rot
        self._top_above = grasp.top - grasp.point[2]  # item top above the grip point
        self._bottom_below = grasp.point[2] - grasp.bottom  # item bottom below the grip point

    def _grasp_offset(self) -> np.ndarray:
        """World offset [3] (m) added to the planned grasp point; a hook for perturbed experts."""
        return np.zeros(3)

    def _grasp_pose(self, obs: dict) -> tuple[np.ndarray, np.ndarray]:
        """Current grasp point [3] and gripper goal rotation [3, 3] (the item may have moved)."""
        pos, rot = self._pose(obs, self.item)
        axis = rot @ self._axis_local
        return pos + rot @ self._grasp_local, grasp_rotation(axis, np.array([0.0, 0.0, -1.0]))

    # ------------------------------------------------------------------ control
    def _can_retry(self) -> bool:
        return self._attempts <= self.cfg.max_regrasps

    def act(self, raw_obs: dict) -> np.ndarray:
        """One control step: raw LIBERO observation -> action float32 [7] in [-1, 1]."""
        action = self._policy(raw_obs)
        self._t += 1
        return np.clip(action, -1.0, 1.0).astype(np.float32)

    def _carry_z(self) -> float:
        """Grip-site height that keeps the held item's bottom above the basket rim."""
        return self._rim_z + self.cfg.rim_clearance + self._bottom_below

    def _policy(self, obs: dict) -> np.ndarray:
        cfg = self.cfg
        eef = np.asarray(obs["robot0_eef_pos"], dtype=np.float64)
        item = np.asarray(obs[f"{self.item}_pos"], dtype=np.float64)
        grasp, r_grasp = self._grasp_pose(obs)
        carry_z = self._carry_z()
        held = self._phase in ("lift", "carry", "lower")
        if held and self._lift_ok and eef[2] - (item[2] - self._item_z0 + self._grip_z0) > cfg.slip_tol:
            self._goto("regrasp" if self._can_retry() else "retreat")  # the item slipped out
        if self._phase == "approach":
            hover = grasp + [0.0, 0.0, self._top_above + cfg.hover + 0.013]
            off = float(np.linalg.norm((eef - grasp)[:2]))
            rot_err = self._rot_err(obs, r_grasp)
            if off < cfg.approach_tol and rot_err < cfg.rot_tol:
                self._goto("descend")
            elif self._stalled(float(np.linalg.norm(hover - eef)) + 0.01 * rot_err, 3 * cfg.stall_steps):
                self._goto("regrasp" if self._can_retry() else "retreat")
                return self._policy(obs)
            else:
                if off > 0.03:
                    hover[2] = max(hover[2], eef[2])  # stay high until above the item
                return self._servo(obs, hover, r_grasp, -1.0)
        if self._phase == "descend":
            to_go = float(eef[2] - grasp[2])
            if to_go < cfg.preclose_height or self._stalled(to_go):
                self._finger = float(obs["robot0_gripper_qpos"][0])
                self._goto("close")
            else:
                # Track the grasp point in xy while descending (the item may be nudged).
                return self._servo(obs, grasp, r_grasp, -1.0)
        if self._phase == "close":
            finger = float(obs["robot0_gripper_qpos"][0])
            settled = abs(finger - self._finger) < cfg.close_settle
            self._finger = finger
            if (self._t >= cfg.min_close_steps and settled) or self._t >= cfg.max_close_steps:
                self._grip_z0, self._item_z0 = float(eef[2]), float(item[2])
                self._r_hold, self._lift_ok = self._site_rotation(obs), False
                empty = finger < cfg.empty_grip
                self._goto("regrasp" if empty and self._can_retry() else "lift")
                return self._policy(obs)
            return self._servo(obs, grasp, r_grasp, 1.0)
        if self._phase == "lift":
            rise = eef[2] - self._grip_z0
            if not self._lift_ok and rise >= cfg.lift_check_rise:
                if item[2] - self._item_z0 < cfg.rise_ratio * rise and self._can_retry():
                    self._goto("regrasp")
                    return self._policy(obs)
                self._lift_ok = True
            if self._lift_ok and eef[2] > carry_z - 0.02:
                self._goto("carry")
            else:
                return self._servo(obs, np.array([eef[0], eef[1], carry_z]), self._r_hold, 1.0)
        if self._phase == "regrasp":
            if self._t >= 6:
                self._lift_ok = False
                self._plan(obs)
                self._goto("approach")
                return self._policy(obs)
            return self._servo(obs, eef + [0.0, 0.0, 0.05], self._site_rotation(obs), -1.0)
        offset = eef[:2] - item[:2]  # keep the in-hand offset while moving the item
        if self._phase == "carry":
            if np.linalg.norm(item[:2] - self._drop_xy) < cfg.carry_tol:
                self._goto("lower")
            else:
                target = np.array([*(self._drop_xy + offset), carry_z])
                if eef[2] < carry_z - 0.03:
                    target[:2] = eef[:2]  # finish rising before moving sideways over the rim
                return self._servo(obs, target, self._r_hold, 1.0)
        if self._phase == "lower":
            bottom = item[2] - self._item_z0 + self._grip_z0 - self._bottom_below
            to_go = float(bottom - (self._floor_z + cfg.drop_height))
            if to_go < 0.004 or self._stalled(to_go):
                self._goto("release")
            else:
                target = np.array([*(self._drop_xy + offset), eef[2] - to_go])
                return self._servo(obs, target, self._r_hold, 1.0)
        if self._phase == "release":
            if self._t >= cfg.release_steps:
                self._goto("retreat")
            else:
                return self._servo(obs, eef, self._r_hold, -1.0)
        if self._phase in ("retreat", "done"):
            if eef[2] > carry_z - 0.02:
                self._phase = "done"
            return self._servo(obs, np.array([eef[0], eef[1], carry_z]), self._site_rotation(obs), -1.0)
        raise RuntimeError(f"unknown phase {self._phase!r}")
