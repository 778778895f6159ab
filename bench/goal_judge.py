"""Does the goal judge see real outcomes, on real frames and through imagination?

    python bench/goal_judge.py --reader R/goal_reader/data_only/reader.pt --world-model R/world_model/world_model.pt \
        --data R/own_rollouts/data --proprio R/own_rollouts/proprio.pt
    python bench/goal_judge.py ... --samples 3          # three imagined samples of each episode, averaged
    python bench/goal_judge.py ... --last-steps 40      # imagine only the last 40 steps (a keyframe near the end)
    python bench/goal_judge.py --reader ADAPTED ... --compare-reader R/goal_reader/reader.pt   # paired, same frames
    python bench/goal_judge.py ... --world-model BIG/world_model.pt --compare-world-model R/world_model/world_model.pt
                                                        # two world models, the same episodes, actions and reader

For every recorded episode of --data (real outcomes known; take episodes neither the reader nor the world model
trained on), scores against its real outcome, each read two ways: "last", the episode's last frame (what reward
"goal" pays with goal_until=horizon, its default), and "max", the highest over the episode (what passes the
threshold first with goal_until=threshold):
  recorded      the goal reader (world_models/goal_reader.py) on the episode's real frames: its goal probability,
                and its progress (the predicted distance of the first predicate, nearer scoring higher);
  imagined      the same on the frames the world model imagines from the episode's first frame under its own
                recorded actions (open loop, chunk by chunk; the last imagined frame of every chunk);
  head          the world model's success head on the same imagined chunks (reward "head", the frame judge
                before it).
Each as a within-task AUC with a 95% bootstrap interval (jobs resampled within each task), and the paired
difference imagined - head (last frames). PASS when the imagined last-frame AUC's interval lies above --min-auc
(0.5: the judge sees real outcomes through imagination at all). With --compare-reader or --compare-world-model, the
paired AUC difference against it (the same episodes resampled in both). Writes <out-dir>/goal_judge.json.
Exit 1 on FAIL, 2 on a missing input.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from infra.errors import run_main


def _last(rows: np.ndarray) -> np.ndarray:
    """The last finite value of each row [N, C] -> [N]."""
    return np.array([r[np.isfinite(r)][-1] for r in rows])


def reader_scores(reader: Any, images: np.ndarray, tasks: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Goal probability and the first predicate's progress, negated (nearer scores higher), of frames [N]."""
    holds, progress = reader.read(images, tasks)
    return np.nanprod(holds, axis=1), -progress[:, 0]


def recorded_scores(reader: Any, data: str, indices: list[int]) -> dict[str, np.ndarray]:
    """Per recorded episode [N]: the reader's goal probability on its last and its highest real frame, and the
    progress on its last."""
    from robot_data.dataset import EpisodeDataset

    ds = EpisodeDataset(data, verify=False)
    out: dict[str, list[float]] = {"goal_last": [], "goal_max": [], "progress_last": []}
    for i in indices:
        ep = ds[i]
        goal, progress = reader_scores(reader, ep.frames[reader.cfg.view], np.full(len(ep.action), ep.task_id))
        out["goal_last"].append(float(goal[-1]))
        out["goal_max"].append(float(goal.max()))
        out["progress_last"].append(float(progress[-1]))
    return {k: np.array(v) for k, v in out.items()}


