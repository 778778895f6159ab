"""Teach the goal reader to read the world model's frames as the real ones they stand for.

Why: the goal judge (imagination/rewards/goal.py) pays what a goal reader reads on imagined frames, and the reader
was trained on real frames only. On protocol v2's CPU world model the imagined frames are blurred, and the reader
trained on real ones reads the real outcome from them far worse than from the real frames (bench/goal_judge.py:
last-frame AUC 0.90 on real frames, 0.48 on imagined whole episodes; docs/results.md, "The goal judge"). RL then
climbs what that reader reads on the world model's frames, not the real placement.

The adaptation adds no label the simulator had not already given: each goal-labelled recorded episode (the
training data and the start's own rollouts, scripts/label_goals.py) is imagined open loop under its recorded actions
from `leads` steps before its recorded release (the placement starts RL uses; an episode that never lets go: from
`end_leads` steps before its end). Every imagined frame is paired with the goal labels the recording had at the same
step: whether each predicate held and how near it was. The reader is fine-tuned on those pairs beside the real
frames, so that it reads, from an imagined frame, the state reality was in. At RL time it still reads only imagined
frames: no simulator quantity feeds the judge.

    reader, figures = adapt_goal_reader(ReaderAdaptConfig(reader=..., world_model=..., data_dirs=[...], out_dir=...))
"""
from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from envs.frames import to_uint8
from imagination.env import ImaginationConfig, ImaginationVectorEnv
from imagination.episodes import StartEpisode, load_start_episodes
from imagination.imagine import open_imagination
from imagination.keyframes import Keyframe, align_down, placement_starts
from infra.atomic import atomic_write_text
from robot_data.goal_labels import read_goal_labels
from world_models.goal_reader import GoalReader, fit_goal_reader
from world_models.goal_reader_training import goal_frames
from world_models.grasp_point import first_close, release_after


@dataclass
class ReaderAdaptConfig:
    reader: str = ""  # the goal reader to adapt (scripts/train_goal_reader.py reader.pt)
    world_model: str = ""  # the world model RL imagines in
    proprio: str = ""  # its ProprioModel file ("" = fitted on data_dirs' first dataset)
    data_dirs: list[str] = field(default_factory=list)  # goal-labelled recorded datasets (scripts/label_goals.py)
    out_dir: str = ""  # writes reader.pt and adapt.json
    leads: list[int] = field(default_factory=lambda: [40, 32, 24, 16, 8])  # starts, steps before each release
    end_leads: list[int] = field(default_factory=lambda: [40])  # starts of episodes that never release: before the end
    align: int = 8  # starts rounded down to multiples of this (the policy's decision steps, as RL's keyframes)
    imagined_steps: int = 40  # imagined steps from each start (rounded up to whole chunks)
    samples: int = 1  # imagined samples (noise draws) of every start
    steps: int = 1000  # fine-tuning steps
    lr: float = 3e-4
    batch_size: int = 32
    imagined_share: float = 0.5  # share of each batch drawn from the imagined frames (the rest: the real ones)
    num_envs: int = 32  # starts imagined at once
    seed: int = 0
    num_threads: int = 2

    def validate(self) -> None:
        for name in ("reader", "world_model", "out_dir"):
            if not getattr(self, name):
                raise ValueError(f"{name}: required (see scripts/adapt_goal_reader.py --help)")
        if not self.data_dirs:
            raise ValueError("data_dirs: expected at least one dataset labelled by scripts/label_goals.py")
        if min(self.leads + self.end_leads, default=1) < 1 or not (self.leads or self.end_leads):
            raise ValueError(f"leads, end_leads: expected integers >= 1, at least one, got {self.leads}, "
                             f"{self.end_leads}")
        if not 0 < self.imagined_share <= 1:
            raise ValueError(f"imagined_share: expected a fraction in (0, 1], got {self.imagined_share}")
        if min(self.imagined_steps, self.samples, self.batch_size, self.num_envs, self.align, self.steps) < 1:
            raise ValueError("imagined_steps, samples, batch_size, num_envs, align, steps: expected >= 1; got "
                             f"{self.imagined_steps}, {self.samples}, {self.batch_size}, {self.num_envs}, "
                             f"{self.align}, {self.steps}")


