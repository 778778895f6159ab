"""Collect scripted-expert and perturbed-expert episodes from real LIBERO (resumable).

    python scripts/collect.py --config quick                     # the demo's small dataset
    python scripts/collect.py episodes_per_task=50 num_workers=2  # all 10 LIBERO-Spatial tasks

Writes a LeRobot v3 dataset to out_dir, `summary.json` (success per task and source) and a few
side-by-side preview videos in out_dir/previews/. Re-running the same command resumes.
"""
from __future__ import annotations

import json
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a source checkout

import numpy as np
from tqdm import tqdm

from envs.cli import parse_config, save_config
from envs.collection import CollectConfig, collect, plan_size
from envs.dataset import EpisodeDataset, encode_video


def summarize(root: Path) -> dict:
    """Success counts per task and per source/perturbation, from the dataset's metadata."""
    table: dict = defaultdict(lambda: defaultdict(lambda: [0, 0]))
    for m in EpisodeDataset(root, verify=False).meta:
        key = m["perturbation"] or m["source"]
        cell = table[str(m["task_id"])][key]
        cell[0] += int(m["success"])
        cell[1] += 1
    return {task: {k: {"success": s, "episodes": n} for k, (s, n) in row.items()}
            for task, row in sorted(table.items())}


def write_previews(root: Path, count: int) -> list[Path]:
    """mp4s of the first `count` episodes, one per source kind first, views side by side at 2x."""
    ds = EpisodeDataset(root, verify=False)
    picked, seen = [], set()
    for m in ds.meta:  # one episode of each kind first, then the rest in order
        kind = m["perturbation"] or m["source"]
        if kind not in seen:
            seen.add(kind)
            picked.append(m["episode_index"])
    picked += [m["episode_index"] for m in ds.meta if m["episode_index"] not in picked]
    out = []
    for i in picked[:count]:
        m = ds.meta[i]
        views = np.concatenate([ds.load_view(i, v) for v in ds.views], axis=2)  # [T, H, V*W, 3]
        views = views.repeat(2, axis=1).repeat(2, axis=2)
        tag = "success" if m["success"] else "fail"
        path = root / "previews" / f"ep{i:04d}_task{m['task_id']}_{m['perturbation'] or m['source']}_{tag}.mp4"
        path.parent.mkdir(exist_ok=True)
        encode_video(path, views, fps=ds.fps, codec="h264", crf=20)
        out.append(path)
    return out


def main(cfg: CollectConfig) -> dict:
    root = Path(cfg.out_dir)
    save_config(cfg, root.parent / f"{root.name}.collect.yaml")
    bar = tqdm(total=plan_size(cfg), desc="collect", unit="ep")
    n_ok = 0

    def on_episode(ep) -> None:
        nonlocal n_ok
        n_ok += int(ep.episode_success)
        bar.update(1)
        bar.set_postfix(task=ep.task_id, kind=ep.perturbation or ep.source, success=f"{n_ok}/{bar.n}")

    existing = len(EpisodeDataset(root, verify=False)) if (root / "meta" / "info.json").exists() else 0
    bar.update(min(existing, bar.total))
    collect(cfg, progress=on_episode)
    bar.close()
    summary = summarize(root)
    (root / "summary.json").write_text(json.dumps(summary, indent=2))
    previews = write_previews(root, cfg.preview_videos)
    print(f"dataset: {root}  ({len(EpisodeDataset(root, verify=False))} episodes)")
    for task, row in summary.items():
        print(f"  task {task:>2}: " + "  ".join(f"{k} {v['success']}/{v['episodes']}" for k, v in sorted(row.items())))
    for p in previews:
        print(f"  preview: {p}")
    return summary


if __name__ == "__main__":
    main(parse_config(CollectConfig, __doc__, group="collect"))