def imagined_scores(readers: list[Any], world_model: str, data: str, indices: list[int], proprio: str, seed: int,
                    device: str, last_steps: int = 0) -> list[dict[str, np.ndarray]]:
    """Per reader, per episode [N], over the chunks the world model imagines from its first frame (with last_steps >
    0: from that many steps before its end, the recording before it as context) under its recorded actions: the
    reader's goal probability on the last and the highest chunk frame, its progress on the last, and the success
    head's probability on the last chunk and its highest. Every reader reads the same imagined frames."""
    import torch

    from imagination.env import ImaginationConfig
    from imagination.episodes import load_start_episodes
    from imagination.imagine import open_imagination
    from imagination.keyframes import Keyframe, KeyframeConfig
    from world_models.model import WorldModel

    wm = WorldModel.load(world_model, map_location=device)
    for reader in readers:
        if reader.cfg.view not in wm.cfg.views:
            raise ValueError(f"--reader reads view {reader.cfg.view!r}, the world model imagines {list(wm.cfg.views)}")
    v = [list(wm.cfg.views).index(reader.cfg.view) for reader in readers]
    episodes = load_start_episodes(data, list(wm.cfg.views), indices)
    K, T = wm.chunk_len, np.array([len(e.action) for e in episodes])
    t0 = np.maximum(0, T - last_steps) if last_steps > 0 else np.zeros_like(T)  # each one's first imagined step
    chunks = int(np.ceil((T - t0).max() / K))
    # the head never ends an episode (threshold out of reach) and the horizon lies past every recording
    cfg = ImaginationConfig(max_steps=int(t0.max()) + chunks * K + K, success_threshold=1.01,
                            keyframes=KeyframeConfig(mode="start"), device=device)
    env = open_imagination(wm, episodes, proprio, len(episodes), cfg)
    torch.manual_seed(seed)
    env.reset(seed=seed, options={"keyframes": [Keyframe(i, int(t0[i])) for i in range(len(episodes))]})
    tasks = np.array([e.task_id for e in episodes])
    goal, progress = (np.full((len(readers), len(episodes), chunks), np.nan) for _ in range(2))
    head = np.full((len(episodes), chunks), np.nan)
    for c in range(chunks):
        acts = np.zeros((len(episodes), K, 7), np.float32)
        for i, e in enumerate(episodes):  # past its end an episode repeats its last action (not scored)
            acts[i] = e.recorded_chunk(int(t0[i]) + c * K, K)
        obs, _, _, _, info = env.step(acts)
        live = c * K < T - t0  # chunks that start inside the recording
        head[live, c] = info["success_prob"][live]
        for r, reader in enumerate(readers):
            g, prog = reader_scores(reader, obs["image"][:, v[r]], tasks)
            goal[r, live, c], progress[r, live, c] = g[live], prog[live]
    return [{"goal_last": _last(goal[r]), "goal_max": np.nanmax(goal[r], 1), "progress_last": _last(progress[r]),
             "head_last": _last(head), "head_max": np.nanmax(head, 1)} for r in range(len(readers))]


