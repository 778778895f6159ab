"""Protocol v2 end to end on every LIBERO suite, shrunk to a smoke run (`bench/rl_gain.py --suite S --smoke`): real
LIBERO collection and evaluation, a tiny world model, BC, the recipe's real inputs, one RL iteration, every control
arm and the report, a few minutes a suite on the CPU. Its figures measure nothing; it checks that every stage runs on
every suite and that the arms are wired as the protocol says."""
from __future__ import annotations

import importlib
import json
import re

import pytest
import torch

from bench.protocol import PROTOCOL_V2, RECORDED_SETTINGS
from robot_data.dataset import EpisodeDataset

SUITES = ("libero_spatial", "libero_object", "libero_goal", "libero_10")


@pytest.mark.slow
@pytest.mark.libero
@pytest.mark.parametrize("suite", SUITES)
def test_every_suite_runs_the_protocol_end_to_end(suite, tmp_path, capsys):
    rl_gain = importlib.import_module("bench.rl_gain")
    torch.set_num_threads(1)
    root = tmp_path / suite
    # on Goal the recipe imagines in the protocol's world model refined on the own rollouts (--refine-world-model)
    refine = ["--refine-world-model", "2"] if suite == "libero_goal" else []
    assert rl_gain.main(["--suite", suite, "--smoke", "--root", str(root), "--num-envs", "1", *refine]) in (0, 1)
    out = capsys.readouterr().out
    bench = out.strip().splitlines()[-1]
    assert bench.startswith("BENCH rl_gain episodes=1 ") and " seeds=1 " in bench
    assert "real_env_steps_during_rl=0" in bench and "recipes_scored=1" in bench
    assert f" refine_world_model={2 if refine else 0} " in bench
    # the suite's own first task (LIBERO-Object has no setting chosen yet: its task 0)
    task = RECORDED_SETTINGS[suite].tasks[0] if suite in RECORDED_SETTINGS else 0
    assert f" task{task}=" in bench
    protocol = json.loads((root / "protocol.json").read_text())
    assert protocol["provenance"]["jobs"]["bench_init_states"] == [2, 2]
    assert protocol["bc"] == str(root / "bc" / "policy.pt")
    # every arm was evaluated on the same one job
    # (an anchor control that left the start's weights as they were plays the start's episodes: the bench reuses them)
    unmoved = json.loads((root / "run" / "anchor" / "control.json").read_text())["max_param_change"] == 0.0
    for arm in ("eval_bc", "eval_rl", "eval_control", *(() if unmoved else ("eval_anchor",))):
        result = json.loads((root / "run" / arm / "results.json").read_text())
        assert result["overall"]["episodes"] == 1 and list(result["per_task"]) == [str(task)]
    own = root / "own_rollouts" / "data"
    if suite == PROTOCOL_V2.suite:  # the grasp recipe; its judge reads the object's start from simulator labels
        assert "judge_reads_simulator=yes" in bench and (root / "own_rollouts" / "proprio.pt").is_file()
        consumed = [str(root / "data"), str(own)]
    else:  # the goal recipe: a reader trained on the data and the start's own rollouts, reading imagined frames only
        assert "judge_reads_simulator=no" in bench
        reader = json.loads((root / "goal_reader" / "result.json").read_text())
        assert reader["data_dirs"] == [str(root / "data"), str(own)] and reader["suite"] == suite
        consumed = reader["data_dirs"]
        rl_cfg = (root / "run" / "rl" / "config.yaml").read_text()
        assert str(root / "goal_reader" / "reader.pt") in rl_cfg and "reward: goal" in rl_cfg
        world_model = root / ("world_model_refined2" if refine else "world_model") / "world_model.pt"
        assert f"world_model: {world_model}" in rl_cfg
        if refine:  # the refined model trained on the data and the own rollouts, from the protocol's
            split = json.loads((world_model.parent / "split.json").read_text())
            assert list(split["extra_train"]) == [str(own)]
    # the real-data control imitated exactly the successes among the real episodes the recipe consumed
    control = json.loads((root / "run" / "control" / "control.json").read_text())
    successes = [m for d in consumed for m in EpisodeDataset(d, verify=False).meta if m.success]
    assert control["episodes"] == len(successes) and control["env_steps"] == sum(m.length for m in successes)
    budget = re.search(r"real data of recipe: (\d+) episodes", out)
    assert budget and int(budget.group(1)) >= sum(len(EpisodeDataset(d, verify=False)) for d in consumed)
    # the anchor control is the recipe without RL: the same world model, adaptation and anchor data, the same budget
    anchor_budget = re.search(r"real data of anchor: (\d+) episodes, (\d+) env steps", out)
    recipe_budget = re.search(r"real data of recipe: (\d+) episodes, (\d+) env steps", out)
    assert anchor_budget and recipe_budget and anchor_budget.groups() == recipe_budget.groups()
    # the anchor control applied the recipe's updates, and a second run reuses every stage
    rl = json.loads((root / "run" / "rl" / "result.json").read_text())
    anchor = json.loads((root / "run" / "anchor" / "control.json").read_text())
    assert anchor["updates"] == sum(row["updates"] for row in rl["history"]) > 0
    assert rl_gain.main(["--suite", suite, "--smoke", "--root", str(root), "--num-envs", "1", *refine]) in (0, 1)
    again = capsys.readouterr().out
    assert "start (BC): reusing" in again and "real-data control: reusing" in again
    assert "recipes_scored=1" in again.strip().splitlines()[-1]  # the same recipe is not counted twice
    if suite == PROTOCOL_V2.suite:  # one loop round of the grasp recipe, in a folder of its own
        loop = ["--suite", suite, "--smoke", "--root", str(root), "--num-envs", "1", "--loop-rounds", "1",
                "--arms", "start", "control", "recipe", "--out-dir", str(tmp_path / "loop")]
        assert rl_gain.main(loop) in (0, 1)
        lines = capsys.readouterr().out.strip().splitlines()
        bench = lines[-1]
        assert " loop_rounds=1 " in bench and " control_loop1=" in bench and "real_env_steps_during_rl=0" in bench
        assert "recipes_scored=2" in bench  # a recipe of its own on the ledger
        loop_dir = tmp_path / "loop"
        recorded = loop_dir / "loop1" / "rollouts" / "data"
        assert len(EpisodeDataset(recorded, verify=False)) == 1 and (recorded / "sim_labels").is_dir()
        # each round decided against the policy the seed kept: the start recorded first, the last round after it
        first, last = [line for line in lines if line.startswith("[loop] seed 0, ")]
        assert first.startswith("[loop] seed 0, rl against start: ") and ", loop1 against " in last
        kept_first = "rl" if ": adopted:" in first else "start"
        kept = "loop1" if ": adopted:" in last else kept_first
        assert f" loop_adopt_margin=0.1 loop_kept={kept} " in bench
        own = {"start": loop_dir / "loop0" / "rollouts" / "data", "rl": recorded}[kept_first]
        rl_cfg = (loop_dir / "loop1" / "rl" / "config.yaml").read_text()
        assert f"start_data: {own}" in rl_cfg and f"- {recorded}" in rl_cfg  # its start, and the judge's data
        start = {"start": json.loads((loop_dir / "control" / "control.json").read_text())["policy_path"],
                 "rl": str(loop_dir / "rl" / "policy.pt")}
        assert f"policy: {start[kept_first]}" in rl_cfg  # from the policy the first decision kept
        scored = {**start, "loop1": str(loop_dir / "loop1" / "rl" / "policy.pt")}[kept]
        assert json.loads((loop_dir / "eval_rl" / "results.json").read_text())["checkpoint"] == scored
        # b after the round imitated every recorded success on top of what b imitated before, the start's and the
        # last round's recordings (made to decide) included
        before = json.loads((loop_dir / "control" / "control.json").read_text())
        after = json.loads((loop_dir / "control_loop1" / "control.json").read_text())
        every = [loop_dir / "loop0" / "rollouts" / "data", recorded, loop_dir / "loop2" / "rollouts" / "data"]
        added = [m for d in every for m in EpisodeDataset(d, verify=False).meta if m.success]
        assert after["episodes"] - before["episodes"] == len(added)
    if suite == "libero_goal":  # a look at the choose jobs says so, and leaves the ledger as it was
        ledger = (root / "scored.json").read_text()
        choose = ["--suite", suite, "--smoke", "--root", str(root), "--num-envs", "1", *refine, "--arms", "start",
                  "--init-state-offset", "0", "--out-dir", str(tmp_path / "choose")]
        assert rl_gain.main(choose) in (0, 1)
        assert f"evaluating on init states 0-0 of tasks [{task}], not the benchmark's jobs" in capsys.readouterr().out
        assert (root / "scored.json").read_text() == ledger
