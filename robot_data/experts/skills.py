"""Articulation and contact skills for scripted experts: turn a knob, push an object.

Each skill is a small closed-loop state machine with the expert interface (``reset(raw_env,
raw_obs)``, ``act(raw_obs)``, ``phase``; "done" when finished) and the OSC_POSE action convention
of spatial.py. They read privileged state: poses from the observation, joint values and collision
geometry from ``raw_env.sim``. Pure geometry lives in primitives.py.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass

import numpy as np

from robot_data.experts.primitives import (
    collision_boxes,
    container_drop,
    grasp_rotation,
    hand_to_site,
    handle_point,
    plan_top_grasp,
    push_pose,
)
from robot_data.experts.servo import ServoControl

DOWN = np.array([0.0, 0.0, -1.0])


@dataclass
class SkillConfig:
    """Gains, tolerances and skill geometry (m, rad, steps)."""

    pos_gain: float = 1.5
    rot_gain: float = 1.0
    approach_tol: float = 0.008  # xy error that ends an approach
    rot_tol: float = 0.1
    hover: float = 0.05  # approach waypoint above the contact point
    stall_steps: int = 8
    close_steps: int = 12
    release_steps: int = 6
    retreat_rise: float = 0.08
    # knob
    knob_depth: float = 0.015  # grip site below the knob's top
    knob_turn: float = 1.0  # wrist turn commanded past the grasp yaw (the knob counts as on at 0.5 rad)
    knob_target: float = 0.7  # joint value at which the knob is released
    # push
    push_height: float = 0.01  # grip site above the support (object bottom / dish floor) while pushing
    push_gap: float = 0.012  # fingertip distance behind a solid object's rim when lining up
    push_inset: float = 0.02  # line-up point behind a dish's centre (the fingers go inside it)
    dish_depth: float = 0.008  # rim above the floor at the centre: the object is a dish
    dish_press: float = 0.0  # grip site above a dish floor: the fingertips press it (no tilting)
    hand_above_grip: float = 0.02  # the hand's underside is ~2.4 cm above the grip site
    push_step: float = 0.02  # how far ahead of itself the pusher is servoed each step (sets the pace)
    push_tol: float = 0.01  # object-to-goal distance that ends the push
    push_misalign: float = 0.025  # pusher off the push line by this much: back off and line up again
    # drawer
    drawer_finger_open: float = 0.024  # finger distance from the grip site while reaching the handle (+-3 mm)
    drawer_grip_raise: float = 0.01  # grip site above the handle bar's centre (the bar is 1.6 cm tall)
    drawer_min_open: float = 0.85  # a pull that ends short of this share of the target is retried ...
    drawer_retries: int = 2  # ... this many times
    drawer_standoff: float = 0.08  # in front of the handle before moving in
    drawer_open_fraction: float = 0.95  # pull until the slide is this far towards its open end
    pull_step: float = 0.03  # how far ahead of the handle the pull is servoed
    drawer_rise: float = 0.1  # after letting go, rise this much while pointing the gripper down


class ServoSkill(ServoControl, abc.ABC):
    """Shared plumbing: grip-site rotation, proportional pose servo, phase bookkeeping."""

    def __init__(self, config: SkillConfig | None = None):
        self.cfg = config or SkillConfig()
        self._phase = "done"
        self._t = 0
        self._history: list[float] = []

    @property
    def phase(self) -> str:
        return self._phase

    def _setup(self, raw_env, raw_obs: dict) -> None:
        self._r_hand_to_site = hand_to_site(raw_env.sim, raw_obs)
        self._sim = raw_env.sim

    def act(self, raw_obs: dict) -> np.ndarray:
        action = self._policy(raw_obs)
        self._t += 1
        return np.clip(action, -1.0, 1.0).astype(np.float32)

    @abc.abstractmethod
    def _policy(self, obs: dict) -> np.ndarray:
        """The skill's action [7] for one raw observation (its own phases)."""


