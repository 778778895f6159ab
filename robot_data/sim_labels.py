"""Per-step simulator labels of recorded episodes: where the goal's object is, and whether it is held.

The state reward (`world_models.object_state`) learns from numbers only the simulator knows: the
position of the goal's object and of its target, and whether the fingers hold the object. Recorded
datasets do not store them, but every recorded episode can be re-run exactly: collection and real
evaluation reset with `env.reset(seed=meta.seed, options={"task_id", "init_state_id"})`, which
makes the scene reproducible, and MuJoCo is deterministic. `label_dataset` replays each episode's
actions in a camera-less `LiberoEnv` (nothing rendered) and writes the labels beside the dataset:

    <data_dir>/sim_labels/episode_{index:06d}.npz
        object_pos  float32 [T, 3]   the goal's object (world, m), row t = before action t
        target_pos  float32 [T, 3]   its target's body
        grasped     bool    [T]      both fingers touch the object (robosuite's _check_grasp)
        info        JSON string      objects, task_id, seed, init_state_id, length, max_state_diff

A replay is only trusted if it reproduces the recording: the replayed robot state must match every
recorded `state` row to MAX_STATE_DIFF and the success flags must agree; otherwise the episode is
skipped with a reason, so no label is ever silently wrong.
"""
from __future__ import annotations

import json
import math
import os
import sys
import time
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from envs.outcome import pick_place_objects, position
from infra.atomic import atomic_write

if TYPE_CHECKING:  # for the annotations only: label_dataset imports the dataset where it reads one, and reading
    # labels (read_sim_labels, used by fidelity and reward code) must not pull in the simulator's gymnasium env
    from envs.libero_env import LiberoEnv
    from robot_data.dataset import EpisodeMeta

LABELS_DIR = "sim_labels"
LABEL_KEYS = ("object_pos", "target_pos", "grasped")  # = world_models.object_state.SIM_KEYS
# Float32 rounding of a recorded state is ~1e-7; a replay that went its own way differs by mm at once.
MAX_STATE_DIFF = 1e-3
REPLAY_MAX_STEPS = 100_000  # the replay never truncates: recorded episodes set their own length


def _object_model(raw_env, name: str):
    """The robosuite model of LIBERO object `name` (movable objects, then fixtures)."""
    env = raw_env.env
    for table in (env.objects_dict, env.fixtures_dict):
        if name in table:
            return table[name]
    raise ValueError(f"object: {name!r} is neither a LIBERO object nor a fixture of this scene "
                     f"(objects {sorted(env.objects_dict)}, fixtures {sorted(env.fixtures_dict)})")


def step_labels(raw_env, raw_obs: dict, objects: tuple[str, str]) -> tuple[np.ndarray, np.ndarray, bool]:
    """(object_pos [3], target_pos [3], grasped) of the current simulator state, for the goal's
    (object, target) names from `envs.outcome.pick_place_objects`; `raw_obs` must be the current one.

    grasped: each finger touches the object with any of its collision geoms. robosuite's default asks
    for the two pads only, but a pinch of a bowl's rim edge lifts it on the fingers' sides (measured:
    the bowl 9-15 cm up while the pad check says not grasped), and those slips are the cases to learn."""
    obj, target = objects
    env = raw_env.env
    fingers = env.robots[0].gripper.important_geoms
    grasped = env._check_grasp(gripper=[fingers["left_finger"], fingers["right_finger"]],
                               object_geoms=_object_model(raw_env, obj))
    return (position(raw_env, raw_obs, obj).astype(np.float32), position(raw_env, raw_obs, target).astype(np.float32),
            bool(grasped))


def replay_env(suite: str, task_id: int = 0) -> LiberoEnv:
    """A camera-less env that replays recorded actions one by one and never ends an episode itself."""
    from envs.libero_env import LiberoEnv, LiberoEnvConfig

    return LiberoEnv(LiberoEnvConfig(suite=suite, task_id=task_id, views=(), chunk_len=1, max_steps=REPLAY_MAX_STEPS,
                                     terminate_on_success=False))


