"""Labelled expert and near-miss episodes straight from the simulator, without rendering.

The state reward (`world_models.object_state`) trains on robot states, actions, success and the
simulator labels of `robot_data.sim_labels`; it needs no images. Here the scripted expert and its perturbed
variants (mostly `near_miss`: grasps that pinch, slip or miss) run in a camera-less LiberoEnv, ~10x
faster than a rendered collection, and every episode is saved as one file:

    <out_dir>/task{task_id:02d}_ep{index:04d}.npz
        state       float32 [T, 8]   robot state before action t (envs.libero_env._raw_state)
        action      float32 [T, 7]
        success     bool    [T]      the simulator's flag after action t
        object_pos  float32 [T, 3]   the goal's object before action t
        target_pos  float32 [T, 3]   its target
        grasped     bool    [T]      the fingers hold the object before action t
        info        JSON string      task_id, index, init_state_id, kind, seed, outcome, perturbation_info

The plan is a pure function of the config (episode j of a task: init state (offset + j) % N, kind
kinds[j % len(kinds)], a seed from (seed, task, j)), so a stopped collection resumes by skipping the
files already written; each is written atomically.
"""
from __future__ import annotations

import json
import os
import re
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from envs.libero_env import LiberoEnv, LiberoEnvConfig
from envs.libero_suites import suite_info
from envs.outcome import outcome, pick_place_objects
from infra.atomic import atomic_write
from robot_data.collection import PERTURBED_SUITES, check_expert_plan
from robot_data.experts import PERTURBATION_KINDS, SUITE_PERTURBATIONS, Perturbation, make_expert, make_perturbed_expert
from robot_data.sim_labels import LABEL_KEYS, LabelledEpisode, read_checked_npz, step_labels

EXPERT = "expert"  # the clean expert's entry in `kinds`
ARRAY_KEYS = ("state", "action", "success", *LABEL_KEYS)
_FILE_RE = re.compile(r"^task(\d{2})_ep(\d{4})\.npz$")


@dataclass
class LabelCollectConfig:
    """Which labelled episodes to simulate, and where to put them."""

    out_dir: str = "outputs/data/sim_labels/libero_spatial"
    suite: str = "libero_spatial"
    tasks: list[int] = field(default_factory=list)  # empty = every task of the suite
    episodes_per_task: int = 20
    init_state_offset: int = 0  # episode j of a task starts from init state offset + j % init_states
    # How many init states to cycle through from the offset; 0 = all of the task's. A benchmark that keeps
    # init states apart for scoring (bench/protocol.py trains on 0-9) simulates many episodes on a few.
    init_states: int = 0
    # Episode j runs kinds[j % len(kinds)]: "expert" or a perturbation kind (robot_data.experts.PERTURBATION_KINDS).
    kinds: list[str] = field(default_factory=lambda: ["near_miss", "near_miss", "near_miss", EXPERT])
    strength: float = 1.0  # perturbation strength (near_miss: offsets up to 0.05 m * strength)
    seed: int = 0
    max_steps: int = 0  # 0 = the suite's standard horizon
    # Rows recorded after the first success, so the solved scene has rows of its own.
    post_success_steps: int = 8


@dataclass(frozen=True)
class LabelPlanItem:
    task_id: int
    index: int  # episode number within the task
    init_state_id: int
    kind: str
    seed: int

    @property
    def file_name(self) -> str:
        return f"task{self.task_id:02d}_ep{self.index:04d}.npz"


def check_kinds(suite: str, kinds: list[str], name: str = "kinds") -> None:
    """One ValueError naming `name` (the field or flag that gave the plan) unless `kinds` is a non-empty plan of the
    clean expert and the perturbation kinds that `suite` has."""
    unknown = [k for k in kinds if k != EXPERT and k not in PERTURBATION_KINDS]
    if not kinds or unknown:
        raise ValueError(f"{name}: expected a non-empty list of {[EXPERT, *PERTURBATION_KINDS]}, got {kinds}")
    if suite not in PERTURBED_SUITES and any(k != EXPERT for k in kinds):
        raise ValueError(f"{name}: perturbed experts exist for {list(PERTURBED_SUITES)} only; "
                         f"use kinds: [{EXPERT}] for {suite}")
    unsupported = [k for k in kinds if k != EXPERT and k not in SUITE_PERTURBATIONS.get(suite, ())]
    if suite in PERTURBED_SUITES and unsupported:
        raise ValueError(f"{name}: {suite} supports {[EXPERT, *SUITE_PERTURBATIONS[suite]]}, got {unsupported}")


