"""Which of the task's goal predicates hold, read from one camera frame: what the goal judge sees.

LIBERO states a task's success as the predicates of its BDDL goal (robot_data/goal_labels.py): (On bowl plate),
(Open drawer), (TurnOn stove), ... The simulator evaluates each one, and how near it is, at every recorded step;
those labels supervise this reader. At RL time it reads only an image, the world model's imagined frame, so a
judge built on it runs on a real robot as well (the own-gain benchmark's rule):

    GoalReader   image uint8 [N, H, W, 3] (one view) + task id -> P(predicate holds) [N, P], progress [N, P]

P is the most predicates any of its tasks has; a task with fewer has nan in the other slots. Progress is each
predicate's own measure (a distance in metres, a height, a fixture's joint position; goal_labels.PROGRESS),
regressed beside the verdict. Why: a verdict is true on a few frames at the end of a successful episode, while
the distance of a bowl to its plate moves on every frame; the shared features learn from both.

Each task's predicates also carry progress anchors (`progress_anchors`, from the training labels): the median
progress on episodes' first frames and where the predicate holds. The goal judge's "progress" score places a read
progress between the two (0 at the start, 1 at the goal) for every kind of predicate alike: a drawer's joint, a
knob's angle, a bowl's distance to its plate.

The image net is the object reader's (world_models/object_reader.py: convolutions, then a spatial softmax whose
keypoints move below one pixel), with one linear head per task. A task it was not trained on has no predicates
here and is refused with one error naming it.
"""
from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from infra.checkpoint import config_from, load_model_file, restore, save_model_file
from world_models.object_reader import keypoint_conv, spatial_keypoints, to_input

_FORMAT = "wm-vla-rl/goal_reader"
# frames GoalReader.read runs through the network at once
READ_BATCH = 1024


@dataclass
class GoalReaderConfig:
    view: str = "agentview"  # the camera view it reads
    channels: list[int] = field(default_factory=lambda: [32, 64, 64])  # conv widths; the last two at half size
    keypoints: int = 32  # channels of the spatial softmax
    steps: int = 3000
    batch_size: int = 64
    lr: float = 1e-3
    weight_decay: float = 1e-4
    progress_weight: float = 1.0  # weight of the standardized progress regression beside the verdicts' BCE
    jitter: float = 0.03  # per-pixel brightness jitter of training images (fraction of the range)
    seed: int = 0
    device: str = "cpu"  # where it trains; it is saved and loaded for the CPU


