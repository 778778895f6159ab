"""Real LIBERO environment behind the project's observation/action convention.

One `LiberoEnv` is one LIBERO task (suite + task id) simulated by robosuite/MuJoCo through LIBERO's
own API. It follows the Gymnasium `Env` contract with a chunked `step`: the action is a chunk of K
7-D OSC_POSE actions that is executed step by step, stopping early on success. `step_single` runs
one 7-D action (a chunk of one) for closed-loop controllers such as the scripted experts.

Conventions fixed here, and nowhere else:
  * images are flipped vertically once (robosuite renders OpenGL-style, bottom row first);
  * every episode starts from one of the suite's official init states, followed by the standard
    10 "settle" steps with the gripper open (objects drop onto the table), not counted in the horizon;
  * success comes from the simulator (`check_success`), reward is 1.0 on the chunk that succeeds;
  * info carries `object_lift_m`, `target_distance_m` and `grasp_distance_m` of the goal's object
    (`envs.outcome`), so an evaluation can tell a missed grasp from a dropped or misplaced object.
"""
from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np

from envs import libero_suites
from envs.frames import tile_views
from envs.outcome import ObjectTracker
from envs.spaces import (
    ACTION_DIM,
    STATE_DIM,
    Info,
    Observation,
    action_space,
    check_action_chunk,
    observation_space,
)

# Our view names -> robosuite camera names.
CAMERAS = {"agentview": "agentview", "wrist": "robot0_eye_in_hand"}


@dataclass
class LiberoEnvConfig:
    """Configuration of one real LIBERO task environment."""

    suite: str = "libero_spatial"
    task_id: int = 0
    # () = no cameras: nothing is rendered (~10x faster), observations carry image [0, H, W, 3]; for
    # controllers and labelling that read simulator state only.
    views: tuple[str, ...] = ("agentview", "wrist")
    image_size: int = 64  # square renders; rendering cost is dominated by geometry, not pixels
    chunk_len: int = 8  # K actions per `step`
    max_steps: int | None = None  # control steps per episode; None = the suite's standard horizon
    settle_steps: int = 10
    # Skip multisampling and mirror reflections: ~2.5x faster software rendering, images differ slightly.
    fast_render: bool = False
    # Return the observation after every low-level step of a chunk in info["chunk_obs"] (for recording).
    chunk_info: bool = False
    # False: keep stepping after success (reward and info["success"] stay on, only the horizon ends the
    # episode). For recording what a solved scene looks like; evaluation keeps the default.
    terminate_on_success: bool = True


def _raw_state(raw_obs: dict) -> np.ndarray:
    """Proprio float32 [8]: eef pos (3), eef orientation as axis-angle (3), gripper finger qpos (2)."""
    from robosuite.utils.transform_utils import quat2axisangle  # lazy: robosuite is an optional extra

    axis_angle = quat2axisangle(np.asarray(raw_obs["robot0_eef_quat"]))
    return np.concatenate([raw_obs["robot0_eef_pos"], axis_angle, raw_obs["robot0_gripper_qpos"]]).astype(np.float32)


