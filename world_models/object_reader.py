"""Where the goal's object and its target start, read from the episode's first camera image.

The grasp judge (imagination/rewards/grasp.py) scores where the gripper closes relative to the object's start
position. Taken from the simulator's labels, that position is something a real robot does not have, so a
reward built on it would not run outside simulation. This module reads it from pixels instead:

    ObjectReader   image uint8 [N, H, W, 3] (one view, the first frame) + task id -> object, target [N, 3] (m)

A small convolutional net whose last feature maps go through a spatial softmax (each channel's expected
image coordinate, a keypoint; Levine et al. 2016, "End-to-End Training of Deep Visuomotor Policies"). Why
keypoints: a position regressed through flattened features is limited by the pixel grid, while a softmax's
expectation moves smoothly below one pixel, and at 64 px one pixel is about a centimetre on the table. One
linear head per task maps the keypoints to the offset (dm) from that task's mean positions.

It trains on simulator labels (robot_data/layouts.py renders fresh layouts of each task with their positions, and
labelled recorded episodes add their first frames): simulator quantities supervise it, and at RL time it
reads only the image. `scripts/train_object_reader.py` fits it and reports its error on held-out layouts.
"""
from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from infra.checkpoint import config_from, load_model_file, restore, save_model_file

_FORMAT = "wm-vla-rl/object_reader"
SCALE = 10.0  # metres -> decimetres: targets of order 1


@dataclass
class ObjectReaderConfig:
    view: str = "agentview"  # the camera view it reads
    channels: list[int] = field(default_factory=lambda: [32, 64, 64])  # conv widths; the last two at half size
    keypoints: int = 64  # channels of the spatial softmax
    steps: int = 4000
    batch_size: int = 64
    lr: float = 1e-3
    weight_decay: float = 1e-4
    # per-pixel brightness jitter of training images (fraction of the range). Why: one renderer made every
    # training image, and a reader that keyed on exact colours would break on the first restyled scene
    jitter: float = 0.03
    seed: int = 0
    device: str = "cpu"  # where it trains ("cuda" on a GPU); it is saved and loaded for the CPU


def keypoint_conv(channels: list[int], keypoints: int) -> nn.Sequential:
    """Convolutions from an image with its two pixel coordinates (5 channels) to `keypoints` feature maps, the
    first layer at full size and the others halving it; `spatial_keypoints` reads them."""
    if any(c % 8 for c in channels) or not channels:
        raise ValueError(f"channels: expected multiples of 8 (GroupNorm of 8 groups), got {channels}")
    layers: list[nn.Module] = []
    prev = 5  # RGB and the two pixel coordinates (CoordConv), so a filter knows where it looks
    for k, width in enumerate(channels):
        layers += [nn.Conv2d(prev, width, 3, stride=2 if 0 < k else 1, padding=1), nn.GroupNorm(8, width), nn.SiLU()]
        prev = width
    layers += [nn.Conv2d(prev, keypoints, 3, padding=1)]
    return nn.Sequential(*layers)


def spatial_keypoints(conv: nn.Module, image: torch.Tensor) -> torch.Tensor:
    """image [N, 3, H, W] in [-1, 1] -> [N, 2K]: the expected (x, y) in [-1, 1] of each of `conv`'s K maps under
    its spatial softmax."""
    n, _, h, w = image.shape
    ys, xs = torch.meshgrid(torch.linspace(-1, 1, h, device=image.device),
                            torch.linspace(-1, 1, w, device=image.device), indexing="ij")
    grid = torch.stack([xs, ys])[None].expand(n, -1, -1, -1)
    f = conv(torch.cat([image, grid], 1))  # [N, K, h', w']
    p = F.softmax(f.flatten(2), -1).view_as(f)
    ys, xs = torch.meshgrid(torch.linspace(-1, 1, f.shape[2], device=image.device),
                            torch.linspace(-1, 1, f.shape[3], device=image.device), indexing="ij")
    return torch.cat([(p * xs).sum((2, 3)), (p * ys).sum((2, 3))], 1)


