"""Scripted expert for the LIBERO-Spatial tasks: pick up the black bowl, place it on the plate.

The expert uses privileged simulator state (object poses from the raw observation, collision
geometry from ``raw_env.sim`` at reset) and drives the default OSC_POSE controller:
action[0:3] is a world-frame end-effector translation (1.0 == 5 cm), action[3:6] a world-frame
axis-angle rotation (1.0 == 0.5 rad), action[6] the gripper (-1 open, +1 close).

Grasp strategy: the akita bowl is a thin-walled cylinder shell, so we pinch its wall with one
finger inside and one outside the bowl (closing axis radial, gripper pointing down). The rim
azimuth is chosen at reset to maximise clearance of the outer finger and the hand from every
other collision geometry in the scene (other bowl, ramekin, cookie box, cabinet, stove...).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

# OSC_POSE default output limits: a unit action moves the goal by this much (m, rad).
OSC_POS_SCALE = 0.05
OSC_ROT_SCALE = 0.5

PHASES = (
    "approach",  # fly to the hover pose above the chosen rim point, rotate the gripper
    "descend",  # go straight down until the fingers straddle the rim wall
    "close",  # close the gripper for a fixed number of steps
    "lift",  # raise the bowl, then check that it actually came up
    "regrasp",  # the bowl did not come up: open, rise, retry at the next azimuth
    "carry",  # fly the bowl over the plate at carry height
    "lower",  # lower until the bowl is just above the plate
    "release",  # open the gripper
    "retreat",  # move up and away
    "done",
)


@dataclass
class ExpertConfig:
    """Geometry, gains and timings of the scripted expert (lengths in m, angles in rad)."""

    rim_radius: float = 0.047  # radius of the bowl wall at the rim (bowl frame)
    grasp_height: float = 0.037  # grip-site height above the bowl origin when pinching the rim
    hover_height: float = 0.08  # approach waypoint above the grasp point
    n_azimuths: int = 24  # rim azimuth candidates
    lift_z: float = 1.12  # world z of the grip site during the carry
    min_lift: float = 0.08  # ... and at least this much above the grasp height
    place_clearance: float = 0.012  # bowl origin above the plate origin at release
    pos_gain: float = 1.5  # action per (error / OSC_POS_SCALE); >1 shortens the controller tail
    rot_gain: float = 1.0  # action per (error / OSC_ROT_SCALE)
    approach_tol: float = 0.012  # xy error that ends the approach
    rot_tol: float = 0.12  # orientation error that ends the approach
    preclose_height: float = 0.012  # start closing this far above the grasp point (fingers are slow)
    min_close_steps: int = 5
    max_close_steps: int = 16  # the Panda fingers need ~10 steps to travel 4 cm
    close_settle: float = 4e-4  # finger motion per step (m) below which the grip is settled
    lift_check_rise: float = 0.04  # grip site rise at which the lift is verified
    bowl_rise_ratio: float = 0.5  # the bowl must rise at least this fraction of the gripper rise
    carry_tol: float = 0.015  # xy error (bowl vs plate) that starts the lowering
    lower_tol: float = 0.01
    release_steps: int = 6
    max_regrasps: int = 3
    finger_reach: float = 0.045  # outer finger distance from the grip site when open
    clearance_cap: float = 0.06  # distances beyond this do not improve an azimuth's score


def quat_xyzw_to_mat(q: np.ndarray) -> np.ndarray:
    """Unit quaternion (x, y, z, w) -> rotation matrix [3, 3]."""
    x, y, z, w = np.asarray(q, dtype=np.float64) / np.linalg.norm(q)
    return np.array(
        [
            [1 - 2 * (y * y + z * z), 2 * (x * y - z * w), 2 * (x * z + y * w)],
            [2 * (x * y + z * w), 1 - 2 * (x * x + z * z), 2 * (y * z - x * w)],
            [2 * (x * z - y * w), 2 * (y * z + x * w), 1 - 2 * (x * x + y * y)],
        ]
    )


def mat_to_rotvec(r: np.ndarray) -> np.ndarray:
    """Rotation matrix [3, 3] -> axis-angle vector [3] (rad), robust near 0 and pi."""
    cos = np.clip((np.trace(r) - 1.0) / 2.0, -1.0, 1.0)
    angle = float(np.arccos(cos))
    if angle < 1e-6:
        return np.zeros(3)
    if np.pi - angle < 1e-3:
        # sin(angle) ~ 0, R ~ 2 a a^T - I: read the axis from the symmetric part instead.
        k = int(np.argmax(np.diag(r)))
        axis = r[k] + np.eye(3)[k]  # = 2 a_k a
        return angle * axis / np.linalg.norm(axis)
    axis = np.array([r[2, 1] - r[1, 2], r[0, 2] - r[2, 0], r[1, 0] - r[0, 1]]) / (2.0 * np.sin(angle))
    return angle * axis


def grasp_rotation(radial: np.ndarray) -> np.ndarray:
    """Grip-site rotation [3, 3]: x (closing axis) = ``radial`` (horizontal), z pointing down."""
    x = np.array([radial[0], radial[1], 0.0])
    x /= np.linalg.norm(x)
    z = np.array([0.0, 0.0, -1.0])
    return np.stack([x, np.cross(z, x), z], axis=1)


class SpatialExpert:
    """Closed-loop state-machine expert for one LIBERO-Spatial episode.

    Contract: ``reset(raw_env, raw_obs)`` once per episode (after settling), then
    ``act(raw_obs) -> float32 [7]`` once per control step. ``phase`` names the current state.
    The ``rng`` is only consumed by subclasses that perturb the behaviour, so the plain expert
    is deterministic given the simulator state.
    """

    def __init__(self, config: ExpertConfig | None = None, rng: np.random.Generator | None = None):
        self.cfg = config or ExpertConfig()
        self.rng = rng if rng is not None else np.random.default_rng(0)
        self._phase = "done"

    # ------------------------------------------------------------------ planning
    @property
    def phase(self) -> str:
        return self._phase

    @property
    def regrasps(self) -> int:
        return self._attempt

    def reset(self, raw_env, raw_obs: dict) -> None:
        """Read object names and geometry from the raw LIBERO env, rank grasp azimuths."""
        objs = list(raw_env.obj_of_interest)
        if len(objs) != 2:
            raise ValueError(f"expected (bowl, plate) objects of interest, got {objs}")
        self.bowl, self.plate = objs
        for key in ("robot0_eef_pos", "robot0_eef_quat", f"{self.bowl}_pos", f"{self.plate}_pos"):
            if key not in raw_obs:
                raise ValueError(f"raw observation lacks {key!r}; is this a LIBERO env?")
        sim = raw_env.sim
        # robot0_eef_quat is the hand body; the grip site (= robot0_eef_pos) is rotated w.r.t. it.
        # The fixed offset lets act() work from the observation alone.
        site = sim.model.site_name2id("gripper0_grip_site")
        r_site = np.array(sim.data.site_xmat[site]).reshape(3, 3)
        self._r_hand_to_site = quat_xyzw_to_mat(raw_obs["robot0_eef_quat"]).T @ r_site
        self._azimuths = self._rank_azimuths(sim, raw_obs)
        self._attempt = 0
        self._phase = "approach"
        self._t_phase = 0
        self._bowl_z0 = float(raw_obs[f"{self.bowl}_pos"][2])
        self._grasp_eef_z = 0.0
        self._grip_x_sign = 1.0
        self._lift_ok = False
        self._finger = 0.0
        self._select_grasp(raw_obs)

    def _rim_point(self, obs: dict, azimuth: float) -> tuple[np.ndarray, np.ndarray]:
        """World grasp point [3] and outward radial unit vector [3] for a bowl-frame azimuth."""
        r_bowl = quat_xyzw_to_mat(obs[f"{self.bowl}_quat"])
        local = np.array([self.cfg.rim_radius * np.cos(azimuth), self.cfg.rim_radius * np.sin(azimuth), 0.0])
        point = obs[f"{self.bowl}_pos"] + r_bowl @ local
        # Height is taken along world z so a tilted bowl is still pinched at its top.
        point[2] = obs[f"{self.bowl}_pos"][2] + self.cfg.grasp_height + (r_bowl @ local)[2]
        radial = r_bowl @ local
        radial[2] = 0.0
        return point, radial / np.linalg.norm(radial)

    def _obstacle_boxes(self, sim) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
        """Oriented boxes (centre [3], rotation [3,3], half sizes [3]) of obstacle collision geoms."""
        m, d = sim.model, sim.data
        bowl_body = m.body_name2id(f"{self.bowl}_main")
        boxes = []
        for g in range(m.ngeom):
            body = m.geom_bodyid[g]
            name = m.body_id2name(body) or ""
            if body == bowl_body or name in ("world", "table") or name.startswith(("robot0", "gripper0", "mount0")):
                continue
            if m.geom_contype[g] == 0 and m.geom_conaffinity[g] == 0:
                continue  # visual-only mesh
            rot = np.array(d.geom_xmat[g]).reshape(3, 3)
            aabb = np.array(m.geom_aabb[g])  # local centre (3) + half sizes (3)
            boxes.append((np.array(d.geom_xpos[g]) + rot @ aabb[:3], rot, aabb[3:]))
        return boxes

    def _rank_azimuths(self, sim, obs: dict) -> list[float]:
        """Bowl-frame azimuths sorted by decreasing clearance of the gripper at that rim point."""
        cfg = self.cfg
        boxes = self._obstacle_boxes(sim)
        centres = np.stack([b[0] for b in boxes]) if boxes else np.zeros((0, 3))
        rots = np.stack([b[1] for b in boxes]) if boxes else np.zeros((0, 3, 3))
        halves = np.stack([b[2] for b in boxes]) if boxes else np.zeros((0, 3))
        scores = []
        azimuths = np.arange(cfg.n_azimuths) * 2 * np.pi / cfg.n_azimuths
        for az in azimuths:
            point, radial = self._rim_point(obs, az)
            tangent = np.array([-radial[1], radial[0], 0.0])
            probes = []
            # Outer finger along its whole descent path, then the hand (wider, ~10 cm higher).
            for dz in np.linspace(-0.01, cfg.hover_height, 6):
                probes.append(point + radial * cfg.finger_reach + [0, 0, dz])
            for dz in (0.08, 0.12):
                for dr in (-0.08, 0.0, 0.08):
                    for dt in (-0.03, 0.03):
                        probes.append(point + radial * dr + tangent * dt + [0, 0, dz])
            probes = np.array(probes)
            if len(boxes):
                local = np.einsum("bji,pbj->pbi", rots, probes[:, None, :] - centres[None])
                dist = np.linalg.norm(np.maximum(np.abs(local) - halves[None], 0.0), axis=-1).min(axis=1)
            else:
                dist = np.full(len(probes), cfg.clearance_cap)
            # Capped sum: every probe close to an obstacle costs, far ones are all equal. The
            # small term prefers rim points facing the robot (shorter reach, fewer wrist flips).
            scores.append(np.minimum(dist, cfg.clearance_cap).sum() - 1e-3 * point[0])
        order = np.argsort(-np.array(scores), kind="stable")
        return [float(azimuths[i]) for i in order]

    def _select_grasp(self, obs: dict) -> None:
        self._azimuth = self._azimuths[self._attempt % len(self._azimuths)]
        _, radial = self._rim_point(obs, self._azimuth)
        # The two fingers are interchangeable: pick the closing-axis sign nearer the current yaw.
        r_cur = self._site_rotation(obs)
        self._grip_x_sign = 1.0 if float(r_cur[:, 0] @ radial) >= 0 else -1.0

    # ------------------------------------------------------------------ control
    def _site_rotation(self, obs: dict) -> np.ndarray:
        return quat_xyzw_to_mat(obs["robot0_eef_quat"]) @ self._r_hand_to_site

    def _goal_rotation(self, obs: dict) -> np.ndarray:
        _, radial = self._rim_point(obs, self._azimuth)
        return grasp_rotation(self._grip_x_sign * radial)

    def _servo(self, obs: dict, target: np.ndarray, r_goal: np.ndarray, gripper: float) -> np.ndarray:
        """Proportional pose servo -> action [7] in [-1, 1]."""
        pos_err = target - obs["robot0_eef_pos"]
        rot_err = mat_to_rotvec(r_goal @ self._site_rotation(obs).T)
        action = np.zeros(7)
        action[:3] = np.clip(self.cfg.pos_gain * pos_err / OSC_POS_SCALE, -1.0, 1.0)
        action[3:6] = np.clip(self.cfg.rot_gain * rot_err / OSC_ROT_SCALE, -1.0, 1.0)
        action[6] = gripper
        return action

    def _goto(self, phase: str) -> None:
        self._phase = phase
        self._t_phase = 0

    def act(self, raw_obs: dict) -> np.ndarray:
        """One control step: raw LIBERO observation -> action float32 [7]."""
        action = self._policy(raw_obs)
        self._t_phase += 1
        return action.astype(np.float32)

    def _policy(self, obs: dict) -> np.ndarray:
        cfg = self.cfg
        eef = obs["robot0_eef_pos"]
        bowl = obs[f"{self.bowl}_pos"]
        plate = obs[f"{self.plate}_pos"]
        grasp, _ = self._rim_point(obs, self._azimuth)
        r_goal = self._goal_rotation(obs)
        hover = grasp + [0.0, 0.0, cfg.hover_height]
        carry_z = max(cfg.lift_z, self._grasp_eef_z + cfg.min_lift)

        if self._phase == "approach":
            rot_err = np.linalg.norm(mat_to_rotvec(r_goal @ self._site_rotation(obs).T))
            if np.linalg.norm((hover - eef)[:2]) < cfg.approach_tol and rot_err < cfg.rot_tol:
                self._goto("descend")
            else:
                # Stay high until roughly above the rim so the fingers never sweep through objects.
                target = hover.copy()
                target[2] = max(hover[2], eef[2]) if np.linalg.norm((hover - eef)[:2]) > 0.05 else hover[2]
                return self._servo(obs, target, r_goal, -1.0)
        if self._phase == "descend":
            if eef[2] - grasp[2] < cfg.preclose_height:
                self._finger = float(obs["robot0_gripper_qpos"][0])
                self._goto("close")
            else:
                return self._servo(obs, grasp, r_goal, -1.0)
        if self._phase == "close":
            finger = float(obs["robot0_gripper_qpos"][0])
            settled = abs(finger - self._finger) < cfg.close_settle
            self._finger = finger
            if (self._t_phase >= cfg.min_close_steps and settled) or self._t_phase >= cfg.max_close_steps:
                self._grasp_eef_z = float(eef[2])
                self._bowl_z0 = float(bowl[2])
                self._goto("lift")
            else:
                return self._servo(obs, grasp, r_goal, 1.0)
        if self._phase == "lift":
            rise = eef[2] - self._grasp_eef_z
            if rise >= cfg.lift_check_rise and self._t_phase > 0 and not self._lift_ok:
                if bowl[2] - self._bowl_z0 < cfg.bowl_rise_ratio * rise and self._attempt < cfg.max_regrasps:
                    self._attempt += 1
                    self._goto("regrasp")
                    return self._servo(obs, eef + [0, 0, 0.05], self._site_rotation(obs), -1.0)
                self._lift_ok = True
            if self._lift_ok and eef[2] > carry_z - 0.03:
                self._goto("carry")
            else:
                target = np.array([eef[0], eef[1], carry_z])
                return self._servo(obs, target, self._site_rotation(obs), 1.0)
        if self._phase == "regrasp":
            if self._t_phase >= 6:
                self._lift_ok = False
                self._select_grasp(obs)
                self._goto("approach")
                return self._policy(obs)
            return self._servo(obs, eef + [0, 0, 0.05], self._site_rotation(obs), -1.0)
        offset = eef - bowl  # keep the grasp offset while moving the bowl
        if self._phase == "carry":
            target = np.array([plate[0] + offset[0], plate[1] + offset[1], carry_z])
            if np.linalg.norm((plate - bowl)[:2]) < cfg.carry_tol:
                self._goto("lower")
            else:
                return self._servo(obs, target, self._site_rotation(obs), 1.0)
        if self._phase == "lower":
            target = plate + offset + [0.0, 0.0, cfg.place_clearance]
            if eef[2] - target[2] < cfg.lower_tol:
                self._goto("release")
            else:
                return self._servo(obs, target, self._site_rotation(obs), 1.0)
        if self._phase == "release":
            if self._t_phase >= cfg.release_steps:
                self._goto("retreat")
            else:
                return self._servo(obs, eef, self._site_rotation(obs), -1.0)
        if self._phase in ("retreat", "done"):
            if eef[2] > carry_z - 0.02:
                self._phase = "done"
            target = np.array([eef[0], eef[1], carry_z])
            return self._servo(obs, target, self._site_rotation(obs), -1.0)
        raise RuntimeError(f"unknown phase {self._phase!r}")
