"""What the protocol's recipe reads (bench/recipe_inputs.py): which stage configs build_recipe hands to the own
rollouts, the near-miss grasps, the proprio model and the goal reader, on the training init states only, and how
recipe_config points the recipe at them. The stages are replaced by recorders (each is tested in its own package)."""
import json
from dataclasses import replace
from pathlib import Path

import pytest

import bench.protocol as protocol
import bench.recipe_inputs as recipe_inputs
from imagination.loop.config import LoopConfig
from infra.cli import load_config


@pytest.fixture
def recipe_recorded(tmp_path, monkeypatch):
    """build_recipe's stages (imagination/loop/grasp_inputs.py) replaced by recorders (each is tested in its own
    package)."""
    calls: dict[str, list] = {"rollouts": [], "label": [], "near_miss": [], "frames": [], "proprio": []}

    def rollouts(cfg, policy, data_dir, extra, progress=True):
        calls["rollouts"].append((cfg, data_dir))
        return {"recorded": {"episodes": 50}}

    def proprio(cfg):
        calls["proprio"].append(cfg)
        Path(cfg.out).parent.mkdir(parents=True, exist_ok=True)
        Path(cfg.out).write_bytes(b"p")

    class Model:
        chunk_len = 6

    import imagination.loop.grasp_inputs as inputs

    monkeypatch.setattr(inputs, "evaluate_and_record", rollouts)
    monkeypatch.setattr(inputs, "label_dataset", lambda d, progress: calls["label"].append(d))
    monkeypatch.setattr(inputs, "collect_labels", lambda cfg: calls["near_miss"].append(cfg))
    monkeypatch.setattr(inputs, "record_label_frames", lambda *a, **k: calls["frames"].append(a))
    monkeypatch.setattr(inputs, "fit_proprio_on_data", proprio)
    monkeypatch.setattr(inputs.Policy, "load", staticmethod(lambda path: path))
    monkeypatch.setattr(inputs.WorldModel, "load", staticmethod(lambda path: Model()))
    return calls


def test_build_recipe_makes_its_inputs_on_the_training_init_states_only(tmp_path, recipe_recorded):
    from robot_data.dataset import DatasetConfig, EpisodeWriter

    p = protocol.RLGainProtocol(root=str(tmp_path / "rl_gain"))
    loop = load_config(LoopConfig, "quick", [], group="loop")
    EpisodeWriter(p.path("data"), DatasetConfig(views=("agentview",), image_size=(8, 8))).close()
    paths = {"data": p.path("data"), "world_model": p.path("world_model_file"), "bc": p.path("bc_file")}
    got = recipe_inputs.build_recipe(p, paths, loop)
    ((rollout_cfg, own),) = recipe_recorded["rollouts"]
    assert own == got["own_rollouts"] and Path(own, "meta", "info.json").is_file()  # made with the data's layout
    assert rollout_cfg.init_state_offset == 0 and rollout_cfg.episodes_per_task == p.train_init_states
    assert rollout_cfg.seed == p.own_rollout_seed != p.seed and rollout_cfg.checkpoint == paths["bc"]
    (near,) = recipe_recorded["near_miss"]
    assert near.init_state_offset == 0 and near.init_states == p.train_init_states and near.strength == 1.6
    (fit,) = recipe_recorded["proprio"]
    assert fit.data == [paths["data"], own] and fit.model.chunk_len == 6  # the world model's chunk
    assert set(recipe_recorded["label"]) == {paths["data"], own}
    # the near misses that succeeded, with the data's cameras, for arm b
    near_dir = got["near_miss_labels"]
    assert recipe_recorded["frames"][0] == (near_dir, near_dir + "_frames", p.suite, paths["data"])
    # a second build records and fits nothing again
    recipe_inputs.build_recipe(p, paths, loop)
    assert len(recipe_recorded["rollouts"]) == len(recipe_recorded["proprio"]) == 1

    cfg = recipe_inputs.recipe_config(p, {**paths, **got}, str(tmp_path / "rl"), ["seed=3"])
    assert (cfg.policy, cfg.world_model, cfg.start_data, cfg.proprio) == (
        paths["bc"], paths["world_model"], paths["data"], got["proprio"])
    assert cfg.imagination.grasp_train_data == [paths["data"], own]
    assert cfg.imagination.grasp_label_dirs == [got["near_miss_labels"]]
    assert cfg.imagination.reward == "grasp" and cfg.rl.group_std_floor == 0.1 and cfg.seed == 3  # the preset's


