"""The loop with the grasp recipe (configs/loop/grasp.yaml): the preset, which jobs the reward's inputs are
made on (imagination/loop/grasp_inputs.py, replaced here by a recorder: its stages are tested in
tests/bench/test_protocol.py and their own packages), that the stage is made once, and what each round's RL
config reads."""
from dataclasses import replace
from pathlib import Path

import pytest

import imagination.loop.run as loop_run
from imagination.loop.config import LoopConfig, LoopState
from infra.cli import load_config


def test_the_demo_is_the_quick_loop_with_the_grasp_floor_recipe():
    quick = load_config(LoopConfig, "quick", group="loop")
    cfg = load_config(LoopConfig, "grasp", group="loop")
    cfg.validate()
    assert cfg.rl.imagination.reward == "grasp" and cfg.rl.rl.group_std_floor == 0.1
    assert cfg.rl.imagination.keyframes.mode == "start" and cfg.rl.imagination.keyframes.balance_tasks
    assert cfg.rl.num_groups % len(cfg.collect.tasks) == 0  # every task drawn equally often
    # everything but RL (and where it writes) is the demo's
    same = ("collect", "world_model", "bc", "eval", "finetune_steps", "policy_weight", "guard_margin")
    assert all(getattr(cfg, k) == getattr(quick, k) for k in same)
    assert quick.rl.imagination.reward == "head"
    # make demo runs this preset (tests/bench/test_bench_inputs.py reads the Makefile)
    assert cfg.out_dir == "outputs/demo" != quick.out_dir  # the two presets never share a folder


def test_grasp_inputs_are_made_once_on_the_collected_jobs(tmp_path, monkeypatch):
    calls = []

    def record(paths, data, policy, world_model, jobs, cfg):
        calls.append((paths, data, policy, world_model, jobs, cfg))
        return {"own_rollouts": paths.own_rollouts + "/data", "near_miss_labels": paths.near_miss_labels,
                "proprio": paths.proprio}

    monkeypatch.setattr(loop_run, "build_grasp_inputs", record)
    cfg = load_config(LoopConfig, "grasp", [f"out_dir={tmp_path}", "collect.init_state_offset=3"], group="loop")
    state = LoopState(cfg)
    got = loop_run._grasp_inputs(cfg, state, "bc/policy.pt", "wm.pt")
    ((paths, data, policy, wm, jobs, inputs_cfg),) = calls
    assert (data, policy, wm) == (str(tmp_path / "data"), "bc/policy.pt", "wm.pt")
    # the BC policy's own rollouts and the near misses: on the collected tasks and init states, not the eval's
    assert (jobs.env, jobs.tasks, jobs.init_state_offset, jobs.episodes_per_task) == ("libero_spatial", [0, 1, 2], 3, 6)
    assert inputs_cfg == cfg.grasp_inputs and Path(paths.proprio).parent == tmp_path / "grasp_inputs"
    # a re-run (a resumed loop) reuses the stage
    assert loop_run._grasp_inputs(cfg, LoopState(cfg), "bc/policy.pt", "wm.pt") == got and len(calls) == 1

    rl = replace(cfg.rl, start_data=str(tmp_path / "data"), proprio="")
    wired = loop_run._with_grasp_inputs(rl, got)
    assert wired.imagination.grasp_train_data == [str(tmp_path / "data"), got["own_rollouts"]]
    assert wired.imagination.grasp_label_dirs == [got["near_miss_labels"]] and wired.proprio == got["proprio"]
    assert wired.imagination.reward == "grasp" and wired.rl == cfg.rl.rl


@pytest.mark.parametrize("preset", ["quick", "grasp"])
def test_loop_presets_load(preset):
    load_config(LoopConfig, preset, group="loop").validate()


def test_each_round_judges_with_offsets_fit_on_its_start_policys_real_episodes(tmp_path, monkeypatch):
    calls = []

    def record(rollouts, policy, gate):
        calls.append((rollouts, policy, gate))
        return {"bias": [0.5, -1.0, 2.0] + [0.0] * 7, "jobs": 18,
                "tasks": {k: {"jobs": 6, "real_successes": 3, "imagined_before": 0.9, "imagined_after": 0.5}
                          for k in range(3)}}

    monkeypatch.setattr(loop_run, "task_bias_from_rollouts", record)
    cfg = load_config(LoopConfig, "grasp", [f"out_dir={tmp_path}"], group="loop")
    assert cfg.grasp_task_bias  # the demo fits them
    inputs = {"own_rollouts": "own/data", "near_miss_labels": "near", "proprio": "proprio.pt"}
    rl = loop_run._with_grasp_inputs(replace(cfg.rl, policy="bc.pt", world_model="wm.pt", start_data="data"), inputs)
    judged = loop_run._with_task_bias(LoopState(cfg), "round1", rl, "own/data")
    ((rollouts, policy, gate),) = calls
    # the round's own judge, world model and proprio model re-run the start policy's episodes
    assert (rollouts, policy, gate.world_model, gate.proprio) == ("own/data", "bc.pt", "wm.pt", "proprio.pt")
    assert gate.train_data == rl.imagination.grasp_train_data and gate.label_dirs == ["near"]
    assert gate.max_steps == rl.imagination.max_steps and gate.until == rl.imagination.grasp_until
    assert judged.imagination.grasp_point.task_bias == [0.5, -1.0, 2.0] + [0.0] * 7
    assert replace(judged.imagination, grasp_point=rl.imagination.grasp_point) == rl.imagination  # nothing else
    # a resumed loop reuses the stage's offsets
    again = loop_run._with_task_bias(LoopState(cfg), "round1", rl, "own/data")
    assert again.imagination.grasp_point.task_bias == judged.imagination.grasp_point.task_bias and len(calls) == 1


def test_offsets_are_fit_where_the_kept_policys_real_episodes_are():
    """BC's real episodes are its own rollouts; an adopted round's are its evaluation in the data. A round that was
    not adopted leaves BC kept, and the next round's offsets come from BC's own rollouts again."""
    assert loop_run._bias_rollouts("bc", "own/data", "data") == "own/data"
    assert loop_run._bias_rollouts("round1", "own/data", "data") == "data"


def test_offsets_need_the_grasp_reward():
    cfg = load_config(LoopConfig, "quick", ["grasp_task_bias=true"], group="loop")
    with pytest.raises(ValueError, match="grasp_task_bias: offsets are for the grasp judge"):
        cfg.validate()
