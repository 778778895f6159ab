"""Scripted expert for the LIBERO-Spatial tasks: pick up the black bowl, place it on the plate.

The expert uses privileged simulator state (object poses from the raw observation, collision
geometry from ``raw_env.sim`` at reset) and drives the default OSC_POSE controller:
action[0:3] is a world-frame end-effector translation (1.0 == 5 cm), action[3:6] a world-frame
axis-angle rotation (1.0 == 0.5 rad), action[6] the gripper (-1 open, +1 close).

Grasp strategy: the akita bowl is a thin-walled cylinder shell, so we pinch its wall with one
finger inside and one outside the bowl (closing axis radial, gripper pointing down). The rim
azimuth is chosen to maximise clearance of the outer finger and the hand from every other
collision geometry in the scene (other bowl, ramekin, cookie box, cabinet, table...), to keep
the wrist within comfortable reach, and, for a tilted bowl, to pinch where its wall is vertical.
It is re-chosen while the bowl is still settling, after a failed lift and after a stalled
approach. Measured: 100/100 on the official libero_spatial init states, ~100 steps each.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from robot_data.experts.primitives import collision_boxes, grasp_rotation, hand_to_site, mat_to_rotvec, quat_xyzw_to_mat

# OSC_POSE default output limits: a unit action moves the goal by this much (m, rad).
OSC_POS_SCALE = 0.05
OSC_ROT_SCALE = 0.5

PHASES = (
    "approach",  # fly to the hover pose above the chosen rim point, rotate the gripper
    "descend",  # go straight down until the fingers straddle the rim wall
    "close",  # close the gripper until the fingers stop moving
    "lift",  # raise the bowl, then check that it actually came up
    "regrasp",  # the bowl did not come up (or nothing is between the fingers): open, rise, retry
    "carry",  # fly the bowl over the plate at carry height
    "lower",  # lower until the bowl is just above the plate
    "release",  # open the gripper
    "retreat",  # move up and away
    "done",
)


@dataclass
class ExpertConfig:
    """Geometry, gains and timings of the scripted expert (lengths in m, angles in rad, steps)."""

    rim_radius: float = 0.047  # radius of the bowl wall at the rim (bowl frame)
    grasp_height: float = 0.037  # grip-site height above the bowl origin along the bowl axis
    hover_height: float = 0.08  # approach waypoint above the grasp point
    n_azimuths: int = 24  # rim azimuth candidates
    lift_z: float = 1.12  # world z of the grip site during the carry
    min_lift: float = 0.08  # ... and at least this much above the grasp height
    place_clearance: float = 0.012  # bowl origin above the plate origin at release
    pos_gain: float = 1.5  # action per (error / OSC_POS_SCALE); >1 shortens the controller tail
    rot_gain: float = 1.0  # action per (error / OSC_ROT_SCALE)
    approach_tol: float = 0.012  # xy distance to the grasp point that ends the approach
    rot_tol: float = 0.12  # orientation error that ends the approach / carry
    replan_shift: float = 0.01  # re-rank azimuths when the bowl moved this much since planning
    replan_tilt: float = 0.09  # ... or tilted this much (rad); objects may still settle
    preclose_height: float = 0.012  # start closing this far above the grasp point (fingers are slow)
    min_close_steps: int = 5
    max_close_steps: int = 16  # the Panda fingers need ~10 steps to travel 4 cm
    close_settle: float = 4e-4  # finger motion per step (m) below which the grip is settled
    empty_grip: float = 0.0015  # finger opening (m) below which nothing is between the fingers
    stall_steps: int = 8  # steps without progress that end a descent / lowering
    lift_check_rise: float = 0.04  # grip site rise at which the lift is verified
    bowl_rise_ratio: float = 0.5  # the bowl must rise at least this fraction of the gripper rise
    carry_tol: float = 0.012  # xy error (bowl vs plate) that starts the lowering
    slip_tol: float = 0.03  # bowl sagging this far below its grip height during the carry = dropped
    landed_tol: float = 0.03  # a dropped bowl this close (xy) to, and level with, its target has landed
    lower_tol: float = 0.008
    release_steps: int = 5
    max_regrasps: int = 3
    finger_reach: float = 0.045  # outer finger distance from the grip site when open
    clearance_cap: float = 0.06  # distances beyond this do not improve an azimuth's score
    slope_penalty: float = 2.0  # score cost per unit |z| of the wall normal at the grasp point
    reach_limit: float = 0.75  # comfortable shoulder-to-wrist distance of the Panda
    reach_penalty: float = 10.0  # score cost per metre beyond reach_limit
    wrist_height: float = 0.21  # wrist centre above the grip site when pointing down


class SpatialExpert:
    """Closed-loop state-machine expert for one LIBERO-Spatial episode.

    Contract: ``reset(raw_env, raw_obs)`` once per episode (after settling), then
    ``act(raw_obs) -> float32 [7]`` once per control step. ``phase`` names the current state
    (one of ``PHASES``). The ``rng`` is only consumed by subclasses that perturb the behaviour,
    so the plain expert is deterministic given the simulator state.
    """

    @property
    def perturbation_label(self) -> str:
        """The episode's label in the dataset: "none" for the clean expert."""
        return "none"

    def __init__(self, config: ExpertConfig | None = None, rng: np.random.Generator | None = None):
        self.cfg = config or ExpertConfig()
        self.rng = rng if rng is not None else np.random.default_rng(0)
        self._phase = "done"
        self._tried: list[float] = []

    @property
    def phase(self) -> str:
        return self._phase

    @property
    def regrasps(self) -> int:
        """Abandoned grasp attempts so far (failed grasps and stalled approaches)."""
        return max(len(self._tried) - 1, 0)

    # ------------------------------------------------------------------ planning
    def reset(self, raw_env, raw_obs: dict) -> None:
        """Read object names and geometry from the raw LIBERO env, then plan the first grasp."""
        self.bowl, self.plate = self._objects(raw_env)
        keys = ("robot0_eef_pos", "robot0_eef_quat", "robot0_gripper_qpos")
        for key in keys + tuple(f"{o}_{k}" for o in self._observed() for k in ("pos", "quat")):
            if key not in raw_obs:
                raise ValueError(f"raw observation lacks {key!r}; is this a LIBERO env?")
        sim = raw_env.sim
        self._r_hand_to_site = hand_to_site(sim, raw_obs)  # the grip site (= robot0_eef_pos) w.r.t. the hand
        self._boxes = self._obstacle_boxes(sim)
        self._grasp_shift = self._grasp_offset()
        # Panda shoulder (joint 2 axis); grasps far from it end at the workspace boundary.
        self._shoulder = np.array(sim.data.body_xpos[sim.model.body_name2id("robot0_link2")])
        self._tried = []
        self._phase, self._t_phase = "approach", 0
        self._history: list[float] = []  # progress signal for stall detection
        self._finger = 0.0
        self._grasp_eef_z = float(raw_obs["robot0_eef_pos"][2])
        self._bowl_z0 = float(raw_obs[f"{self.bowl}_pos"][2])
        self._lift_ok = False
        self._grip_dz = 0.0  # grip site above the bowl origin when the carry starts
        self._plan(raw_obs)

    def _objects(self, raw_env) -> tuple[str, str]:
        """(bowl, target) names; a hook for experts of other suites."""
        objs = list(raw_env.obj_of_interest)
        if len(objs) != 2:
            raise ValueError(f"expected (bowl, plate) objects of interest, got {objs}")
        return objs[0], objs[1]

    def _observed(self) -> tuple[str, ...]:
        """Objects whose pose the observation must carry (the target may be a fixture site)."""
        return (self.bowl, self.plate)

    def _obstacle_boxes(self, sim) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Oriented boxes of all collision geoms except the robot and the bowl itself.

        Returns centres [N, 3], rotations [N, 3, 3] and half sizes [N, 3] (world frame). All
        LIBERO objects are built from primitive collision geoms, so the boxes are tight.
        """
        boxes = collision_boxes(sim, exclude=(f"{self.bowl}_main",))  # the bowl's own body is the one it grasps
        return boxes.centres, boxes.rots, boxes.halves

    def _grasp_frame(self, obs: dict, azimuth: float) -> tuple[np.ndarray, np.ndarray, float]:
        """Grasp point [3] (world), horizontal outward unit [3] and wall slope for an azimuth.

        The point lives in the bowl frame, so a tilted bowl (task 5 leaves it leaning on the
        ramekin at ~50 deg) is pinched on its wall. The gripper always points straight down, so
        the wall must be near vertical there: ``slope`` = |z component| of the bowl-frame radial
        (0 for every azimuth of an upright bowl, 0 only at the two side points of a tilted one).
        """
        r_bowl = quat_xyzw_to_mat(obs[f"{self.bowl}_quat"])
        radial = r_bowl @ np.array([np.cos(azimuth), np.sin(azimuth), 0.0])
        radius = self.cfg.rim_radius + self._grasp_shift[0]
        height = self.cfg.grasp_height + self._grasp_shift[1]
        point = obs[f"{self.bowl}_pos"] + radius * radial + height * r_bowl[:, 2]
        horizontal = np.array([radial[0], radial[1], 0.0])
        return point, horizontal / max(np.linalg.norm(horizontal), 1e-6), float(abs(radial[2]))

    def _clearance(self, obs: dict, azimuth: float) -> float:
        """Soft clearance score of the gripper grasping at ``azimuth`` (higher is better)."""
        cfg = self.cfg
        point, radial, slope = self._grasp_frame(obs, azimuth)
        up = np.array([0.0, 0.0, 1.0])
        tangent = np.cross(up, radial)
        probes = [point + radial * cfg.finger_reach + up * h for h in np.linspace(-0.01, cfg.hover_height, 6)]
        # The hand is ~10 cm above the fingertips and ~20 cm wide along the closing axis.
        for h in (0.08, 0.12):
            for dr in (-0.08, 0.0, 0.08):
                for dt in (-0.03, 0.03):
                    probes.append(point + radial * dr + tangent * dt + up * h)
        points = np.array(probes)
        centres, rots, halves = self._boxes
        if len(centres) == 0:
            dist = np.full(len(points), cfg.clearance_cap)
        else:
            local = np.einsum("bji,pbj->pbi", rots, points[:, None, :] - centres[None])
            dist = np.linalg.norm(np.maximum(np.abs(local) - halves[None], 0.0), axis=-1).min(axis=1)
        # Capped sum: every probe near an obstacle costs, far ones are all equal. A slanted wall
        # squeezes out of vertical fingers, and rim points beyond the arm's comfortable reach
        # stall the approach at the workspace boundary.
        reach = np.linalg.norm(point + [0.0, 0.0, cfg.wrist_height] - self._shoulder)
        penalty = cfg.slope_penalty * slope + cfg.reach_penalty * max(0.0, reach - cfg.reach_limit)
        return float(np.minimum(dist, cfg.clearance_cap).sum() - penalty - 1e-3 * point[0])

    def _rank_azimuths(self, obs: dict) -> list[float]:
        """Candidate bowl-frame azimuths (rad), best first, skipping those already tried."""
        n = self.cfg.n_azimuths
        azimuths = [2 * np.pi * i / n for i in range(n)]
        fresh = [a for a in azimuths if all(abs(np.angle(np.exp(1j * (a - t)))) > 0.3 for t in self._tried)]
        candidates = fresh or azimuths
        scores = [self._clearance(obs, a) for a in candidates]
        order = np.argsort(-np.array(scores), kind="stable")
        return [candidates[i] for i in order]

    def _choose_azimuth(self, obs: dict) -> float:
        return self._rank_azimuths(obs)[0]

    def _plan(self, obs: dict) -> None:
        """Choose the grasp azimuth and which finger goes inside (closing-axis sign)."""
        self._azimuth = self._choose_azimuth(obs)
        self._plan_pos = np.array(obs[f"{self.bowl}_pos"])
        self._plan_axis = quat_xyzw_to_mat(obs[f"{self.bowl}_quat"])[:, 2]
        _, radial, _ = self._grasp_frame(obs, self._azimuth)
        # The two fingers are interchangeable: take the closing-axis sign nearer the current one.
        self._grip_x_sign = 1.0 if float(self._site_rotation(obs)[:, 0] @ radial) >= 0 else -1.0

    def _bowl_moved(self, obs: dict) -> bool:
        shift = np.linalg.norm(obs[f"{self.bowl}_pos"] - self._plan_pos)
        axis = quat_xyzw_to_mat(obs[f"{self.bowl}_quat"])[:, 2]
        tilt = np.arccos(np.clip(axis @ self._plan_axis, -1.0, 1.0))
        return bool(shift > self.cfg.replan_shift or tilt > self.cfg.replan_tilt)

    # ------------------------------------------------------------------ control
    def _site_rotation(self, obs: dict) -> np.ndarray:
        return quat_xyzw_to_mat(obs["robot0_eef_quat"]) @ self._r_hand_to_site

    def _grasp_rotation(self, obs: dict) -> np.ndarray:
        _, radial, _ = self._grasp_frame(obs, self._azimuth)
        return grasp_rotation(self._grip_x_sign * radial, np.array([0.0, 0.0, -1.0]))

    def _upright_rotation(self, obs: dict) -> np.ndarray:
        """Gripper pointing straight down, current closing axis: holds a rim-grasped bowl upright."""
        return grasp_rotation(self._site_rotation(obs)[:, 0], np.array([0.0, 0.0, -1.0]))

    def _rot_error(self, obs: dict, r_goal: np.ndarray) -> np.ndarray:
        return mat_to_rotvec(r_goal @ self._site_rotation(obs).T)

    def _servo(self, obs: dict, target: np.ndarray, r_goal: np.ndarray, gripper: float) -> np.ndarray:
        """Proportional pose servo -> action [7] in [-1, 1] (world-frame deltas, see module doc)."""
        action = np.zeros(7)
        action[:3] = np.clip(self.cfg.pos_gain * (target - obs["robot0_eef_pos"]) / OSC_POS_SCALE, -1, 1)
        action[3:6] = np.clip(self.cfg.rot_gain * self._rot_error(obs, r_goal) / OSC_ROT_SCALE, -1, 1)
        action[6] = gripper
        return action

    def _goto(self, phase: str) -> None:
        self._phase, self._t_phase = phase, 0
        self._history = []

    def _stalled(self, progress: float, steps: int | None = None) -> bool:
        """True when ``progress`` (a distance still to go) stopped shrinking for ``steps``."""
        self._history.append(progress)
        n = steps or self.cfg.stall_steps
        return len(self._history) > n and self._history[-n - 1] - progress < 0.002

    def act(self, raw_obs: dict) -> np.ndarray:
        """One control step: raw LIBERO observation -> action float32 [7] in [-1, 1]."""
        action = self._policy(raw_obs)
        self._t_phase += 1
        return np.clip(action, -1.0, 1.0).astype(np.float32)

    def _policy(self, obs: dict) -> np.ndarray:
        cfg = self.cfg
        eef = np.asarray(obs["robot0_eef_pos"], dtype=np.float64)
        bowl = np.asarray(obs[f"{self.bowl}_pos"], dtype=np.float64)
        plate = self._place_point(obs)
        carry_z = max(cfg.lift_z, self._grasp_eef_z + cfg.min_lift)

        if self._phase == "approach":
            if self._bowl_moved(obs):
                self._plan(obs)  # the bowl was still settling when we planned
            grasp, _, _ = self._grasp_frame(obs, self._azimuth)
            r_goal = self._grasp_rotation(obs)
            off_axis = np.linalg.norm((eef - grasp)[:2])
            target = grasp + [0.0, 0.0, cfg.hover_height]
            rot_err = np.linalg.norm(self._rot_error(obs, r_goal))
            progress = np.linalg.norm(target - eef) + 0.01 * rot_err  # 1 rad counts as 1 cm
            stalled = self._stalled(float(progress), 2 * cfg.stall_steps)
            if off_axis < cfg.approach_tol and eef[2] > grasp[2] and rot_err < cfg.rot_tol:
                self._goto("descend")
            elif stalled:
                # Stuck at the workspace boundary or against an obstacle: try the next azimuth.
                self._tried.append(self._azimuth)
                self._plan(obs)
                self._goto("approach")
                return self._servo(obs, eef + [0.0, 0.0, 0.02], self._site_rotation(obs), -1.0)
            else:
                if off_axis > 0.05:
                    # Stay high until roughly above the rim so the fingers never sweep objects.
                    target[2] = max(target[2], eef[2])
                return self._servo(obs, target, r_goal, -1.0)
        if self._phase == "descend":
            grasp, _, _ = self._grasp_frame(obs, self._azimuth)
            to_go = float(eef[2] - grasp[2])
            if to_go < cfg.preclose_height or self._stalled(to_go):
                self._finger = float(obs["robot0_gripper_qpos"][0])
                self._tried.append(self._azimuth)
                self._goto("close")
            else:
                return self._servo(obs, grasp, self._grasp_rotation(obs), -1.0)
        if self._phase == "close":
            grasp, _, _ = self._grasp_frame(obs, self._azimuth)
            finger = float(obs["robot0_gripper_qpos"][0])
            settled = abs(finger - self._finger) < cfg.close_settle
            self._finger = finger
            if (self._t_phase >= cfg.min_close_steps and settled) or self._t_phase >= cfg.max_close_steps:
                self._grasp_eef_z, self._bowl_z0 = float(eef[2]), float(bowl[2])
                self._r_grasp = self._site_rotation(obs)
                empty = finger < cfg.empty_grip
                self._goto("regrasp" if empty and self._can_retry() else "lift")
                return self._policy(obs)
            return self._servo(obs, grasp, self._grasp_rotation(obs), 1.0)
        if self._phase == "lift":
            rise = eef[2] - self._grasp_eef_z
            if not self._lift_ok and rise >= cfg.lift_check_rise:
                if bowl[2] - self._bowl_z0 < cfg.bowl_rise_ratio * rise and self._can_retry():
                    self._goto("regrasp")
                    return self._policy(obs)
                self._lift_ok = True
            if self._lift_ok and eef[2] > carry_z - 0.03:
                self._grip_dz = float(eef[2] - bowl[2])
                self._goto("carry")
            else:
                # Keep the grasp orientation until the bowl is clear, then swing it upright.
                r_goal = self._upright_rotation(obs) if self._lift_ok else self._r_grasp
                return self._servo(obs, np.array([eef[0], eef[1], carry_z]), r_goal, 1.0)
        if self._phase == "regrasp":
            if self._t_phase >= 6:
                self._lift_ok = False
                self._plan(obs)
                self._goto("approach")
                return self._policy(obs)
            return self._servo(obs, eef + [0.0, 0.0, 0.05], self._site_rotation(obs), -1.0)
        offset = eef - bowl  # keep the grasp offset while moving the bowl
        if self._phase == "carry":
            r_goal = self._upright_rotation(obs)
            upright = np.linalg.norm(self._rot_error(obs, r_goal)) < cfg.rot_tol
            dropped = offset[2] - self._grip_dz > cfg.slip_tol
            if dropped and self._landed(bowl, plate):
                # It slipped out just short of the target and came to rest there (seen in a drawer):
                # chasing it with the grasp offset would fly the open hand away for the rest of the episode.
                self._goto("release")
            elif np.linalg.norm((plate - bowl)[:2]) < cfg.carry_tol and upright:
                self._goto("lower")
            else:
                target = np.array([plate[0] + offset[0], plate[1] + offset[1], carry_z])
                return self._servo(obs, target, r_goal, 1.0)
        if self._phase == "lower":
            height = float(bowl[2] - plate[2])
            if height < cfg.place_clearance + cfg.lower_tol or self._stalled(height):
                self._goto("release")
            else:
                target = plate + offset + [0.0, 0.0, cfg.place_clearance]
                return self._servo(obs, target, self._upright_rotation(obs), 1.0)
        if self._phase == "release":
            if self._t_phase >= cfg.release_steps:
                self._goto("retreat")
            else:
                return self._servo(obs, eef, self._upright_rotation(obs), -1.0)
        if self._phase in ("retreat", "done"):
            if eef[2] > carry_z - 0.02:
                self._phase = "done"
            return self._servo(obs, np.array([eef[0], eef[1], carry_z]), self._upright_rotation(obs), -1.0)
        raise RuntimeError(f"unknown phase {self._phase!r}")

    # Hooks for perturbed experts.
    def _grasp_offset(self) -> np.ndarray:
        """(radial, height) offset [2] (m) of the grasp point from the nominal rim pinch."""
        return np.zeros(2)

    def _place_point(self, obs: dict) -> np.ndarray:
        """Where the bowl origin should end up [3] (world): the plate origin."""
        return np.asarray(obs[f"{self.plate}_pos"], dtype=np.float64)

    def _landed(self, bowl: np.ndarray, target: np.ndarray) -> bool:
        """Whether a dropped bowl (origin [3]) lies at its target (point [3]): near in xy, at placing height."""
        cfg = self.cfg
        near = float(np.linalg.norm((target - bowl)[:2])) < cfg.landed_tol
        return near and abs(float(bowl[2] - target[2])) < cfg.place_clearance + cfg.landed_tol

    def _can_retry(self) -> bool:
        return len(self._tried) <= self.cfg.max_regrasps
