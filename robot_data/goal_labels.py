"""Per-step goal-predicate labels of recorded episodes: which of the task's goal predicates hold, and how near each is.

LIBERO states a task's success as the goal of its BDDL file, a conjunction of predicates:
`(:goal (And (On moka_pot_1 flat_stove_1_cook_region) (TurnOn flat_stove_1)))`; the simulator's
`check_success` is that conjunction. One success bit per step says nothing of a multi-stage LIBERO-10
episode that got halfway, nor of how near an unfinished goal came. The simulator can evaluate every
predicate at every step, so a recorded episode, replayed exactly (`robot_data.sim_labels.replay_actions`), gives
free, dense labels for every task of every suite: which predicates hold, and a progress figure for each.

    <data_dir>/goal_labels/episode_{index:06d}.npz
        holds           bool    [T, P]  predicate p holds after action t (row t, as the recorded success[t])
        progress        float32 [T, P]  how near predicate p is after action t (PROGRESS, below)
        start_holds     bool    [P]     the same at the episode's start, before action 0
        start_progress  float32 [P]
        info            JSON string     predicates, progress kinds, suite, task_id, seed, init_state_id,
                                        length, rows, max_state_diff, diverged

Each predicate is evaluated by LIBERO's own implementation (the env's `_eval_predicate`, which its
`check_success` calls for each goal predicate), so `holds.all(axis=1)` is the recorded success flag at every
step. Progress, per predicate name (`PROGRESS`):

    on, in                      distance_m  3D distance (m) from the object's position to the target's, both as
                                            LIBERO's predicate reads them (a body's origin; a region's site);
                                            smaller is nearer, but not 0 at success (a bowl rests above a plate)
    up                          height_m    the object's height (m); the predicate holds from 1.0 m
    open, close, turnon,        joint       the position of the fixture's (or region's) first joint: radians
    turnoff                                 for doors and knobs, metres for drawers, in the fixture's own
                                            direction (measured: the cabinets' drawers open from 0 to about
                                            -0.16 m, the microwave's door from 0 to about -1.8 rad, the
                                            stove's knob turns on towards +0.7..1.3 rad); nan without a joint

A goal with a predicate this module has no evaluator for is refused with one ValueError naming the task and
the predicate: a label that silently means something else is worse than none. A replay that does not
reproduce its recording (robot state or success flag) gives no labels, or with `keep_prefix` those of the
steps before it diverged (info "rows" < "length").
"""
from __future__ import annotations

import json
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from infra.atomic import atomic_write
from robot_data.sim_labels import MAX_STATE_DIFF, read_checked_npz, replay_actions, replay_dataset

if TYPE_CHECKING:  # annotations only: reading labels must not pull in the simulator
    from envs.libero_env import LiberoEnv
    from robot_data.dataset import EpisodeMeta

GOAL_LABELS_DIR = "goal_labels"
# Predicate name (lower case, as LIBERO's parser gives it) -> (number of arguments, what its progress measures).
PREDICATES: dict[str, tuple[int, str]] = {
    "on": (2, "distance_m"), "in": (2, "distance_m"), "up": (1, "height_m"),
    "open": (1, "joint"), "close": (1, "joint"), "turnon": (1, "joint"), "turnoff": (1, "joint"),
}
PROGRESS = {name: kind for name, (_, kind) in PREDICATES.items()}


@dataclass(frozen=True)
class Predicate:
    """One goal predicate: LIBERO's name (lower case) and its object or region names."""

    name: str
    args: tuple[str, ...]

    def __str__(self) -> str:
        return f"({self.name} {' '.join(self.args)})"

    @property
    def progress_kind(self) -> str:
        return PROGRESS[self.name]


def parse_goal(goal_state: Sequence[Any], task: str) -> list[Predicate]:
    """The predicates of a parsed BDDL goal (`parsed_problem["goal_state"]`: a list of [name, *args] lists, the
    And's conjuncts); a ValueError naming `task` and the predicate for one with no evaluator here."""
    if not isinstance(goal_state, (list, tuple)) or not goal_state:
        raise ValueError(f"{task}: expected a goal of one or more predicates, got {goal_state!r}")
    out = []
    for entry in goal_state:
        parts = list(entry) if isinstance(entry, (list, tuple)) else [entry]
        head = parts[0] if parts else ""
        name = head.lower() if isinstance(head, str) else _show(head)
        args = parts[1:]
        if name not in PREDICATES:
            raise ValueError(f"{task}: its goal predicate {name!r}, in {_show(entry)}, has no evaluator in "
                             f"robot_data.goal_labels (known: {sorted(PREDICATES)}); the task is refused")
        arity = PREDICATES[name][0]
        if len(args) != arity or not all(isinstance(a, str) for a in args):
            raise ValueError(f"{task}: its goal predicate {name!r}, in {_show(entry)}, expects {arity} object "
                             f"name(s); the task is refused")
        out.append(Predicate(name, tuple(args)))
    return out


def _show(entry: Any) -> str:
    return f"({' '.join(map(_show, entry))})" if isinstance(entry, (list, tuple)) else str(entry)


