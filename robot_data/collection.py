"""Collect scripted-expert and perturbed-expert episodes from real LIBERO into an episode dataset.

The plan (which task, init state, expert or perturbation, seed) is a pure function of the config,
so a collection that was stopped resumes by skipping the plan items already in the dataset.
"""
from __future__ import annotations

import atexit
import json
import logging
from collections import defaultdict
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace
from pathlib import Path

import numpy as np
from tqdm import tqdm

from envs.frames import stack_views, tile_views
from envs.libero_env import LiberoEnv
from envs.libero_suites import suite_info
from infra.cli import save_config
from robot_data.dataset import DatasetConfig, Episode, EpisodeDataset, EpisodeWriter, encode_preview
from robot_data.experts import (
    EXPERTS,
    PERTURBATION_KINDS,
    SUITE_PERTURBATIONS,
    default_perturbations,
)
from robot_data.recording import CollectConfig, PlanItem, env_config, record_episode

log = logging.getLogger(__name__)
SCRIPTED_SUITES = tuple(EXPERTS)  # suites with a scripted expert
PERTURBED_SUITES = tuple(SUITE_PERTURBATIONS)  # suites whose expert has perturbed variants (make_perturbed_expert)


def check_expert_plan(suite: str, tasks: list[int], episodes_per_task: int) -> None:
    """The checks every scripted-expert collection shares: a suite with experts, its task ids, >= 1 episode."""
    info = suite_info(suite)
    if suite not in SCRIPTED_SUITES:
        raise ValueError(f"suite: scripted experts exist for {list(SCRIPTED_SUITES)}, got {suite!r}")
    bad = [t for t in tasks if not 0 <= t < info.num_tasks]
    if bad:
        raise ValueError(f"tasks: expected task ids in [0, {info.num_tasks - 1}], got {bad}")
    if episodes_per_task < 1:
        raise ValueError(f"episodes_per_task: expected an integer >= 1, got {episodes_per_task}")


def per_suite(cfg: CollectConfig) -> list[CollectConfig]:
    """cfg once per suite of `cfg.suites` (each with suite set and suites empty), or [cfg] without them."""
    if len(set(cfg.suites)) != len(cfg.suites):
        raise ValueError(f"suites: expected distinct LIBERO suite names, got {cfg.suites}")
    return [replace(cfg, suite=s, suites=[]) for s in cfg.suites] or [cfg]


def validate(cfg: CollectConfig) -> None:
    if cfg.suites:
        for one in per_suite(cfg):
            validate(one)
        return
    check_expert_plan(cfg.suite, cfg.tasks, cfg.episodes_per_task)
    if not 0.0 <= cfg.perturbed_fraction <= 1.0:
        raise ValueError(f"perturbed_fraction: expected a number in [0, 1], got {cfg.perturbed_fraction}")
    unknown = [p for p in cfg.perturbations if p not in PERTURBATION_KINDS]
    if unknown:
        raise ValueError(f"perturbations: expected a subset of {list(PERTURBATION_KINDS)}, got {cfg.perturbations}")
    if cfg.perturbed_fraction > 0 and cfg.suite not in PERTURBED_SUITES:
        raise ValueError(f"perturbed_fraction: perturbed experts exist for {list(PERTURBED_SUITES)} only; "
                         f"set perturbed_fraction: 0 for {cfg.suite}")
    unsupported = [p for p in cfg.perturbations if p not in SUITE_PERTURBATIONS.get(cfg.suite, PERTURBATION_KINDS)]
    if cfg.perturbed_fraction > 0 and unsupported:
        raise ValueError(f"perturbations: {cfg.suite} supports {list(SUITE_PERTURBATIONS[cfg.suite])}, "
                         f"got {unsupported}")
    if cfg.post_success_steps < 0:
        raise ValueError(f"post_success_steps: expected an integer >= 0, got {cfg.post_success_steps}")
    if cfg.style_variants < 0:
        raise ValueError(f"style_variants: expected an integer >= 0, got {cfg.style_variants}")
    if cfg.num_workers < 1:
        raise ValueError(f"num_workers: expected an integer >= 1, got {cfg.num_workers}")
    if cfg.backend not in ("local", "ray"):
        raise ValueError(f"backend: expected 'local' or 'ray', got {cfg.backend!r}")


def make_plan(cfg: CollectConfig, num_init_states: int = 50) -> list[PlanItem]:
    """Deterministic episode plan: per task, a fixed share of perturbed episodes cycling the kinds."""
    tasks = cfg.tasks or list(range(suite_info(cfg.suite).num_tasks))
    rng = np.random.default_rng(cfg.seed)
    plan = []
    n_pert = int(round(cfg.perturbed_fraction * cfg.episodes_per_task))
    kinds = plan_perturbations(cfg)
    for task_id in tasks:
        perturbed = set(rng.permutation(cfg.episodes_per_task)[:n_pert].tolist())
        k = 0
        for j in range(cfg.episodes_per_task):
            kind = ""
            if j in perturbed:
                kind = kinds[(task_id + k) % len(kinds)]
                k += 1
            item = PlanItem(task_id, j, (cfg.init_state_offset + j) % num_init_states, kind, int(rng.integers(2**31)),
                            plan_seed=cfg.seed)
            plan += [replace(item, style=k) for k in range(1 + cfg.style_variants)]
    return plan


