"""Which features of a LeRobot v3.0 dataset are our camera views, state and action (`ReaderConfig`).

Datasets written by `EpisodeWriter` name their cameras `observation.images.<view>` (or record the view
in the feature's info as "video.view" when LeRobot's own keys were asked for), and carry our project
columns (instruction, suite, source, success, sha256, ...). A dataset written by lerobot has neither:
its cameras are named by whoever recorded it, e.g. LeRobot's LIBERO convention

    observation.images.image    the third-person (agentview) camera
    observation.images.image2   the wrist camera      (some conversions call it observation.images.wrist_image)

`ReaderConfig.cameras` maps our view names onto such keys; left empty, `resolve_features` picks the
mapping: our own recorded views, else LeRobot's LIBERO keys as ("agentview", "wrist") so that every
model trained on our LIBERO data reads a LeRobot LIBERO dataset unchanged, else each camera under the
last part of its key.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from robot_data.dataset.episode import VIEW_NAME_RE

IMAGE_PREFIX = "observation.images."
# LeRobot's LIBERO datasets: view -> camera key, in the order tried (first match per view wins)
LIBERO_CAMERA_KEYS: dict[str, tuple[str, ...]] = {
    "agentview": (f"{IMAGE_PREFIX}image", f"{IMAGE_PREFIX}agentview_image"),
    "wrist": (f"{IMAGE_PREFIX}image2", f"{IMAGE_PREFIX}wrist_image"),
}
CAMERA_DTYPES = ("video", "image")


@dataclass(frozen=True)
class ReaderConfig:
    """How `EpisodeDataset` maps a LeRobot v3.0 dataset onto `Episode`s.

    cameras: view name -> feature key, e.g. {"agentview": "observation.images.image"}; {} = automatic
    (see the module docstring). state / action: the feature keys of the proprio state and the action.
    The rest stands in for project columns a foreign dataset lacks: `source` of its episodes, whether they
    `succeed` (at their last step; LeRobot's LIBERO sets hold successful demonstrations only) and their
    `suite` ("" = the dataset folder's name). tolerance_s: how far a decoded frame's time may be from
    from_timestamp + t / fps (lerobot's own default).
    """

    # view name -> the dataset's camera key, e.g. {agentview: observation.images.image}; empty = automatic
    cameras: dict[str, str] = field(default_factory=dict)
    state: str = "observation.state"  # the feature key of the proprio state
    action: str = "action"  # the feature key of the action
    source: str = "expert"  # the episode source of a dataset that records none (not written here)
    succeed: bool = True  # whether such episodes count as successful (at their last step)
    suite: str = ""  # their suite ("" = the dataset folder's name)
    tolerance_s: float = 1e-4  # how far a decoded frame's time may be from where it should be
    # Frames resized to image_size x image_size on read (0: as stored). Why: LeRobot's LIBERO sets are 256 px and a
    # quick world model or policy takes 64 px; resizing once on read serves world-model training, BC and the
    # imagination env's starts alike. Downscaling averages pixel areas, so a 1-px gripper edge is kept, not skipped.
    image_size: int = 0

    def __post_init__(self) -> None:
        object.__setattr__(self, "cameras", dict(self.cameras))
        bad = [v for v in self.cameras if not VIEW_NAME_RE.match(v)]
        if bad:
            raise ValueError(f"cameras: view names must be [A-Za-z0-9_] strings, got {bad}")
        if not self.tolerance_s > 0:
            raise ValueError(f"tolerance_s: expected > 0, got {self.tolerance_s!r}")
        if not (isinstance(self.image_size, int) and self.image_size >= 0):
            raise ValueError(f"image_size: expected an integer >= 0 (0: frames as stored), got {self.image_size!r}")


@dataclass(frozen=True)
class Features:
    """The features `ReaderConfig` picked from an info.json: camera key, dtype and (H, W) per view."""

    cameras: dict[str, str]  # view -> feature key, in the dataset's feature order
    dtypes: dict[str, str]  # view -> "video" (mp4 files) or "image" (encoded images in the data parquet)
    image_size: tuple[int, int]
    state: str
    action: str
    state_dim: int
    action_dim: int


def camera_features(info: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The camera features (dtype video or image) of an info.json, in its order."""
    return {k: v for k, v in info["features"].items() if v.get("dtype") in CAMERA_DTYPES}


def image_hw(key: str, feature: dict[str, Any]) -> tuple[int, int]:
    """(H, W) of a camera feature. The video info is authoritative; `shape` is [H, W, C] or [C, H, W]
    (lerobot has written both, and names that do not always match the order)."""
    info = feature.get("info") or {}
    if "video.height" in info and "video.width" in info:
        return int(info["video.height"]), int(info["video.width"])
    shape = list(feature.get("shape") or [])
    if len(shape) != 3:
        raise ValueError(f"info.json: features[{key!r}].shape {shape} is not an image shape [H, W, C] or [C, H, W]")
    if shape[-1] in (1, 3, 4):
        return int(shape[0]), int(shape[1])
    return int(shape[1]), int(shape[2])


def _auto_cameras(cams: dict[str, dict[str, Any]]) -> dict[str, str]:
    infos = {k: f.get("info") or {} for k, f in cams.items()}
    # written by EpisodeWriter: the view it recorded ("video.view", with LeRobot's keys), else the key's suffix
    if cams and all("video.encoder" in i for i in infos.values()):
        return {str(i.get("video.view") or _suffix(k)): k for k, i in infos.items()}
    libero = {view: next((k for k in keys if k in cams), None) for view, keys in LIBERO_CAMERA_KEYS.items()}
    if all(libero.values()) and len(cams) == len(libero):
        return {view: str(k) for view, k in libero.items()}
    out: dict[str, str] = {}
    for key in cams:
        view = _suffix(key)
        if not VIEW_NAME_RE.match(view) or view in out:
            raise ValueError(f"info.json: camera {key!r} has no plain view name of its own; "
                             "name the views with ReaderConfig.cameras")
        out[view] = key
    return out


def _suffix(key: str) -> str:
    return key[len(IMAGE_PREFIX):] if key.startswith(IMAGE_PREFIX) else key.rsplit(".", 1)[-1]


def _dim(info: dict[str, Any], key: str, role: str) -> int:
    feature = info["features"].get(key)
    if feature is None:
        raise ValueError(f"info.json: no feature {key!r} for the {role} (ReaderConfig.{role}); "
                         f"the dataset has {sorted(info['features'])}")
    shape = feature.get("shape") or []
    if len(shape) != 1 or int(shape[0]) < 1:
        raise ValueError(f"info.json: features[{key!r}].shape {shape}: the {role} must be a vector [D]")
    return int(shape[0])


def resolve_features(info: dict[str, Any], config: ReaderConfig) -> Features:
    """Pick views, state and action from an info.json's features as `config` says; ValueError naming the
    feature when one is missing or unusable."""
    cams = camera_features(info)
    cameras = dict(config.cameras) if config.cameras else _auto_cameras(cams)
    missing = {v: k for v, k in cameras.items() if k not in cams}
    if missing:
        raise ValueError(f"ReaderConfig.cameras: {missing} not among the dataset's cameras {sorted(cams)}")
    sizes = {v: image_hw(k, cams[k]) for v, k in cameras.items()}
    if len(set(sizes.values())) > 1:
        raise ValueError(f"info.json: the views have different image sizes {sizes}; expected one (H, W)")
    return Features(
        cameras=cameras,
        dtypes={v: str(cams[k]["dtype"]) for v, k in cameras.items()},
        image_size=next(iter(sizes.values()), (64, 64)),
        state=config.state,
        action=config.action,
        state_dim=_dim(info, config.state, "state"),
        action_dim=_dim(info, config.action, "action"),
    )
