"""Every imagined-RL preset in configs/rl/ loads into ImagineRLConfig and passes its checks."""
import pytest

from imagination.rl.training import ImagineRLConfig
from infra.cli import CONFIGS, load_config

PRESETS = sorted(p.stem for p in (CONFIGS / "rl").glob("*.yaml"))


@pytest.mark.parametrize("name", PRESETS)
def test_preset_loads(name):
    cfg = load_config(ImagineRLConfig, name, group="rl")
    cfg.rl.validate()
    assert cfg.iterations >= 1


def test_grasp_floor_is_the_grasp_recipe_plus_what_docs_loop_says():
    base = load_config(ImagineRLConfig, "grasp", group="rl")
    floor = load_config(ImagineRLConfig, "grasp_floor", group="rl")
    assert (floor.rl.group_std_floor, base.rl.group_std_floor) == (0.1, 0.0)
    assert floor.imagination.keyframes.balance_tasks and not base.imagination.keyframes.balance_tasks
    assert floor.proprio.endswith("proprio_own.pt")
    assert floor.num_groups == 5 * base.num_groups and floor.rl.minibatch_size == 5 * base.rl.minibatch_size
    assert (floor.policy, floor.world_model, floor.bc_coef) == (base.policy, base.world_model, base.bc_coef)


def test_grasp_floor_gpu_is_the_benchmark_recipe_on_the_gpu_world_model():
    """configs/rl/grasp_floor_gpu.yaml = what bench/rl_gain.py runs (grasp_floor pointed at the protocol's
    inputs by bench.recipe_inputs.recipe_config), except the world model, the device and the out_dir."""
    from dataclasses import asdict

    from bench.protocol import RLGainProtocol
    from bench.recipe_inputs import recipe_config

    proto = RLGainProtocol()
    paths = {"data": proto.path("data"), "bc": proto.path("bc_file"), "world_model": proto.path("world_model_file"),
             "own_rollouts": proto.path("own_rollouts") + "/data",
             "near_miss_labels": proto.path("near_miss_labels_s16"), "proprio": proto.path("own_proprio_file")}
    cpu = asdict(recipe_config(proto, paths, "x"))
    gpu = asdict(load_config(ImagineRLConfig, "grasp_floor_gpu", group="rl"))
    assert gpu["world_model"] == proto.path("gpu/world_model/world_model.pt")
    assert (gpu["device"], gpu["imagination"]["device"]) == ("cuda", "cuda")
    for d in (cpu, gpu):
        d.pop("world_model"), d.pop("device"), d["imagination"].pop("device"), d.pop("out_dir")
    assert gpu == cpu


def test_the_code_defaults_are_the_shipped_recipe():
    """ImagineRLConfig() is configs/rl/grasp_floor.yaml but for its paths and what follows from its five tasks (4
    groups of each per iteration, 16 episodes per minibatch per group) and its thread count."""
    from dataclasses import asdict

    recipe, default = asdict(load_config(ImagineRLConfig, "grasp_floor", group="rl")), asdict(ImagineRLConfig())
    paths = {"policy", "world_model", "start_data", "out_dir", "proprio"}
    assert recipe["num_groups"] == 5 * default["num_groups"]
    assert recipe["rl"].pop("minibatch_size") == 5 * default["rl"].pop("minibatch_size")
    for name in ("grasp_train_data", "grasp_label_dirs"):
        assert recipe["imagination"].pop(name) and not default["imagination"].pop(name)
    differ = {k for k in recipe if recipe[k] != default[k]}
    assert differ == paths | {"num_groups", "num_threads"}, differ
    # and the quick preset, the success head, says so rather than inheriting it
    quick = load_config(ImagineRLConfig, "quick", group="rl")
    assert (quick.imagination.reward, quick.rl.kl_estimator, quick.bc_coef) == ("head", "k3", 0.0)


def test_place_is_what_the_placement_runs_ran():
    """configs/rl/place.yaml = the command the notebook's aligned placement runs used ($R/place/rl8b.sh): grasp_floor
    with those overrides, and nothing else changed."""
    from dataclasses import asdict

    R = "outputs/bench/rl_gain_v2"
    ran = load_config(ImagineRLConfig, "grasp_floor", [
        f"policy={R}/bc/policy.pt", f"world_model={R}/world_model/world_model.pt", f"start_data={R}/own_rollouts/data",
        "sources=[policy]", f"bc_data={R}/own_rollouts/data", "bc_target=start_policy", "bc_phase=before_grasp",
        f"proprio={R}/own_rollouts/proprio.pt", f"out_dir={R}/place/rl8b_s0", "imagination.grasp_until=release",
        f"imagination.grasp_train_data=[{R}/data,{R}/own_rollouts/data]",
        f"imagination.grasp_label_dirs=[{R}/near_miss_labels_s16]",
        f"imagination.object_reader={R}/object_reader/reader_200_8000_big+t79/reader.pt",
        "imagination.keyframes.mode=release", "imagination.keyframes.release_lead=8",
        "imagination.keyframes.hard_width=4", "imagination.keyframes.align=8", "imagination.imagined_steps=24",
        "num_threads=2"], group="rl")
    assert asdict(load_config(ImagineRLConfig, "place", group="rl")) == asdict(ran)