def plan_perturbations(cfg: CollectConfig) -> list[str]:
    """The kinds the perturbed episodes of `cfg` cycle through: its own, else the suite's defaults."""
    return list(cfg.perturbations) or list(default_perturbations(cfg.suite))


# One simulator per worker process, built on first use and reused across that worker's episodes.
_WORKER_ENV: LiberoEnv | None = None


def _worker_record(cfg: CollectConfig, item: PlanItem) -> Episode:
    global _WORKER_ENV
    if _WORKER_ENV is None:
        _WORKER_ENV = LiberoEnv(env_config(cfg, item.task_id))
        # Free the GL context while the interpreter is intact: left to garbage collection at exit,
        # EGL teardown fails noisily after the display is gone.
        atexit.register(_WORKER_ENV.close)
    return record_episode(_WORKER_ENV, item, cfg.perturbation_strength, cfg.post_success_steps)


def _iter_episodes(cfg: CollectConfig, todo: list[PlanItem]) -> Iterator[Episode]:
    if cfg.backend == "ray":  # Ray actors with retries; the episodes still come back here, in plan order
        from robot_data.ray_collection import record_on_ray

        yield from record_on_ray(cfg, todo)
        return
    if cfg.num_workers == 1 or len(todo) == 1:
        env = LiberoEnv(env_config(cfg, todo[0].task_id))
        try:
            for item in todo:
                yield record_episode(env, item, cfg.perturbation_strength, cfg.post_success_steps)
        finally:
            env.close()
        return
    import multiprocessing as mp

    # spawn: workers start without the parent's GL/OpenMP state; items are ordered by task so each
    # worker rebuilds its simulator rarely. map() keeps plan order, so resumes stay predictable.
    with ProcessPoolExecutor(cfg.num_workers, mp_context=mp.get_context("spawn")) as pool:
        yield from pool.map(_worker_record, [cfg] * len(todo), todo, chunksize=1)


def collect(cfg: CollectConfig, progress: Callable[[Episode], None] | None = None) -> Path:
    """Collect the plan of `cfg` into `cfg.out_dir` (resuming), suite after suite; return the dataset root."""
    validate(cfg)
    for one in per_suite(cfg):
        root = _collect_suite(one, progress)
    return root


def _collect_suite(cfg: CollectConfig, progress: Callable[[Episode], None] | None) -> Path:
    return record_plan(cfg, make_plan(cfg), progress)


def record_plan(cfg: CollectConfig, plan: list[PlanItem], progress: Callable[[Episode], None] | None = None) -> Path:
    """Record `plan` (cfg's simulator, views and workers) into cfg.out_dir, skipping the items already there;
    returns the dataset root. Any plan: a collection's own (make_plan) or another's items recorded with frames
    (robot_data/label_frames.py)."""
    root = Path(cfg.out_dir)
    ds_cfg = DatasetConfig(
        views=tuple(cfg.views), image_size=(cfg.image_size, cfg.image_size), video_codec=cfg.video_codec
    )
    with EpisodeWriter(root, ds_cfg) as writer:
        done = _done_items(root, cfg.suite) if len(writer) else {}
        _check_same_plan(root, plan, done)
        todo = [it for it in plan if it.key not in {d.key for d in done.values()}]
        if len(plan) != len(todo):
            log.info("resuming: %d of %d planned episodes already in %s", len(plan) - len(todo), len(plan), root)
        if todo:
            for episode in _iter_episodes(cfg, todo):
                writer.append(episode)
                if progress:
                    progress(episode)
    return root


def _done_items(root: Path, suite: str) -> dict[tuple[int, int, int], PlanItem]:
    """The plan items of the episodes of `suite` already in the dataset, by (task, index, style). Only that suite's:
    a dataset may mix suites (collect one, then another into the same folder), and task 0 of one is not task 0 of
    the other."""
    meta = EpisodeDataset(root, verify=False).meta
    items = (PlanItem(m.task_id, int(m.extra.get("plan_index", -1)), m.init_state_id, m.perturbation, int(m.seed),
                      int(m.extra.get("style", 0)), int(m.extra.get("plan_seed", -1)))
             for m in meta if m.suite == suite)
    return {(it.task_id, it.index, it.style): it for it in items}


