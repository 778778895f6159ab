"""Behaviour cloning of the built-in VLA on the expert episodes of a dataset.

    python scripts/train_bc.py --config quick        # CPU: 64 px, the demo dataset, a few minutes
    python scripts/train_bc.py --config full         # GPU: every LIBERO-Spatial task, longer
    python scripts/train_bc.py --config quick steps=500 tasks=[0] out_dir=/tmp/bc policy.chunk_len=4

Writes to out_dir: config.yaml, policy.pt (`policies.base.Policy.load`), checkpoint.pt (exact
resume: re-running the same command continues from it; resume=false starts over), loss.csv and
logs/ (tensorboard --logdir out_dir/logs). Evaluate the result in real LIBERO with
scripts/eval_policy.py checkpoint=out_dir/policy.pt.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a source checkout

from envs.cli import parse_config, save_config
from envs.dataset import Episode, EpisodeDataset
from policies.bc import BCConfig, train_bc


def load_episodes(cfg: BCConfig) -> tuple[list[Episode], dict]:
    """The episodes of cfg.data_dir to imitate (sources, tasks, success filter) and its proprio stats."""
    ds = EpisodeDataset(cfg.data_dir, verify=False)
    if not set(cfg.policy.views) <= set(ds.views):
        raise ValueError(f"policy.views {cfg.policy.views}: not all in the dataset's views {list(ds.views)}")
    picked = [m["episode_index"] for m in ds.meta
              if m["source"] in cfg.sources and (not cfg.tasks or m["task_id"] in cfg.tasks)
              and (m["success"] or not cfg.success_only)]
    if cfg.episodes_per_task:
        task_of, per_task = {m["episode_index"]: m["task_id"] for m in ds.meta}, {}
        for i in picked:
            per_task.setdefault(task_of[i], []).append(i)
        picked = sorted(i for ids in per_task.values() for i in ids[: cfg.episodes_per_task])
    if cfg.max_episodes:
        picked = picked[: cfg.max_episodes]
    if not picked:
        raise ValueError(f"{cfg.data_dir}: no episodes match sources={cfg.sources} tasks={cfg.tasks} "
                         f"success_only={cfg.success_only}")
    return [ds[i] for i in picked], ds.stats["observation.state"]


def main(cfg: BCConfig) -> dict:
    save_config(cfg, Path(cfg.out_dir) / "config.yaml")
    episodes, stats = load_episodes(cfg)
    print(f"bc: {len(episodes)} episodes ({sum(len(e) for e in episodes)} steps) from {cfg.data_dir}")
    result = train_bc(cfg, episodes, stats)
    print(f"policy: {result['policy_path']}  ({result['steps']} steps in {result['seconds']:.0f} s, "
          f"final loss {result['final_loss']:.5f}, mse {result['final_mse']:.5f})")
    (Path(cfg.out_dir) / "result.json").write_text(json.dumps(result, indent=2))
    return result


if __name__ == "__main__":
    main(parse_config(BCConfig, __doc__, group="bc"))