def test_carry_is_place_with_the_overrides_the_notebook_measured():
    """configs/rl/carry.yaml = `place` with the overrides of outputs/bench/rl_gain_v2/place/tuneJ.sh (notebook
    protocol_v2.md section 18), except the out_dir."""
    from dataclasses import asdict

    R = "outputs/bench/rl_gain_v2"
    measured = load_config(ImagineRLConfig, "place", [
        "heldout.every=2", "heldout.patience=6", f"heldout.start_data={R}/gate_rollouts/data", "heldout.starts=rl",
        "heldout.max_episodes=50", "heldout.max_move=0.015", "heldout.move_phase=before_release", "iterations=12",
        "rl.lr=0.001", "rl.kl_coef=0.0", "bc_coef=300", "bc_phase=before_release",
        "imagination.keyframes.release_lead=24", "imagination.keyframes.hard_width=8", "imagination.imagined_steps=40",
        "out_dir=x"], group="rl")
    carry = load_config(ImagineRLConfig, "carry", ["out_dir=x"], group="rl")
    assert asdict(carry) == asdict(measured)


def test_carry_goal_is_the_carry_judged_by_the_goal_reader():
    """configs/rl/carry_goal.yaml = `carry` with the goal judge (its read distance) in place of the grasp judge."""
    from dataclasses import asdict

    R = "outputs/bench/rl_gain_v2"
    expected = load_config(ImagineRLConfig, "carry", [
        "imagination.reward=goal", f"imagination.goal_reader={R}/goal_reader/reader.pt",
        "imagination.goal_score=distance", "imagination.grasp_until=close", "imagination.grasp_train_data=[]",
        "imagination.grasp_label_dirs=[]", "imagination.object_reader=''", "out_dir=x"], group="rl")
    got = load_config(ImagineRLConfig, "carry_goal", ["out_dir=x"], group="rl")
    assert asdict(got) == asdict(expected)


def test_crn_goal_is_carry_goal_from_the_adapted_start_with_noise_shared_in_each_group():
    """configs/rl/crn_goal.yaml = `carry_goal`, adapting its start first (400 steps at lr 1e-4) and sharing the world
    model's noise within each GRPO group of 8."""
    from dataclasses import asdict

    expected = load_config(ImagineRLConfig, "carry_goal", ["adapt.steps=400", "adapt.lr=1e-4",
                                                          "imagination.noise_group=8", "out_dir=x"], group="rl")
    got = load_config(ImagineRLConfig, "crn_goal", ["out_dir=x"], group="rl")
    assert asdict(got) == asdict(expected)


def test_spatial_grasp_is_goal_grasp_on_spatials_tasks():
    """configs/rl/spatial_grasp.yaml = `goal_grasp` on protocol v2's LIBERO-Spatial inputs, every task imagined and
    balanced, 64 imagined steps, the anchor on the tasks RL imagines; nothing else differs."""
    from dataclasses import asdict

    R = "outputs/bench/rl_gain_v2"
    expected = load_config(ImagineRLConfig, "goal_grasp", [
        f"policy={R}/bc/policy.pt", f"world_model={R}/world_model/world_model.pt", f"start_data={R}/own_rollouts/data",
        f"proprio={R}/own_rollouts/proprio.pt", f"bc_data={R}/own_rollouts/data", "tasks=[5,6,7,8,9]", "bc_tasks=[]",
        "num_groups=20", f"imagination.grasp_train_data=[{R}/data,{R}/own_rollouts/data]",
        f"imagination.grasp_label_dirs=[{R}/near_miss_labels_s16]", "imagination.imagined_steps=64",
        "imagination.keyframes.balance_tasks=true", "out_dir=x"], group="rl")
    got = load_config(ImagineRLConfig, "spatial_grasp", ["out_dir=x"], group="rl")
    assert asdict(got) == asdict(expected)


def test_spatial_reader_is_the_scored_reader_judge_recipe():
    """configs/rl/spatial_reader.yaml = `spatial_grasp` with the --rl overrides docs/results.md gives for "The 8-start
    setting judged by the object reader" and the near-miss labels `--near-miss-kinds near_miss` makes; nothing else
    differs, so the preset is the recipe that was measured."""
    from dataclasses import asdict

    R = "outputs/bench/rl_gain_v2"
    expected = load_config(ImagineRLConfig, "spatial_grasp", [
        "init_log_std=-3.0", "rl.lr=0.00025", "imagination.observe=recorded_image", "imagination.grasp_until=release",
        "imagination.grasp_held=fail", "imagination.imagined_steps=120", "num_groups=40", "group_size=4",
        "imagination.noise_group=4", f"imagination.object_reader={R}/object_reader/reader_200_8000_big+t79/reader.pt",
        f"imagination.grasp_label_dirs=[{R}/near_miss_labels_s16_near_miss]", "out_dir=x"], group="rl")
    got = load_config(ImagineRLConfig, "spatial_reader", ["out_dir=x"], group="rl")
    assert asdict(got) == asdict(expected)
