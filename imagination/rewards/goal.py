"""Reward "goal": the task's own goal, read from the imagined frames by a goal reader (world_models/goal_reader.py).

Every LIBERO task states its success as the predicates of its BDDL goal; the reader, trained on the simulator's
per-step predicate labels of recorded episodes (robot_data/goal_labels.py), gives P(each predicate holds) for a
frame, and the goal's probability is their product. After every imagined action the judge reads the frame the
world model imagined for it:

    "horizon"   (ImaginationConfig.goal_until, the default) every episode runs to the horizon and is paid the
                goal probability of its last frame, a success when it passes the threshold: a graded outcome,
                so a GRPO group whose episodes all fail still ranks them by how near the goal each ended;
    "threshold" the first frame whose goal probability passes the threshold ends the episode, with that
                probability as its reward; one that reaches the horizon is paid its last frame's, as above.

Every other action pays nothing: the reward is the verdict where the episode ends, not a sum along it. What the
verdict is (ImaginationConfig.goal_score):

    "probability"  (the default) the goal probability, the product of its predicates' P(holds);
    "distance"     exp(-d / goal_distance_scale) of the distance d (m) the reader reads for each of the goal's
                   On/In predicates, multiplied over them: 1 at the target, 1/e at one scale away. Why: over the
                   last tens of steps the imagined distance ranks real outcomes better than the imagined
                   probability (bench/goal_judge.py --last-steps), and a graded distance orders a group whose
                   episodes all miss by how far each missed. A task with another kind of predicate is refused.
    "progress"     where the read progress of each of the goal's predicates lies between its start and its goal
                   (the reader's progress anchors, from its training labels), clipped to [0, 1], multiplied over
                   them. Why: graded like "distance", for every kind of predicate (a drawer's joint, a knob's
                   angle, a distance). On LIBERO-Goal's drawer task the imagined goal probability is near 0 on
                   every imagined episode, successes included, while the read joint follows the real outcome
                   (docs/results.md, "Protocol v2 on LIBERO-Goal").

Why "horizon" by default: on real rollouts (bench/goal_judge.py) the reader's verdict on the last frame ranks real
outcomes far better than its highest verdict over the episode, because it passes the threshold on frames
mid-episode (docs/results.md, "The goal judge").
Why: the grasp judge is written for one thing, a bowl grasped by its rim, and sees nothing after the grasp (lifted
but not placed); a judge of the goal itself follows the whole episode and needs nothing per task but labels the
simulator gives for free, for every suite. It reads only imagined frames, which a real robot also has.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
import torch

from imagination.rewards.horizon import episode_end
from world_models.goal_reader import GoalReader

if TYPE_CHECKING:
    from imagination.episodes import StartEpisode


GOAL_ENDINGS = ("horizon", "threshold")
GOAL_SCORES = ("probability", "distance", "progress")
GOAL_THRESHOLD = 0.5  # a goal probability at or above it is an imagined success


class GoalJudge:
    """`Reward` (imagination/rewards/base.py) "goal" for a batch of `num_envs` imagined episodes."""

    graded = True  # the goal probability where the episode ended
    reads_frames = True

    def __init__(self, reader: GoalReader, num_envs: int, view: int, views: int, max_steps: int = 220,
                 threshold: float = GOAL_THRESHOLD, until: str = "horizon", score: str = "probability",
                 distance_scale: float = 0.05, imagined_steps: int = 0):
        """view: the index of the reader's view among the world model's `views` (frames stack them as channels);
        imagined_steps > 0: an episode also ends that many steps after its start (ImaginationConfig)."""
        if until not in GOAL_ENDINGS:
            raise ValueError(f"goal_until: expected one of {list(GOAL_ENDINGS)}, got {until!r}")
        if score not in GOAL_SCORES:
            raise ValueError(f"goal_score: expected one of {list(GOAL_SCORES)}, got {score!r}")
        if not distance_scale > 0:
            raise ValueError(f"goal_distance_scale: expected metres > 0, got {distance_scale}")
        self.reader, self.view, self.views, self.max_steps, self.until = reader, view, views, max_steps, until
        self.score, self.distance_scale, self.imagined_steps = score, distance_scale, imagined_steps
        self.default_threshold = threshold
        self.task = np.zeros(num_envs, np.int64)
        self.limit = np.full(num_envs, max_steps, np.int64)  # the step each env's episode ends at, at the latest

    @classmethod
    def load(cls, path: str, episodes: Sequence[StartEpisode], num_envs: int, views: Sequence[str],
             max_steps: int = 220, threshold: float | None = None, until: str = "horizon",
             score: str = "probability", distance_scale: float = 0.05, imagined_steps: int = 0) -> GoalJudge:
        """The judge of the reader at `path` (ImaginationConfig.goal_reader), checked against the world model's
        views, the frames' size and the start episodes' suite and tasks (one it has no goal predicates for is
        refused)."""
        from pathlib import Path

        if not path or not Path(path).is_file():
            raise FileNotFoundError(f"goal_reader: {path!r} is not a file (scripts/train_goal_reader.py writes one)")
        reader, _ = GoalReader.load(path)
        if reader.cfg.view not in views:
            raise ValueError(f"goal_reader: {path} reads view {reader.cfg.view!r}, which the world model does not "
                             f"imagine (views {list(views)})")
        size = episodes[0].frames.shape[2]
        if size != reader.image_size:
            raise ValueError(f"goal_reader: {path} reads {reader.image_size} px frames, the world model's are "
                             f"{size} px")
        suites = sorted({e.suite for e in episodes if e.suite} - {reader.suite})
        if suites:
            raise ValueError(f"goal_reader: {path} was trained on {reader.suite}, the start episodes are of {suites}")
        tasks = np.array([e.task_id for e in episodes])
        reader.task_index(tasks)  # one error naming the tasks it cannot judge
        if score == "distance":
            for task in sorted(set(tasks.tolist())):
                other = [p for p in reader.predicates[int(task)] if not p.lower().startswith(("(on ", "(in "))]
                if other:
                    raise ValueError(f"goal_score: 'distance' reads the distance of On/In predicates; task {task}'s "
                                     f"goal also has {other} (use goal_score=probability or progress)")
        if score == "progress":  # one error naming the task and predicates without anchors, before any imagining
            known = np.unique(tasks)
            reader.goal_fraction(np.zeros((len(known), reader.slots)), known)
        return cls(reader, num_envs, list(views).index(reader.cfg.view), len(views), max_steps,
                   GOAL_THRESHOLD if threshold is None else threshold, until, score, distance_scale, imagined_steps)

    def start_limit(self, episode: StartEpisode, max_steps: int) -> int:
        return max_steps

    def start(self, i: int, episode_index: int, episode: StartEpisode, t: int) -> None:
        self.task[i] = episode.task_id
        self.limit[i] = episode_end(t, self.max_steps, self.imagined_steps)

    def chunk(self, envs: np.ndarray, t: np.ndarray, before: torch.Tensor, acts: torch.Tensor, states: torch.Tensor,
              success_logits: torch.Tensor, frames: torch.Tensor | None = None) -> tuple[np.ndarray, np.ndarray]:
        if frames is None:
            raise ValueError("reward 'goal' reads the imagined frames: the env passes them when reads_frames is set")
        b, K = frames.shape[:2]
        v = frames[:, :, 3 * self.view:3 * self.view + 3].reshape(b * K, 3, *frames.shape[-2:])
        return self.verdicts(t, self.scores(v.float().cpu(), np.repeat(self.task[envs], K)).reshape(b, K),
                             self.limit[envs])

    def scores(self, images: torch.Tensor, tasks: np.ndarray) -> np.ndarray:
        """Frames [N, 3, H, W] in [-1, 1] of tasks [N] -> the verdict of each [N] under `score` (module docstring)."""
        holds, progress = self.reader.read(images, tasks)
        if self.score == "probability":
            return np.nanprod(holds, axis=1)
        if self.score == "progress":
            return np.nanprod(self.reader.goal_fraction(progress, tasks), axis=1)
        return np.nanprod(np.exp(-np.clip(progress, 0, None) / self.distance_scale), axis=1)

    def verdicts(self, t: np.ndarray, p: np.ndarray, limits: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Verdicts after each action [b, K] of envs at control steps t [b], whose episodes end at steps `limits` [b]
        at the latest (default max_steps) -> what the env is paid after each action [b, K] (with "threshold" the
        first that passes it; the last before the horizon) and where the judge ends each episode [b] (-1: it goes
        on, or the threshold ends it)."""
        b, K = p.shape
        limits = np.full(b, self.max_steps) if limits is None else limits
        prob, end = np.zeros((b, K), np.float32), np.full(b, -1, np.int64)
        for j in range(b):
            limit = min(K, int(limits[j]) - int(t[j]))  # actions of this chunk the episode still executes
            hit = (np.flatnonzero(p[j, :limit] >= self.default_threshold) if self.until == "threshold"
                   else np.zeros(0, np.int64))
            if len(hit):
                prob[j, hit[0]] = p[j, hit[0]]
            elif int(t[j]) + limit >= int(limits[j]):
                end[j] = limit - 1
                prob[j, limit - 1] = p[j, limit - 1]
        return prob, end

    def advance(self, j: int, i: int, n: int) -> None:
        pass  # nothing carried: each frame is read on its own


__all__ = ["GOAL_ENDINGS", "GOAL_SCORES", "GoalJudge"]
