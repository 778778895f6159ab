"""Placements of the LIBERO-10 expert beyond the Goal expert's (``robot_data/experts/long.py`` chooses them):
an item grasped by its handle (``HandlePlace``: the moka pot, wider than the open gripper), a drop into one
compartment of a container (``CompartmentPlace``: the caddy's back one), and an item put inside a fixture with
a door and a roof through its open side (``InsertPlace``: the mug into the microwave).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from robot_data.experts.goal import (
    ItemPlace,
    Locate,
    UnsupportedGoal,
)
from robot_data.experts.object import ObjectExpertConfig
from robot_data.experts.primitives import (
    Boxes,
    collision_boxes,
    container_drop,
    grasp_rotation,
    planar_turn,
    side_opening,
)
from robot_data.experts.skills import DOWN


class HandlePlace(ItemPlace):
    """Top-grasp an item by its handle (the moka pot) and place it like ``ItemPlace``.

    The pot's top (lid knob, spout, handle) is wider than the open gripper, and its rim is no
    dish rim, but the handle's loop is a narrow bar sticking out of the body: the grasp is planned
    on the collision boxes whose centres lie ``reach`` or more from the item's origin; the carry
    and lowering heights still come from the whole item.
    """

    def __init__(self, item: str, target: str, locate: Locate | None, config: ObjectExpertConfig, reach: float):
        super().__init__(item, target, locate, config)
        self._reach = reach
        self._handle_local: np.ndarray | None = None

    def reset(self, raw_env, raw_obs: dict) -> None:
        pos, rot = self._pose(raw_obs, self._names[0])
        boxes = collision_boxes(raw_env.sim, include=(f"{self._names[0]}_",))
        far = np.linalg.norm((boxes.centres - self._hub(boxes, pos))[:, :2], axis=1) >= self._reach
        if not far.any():
            raise UnsupportedGoal(f"{self._names[0]!r} has no handle to grasp")
        handle = Boxes(boxes.centres[far], boxes.rots[far], boxes.halves[far])
        self._handle_local = (handle.corners() - pos) @ rot
        super().reset(raw_env, raw_obs)

    def _hub(self, boxes: Boxes, pos: np.ndarray) -> np.ndarray:
        """The point [3] the handle sticks out from: the item's origin (the moka pot's is its body's axis)."""
        return pos

    def _plan(self, obs: dict) -> None:
        assert self._handle_local is not None
        whole = self._local_corners
        self._local_corners = self._handle_local
        try:
            super()._plan(obs)
        finally:
            self._local_corners = whole
        pos, rot = self._pose(obs, self.item)
        grip_z = float((pos + rot @ self._grasp_local)[2])
        world = pos + whole @ rot.T
        self._top_above = float(world[:, 2].max()) - grip_z
        self._bottom_below = grip_z - float(world[:, 2].min())


class CompartmentPlace(ItemPlace):
    """``ItemPlace`` into one compartment of a container (the desk caddy's back one).

    The drop point is the compartment's site, floor and rim come from the container's boxes
    there (the container's own containment region would be the wrong compartment).
    """

    def __init__(self, item: str, container: str, site: str, config: ObjectExpertConfig):
        super().__init__(item, container, None, config)
        self._site = site

    def _drop_target(self, sim) -> tuple[np.ndarray, float, float]:
        xy = np.array(sim.data.site_xpos[sim.model.site_name2id(self._site)][:2])
        floor, rim = container_drop(collision_boxes(sim, include=(f"{self._names[1]}_",)), xy)
        return xy, floor, rim


@dataclass
class InsertConfig:
    """Geometry of a placement through an enclosure's open side (m, rad)."""

    stage: float = 0.12  # the item is lowered this far outside the roof's front edge
    lift: float = 0.015  # item's lowest point above the enclosure floor while sliding it in
    hand_margin: float = 0.008  # the hand stops this far outside the roof's front edge
    hand_half: tuple[float, float] = (0.105, 0.032)  # the hand's half extents along / across its closing axis
    push_height: float = 0.035  # grip site above the floor while pushing the item deeper
    push_standoff: float = 0.04  # grip site outside the item's outermost point before pushing
    push_step: float = 0.03  # how far ahead of itself the pusher is servoed each step
    pitch: float = 0.785  # pusher tilt below the push direction (the hand trails outside, under no roof)
    depth_tol: float = 0.01  # the item origin this near its goal depth ends the push
    handle_reach: float = 0.07  # the handle's outer bar lies this far or more from the centroid of the item's boxes
    door_margin: float = 0.015  # the pushed item ends up this far inside the roof's front edge (the door's plane)


