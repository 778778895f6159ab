"""Scripted-expert collection on a Ray cluster (`collect backend=ray`): the plan items of robot_data/collection.py are
recorded by Ray actors, one LIBERO simulator each, and the driver alone writes the dataset.

    python scripts/collect.py episodes_per_task=50 num_workers=64 backend=ray ray_address=auto

Why actors rather than one Ray task per episode: building a LIBERO simulator costs 10-20 s (imports, MuJoCo
model), an episode a few seconds, so a worker builds its simulator once and records episode after episode (as
the local backend's worker processes do). The actor is envs/ray_vector_env.py's, plus `record`: the expert acts
on the simulator's privileged state, which never leaves the worker; only the finished Episode comes back.

- **Retries.** A worker (its process or its node) that dies loses the episode it was recording and nothing else:
  a new actor, placed by Ray wherever a CPU is free, records that plan item again from the start. The item's
  seeded reset makes the episode the same. An item lost more than MAX_RESTARTS times is an error.
- **One writer.** Each episode reaches the driver once (one `ray.get` of one successful call) and the driver
  hands them to the dataset writer in plan order, so nothing is written twice and the episode indices are the
  local backend's.
- **Resumable.** Unchanged: `collect` skips the plan items already in the dataset. A driver that stops loses the
  episodes in flight, none of which was written.
"""
from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

from envs.ray_vector_env import MAX_RESTARTS, _EnvActor, join_cluster
from robot_data.dataset import Episode
from robot_data.recording import CollectConfig, PlanItem, env_config, record_episode

log = logging.getLogger(__name__)
LOOKAHEAD = 2  # plan items started ahead of the oldest unfinished one, per worker: bounds the episodes held back


class _RecordActor(_EnvActor):
    """A LIBERO simulator in a Ray worker that records whole expert episodes."""

    def record(self, item: PlanItem, strength: float, post_success_steps: int) -> Episode:
        return record_episode(self.env, item, strength, post_success_steps)


class RayRecorder:
    """Records plan items on `cfg.num_workers` Ray actors (one CPU each) of the cluster at `cfg.ray_address`."""

    def __init__(self, cfg: CollectConfig):
        self.cfg = cfg
        self._ray = join_cluster(cfg.ray_address)
        self._remote: Any = self._ray.remote(num_cpus=1)(_RecordActor)
        self.actors: list[Any] = []
        self.retries = 0  # plan items started over because their worker died

    def _new_actor(self, task_id: int) -> Any:
        return self._remote.remote(env_config(self.cfg, task_id))

    def submit(self, slot: int, item: PlanItem) -> Any:
        """Start recording `item` on worker `slot`; the future of its Episode."""
        return self.actors[slot].record.remote(item, self.cfg.perturbation_strength, self.cfg.post_success_steps)

    def record(self, todo: list[PlanItem]) -> Iterator[Episode]:
        """The episodes of `todo`, in its order, each recorded once by whichever worker was free."""
        ray = self._ray
        workers = min(self.cfg.num_workers, len(todo))
        self.actors = [self._new_actor(todo[0].task_id) for _ in range(workers)]
        pending: dict[Any, tuple[int, int]] = {}  # future -> (worker slot, index in todo)
        finished: dict[int, Episode] = {}  # recorded, waiting for the items before them
        lost = [0] * len(todo)
        free, next_start, next_out = list(range(workers)), 0, 0
        try:
            while next_out < len(todo):
                while free and next_start < min(len(todo), next_out + LOOKAHEAD * workers):
                    slot = free.pop()
                    pending[self.submit(slot, todo[next_start])] = (slot, next_start)
                    next_start += 1
                [future], _ = ray.wait(list(pending), num_returns=1)
                slot, i = pending.pop(future)
                try:
                    finished[i] = ray.get(future)
                except ray.exceptions.RayActorError as err:
                    if err.actor_init_failed:  # the simulator cannot be built: every retry would fail alike
                        raise
                    lost[i] += 1
                    if lost[i] > MAX_RESTARTS:
                        raise RuntimeError(f"plan item {todo[i].key}: its Ray worker died {lost[i]} times") from err
                    self.retries += 1
                    log.warning("a collection worker died; plan item %s starts over on a new one", todo[i].key)
                    self.actors[slot] = self._new_actor(todo[i].task_id)
                    pending[self.submit(slot, todo[i])] = (slot, i)
                    continue
                free.append(slot)
                while next_out in finished:
                    yield finished.pop(next_out)
                    next_out += 1
        finally:
            self.close(graceful=not pending)

    def close(self, graceful: bool = True) -> None:
        """Stop the workers; graceful: let each free its GL context first (not when stopped mid-episode:
        the close call would wait behind the episode)."""
        for actor in self.actors:
            if graceful:
                try:
                    self._ray.get(actor.close.remote(), timeout=30)
                except Exception:  # a dead or stuck worker: killing it below is all that is left to do
                    pass
            self._ray.kill(actor)
        self.actors = []


def record_on_ray(cfg: CollectConfig, todo: list[PlanItem]) -> Iterator[Episode]:
    """`RayRecorder(cfg).record(todo)`: what robot_data/collection.py calls for backend "ray"."""
    yield from RayRecorder(cfg).record(todo)


__all__ = ["LOOKAHEAD", "RayRecorder", "record_on_ray"]
