"""Geometry primitives shared by scripted experts: collision boxes, top grasps, container drops, and the rotation
maths of the grip site (quaternion to matrix, matrix to axis-angle, the grasp frame).

Everything here reads privileged MuJoCo state once (at planning time) and turns it into plain
arrays, so the pure helpers (footprint widths, grasp planning, box distances) are unit-testable
without a simulator. Conventions: world frame, metres, z up; the gripper points straight down for
a top grasp and closes along a horizontal "closing axis".
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

# Body-name prefixes of the robot itself: never obstacles, never part of an object.
ROBOT_PREFIXES = ("robot0", "gripper0", "mount0")

_SIGNS = np.array([[sx, sy, sz] for sx in (-1, 1) for sy in (-1, 1) for sz in (-1, 1)], dtype=np.float64)


@dataclass(frozen=True)
class Boxes:
    """Oriented boxes: centres [N, 3], rotations [N, 3, 3] (columns = box axes), half sizes [N, 3]."""

    centres: np.ndarray
    rots: np.ndarray
    halves: np.ndarray

    def __len__(self) -> int:
        return len(self.centres)

    def corners(self) -> np.ndarray:
        """All box corners [N * 8, 3] (world)."""
        if len(self) == 0:
            return np.zeros((0, 3))
        local = _SIGNS[None] * self.halves[:, None, :]  # [N, 8, 3]
        return (self.centres[:, None, :] + np.einsum("nij,nkj->nki", self.rots, local)).reshape(-1, 3)

    def distance(self, points: np.ndarray) -> np.ndarray:
        """Euclidean distance [P] from each point [P, 3] to the nearest box (0 inside one)."""
        points = np.atleast_2d(points)
        if len(self) == 0:
            return np.full(len(points), np.inf)
        local = np.einsum("bji,pbj->pbi", self.rots, points[:, None, :] - self.centres[None])
        return np.linalg.norm(np.maximum(np.abs(local) - self.halves[None], 0.0), axis=-1).min(axis=1)


def collision_boxes(sim, include: tuple[str, ...] = (), exclude: tuple[str, ...] = ()) -> Boxes:
    """Collision geoms as oriented boxes (their local AABBs), selected by body-name prefix.

    ``include``: keep only bodies whose name starts with one of these (empty = all bodies);
    ``exclude``: drop these. The world body (walls, visual only) and the robot are always
    dropped. LIBERO objects are built from primitive boxes/cylinders, so the boxes are tight.
    """
    m, d = sim.model, sim.data
    centres, rots, halves = [], [], []
    for g in range(m.ngeom):
        name = m.body_id2name(m.geom_bodyid[g]) or ""
        if name == "world" or name.startswith(ROBOT_PREFIXES):
            continue
        if (include and not name.startswith(include)) or (exclude and name.startswith(exclude)):
            continue
        if m.geom_contype[g] == 0 and m.geom_conaffinity[g] == 0:
            continue  # visual-only mesh
        rot = np.array(d.geom_xmat[g]).reshape(3, 3)
        aabb = np.array(m.geom_aabb[g])  # local centre (3) + half sizes (3)
        centres.append(np.array(d.geom_xpos[g]) + rot @ aabb[:3])
        rots.append(rot)
        halves.append(aabb[3:])
    if not centres:
        return Boxes(np.zeros((0, 3)), np.zeros((0, 3, 3)), np.zeros((0, 3)))
    return Boxes(np.stack(centres), np.stack(rots), np.stack(halves))


def footprint_width(points_xy: np.ndarray, angle: float) -> tuple[float, float]:
    """Extent of 2-D points along the direction ``angle`` (rad): (width, centre coordinate)."""
    proj = np.asarray(points_xy, dtype=np.float64) @ np.array([np.cos(angle), np.sin(angle)])
    return float(proj.max() - proj.min()), float((proj.max() + proj.min()) / 2)


@dataclass(frozen=True)
class TopGrasp:
    """A top-down grasp: grip-site point [3] (world) and closing-axis yaw candidates (rad)."""

    point: np.ndarray
    angles: tuple[float, ...]  # closing-axis yaws whose object width fits the open gripper
    widths: tuple[float, ...]  # object width along each of those yaws (m)
    top: float  # world z of the object's top
    bottom: float  # world z of the object's bottom


def plan_top_grasp(
    corners: np.ndarray,
    depth: float,
    floor_clearance: float,
    max_width: float,
    slab: float = 0.02,
    n_angles: int = 12,
) -> TopGrasp:
    """Plan a top-down grasp of an upright object given its collision-box corners [K, 3].

    The grip site goes ``depth`` below the object's top, but at least ``floor_clearance`` above
    its bottom so the fingertips (which reach below the grip site) do not hit the support. The
    closing axis candidates are the yaws (in [0, pi)) along which the part of the object within
    ``slab`` of the grip height is narrower than ``max_width``, narrowest first; the grip point
    is centred in that slab's footprint along the narrowest yaw and its perpendicular.
    """
    corners = np.asarray(corners, dtype=np.float64)
    top, bottom = float(corners[:, 2].max()), float(corners[:, 2].min())
    z = max(top - depth, bottom + floor_clearance)
    z = min(z, top - 0.005)  # a very flat object: still grip below its top
    near = corners[np.abs(corners[:, 2] - z) <= slab]
    if len(near) < 3:
        near = corners  # box corners are sparse along z: fall back to the whole object
    xy = near[:, :2]
    angles = np.pi * np.arange(n_angles) / n_angles
    widths = np.array([footprint_width(xy, a)[0] for a in angles])
    order = np.argsort(widths, kind="stable")
    best = float(angles[order[0]])
    _, c0 = footprint_width(xy, best)
    _, c1 = footprint_width(xy, best + np.pi / 2)
    u, v = np.array([np.cos(best), np.sin(best)]), np.array([-np.sin(best), np.cos(best)])
    centre = c0 * u + c1 * v
    fits = [int(i) for i in order if widths[i] <= max_width] or [int(order[0])]
    return TopGrasp(
        point=np.array([centre[0], centre[1], z]),
        angles=tuple(float(angles[i]) for i in fits),
        widths=tuple(float(widths[i]) for i in fits),
        top=top,
        bottom=bottom,
    )


def finger_probes(point: np.ndarray, angle: float, half_open: float, height: float, n: int = 5) -> np.ndarray:
    """Points [2n, 3] swept by the two open fingers descending onto ``point`` along yaw ``angle``."""
    axis = np.array([np.cos(angle), np.sin(angle), 0.0])
    zs = np.linspace(-0.012, height, n)  # fingertips reach ~1.2 cm below the grip site
    return np.array([point + s * half_open * axis + [0.0, 0.0, dz] for s in (-1.0, 1.0) for dz in zs])


def container_drop(boxes: Boxes, centre_xy: np.ndarray) -> tuple[float, float]:
    """(floor z, rim z) of a container made of ``boxes`` around ``centre_xy``.

    The floor is the highest box top whose footprint covers the centre (the bottom plate); the
    rim is the highest point of any box. Walls beside the centre do not count as floor.
    """
    corners = boxes.corners().reshape(-1, 8, 3)
    rim = float(corners[..., 2].max())
    floor = float(corners[..., 2].min())
    for c in corners:
        lo, hi = c.min(axis=0), c.max(axis=0)
        if np.all(lo[:2] <= centre_xy) and np.all(centre_xy <= hi[:2]):
            floor = max(floor, float(hi[2]))
    return floor, rim


def push_pose(obj_xy: np.ndarray, goal_xy: np.ndarray, standoff: float) -> tuple[np.ndarray, np.ndarray]:
    """Line-up point [2] ``standoff`` behind an object on the line to the goal, and the unit push direction [2].

    Pushing through the centre towards the goal keeps a round object moving straight; the
    direction is re-read every step, so the pusher follows the object as it drifts.
    """
    obj_xy, goal_xy = np.asarray(obj_xy, dtype=np.float64), np.asarray(goal_xy, dtype=np.float64)
    delta = goal_xy - obj_xy
    norm = float(np.linalg.norm(delta))
    direction = delta / norm if norm > 1e-9 else np.array([1.0, 0.0])
    return obj_xy - standoff * direction, direction


def handle_point(corners: np.ndarray, direction: np.ndarray) -> np.ndarray:
    """Centre [3] of a drawer's handle bar: the box reaching farthest along the opening ``direction``.

    ``corners`` [N * 8, 3] are the drawer body's box corners. Only the single frontmost box
    counts: with the cabinet yawed a few degrees, the bar's posts come within a centimetre of
    its front, and averaging them in would put the grip behind the bar.
    """
    boxes = np.asarray(corners, dtype=np.float64).reshape(-1, 8, 3)
    bar = boxes[int(np.argmax((boxes @ direction).max(axis=1)))]
    return (bar.min(axis=0) + bar.max(axis=0)) / 2


def surface_height(boxes: Boxes, xy: np.ndarray, z_top: float, z_bottom: float, step: float = 0.002) -> float:
    """Highest z in [z_bottom, z_top] at ``xy`` that lies inside one of ``boxes`` (z_bottom if none).

    Works for tilted boxes (a rack's inclined planks), where the corners' bounding box would
    report the plank's upper end instead of its surface at ``xy``.
    """
    zs = np.arange(z_top, z_bottom - step, -step)
    points = np.column_stack([np.full(len(zs), xy[0]), np.full(len(zs), xy[1]), zs])
    inside = np.flatnonzero(boxes.distance(points) <= 1e-9)
    return float(zs[inside[0]]) if len(inside) else float(z_bottom)


@dataclass(frozen=True)
class SideOpening:
    """The open side of an enclosure with a roof (a microwave), seen from a point inside it.

    inward: unit horizontal direction [3] into the enclosure through its open side; across: the
    horizontal unit [3] perpendicular to it. floor / roof: z of the floor's top and the roof's
    underside above and below the point; front: coordinate (along ``inward``) of the roof's front
    edge; middle: coordinate (along ``across``) halfway between the side walls, width: their distance.
    """

    inward: np.ndarray
    across: np.ndarray
    floor: float
    roof: float
    front: float
    middle: float
    width: float


def _march(boxes: Boxes, start: np.ndarray, direction: np.ndarray, reach: float, step: float, inside: bool) -> float:
    """Distance along ``direction`` from ``start`` to the first point inside a box (``inside``) or outside all
    of them (not ``inside``); inf if there is none within ``reach``."""
    ts = np.arange(0.0, reach + step, step)
    hit = (boxes.distance(start[None] + ts[:, None] * direction[None]) <= 1e-9) == inside
    return float(ts[np.argmax(hit)]) if hit.any() else float("inf")


def side_opening(
    boxes: Boxes, centre: np.ndarray, axes: np.ndarray, reach: float = 0.4, step: float = 0.004
) -> SideOpening:
    """Find the open side of the enclosure made of ``boxes`` around ``centre`` [3] (a region site inside it).

    ``axes`` [3, 3]: the site's rotation; its first two columns are the candidate horizontal
    directions. The open side is the only one of the four along which a ray from the centre
    meets no box within ``reach``. ValueError when there is not exactly one.
    """
    centre = np.asarray(centre, dtype=np.float64)
    dirs = [s * np.asarray(axes, dtype=np.float64)[:, i] * [1.0, 1.0, 0.0] for i in (0, 1) for s in (1.0, -1.0)]
    dirs = [d / np.linalg.norm(d) for d in dirs]
    free = [d for d in dirs if _march(boxes, centre, d, reach, step, inside=True) == np.inf]
    if len(free) != 1:
        raise ValueError(f"expected one open side around {centre}, found {len(free)}")
    out = free[0]
    up = np.array([0.0, 0.0, 1.0])
    floor = centre[2] - _march(boxes, centre, -up, reach, step / 4, inside=True)
    roof = centre[2] + _march(boxes, centre, up, reach, step / 4, inside=True)
    # The roof's front edge: leave the roof slab along the open side, just above its underside.
    under_roof = np.array([centre[0], centre[1], roof + step])
    front = float(centre @ -out) - _march(boxes, under_roof, out, reach, step / 2, inside=False)
    across = np.cross(up, out)
    left, right = (_march(boxes, centre, s * across, reach, step / 2, inside=True) for s in (1.0, -1.0))
    middle = float(centre @ across) + (left - right) / 2
    return SideOpening(
        inward=-out, across=across, floor=float(floor), roof=float(roof), front=front, middle=middle, width=left + right
    )


def planar_turn(a: np.ndarray, b: np.ndarray) -> float:
    """Signed angle (rad, in (-pi, pi]) that turns the 2-D direction ``a`` onto ``b`` about +z."""
    return float(np.arctan2(a[0] * b[1] - a[1] * b[0], a @ b))


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


def hand_to_site(sim, raw_obs: dict) -> np.ndarray:
    """The grip site's fixed rotation [3, 3] w.r.t. the hand body, read once at reset: robot0_eef_quat is the hand's,
    so the site's rotation at any later step is quat_xyzw_to_mat(robot0_eef_quat) @ this, from the observation
    alone."""
    r_site = np.array(sim.data.site_xmat[sim.model.site_name2id("gripper0_grip_site")]).reshape(3, 3)
    return quat_xyzw_to_mat(raw_obs["robot0_eef_quat"]).T @ r_site


def grasp_rotation(closing: np.ndarray, down: np.ndarray) -> np.ndarray:
    """Grip-site rotation [3, 3] with x (finger closing axis) ~ ``closing``, z (approach) = ``down``."""
    z = down / np.linalg.norm(down)
    x = closing - (closing @ z) * z
    x /= np.linalg.norm(x)
    return np.stack([x, np.cross(z, x), z], axis=1)