def hinge_joint(sim, body_prefix: str) -> int:
    """The single hinge joint of a fixture (e.g. the stove knob); ValueError when not unique."""
    m = sim.model
    ids = [j for j in range(m.njnt) if m.jnt_type[j] == 3 and (m.joint_id2name(j) or "").startswith(body_prefix)]
    if len(ids) != 1:
        raise ValueError(f"expected one hinge joint on {body_prefix!r}, found {len(ids)}")
    return ids[0]


class TurnKnob(ServoSkill):
    """Grasp a knob across its ridge from above and twist the wrist about the knob axis.

    The grip point sits on the hinge axis so the twist is a pure rotation; the closing axis is
    across the ridge (narrowest top section, ``plan_top_grasp``). The knob joint turns "on" at
    positive angles about +z, so the wrist turns counter-clockwise seen from above.
    """

    def __init__(self, fixture: str, config: SkillConfig | None = None):
        super().__init__(config)
        self.fixture = fixture

    def reset(self, raw_env, raw_obs: dict) -> None:
        self._setup(raw_env, raw_obs)
        sim, cfg = self._sim, self.cfg
        j = hinge_joint(sim, f"{self.fixture}_")
        self._qadr = int(sim.model.jnt_qposadr[j])
        axis = np.array(sim.data.xaxis[j])
        if abs(axis[2]) < 0.9:
            raise ValueError(f"{self.fixture}: knob axis {axis} is not vertical; only top grasps are scripted")
        self._sign = float(np.sign(axis[2]))
        body = sim.model.body_id2name(sim.model.jnt_bodyid[j])
        grasp = plan_top_grasp(collision_boxes(sim, include=(body,)).corners(), cfg.knob_depth, 0.013, 0.068)
        self._point = np.array([*np.array(sim.data.xanchor[j])[:2], grasp.point[2]])
        closing = np.array([np.cos(grasp.angles[0]), np.sin(grasp.angles[0]), 0.0])
        # Pick the closing-axis sign that leaves the wrist the most room for the twist that follows.
        current = self._site_rotation(raw_obs)[:, 0]
        closing = closing if closing @ current >= 0 else -closing
        self._r_grasp = grasp_rotation(closing, DOWN)
        self._top = grasp.top
        self._goto("approach")

    def _knob(self) -> float:
        return self._sign * float(self._sim.data.qpos[self._qadr])

    def _policy(self, obs: dict) -> np.ndarray:
        cfg = self.cfg
        eef = np.asarray(obs["robot0_eef_pos"], dtype=np.float64)
        if self._phase == "approach":
            hover = self._point + [0.0, 0.0, self._top - self._point[2] + cfg.hover]
            off = float(np.linalg.norm((eef - self._point)[:2]))
            if off < cfg.approach_tol and self._rot_err(obs, self._r_grasp) < cfg.rot_tol:
                self._goto("descend")
            else:
                if off > 0.03:
                    hover[2] = max(hover[2], eef[2])  # stay high until above the knob
                return self._servo(obs, hover, self._r_grasp, -1.0)
        if self._phase == "descend":
            to_go = float(eef[2] - self._point[2])
            if to_go < 0.004 or self._stalled(to_go):
                self._goto("close")
            else:
                return self._servo(obs, self._point, self._r_grasp, -1.0)
        if self._phase == "close":
            if self._t >= cfg.close_steps:
                self._goto("turn")
            else:
                return self._servo(obs, self._point, self._r_grasp, 1.0)
        if self._phase == "turn":
            if self._knob() >= cfg.knob_target or self._stalled(cfg.knob_target - self._knob(), 2 * cfg.stall_steps):
                self._goto("release")
            else:
                c, s = np.cos(self._sign * cfg.knob_turn), np.sin(self._sign * cfg.knob_turn)
                r_z = np.array([[c, -s, 0.0], [s, c, 0.0], [0.0, 0.0, 1.0]])
                return self._servo(obs, self._point, r_z @ self._r_grasp, 1.0)
        if self._phase == "release":
            if self._t >= cfg.release_steps:
                self._goto("retreat")
            else:
                return self._servo(obs, eef, self._site_rotation(obs), -1.0)
        if self._phase in ("retreat", "done"):
            if eef[2] > self._top + cfg.retreat_rise - 0.01:
                self._phase = "done"
            up = np.array([eef[0], eef[1], self._top + cfg.retreat_rise])
            return self._servo(obs, up, self._site_rotation(obs), -1.0)
        raise RuntimeError(f"unknown phase {self._phase!r}")


