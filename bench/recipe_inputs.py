"""What the protocol's RL recipe reads besides the protocol's data, world model and start (bench/protocol.py
`build`), made on the training init states only, and the recipe's config pointed at it.

`build_recipe(protocol, paths, loop)` makes what the recipe (configs/rl/<protocol.recipe>.yaml) reads: for the grasp
judge the BC policy's own labelled real rollouts (on drawn layouts too with `own_drawn_layouts`), scripted near-miss
grasps and a proprio model fitted on the demonstrations and those rollouts; for the goal judge the own rollouts and
the goal reader. `recipe_config` points the recipe at them, and refuses an override it would replace.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from bench.protocol import RLGainProtocol
from envs.libero_suites import suite_info
from imagination.eval.jobs import EvalConfig
from imagination.loop.config import LoopConfig
from imagination.loop.goal_inputs import GoalInputPaths, GoalInputsConfig, build_goal_inputs, quick_reader
from imagination.loop.grasp_inputs import (
    GraspInputPaths,
    GraspInputsConfig,
    build_grasp_inputs,
    fit_proprio_once,
    own_rollouts,
)
from imagination.rl.training import ImagineRLConfig
from infra.cli import load_config


def _inputs_config(p: RLGainProtocol) -> GraspInputsConfig:
    return GraspInputsConfig(own_rollout_seed=p.own_rollout_seed,
                             near_miss_episodes_per_task=p.near_miss_episodes_per_task,
                             near_miss_strength=p.near_miss_strength, proprio_steps=p.proprio_steps,
                             near_miss_kinds=list(p.near_miss_kinds) or GraspInputsConfig().near_miss_kinds,
                             own_drawn_layouts=p.own_drawn_layouts)


def recipe_reward(p: RLGainProtocol) -> str:
    """The judge of the protocol's recipe (configs/rl/<p.recipe>.yaml imagination.reward): "goal" or "grasp"."""
    reward = load_config(ImagineRLConfig, p.recipe, group="rl").imagination.reward
    if reward not in ("goal", "grasp"):
        raise ValueError(f"recipe: protocol v2 builds the inputs of a recipe with reward goal or grasp; configs/rl/"
                         f"{p.recipe}.yaml has reward {reward!r}")
    return reward


def build_recipe(p: RLGainProtocol, paths: dict[str, str], loop: LoopConfig,
                 overrides: Sequence[str] = ()) -> dict[str, str]:
    """What the protocol's recipe (with the --rl `overrides`) reads besides `build`'s paths (data, world_model, bc),
    made or reused on the training init states. Reward "grasp" (imagination/loop/grasp_inputs.py): simulator labels
    of the data, the BC policy's own labelled rollouts, near-miss grasps (none when the recipe's
    imagination.grasp_label_dirs is []) and the proprio model fitted on both datasets. Reward "goal"
    (imagination/loop/goal_inputs.py): the BC policy's own rollouts and the goal reader trained on them and the data.
    Returns their paths."""
    jobs = replace(loop.eval, env=p.suite, tasks=list(p.tasks), episodes_per_task=p.train_init_states,
                   init_state_offset=0)
    if recipe_reward(p) == "goal":
        if p.own_drawn_layouts:
            raise ValueError("own_drawn_layouts: only a recipe with reward grasp records the start's own rollouts on "
                             f"drawn layouts; {p.recipe!r} has reward goal")
        reader = replace(quick_reader(), steps=p.goal_reader_steps)
        goal_paths = GoalInputPaths(own_rollouts=p.path("own_rollouts"), goal_reader=p.path("goal_reader"))
        built = build_goal_inputs(goal_paths, paths["data"], paths["bc"], jobs,
                                  GoalInputsConfig(own_rollout_seed=p.own_rollout_seed, reader=reader))
        return {**built, **_goal_recipe_extras(p, paths, built["own_rollouts"], jobs)}
    recipe = load_config(ImagineRLConfig, p.recipe, list(overrides), group="rl")
    # a recipe whose judge reads no scripted grasp (grasp_label_dirs: []) consumes none: none is simulated, and the
    # real-data control is then given only the data and the own rollouts, as the recipe is
    scripted = bool(recipe.imagination.grasp_label_dirs)
    where = GraspInputPaths(own_rollouts=p.path("own_rollouts"),
                            near_miss_labels=p.near_miss_path() if scripted else "",
                            proprio=p.path("own_proprio_file"))
    # near-miss grasps on the tasks the recipe imagines (every protocol task when it names none): a task with no
    # pick-and-place object (LIBERO-Goal's drawers) has no grasp point to miss
    return build_grasp_inputs(where, paths["data"], paths["bc"], paths["world_model"], jobs, _inputs_config(p),
                              near_miss_tasks=list(recipe.tasks))