def test_own_rollouts_on_drawn_layouts_go_to_their_own_folder_and_budget(tmp_path, recipe_recorded):
    """own_drawn_layouts: the start's own rollouts on the training init states, then on drawn layouts 0..N-1 of each
    task, into one dataset of its own folder (a count is never mixed with another); the proprio model beside it."""
    from envs.libero_suites import DRAWN_LAYOUT_BASE
    from robot_data.dataset import DatasetConfig, EpisodeWriter

    p = protocol.RLGainProtocol(root=str(tmp_path / "rl_gain"), own_drawn_layouts=20)
    loop = load_config(LoopConfig, "quick", [], group="loop")
    EpisodeWriter(p.path("data"), DatasetConfig(views=("agentview",), image_size=(8, 8))).close()
    paths = {"data": p.path("data"), "world_model": p.path("world_model_file"), "bc": p.path("bc_file")}
    got = recipe_inputs.build_recipe(p, paths, loop)
    (official, own), (drawn, own2) = recipe_recorded["rollouts"]
    assert own == own2 == got["own_rollouts"] == str(tmp_path / "rl_gain" / "own_rollouts_drawn20" / "data")
    assert (official.init_state_offset, official.episodes_per_task) == (0, p.train_init_states)
    assert (drawn.init_state_offset, drawn.episodes_per_task) == (DRAWN_LAYOUT_BASE, 20)
    assert drawn.tasks == official.tasks and drawn.out_dir != official.out_dir
    assert got["proprio"] == str(tmp_path / "rl_gain" / "own_rollouts_drawn20" / "proprio.pt")
    record = json.loads((tmp_path / "rl_gain" / "own_rollouts_drawn20" / "result.json").read_text())
    assert record["drawn_layouts"] == 20 and record["recorded"]["episodes"] == 100  # both recordings counted
    # the folder of 20 refuses another count rather than mixing it in
    from imagination.loop.grasp_inputs import own_rollouts

    with pytest.raises(ValueError, match="on 20 drawn layouts per task, not the 5"):
        own_rollouts(str(tmp_path / "rl_gain" / "own_rollouts_drawn20"), paths["bc"], paths["data"], official, 1,
                     drawn_layouts=5)


def test_goal_grasp_makes_near_misses_of_its_task_and_starts_from_the_own_rollouts(tmp_path, recipe_recorded):
    """configs/rl/goal_grasp.yaml on LIBERO-Goal: near-miss grasps on the pick-and-place tasks it imagines only (the
    drawer tasks have no grasp point), the own rollouts of every task (the anchor holds all five), imagined episodes
    started and anchored on them, the policy on their recorded frames."""
    from robot_data.dataset import DatasetConfig, EpisodeWriter

    p = replace(protocol.suite_protocol("libero_goal", str(tmp_path / "goal")), recipe="goal_grasp")
    loop = load_config(LoopConfig, "quick", [], group="loop")
    EpisodeWriter(p.path("data"), DatasetConfig(views=("agentview",), image_size=(8, 8))).close()
    paths = {"data": p.path("data"), "world_model": p.path("world_model_file"), "bc": p.path("bc_file")}
    got = recipe_inputs.build_recipe(p, paths, loop)
    ((rollout_cfg, own),) = recipe_recorded["rollouts"]
    assert rollout_cfg.tasks == [0, 1, 2, 3, 4] and rollout_cfg.env == "libero_goal"
    (near,) = recipe_recorded["near_miss"]
    assert near.tasks == [1, 2, 4] and near.suite == "libero_goal" and near.init_states == p.train_init_states
    cfg = recipe_inputs.recipe_config(p, {**paths, **got}, str(tmp_path / "rl"), ["seed=2"])
    assert (cfg.start_data, cfg.bc_data, cfg.proprio) == (own, own, got["proprio"])
    assert cfg.imagination.grasp_train_data == [paths["data"], own]
    assert cfg.imagination.observe == "recorded" and cfg.adapt.steps == 0 and cfg.tasks == [1, 2, 4]
    assert cfg.bc_tasks == [0, 1, 2, 3, 4] and cfg.imagination.object_reader == ""
    with_reader = recipe_inputs.recipe_config(p, {**paths, **got}, str(tmp_path / "rl"),
                                         ["imagination.object_reader=reader.pt"])
    assert with_reader.imagination.object_reader == "reader.pt"  # the judge then reads the image, not the labels