def scene_processor(extra: dict) -> Callable[[str], str] | None:
    """The scene-XML processor an episode was recorded with (its `extra`: fast_render, style, style_seed),
    composed in LiberoEnv's order. Both change only visual attributes, but the replay rebuilds exactly
    the scene of the recording rather than rely on that."""
    from envs.libero_suites import fast_render_xml
    from envs.style import style_processor

    steps: list[Callable[[str], str]] = [fast_render_xml] if extra.get("fast_render") else []
    if int(extra.get("style", 0)):
        steps.append(style_processor(int(extra["style_seed"])))
    if not steps:
        return None

    def process(xml: str) -> str:
        for step in steps:
            xml = step(xml)
        return xml

    return process


@dataclass
class Replay:
    """The result of replaying one episode: `labels` (LABEL_KEYS -> arrays) or None with a `reason`."""

    labels: dict[str, np.ndarray] | None
    reason: str  # "" when labelled
    max_state_diff: float  # largest |replayed - recorded| robot state over the rows replayed (nan: none)
    objects: tuple[str, str] | None = None


@dataclass
class ReplayRun:
    """How far `replay_actions` reproduced a recording.

    rows: recorded rows whose robot state (before their action) the replay matched; steps: actions after which
    the replay still matched the recording (the next row's state, the success flag); both len(action) when it
    went all the way. reason: "" then, else why it stopped ("no init state recorded", what `start` returned, or
    "diverged: ..." naming the row or action)."""

    rows: int
    steps: int
    reason: str
    max_state_diff: float  # largest |replayed - recorded| robot state over the rows matched (nan: none replayed)


def replay_actions(env: LiberoEnv, meta: EpisodeMeta, action: np.ndarray, state: np.ndarray, success: np.ndarray,
                   tol: float = MAX_STATE_DIFF, start: Callable[[], str] | None = None,
                   before: Callable[[int], None] | None = None,
                   after: Callable[[int], None] | None = None) -> ReplayRun:
    """Replay a recorded episode's actions in `env` (from `replay_env`), checking every step against the recording.

    The one replay loop every simulator labeller shares: reset as the recording did, then for each row t check the
    robot state, call `before(t)`, step action t, call `after(t)`, check the success flag. `start()` runs right after
    the reset and may refuse the episode by returning a reason (""= go on). The callbacks read `env.raw` /
    `env.raw_obs`, which then hold the simulator state they label. A replay stops at its first divergence.
    meta: the episode's dataset metadata (task_id, seed, init_state_id, extra); action float32 [T, 7], state float32
    [T, S] and success bool [T] as recorded.
    """
    action, state = np.asarray(action, np.float32), np.asarray(state, np.float32)
    success = np.asarray(success, bool)
    T = len(action)
    if action.ndim != 2 or state.shape[0] != T or success.shape != (T,):
        raise ValueError(f"episode: expected action [T, 7], state [T, S], success [T] of one length, got "
                         f"{action.shape}, {state.shape}, {success.shape}")
    if env.cfg.terminate_on_success or env.max_steps < T or env.cfg.chunk_len != 1:
        raise ValueError("env: expected a replay env (chunk_len=1, terminate_on_success=False, max_steps >= T); "
                         "build it with robot_data.sim_labels.replay_env")
    if int(meta.init_state_id) < 0:
        return ReplayRun(0, 0, "no init state recorded", math.nan)
    env.set_xml_processor(scene_processor(meta.extra or {}))
    obs, _ = env.reset(seed=int(meta.seed), options={"task_id": int(meta.task_id),
                                                         "init_state_id": int(meta.init_state_id)})
    refused = start() if start is not None else ""
    if refused:
        return ReplayRun(0, 0, refused, math.nan)
    worst = 0.0
    for t in range(T):
        diff = float(np.abs(obs["state"] - state[t]).max())
        if diff > tol:
            return ReplayRun(t, max(t - 1, 0), f"diverged: robot state differs by {diff:.2e} at row {t}",
                             max(worst, diff))
        worst = max(worst, diff)
        if before is not None:
            before(t)
        obs, _, _, _, info = env.step_single(action[t])
        if after is not None:
            after(t)
        if bool(info["success"]) != success[t]:
            return ReplayRun(t + 1, t, f"diverged: success is {info['success']} after action {t}, recorded "
                             f"{success[t]}", worst)
    return ReplayRun(T, T, "", worst)


