"""Loop rounds (imagination/loop/rounds.py): what a round's RL starts from, what its judge and arm b read."""
from __future__ import annotations

from dataclasses import replace

import pytest

from imagination.eval.jobs import EvalConfig
from imagination.loop.arms import consumed
from imagination.loop.rounds import check_round_recipe, round_config, round_jobs
from imagination.rl.training import ImagineRLConfig
from infra.cli import load_config


def _grasp_recipe() -> ImagineRLConfig:
    cfg = load_config(ImagineRLConfig, "goal_grasp", group="rl")
    return replace(cfg, adapt=replace(cfg.adapt, steps=50))


def test_a_round_starts_on_its_own_rollouts_and_its_judge_and_arm_b_read_every_recorded_one():
    cfg = _grasp_recipe()
    recorded = ["loop1/rollouts/data", "loop1/rollouts1/data"]
    nxt = round_config(cfg, "rl1/policy.pt", recorded[1], recorded, "loop1/rl1")
    assert (nxt.policy, nxt.start_data, nxt.out_dir, nxt.sources) == ("rl1/policy.pt", recorded[1], "loop1/rl1",
                                                                      ["policy"])
    # the recipe's own judge data first, then every seed's recording, each once
    assert nxt.imagination.grasp_train_data == [*cfg.imagination.grasp_train_data, *recorded]
    assert nxt.imagination.grasp_label_dirs == cfg.imagination.grasp_label_dirs
    assert (nxt.seed, nxt.iterations, nxt.rl, nxt.bc_coef) == (cfg.seed, cfg.iterations, cfg.rl, cfg.bc_coef)
    assert nxt.adapt.steps == 0 and cfg.adapt.steps == 50  # the policy was adapted before its first round
    assert nxt.bc_data == cfg.bc_data  # the anchor's episodes stay the recipe's
    # a recipe that anchored on its start data keeps anchoring there, not on the recording
    assert round_config(replace(cfg, bc_data=""), "p.pt", recorded[0], recorded, "o").bc_data == cfg.start_data
    # a second round adds its recordings without repeating the first's
    again = round_config(nxt, "loop1/rl1/policy.pt", "loop2/rollouts1/data", [*recorded, "loop2/rollouts1/data"],
                         "loop2/rl1")
    assert again.imagination.grasp_train_data == [*cfg.imagination.grasp_train_data, *recorded,
                                                  "loop2/rollouts1/data"]
    # what the recipe consumed, which arm b imitates, holds every recorded dataset
    image, labels = consumed(again)
    assert set(recorded) | {"loop2/rollouts1/data"} <= set(image) and labels == cfg.imagination.grasp_label_dirs


def test_a_round_records_the_training_init_states_of_the_imagined_tasks():
    jobs = round_jobs(EvalConfig(env="libero_goal", tasks=[0, 1, 2, 3, 4], episodes_per_task=20, init_state_offset=20,
                                 videos=2), [1, 2, 4], 10)
    assert (jobs.tasks, jobs.episodes_per_task, jobs.init_state_offset, jobs.videos) == ([1, 2, 4], 10, 0, 0)


def test_a_recipe_without_the_grasp_judge_has_no_round():
    with pytest.raises(ValueError, match="--loop-rounds: .* reward 'goal'"):
        check_round_recipe(load_config(ImagineRLConfig, "goal", group="rl"))
    check_round_recipe(_grasp_recipe())