class InsertPlace(HandlePlace):
    """Put an item into an enclosure with a roof through its open side (the mug into the microwave).

    A top grasp cannot lower an item under a roof, and the hand (10 cm tall above the grip) does
    not fit inside. So the item is grasped by its handle (``HandlePlace``; the mug's origin is off
    its body's axis, so the handle is what sticks out of the boxes' centroid) across the handle's
    loop, turned about the vertical so that the body lies inward of the grip (the hand's narrow
    side then faces the opening, and the body goes in the deepest), lowered outside the opening to just above
    the enclosure floor, slid in until the hand reaches the roof's front edge and set down. Then
    the closed fingertips, tilted so that the hand trails outside, push it in to the region's
    centre: deep enough for the region (LIBERO's In() checks the item's origin) and clear of the
    door's swing. The opening, floor, roof and side walls come from the fixture's static boxes
    (``side_opening``).
    """

    MINE = ("carry", "lower", "insert", "settle", "release", "rise", "line_up", "push", "back_off", "retreat", "done")

    def __init__(self, item: str, site: str, parent: str, config: ObjectExpertConfig, geometry: InsertConfig):
        super().__init__(item, site, None, config, geometry.handle_reach)
        self._site, self._parent = site, parent
        self.geo = geometry
        self._yaw: np.ndarray | None = None  # the grip rotation for the carry, set when the carry starts
        self._flip: float | None = None  # finger order of the tilted push, set when it starts

    def reset(self, raw_env, raw_obs: dict) -> None:
        sim = raw_env.sim
        m = sim.model
        joints = [j for j in range(m.njnt) if (m.joint_id2name(j) or "").startswith(f"{self._parent}_")]
        moving = tuple(m.body_id2name(m.jnt_bodyid[j]) for j in joints)
        boxes = collision_boxes(sim, include=(f"{self._parent}_",), exclude=moving)  # the door swings: not a wall
        s = m.site_name2id(self._site)
        centre = np.array(sim.data.site_xpos[s])
        try:
            self._open = side_opening(boxes, centre, np.array(sim.data.site_xmat[s]).reshape(3, 3))
        except ValueError as err:
            raise UnsupportedGoal(f"{self._site!r}: {err}") from None
        op = self._open
        self._goal_s = float(centre @ op.inward)
        # Across the opening: its middle, unless the hand (10.5 cm to either side of the grip along its
        # closing axis, which runs across) would then hit the open door standing in front of it.
        item = collision_boxes(sim, include=(f"{self._names[0]}_",)).corners()
        pos = np.asarray(raw_obs[f"{self._names[0]}_pos"], dtype=np.float64)
        reach = float(np.abs((item - pos) @ op.across).max())
        walls = (op.middle - op.width / 2 + reach, op.middle + op.width / 2 - reach)
        corners = collision_boxes(sim, include=moving).corners() if moving else np.zeros((0, 3))
        door = corners[corners @ op.inward < op.front] @ op.across  # the door's part in front of the opening
        middle = op.middle
        half = self.geo.hand_half[0] + self.geo.hand_margin
        if len(door) and door.min() < middle + half and door.max() > middle - half:
            middle = door.max() + half if door.mean() < middle else door.min() - half
        self._middle = float(np.clip(middle, *walls)) if walls[0] <= walls[1] else op.middle
        self._goal = op.inward * self._goal_s + op.across * self._middle  # xy of the item origin at the end
        self._stage = op.inward * (op.front - self.geo.stage) + op.across * self._middle
        self._yaw, self._flip, self._sim = None, None, sim
        super().reset(raw_env, raw_obs)

    def _hub(self, boxes: Boxes, pos: np.ndarray) -> np.ndarray:
        return boxes.centres.mean(axis=0)

    def _plan(self, obs: dict) -> None:
        super()._plan(obs)
        # Close across the handle (perpendicular to the line from the body to it), not along that line
        # where the bar is thinnest: the hand's long side then runs along the opening, not into it.
        pos, rot = self._pose(obs, self.item)
        radial = (rot @ self._grasp_local - (self._local_corners @ rot.T).mean(axis=0))[:2]
        if float(np.linalg.norm(radial)) > 1e-6:
            axis = np.array([-radial[1], radial[0], 0.0]) / float(np.linalg.norm(radial))
            # Of the two (equivalent) finger orders, the one that keeps the wrist's total turn small: to the
            # grasp, then on by the carry's turn that brings the body inward of the grip.
            phi = planar_turn(-radial, self._open.inward[:2])
            current = self._site_rotation(obs)[:, 0]
            turn = planar_turn(current[:2], axis[:2])
            options = [turn, float(np.angle(np.exp(1j * (turn + np.pi))))]
            best = min(options, key=lambda t: max(abs(t), abs(t + phi)))
            self._axis_local = (axis if best == turn else -axis) @ rot

    def _drop_target(self, sim) -> tuple[np.ndarray, float, float]:
        # Carry just above the enclosure floor's height: nothing taller stands in the way.
        return self._goal[:2], self._open.floor, self._open.floor

    def _bottom(self, obs: dict) -> float:
        """The held item's lowest point z, from its collision boxes now: held by the handle, the body sags
        (2 cm for the mug), which the grip height alone does not show."""
        return float(collision_boxes(self._sim, include=(f"{self.item}_",)).corners()[:, 2].min())

    def _outermost(self) -> float:
        """The item's outermost point along the inward direction (m), from its collision boxes now."""
        return float((collision_boxes(self._sim, include=(f"{self.item}_",)).corners() @ self._open.inward).min())

    def _hand_limit(self, obs: dict) -> float:
        """The deepest grip-site coordinate along the inward direction that keeps the hand outside the roof."""
        r, inward = self._site_rotation(obs), self._open.inward
        half = self.geo.hand_half[0] * abs(r[:, 0] @ inward) + self.geo.hand_half[1] * abs(r[:, 1] @ inward)
        return self._open.front - half - self.geo.hand_margin

    def _policy(self, obs: dict) -> np.ndarray:
        if self._phase not in self.MINE:
            return super()._policy(obs)
        cfg, geo, op = self.cfg, self.geo, self._open
        eef = np.asarray(obs["robot0_eef_pos"], dtype=np.float64)
        item = np.asarray(obs[f"{self.item}_pos"], dtype=np.float64)
        held = eef - item  # the in-hand offset (m, world)
        if self._phase == "carry" and self._yaw is None:
            # Turn the item about the vertical until it lies inward of the grip.
            off = -held[:2]
            phi = planar_turn(off, op.inward[:2]) if float(np.linalg.norm(off)) > 0.01 else 0.0
            c, s_ = np.cos(phi), np.sin(phi)
            self._yaw = np.array([[c, -s_, 0.0], [s_, c, 0.0], [0.0, 0.0, 1.0]]) @ self._r_hold
        r_carry = self._yaw if self._yaw is not None else self._r_hold
        if self._phase == "carry":
            target = np.array([*(self._stage[:2] + held[:2]), self._carry_z()])
            if float(np.linalg.norm(item[:2] - self._stage[:2])) < cfg.carry_tol and self._rot_err(obs, r_carry) < 0.1:
                self._goto("lower")
            else:
                return self._servo(obs, target, r_carry, 1.0)
        if self._phase == "lower":
            to_go = self._bottom(obs) - (op.floor + geo.lift)
            if abs(to_go) < 0.004 or self._stalled(abs(to_go)):
                self._goto("insert")
            else:
                return self._servo(obs, np.array([*(self._stage[:2] + held[:2]), eef[2] - to_go]), r_carry, 1.0)
        if self._phase == "insert":
            s_eef = min(self._goal_s + float(held @ op.inward), self._hand_limit(obs))
            target = eef + op.inward * (s_eef - float(eef @ op.inward))
            target += op.across * (self._middle - float(item @ op.across))
            target[2] += op.floor + geo.lift - self._bottom(obs)  # keep the sagging body off the floor's front edge
            if abs(s_eef - float(eef @ op.inward)) < 0.005 or self._stalled(abs(s_eef - float(eef @ op.inward))):
                self._goto("settle")
            else:
                return self._servo(obs, target, r_carry, 1.0)
        if self._phase == "settle":
            to_go = self._bottom(obs) - (op.floor + 0.003)
            if to_go < 0.003 or self._stalled(to_go):
                self._goto("release")
            else:
                return self._servo(obs, eef - [0.0, 0.0, to_go], r_carry, 1.0)
        if self._phase == "release":
            if self._t >= cfg.release_steps:
                self._goto("rise")
            else:
                return self._servo(obs, eef, r_carry, -1.0)
        if self._phase == "rise":
            # Straight up (the hand is outside the roof), out of the handle, then tilt for the push.
            if eef[2] > op.roof + 0.03 or self._stalled(float(eef[2])):
                self._goto("line_up")
            else:
                return self._servo(obs, np.array([eef[0], eef[1], op.roof + 0.04]), r_carry, -1.0)
        tilted = op.inward * np.cos(geo.pitch) + DOWN * np.sin(geo.pitch)
        if self._flip is None:  # the finger order nearer the hand's pose: the least wrist turn
            self._flip = min((1.0, -1.0), key=lambda f: self._rot_err(obs, grasp_rotation(f * op.across, tilted)))
        flip = self._flip
        r_push = grasp_rotation(flip * op.across, tilted)
        near = self._outermost()
        depth = float(item @ op.inward)
        # In far enough: clear of the door's plane (the roof's front edge), or at the region's centre.
        inside = near >= op.front + geo.door_margin or depth >= self._goal_s - geo.depth_tol
        if self._phase == "line_up":
            start = op.inward * (near - geo.push_standoff) + op.across * float(item @ op.across)
            start[2] = op.floor + geo.push_height
            miss = float(np.linalg.norm((eef - start)[:2]))
            if inside:
                self._goto("back_off")
            elif miss < 0.01 and eef[2] - start[2] < 0.006 and self._rot_err(obs, r_push) < 0.15:
                self._goto("push")
            else:
                if miss > 0.01 or self._rot_err(obs, r_push) > 0.15:
                    start[2] = max(eef[2], op.floor + geo.push_height + 0.08)  # turn and line up above the table
                return self._servo(obs, start, r_push, 1.0)
        if self._phase == "push":
            if inside or self._stalled(self._goal_s - depth, 2 * cfg.stall_steps):
                self._goto("back_off")
            else:
                target = eef + op.inward * geo.push_step  # a steady advance, back onto the item's line
                target += op.across * (float(item @ op.across) - float(eef @ op.across))
                target[2] = op.floor + geo.push_height
                return self._servo(obs, target, r_push, 1.0)
        if self._phase == "back_off":
            away = op.front - geo.stage
            if float(eef @ op.inward) < away + 0.01 or self._stalled(float(eef @ op.inward)):
                self._goto("retreat")
            else:
                return self._servo(obs, eef + op.inward * (away - float(eef @ op.inward)), r_push, 1.0)
        if self._phase in ("retreat", "done"):
            # Up, pointing the gripper down again: the next skill (the door push) starts from the usual pose
            # rather than a tilted wrist that leaves the arm no room to reach down by the door.
            top = op.roof + 0.08
            r_down = grasp_rotation(flip * op.across, DOWN)
            if eef[2] > top - 0.02 and self._rot_err(obs, r_down) < 0.15:
                self._phase = "done"
            return self._servo(obs, np.array([eef[0], eef[1], top]), r_down, 1.0)
        raise RuntimeError(f"unknown phase {self._phase!r}")