class ObjectReader(nn.Module):
    """image [N, 3, H, W] in [-1, 1], task index [N] -> offsets (dm) [N, 6] from the task's mean positions."""

    task_mean: torch.Tensor  # [tasks, 6] buffer: each task's mean object and target position (dm)

    def __init__(self, cfg: ObjectReaderConfig, suite: str, tasks: list[int], image_size: int):
        super().__init__()
        self.cfg, self.suite, self.tasks, self.image_size = cfg, suite, list(tasks), image_size
        self.conv = keypoint_conv(cfg.channels, cfg.keypoints)
        self.head = nn.Sequential(nn.Linear(2 * cfg.keypoints, 256), nn.SiLU(), nn.Linear(256, 6 * len(tasks)))
        self.register_buffer("task_mean", torch.zeros(len(tasks), 6))  # per task: object, target (dm)

    def forward(self, image: torch.Tensor, task_index: torch.Tensor) -> torch.Tensor:
        n = len(image)
        out = self.head(spatial_keypoints(self.conv, image)).view(n, len(self.tasks), 6)
        return out[torch.arange(n, device=image.device), task_index]

    def task_index(self, task_ids: np.ndarray) -> torch.Tensor:
        """Row of each task id; one ValueError naming the unknown ones."""
        unknown = sorted({int(t) for t in task_ids} - set(self.tasks))
        if unknown:
            raise ValueError(f"object reader: it was trained on {self.suite} tasks {self.tasks}, not tasks {unknown} "
                             "(render their layouts with scripts/render_layouts.py and train it on them)")
        return torch.as_tensor([self.tasks.index(int(t)) for t in task_ids], dtype=torch.long)

    @torch.no_grad()
    def read(self, images: np.ndarray, task_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """images uint8 [N, H, W, 3] (the reader's view) and task ids [N] -> object, target start [N, 3] (m)."""
        images = np.asarray(images)
        if images.ndim != 4 or images.shape[1:] != (self.image_size, self.image_size, 3) or images.dtype != np.uint8:
            raise ValueError(f"object reader: expected images uint8 [N, {self.image_size}, {self.image_size}, 3] "
                             f"of view {self.cfg.view!r}, got {images.dtype} {images.shape}")
        idx = self.task_index(np.asarray(task_ids))
        was = self.training
        self.eval()
        dev = self.task_mean.device
        out = (self(to_input(images).to(dev), idx.to(dev)) + self.task_mean[idx.to(dev)]).cpu().numpy() / SCALE
        self.train(was)
        return out[:, :3].astype(np.float32), out[:, 3:].astype(np.float32)

    def save(self, path: str | os.PathLike, **extra) -> None:
        save_model_file(path, _FORMAT, asdict(self.cfg), self.state_dict(), suite=self.suite, tasks=self.tasks,
                        image_size=self.image_size, **extra)

    @classmethod
    def load(cls, path: str | os.PathLike) -> ObjectReader:
        blob = load_model_file(path, "object reader", _FORMAT,
                               keys=("config", "state_dict", "suite", "tasks", "image_size"))
        reader = cls(config_from(ObjectReaderConfig, blob["config"], path, "object reader"), blob["suite"],
                     list(blob["tasks"]), int(blob["image_size"]))
        restore(reader, blob["state_dict"], path, "object reader")
        return reader.eval()


def to_input(images: np.ndarray) -> torch.Tensor:
    """uint8 [N, H, W, 3] -> float [N, 3, H, W] in [-1, 1]."""
    return torch.from_numpy(np.ascontiguousarray(images)).permute(0, 3, 1, 2).float() / 127.5 - 1.0


def fit_object_reader(images: np.ndarray, task_ids: np.ndarray, object_pos: np.ndarray, target_pos: np.ndarray,
                      suite: str, cfg: ObjectReaderConfig | None = None, progress: bool = True,
                      checkpoint: Path | None = None, checkpoint_every: int = 250) -> ObjectReader:
    """A reader fit on images uint8 [N, H, W, 3] of one view, task ids [N] and the positions [N, 3] (m).

    With `checkpoint`, the fit writes its whole state there (atomically) every `checkpoint_every` steps and
    continues from that file when it exists: a fit stopped and run again ends with the same weights."""
    from tqdm import tqdm

    cfg = cfg or ObjectReaderConfig()
    if any(c % 8 for c in cfg.channels) or not cfg.channels:  # before any image is read
        raise ValueError(f"object_reader.channels: expected multiples of 8 (GroupNorm of 8 groups), got {cfg.channels}")
    n = len(images)
    if not (len(task_ids) == len(object_pos) == len(target_pos) == n) or n < 2:
        raise ValueError(f"object reader: expected N >= 2 images with one task id and two positions each, got "
                         f"{n} images, {len(task_ids)} task ids, {len(object_pos)} and {len(target_pos)} positions")
    torch.manual_seed(cfg.seed)
    rng = np.random.default_rng(cfg.seed)
    tasks = sorted({int(t) for t in task_ids})
    dev = torch.device(cfg.device)
    reader = ObjectReader(cfg, suite, tasks, images.shape[1])
    idx = reader.task_index(task_ids)
    y = torch.from_numpy(np.concatenate([object_pos, target_pos], 1).astype(np.float32)) * SCALE  # [N, 6] dm
    for k in range(len(tasks)):
        reader.task_mean[k] = y[idx == k].mean(dim=0)
    y = (y - reader.task_mean[idx]).to(dev)
    x, idx = to_input(images).to(dev), idx.to(dev)
    reader.to(dev)
    opt = torch.optim.AdamW(reader.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, cfg.lr, total_steps=cfg.steps, pct_start=0.05)
    start = 0
    if checkpoint is not None and checkpoint.is_file():
        start = _resume(checkpoint, cfg, n, reader, opt, sched, rng)
    bar = tqdm(range(start, cfg.steps), desc="object reader", unit="step", disable=not progress,
               initial=start, total=cfg.steps)
    for step in bar:
        b = torch.from_numpy(rng.integers(0, n, min(cfg.batch_size, n))).to(dev)
        xb = x[b] + cfg.jitter * 2 * (torch.rand_like(x[b]) - 0.5)
        loss = F.mse_loss(reader(xb, idx[b]), y[b])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        sched.step()
        if step % 50 == 0:
            bar.set_postfix(rms_cm=f"{float(loss.detach().sqrt()) * 100 / SCALE:.2f}")  # per coordinate
        if checkpoint is not None and ((step + 1) % checkpoint_every == 0 or step + 1 == cfg.steps):
            _save_fit(checkpoint, cfg, n, step + 1, reader, opt, sched, rng)
    return reader.cpu().eval()


_FIT_CHECKPOINT = "object reader fit checkpoint (delete it to start over)"
_FIT_KEYS = ("config", "images", "step", "model", "optimizer", "scheduler", "rng_json", "torch_rng")


def _save_fit(path: Path, cfg: ObjectReaderConfig, n: int, step: int, reader: ObjectReader,
              opt: torch.optim.Optimizer, sched: torch.optim.lr_scheduler.LRScheduler,
              rng: np.random.Generator) -> None:
    """The fit's whole state after `step` steps: tensors and plain data only (read back with weights_only)."""
    from infra.atomic import atomic_torch_save  # creates the folder

    atomic_torch_save(path, {"config": asdict(cfg), "images": n, "step": step, "model": reader.state_dict(),
                             "optimizer": opt.state_dict(), "scheduler": sched.state_dict(),
                             "rng_json": json.dumps(rng.bit_generator.state), "torch_rng": torch.get_rng_state()})


def _resume(path: Path, cfg: ObjectReaderConfig, n: int, reader: ObjectReader, opt: torch.optim.Optimizer,
            sched: torch.optim.lr_scheduler.LRScheduler, rng: np.random.Generator) -> int:
    """Restore a fit from its checkpoint; the step it had reached. A checkpoint of another config or of
    another number of images is refused: it would continue a different fit."""
    from infra.checkpoint import CheckpointError, expect_format, load_torch

    ck = expect_format(load_torch(path, _FIT_CHECKPOINT), path, _FIT_CHECKPOINT, None, _FIT_KEYS)
    if ck["config"] != asdict(cfg) or ck["images"] != n:
        raise ValueError(f"{path}: a fit of another reader config or of other images ({ck['images']} images, "
                         f"{n} now); use another out_dir or delete it to start over")
    restore(reader, ck["model"], path, "object reader")
    restore(opt, ck["optimizer"], path, "optimizer")
    restore(sched, ck["scheduler"], path, "LR scheduler")
    try:
        rng.bit_generator.state = json.loads(ck["rng_json"])
        torch.set_rng_state(ck["torch_rng"])
        return int(ck["step"])
    except (TypeError, RuntimeError, ValueError, KeyError) as err:
        raise CheckpointError(f"{path}: its RNG state or step is unusable ({err})") from None


def reader_errors(reader: ObjectReader, images: np.ndarray, task_ids: np.ndarray, object_pos: np.ndarray,
                  target_pos: np.ndarray) -> dict[str, float]:
    """Median and 90th-percentile distance (cm) between read and true positions, and the xy error of the object."""
    obj, target = reader.read(images, task_ids)
    e_obj = np.linalg.norm(obj - object_pos, axis=1) * 100
    e_xy = np.linalg.norm((obj - object_pos)[:, :2], axis=1) * 100
    e_tgt = np.linalg.norm(target - target_pos, axis=1) * 100
    return {"n": float(len(obj)), "object_cm_median": float(np.median(e_obj)),
            "object_cm_p90": float(np.percentile(e_obj, 90)), "object_xy_cm_median": float(np.median(e_xy)),
            "target_cm_median": float(np.median(e_tgt)),
            "target_cm_p90": float(np.percentile(e_tgt, 90))}


@dataclass
class TrainObjectReaderConfig:
    out_dir: str = "outputs/object_reader"  # reader.pt and result.json
    layouts: list[str] = field(default_factory=list)  # npz files of scripts/render_layouts.py to train on
    # labelled recorded datasets (scripts/label_episodes.py) whose episodes' first frames train it too
    data_dirs: list[str] = field(default_factory=list)
    val_layouts: list[str] = field(default_factory=list)  # held-out layouts it is measured on (never trained on)
    # the fit's state goes to out_dir/checkpoint.pt this often; running the same command again continues from it
    checkpoint_every: int = 250
    reader: ObjectReaderConfig = field(default_factory=ObjectReaderConfig)

    def validate(self) -> None:
        if not self.layouts and not self.data_dirs:
            raise ValueError("layouts, data_dirs: expected at least one source of labelled images "
                             "(scripts/render_layouts.py, or datasets labelled by scripts/label_episodes.py)")
        if self.checkpoint_every < 1:
            raise ValueError(f"checkpoint_every: expected a number of steps >= 1, got {self.checkpoint_every}")


def first_frames(data_dirs: list[str], view: str) -> tuple[dict[str, np.ndarray], str]:
    """The first frame (uint8 [N, H, W, 3] of `view`), task id and labelled start positions of every episode
    with simulator labels in the datasets, and their suite."""
    from robot_data.dataset import EpisodeDataset
    from robot_data.sim_labels import read_sim_labels

    rows: dict[str, list] = {"images": [], "task_id": [], "object_pos": [], "target_pos": []}
    suites = set()
    for root in data_dirs:
        ds = EpisodeDataset(root, verify=False)
        ds.require_views([view])
        for i in range(len(ds)):
            sim = read_sim_labels(root, i)
            if sim is None:
                continue
            ep = ds[i]
            suites.add(ep.suite)
            for key, value in zip(rows, (ep.frames[view][0], ep.task_id, sim["object_pos"][0], sim["target_pos"][0])):
                rows[key].append(value)
    if len(suites) > 1:
        raise ValueError(f"data_dirs: episodes of several suites {sorted(suites)}; a reader knows one suite's tasks")
    return {k: np.asarray(v) for k, v in rows.items()}, next(iter(suites), "")


def train_object_reader(cfg: TrainObjectReaderConfig, progress: bool = True) -> dict:
    """Fit a reader on cfg's layouts and labelled datasets, save it and its held-out errors (result.json)."""
    from infra.atomic import atomic_write_json
    from robot_data.layouts import read_layouts

    cfg.validate()
    parts, suites = [], set()
    if cfg.layouts:
        lay, infos = read_layouts(cfg.layouts)
        if cfg.reader.view not in infos[0]["views"]:
            raise ValueError(f"reader.view: {cfg.reader.view!r} is not among the layouts' views {infos[0]['views']}")
        v = infos[0]["views"].index(cfg.reader.view)
        parts.append({"images": lay["images"][:, v], **{k: lay[k] for k in ("task_id", "object_pos", "target_pos")}})
        suites.add(infos[0]["suite"])
    if cfg.data_dirs:
        frames, suite = first_frames(cfg.data_dirs, cfg.reader.view)
        if len(frames["images"]):
            parts.append(frames)
            suites.add(suite)
    if len(suites) != 1:
        raise ValueError(f"layouts, data_dirs: expected labelled images of one suite, got {sorted(suites) or 'none'}")
    data = {k: np.concatenate([p[k] for p in parts]) for k in ("images", "task_id", "object_pos", "target_pos")}
    sizes = {p["images"].shape[1:] for p in parts}
    if len(sizes) > 1:
        raise ValueError(f"layouts, data_dirs: images of different sizes {sorted(sizes)}")
    t0 = time.time()
    out = Path(cfg.out_dir)
    reader = fit_object_reader(data["images"], data["task_id"], data["object_pos"], data["target_pos"],
                               suites.pop(), cfg.reader, progress, checkpoint=out / "checkpoint.pt",
                               checkpoint_every=cfg.checkpoint_every)
    result: dict = {"images": len(data["images"]), "tasks": reader.tasks, "train_seconds": round(time.time() - t0, 1),
                    "train": reader_errors(reader, data["images"], data["task_id"], data["object_pos"],
                                           data["target_pos"])}
    if cfg.val_layouts:
        val, infos = read_layouts(cfg.val_layouts)
        v = infos[0]["views"].index(cfg.reader.view)
        result["val"] = reader_errors(reader, val["images"][:, v], val["task_id"], val["object_pos"], val["target_pos"])
    out.mkdir(parents=True, exist_ok=True)
    reader.save(out / "reader.pt")
    atomic_write_json(out / "result.json", result, indent=2)
    return result


__all__ = ["ObjectReader", "ObjectReaderConfig", "TrainObjectReaderConfig", "first_frames", "fit_object_reader",
           "keypoint_conv", "reader_errors", "spatial_keypoints", "to_input", "train_object_reader"]
