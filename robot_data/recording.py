"""What both backends of a scripted-expert collection share: its config (`CollectConfig`), one item of its plan
(`PlanItem`), the simulator that records it (`env_config`) and the recording (`record_episode`).

robot_data/collection.py plans the collection, writes the dataset and records on local worker processes;
robot_data/ray_collection.py records the same plan items on Ray actors. Both build on this module, and collection.py
calls ray_collection.py for `backend=ray`, so the imports go one way (tests/test_layering.py). The names stay
importable from robot_data.collection, where the scripts and the tests take them.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from envs.frames import split_views
from envs.libero_env import LiberoEnv, LiberoEnvConfig
from envs.style import style_processor
from infra.crash_points import crash_point
from robot_data.dataset import Episode
from robot_data.experts import Perturbation, make_expert, make_perturbed_expert


@dataclass
class CollectConfig:
    """What to collect, and where."""

    out_dir: str = "outputs/data/libero_spatial"
    suite: str = "libero_spatial"
    # several suites into out_dir, one after another with these settings (overrides suite): one dataset, and one
    # world model and policy trained on it, over several suites; tasks and perturbations apply to each suite
    suites: list[str] = field(default_factory=list)
    tasks: list[int] = field(default_factory=list)  # empty = every task of the suite
    episodes_per_task: int = 10
    init_state_offset: int = 0  # episode j of a task starts from init state (offset + j) % num_init_states
    perturbed_fraction: float = 0.3  # share of episodes run by a perturbed expert
    # Kinds the perturbed episodes cycle through, of those the suite supports (robot_data.experts.SUITE_PERTURBATIONS).
    # Empty = the suite's defaults (robot_data.experts.default_perturbations): on Spatial the original four
    # (near_miss is opt-in), elsewhere all of the suite's.
    perturbations: list[str] = field(default_factory=list)
    perturbation_strength: float = 1.0
    image_size: int = 64
    views: list[str] = field(default_factory=lambda: ["agentview", "wrist"])
    fast_render: bool = True  # see LiberoEnvConfig.fast_render; recorded in every episode's metadata
    max_steps: int = 0  # 0 = the suite's standard horizon
    seed: int = 0
    num_workers: int = 1  # simulator processes (rendering is the bottleneck: use one per core)
    # "local": num_workers subprocesses here; "ray": num_workers Ray actors (one CPU each) on the cluster at
    # ray_address ("" = a new local cluster, "auto" = the running one); robot_data/ray_collection.py
    backend: str = "local"
    ray_address: str = ""
    video_codec: str = "libx264rgb"  # lossless; "h264" for small lossy files
    preview_videos: int = 4  # side-by-side mp4s of the first episodes, for a human to look at
    # Extra copies of every episode re-rendered in random visual styles (same trajectory, other look).
    style_variants: int = 0
    # Steps recorded after the first success: without them no recorded frame shows the solved scene
    # (row t is the observation *before* action t), and a success head has nothing to learn from.
    post_success_steps: int = 8


@dataclass(frozen=True)
class PlanItem:
    task_id: int
    index: int  # episode number within the task
    init_state_id: int
    perturbation: str  # "" = clean expert
    seed: int
    style: int = 0  # 0 = LIBERO's own look; k > 0 = the k-th style variant of this episode
    # The collection's seed (CollectConfig.seed) that planned it; -1 for a plan made otherwise (the successes of a
    # label folder: robot_data/label_frames.py). A resume compares it: a plan's own seeds change when it grows.
    plan_seed: int = -1

    @property
    def key(self) -> tuple[int, int, str, int]:
        return (self.task_id, self.index, self.perturbation, self.style)

    @property
    def style_seed(self) -> int:
        # Distinct per episode and variant, reproducible from the plan.
        return (self.seed * 7919 + self.style) % 2**31 if self.style else 0


def record_episode(env: LiberoEnv, item: PlanItem, strength: float = 1.0, post_success_steps: int = 0) -> Episode:
    """Run the (perturbed) expert for one plan item in `env` and record every control step.

    Row t holds the observation before action t, action t, and the reward/success after it. After the
    first success, `post_success_steps` more steps are recorded (`env` must not terminate on success).
    A style variant replays the same plan item in a restyled scene: the expert acts on privileged
    state, not pixels, and the seeded reset is reproducible, so the trajectory is the same.
    """
    env.set_xml_processor(style_processor(item.style_seed) if item.style else None)
    rng = np.random.default_rng(item.seed)
    expert = (
        make_perturbed_expert(env.cfg.suite, Perturbation(item.perturbation, strength), rng=rng)
        if item.perturbation else make_expert(env.cfg.suite, rng=rng)
    )
    obs, _ = env.reset(seed=item.seed, options={"task_id": item.task_id, "init_state_id": item.init_state_id})
    expert.reset(env.raw, env.raw_obs)
    frames, states, actions, rewards, successes = [], [], [], [], []
    done, post_success = False, post_success_steps
    while not done:
        action = np.clip(expert.act(env.raw_obs), -1.0, 1.0).astype(np.float32)
        frames.append(obs["image"])
        states.append(obs["state"])
        obs, reward, terminated, truncated, info = env.step_single(action)
        actions.append(action)
        rewards.append(reward)
        successes.append(info["success"])
        if any(successes):
            post_success -= 1  # the env keeps going after success (terminate_on_success=False)
        done = terminated or truncated or post_success < 0
        crash_point("collect.step")
    images = np.stack(frames)  # [T, V, H, W, 3]
    return Episode(
        frames=split_views(images, env.cfg.views),
        state=np.stack(states),
        action=np.stack(actions),
        reward=np.asarray(rewards, np.float32),
        success=np.asarray(successes, bool),
        instruction=env.instruction,
        suite=env.cfg.suite,
        task_id=item.task_id,
        source="perturbed" if item.perturbation else "expert",
        perturbation=item.perturbation,
        seed=item.seed,
        init_state_id=item.init_state_id,
        extra={
            "plan_index": item.index,
            "style": item.style,
            "style_seed": item.style_seed,
            "plan_seed": item.plan_seed,
            "fast_render": env.cfg.fast_render,
            "strength": strength if item.perturbation else 0.0,
            # Which skill carried the defect and its size (offsets, stop points): see robot_data/experts.
            **({"perturbation_info": dict(getattr(expert, "perturbation_info", {}))} if item.perturbation else {}),
        },
    )


def env_config(cfg: CollectConfig, task_id: int) -> LiberoEnvConfig:
    return LiberoEnvConfig(
        suite=cfg.suite,
        task_id=task_id,
        views=tuple(cfg.views),
        image_size=cfg.image_size,
        chunk_len=1,
        max_steps=cfg.max_steps or None,
        fast_render=cfg.fast_render,
        terminate_on_success=cfg.post_success_steps == 0,
    )


__all__ = ["CollectConfig", "PlanItem", "env_config", "record_episode"]
