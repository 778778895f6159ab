"""Real episodes that imagined ones start from: `StartEpisode` (the parts of a recorded episode the imagination env
and its judges read), `load_start_episodes` (from a dataset) and `task_keys` (one key per task, across suites)."""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from envs.frames import stack_views
from robot_data.dataset import Episode, EpisodeDataset, ReaderConfig


@dataclass
class StartEpisode:
    """A real episode to start imagined ones from: frames uint8 [T, V, H, W, 3], state [T, S], action [T, 7];
    sim: the simulator's per-row labels when recorded (object_pos, target_pos [T, 3], grasped [T]), else None.

    The parts of an `robot_data.dataset.Episode` the env reads (`from_episode`), with the world model's views
    stacked in the observation layout, so a start frame is handed to the policy as it is."""

    frames: np.ndarray
    state: np.ndarray
    action: np.ndarray
    instruction: str
    task_id: int
    sim: dict[str, np.ndarray] | None = None
    suite: str = ""  # the LIBERO suite it was recorded in ("" = unknown): task ids repeat across suites
    # whether the recorded episode succeeded in reality (None = not recorded): what the exploration check sets the
    # judge's reading of the start against (imagination/rl/exploration_check.py)
    success: bool | None = None

    @classmethod
    def from_episode(cls, ep: Episode, views: Sequence[str],
                     sim: dict[str, np.ndarray] | None = None) -> StartEpisode:
        """`ep` with `views` stacked (envs.frames.stack_views); state and action are ep's arrays, not copies."""
        return cls(stack_views(ep.frames, views), ep.state, ep.action, ep.instruction, ep.task_id, sim, ep.suite,
                   ep.episode_success)

    def recorded_at(self, t: int) -> tuple[np.ndarray, np.ndarray]:
        """The recorded frame [V, H, W, 3] and state [S] at step t, the last ones past the recording's end: what the
        policy sees in imagination with ImaginationConfig.observe "recorded"."""
        t = min(int(t), len(self.frames) - 1)
        return self.frames[t], np.asarray(self.state[t], np.float32)

    def recorded_chunk(self, t: int, K: int) -> np.ndarray:
        """The recorded actions t..t+K [K, 7] (float32), the last recorded action repeated past the recording's end:
        what an open-loop replay of the recording in the world model feeds it."""
        a = np.asarray(self.action[t:t + K], np.float32)
        return np.concatenate([a, np.repeat(np.asarray(self.action[-1:], np.float32), K - len(a), 0)])


def task_keys(episodes: Sequence[StartEpisode]) -> tuple[list[int], dict[int, str]]:
    """One int per episode naming its task (the task id; suite index x 1000 + task id when the episodes span
    several suites, whose task ids repeat), and each key's name: "task3", or "libero_object_task3" when mixed."""
    suites = sorted({e.suite for e in episodes})
    if len(suites) <= 1:
        keys = [e.task_id for e in episodes]
        return keys, {k: f"task{k}" for k in keys}
    keys = [1000 * suites.index(e.suite) + e.task_id for e in episodes]
    return keys, {k: f"{suites[k // 1000]}_task{k % 1000}" for k in keys}


def load_start_episodes(root: str, views: list[str], indices: list[int] | None = None,
                        features: ReaderConfig | None = None) -> list[StartEpisode]:
    """Real episodes (all, or `indices`) of the dataset at `root` with the world model's views; `features`
    maps its cameras, state and action (default: automatically)."""
    from robot_data.sim_labels import read_sim_labels  # the labels' sidecar files, written by scripts/label_episodes.py

    ds = EpisodeDataset(root, verify=False, features=features)
    ds.require_views(views)
    return [StartEpisode.from_episode(ds[i], views, read_sim_labels(root, i))
            for i in (range(len(ds)) if indices is None else indices)]


__all__ = ["StartEpisode", "load_start_episodes", "task_keys"]