class LiberoEnv(gym.Env[Observation, np.ndarray]):
    """A single real LIBERO task. Observation/action spaces: see `envs.spaces`.

    reset(options) accepts {"init_state_id": int, "task_id": int}; without an init state id one is
    drawn from the suite's official init states with the env's seeded RNG. An id of
    libero_suites.DRAWN_LAYOUT_BASE + k starts drawn layout k instead (a fresh placement, its id's
    alone). Changing the task rebuilds the simulator (~8 s).
    """

    metadata = {"render_modes": ["rgb_array"], "render_fps": 20}
    # Control steps simulated by every LiberoEnv of this process: lets a caller prove that a phase
    # (imagined RL) used no real interaction, by reading it before and after.
    process_steps: int = 0

    def __init__(
        self,
        config: LiberoEnvConfig | None = None,
        render_mode: str | None = "rgb_array",
        xml_processor: Callable[[str], str] | None = None,
    ):
        self.cfg = cfg = config or LiberoEnvConfig()
        unknown = [v for v in cfg.views if v not in CAMERAS]
        if unknown:
            raise ValueError(f"views: expected a subset of {list(CAMERAS)} (empty = no cameras), got {list(cfg.views)}")
        if cfg.chunk_len < 1:
            raise ValueError(f"chunk_len: expected an integer >= 1, got {cfg.chunk_len}")
        if cfg.image_size < 8:
            raise ValueError(f"image_size: expected an integer >= 8 pixels, got {cfg.image_size}")
        self.spec_info = libero_suites.suite_info(cfg.suite)
        self.max_steps = cfg.max_steps or self.spec_info.max_steps
        if self.max_steps < 1:
            raise ValueError(f"max_steps: expected an integer >= 1 or None, got {cfg.max_steps}")
        self.render_mode = render_mode
        self.observation_space = observation_space(len(cfg.views), cfg.image_size, cfg.image_size, STATE_DIM)
        self.action_space = action_space(cfg.chunk_len)
        self._user_xml_processor = xml_processor
        self._raw: Any = None  # LIBERO's OffScreenRenderEnv (untyped), built by _load_task
        self.task_id = -1
        self.raw_obs: dict[str, Any] = {}  # robosuite's latest raw observation (empty before the first reset)
        self._t = 0
        self._done = True
        self._last_obs: dict | None = None
        # Per-env reset options set by a vector env through `set_attr` (one dict per worker).
        self.next_reset_options: dict | None = None
        self.tracker = ObjectTracker()  # the goal's object: how high it rose, how far from its target it ended
        self._load_task(cfg.task_id)

    # ----------------------------------------------------------------------------------------------
    def _load_task(self, task_id: int) -> None:
        task = libero_suites.get_task(self.cfg.suite, task_id)
        if self._raw is not None:
            self._raw.close()
        self._raw = libero_suites.make_raw_env(
            task, self.cfg.image_size, [CAMERAS[v] for v in self.cfg.views]
        )
        self._install_xml_processors()
        self.task = task
        self.task_id = task_id
        self.init_states = task.init_states
        self.instruction = task.language

    def _install_xml_processors(self) -> None:
        fast = libero_suites.fast_render_xml if self.cfg.fast_render else None
        processors = [p for p in (fast, self._user_xml_processor) if p]

        # robosuite's public hook: applied to the scene XML at every (hard) reset, before the sim is built.
        def process(xml: str) -> str:
            for p in processors:
                xml = p(xml)
            return xml

        self._raw.env.set_xml_processor(process if processors else None)

    def set_xml_processor(self, processor: Callable[[str], str] | None) -> None:
        """Change the scene-XML processor (e.g. a visual style from `envs.style`); applies from the next reset."""
        self._user_xml_processor = processor
        self._install_xml_processors()

    @property
    def raw(self):
        """The underlying LIBERO `OffScreenRenderEnv` (privileged access for scripted experts)."""
        return self._raw

    @property
    def num_init_states(self) -> int:
        return len(self.init_states)

    @property
    def t(self) -> int:
        """Control steps taken in the current episode (settle steps excluded)."""
        return self._t

    def _obs(self, raw_obs: dict) -> Observation:
        # [::-1] flips rows: robosuite/OpenGL images come bottom row first.
        size = self.cfg.image_size
        image = (np.stack([raw_obs[f"{CAMERAS[v]}_image"][::-1] for v in self.cfg.views]).astype(np.uint8)
                 if self.cfg.views else np.zeros((0, size, size, 3), np.uint8))
        obs = {"image": image, "state": _raw_state(raw_obs), "instruction": self.instruction}
        self._last_obs = obs
        return obs

    # ----------------------------------------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Observation, Info]:
        super().reset(seed=seed)
        opts = dict(self.next_reset_options or {})
        opts.update(options or {})
        self.next_reset_options = None
        unknown = set(opts) - {"init_state_id", "task_id"}
        if unknown:
            raise ValueError(f"reset options: unknown keys {sorted(unknown)}; "
                             "expected 'init_state_id' and/or 'task_id'")
        task_id = int(opts.get("task_id", self.task_id))
        if task_id != self.task_id:
            self._load_task(task_id)
        init_id = opts.get("init_state_id")
        if init_id is None:
            init_id = int(self.np_random.integers(self.num_init_states))
        drawn = libero_suites.is_drawn_layout(init_id)
        if not (drawn or 0 <= int(init_id) < self.num_init_states):
            raise ValueError(
                f"init_state_id: expected an integer in [0, {self.num_init_states - 1}] (an official init state) "
                f"or >= {libero_suites.DRAWN_LAYOUT_BASE} (a drawn layout) for {self.cfg.suite} task {self.task_id}, "
                f"got {init_id}"
            )
        self.init_state_id = int(init_id)
        # A seed drawn from the env's own generator makes a seeded reset exactly reproducible; a drawn layout's
        # scene is its id's alone, so that every arm evaluated on it meets the same one.
        reset_seed = int(self.np_random.integers(2**31))
        raw_obs = libero_suites.start_episode(
            self._raw,
            None if drawn else self.init_states[self.init_state_id],
            self.cfg.settle_steps,
            reset_seed=libero_suites.drawn_layout_seed(self.task_id, init_id) if drawn else reset_seed,
        )
        self.raw_obs = raw_obs
        self.tracker.reset(self._raw, raw_obs)
        self._t, self._done = 0, False
        info: Info = {"task_id": self.task_id, "init_state_id": self.init_state_id, "success": False,
                      **self.tracker.info()}
        return self._obs(raw_obs), info

    def step(self, action: np.ndarray) -> tuple[Observation, float, bool, bool, Info]:
        """Execute a chunk float32 [K, 7]; stops early on success or at the horizon."""
        chunk = check_action_chunk(action, self.cfg.chunk_len)
        return self._run(chunk)

    def step_single(self, action: np.ndarray) -> tuple[Observation, float, bool, bool, Info]:
        """Execute one 7-D action (a chunk of one); same return values as `step`."""
        return self._run(check_action_chunk(np.asarray(action).reshape(1, -1) if np.ndim(action) == 1 else action, 1))

    def _run(self, chunk: np.ndarray) -> tuple[Observation, float, bool, bool, Info]:
        if self._done:
            raise RuntimeError("step() called on a finished episode: call reset() first")
        success, executed = False, 0
        chunk_obs: list[Observation] = []
        for a in chunk:
            raw_obs, _, _, _ = self._raw.step(a.astype(np.float64))
            self._t += 1
            executed += 1
            LiberoEnv.process_steps += 1
            success = bool(self._raw.check_success())
            self.tracker.update(raw_obs, a)
            if self.cfg.chunk_info:
                chunk_obs.append(self._obs(raw_obs))
            if (success and self.cfg.terminate_on_success) or self._t >= self.max_steps:
                break
        self.raw_obs = raw_obs
        terminated = success and self.cfg.terminate_on_success
        truncated = (not terminated) and self._t >= self.max_steps
        self._done = terminated or truncated
        info: Info = {"success": success, "steps": executed, "t": self._t, "task_id": self.task_id,
                      **self.tracker.info()}
        if self.cfg.chunk_info:
            info["chunk_obs"] = chunk_obs
        return self._obs(raw_obs), float(success), terminated, truncated, info

    def check_success(self) -> bool:
        return bool(self._raw.check_success())

    def render(self) -> np.ndarray | None:
        """uint8 [H, V*W, 3]: the current views side by side (upright); None without cameras."""
        if self._last_obs is None or not self.cfg.views:
            return None
        return tile_views(self._last_obs["image"])

    def close(self) -> None:
        if self._raw is not None:
            self._raw.close()
            self._raw = None


def make_env_fn(config: LiberoEnvConfig, **kwargs) -> Callable[[], LiberoEnv]:
    """A picklable factory for vector envs (subprocess workers build their own simulator)."""
    return _EnvFactory(config, kwargs)


@dataclass
class _EnvFactory:
    config: LiberoEnvConfig
    kwargs: dict

    def __call__(self) -> LiberoEnv:
        os.environ.setdefault("MUJOCO_GL", "egl")
        return LiberoEnv(self.config, **self.kwargs)


__all__ = ["LiberoEnv", "LiberoEnvConfig", "CAMERAS", "make_env_fn", "ACTION_DIM"]
