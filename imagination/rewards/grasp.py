"""Reward "grasp" of the imagination env: a classifier of the real outcome read from the imagined robot state.

Two endings (`ImaginationConfig.grasp_until`):

    "close"     the episode ends at the first action that commands the gripper shut, with P(success) of
                the grasp point there (world_models/grasp_point.py `features_at`);
    "release"   the episode goes on holding, and ends at the first action after the close that commands
                the gripper open, with P(success) of the grasp and of where the object, carried by the
                gripper, is let go (`release_features_at`). An episode that closes but never opens is read
                at its last step before the horizon.

Why "release": with "close" nothing judges what follows the grasp, and RL from the 1000-step BC doubled the
lifted-but-not-placed failures (5 -> 11 of 50 gate jobs) while it halved the never-lifted ones
(docs/notebook/loop.md, "RL on the grasp reward").
An episode that never closes gets reward 0 either way.

Where the object and its target start comes from `object_starts`: the start episodes' simulator labels, or, with
an object reader (world_models/object_reader.py), the episode's first camera image. With the reader the judge
reads only what a real robot has: the image, and the robot states the proprio model predicts.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from world_models.grasp_point import (
    GraspPointClassifier,
    GraspPointConfig,
    features_at,
    first_close,
    release_features_at,
)

if TYPE_CHECKING:
    from imagination.episodes import StartEpisode

ENDINGS = ("close", "release")


class GraspJudge:
    """`Reward` (imagination/rewards/base.py) "grasp": per-env bookkeeping for a batch of `num_envs` imagined
    episodes, whose start episodes' objects and targets start at `starts` [E, 2, 3] (`object_starts`)."""

    default_threshold = 0.5  # a probability trained as one
    graded = True  # the classifier's probability where the judge ended the episode: a graded outcome for GRPO

    def __init__(self, classifier: GraspPointClassifier, num_envs: int, state_dim: int, until: str = "close",
                 max_steps: int = 220, starts: np.ndarray | None = None):
        if until not in ENDINGS:
            raise ValueError(f"grasp_until: expected one of {list(ENDINGS)}, got {until!r}")
        self.classifier, self.until, self.max_steps = classifier, until, max_steps
        self.starts = np.zeros((0, 2, 3)) if starts is None else starts
        self.obj0, self.target0 = np.zeros((num_envs, 3)), np.zeros((num_envs, 3))
        self.task = np.zeros(num_envs, np.int64)
        self.t_close = np.full(num_envs, -1, np.int64)  # "release": the close's control step, -1 before it
        self.close_state = np.zeros((num_envs, state_dim))

    def start_limit(self, episode: StartEpisode, max_steps: int) -> int:
        """Before the recording's own first close (the judge judges the first close), and where labels exist, the
        rows they cover."""
        end = min(max_steps, len(episode.sim["grasped"])) if episode.sim else max_steps
        c = first_close(episode.action)
        return min(end, c) if c > 0 else end

    def start(self, i: int, episode_index: int, episode: StartEpisode, t: int) -> None:
        c = first_close(episode.action)
        if 0 <= c <= t and t > 0:
            raise ValueError(f"keyframe at frame {t} of start episode {episode_index}: reward 'grasp' starts "
                             f"before the recording first closes the gripper (frame {c})")
        obj0, target0 = self.starts[episode_index]
        self.obj0[i], self.target0[i], self.task[i], self.t_close[i] = obj0, target0, episode.task_id, -1

    def chunk(self, envs: np.ndarray, t: np.ndarray, before: torch.Tensor, acts: torch.Tensor, states: torch.Tensor,
              success_logits: torch.Tensor) -> tuple[np.ndarray, np.ndarray]:
        return self.judge(envs, t, before.cpu().numpy(), acts.cpu().numpy(), states.cpu().numpy())

    def advance(self, j: int, i: int, n: int) -> None:
        pass  # `judge` keeps the close's state itself

    def judge(self, envs: np.ndarray, t: np.ndarray, before: np.ndarray, acts: np.ndarray,
              states: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """One chunk of the envs `envs` [b], at control steps t [b], robot states before the chunk [b, S],
        actions [b, K, 7] and the proprio model's states after each action [b, K, S] -> P(success) [b, K]
        (non-zero only where an episode ends) and the action index [b] where each ends (-1: it goes on)."""
        b, K = acts.shape[:2]
        prob, end = np.zeros((b, K), np.float32), np.full(b, -1, np.int64)
        feats, rows = [], []
        for j, i in enumerate(envs):
            limit = min(K, self.max_steps - int(t[j]))  # actions of this chunk the episode still executes
            path = np.concatenate([before[j][None], states[j, :-1]])  # [K, S]: the state before each action
            c = first_close(acts[j, :limit]) if self.until == "close" or self.t_close[i] < 0 else -1
            if self.until == "close":
                if c >= 0:
                    end[j] = c
                    feats.append(features_at(path[c], int(t[j]) + c, self.obj0[i], self.target0[i]))
                    rows.append(j)
                continue
            if c >= 0:  # the close happens in this chunk: remember where, look for the release after it
                self.t_close[i], self.close_state[i] = int(t[j]) + c, path[c]
            if self.t_close[i] < 0:
                continue
            opens = np.flatnonzero(acts[j, c + 1:limit, 6] < 0)
            r = c + 1 + int(opens[0]) if len(opens) else -1
            if r < 0 and int(t[j]) + limit >= self.max_steps:  # held to the horizon: read at the last step
                r = limit - 1
            if r >= 0:
                end[j] = r
                feats.append(release_features_at(self.close_state[i], int(self.t_close[i]), path[r], int(t[j]) + r,
                                                 self.obj0[i], self.target0[i]))
                rows.append(j)
        if rows:  # one classifier call for every env that ended in this chunk
            rows_a = np.array(rows)
            prob[rows_a, end[rows_a]] = self.classifier.predict(np.stack(feats), self.task[envs[rows_a]])
        return prob, end


def object_starts(episodes: Sequence[Any], reader_path: str = "", views: Sequence[str] = ()) -> np.ndarray:
    """Where each start episode's object and target start, [E, 2, 3] (m): read by the object reader at
    `reader_path` from the episode's first frame (StartEpisode.frames [T, V, H, W, 3], views in `views` order),
    or, without one, taken from its simulator labels (`sim`)."""
    if not reader_path:
        unlabelled = [k for k, e in enumerate(episodes) if e.sim is None]
        if unlabelled:
            raise ValueError(f"start episodes {unlabelled[:5]}{'...' if len(unlabelled) > 5 else ''} have no "
                             "simulator labels, which reward 'grasp' reads the object's start from: run "
                             "scripts/label_episodes.py, or read it from the image (imagination.object_reader)")
        return np.stack([np.stack([e.sim["object_pos"][0], e.sim["target_pos"][0]]) for e in episodes])
    from world_models.object_reader import ObjectReader

    reader = ObjectReader.load(reader_path)
    if reader.cfg.view not in views:
        raise ValueError(f"object_reader: {reader_path} reads view {reader.cfg.view!r}, which the world model does "
                         f"not imagine (views {list(views)})")
    suites = sorted({e.suite for e in episodes if e.suite} - {reader.suite})
    if suites:
        raise ValueError(f"object_reader: {reader_path} was trained on {reader.suite}, the start episodes are of "
                         f"{suites}")
    v = list(views).index(reader.cfg.view)
    obj, target = reader.read(np.stack([e.frames[0, v] for e in episodes]), np.array([e.task_id for e in episodes]))
    return np.stack([obj, target], 1)


def fit_grasp_judge(train_data: Sequence[str], label_dirs: Sequence[str], episodes: Sequence[Any], num_envs: int,
                    until: str = "close", max_steps: int = 220, cfg: GraspPointConfig | None = None,
                    reader_path: str = "", views: Sequence[str] = ()) -> GraspJudge:
    """The judge of reward "grasp" for `num_envs` envs starting from `episodes` (StartEpisode), its classifier fit
    on the labelled datasets `train_data` and label-collection folders `label_dirs` (world_models/grasp_point.py),
    with each start episode's object and target start [E, 2, 3] (`object_starts`: the reader at `reader_path`
    reading the first frame of `views`, or the simulator labels)."""
    from world_models.grasp_point import fit_grasp_point

    if until not in ENDINGS:  # before the fit, which reads every training episode
        raise ValueError(f"grasp_until: expected one of {list(ENDINGS)}, got {until!r}")
    if not train_data and not label_dirs:
        raise ValueError("grasp_train_data: reward 'grasp' needs labelled episodes to fit its classifier on "
                         "(datasets labelled by scripts/label_episodes.py, or grasp_label_dirs)")
    starts = object_starts(episodes, reader_path, views)  # before the fit: a missing label fails at once
    classifier = fit_grasp_point(train_data, label_dirs, cfg, place=until == "release")
    return GraspJudge(classifier, num_envs, episodes[0].state.shape[1], until, max_steps, starts)


__all__ = ["ENDINGS", "GraspJudge", "fit_grasp_judge", "object_starts"]