def _check_same_plan(root: Path, plan: list[PlanItem], done: dict[tuple[int, int, int], PlanItem]) -> None:
    """ValueError when an episode already in `root` sits where `plan` puts one from another collection: the same
    task, index and style, but another init state (another init_state_offset) or another collection seed (where
    both are known). Resuming would skip the episode the plan asks for and mix two plans. The episode's own seed and
    perturbation are not compared: a plan that grows (more episodes_per_task) draws them anew, and growing a
    collection keeps the episodes it has."""
    for it in plan:
        have = done.get((it.task_id, it.index, it.style))
        if have is None:
            continue
        seeds_differ = min(have.plan_seed, it.plan_seed) >= 0 and have.plan_seed != it.plan_seed
        if have.init_state_id != it.init_state_id or seeds_differ:
            raise ValueError(
                f"out_dir: {root} holds task {it.task_id} episode {it.index} from init state {have.init_state_id} "
                f"(collection seed {have.plan_seed}), where this collection plans init state {it.init_state_id} "
                f"(seed {it.plan_seed}): it was recorded by another collection (another seed or "
                "init_state_offset); collect into a new out_dir")


def plan_size(cfg: CollectConfig) -> int:
    return sum(len(c.tasks or range(suite_info(c.suite).num_tasks)) * c.episodes_per_task * (1 + c.style_variants)
               for c in per_suite(cfg))



def summarize(root: Path) -> dict:
    """Success counts per task and per source/perturbation, from the dataset's metadata; tasks are named
    "<suite>/<task>" when the dataset mixes suites (task 0 of one suite is not task 0 of another)."""
    table: dict = defaultdict(lambda: defaultdict(lambda: [0, 0]))
    meta = EpisodeDataset(root, verify=False).meta
    mixed = len({m.suite for m in meta}) > 1
    for m in meta:
        key = m.perturbation or m.source
        cell = table[f"{m.suite}/{m.task_id}" if mixed else str(m.task_id)][key]
        cell[0] += int(m.success)
        cell[1] += 1
    return {task: {k: {"success": s, "episodes": n} for k, (s, n) in row.items()}
            for task, row in sorted(table.items())}


def write_previews(root: Path, count: int) -> list[Path]:
    """mp4s of the first `count` episodes, one per source kind first, views side by side at 2x (H.264
    yuv420p, which browsers play: robot_data.dataset.encode_preview)."""
    ds = EpisodeDataset(root, verify=False)
    picked, seen = [], set()
    for m in ds.meta:  # one episode of each kind first, then the rest in order
        kind = m.perturbation or m.source
        if kind not in seen:
            seen.add(kind)
            picked.append(m.episode_index)
    picked += [m.episode_index for m in ds.meta if m.episode_index not in picked]
    out = []
    for i in picked[:count]:
        m = ds.meta[i]
        views = tile_views(stack_views({v: ds.load_view(i, v) for v in ds.views}, ds.views), scale=2)
        tag = "success" if m.success else "fail"
        path = root / "previews" / f"ep{i:04d}_task{m.task_id}_{m.perturbation or m.source}_{tag}.mp4"
        path.parent.mkdir(exist_ok=True)
        encode_preview(path, views, fps=ds.fps)  # browser-playable; the dataset keeps its lossless videos
        out.append(path)
    return out


def collect_dataset(cfg: CollectConfig) -> dict:
    """`collect` with a progress bar, then the dataset's summary.json and preview videos; returns the summary."""
    validate(cfg)  # before the bar, so that a bad value is the only line on stderr
    root = Path(cfg.out_dir)
    save_config(cfg, root.parent / f"{root.name}.collect.yaml")
    bar = tqdm(total=plan_size(cfg), desc="collect", unit="ep")
    n_ok = 0

    def on_episode(ep) -> None:
        nonlocal n_ok
        n_ok += int(ep.episode_success)
        bar.update(1)
        bar.set_postfix(task=ep.task_id, kind=ep.perturbation or ep.source, success=f"{n_ok}/{bar.n}")

    existing = len(EpisodeDataset(root, verify=False)) if (root / "meta" / "info.json").exists() else 0
    bar.update(min(existing, bar.total))
    collect(cfg, progress=on_episode)
    bar.close()
    summary = summarize(root)
    (root / "summary.json").write_text(json.dumps(summary, indent=2))
    previews = write_previews(root, cfg.preview_videos)
    print(f"dataset: {root}  ({len(EpisodeDataset(root, verify=False))} episodes)")
    for task, row in summary.items():
        print(f"  task {task:>2}: " + "  ".join(f"{k} {v['success']}/{v['episodes']}" for k, v in sorted(row.items())))
    for p in previews:
        print(f"  preview: {p}")
    return summary


__all__ = ["CollectConfig", "PlanItem", "collect", "collect_dataset", "make_plan", "per_suite", "plan_size",
           "record_episode", "record_plan", "summarize", "write_previews"]