def test_a_judge_without_scripted_grasps_consumes_none(tmp_path, recipe_recorded):
    """--rl 'imagination.grasp_label_dirs=[]': the judge fits on the data and the own rollouts alone, no near-miss
    grasp is simulated or recorded, and the real-data control is given exactly those two datasets."""
    from imagination.loop.arms import consumed
    from robot_data.dataset import DatasetConfig, EpisodeWriter

    p = replace(protocol.suite_protocol("libero_goal", str(tmp_path / "goal")), recipe="goal_grasp")
    loop = load_config(LoopConfig, "quick", [], group="loop")
    EpisodeWriter(p.path("data"), DatasetConfig(views=("agentview",), image_size=(8, 8))).close()
    paths = {"data": p.path("data"), "world_model": p.path("world_model_file"), "bc": p.path("bc_file")}
    none = ["imagination.grasp_label_dirs=[]"]
    got = recipe_inputs.build_recipe(p, paths, loop, none)
    assert recipe_recorded["near_miss"] == [] and recipe_recorded["frames"] == [] and got["near_miss_labels"] == ""
    assert len(recipe_recorded["rollouts"]) == len(recipe_recorded["proprio"]) == 1  # the rest is made as before
    cfg = recipe_inputs.recipe_config(p, {**paths, **got}, str(tmp_path / "rl"), none)
    assert cfg.imagination.grasp_label_dirs == []
    assert consumed(cfg) == ([got["own_rollouts"], paths["data"]], [])
    # a folder of the user's own is refused: the protocol makes its own
    with pytest.raises(ValueError, match="grasp_label_dirs"):
        recipe_inputs.recipe_config(p, {**paths, **got}, "rl", ["imagination.grasp_label_dirs=[mine]"])


def test_a_near_miss_plan_without_clean_experts_has_its_own_folder(tmp_path, recipe_recorded):
    """--near-miss-kinds near_miss: the grasps are simulated with that plan into a folder of their own (never mixed
    with the protocol's plan, which has one clean expert in four), and the judge and arm b read that folder."""
    from imagination.loop.arms import consumed
    from robot_data.dataset import DatasetConfig, EpisodeWriter

    base = replace(protocol.suite_protocol("libero_goal", str(tmp_path / "goal")), recipe="goal_grasp")
    p = replace(base, near_miss_kinds=("near_miss",))
    assert base.near_miss_path() == base.path("near_miss_labels_s16")
    assert p.near_miss_path() == p.path("near_miss_labels_s16_near_miss") != base.near_miss_path()
    loop = load_config(LoopConfig, "quick", [], group="loop")
    EpisodeWriter(p.path("data"), DatasetConfig(views=("agentview",), image_size=(8, 8))).close()
    paths = {"data": p.path("data"), "world_model": p.path("world_model_file"), "bc": p.path("bc_file")}
    got = recipe_inputs.build_recipe(p, paths, loop)
    (near,) = recipe_recorded["near_miss"]
    assert near.kinds == ["near_miss"] and near.out_dir == got["near_miss_labels"] == p.near_miss_path()
    assert recipe_recorded["frames"][0][:2] == (p.near_miss_path(), p.near_miss_path() + "_frames")
    cfg = recipe_inputs.recipe_config(p, {**paths, **got}, str(tmp_path / "rl"), [])
    assert cfg.imagination.grasp_label_dirs == [p.near_miss_path()]
    assert consumed(cfg)[1] == [p.near_miss_path()]
    recipe_inputs.build_recipe(base, paths, loop)  # the protocol's own plan: three near misses and one clean expert
    assert recipe_recorded["near_miss"][1].kinds == ["near_miss", "near_miss", "near_miss", "expert"]


