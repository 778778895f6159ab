"""Scene layouts rendered with their objects' positions: the training data of an image-only object reader.

Why: the grasp judge reads where the goal's object and its target start. Taken from the simulator's labels,
that is a quantity a real robot does not have; read from the episode's first camera image by a small
network (world_models/object_reader.py), it is not. The network needs many layouts to learn positions to
a centimetre, far more than the ten official init states a task's demonstrations start from, and the
benchmark's init states must stay unseen. LIBERO's own scene reset draws a fresh placement of every
object from the task's BDDL regions (the distribution its official init states were drawn from), so each
reset is a new layout:

    layout i = reset the scene (a new draw), settle with the gripper open, render the views,
               read (object_pos, target_pos) of the goal's pick-and-place pair (robot_data.sim_labels)

`init_state_ids` renders official init states instead (a held-out check on layouts a benchmark uses), each reset
with a seed drawn from `default_rng(seed)` as LiberoEnv's seeded reset takes it: an init state leaves the fixtures'
placement (a stove, a cabinet) to the reset's draw, as every evaluation does, so the reader must read both.
Saved as one npz: images uint8 [N, V, H, W, 3] (views in config order, upright, as LiberoEnv observes),
object_pos, target_pos float32 [N, 3] (world, m), task_id int [N], init_state_id int [N] (-1: a drawn
layout), and a JSON `info` (suite, views, image_size, fast_render, seed).
"""
from __future__ import annotations

import io
import json
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from infra.atomic import atomic_write_bytes

LAYOUT_KEYS = ("images", "object_pos", "target_pos", "task_id", "init_state_id")


@dataclass
class LayoutConfig:
    out: str = "outputs/layouts/layouts.npz"  # the npz written
    suite: str = "libero_spatial"
    tasks: list[int] = field(default_factory=lambda: [0])  # task ids of the suite
    per_task: int = 100  # layouts per task: fresh draws, or the first of init_state_ids
    # official init states to render instead of fresh draws (empty: draw). Why: a held-out check on the
    # layouts a benchmark scores, which must never be trained on
    init_state_ids: list[int] = field(default_factory=list)
    # the frames of the datasets the reader will read: same size, views and renderer (robot_data/collection.py)
    image_size: int = 64
    views: list[str] = field(default_factory=lambda: ["agentview"])
    fast_render: bool = True
    seed: int = 0
    # reload the scene's model every this many drawn layouts, else reset it in place. Why: a reload also draws
    # the fixtures' placement (a cabinet, a stove), but costs ~3 s against ~1 s for an in-place reset, which
    # draws every object's placement anew on the loaded fixtures
    reload_every: int = 20

    def validate(self) -> None:
        if not self.tasks:
            raise ValueError("tasks: expected at least one task id")
        if self.per_task < 1 and not self.init_state_ids:
            raise ValueError(f"per_task: expected an integer >= 1, got {self.per_task}")
        if self.reload_every < 1:
            raise ValueError(f"reload_every: expected an integer >= 1, got {self.reload_every}")
        if not self.views:
            raise ValueError("views: expected at least one camera view to render")
        if not str(self.out).endswith(".npz"):
            raise ValueError(f"out: expected a path ending in .npz, got {self.out!r}")


