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
from typing import Any

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


def goal_frames(data_dirs: list[str], view: str) -> dict[str, Any]:
    """Every frame (uint8 [N, H, W, 3] of `view`) of the episodes with goal labels (scripts/label_goals.py) in the
    datasets, with per frame: task id, episode (a running number over the datasets), whether each predicate holds
    before that frame's action [N, P] and its progress [N, P]; per episode its success; the tasks' predicates; the
    suite."""
    from robot_data.dataset import EpisodeDataset
    from robot_data.goal_labels import before_actions, read_goal_labels

    rows: dict[str, list] = {"images": [], "task_id": [], "episode": [], "holds": [], "progress": []}
    success: list[bool] = []
    predicates: dict[int, list[str]] = {}
    suites: set[str] = set()
    for root in data_dirs:
        ds = EpisodeDataset(root, verify=False)
        ds.require_views([view])
        for i in range(len(ds)):
            labels = read_goal_labels(root, i)
            if labels is None:
                continue
            holds, progress = before_actions(labels)  # row t: before action t, as frame t
            ep = ds[i]
            T = min(len(holds), len(ep.frames[view]))  # a replay that diverged labels a prefix
            suites.add(ep.suite)
            predicates[int(ep.task_id)] = list(labels["predicates"])
            rows["images"].append(ep.frames[view][:T])
            rows["task_id"].append(np.full(T, ep.task_id))
            rows["episode"].append(np.full(T, len(success)))
            rows["holds"].append(holds[:T])
            rows["progress"].append(progress[:T])
            success.append(bool(ep.episode_success))
    if not success:
        raise ValueError(f"data_dirs: no episode with goal labels in {data_dirs}; label them with "
                         "scripts/label_goals.py")
    if len(suites) > 1:
        raise ValueError(f"data_dirs: episodes of several suites {sorted(suites)}; a reader knows one suite's tasks")
    P = max(h.shape[1] for h in rows["holds"])
    out = {k: np.concatenate(v) for k, v in rows.items() if k not in ("holds", "progress")}
    out["holds"] = np.concatenate([np.pad(h, ((0, 0), (0, P - h.shape[1]))) for h in rows["holds"]])
    out["progress"] = np.concatenate([np.pad(p.astype(np.float32), ((0, 0), (0, P - p.shape[1])),
                                             constant_values=np.nan) for p in rows["progress"]])
    return {**out, "success": np.array(success), "predicates": predicates, "suite": suites.pop()}


@dataclass
class TrainGoalReaderConfig:
    data_dirs: list[str] = field(default_factory=list)  # recorded datasets (target goal: labelled by label_goals.py)
    out_dir: str = "outputs/goal_reader"  # reader.pt and result.json
    # every holdout_every-th episode (of each task, in order) is held out and measured, never trained on;
    # 0: train on all of them (then no held-out figure)
    holdout_every: int = 5
    # "goal": which of each task's goal predicates hold in a frame (labels by scripts/label_goals.py); "outcome":
    # whether the frame's episode succeeds, on the frames of outcome_window (world_models/outcome_reader.py)
    target: str = "goal"
    outcome_window: list[int] = field(default_factory=lambda: [0, 64])  # control steps from the first gripper close
    reader: GoalReaderConfig = field(default_factory=GoalReaderConfig)


def reader_figures(reader: GoalReader, data: dict[str, Any], episodes: np.ndarray) -> dict[str, Any]:
    """How the reader's goal probability ranks the frames of `episodes` (rows of goal_frames' data) where the whole
    goal holds against the others, and the episodes that succeeded against the failures by their highest goal
    probability: AUCs pooled and per task (nan with one outcome only); the progress error per predicate slot."""
    from sklearn.metrics import roc_auc_score

    def auc(y: np.ndarray, p: np.ndarray) -> float:
        return float(roc_auc_score(y, p)) if 0 < y.sum() < len(y) else float("nan")

    rows = np.isin(data["episode"], episodes)
    tasks, epi = data["task_id"][rows], data["episode"][rows]
    mask = reader.slot_mask(tasks)
    holds, prog = reader.read(data["images"][rows], tasks)  # one pass: the goal probability is their product
    p_goal = np.nanprod(holds, axis=1)
    goal = np.asarray(np.where(mask, data["holds"][rows], True).all(1))
    best = {int(e): float(p_goal[epi == e].max()) for e in episodes}
    ep_task = {int(e): int(tasks[epi == e][0]) for e in episodes}
    ep_best = np.array([best[int(e)] for e in episodes])
    out: dict[str, Any] = {"frames": int(rows.sum()), "episodes": len(episodes), "frame_auc": auc(goal, p_goal),
                           "episode_auc": auc(data["success"][episodes], ep_best), "per_task": {}}
    for t in sorted(set(ep_task.values())):
        es = np.array([e for e in episodes if ep_task[int(e)] == t])
        out["per_task"][t] = {"episodes": len(es), "successes": int(data["success"][es].sum()),
                              "frame_auc": auc(goal[tasks == t], p_goal[tasks == t]),
                              "episode_auc": auc(data["success"][es], np.array([best[int(e)] for e in es]))}
    err = np.abs(prog - data["progress"][rows])
    out["progress_abs_error_median"] = [float(np.nanmedian(err[:, p])) if np.isfinite(err[:, p]).any() else None
                                        for p in range(err.shape[1])]
    return out


