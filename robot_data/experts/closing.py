"""Skills that shut a fixture, on privileged state: a drawer pushed along its slide (``CloseDrawer``) and a
hinged door pushed along its swing (``CloseDoor``), for the LIBERO-10 goals ``Close(<drawer>)`` and
``Close(<microwave>)`` (``robot_data/experts/long.py`` plans them last). Both read the joint's axis, anchor and range
from the simulator instead of assuming one orientation: task 3's cabinet faces sideways.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from robot_data.experts.goal import (
    _problem,
)
from robot_data.experts.primitives import collision_boxes, grasp_rotation, planar_turn
from robot_data.experts.skills import DOWN, ServoSkill, SkillConfig, slide_joint


@dataclass
class CloseDrawerConfig:
    """Geometry of the drawer push (m, rad)."""

    standoff: float = 0.05  # grip site this far in front of the drawer's front before pushing
    below_top: float = 0.015  # push this far below the top edge of the drawer's front panel
    overshoot: float = 0.04  # servo target beyond the closed front, so the push keeps pressing
    closed_tol: float = 0.004  # done this near the slide's closed limit (0.01; LIBERO's Close() wants q > 0)
    rise: float = 0.12  # clearance over the drawer's top while moving to the front
    pitch: float = 0.785  # gripper tilt below the horizontal push direction (pi/2: pointing down)
    tip_reach: float = 0.012  # the closed fingertips reach this far beyond the grip site


@dataclass
class CloseDoorConfig:
    """Geometry of the door push (m, rad)."""

    reach: float = 0.7  # push this share of the door's width out from the hinge (leverage, clear of the handle)
    below_top: float = 0.02  # grip site this far below the door's top edge (the hand, 2.6 cm up, passes over it)
    standoff: float = 0.05  # grip site this far off the door's outer face before pushing
    lead: float = 0.15  # the push is servoed to where the contact point will be this much further shut
    pitch: float = 1.571  # gripper tilt below the push direction (pi/2: pointing down, the fingers along the door)
    closed_tol: float = 0.003  # done this near the hinge's closed limit (LIBERO's microwave: 0.005 rad)
    rise: float = 0.08  # clearance over the door's top while moving to the start
    max_steps: int = 250  # the push gives up (and backs off) after this many steps




class CloseDrawer(ServoSkill):
    """Push an open drawer shut on its front panel with the closed fingertips.

    The gripper points along the closing direction (tilted ``pitch`` below it), so the wrist and
    forearm stay out in front of the drawer: pushing with a downward-pointing hand brings the
    forearm over the cabinet, and a sideways-facing cabinet's top edge (LIBERO-10's white
    cabinet) then blocks the arm half-way. The hand moves over the front, goes down in front of
    it, pushes along the closing direction until the slide is at its closed end (or stalls),
    backs off horizontally (the neighbouring handle is right above) and rises.
    """

    def __init__(self, joint: str, config: SkillConfig | None = None, geometry: CloseDrawerConfig | None = None):
        super().__init__(config)
        self.joint = joint
        self.geo = geometry or CloseDrawerConfig()

    def reset(self, raw_env, raw_obs: dict) -> None:
        self._setup(raw_env, raw_obs)
        sim, geo = self._sim, self.geo
        self._qadr, self._u, open_q = slide_joint(sim, self.joint)  # u: the opening direction, read from the joint
        lo, hi = (float(v) for v in sim.model.jnt_range[sim.model.joint_name2id(self.joint)])
        self._closed_q, self._sign = (hi if open_q == lo else lo), float(np.sign(open_q))
        body = sim.model.body_id2name(sim.model.jnt_bodyid[sim.model.joint_name2id(self.joint)])
        corners = collision_boxes(sim, include=(body,)).corners()
        front = float((corners @ self._u).max())
        centre = corners.mean(axis=0)
        # The push point: centred across the drawer, just under its front panel's top edge.
        self._start = centre + self._u * (front + geo.standoff - float(centre @ self._u))
        self._start[2] = float(corners[:, 2].max()) - geo.below_top
        self._top = float(corners[:, 2].max()) + geo.rise
        # Where the grip site ends up with the fingertips on the closed front, plus the overshoot.
        self._closed = self._start - self._u * (self._remaining() + geo.standoff - geo.tip_reach + geo.overshoot)
        approach = -self._u * np.cos(geo.pitch) + DOWN * np.sin(geo.pitch)
        side = np.cross(self._u, [0.0, 0.0, 1.0])  # closing axis horizontal: the hand stays flat over the table
        options = [grasp_rotation(axis, approach) for axis in (side, -side)]
        self._r = min(options, key=lambda r: self._rot_err(raw_obs, r))
        self._goto("over")

    def _remaining(self) -> float:
        """How far the slide still is from its closed limit (m; CloseDoor's, the same name, in rad). LIBERO's
        cabinet counts as closed only past q = 0, which lies inside the range (-0.16 .. 0.01), so the push goes
        on to the limit."""
        return self._sign * (float(self._sim.data.qpos[self._qadr]) - self._closed_q)

    def _policy(self, obs: dict) -> np.ndarray:
        geo = self.geo
        eef = np.asarray(obs["robot0_eef_pos"], dtype=np.float64)
        above = np.array([self._start[0], self._start[1], max(self._top, eef[2])])
        if self._phase == "over":
            if float(np.linalg.norm((eef - above)[:2])) < 0.01 and self._rot_err(obs, self._r) < 0.15:
                self._goto("descend")
            else:
                return self._servo(obs, above, self._r, 1.0)
        if self._phase == "descend":
            to_go = float(np.linalg.norm(eef - self._start))
            if to_go < 0.008 or self._stalled(to_go):
                self._goto("push")
            else:
                return self._servo(obs, self._start, self._r, 1.0)
        if self._phase == "push":
            if self._remaining() < geo.closed_tol or self._stalled(self._remaining(), 2 * self.cfg.stall_steps):
                self._goto("back_off")
            else:
                step = eef + np.clip(self._closed - eef, -self.cfg.pull_step, self.cfg.pull_step)
                step[2] = self._start[2]
                return self._servo(obs, step, self._r, 1.0)
        if self._phase == "back_off":
            # Straight out along the opening direction first, at the push height.
            away = self._closed + self._u * (geo.standoff + geo.overshoot)
            if float((eef - away) @ self._u) > -0.01 or self._stalled(float(np.linalg.norm(eef - away))):
                self._goto("retreat")
            else:
                return self._servo(obs, away, self._r, 1.0)
        if self._phase in ("retreat", "done"):
            up = eef.copy()
            up[2] = self._top
            if abs(eef[2] - self._top) < 0.02:
                self._phase = "done"
            return self._servo(obs, up, self._r, 1.0)
        raise RuntimeError(f"unknown phase {self._phase!r}")


class CloseDoor(ServoSkill):
    """Swing a hinged door (the microwave's) shut by pushing its outer face with the closed fingertips.

    The hinge's axis, anchor and angle come from the simulator; the door's width and outer face
    from its collision boxes. The contact point sits ``reach`` of the width out from the hinge and
    moves along the arc as the door turns: the pusher is servoed to where that point will be
    ``lead`` further shut, on the outer side of the swing (the side opposite the motion), so it
    never ends up in the door's way. The gripper points along the push direction tilted ``pitch``
    below it (as ``CloseDrawer``): the hand trails behind and above the fingertips, clear of the
    door's top edge and of the fixture's roof once the door is nearly shut.
    """

    def __init__(self, joint: str, config: SkillConfig | None = None, geometry: CloseDoorConfig | None = None):
        super().__init__(config)
        self.joint = joint
        self.geo = geometry or CloseDoorConfig()

    def reset(self, raw_env, raw_obs: dict) -> None:
        self._setup(raw_env, raw_obs)
        sim, geo = self._sim, self.geo
        m = sim.model
        j = m.joint_name2id(self.joint)
        if m.jnt_type[j] != 3:
            raise ValueError(f"{self.joint!r} is not a hinge joint")
        self._j, self._qadr = j, int(m.jnt_qposadr[j])
        lo, hi = (float(v) for v in m.jnt_range[j])
        q = self._q()
        # LIBERO's doors are closed at the range limit nearer 0 (the model's rest pose), open towards the other.
        self._closed_q = lo if abs(lo) < abs(hi) else hi
        self._sense = float(np.sign(self._closed_q - q)) or 1.0  # +1: closing increases q
        self._body = m.body_id2name(m.jnt_bodyid[j])
        corners = collision_boxes(sim, include=(self._body,)).corners()
        anchor = np.array(sim.data.xanchor[j])
        self._width = float(np.linalg.norm((corners - anchor)[:, :2], axis=1).max())
        self._z = float(corners[:, 2].max()) - geo.below_top
        self._top = float(corners[:, 2].max()) + geo.rise
        self._steps = 0
        # Of the two finger orders (a quarter turn of the hand either way from the previous skill's), the
        # one that keeps the last wrist joint nearest the middle of its range over the whole push: to the
        # start, then on with the push direction as the door swings shut. The other one runs the joint
        # into its limit on some starts. With the hand pointing down, a yaw of the hand by +a (about +z)
        # turns that joint by -a.
        _, v = self._frame(0.0)
        current = self._site_rotation(raw_obs)[:, 0]
        swing = self._remaining() * float(np.sign(np.array(sim.data.xaxis[j])[2] * self._sense))
        wrist = float(np.asarray(raw_obs.get("robot0_joint_pos", np.zeros(7)))[-1])
        self._flip = 1.0
        turns = {f: planar_turn(current[:2], self._rotation(v, f)[:2, 0]) for f in (1.0, -1.0)}
        self._flip = min(turns, key=lambda f: max(abs(wrist - turns[f]), abs(wrist - turns[f] - swing)))
        self._goto("over")

    def _q(self) -> float:
        return float(self._sim.data.qpos[self._qadr])

    def _frame(self, ahead: float) -> tuple[np.ndarray, np.ndarray]:
        """(contact point [3] on the outer face, push direction [3]) with the door turned ``ahead`` rad further shut."""
        sim = self._sim
        axis = np.array(sim.data.xaxis[self._j]) * self._sense  # the door turns about +axis while closing
        anchor = np.array(sim.data.xanchor[self._j])
        boxes = collision_boxes(sim, include=(self._body,)).corners().reshape(-1, 8, 3) - anchor
        corners = boxes.reshape(-1, 3)
        # The door's direction out from the hinge: its farthest corner, projected off the axis.
        far = corners[int(np.argmax(np.linalg.norm(corners[:, :2], axis=1)))]
        d = far - (far @ axis) * axis
        d /= np.linalg.norm(d)
        v = np.cross(axis, d)  # where the door's points move as it closes
        # The outer face (the side opposite the motion) of the boxes spanning the contact radius: the
        # panel, not the handle bar sticking out near the free edge.
        r = self.geo.reach * self._width
        span = [(b @ d).min() <= r <= (b @ d).max() for b in boxes]
        outer = float((boxes[np.array(span)].reshape(-1, 3) @ v).min()) if any(span) else float((corners @ v).min())
        c, s = np.cos(ahead), np.sin(ahead)
        d2, v2 = c * d + s * v, c * v - s * d  # both turned about the axis by ``ahead``
        point = anchor + r * d2 + outer * v2
        point[2] = self._z
        return point, v2

    def _rotation(self, v: np.ndarray, flip: float | None = None) -> np.ndarray:
        """Grip-site rotation pushing along ``v``; ``flip`` (+-1) picks which finger is which (the one
        chosen at the start, nearer the hand's pose, unless given)."""
        approach = v * np.cos(self.geo.pitch) + DOWN * np.sin(self.geo.pitch)
        side = np.cross(v, [0.0, 0.0, 1.0])  # fingers side by side along the door face
        return grasp_rotation(side * (self._flip if flip is None else flip), approach)

    def _remaining(self) -> float:
        """How far the door still is from its closed limit (rad, >= 0)."""
        return self._sense * (self._closed_q - self._q())

    def _policy(self, obs: dict) -> np.ndarray:
        geo = self.geo
        eef = np.asarray(obs["robot0_eef_pos"], dtype=np.float64)
        if self._phase in ("over", "descend"):
            point, v = self._frame(0.0)
            start = point - v * geo.standoff
            r = self._rotation(v)
            if self._phase == "over":
                above = np.array([start[0], start[1], max(self._top, eef[2])])
                if float(np.linalg.norm((eef - above)[:2])) < 0.01 and self._rot_err(obs, r) < 0.15:
                    self._goto("descend")
                else:
                    return self._servo(obs, above, r, 1.0)
            if self._phase == "descend":
                to_go = float(np.linalg.norm(eef - start))
                if to_go < 0.008 or self._stalled(to_go):
                    self._goto("push")
                else:
                    return self._servo(obs, start, r, 1.0)
        if self._phase == "push":
            self._steps += 1
            remaining = self._remaining()
            if remaining < geo.closed_tol or self._steps > geo.max_steps:
                self._goto("back_off")
            else:
                # Past the closed limit the lead is clipped: the target stays on the closed door's face,
                # pressed a little beyond it.
                point, v = self._frame(min(geo.lead, remaining + 0.05))
                return self._servo(obs, point + v * 0.01, self._rotation(v), 1.0)
        if self._phase == "back_off":
            point, v = self._frame(0.0)
            away = point - v * geo.standoff
            if float(np.linalg.norm(eef - away)) < 0.01 or self._stalled(float(np.linalg.norm(eef - away))):
                self._goto("retreat")
            else:
                return self._servo(obs, away, self._rotation(v), 1.0)
        if self._phase in ("retreat", "done"):
            up = eef.copy()
            up[2] = self._top
            if abs(eef[2] - self._top) < 0.02:
                self._phase = "done"
            return self._servo(obs, up, self._site_rotation(obs), 1.0)
        raise RuntimeError(f"unknown phase {self._phase!r}")


def hinged_doors(raw_env) -> dict[str, str]:
    """Fixtures with exactly one hinge joint and a door body (the microwave) -> that hinge's name."""
    sim, inner = raw_env.sim, _problem(raw_env)
    m = sim.model
    doors: dict[str, str] = {}
    for name in getattr(inner, "fixtures_dict", {}):
        hinges = [j for j in range(m.njnt) if m.jnt_type[j] == 3 and (m.joint_id2name(j) or "").startswith(f"{name}_")]
        if len(hinges) == 1 and "door" in (m.body_id2name(m.jnt_bodyid[hinges[0]]) or ""):
            doors[name] = m.joint_id2name(hinges[0])
    return doors