def validate(cfg: LabelCollectConfig) -> None:
    check_expert_plan(cfg.suite, cfg.tasks, cfg.episodes_per_task)
    if cfg.init_state_offset < 0:
        raise ValueError(f"init_state_offset: expected an integer >= 0, got {cfg.init_state_offset}")
    if cfg.init_states < 0:
        raise ValueError(f"init_states: expected an integer >= 0 (0 = all), got {cfg.init_states}")
    check_kinds(cfg.suite, cfg.kinds)
    if not np.isfinite(cfg.strength) or cfg.strength < 0:
        raise ValueError(f"strength: expected a finite number >= 0, got {cfg.strength}")
    if cfg.max_steps < 0 or cfg.post_success_steps < 0:
        raise ValueError(f"max_steps, post_success_steps: expected integers >= 0, got {cfg.max_steps}, "
                         f"{cfg.post_success_steps}")


def make_plan(cfg: LabelCollectConfig, num_init_states: int = 50) -> list[LabelPlanItem]:
    """Every episode of the collection, in task order (the simulator is rebuilt only between tasks)."""
    plan = []
    for task_id in cfg.tasks or range(suite_info(cfg.suite).num_tasks):
        for j in range(cfg.episodes_per_task):
            # Keyed by (seed, task, j): an episode's seed does not depend on which other tasks are planned.
            seed = int(np.random.default_rng([cfg.seed, task_id, j]).integers(2**31))
            cycle = cfg.init_states or num_init_states
            plan.append(LabelPlanItem(task_id, j, (cfg.init_state_offset + j % cycle) % num_init_states,
                                      cfg.kinds[j % len(cfg.kinds)], seed))
    return plan


def run_episode(env: LiberoEnv, item: LabelPlanItem, strength: float = 1.0,
                post_success_steps: int = 8) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """Run the plan item's expert in `env` (no cameras, chunk_len 1, terminate_on_success False);
    -> (arrays of ARRAY_KEYS, info). Rows as in a recorded dataset: row t is before action t."""
    rng = np.random.default_rng(item.seed)
    expert = (make_expert(env.cfg.suite, rng=rng) if item.kind == EXPERT
              else make_perturbed_expert(env.cfg.suite, Perturbation(item.kind, strength), rng=rng))
    obs, _ = env.reset(seed=item.seed, options={"task_id": item.task_id, "init_state_id": item.init_state_id})
    objects = pick_place_objects(env.raw, env.raw_obs)
    if objects is None:
        raise ValueError(f"task {item.task_id} of {env.cfg.suite} has no pick-and-place object to label")
    expert.reset(env.raw, env.raw_obs)
    rows: dict[str, list] = {k: [] for k in ARRAY_KEYS}
    done, left = False, post_success_steps
    info: dict[str, Any] = {}
    while not done:
        for key, value in zip(LABEL_KEYS, step_labels(env.raw, env.raw_obs, objects)):
            rows[key].append(value)
        rows["state"].append(obs["state"])
        action = np.clip(expert.act(env.raw_obs), -1.0, 1.0).astype(np.float32)
        obs, _, terminated, truncated, info = env.step_single(action)
        rows["action"].append(action)
        rows["success"].append(bool(info["success"]))
        if any(rows["success"]):
            left -= 1
        done = terminated or truncated or left < 0
    arrays = {k: np.asarray(v, dtype=bool if k in ("success", "grasped") else np.float32) for k, v in rows.items()}
    success = bool(arrays["success"].any())
    meta = {"task_id": item.task_id, "index": item.index, "init_state_id": item.init_state_id, "kind": item.kind,
            "seed": item.seed, "strength": strength if item.kind != EXPERT else 0.0, "objects": list(objects),
            "steps": len(arrays["action"]), "success": success,
            "outcome": outcome(success, info["object_lift_m"]), "object_lift_m": float(info["object_lift_m"]),
            "perturbation_info": getattr(expert, "perturbation_info", {})}
    return arrays, meta