def progress_anchors(reader: GoalReader, task_ids: np.ndarray, episode: np.ndarray, holds: np.ndarray,
                     progress: np.ndarray) -> np.ndarray:
    """Each task's predicates' (start, goal) progress [tasks, P, 2] from labelled frames (goal_frames' rows): the
    median progress on the episodes' first frames where the predicate does not hold yet, and the median on every
    frame where it holds; nan where the frames show neither. Labels supervise this at build time only: the judge then
    reads progress from imagined frames alone."""
    first = np.r_[True, episode[1:] != episode[:-1]]
    out = np.full((len(reader.tasks), reader.slots, 2), np.nan)
    for k, t in enumerate(reader.tasks):
        rows = task_ids == t
        for p in range(min(reader.slots, holds.shape[1])):
            known = rows & np.isfinite(progress[:, p])
            start, goal = progress[known & first & ~holds[:, p], p], progress[known & holds[:, p], p]
            if len(start) and len(goal):
                out[k, p] = float(np.median(start)), float(np.median(goal))
    return out


def train_goal_reader(cfg: TrainGoalReaderConfig, progress_bar: bool = True) -> dict[str, Any]:
    """Fit a reader on cfg's labelled datasets but their held-out episodes, save it with what it was trained on and
    how it reads the held-out episodes (result.json beside it)."""
    import time
    from pathlib import Path

    from infra.atomic import atomic_write_json

    if not cfg.data_dirs:
        raise ValueError("data_dirs: expected at least one recorded dataset (labelled by scripts/label_goals.py "
                         "for target goal)")
    if cfg.holdout_every < 0 or cfg.holdout_every == 1:
        raise ValueError(f"holdout_every: expected 0 (none) or an integer >= 2, got {cfg.holdout_every}")
    if cfg.target == "goal":
        data = goal_frames(cfg.data_dirs, cfg.reader.view)
    elif cfg.target == "outcome":
        from world_models.outcome_reader import outcome_frames

        data = outcome_frames(cfg.data_dirs, cfg.reader.view, cfg.outcome_window)
    else:
        raise ValueError(f"target: expected 'goal' or 'outcome', got {cfg.target!r}")
    n_ep = len(data["success"])
    ep_task = np.array([data["task_id"][data["episode"] == e][0] for e in range(n_ep)])
    held = np.array([e for t in np.unique(ep_task) for k, e in enumerate(np.flatnonzero(ep_task == t))
                     if cfg.holdout_every and k % cfg.holdout_every == cfg.holdout_every - 1], np.int64)
    train = np.setdiff1d(np.arange(n_ep), held)
    rows = np.isin(data["episode"], train)
    t0 = time.time()
    reader = fit_goal_reader(data["images"][rows], data["task_id"][rows], data["holds"][rows],
                             data["progress"][rows], data["suite"], data["predicates"], cfg.reader, progress_bar)
    reader.progress_anchors = progress_anchors(reader, data["task_id"][rows], data["episode"][rows],
                                               data["holds"][rows], data["progress"][rows])
    result: dict[str, Any] = {"data_dirs": list(cfg.data_dirs), "suite": data["suite"], "target": cfg.target,
                              **({"outcome_window": list(cfg.outcome_window)} if cfg.target == "outcome" else {}),
                              "predicates": {str(k): v for k, v in data["predicates"].items()},
                              "train_seconds": round(time.time() - t0, 1),
                              "train": reader_figures(reader, data, train)}
    if len(held):
        result["heldout"] = reader_figures(reader, data, held)
    if cfg.target == "outcome":  # where in the window the verdict parts successes from failures
        from world_models.outcome_reader import outcome_by_step

        for part, eps in (("train", train), ("heldout", held)):
            if len(eps):
                result[part]["within_task_auc_by_step"] = outcome_by_step(reader, data, eps)
    out = Path(cfg.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    reader.save(out / "reader.pt", trained_on=result)
    atomic_write_json(out / "result.json", result, indent=2)
    return result


__all__ = ["GoalReader", "GoalReaderConfig", "TrainGoalReaderConfig", "fit_goal_reader", "goal_frames",
           "progress_anchors", "reader_figures", "train_goal_reader"]