@pytest.fixture
def goal_recorded(monkeypatch):
    """The goal recipe's stages (imagination/loop/goal_inputs.py) replaced by recorders (each is tested in its own
    package: the recording in imagination/eval, the labels in robot_data, the reader in world_models)."""
    calls: dict[str, list] = {"rollouts": [], "label": [], "reader": []}
    import imagination.loop.goal_inputs as inputs

    def rollouts(root, policy, data, eval_cfg, seed, sim_labels=True):
        calls["rollouts"].append((eval_cfg, seed, sim_labels))
        return str(Path(root) / "data")

    def reader(cfg):
        calls["reader"].append(cfg)
        Path(cfg.out_dir).mkdir(parents=True)
        Path(cfg.out_dir, "reader.pt").write_bytes(b"r")

    monkeypatch.setattr(inputs, "own_rollouts", rollouts)
    monkeypatch.setattr(inputs, "label_goal_dataset", lambda d, progress: calls["label"].append(d))
    monkeypatch.setattr(inputs, "train_goal_reader", reader)
    return calls


def test_the_goal_recipe_builds_its_reader_on_the_data_and_the_starts_own_rollouts(tmp_path, goal_recorded):
    """Every suite but LIBERO-Spatial runs the goal recipe: the start's own rollouts on the training init states, goal
    labels of both datasets, one reader trained on both; RL reads that reader and imagines to the suite's horizon."""
    p = protocol.suite_protocol("libero_goal", str(tmp_path / "goal"))
    assert p.recipe == "goal" and recipe_inputs.recipe_reward(p) == "goal"
    loop = load_config(LoopConfig, "quick", [], group="loop")
    paths = {"data": p.path("data"), "world_model": p.path("world_model_file"), "bc": p.path("bc_file")}
    got = recipe_inputs.build_recipe(p, paths, loop)
    ((jobs, seed, sim_labels),) = goal_recorded["rollouts"]
    assert (jobs.env, jobs.tasks, jobs.init_state_offset, jobs.episodes_per_task) == (
        "libero_goal", [0, 1, 2, 3, 4], 0, p.train_init_states)
    assert seed == p.own_rollout_seed and not sim_labels  # the goal judge reads goal labels, not the grasp's
    assert goal_recorded["label"] == [paths["data"], got["own_rollouts"]]
    (fit,) = goal_recorded["reader"]
    assert fit.data_dirs == [paths["data"], got["own_rollouts"]] and fit.reader.steps == p.goal_reader_steps
    recipe_inputs.build_recipe(p, paths, loop)  # the reader is there: not trained again
    assert len(goal_recorded["reader"]) == 1
    cfg = recipe_inputs.recipe_config(p, {**paths, **got}, str(tmp_path / "rl"), ["seed=2"])
    assert cfg.imagination.reward == "goal" and cfg.imagination.goal_reader == got["goal_reader"]
    assert cfg.imagination.max_steps == 300 and cfg.seed == 2 and cfg.bc_target == "start_policy"
    assert (cfg.policy, cfg.start_data) == (paths["bc"], paths["data"])
    long = recipe_inputs.recipe_config(replace(p, suite="libero_10"), {**paths, **got}, str(tmp_path / "rl"))
    assert long.imagination.max_steps == 520  # LIBERO-10's horizon
    short = recipe_inputs.recipe_config(p, {**paths, **got}, str(tmp_path / "rl"), ["imagination.max_steps=16"])
    assert short.imagination.max_steps == 16  # an override wins



def test_a_recipe_from_the_own_rollouts_gets_its_proprio_model_and_gate_rollouts(tmp_path, goal_recorded,
                                                                                  monkeypatch):
    """configs/rl/crn_goal.yaml starts from the start's own rollouts, reads a proprio model and checks held-out starts
    on the gate's init states: build_recipe makes both, and recipe_config points the recipe at them."""
    made: dict[str, list] = {"proprio": [], "gate": []}

    def fit(out, data, world_model, steps):
        made["proprio"].append((data, world_model, steps))
        return out

    def gate(root, policy, data, eval_cfg, seed, sim_labels=True):
        made["gate"].append((root, policy, eval_cfg, seed, sim_labels))
        return str(Path(root) / "data")

    monkeypatch.setattr(recipe_inputs, "fit_proprio_once", fit)
    monkeypatch.setattr(recipe_inputs, "own_rollouts", gate)
    p = replace(protocol.PROTOCOL_V2, root=str(tmp_path / "v2"), recipe="crn_goal")
    loop = load_config(LoopConfig, "quick", [], group="loop")
    paths = {"data": p.path("data"), "world_model": p.path("world_model_file"), "bc": p.path("bc_file")}
    got = recipe_inputs.build_recipe(p, paths, loop)
    (((data, own), wm, steps),) = made["proprio"]
    assert (data, own, wm, steps) == (paths["data"], got["own_rollouts"], paths["world_model"], p.proprio_steps)
    ((root, policy, jobs, seed, sim_labels),) = made["gate"]
    assert (root, policy, seed, sim_labels) == (p.path("gate_rollouts"), paths["bc"], p.own_rollout_seed, False)
    assert (jobs.init_state_offset, jobs.episodes_per_task, jobs.tasks) == (10, 10, [5, 6, 7, 8, 9])  # the gate's
    cfg = recipe_inputs.recipe_config(p, {**paths, **got}, str(tmp_path / "rl"), ["seed=1"])
    assert (cfg.start_data, cfg.bc_data, cfg.sources) == (got["own_rollouts"], got["own_rollouts"], ["policy"])
    assert (cfg.proprio, cfg.heldout.start_data) == (p.path("own_proprio_file"), got["gate_rollouts"])
    assert cfg.adapt.steps == 400 and cfg.imagination.noise_group == 8 and cfg.policy == paths["bc"]


