"""The recipe's per-task gate on protocol v2 (`bench/rl_gain.py --gate task`): each RL seed's policy acts only on
the tasks where its real evaluation on the choose jobs (init states 0-19, which the benchmark does not score)
shows it no worse than the start; the start acts on the others.

Why: one RL run fine-tunes every task with one judge, and that judge separates some tasks and not others
(imagination/loop/adopt.py `task_adoption`). The gate is part of the recipe, so the real episodes it runs are
counted in the recipe's budget, and the ledger counts a gated recipe apart from the ungated one.

A routed policy (policies/task_switch.py) is its start on every task it does not route: the same weights on the
same jobs. Its benchmark evaluation therefore runs only the routed tasks and takes the start arm's own episodes for
the others (`merge_tasks`), which the report says.

    kept = gate_start(bc, gate_cfg, out)
    gated = gate_seed(bc, kept, rl_policy, "rl_gpu_s0", gate_cfg, out, margin=0.10)
    gated["routed_tasks"], gated["decisions"]
"""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from imagination.eval.evaluate import evaluate_or_reuse, summarize
from imagination.eval.jobs import EvalConfig
from imagination.loop.adopt import task_adoption
from policies.base import Policy
from policies.task_switch import TaskSwitchPolicy


def gate_config(evalcfg: EvalConfig, choose_episodes: int) -> EvalConfig:
    """The benchmark's evaluation moved to the choose jobs: init states 0..choose_episodes-1 of the same tasks."""
    return replace(evalcfg, init_state_offset=0, episodes_per_task=choose_episodes, videos=0)


def gate_start(start: str, gate_cfg: EvalConfig, out: Path) -> dict:
    """The start's evaluation on the choose jobs, which every gate compares with (made once, reused after)."""
    return evaluate_or_reuse(replace(gate_cfg, checkpoint=start, out_dir=str(out / "gate_bc")), "gate: start")


def gate_seed(start: str, kept: dict, candidate: str, name: str, gate_cfg: EvalConfig, out: Path,
              margin: float) -> dict:
    """Decide one policy's tasks on the choose jobs against the start's evaluation there (`kept`, `gate_start`) and
    write its routed policy.

    Returns {"decisions": {task: adoption record}, "routed_tasks": [...], "policy_path": the routed checkpoint,
    "candidate_episodes": the candidate's choose-job records}."""
    cand = evaluate_or_reuse(replace(gate_cfg, checkpoint=candidate, out_dir=str(out / f"gate_{name}")),
                             f"gate: {name}")
    decisions = task_adoption("start", name, kept["episodes"], cand["episodes"], margin)
    routed = [t for t, d in decisions.items() if d["adopted"]]
    instructions = {int(t): r["instruction"] for t, r in cand["per_task"].items()}
    path = out / f"routed_{name}" / "policy.pt"
    routes = {instructions[t]: 1 for t in routed}
    # an unchanged switch is not rewritten: its evaluation would look stale to evaluate_or_reuse
    if not _up_to_date(path, routes, (start, candidate)):
        TaskSwitchPolicy.from_policies([Policy.load(start), Policy.load(candidate)], routes).save(path)
    return {"decisions": decisions, "routed_tasks": routed, "policy_path": str(path),
            "candidate_episodes": cand["episodes"]}


def _up_to_date(path: Path, routes: dict[str, int], sources: tuple[str, ...]) -> bool:
    """The switch at `path` exists, is newer than the checkpoints it copies, and routes as `routes` does."""
    if not path.is_file() or any(Path(s).stat().st_mtime > path.stat().st_mtime for s in sources):
        return False
    old = Policy.load(path)
    return isinstance(old, TaskSwitchPolicy) and dict(old.config.routes) == routes


def merge_tasks(start: dict, routed: dict | None, routed_tasks: list[int]) -> dict:
    """An evaluate() result over the start's tasks: `routed`'s records on `routed_tasks`, the start's on the rest
    (the routed policy is the start there). `routed` is None when no task was routed."""
    keep = set(routed_tasks)
    episodes = [r for r in start["episodes"] if int(r["task_id"]) not in keep]
    if routed is not None:
        episodes += [r for r in routed["episodes"] if int(r["task_id"]) in keep]
    episodes.sort(key=lambda r: (int(r["task_id"]), int(r["init_state_id"])))
    instructions = {int(t): r["instruction"] for t, r in start["per_task"].items()}
    seconds = routed["timing"]["seconds"] if routed is not None else 0.0
    return summarize(episodes, instructions) | {"episodes": episodes, "timing": {"seconds": seconds},
                                                "routed_tasks": sorted(keep)}


def decision_lines(name: str, decisions: dict[int, dict]) -> list[str]:
    """One line per task: the gate's decision for one seed, with its figure on the choose jobs."""
    return [f"gate {name} task {t}: {'acts' if d['adopted'] else 'the start acts'} ({d['reason']})"
            for t, d in sorted(decisions.items())]


__all__ = ["decision_lines", "gate_config", "gate_seed", "gate_start", "merge_tasks"]