class FrameTap:
    """Wraps the env's judge (the `Reward` protocol, imagination/rewards/base.py) and keeps the reader's view of
    every imagined frame, with the env and the action after which it was imagined; the judge's verdicts pass
    through unchanged."""

    reads_frames = True

    def __init__(self, inner: Any, view: int):
        self.inner, self.view = inner, view
        self.default_threshold, self.graded = inner.default_threshold, inner.graded
        self.frames: list[np.ndarray] = []  # uint8 [b*K, H, W, 3] per chunk
        self.env: list[np.ndarray] = []  # [b*K]
        self.after: list[np.ndarray] = []  # [b*K]: the control step of the action each frame follows

    def start_limit(self, episode: StartEpisode, max_steps: int) -> int:
        return self.inner.start_limit(episode, max_steps)

    def start(self, i: int, episode_index: int, episode: StartEpisode, t: int) -> None:
        self.inner.start(i, episode_index, episode, t)

    def chunk(self, envs: np.ndarray, t: np.ndarray, before: torch.Tensor, acts: torch.Tensor, states: torch.Tensor,
              success_logits: torch.Tensor, frames: torch.Tensor | None = None) -> tuple[np.ndarray, np.ndarray]:
        assert frames is not None  # reads_frames: the env decodes the chunk for this judge
        b, K = frames.shape[:2]
        self.frames.append(to_uint8(frames[:, :, 3 * self.view:3 * self.view + 3]).reshape(b * K, *frames.shape[-2:],
                                                                                            3))
        self.env.append(np.repeat(np.asarray(envs), K))
        self.after.append((np.asarray(t)[:, None] + np.arange(K)[None]).reshape(-1))
        return self.inner.chunk(envs, t, before, acts, states, success_logits,
                                frames if self.inner.reads_frames else None)

    def advance(self, j: int, i: int, n: int) -> None:
        self.inner.advance(j, i, n)


def adapt_starts(episodes: list[StartEpisode], leads: list[int], end_leads: list[int], align: int) -> list[Keyframe]:
    """Keyframes `leads` steps before each episode's first release after its close (rounded down to `align`); an
    episode with no such release starts `end_leads` steps before its end instead."""
    actions = [np.asarray(e.action) for e in episodes]
    starts: list[Keyframe] = []
    released = [first_close(a) >= 0 and release_after(a, first_close(a)) >= 0 for a in actions]
    for lead in leads:
        t0 = placement_starts(actions, lead, align)
        starts += [Keyframe(int(e), int(t0[e])) for e in np.flatnonzero(t0 >= 0)]
    for lead in end_leads:
        starts += [Keyframe(e, align_down(len(actions[e]) - lead, align)) for e in range(len(episodes))
                   if not released[e] and len(actions[e]) - lead >= 0]
    return starts


def imagine_frames(env: ImaginationVectorEnv, starts: list[Keyframe], chunks: int, view: int,
                   seed: int = 0) -> dict[str, np.ndarray]:
    """From `starts` (env.num_envs at a time), `chunks` chunks imagined open loop under each episode's recorded
    actions -> images uint8 [N, H, W, 3] (the reader's view), episode [N] (index into env.episodes) and after [N]
    (the recorded action each frame follows); frames past the recording's end are dropped."""
    K, B = env.K, env.num_envs
    tap = FrameTap(env.reward, view)
    env.reward = tap  # the env asks its judge for every chunk; the tap keeps the decoded frames on the way
    images, episode, after = [], [], []
    try:
        for lo in range(0, len(starts), B):
            part = starts[lo:lo + B]
            part = part + [part[-1]] * (B - len(part))  # pad the last batch; the padding is dropped below
            n_real = min(B, len(starts) - lo)
            env.reset(seed=seed + lo, options={"keyframes": part})
            tap.frames, tap.env, tap.after = [], [], []
            for j in range(chunks):
                act = np.zeros((B, K, 7), np.float32)
                for b, kf in enumerate(part):
                    act[b] = env.episodes[kf.episode].recorded_chunk(kf.t + j * K, K)
                env.step(act)
            f, e, a = np.concatenate(tap.frames), np.concatenate(tap.env), np.concatenate(tap.after)
            ep = np.array([part[i].episode for i in e])
            T = np.array([len(env.episodes[k].action) for k in ep])
            keep = (e < n_real) & (a < T)
            images.append(f[keep])
            episode.append(ep[keep])
            after.append(a[keep])
    finally:  # the env's own judge back, whatever happened
        env.reward = tap.inner
    return {"images": np.concatenate(images), "episode": np.concatenate(episode), "after": np.concatenate(after)}