def task_name(env: LiberoEnv) -> str:
    return f"{env.cfg.suite} task {env.task_id} ({env.instruction!r})"


def task_goal(raw_env: Any, task: str) -> list[Predicate]:
    """The goal predicates of the task a LIBERO env (`LiberoEnv.raw`) holds, each naming objects of its scene."""
    env = raw_env.env
    predicates = parse_goal(env.parsed_problem["goal_state"], task)
    for p in predicates:
        missing = [a for a in p.args if a not in env.object_states_dict]
        if missing:
            raise ValueError(f"{task}: its goal predicate {p} names {missing}, which the scene does not hold")
    return predicates


def evaluate_goal(raw_env: Any, predicates: Sequence[Predicate]) -> tuple[np.ndarray, np.ndarray]:
    """(holds bool [P], progress float32 [P]) of the goal's predicates at the simulator's current state."""
    env = raw_env.env
    holds = np.array([bool(env._eval_predicate([p.name, *p.args])) for p in predicates], bool)
    progress = np.array([_progress(env, p) for p in predicates], np.float32)
    return holds, progress


def _progress(env: Any, p: Predicate) -> float:
    kind = p.progress_kind
    if kind == "distance_m":
        a, b = (np.asarray(env.object_states_dict[n].get_geom_state()["pos"], np.float64) for n in p.args)
        return float(np.linalg.norm(a - b))
    if kind == "height_m":
        return float(env.object_states_dict[p.args[0]].get_geom_state()["pos"][2])
    # joint: a region (a site: the cabinet's drawer region) lists its joints itself; an object (a fixture) its model
    name = p.args[0]
    state = env.object_states_dict[name]
    joints = (env.object_sites_dict[name].joints if state.object_state_type == "site"
              else env.get_object(name).joints)
    if not joints:
        return math.nan
    addr = env.sim.model.get_joint_qpos_addr(joints[0])
    return float(env.sim.data.qpos[addr[0] if isinstance(addr, tuple) else addr])


# ------------------------------------------------------------------------------------------ replay
@dataclass
class GoalReplay:
    """Goal labels of one replayed episode; holds/progress None (with a reason) when it gave none."""

    predicates: list[Predicate]
    holds: np.ndarray | None  # bool [rows, P], row t = after action t
    progress: np.ndarray | None  # float32 [rows, P]
    start_holds: np.ndarray = field(default_factory=lambda: np.zeros(0, bool))  # [P], before action 0
    start_progress: np.ndarray = field(default_factory=lambda: np.zeros(0, np.float32))
    reason: str = ""  # "" when every step was labelled
    max_state_diff: float = math.nan


def replay_goal_labels(env: LiberoEnv, meta: EpisodeMeta, action: np.ndarray, state: np.ndarray,
                       success: np.ndarray, tol: float = MAX_STATE_DIFF, keep_prefix: bool = False) -> GoalReplay:
    """Replay a recorded episode in `env` (from `robot_data.sim_labels.replay_env`) and evaluate its goal after
    every action.

    meta, action [T, 7], state [T, S], success [T]: as recorded. Raises ValueError for a goal with a predicate
    that has no evaluator. A replay that diverges gives no labels, or with `keep_prefix` those of the actions
    after which it still matched the recording."""
    T = len(action)
    predicates: list[Predicate] = []
    holds = np.zeros((T, 0), bool)
    progress = np.zeros((T, 0), np.float32)
    start_values: tuple[np.ndarray, np.ndarray] = (np.zeros(0, bool), np.zeros(0, np.float32))

    def start() -> str:
        nonlocal predicates, holds, progress, start_values
        predicates = task_goal(env.raw, task_name(env))
        holds, progress = np.zeros((T, len(predicates)), bool), np.zeros((T, len(predicates)), np.float32)
        start_values = evaluate_goal(env.raw, predicates)
        return ""

    def after(t: int) -> None:
        holds[t], progress[t] = evaluate_goal(env.raw, predicates)

    run = replay_actions(env, meta, action, state, success, tol, start=start, after=after)
    rows = run.steps if run.reason.startswith("diverged") and keep_prefix else (T if not run.reason else 0)
    return GoalReplay(predicates, holds[:rows] if rows > 0 else None, progress[:rows] if rows > 0 else None,
                      start_values[0], start_values[1], run.reason, run.max_state_diff)


# ------------------------------------------------------------------------------------------ sidecar
def goal_label_path(data_dir: str | os.PathLike, index: int) -> Path:
    return Path(data_dir) / GOAL_LABELS_DIR / f"episode_{int(index):06d}.npz"


def write_goal_labels(path: str | os.PathLike, replay: GoalReplay, info: dict[str, Any]) -> None:
    """Atomic: a reader sees the old file, no file, or the whole new one. info gains the predicates and their
    progress kinds."""
    holds, progress = replay.holds, replay.progress
    if holds is None or progress is None:
        raise ValueError(f"{path}: nothing to write, the replay gave no labels ({replay.reason})")
    info = {**info, "predicates": [str(p) for p in replay.predicates],
            "progress": [p.progress_kind for p in replay.predicates]}
    def write(tmp: Path) -> None:
        with open(tmp, "wb") as f:  # a file object: np.savez would append ".npz" to a tmp name
            np.savez(f, holds=holds, progress=progress, start_holds=replay.start_holds,
                     start_progress=replay.start_progress, info=np.array(json.dumps(info)))

    atomic_write(Path(path), write)


