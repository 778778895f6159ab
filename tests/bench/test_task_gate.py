"""The rl_gain benchmark's per-task gate (bench/task_gate.py): decisions on the choose jobs, a routed checkpoint
that is the start on every task it does not route, and the start's own episodes merged in for those tasks."""
from __future__ import annotations

import json
import os
from dataclasses import asdict, replace
from pathlib import Path

import torch

from bench.task_gate import decision_lines, gate_config, gate_seed, gate_start, merge_tasks
from imagination.eval.evaluate import summarize
from imagination.eval.jobs import EvalConfig
from policies.base import Policy
from policies.task_switch import TaskSwitchPolicy
from policies.vla import VLAPolicy
from tests.policies.conftest import INSTRUCTIONS, make_obs, tiny_config

INSTR = {5: INSTRUCTIONS[0], 7: INSTRUCTIONS[1]}


def _result(per_task: dict[int, int], n: int, offset: int = 0) -> dict:
    """An evaluate() result: per task, the first `per_task[t]` of n jobs succeed."""
    eps = [{"task_id": t, "episode": j, "init_state_id": offset + j, "seed": 100 * t + j, "success": j < k,
            "steps": 50 + j} for t, k in per_task.items() for j in range(n)]
    return summarize(eps, INSTR) | {"episodes": eps, "timing": {"seconds": 10.0}}


def _write(cfg: EvalConfig, res: dict) -> None:
    Path(cfg.out_dir).mkdir(parents=True, exist_ok=True)
    (Path(cfg.out_dir) / "results.json").write_text(json.dumps(res | {"config": asdict(cfg)}))


def test_the_gate_routes_the_tasks_the_candidate_holds_and_keeps_the_start_elsewhere(tmp_path):
    torch.manual_seed(0)
    start, tuned = VLAPolicy(tiny_config()).eval(), VLAPolicy(tiny_config()).eval()
    start.save(tmp_path / "bc.pt")
    tuned.save(tmp_path / "rl.pt")
    bench = EvalConfig(env="libero_spatial", tasks=[5, 7], episodes_per_task=30, init_state_offset=20)
    choose = gate_config(bench, 20)
    assert (choose.init_state_offset, choose.episodes_per_task, choose.tasks) == (0, 20, [5, 7])
    # the choose jobs' evaluations already on disk: gate_seed reuses them (evaluate_or_reuse)
    _write(replace(choose, checkpoint=str(tmp_path / "bc.pt"), out_dir=str(tmp_path / "out" / "gate_bc")),
           _result({5: 12, 7: 10}, 20))
    _write(replace(choose, checkpoint=str(tmp_path / "rl.pt"), out_dir=str(tmp_path / "out" / "gate_s0")),
           _result({5: 3, 7: 18}, 20))
    kept = gate_start(str(tmp_path / "bc.pt"), choose, tmp_path / "out")
    g = gate_seed(str(tmp_path / "bc.pt"), kept, str(tmp_path / "rl.pt"), "s0", choose, tmp_path / "out", 0.10)
    assert g["routed_tasks"] == [7] and not g["decisions"][5]["adopted"]
    assert len(kept["episodes"]) == len(g["candidate_episodes"]) == 40
    switch = Policy.load(g["policy_path"])
    assert isinstance(switch, TaskSwitchPolicy) and switch.config.routes == {INSTR[7]: 1}
    obs = make_obs(batch=2)  # env 0 has task 5's instruction, env 1 task 7's
    out = switch.predict_action_chunk(obs)
    torch.testing.assert_close(out[0], start.predict_action_chunk(obs)[0])
    torch.testing.assert_close(out[1], tuned.predict_action_chunk(obs)[1])
    lines = decision_lines("s0", g["decisions"])
    assert lines[0].startswith("gate s0 task 5: the start acts") and lines[1].startswith("gate s0 task 7: acts")
    # a second gate with the same decisions leaves the checkpoint as it was (its evaluation stays reusable)
    routed = tmp_path / "out" / "routed_s0" / "policy.pt"
    mtime = routed.stat().st_mtime_ns
    gate_seed(str(tmp_path / "bc.pt"), kept, str(tmp_path / "rl.pt"), "s0", choose, tmp_path / "out", 0.10)
    assert routed.stat().st_mtime_ns == mtime
    # a switch older than a checkpoint it copies (RL run again after it was made) is made again
    past = (tmp_path / "rl.pt").stat().st_mtime_ns - 10**10
    os.utime(routed, ns=(past, past))
    gate_seed(str(tmp_path / "bc.pt"), kept, str(tmp_path / "rl.pt"), "s0", choose, tmp_path / "out", 0.10)
    assert routed.stat().st_mtime_ns > past


def test_merge_takes_the_routed_tasks_from_the_routed_run_and_the_rest_from_the_start():
    start = _result({5: 20, 7: 12}, 30, offset=20)
    routed = _result({7: 21}, 30, offset=20)
    merged = merge_tasks(start, routed, [7])
    assert merged["per_task"]["5"]["successes"] == 20 and merged["per_task"]["7"]["successes"] == 21
    assert merged["overall"]["successes"] == 41 and len(merged["episodes"]) == 60
    assert merged["routed_tasks"] == [7] and merged["timing"]["seconds"] == 10.0
    none = merge_tasks(start, None, [])
    assert none["overall"]["successes"] == 32 and none["timing"]["seconds"] == 0.0