def _write(path: Path, arrays: dict[str, np.ndarray], info: dict[str, Any]) -> None:
    def write(tmp: Path) -> None:
        with open(tmp, "wb") as f:  # a file object: np.savez would append ".npz" to a tmp name
            np.savez(f, state=arrays["state"], action=arrays["action"], success=arrays["success"],
                     object_pos=arrays["object_pos"], target_pos=arrays["target_pos"], grasped=arrays["grasped"],
                     info=np.array(json.dumps(info)))

    atomic_write(path, write)


def read_episode(path: str | os.PathLike) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """(arrays of ARRAY_KEYS, info) of one file written by `collect_labels`."""
    widths = {"state": 8, "action": 7, "success": None, "object_pos": 3, "target_pos": 3, "grasped": None}
    return read_checked_npz(path, widths, "labelled episode")


def collect_labels(cfg: LabelCollectConfig, progress: bool = True) -> dict[str, Any]:
    """Simulate the plan of `cfg` into cfg.out_dir, skipping episodes already there; returns
    {"planned", "written", "already", "outcomes": {outcome: count} of those written, "seconds",
    "episodes_per_s"}."""
    validate(cfg)
    out = Path(cfg.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    plan = make_plan(cfg)
    todo = []
    for item in plan:
        path = out / item.file_name
        if not path.is_file():
            todo.append(item)
            continue
        _, info = read_episode(path)
        if (info["init_state_id"], info["kind"], info["seed"]) != (item.init_state_id, item.kind, item.seed):
            raise ValueError(f"out_dir: {path} holds episode (init state {info['init_state_id']}, {info['kind']}, seed "
                             f"{info['seed']}) of another plan than this config's; use a new out_dir")
    stats: dict[str, Any] = {"planned": len(plan), "written": 0, "already": len(plan) - len(todo), "outcomes": {}}
    start, env = time.perf_counter(), None
    try:
        for k, item in enumerate(todo):
            if env is None:
                env = LiberoEnv(LiberoEnvConfig(suite=cfg.suite, task_id=item.task_id, views=(), chunk_len=1,
                                                max_steps=cfg.max_steps or None, terminate_on_success=False))
            arrays, info = run_episode(env, item, cfg.strength, cfg.post_success_steps)
            _write(out / item.file_name, arrays, info)
            stats["written"] += 1
            stats["outcomes"][info["outcome"]] = stats["outcomes"].get(info["outcome"], 0) + 1
            if progress:
                rate = (k + 1) / (time.perf_counter() - start)
                print(f"[{k + 1}/{len(todo)}] task {item.task_id} episode {item.index} ({item.kind}, init state "
                      f"{item.init_state_id}): {info['outcome']}, {info['steps']} steps ({rate:.2f} episodes/s)",
                      file=sys.stderr, flush=True)
    finally:
        if env is not None:
            env.close()
    stats["seconds"] = time.perf_counter() - start
    stats["episodes_per_s"] = stats["written"] / stats["seconds"] if stats["written"] else 0.0
    return stats


def load_labelled(out_dir: str | os.PathLike) -> tuple[list[LabelledEpisode], list[dict[str, Any]]]:
    """Every episode in out_dir as a `LabelledEpisode` (robot_data.sim_labels; what `world_models.object_state` trains
    on), and their infos (file order)."""
    paths = sorted(p for p in Path(out_dir).glob("*.npz") if _FILE_RE.match(p.name))
    if not paths:
        raise ValueError(f"out_dir: {out_dir} holds no labelled episodes (task??_ep????.npz); "
                         "run scripts/collect_labels.py")
    episodes, infos = [], []
    for p in paths:
        a, info = read_episode(p)
        episodes.append(LabelledEpisode(a["state"], a["object_pos"], a["target_pos"], a["grasped"], a["success"]))
        infos.append(info)
    return episodes, infos


__all__ = ["ARRAY_KEYS", "EXPERT", "LabelCollectConfig", "LabelPlanItem", "collect_labels", "load_labelled",
           "make_plan", "read_episode", "run_episode", "validate"]