def load_goal_labels(path: str | os.PathLike) -> dict[str, Any]:
    """{holds [T, P], progress [T, P], start_holds [P], start_progress [P], predicates [P] str, info} from a file
    of `write_goal_labels`; one clear ValueError for an unreadable or inconsistent file."""
    start, info = read_checked_npz(path, {"start_holds": None, "start_progress": None}, "goal labels file")
    P = len(start["start_holds"])
    rows, _ = read_checked_npz(path, {"holds": P, "progress": P}, "goal labels file")
    predicates = info.get("predicates")
    if not isinstance(predicates, list) or len(predicates) != P:
        raise ValueError(f"{path}: info names predicates {predicates!r}, expected {P} of them")
    return {"holds": rows["holds"].astype(bool), "progress": rows["progress"].astype(np.float32),
            "start_holds": start["start_holds"].astype(bool),
            "start_progress": start["start_progress"].astype(np.float32), "predicates": predicates, "info": info}


def read_goal_labels(data_dir: str | os.PathLike, index: int) -> dict[str, Any] | None:
    """The goal labels of episode `index` of the dataset at data_dir, or None if it has none."""
    path = goal_label_path(data_dir, index)
    return load_goal_labels(path) if path.is_file() else None


def before_actions(labels: dict[str, Any]) -> tuple[np.ndarray, np.ndarray]:
    """(holds, progress) [T, P] at the rows of the recording (row t = before action t, as its frames and state)."""
    holds = np.concatenate([labels["start_holds"][None], labels["holds"][:-1]])
    progress = np.concatenate([labels["start_progress"][None], labels["progress"][:-1]])
    return holds, progress


# ------------------------------------------------------------------------------------------ dataset
@dataclass
class LabelGoalsConfig:
    """scripts/label_goals.py: which dataset to label with `label_goal_dataset`."""

    data_dir: str = "outputs/bench/rl_gain/data"
    episodes: list[int] = field(default_factory=list)  # episode indices to label; empty = all
    tol: float = MAX_STATE_DIFF  # largest |replayed - recorded| robot state accepted
    keep_prefix: bool = True  # a diverged replay keeps the labels of the steps before it diverged
    progress: bool = True  # a progress bar on stderr


def label_goal_dataset(data_dir: str | os.PathLike, episodes: Sequence[int] = (), progress: bool = True,
                       tol: float = MAX_STATE_DIFF, keep_prefix: bool = True) -> dict[str, Any]:
    """Write the goal labels of every episode (or of `episodes`) of the dataset at data_dir that has none yet.

    Resumable. Returns {"episodes", "labelled" (this call), "already", "skipped": {reason kind: count},
    "skipped_episodes": {index: reason}, "partial", "max_state_diff", "seconds", "seconds_per_episode"}."""
    from tqdm import tqdm

    from robot_data.dataset import EpisodeDataset

    ds = EpisodeDataset(data_dir, verify=False)
    wanted = list(episodes) or list(range(len(ds)))
    bad = [i for i in wanted if not 0 <= i < len(ds)]
    if bad:
        raise ValueError(f"episodes: {bad} are not episodes of {data_dir} (it holds {len(ds)})")
    todo = [i for i in wanted if not goal_label_path(data_dir, i).is_file()]
    bar = tqdm(total=len(todo), desc="goal labels", unit="ep", disable=not progress)

    def label(env: LiberoEnv, i: int, m: EpisodeMeta, ep: Any) -> tuple[str, float, bool]:
        r = replay_goal_labels(env, m, ep.action, ep.state, ep.success, tol, keep_prefix)
        if r.holds is not None:
            info = {"suite": m.suite, "task_id": int(m.task_id), "seed": int(m.seed),
                    "init_state_id": int(m.init_state_id), "length": len(ep), "rows": len(r.holds),
                    "max_state_diff": r.max_state_diff, "diverged": r.reason}
            write_goal_labels(goal_label_path(data_dir, i), r, info)
        return r.reason, r.max_state_diff, r.holds is not None

    def line(k: int, todo: list[int], i: int, m: EpisodeMeta, ep: Any, reason: str, diff: float) -> None:
        bar.update(1)
        bar.set_postfix_str(f"episode {i}: {reason or 'labelled'}"[:60])

    try:
        return replay_dataset(ds, todo, len(wanted), label, line)
    finally:
        bar.close()


__all__ = ["GOAL_LABELS_DIR", "PREDICATES", "PROGRESS", "GoalReplay", "LabelGoalsConfig", "Predicate",
           "before_actions", "evaluate_goal", "goal_label_path", "label_goal_dataset", "load_goal_labels",
           "parse_goal", "read_goal_labels", "replay_goal_labels", "task_goal", "task_name", "write_goal_labels"]