def replay_episode(env: LiberoEnv, meta: EpisodeMeta, action: np.ndarray, state: np.ndarray, success: np.ndarray,
                   tol: float = MAX_STATE_DIFF, keep_prefix: bool = False) -> Replay:
    """Replay a recorded episode in `env` (from `replay_env`) and read the labels of every row.

    meta: the episode's dataset metadata (task_id, seed, init_state_id, extra); action float32 [T, 7],
    state float32 [T, S] and success bool [T] as recorded. Row t's labels are read before action t
    is stepped, as its state was. A replay that diverges from the recording gives no labels, or with
    `keep_prefix` the labels of the rows before it diverged (reason still says where): contacts in some
    scenes (the cabinet drawer of LIBERO-Spatial task 4) do not replay exactly, yet an imagined episode
    started at frame 0 needs only row 0.
    """
    T = len(action)
    out = {"object_pos": np.zeros((T, 3), np.float32), "target_pos": np.zeros((T, 3), np.float32),
           "grasped": np.zeros(T, bool)}
    objects: tuple[str, str] | None = None

    def find_objects() -> str:
        nonlocal objects
        objects = pick_place_objects(env.raw, env.raw_obs)
        return "" if objects is not None else "no pick-and-place object"

    def read_row(t: int) -> None:
        assert objects is not None
        out["object_pos"][t], out["target_pos"][t], out["grasped"][t] = step_labels(env.raw, env.raw_obs, objects)

    run = replay_actions(env, meta, action, state, success, tol, start=find_objects, before=read_row)
    if not run.reason:
        return Replay(out, "", run.max_state_diff, objects)
    if objects is None:  # refused before the first step
        return Replay(None, run.reason, run.max_state_diff)
    prefix = {k: v[:run.rows] for k, v in out.items()} if keep_prefix and run.rows > 0 else None
    return Replay(prefix, run.reason, run.max_state_diff, objects)


def replay_labels(env: LiberoEnv, episode_meta: EpisodeMeta, actions: np.ndarray, state: np.ndarray,
                  success: np.ndarray) -> dict[str, np.ndarray] | None:
    """The labels of a recorded episode (object_pos [T, 3], target_pos [T, 3], grasped [T]), or None when
    the task has no pick-and-place object or the replay does not reproduce the recording (the reason is
    in `replay_episode`'s result)."""
    return replay_episode(env, episode_meta, actions, state, success).labels


# ------------------------------------------------------------------------------------------ sidecar
def label_path(data_dir: str | os.PathLike, index: int) -> Path:
    return Path(data_dir) / LABELS_DIR / f"episode_{int(index):06d}.npz"


def write_labels(path: Path, labels: dict[str, np.ndarray], info: dict[str, Any]) -> None:
    """Atomic: a reader sees the old file, no file, or the whole new one."""

    def write(tmp: Path) -> None:
        with open(tmp, "wb") as f:  # a file object: np.savez would append ".npz" to a tmp name
            np.savez(f, object_pos=labels["object_pos"], target_pos=labels["target_pos"], grasped=labels["grasped"],
                     info=np.array(json.dumps(info)))

    atomic_write(path, write)


