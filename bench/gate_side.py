"""The reward gate's real side and bookkeeping (bench/reward_signal.py): the gate's recorded real evaluations,
the proprio model it fits, the folders its runs write, reality's repeats of its jobs (bench/gate_ceiling.py) and
the judge's per-task offsets fit on an earlier run's records. Kept apart from reward_signal.py's main, which
imagines, scores and prints."""
from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from imagination.eval.jobs import EvalConfig


def gate_proprio(path: Path, train_data: str, chunk_len: int) -> str:
    """A proprio model fitted on the training data with the world model's chunk length, cached at `path`
    (refitted when the data or the chunk length differ from what path.json says it was fitted on)."""
    from robot_data.dataset import EpisodeDataset
    from world_models.proprio import ProprioConfig, fit_proprio

    ds = EpisodeDataset(train_data, verify=False)
    key = {"train_data": str(Path(train_data).resolve()), "episodes": len(ds), "chunk_len": chunk_len}
    keyfile = path.with_suffix(".json")
    if path.is_file() and keyfile.is_file() and json.loads(keyfile.read_text()) == key:
        return str(path)
    print(f"fitting the proprio model on {train_data} ({len(ds)} episodes, chunk {chunk_len}) -> {path}")
    episodes = [ds[i] for i in range(len(ds))]
    model, _ = fit_proprio([e.state for e in episodes], [e.action for e in episodes],
                           ProprioConfig(chunk_len=chunk_len))
    model.save(path)
    keyfile.write_text(json.dumps(key))
    return str(path)


def real_gate_eval(cfg: EvalConfig, gate_data: Path, label: str) -> dict:
    """The policy's real evaluation on the gate jobs: reused when finished for the same checkpoint and
    jobs, else run and recorded into gate_data (unless episodes of this checkpoint are there already)."""
    from imagination.eval.evaluate import evaluate, finished_results, load_policy
    from imagination.eval.real_rollouts import evaluate_and_record
    from robot_data.dataset import EpisodeDataset, select_meta

    path = Path(cfg.out_dir) / "results.json"
    if (old := finished_results(cfg)) is not None:
        print(f"{label}: reusing {path}")
        return old
    gate_jobs = {(t, cfg.init_state_offset + j) for t in cfg.tasks for j in range(cfg.episodes_per_task)}
    recorded = [m for m in select_meta(EpisodeDataset(gate_data, verify=False).meta, source="policy")
                if m.extra.get("policy") == cfg.checkpoint
                and (m.task_id, m.init_state_id) in gate_jobs]
    n = len(cfg.tasks) * cfg.episodes_per_task
    if recorded:  # an interrupted or overwritten evaluation: its episodes stay, the new ones are not added
        print(f"{label}: {n} real episodes -> {path} "
              f"(not recorded: {gate_data} holds {len(recorded)} of its episodes already)")
        return evaluate(cfg)
    print(f"{label}: {n} real episodes -> {path}, recorded into {gate_data}")
    return evaluate_and_record(cfg, load_policy(cfg), gate_data, {"policy": cfg.checkpoint, "gate": True})


def render_size(gate_data: Path, checkpoint: str) -> int:
    """The size the real gate episodes are rendered at: the gate data's frame size, so that a world model of
    another size than the policy (a 128 px latent model, a 64 px policy) starts from frames of its own size;
    0 (the policy's own size) when the two agree. The policy resizes what it reads to its size (area)."""
    from imagination.eval.evaluate import load_policy
    from imagination.eval.jobs import EvalConfig
    from robot_data.dataset import EpisodeDataset

    size = int(EpisodeDataset(gate_data, verify=False).config.image_size[0])
    own = int(getattr(load_policy(EvalConfig(checkpoint=checkpoint)).config, "image_size", 64))
    return 0 if size == own else size


def drop_stale(results: Path, *inputs: str) -> None:
    """Drop an imagined run older than any of its inputs (a retrained model under the same path)."""
    if results.is_file() and any(Path(p).stat().st_mtime > results.stat().st_mtime for p in inputs):
        print(f"{results}: older than its inputs, imagining again")
        results.unlink()


def ceilings(root: Path, policies: dict[str, str]) -> dict[str, dict]:
    """bench/gate_ceiling.py's results for these policies (by folder: seed, noise2, ...): reality's own AUC on
    the gate's jobs, the most any judge short of an exact copy of the world can reach there."""
    out = {}
    for path in sorted(root.glob("*/gate_ceiling.json")):
        saved = json.loads(path.read_text())
        if saved.get("policies") == policies:
            f = saved["figures"]["all"]
            out[path.parent.name] = {"path": str(path), "repeats": saved["repeats"],
                                     "auc_within_task": f["auc_within_task"], "ci95": f["auc_within_task_ci95"],
                                     "auc_1_repeat": f["auc_by_repeats"][0]}
    return out


def task_bias_from_json(path: str, policy: str) -> dict[str, Any]:
    """The per-task logit offsets fit on the records of `policy` (default: the first one) in the reward_signal.json
    at `path`, which must be a grasp-reward run without offsets of its own: {"from", "policy", "init_states",
    "bias"}. ValueError naming what is wrong."""
    from imagination.eval.task_bias import fit_task_bias

    if not Path(path).is_file():
        raise ValueError(f"{path} is not a file (a reward_signal.json of `--init-state-offset 0`)")
    saved = json.loads(Path(path).read_text())
    if saved.get("reward") != "grasp" or saved.get("task_bias"):
        raise ValueError(f"{path}: expected a run of reward 'grasp' without offsets of its own")
    names = list(saved.get("policies", {}))
    name = policy or (names[0] if names else "")
    records = [r for r in saved.get("records", []) if r["policy"] == name]
    if not records:
        raise ValueError(f"{path} has no records of policy {name!r} (it has {names})")
    bias = fit_task_bias([r["max_success_prob"] for r in records], [r["real_success"] for r in records],
                         [r["task_id"] for r in records])
    return {"from": path, "policy": name, "init_states": saved.get("init_states"),
            "bias": [round(b, 4) for b in bias]}


def other_jobs(gate_data: Path, first: int, last: int) -> str | None:
    """None when every policy episode recorded in gate_data starts from init states first-last (or there is none);
    else one line naming the init states it holds. Why: the grasp gate re-runs every recorded episode of a
    checkpoint, so episodes of another job set in the same folder would be scored as this one's."""
    if not (gate_data / "meta" / "info.json").is_file():
        return None
    from robot_data.dataset import EpisodeDataset, select_meta

    held = sorted({int(m.init_state_id) for m in select_meta(EpisodeDataset(gate_data, verify=False).meta,
                                                               source="policy")})
    if all(first <= i <= last for i in held):
        return None
    return (f"--gate-dir: {gate_data} holds real episodes of init states {held[0]}-{held[-1]}, not only of "
            f"{first}-{last}; give each job set its own --gate-dir")


def out_dir_for(given: str, gate: Path, reward: str, task_bias: bool) -> Path:
    """Where a run's imagined jobs and reward_signal.json go: `given`, else beside the shared real side, one
    folder per reward, and one more for the grasp judge with offsets (gate_ceiling.py reads the plain judge's
    grasp_reward/reward_signal.json, which a run with offsets must not replace)."""
    if given:
        return Path(given)
    out = {"head": gate, "state": gate / "state_reward", "grasp": gate / "grasp_reward"}[reward]
    return out.with_name(out.name + "_task_bias") if task_bias else out


__all__ = ["ceilings", "drop_stale", "gate_proprio", "other_jobs", "out_dir_for", "real_gate_eval", "render_size",
           "task_bias_from_json"]