def labelled_episodes(data_dirs: list[str], views: list[str]) -> tuple[list[StartEpisode], list[dict[str, Any]]]:
    """Every episode of the datasets that has goal labels, as start episodes with the world model's views, and its
    labels (robot_data/goal_labels.py: holds/progress [T, P] after each action)."""
    episodes, labels = [], []
    for root in data_dirs:
        eps = load_start_episodes(root, views)
        for i, ep in enumerate(eps):
            lab = read_goal_labels(root, i)
            if lab is not None:
                episodes.append(ep)
                labels.append(lab)
    if not episodes:
        raise ValueError(f"data_dirs: no episode with goal labels in {data_dirs}; label them with "
                         "scripts/label_goals.py")
    return episodes, labels


def imagined_labels(frames: dict[str, np.ndarray], episodes: list[StartEpisode], labels: list[dict[str, Any]],
                    slots: int) -> dict[str, np.ndarray]:
    """The recorded goal labels at each imagined frame's step: task_id [N], holds [N, slots], progress [N, slots]
    (nan in slots a task does not have; frames past a replay's labelled prefix dropped)."""
    keep, holds, progress = [], [], []
    for n, (e, a) in enumerate(zip(frames["episode"], frames["after"])):
        lab = labels[int(e)]
        if a >= len(lab["holds"]):
            continue
        h, p = np.asarray(lab["holds"][a], bool), np.asarray(lab["progress"][a], np.float32)
        keep.append(n)
        holds.append(np.pad(h, (0, slots - len(h))))
        progress.append(np.pad(p, (0, slots - len(p)), constant_values=np.nan))
    idx = np.array(keep, np.int64)
    return {"images": frames["images"][idx], "task_id": np.array([episodes[int(e)].task_id
                                                                 for e in frames["episode"][idx]]),
            "holds": np.array(holds, bool).reshape(len(idx), slots),
            "progress": np.array(progress, np.float32).reshape(len(idx), slots)}


def read_error(reader: GoalReader, data: dict[str, np.ndarray]) -> dict[str, float]:
    """How the reader reads frames against their labels: the median |progress error| of the first predicate (m),
    and the AUC of its goal probability for the frames where the whole goal holds (nan with one kind only)."""
    from sklearn.metrics import roc_auc_score

    holds, prog = reader.read(data["images"], data["task_id"])
    mask = reader.slot_mask(data["task_id"])
    goal = np.asarray(np.where(mask, data["holds"], True).all(1))
    p_goal = np.nanprod(holds, axis=1)
    err = np.abs(prog[:, 0] - data["progress"][:, 0])
    return {"progress_abs_error_median": float(np.nanmedian(err)),
            "goal_auc": float(roc_auc_score(goal, p_goal)) if 0 < goal.sum() < len(goal) else float("nan")}