def test_goal_window_reads_the_suites_own_rollouts_and_gate_rollouts_of_its_tasks(tmp_path, goal_recorded,
                                                                                  monkeypatch):
    """configs/rl/goal_window.yaml on LIBERO-Goal: imagined windows from the start's own rollouts, the held-out check
    on the gate rollouts of the same tasks, no proprio model to fit beforehand (the run fits its own), and the suite's
    horizon as the outer bound of every window."""
    gates: list = []

    def gate(root, policy, data, eval_cfg, seed, sim_labels=True):
        gates.append((eval_cfg.init_state_offset, sim_labels))
        return str(Path(root) / "data")

    monkeypatch.setattr(recipe_inputs, "own_rollouts", gate)
    p = replace(protocol.suite_protocol("libero_goal", str(tmp_path / "goal")), recipe="goal_window")
    loop = load_config(LoopConfig, "quick", [], group="loop")
    paths = {"data": p.path("data"), "world_model": p.path("world_model_file"), "bc": p.path("bc_file")}
    got = recipe_inputs.build_recipe(p, paths, loop)
    assert gates == [(p.gate_offset, False)] and "proprio" not in got
    cfg = recipe_inputs.recipe_config(p, {**paths, **got}, str(tmp_path / "rl"), ["seed=1"])
    assert (cfg.start_data, cfg.bc_data, cfg.sources) == (got["own_rollouts"], got["own_rollouts"], ["policy"])
    assert cfg.heldout.start_data == got["gate_rollouts"] and cfg.heldout.tasks == cfg.tasks == [0, 2]
    assert cfg.proprio == "" and cfg.imagination.goal_reader == got["goal_reader"]
    assert (cfg.imagination.max_steps, cfg.imagination.imagined_steps) == (300, 64)
    assert cfg.imagination.keyframes.mode == "hard" and cfg.adapt.steps == 400 and cfg.seed == 1


def test_recipe_config_refuses_an_override_it_would_replace_with_the_protocols_input():
    """An override of an input the protocol points the recipe at (a goal recipe's reader, a grasp recipe's judge data)
    would be dropped without a word; an override it keeps (the horizon, a seed) is the run's."""
    goal = protocol.PROTOCOL_V2_GOAL
    cfg = recipe_inputs.recipe_config(replace(goal, recipe="goal_window"), recipe_inputs.Unbuilt(), "rl",
                                 ["seed=4", "imagination.max_steps=32", "bc_coef=300"])
    assert (cfg.seed, cfg.imagination.max_steps, cfg.bc_coef) == (4, 32, 300)
    assert cfg.imagination.goal_reader == "<the protocol's goal_reader>"
    with pytest.raises(ValueError, match=r"^--rl imagination.goal_reader=mine.pt: .*--bc"):
        recipe_inputs.recipe_config(replace(goal, recipe="goal_window"), recipe_inputs.Unbuilt(), "rl",
                               ["seed=4", "imagination.goal_reader=mine.pt"])
    with pytest.raises(ValueError, match=r"^--rl proprio=p.pt: "):
        recipe_inputs.recipe_config(protocol.PROTOCOL_V2, recipe_inputs.Unbuilt(), "rl", ["proprio=p.pt"])