def read_checked_npz(path: str | os.PathLike, widths: dict[str, int | None],
                     what: str) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """The arrays named in `widths` (each [T, width], or [T] for None; T from the first) and the JSON "info"
    of an .npz file, with one clear error for an unreadable file, a missing array or a wrong shape."""
    try:
        with np.load(path, allow_pickle=False) as z:
            data: dict[str, Any] = {k: z[k] for k in z.files}
        info: dict[str, Any] = json.loads(str(data["info"])) if "info" in data else {}
    except (OSError, ValueError, EOFError, KeyError, RuntimeError, zipfile.BadZipFile) as err:
        # a flipped bit fails the zip's CRC-32 of its member (BadZipFile) or garbles a header (an unknown compression
        # method: NotImplementedError; the encrypted flag: RuntimeError; a cut length: EOFError): name the file
        raise ValueError(f"{path}: not a readable {what} ({type(err).__name__}: {err})") from None
    missing = [k for k in (*widths, "info") if k not in data]
    if missing:
        raise ValueError(f"{path}: lacks {missing}; expected {list(widths)} and info")
    T = len(data[next(iter(widths))])
    for key, width in widths.items():
        shape = (T,) if width is None else (T, width)
        if data[key].shape != shape:
            raise ValueError(f"{path}: {key} has shape {data[key].shape}, expected {shape}")
    return {k: data[k] for k in widths}, info


def load_labels(path: str | os.PathLike) -> dict[str, Any]:
    """{object_pos [T, 3], target_pos [T, 3], grasped [T], info dict} from a file of `write_labels`."""
    arrays, info = read_checked_npz(path, {"object_pos": 3, "target_pos": 3, "grasped": None}, "labels file")
    return {"object_pos": arrays["object_pos"].astype(np.float32),
            "target_pos": arrays["target_pos"].astype(np.float32),
            "grasped": arrays["grasped"].astype(bool), "info": info}


def read_sim_labels(data_dir: str | os.PathLike, index: int) -> dict[str, Any] | None:
    """The labels `label_dataset` wrote for episode `index` of the dataset at data_dir, or None if it has none."""
    path = label_path(data_dir, index)
    return load_labels(path) if path.is_file() else None


@dataclass
class LabelledEpisode:
    """What the state reward trains on, from one recorded real episode: state [T, S], object_pos and
    target_pos [T, 3], grasped [T] (per row), success [T] (after each action). It is built here, below the model
    (robot_data.label_collection.load_labelled; world_models.object_state.labelled_episodes, which exports it too)."""

    state: np.ndarray
    object_pos: np.ndarray
    target_pos: np.ndarray
    grasped: np.ndarray
    success: np.ndarray


@dataclass
class LabelEpisodesConfig:
    """scripts/label_episodes.py: which dataset to label with `label_dataset`."""

    data_dir: str = "outputs/bench/rl_gain/data"
    tol: float = MAX_STATE_DIFF  # largest |replayed - recorded| robot state accepted
    progress: bool = True  # one line per episode on stderr


def label_dataset(data_dir: str | os.PathLike, progress: bool = True, tol: float = MAX_STATE_DIFF,
                  keep_prefix: bool = True) -> dict[str, Any]:
    """Label every episode of the dataset at data_dir that has no labels file yet (resumable).

    Returns {"episodes", "labelled" (this call), "already", "skipped": {reason kind: count},
    "skipped_episodes": {index: reason}, "max_state_diff" (over the labelled ones), "seconds",
    "seconds_per_episode", "partial": episodes labelled only up to where their replay diverged (keep_prefix),
    their info "rows" < "length"}. Skipped episodes are tried again on the next call (their replay is cheap
    to repeat, and a fix to the replay then applies to them).
    """
    from robot_data.dataset import EpisodeDataset

    ds = EpisodeDataset(data_dir, verify=False)

    def label(env: LiberoEnv, i: int, m: EpisodeMeta, ep: Any) -> tuple[str, float, bool]:
        r = replay_episode(env, m, ep.action, ep.state, ep.success, tol, keep_prefix)
        if r.labels is not None:
            assert r.objects is not None  # a replay that gave labels found the objects
            info = {"objects": list(r.objects), "task_id": int(m.task_id), "seed": int(m.seed),
                    "init_state_id": int(m.init_state_id), "length": len(ep), "max_state_diff": r.max_state_diff,
                    "rows": len(r.labels["grasped"]), "diverged": r.reason}
            write_labels(label_path(data_dir, i), r.labels, info)
        return r.reason, r.max_state_diff, r.labels is not None

    def line(k: int, todo: list[int], i: int, m: EpisodeMeta, ep: Any, reason: str, diff: float) -> None:
        if progress:
            status = reason or f"labelled (state diff {diff:.1e})"
            print(f"[{k + 1}/{len(todo)}] episode {i} (task {m.task_id}, {len(ep)} steps): {status}",
                  file=sys.stderr, flush=True)

    todo = [i for i in range(len(ds)) if not label_path(data_dir, i).is_file()]
    return replay_dataset(ds, todo, len(ds), label, line)


