"""Loop rounds (imagination/loop/rounds.py): what a round's RL starts from, what its judge and arm b read."""
from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from imagination.eval.jobs import EvalConfig
from imagination.loop.arms import consumed
from imagination.loop.rounds import (
    check_round_recipe,
    consumed_config,
    recording_episodes,
    round_config,
    round_jobs,
    run_rounds,
)
from imagination.rl.training import ImagineRLConfig
from infra.cli import load_config
from robot_data.dataset import DatasetConfig, EpisodeWriter


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


def _recording(folder: Path, successes: list[bool]) -> None:
    """A finished recording as record_round leaves it: its dataset (no episode: nothing to label), result.json and
    the evaluation's job records, each job drawn with its own env seed."""
    EpisodeWriter(str(folder / "data"), DatasetConfig()).close()
    (folder / "result.json").write_text(json.dumps({"recorded": len(successes), "policy": "p"}))
    (folder / "eval").mkdir()
    episodes = [{"task_id": 1, "init_state_id": j, "seed": 1000 * len(folder.parts) + j, "success": s}
                for j, s in enumerate(successes)]
    (folder / "eval" / "results.json").write_text(json.dumps({"episodes": episodes}))


def _rl(out: Path, name: str) -> dict:
    return {"policy_path": str(out / name / "policy.pt")}


@pytest.mark.parametrize("margin", [0.1, 1.0])
def test_a_round_not_shown_as_good_as_the_kept_policy_is_not_adopted(tmp_path, margin):
    """Seed 0's first RL policy does better than the start on the recorded jobs and is adopted; seed 1's does much
    worse, so its next round starts again from the start, on the start's own recording, and the judge never reads
    the recordings made only to decide. With margin 1 every round is adopted and nothing more is recorded."""
    start, good, bad = [True] * 24 + [False] * 6, [True] * 30, [True] * 6 + [False] * 24
    _recording(tmp_path / "loop0" / "rollouts", start)
    _recording(tmp_path / "loop1" / "rollouts", good)
    _recording(tmp_path / "loop1" / "rollouts1", bad)
    _recording(tmp_path / "loop2" / "rollouts", good)
    _recording(tmp_path / "loop2" / "rollouts1", good)
    cfg = _grasp_recipe()
    runs: list[list[ImagineRLConfig]] = []

    def run(cfgs: list[ImagineRLConfig]) -> tuple[list[dict], int]:
        runs.append(cfgs)
        return [{"policy_path": str(Path(c.out_dir) / "policy.pt")} for c in cfgs], 0

    seed_dir = lambda name, k: name if k == 0 else f"{name}{k}"  # noqa: E731 (bench/rl_gain.py's naming)
    first = [_rl(tmp_path, "rl"), _rl(tmp_path, "rl1")]
    jobs = EvalConfig(env="libero_goal", tasks=[1], episodes_per_task=30)
    done = run_rounds([cfg, cfg], first, 1, tmp_path, "data", jobs, 5, "control/policy.pt", margin, run, seed_dir)
    (seed0, seed1), = runs
    own = [str(tmp_path / "loop1" / name / "data") for name in ("rollouts", "rollouts1")]
    assert (seed0.policy, seed0.start_data) == (first[0]["policy_path"], own[0])
    assert seed0.imagination.grasp_train_data == [*cfg.imagination.grasp_train_data, *own]
    assert seed1.imagination.grasp_train_data == seed0.imagination.grasp_train_data
    last = [str(tmp_path / "loop1" / name / "policy.pt") for name in ("rl", "rl1")]
    assert done.kept == ["loop1", "loop1"] and done.scored == last
    if margin == 1:
        assert (seed1.policy, seed1.start_data) == (first[1]["policy_path"], own[1])
        assert done.decisions == [[], []] and done.recorded == own
        return
    assert (seed1.policy, seed1.start_data) == ("control/policy.pt", str(tmp_path / "loop0" / "rollouts" / "data"))
    (rl0, loop0), (rl1, loop1) = done.decisions
    assert (rl0["candidate"], rl0["kept_before"], rl0["adopted"]) == ("rl", "start", True)
    assert (rl1["candidate"], rl1["kept_before"], rl1["adopted"]) == ("rl", "start", False) and rl1["jobs"] == 30
    assert (loop0["kept_before"], loop0["adopted"], loop1["kept_before"], loop1["adopted"]) == ("rl", True, "start",
                                                                                              True)
    # what the recipe consumed: every recording, the two made only to decide included
    decided = [str(tmp_path / f) for f in ("loop0/rollouts/data", "loop2/rollouts/data", "loop2/rollouts1/data")]
    assert sorted(done.recorded) == sorted([*own, *decided])
    assert set(decided) <= set(consumed_config(cfg, done.recorded).imagination.grasp_train_data)


def test_a_worse_last_round_leaves_the_seed_scored_with_the_policy_it_kept(tmp_path):
    _recording(tmp_path / "loop0" / "rollouts", [True] * 15 + [False] * 15)
    _recording(tmp_path / "loop1" / "rollouts", [True] * 30)
    _recording(tmp_path / "loop2" / "rollouts", [False] * 30)
    done = run_rounds([_grasp_recipe()], [_rl(tmp_path, "rl")], 1, tmp_path, "data",
                      EvalConfig(env="libero_goal", tasks=[1], episodes_per_task=30), 5, "control/policy.pt", 0.1,
                      lambda cfgs: ([{"policy_path": str(Path(c.out_dir) / "policy.pt")} for c in cfgs], 0),
                      lambda name, k: name)
    assert done.kept == ["rl"] and done.scored == [str(tmp_path / "rl" / "policy.pt")]
    assert [d["adopted"] for d in done.decisions[0]] == [True, False]
    assert "so the loop keeps rl" in done.decisions[0][1]["reason"]


def test_a_recording_without_its_evaluation_is_named():
    with pytest.raises(FileNotFoundError, match="has no evaluation results"):
        recording_episodes("nowhere/loop1/rollouts/data")