class PushObject(ServoSkill):
    """Push a flat object along the table to a goal point with the closed fingers.

    The pusher lines up behind the object on the line through its centre and the goal (flying
    above the object), drops to just above the table and pushes through the centre; when the
    object slides off the line the pusher backs off, rises and lines up again.
    """

    def __init__(self, obj: str, goal_xy: np.ndarray, config: SkillConfig | None = None):
        super().__init__(config)
        self.obj = obj
        self.goal_xy = np.asarray(goal_xy, dtype=np.float64)

    def reset(self, raw_env, raw_obs: dict) -> None:
        self._setup(raw_env, raw_obs)
        key = f"{self.obj}_pos"
        if key not in raw_obs:
            raise ValueError(f"raw observation lacks {key!r}")
        corners = collision_boxes(self._sim, include=(f"{self.obj}_",)).corners()
        if len(corners) == 0:
            raise ValueError(f"no collision geoms found for {self.obj!r}")
        pos = np.asarray(raw_obs[key], dtype=np.float64)
        boxes = collision_boxes(self._sim, include=(f"{self.obj}_",))
        floor, rim = container_drop(boxes, pos[:2])
        self._top = float(corners[:, 2].max())
        if rim - floor > self.cfg.dish_depth:
            # A dish (plate): the fingers go down inside it and push its far rim from within. The
            # concave rim keeps the pusher centred, and nothing beside the dish (the cabinet sits
            # 2 cm behind the plate) has to leave room for the hand.
            self._standoff = self.cfg.push_inset
            # Press the floor of a flat dish; in a deep one (a bowl) stop where the hand, ~2.4 cm
            # above the grip site, stays clear of the rim: the fingertips then push the wall.
            self._push_z = max(floor + self.cfg.dish_press, rim - self.cfg.hand_above_grip)
            # The pusher may travel across the dish up to its far rim.
            self._max_ahead = float(np.linalg.norm(corners[:, :2] - pos[:2], axis=1).max())
        else:
            radius = float(np.linalg.norm(corners[:, :2] - pos[:2], axis=1).max())
            self._standoff = radius + self.cfg.push_gap
            self._push_z = float(corners[:, 2].min()) + self.cfg.push_height
            self._max_ahead = 0.0  # behind a solid object's centre
        self._goto("line_up")

    def _policy(self, obs: dict) -> np.ndarray:
        cfg = self.cfg
        eef = np.asarray(obs["robot0_eef_pos"], dtype=np.float64)
        obj = np.asarray(obs[f"{self.obj}_pos"], dtype=np.float64)
        if float(np.linalg.norm(obj[:2] - self.goal_xy)) < cfg.push_tol and self._phase in ("line_up", "push"):
            self._goto("retreat")
        start, direction = push_pose(obj[:2], self.goal_xy, self._standoff)
        perp = np.array([-direction[1], direction[0]])
        start = start + self._lateral_offset() * perp
        r_push = grasp_rotation(np.array([-direction[1], direction[0], 0.0]), DOWN)  # fingers side by side
        if self._phase == "line_up":
            target = np.array([*start, self._push_z])
            off = float(np.linalg.norm(eef[:2] - start))
            low = eef[2] - self._push_z < 0.006 or (off < cfg.approach_tol and self._stalled(float(eef[2])))
            if off < cfg.approach_tol and low:
                self._goto("push")
            else:
                if off > 0.015:  # fly over the object, not through it
                    target[2] = max(self._top + cfg.hover, eef[2])
                return self._servo(obs, target, r_push, 1.0)
        if self._phase == "push":
            # Distance of the pusher from the line through the object centre along the push.
            rel = eef[:2] - obj[:2]
            lateral = float(rel @ perp) - self._lateral_offset()
            if abs(lateral) > cfg.push_misalign or float(rel @ direction) > self._max_ahead:
                self._goto("back_off")
            else:
                # Advance at a steady pace along the push line while pulling back onto it.
                ahead = eef[:2] + cfg.push_step * direction - lateral * perp
                return self._servo(obs, np.array([*ahead, self._push_z]), r_push, 1.0)
        if self._phase == "back_off":
            if eef[2] > self._top + cfg.hover - 0.01:
                self._goto("line_up")
                return self._policy(obs)
            else:
                away = eef[:2] + 0.5 * (eef[:2] - obj[:2]) / max(float(np.linalg.norm(eef[:2] - obj[:2])), 1e-6) * 0.02
                return self._servo(obs, np.array([*away, self._top + cfg.hover]), r_push, 1.0)
        if self._phase in ("retreat", "done"):
            if eef[2] > self._top + cfg.retreat_rise - 0.01:
                self._phase = "done"
            return self._servo(obs, np.array([eef[0], eef[1], self._top + cfg.retreat_rise]), r_push, 1.0)
        raise RuntimeError(f"unknown phase {self._phase!r}")

    def _lateral_offset(self) -> float:
        """Pusher offset (m) sideways from the line through the object's centre; a hook for perturbed pushes."""
        return 0.0