def stats_lines(stats: dict[str, Any], what: str) -> list[str]:
    """What a labelling script prints of `replay_dataset`'s stats: a summary, each skipped episode, and the JSON."""
    lines = [f"{what}: {stats['labelled']} episodes labelled ({stats['partial']} up to a divergence), "
             f"{stats['already']} already, skipped {stats['skipped'] or 0} "
             f"(max state diff {stats['max_state_diff']:.1e}, {stats['seconds_per_episode']:.2f} s/episode)"]
    lines += [f"  episode {i}: {reason}" for i, reason in stats["skipped_episodes"].items()]
    return lines + [json.dumps({k: v for k, v in stats.items() if k != "skipped_episodes"})]


def replay_dataset(ds: Any, todo: list[int], episodes: int,
                   label: Callable[[LiberoEnv, int, EpisodeMeta, Any], tuple[str, float, bool]],
                   report: Callable[[int, list[int], int, EpisodeMeta, Any, str, float], None]) -> dict[str, Any]:
    """The one dataset loop of every replay labeller: episodes `todo` of dataset `ds` (of `episodes` asked for) in
    task order, one replay simulator rebuilt only when the suite changes (~8 s), `label(env, i, meta, episode)` ->
    (reason, max_state_diff, written) per episode (reason "" or why; written False: skipped), `report(k, todo, i,
    meta, episode, reason, diff)` after each. Returns the stats of `label_dataset`."""
    metas = ds.meta
    todo = sorted(todo, key=lambda i: (metas[i].suite, metas[i].task_id, i))
    stats: dict[str, Any] = {"episodes": episodes, "labelled": 0, "already": episodes - len(todo), "skipped": {},
                             "skipped_episodes": {}, "max_state_diff": 0.0, "partial": 0}
    start, env = time.perf_counter(), None
    try:
        for k, i in enumerate(todo):
            m = metas[i]
            if env is None or env.cfg.suite != m.suite:
                if env is not None:
                    env.close()
                env = replay_env(m.suite, int(m.task_id))
            ep = ds[i]
            reason, diff, written = label(env, i, m, ep)
            if not written:
                kind = reason.split(":")[0]
                stats["skipped"][kind] = stats["skipped"].get(kind, 0) + 1
                stats["skipped_episodes"][i] = reason
            else:
                stats["labelled"] += 1
                stats["partial"] += int(bool(reason))
                stats["max_state_diff"] = max(stats["max_state_diff"], diff)
            report(k, todo, i, m, ep, reason, diff)
    finally:
        if env is not None:
            env.close()
    stats["seconds"] = time.perf_counter() - start
    stats["seconds_per_episode"] = stats["seconds"] / max(len(todo), 1)
    return stats


__all__ = ["LABELS_DIR", "LABEL_KEYS", "MAX_STATE_DIFF", "LabelEpisodesConfig", "LabelledEpisode", "Replay",
           "ReplayRun", "label_dataset", "label_path", "load_labels", "read_checked_npz", "read_sim_labels",
           "replay_actions", "replay_dataset", "replay_env", "replay_episode", "replay_labels", "scene_processor",
           "stats_lines", "step_labels", "write_labels"]