class GoalReader(nn.Module):
    """image [N, 3, H, W] in [-1, 1], task index [N] -> verdict logits [N, P], standardized progress [N, P]."""

    progress_mean: torch.Tensor  # [tasks, P] buffers: each task's predicates' progress statistics
    progress_std: torch.Tensor

    def __init__(self, cfg: GoalReaderConfig, suite: str, predicates: dict[int, list[str]], image_size: int):
        super().__init__()
        self.cfg, self.suite, self.image_size = cfg, suite, image_size
        self.predicates = {int(k): list(v) for k, v in sorted(predicates.items())}  # task id -> "(on a b)", ...
        self.tasks = list(self.predicates)
        self.slots = max(len(v) for v in self.predicates.values())
        self.conv = keypoint_conv(cfg.channels, cfg.keypoints)
        self.head = nn.Sequential(nn.Linear(2 * cfg.keypoints, 256), nn.SiLU(),
                                  nn.Linear(256, 2 * self.slots * len(self.tasks)))
        self.register_buffer("progress_mean", torch.zeros(len(self.tasks), self.slots))
        self.register_buffer("progress_std", torch.ones(len(self.tasks), self.slots))
        # [tasks, P, 2] (start, goal) in each predicate's units, nan where the labels showed none; None: not made
        # (a reader saved before anchors existed). Kept out of the state dict so that such a file still loads.
        self.progress_anchors: np.ndarray | None = None

    def forward(self, image: torch.Tensor, task_index: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        n = len(image)
        out = self.head(spatial_keypoints(self.conv, image)).view(n, len(self.tasks), 2, self.slots)
        out = out[torch.arange(n, device=image.device), task_index]
        return out[:, 0], out[:, 1]

    def task_index(self, task_ids: np.ndarray) -> torch.Tensor:
        """Row of each task id; one ValueError naming the tasks it has no goal predicates for."""
        unknown = sorted({int(t) for t in task_ids} - set(self.tasks))
        if unknown:
            raise ValueError(f"goal reader: it knows the goal predicates of {self.suite} tasks {self.tasks}, not of "
                             f"tasks {unknown} (label their episodes with scripts/label_goals.py and train it on them)")
        return torch.as_tensor([self.tasks.index(int(t)) for t in task_ids], dtype=torch.long)

    def slot_mask(self, task_ids: np.ndarray) -> np.ndarray:
        """[N, P] bool: the slots that are predicates of each one's task."""
        counts = np.array([len(self.predicates[int(t)]) for t in task_ids])
        return np.arange(self.slots)[None] < counts[:, None]

    @torch.no_grad()
    def read(self, images: np.ndarray | torch.Tensor, task_ids: np.ndarray,
             batch: int = READ_BATCH) -> tuple[np.ndarray, np.ndarray]:
        """images uint8 [N, H, W, 3] of the reader's view (or float [N, 3, H, W] in [-1, 1]), task ids [N] ->
        P(holds) [N, P] and progress [N, P] in the predicate's units; nan in slots the task does not have.

        Read `batch` frames at a time: a dataset's every frame in one pass holds every conv activation at once, and
        on LIBERO-10's episodes that ran a 24 GiB machine out of memory (docs/notebook/protocol_v2.md, section 57)."""
        if isinstance(images, np.ndarray) and (images.ndim != 4 or images.dtype != np.uint8
                                               or images.shape[1:] != (self.image_size, self.image_size, 3)):
            raise ValueError(f"goal reader: expected images uint8 [N, {self.image_size}, {self.image_size}, 3] "
                             f"of view {self.cfg.view!r}, got {images.dtype} {images.shape}")
        if batch < 1:
            raise ValueError(f"batch: expected a number of frames >= 1, got {batch}")
        task_ids = np.asarray(task_ids)
        idx = self.task_index(task_ids)
        was = self.training
        self.eval()
        dev = self.progress_mean.device
        logits, prog = [], []
        for lo in range(0, len(idx), batch):
            part = images[lo:lo + batch]
            x = to_input(part) if isinstance(part, np.ndarray) else part  # floats per batch, not for every frame
            k = idx[lo:lo + batch].to(dev)
            lg, pr = self(x.to(dev, torch.float32), k)
            logits.append(lg)
            prog.append(pr * self.progress_std[k] + self.progress_mean[k])
        self.train(was)
        mask = self.slot_mask(task_ids)
        if not logits:  # no frame: the [0, P] shape every caller indexes
            empty = np.zeros((0, self.slots))
            return empty, empty.copy()
        return (np.where(mask, torch.sigmoid(torch.cat(logits)).cpu().numpy(), np.nan),
                np.where(mask, torch.cat(prog).cpu().numpy(), np.nan))

    def goal_prob(self, images: np.ndarray | torch.Tensor, task_ids: np.ndarray) -> np.ndarray:
        """P(the task's whole goal holds) [N]: the product of its predicates' probabilities."""
        holds, _ = self.read(images, task_ids)
        return np.nanprod(holds, axis=1)

    def goal_fraction(self, progress: np.ndarray, task_ids: np.ndarray) -> np.ndarray:
        """Progress [N, P] (read, in the predicates' units) of tasks [N] -> where each lies between its task's start
        anchor (0) and goal anchor (1), clipped to [0, 1] [N, P]; nan in slots the task does not have. ValueError
        when the reader has no anchors, or none for a predicate of these tasks."""
        if self.progress_anchors is None:
            raise ValueError("goal reader: it has no progress anchors (saved before they existed); train it again "
                             "with scripts/train_goal_reader.py")
        idx = self.task_index(task_ids).numpy()
        start, goal = self.progress_anchors[idx, :, 0], self.progress_anchors[idx, :, 1]
        mask = self.slot_mask(task_ids)
        bad = mask & ~(np.isfinite(start) & np.isfinite(goal) & (goal != start))
        if bad.any():
            row = int(np.flatnonzero(bad.any(1))[0])
            t = int(np.asarray(task_ids)[row])
            missing = [self.predicates[t][p] for p in np.flatnonzero(bad[row])]
            raise ValueError(f"goal reader: task {t}'s predicates {missing} have no progress anchors (their labels "
                             "never showed them both unmet at a start and met); use goal_score=probability")
        frac = np.clip((progress - start) / np.where(mask, goal - start, 1.0), 0.0, 1.0)
        return np.where(mask, frac, np.nan)

    def save(self, path: str | os.PathLike, **extra) -> None:
        if self.progress_anchors is not None:
            extra = {**extra, "progress_anchors": self.progress_anchors.tolist()}
        save_model_file(path, _FORMAT, asdict(self.cfg), self.state_dict(), suite=self.suite,
                        predicates={str(k): v for k, v in self.predicates.items()}, image_size=self.image_size,
                        **extra)

    @classmethod
    def load(cls, path: str | os.PathLike) -> tuple[GoalReader, dict]:
        """The reader `save` wrote, and the file's other entries (what it was trained on, how well)."""
        blob = load_model_file(path, "goal reader", _FORMAT,
                               keys=("config", "state_dict", "suite", "predicates", "image_size"))
        reader = cls(config_from(GoalReaderConfig, blob["config"], path, "goal reader"), blob["suite"],
                     {int(k): v for k, v in blob["predicates"].items()}, int(blob["image_size"]))
        restore(reader, blob["state_dict"], path, "goal reader")
        if blob.get("progress_anchors") is not None:
            reader.progress_anchors = np.asarray(blob["progress_anchors"], np.float64)
        extra = {k: v for k, v in blob.items()
                 if k not in ("format", "config", "state_dict", "suite", "predicates", "image_size",
                              "progress_anchors")}
        return reader.eval(), extra


def fit_goal_reader(images: np.ndarray, task_ids: np.ndarray, holds: np.ndarray, progress: np.ndarray, suite: str,
                    predicates: dict[int, list[str]], cfg: GoalReaderConfig | None = None,
                    progress_bar: bool = True, init: GoalReader | None = None,
                    weights: np.ndarray | None = None) -> GoalReader:
    """A reader fit on frames uint8 [N, H, W, 3] of one view, their task ids [N], and per predicate slot whether
    it holds [N, P] (bool) and its progress [N, P] (nan where unknown or not the task's).

    init: a trained reader to go on from (fine-tuning: its net, its tasks' predicates and its progress statistics
    are kept; `suite` and `predicates` must be its own). weights [N]: how often each frame is drawn (default
    uniform)."""
    import copy

    from tqdm import tqdm

    cfg = cfg or GoalReaderConfig()
    n = len(images)
    if not (len(task_ids) == len(holds) == len(progress) == n) or n < 2:
        raise ValueError(f"goal reader: expected N >= 2 frames with a task id, verdicts and progress each, got {n} "
                         f"frames, {len(task_ids)} task ids, {len(holds)} and {len(progress)} label rows")
    draw = None
    if weights is not None:
        weights = np.asarray(weights, np.float64)
        if weights.shape != (n,) or (weights < 0).any() or not weights.sum() > 0:
            raise ValueError(f"weights: expected {n} non-negative weights, not all 0, got shape {weights.shape}")
        draw = weights / weights.sum()
    torch.manual_seed(cfg.seed)
    rng = np.random.default_rng(cfg.seed)
    dev = torch.device(cfg.device)
    if init is not None:
        if init.suite != suite or init.image_size != images.shape[1]:
            raise ValueError(f"init: a reader of {init.suite} at {init.image_size} px cannot go on with {suite} "
                             f"frames of {images.shape[1]} px")
        reader = copy.deepcopy(init).cpu()
        reader.cfg = cfg
    else:
        reader = GoalReader(cfg, suite, predicates, images.shape[1])
    P = reader.slots
    if holds.shape[1] > P:
        raise ValueError(f"goal reader: labels have {holds.shape[1]} predicate slots, the tasks at most {P}")
    idx = reader.task_index(task_ids)
    pad = ((0, 0), (0, P - holds.shape[1]))
    mask = reader.slot_mask(task_ids)
    y_hold = torch.from_numpy(np.pad(holds.astype(np.float32), pad))
    prog = np.pad(progress.astype(np.float32), pad, constant_values=np.nan)
    known = mask & np.isfinite(prog)
    for k, t in enumerate(reader.tasks if init is None else []):  # standardize each task's predicates' progress
        rows = task_ids == t
        for p in range(P):
            vals = prog[rows & known[:, p], p]
            if len(vals):
                reader.progress_mean[k, p] = float(vals.mean())
                reader.progress_std[k, p] = float(max(vals.std(), 1e-3))
    y_prog = torch.from_numpy(np.where(known, (prog - reader.progress_mean[idx].numpy())
                                       / reader.progress_std[idx].numpy(), 0.0).astype(np.float32))
    m_hold, m_prog = torch.from_numpy(mask.astype(np.float32)), torch.from_numpy(known.astype(np.float32))
    # a verdict is true on a few frames of each successful episode: weigh the two outcomes equally
    pos = float((y_hold * m_hold).sum())
    pos_weight = torch.tensor(max(1.0, (float(m_hold.sum()) - pos) / max(pos, 1.0)))
    reader.to(dev).train()
    opt = torch.optim.AdamW(reader.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    # at least two warm-up steps: OneCycleLR divides by their count less one (a short fine-tune has few steps)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, cfg.lr, total_steps=cfg.steps,
                                                pct_start=min(0.5, max(0.05, 2.5 / cfg.steps)))
    bar = tqdm(range(cfg.steps), desc="goal reader", unit="step", disable=not progress_bar)
    for step in bar:
        b = torch.from_numpy(rng.choice(n, min(cfg.batch_size, n), p=draw) if draw is not None
                             else rng.integers(0, n, min(cfg.batch_size, n)))
        xb = to_input(images[b.numpy()]).to(dev)  # per batch: all frames as floats would be 4x the memory
        xb = xb + cfg.jitter * 2 * (torch.rand_like(xb) - 0.5)
        logits, pred = reader(xb, idx[b].to(dev))
        bce = F.binary_cross_entropy_with_logits(logits, y_hold[b].to(dev), pos_weight=pos_weight.to(dev),
                                                 reduction="none")
        loss = (bce * m_hold[b].to(dev)).sum() / m_hold[b].sum().clamp(min=1).to(dev)
        se = (pred - y_prog[b].to(dev)) ** 2 * m_prog[b].to(dev)
        loss = loss + cfg.progress_weight * se.sum() / m_prog[b].sum().clamp(min=1).to(dev)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        sched.step()
        if step % 50 == 0:
            bar.set_postfix(loss=f"{float(loss.detach()):.3f}")
    return reader.cpu().eval()


__all__ = ["READ_BATCH", "GoalReader", "GoalReaderConfig", "fit_goal_reader"]