def paired_auc_difference(a: np.ndarray, b: np.ndarray, success: np.ndarray, tasks: np.ndarray,
                          point: float) -> dict[str, Any]:
    """The within-task AUC of scores a [N] minus that of b [N] over the same episodes (`point`, the two AUCs' own
    difference), with its 95% bootstrap interval: the episodes resampled within each task, both scores together."""
    from imagination.eval.reward_gate import resampled_within_task_aucs

    both = resampled_within_task_aucs(np.stack([a, b]), success, tasks, 2000, 0)
    d = both[0] - both[1]
    d = d[~np.isnan(d)]
    return {"point": float(point), "ci95": [float(x) for x in np.quantile(d, [0.025, 0.975])]}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--reader", required=True, help="goal reader (scripts/train_goal_reader.py reader.pt)")
    p.add_argument("--world-model", required=True, help="WorldModel checkpoint that imagines the episodes")
    p.add_argument("--data", required=True, help="recorded dataset whose episodes are scored (real outcomes)")
    p.add_argument("--proprio", default="", help="ProprioModel file (default: fitted on --data)")
    p.add_argument("--episodes", type=int, nargs="*", default=None, help="episode indices (default: all)")
    p.add_argument("--samples", type=int, default=1, help="imagined samples per episode, scores averaged")
    p.add_argument("--last-steps", type=int, default=0,
                   help="imagine only each episode's last N steps, the recording before them as context (0: all)")
    p.add_argument("--compare-reader", default="",
                   help="another goal reader (e.g. the one --reader was adapted from) read on the same imagined "
                        "frames: the paired AUC difference --reader minus it, last verdict and last progress")
    p.add_argument("--compare-world-model", default="",
                   help="another WorldModel checkpoint imagining the same episodes under the same actions, read by "
                        "the same reader: the paired AUC difference --world-model minus it, last verdict and progress")
    p.add_argument("--min-auc", type=float, default=0.5, help="PASS: the imagined AUC's interval lies above this")
    p.add_argument("--out-dir", default="", help="default: beside the reader")
    p.add_argument("--device", default="cpu")
    args = p.parse_args(argv)
    if args.compare_reader and args.compare_world_model:
        p.error("--compare-reader, --compare-world-model: one comparison at a time")
    named = ("reader", "world_model", "data") + tuple(n for n in ("compare_reader", "compare_world_model")
                                                      if getattr(args, n))
    for name in named:
        if not Path(getattr(args, name)).exists():
            print(f"goal_judge: --{name.replace('_', '-')}: {getattr(args, name)} does not exist", file=sys.stderr)
            return 2
    from imagination.eval.reward_gate import within_task_auc_interval
    from infra.atomic import atomic_write_json
    from robot_data.dataset import EpisodeDataset
    from world_models.goal_reader import GoalReader

    t0 = time.time()
    reader, _ = GoalReader.load(args.reader)
    meta = EpisodeDataset(args.data, verify=False).meta
    indices = list(range(len(meta))) if args.episodes is None else list(args.episodes)
    success = np.array([bool(meta[i].success) for i in indices])
    tasks = np.array([int(meta[i].task_id) for i in indices])
    scores = {f"recorded_{k}": v for k, v in recorded_scores(reader, args.data, indices).items()}
    readers = [reader] + ([GoalReader.load(args.compare_reader)[0]] if args.compare_reader else [])
    runs = [imagined_scores(readers, args.world_model, args.data, indices, args.proprio, s, args.device,
                            args.last_steps) for s in range(args.samples)]
    for k in runs[0][0]:
        scores[k if k.startswith("head") else f"imagined_{k}"] = np.mean([r[0][k] for r in runs], 0)
        if args.compare_reader and not k.startswith("head"):
            scores[f"compared_{k}"] = np.mean([r[1][k] for r in runs], 0)
    if args.compare_world_model:  # the same reader on the other model's frames, seeded alike
        other = [imagined_scores([reader], args.compare_world_model, args.data, indices, args.proprio, s, args.device,
                                 args.last_steps)[0] for s in range(args.samples)]
        for k in other[0]:
            if not k.startswith("head"):
                scores[f"compared_{k}"] = np.mean([r[k] for r in other], 0)
    figs = {k: within_task_auc_interval(v, success, tasks) for k, v in scores.items()}
    compared = {k: paired_auc_difference(scores[f"imagined_{k}"], scores[f"compared_{k}"], success, tasks,
                                         figs[f"imagined_{k}"].point - figs[f"compared_{k}"].point)
                for k in (("goal_last", "progress_last") if "compared_goal_last" in scores else ())}
    vs_head = paired_auc_difference(scores["imagined_goal_last"], scores["head_last"], success, tasks,
                                    figs["imagined_goal_last"].point - figs["head_last"].point)
    point, (lo, hi) = vs_head["point"], vs_head["ci95"]
    judged = figs["imagined_goal_last"]
    ok = judged.ci95[0] > args.min_auc
    per_task = {int(t): {"episodes": int((tasks == t).sum()), "successes": int(success[tasks == t].sum())}
                for t in np.unique(tasks)}
    out = Path(args.out_dir or Path(args.reader).parent)
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_json(out / "goal_judge.json", {
        "reader": args.reader, "world_model": args.world_model, "data": args.data, "episodes": indices,
        "samples": args.samples, "last_steps": args.last_steps, "per_task": per_task,
        "auc": {k: {"point": f.point, "ci95": list(f.ci95), "pairs": f.pairs} for k, f in figs.items()},
        "imagined_minus_head": {"point": point, "ci95": [lo, hi]},
        **({"compare_reader": args.compare_reader, "compare_world_model": args.compare_world_model,
            "minus_compared": compared} if compared else {}),
        "records": [{"episode": i, "task_id": int(t), "success": bool(s), **{k: float(v[j]) for k, v in scores.items()}}
                    for j, (i, t, s) in enumerate(zip(indices, tasks, success))]}, indent=1)
    for k, f in figs.items():
        print(f"{k:24s} within-task AUC {f.point:.3f} [{f.ci95[0]:.3f}, {f.ci95[1]:.3f}] ({f.pairs} pairs)")
    print(f"imagined - head (last frames): {point:+.3f} [{lo:+.3f}, {hi:+.3f}]")
    vs = "".join(f" minus_compared_{k}={c['point']:+.3f} minus_compared_{k}_ci95=[{c['ci95'][0]:+.3f},"
                 f"{c['ci95'][1]:+.3f}]" for k, c in compared.items())
    what = "--world-model" if args.compare_world_model else "--reader"
    for k, c in compared.items():
        print(f"{what} minus its comparison, imagined {k}: {c['point']:+.3f} "
              f"[{c['ci95'][0]:+.3f}, {c['ci95'][1]:+.3f}]")
    a = {k: f"{f.point:.3f}" for k, f in figs.items()}
    print(f"BENCH goal_judge episodes={len(indices)} successes={int(success.sum())} last_steps={args.last_steps} "
          f"recorded_last={a['recorded_goal_last']} recorded_max={a['recorded_goal_max']} "
          f"recorded_progress={a['recorded_progress_last']} imagined_last={a['imagined_goal_last']} "
          f"imagined_ci95=[{judged.ci95[0]:.3f},{judged.ci95[1]:.3f}] imagined_max={a['imagined_goal_max']} "
          f"imagined_progress={a['imagined_progress_last']} head_last={a['head_last']} head_max={a['head_max']} "
          f"imagined_minus_head={point:+.3f}{vs} minutes={(time.time() - t0) / 60:.1f} "
          f"threshold_auc_low={args.min_auc} "
          f"{'PASS' if ok else 'FAIL'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(run_main(main))  # input errors as one line, exit 2 (infra/errors.py)