def _goal_recipe_extras(p: RLGainProtocol, paths: dict[str, str], own: str, jobs: EvalConfig) -> dict[str, str]:
    """What a goal recipe reads besides the own rollouts and the reader, when its preset names it (configs/rl/
    carry_goal.yaml, crn_goal.yaml): the proprio model fitted on the data and the own rollouts (`proprio`), and the
    start's own rollouts on the gate's init states, where its held-out check starts (`heldout.start_data`)."""
    cfg = load_config(ImagineRLConfig, p.recipe, group="rl")
    extras = {}
    if cfg.heldout.every and cfg.heldout.start_data:
        gate = replace(jobs, init_state_offset=p.gate_offset, episodes_per_task=p.gate_init_states)
        extras["gate_rollouts"] = own_rollouts(p.path("gate_rollouts"), paths["bc"], paths["data"], gate,
                                               p.own_rollout_seed, sim_labels=False)
    if cfg.proprio:
        extras["proprio"] = fit_proprio_once(p.path("own_proprio_file"), [paths["data"], own], paths["world_model"],
                                             p.proprio_steps)
    return extras


def recipe_config(p: RLGainProtocol, paths: dict[str, str], out_dir: str,
                  overrides: Sequence[str] = ()) -> ImagineRLConfig:
    """The recipe preset (configs/rl/<p.recipe>.yaml) with `overrides`, pointed at the protocol's inputs:
    `paths` holds build's and build_recipe's. A goal recipe imagines to the suite's own horizon unless an override
    sets imagination.max_steps."""
    asked = load_config(ImagineRLConfig, p.recipe, list(overrides), group="rl")
    cfg = _pointed_at_inputs(p, asked, paths, out_dir, overrides)
    if replaced := [o for o in overrides if _field(asked, override_key(o)) != _field(cfg, override_key(o))]:
        # the run would silently not be the one asked for (an override of the start ran the protocol's start)
        raise ValueError(f"--rl {' '.join(replaced)}: the benchmark points the recipe at the protocol's own inputs and "
                         "folders; give another start with --bc (with --world-model and --data), another folder "
                         "with --out-dir")
    return cfg


class Unbuilt(dict[str, str]):
    """The inputs a recipe_config dry run points at before anything is built: bench/rl_gain.py checks --rl with it
    instead of finding a refused override after an hour of building."""

    def __missing__(self, key: str) -> str:
        return f"<the protocol's {key}>"


def override_key(override: str) -> str:
    """The field a key=value override sets (`a.b` of `+a.b=1`)."""
    return override.split("=", 1)[0].strip().lstrip("+~")


def _field(cfg: object, dotted: str) -> object:
    for name in dotted.split("."):
        cfg = getattr(cfg, name, None)
    return cfg


def _pointed_at_inputs(p: RLGainProtocol, cfg: ImagineRLConfig, paths: dict[str, str], out_dir: str,
                       overrides: Sequence[str]) -> ImagineRLConfig:
    if cfg.imagination.reward == "goal":  # the suite's horizon goes first, so that an override still wins
        horizon = f"imagination.max_steps={suite_info(p.suite).max_steps}"
        cfg = load_config(ImagineRLConfig, p.recipe, [horizon, *overrides], group="rl")
    # a recipe that starts from the start's own rollouts (sources [policy]) and anchors on them reads the protocol's
    own = cfg.sources == ["policy"]
    cfg = replace(cfg, policy=paths["bc"], world_model=paths["world_model"],
                  start_data=paths["own_rollouts"] if own else paths["data"],
                  bc_data=paths["own_rollouts"] if cfg.bc_data else "", out_dir=out_dir)
    if cfg.imagination.reward == "goal":
        # its proprio model and its held-out check's starts too, when it names them (_goal_recipe_extras)
        cfg = replace(cfg, proprio=paths["proprio"] if cfg.proprio else "",
                      heldout=replace(cfg.heldout, start_data=paths["gate_rollouts"])
                      if cfg.heldout.every and cfg.heldout.start_data else cfg.heldout)
        return replace(cfg, imagination=replace(cfg.imagination, goal_reader=paths["goal_reader"]))
    # the scripted near-miss grasps only for a recipe whose judge reads some (build_recipe simulates none otherwise)
    im = replace(cfg.imagination, grasp_train_data=[paths["data"], paths["own_rollouts"]],
                 grasp_label_dirs=[paths["near_miss_labels"]] if cfg.imagination.grasp_label_dirs else [])
    return replace(cfg, proprio=paths["proprio"], imagination=im)


__all__ = ["Unbuilt", "build_recipe", "override_key", "recipe_config", "recipe_reward"]