def render_layouts(cfg: LayoutConfig, progress: bool = True) -> dict[str, np.ndarray]:
    """Render cfg's layouts (module docstring) and write them to cfg.out; returns the arrays."""
    from tqdm import tqdm

    from envs import libero_suites
    from envs.libero_env import LiberoEnv, LiberoEnvConfig
    from envs.outcome import pick_place_objects
    from robot_data.sim_labels import step_labels

    cfg.validate()
    rows: dict[str, list] = {k: [] for k in LAYOUT_KEYS}
    rng = np.random.default_rng(cfg.seed)
    bar = tqdm(total=len(cfg.tasks) * (len(cfg.init_state_ids) or cfg.per_task), desc="layouts", unit="layout",
               disable=not progress)
    for task in cfg.tasks:
        env = LiberoEnv(LiberoEnvConfig(suite=cfg.suite, task_id=int(task), views=tuple(cfg.views),
                                        image_size=cfg.image_size, chunk_len=1, fast_render=cfg.fast_render))
        try:
            for k in range(len(cfg.init_state_ids) or cfg.per_task):
                if cfg.init_state_ids:
                    init_id = int(cfg.init_state_ids[k])
                    env.raw.env.hard_reset = True  # an official start reloads the scene
                    obs, _ = env.reset(seed=int(rng.integers(2**31)), options={"init_state_id": init_id})
                    raw_obs = env.raw_obs
                else:
                    init_id = -1
                    env.raw.env.hard_reset = k % cfg.reload_every == 0
                    # a fresh placement (LIBERO's reset draws it from numpy's global RNG, seeded and restored),
                    # settled as an official start is
                    raw_obs = libero_suites.start_episode(env.raw, None, env.cfg.settle_steps,
                                                          reset_seed=int(rng.integers(2**31)))
                    env.raw_obs = raw_obs
                    obs = env._obs(raw_obs)
                objects = pick_place_objects(env.raw, raw_obs)
                if objects is None:
                    raise ValueError(f"tasks: {cfg.suite} task {task} has no single pick-and-place goal, whose "
                                     "object and target a layout records")
                obj, target, _ = step_labels(env.raw, raw_obs, objects)
                for key, value in zip(LAYOUT_KEYS, (obs["image"], obj, target, int(task), init_id)):
                    rows[key].append(value)
                bar.update(1)
        finally:
            env.close()
    bar.close()
    out: dict[str, np.ndarray] = {"images": np.stack(rows["images"]).astype(np.uint8),
           "object_pos": np.asarray(rows["object_pos"], np.float32),
           "target_pos": np.asarray(rows["target_pos"], np.float32),
           "task_id": np.asarray(rows["task_id"], np.int64),
           "init_state_id": np.asarray(rows["init_state_id"], np.int64)}
    info = {"suite": cfg.suite, "views": list(cfg.views), "image_size": cfg.image_size, "fast_render": cfg.fast_render,
            "seed": cfg.seed}
    write_layouts(cfg.out, out, info)
    return out


def write_layouts(path: str | os.PathLike, arrays: dict[str, np.ndarray], info: dict) -> None:
    """Write layout arrays (LAYOUT_KEYS) and their info atomically as one npz."""
    missing = [k for k in LAYOUT_KEYS if k not in arrays]
    if missing:
        raise ValueError(f"layouts: missing arrays {missing}; expected {list(LAYOUT_KEYS)}")
    buf = io.BytesIO()
    named: dict[str, Any] = {k: arrays[k] for k in LAYOUT_KEYS}  # Any: numpy's stub types **kwds by one keyword
    np.savez_compressed(buf, info=np.array(json.dumps(info)), **named)
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(path, buf.getvalue())


def read_layouts(paths: Sequence[str | os.PathLike]) -> tuple[dict[str, np.ndarray], list[dict]]:
    """The layouts of one or more npz files of `render_layouts`, concatenated, and each file's info."""
    if not paths:
        raise ValueError("layouts: expected at least one npz file of scripts/render_layouts.py")
    parts, infos = [], []
    for p in paths:
        if not Path(p).is_file():
            raise ValueError(f"layouts: {p} is not a file (write it with scripts/render_layouts.py)")
        with np.load(p) as z:
            missing = [k for k in (*LAYOUT_KEYS, "info") if k not in z.files]
            if missing:
                raise ValueError(f"layouts: {p} lacks arrays {missing}; expected a file of scripts/render_layouts.py")
            parts.append({k: z[k] for k in LAYOUT_KEYS})
            infos.append(json.loads(str(z["info"])))
    if len({(i["suite"], tuple(i["views"]), i["image_size"]) for i in infos}) > 1:
        kinds = [(i["suite"], i["views"], i["image_size"]) for i in infos]
        raise ValueError(f"layouts: files of different suites, views or sizes {kinds}")
    return {k: np.concatenate([p[k] for p in parts]) for k in LAYOUT_KEYS}, infos


__all__ = ["LAYOUT_KEYS", "LayoutConfig", "read_layouts", "render_layouts", "write_layouts"]