def slide_joint(sim, name: str) -> tuple[int, np.ndarray, float]:
    """(qpos address, unit opening direction [3] (world), qpos at the open end) of a drawer slide.

    The open end is the range limit farther from the closed drawer (qpos 0): LIBERO's cabinet
    drawers open towards negative qpos, which moves them along -(joint axis).
    """
    m = sim.model
    j = m.joint_name2id(name)
    if m.jnt_type[j] != 2:
        raise ValueError(f"{name!r} is not a slide joint")
    lo, hi = (float(v) for v in m.jnt_range[j])
    open_q = lo if abs(lo) > abs(hi) else hi
    axis = np.array(sim.data.xaxis[j])
    return int(m.jnt_qposadr[j]), axis * np.sign(open_q), open_q


def drawer_already_open(sim, joint: str, min_share: float) -> bool:
    """Whether a drawer slide is already open at least ``min_share`` of the way to its open end."""
    qadr, _, open_q = slide_joint(sim, joint)
    return float(np.sign(open_q)) * float(sim.data.qpos[qadr]) >= min_share * abs(open_q)


class OpenDrawer(ServoSkill):
    """Pull a drawer open by its handle bar, gripping it with a horizontal gripper.

    The handle bar sits 1.6 cm in front of the drawer face, too little for a finger to go down
    behind it, and the neighbouring drawers' handles are right above and below. So the gripper
    points along the pull axis into the drawer face, its closing axis vertical, fingers only
    part-open (they would touch the neighbouring handles fully open), pinches the bar from above
    and below, and pulls straight out until the slide nears its open end.
    """

    def __init__(self, joint: str, config: SkillConfig | None = None):
        super().__init__(config)
        self.joint = joint

    def reset(self, raw_env, raw_obs: dict) -> None:
        self._setup(raw_env, raw_obs)
        sim, cfg = self._sim, self.cfg
        self._qadr, self._u, open_q = slide_joint(sim, self.joint)
        self._target_q = cfg.drawer_open_fraction * open_q
        self._sign = float(np.sign(open_q))
        body = sim.model.body_id2name(sim.model.jnt_bodyid[sim.model.joint_name2id(self.joint)])
        boxes = collision_boxes(sim, include=(body,))
        # Grip a little above the bar's centre line: the vertical hand reaches ~10.5 cm below the
        # grip site, and the plate in front of the middle drawer is 10 cm below its handle.
        self._handle = handle_point(boxes.corners(), self._u) + [0.0, 0.0, cfg.drawer_grip_raise]
        # Closing axis vertical; of its two signs, the one nearer the current hand (less wrist turn).
        options = [grasp_rotation(np.array([0.0, 0.0, sign]), -self._u) for sign in (1.0, -1.0)]
        self._r_grip = min(options, key=lambda r: self._rot_err(raw_obs, r))
        self._r_down: np.ndarray | None = None
        self._attempts = 0
        self._opened0 = self._opened()
        # A drawer that starts open (LIBERO-10's bottom drawer, ~0.15 of its 0.16 m travel) needs no pull:
        # gripping it would only risk knocking it shut.
        already = drawer_already_open(sim, self.joint, cfg.drawer_min_open * cfg.drawer_open_fraction)
        self._goto("done" if already else "approach")

    def _opened(self) -> float:
        """How far the drawer is open towards its open end (m, >= 0)."""
        return self._sign * float(self._sim.data.qpos[self._qadr])

    def _policy(self, obs: dict) -> np.ndarray:
        cfg = self.cfg
        eef = np.asarray(obs["robot0_eef_pos"], dtype=np.float64)
        finger = float(obs["robot0_gripper_qpos"][0])
        # Part-open fingers: the gripper integrates the sign of its action and a zero action holds
        # it, so a dead band around the wanted opening settles there (one step moves ~1 cm).
        gap = finger - cfg.drawer_finger_open
        part_open = float(np.sign(gap)) if abs(gap) > 0.003 else 0.0
        handle = self._handle + self._u * (self._opened() - self._opened0)  # the bar moves with the drawer
        front = handle + self._u * cfg.drawer_standoff
        if self._phase == "approach":
            err = float(np.linalg.norm(eef - front))
            if err < cfg.approach_tol and self._rot_err(obs, self._r_grip) < cfg.rot_tol:
                self._goto("insert")
            elif self._rot_err(obs, self._r_grip) > 0.3:
                # Turn the hand in free space first, in front of and above the handle.
                return self._servo(obs, front + [0.0, 0.0, cfg.hover], self._r_grip, part_open)
            else:
                return self._servo(obs, front, self._r_grip, part_open)
        if self._phase == "insert":
            to_go = float((eef - handle) @ self._u)
            if to_go < 0.004 or self._stalled(to_go):
                self._goto("close")
            else:
                return self._servo(obs, handle, self._r_grip, part_open)
        if self._phase == "close":
            if self._t >= cfg.close_steps:
                self._attempts += 1
                self._goto("pull")
            else:
                return self._servo(obs, handle, self._r_grip, 1.0)
        if self._phase == "pull":
            to_go = self._sign * self._target_q - self._opened()
            if to_go <= 0 or self._stalled(to_go, 2 * cfg.stall_steps):
                self._goto("release")
            else:
                return self._servo(obs, handle + self._u * cfg.pull_step, self._r_grip, 1.0)
        if self._phase == "release":
            if self._t >= cfg.release_steps:
                self._goto("retreat")
            else:
                return self._servo(obs, eef, self._r_grip, -1.0)
        away = front
        if self._phase == "retreat":
            if float((eef - away) @ self._u) > -0.01:
                # The bar slipped out before the drawer was open: grip it again where it is now.
                short = self._opened() < cfg.drawer_min_open * self._sign * self._target_q
                self._goto("approach" if short and self._attempts <= cfg.drawer_retries else "reorient")
                return self._policy(obs)
            else:
                return self._servo(obs, away, self._r_grip, -1.0)
        if self._phase in ("reorient", "done"):
            # Point the gripper down again, above the handle height: the next skill (a top grasp)
            # starts from the usual pose instead of a sideways hand next to the cabinet.
            if self._r_down is None:  # the down pose nearest to the hand's: the least wrist turn
                side = np.cross(self._u, [0.0, 0.0, 1.0])
                options = [grasp_rotation(axis, DOWN) for axis in (side, -side, self._u, -self._u)]
                self._r_down = min(options, key=lambda r: self._rot_err(obs, r))
            r_down = self._r_down
            up = away + [0.0, 0.0, cfg.drawer_rise]
            if self._rot_err(obs, r_down) < cfg.rot_tol and float(np.linalg.norm(eef - up)) < 0.02:
                self._phase = "done"
            return self._servo(obs, up, r_down, -1.0)
        raise RuntimeError(f"unknown phase {self._phase!r}")