def adapt_goal_reader(cfg: ReaderAdaptConfig) -> dict[str, Any]:
    """scripts/adapt_goal_reader.py: imagine cfg.data_dirs' labelled episodes, fine-tune the reader on the imagined
    frames and the real ones, write out_dir/reader.pt and out_dir/adapt.json; returns what adapt.json holds."""
    cfg.validate()
    for name in ("reader", "world_model", "proprio"):
        path = getattr(cfg, name)
        if path and not Path(path).is_file():
            raise FileNotFoundError(f"{name}: {path!r} is not a file")
    for root in cfg.data_dirs:
        if not Path(root).is_dir():
            raise FileNotFoundError(f"data_dirs: {root!r} is not a dataset directory")
    torch.set_num_threads(cfg.num_threads)
    torch.manual_seed(cfg.seed)
    t0 = time.time()
    reader, _ = GoalReader.load(cfg.reader)
    probe = open_imagination(cfg.world_model, cfg.data_dirs[0], cfg.proprio, num_envs=1,
                             config=ImaginationConfig(max_steps=10_000, success_threshold=2.0))
    views = list(probe.wm.cfg.views)
    if reader.cfg.view not in views:
        raise ValueError(f"reader: it reads view {reader.cfg.view!r}, the world model imagines {views}")
    episodes, labels = labelled_episodes(cfg.data_dirs, views)
    starts = adapt_starts(episodes, list(cfg.leads), list(cfg.end_leads), cfg.align)
    if not starts:
        raise ValueError(f"data_dirs: no episode of {cfg.data_dirs} is long enough to start {cfg.leads} steps before "
                         f"its release or {cfg.end_leads} before its end")
    env = open_imagination(probe.wm, episodes, probe.proprio, num_envs=min(cfg.num_envs, len(starts)),
                           config=ImaginationConfig(max_steps=10_000, success_threshold=2.0))
    chunks = -(-cfg.imagined_steps // env.K)
    view = views.index(reader.cfg.view)
    parts = [imagine_frames(env, starts, chunks, view, cfg.seed + 100_000 * s) for s in range(cfg.samples)]
    frames = {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}
    imagined = imagined_labels(frames, episodes, labels, reader.slots)
    real = goal_frames(list(cfg.data_dirs), reader.cfg.view)
    print(f"[reader adapt] {len(starts)} starts x {cfg.samples} samples: {len(imagined['images'])} imagined frames, "
          f"{len(real['images'])} real ones ({time.time() - t0:.0f} s)")
    before = {"imagined": read_error(reader, imagined), "real": read_error(reader, real)}
    n_i, n_r = len(imagined["images"]), len(real["images"])
    weights = np.concatenate([np.full(n_i, cfg.imagined_share / n_i),
                              np.full(n_r, (1 - cfg.imagined_share) / n_r)])
    rcfg = replace(reader.cfg, steps=cfg.steps, lr=cfg.lr, batch_size=cfg.batch_size, seed=cfg.seed)
    slots = reader.slots
    adapted = fit_goal_reader(np.concatenate([imagined["images"], real["images"]]),
                              np.concatenate([imagined["task_id"], real["task_id"]]),
                              np.concatenate([imagined["holds"], np.pad(real["holds"], ((0, 0), (0, slots - real[
                                  "holds"].shape[1])))]),
                              np.concatenate([imagined["progress"], np.pad(real["progress"], ((0, 0), (
                                  0, slots - real["progress"].shape[1])), constant_values=np.nan)]),
                              reader.suite, reader.predicates, rcfg, init=reader, weights=weights)
    after = {"imagined": read_error(adapted, imagined), "real": read_error(adapted, real)}
    print(f"[reader adapt] before {before}\n[reader adapt] after  {after}")
    out = Path(cfg.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    result = {"reader_path": str(out / "reader.pt"), "config": asdict(cfg), "starts": len(starts),
              "imagined_frames": n_i, "real_frames": n_r, "before": before, "after": after,
              "seconds": round(time.time() - t0, 1)}
    adapted.save(out / "reader.pt", adapted_from=cfg.reader, adapted=result)
    atomic_write_text(out / "adapt.json", json.dumps(result, indent=2))
    return result


__all__ = ["FrameTap", "ReaderAdaptConfig", "adapt_goal_reader", "adapt_starts", "imagine_frames",
           "imagined_labels", "labelled_episodes", "read_error"]
