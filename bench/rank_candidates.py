"""The policies bench/rank.py ranks: BC snapshots along one training run, BC on fewer episodes, BC sampled with
wide action noise, uniform random actions, and any policy given with --policy (a file or a served policy). The BC
runs are trained here once and reused while their settings are unchanged."""
from __future__ import annotations

import json
import math
import shutil
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import cast

import torch

from infra.cli import load_config
from infra.provenance import provenance
from policies.base import Policy, RandomPolicy, RandomPolicyConfig
from policies.bc import BCConfig, train_bc
from policies.remote import is_remote
from robot_data.dataset import EpisodeDataset
from world_models.model import WorldModel


@dataclass
class Candidate:
    name: str
    checkpoint: str  # a Policy.save file, "random", or ws://host:port of a policy server (policies/remote.py)
    deterministic: bool
    about: str


@dataclass
class RandomOnViewsConfig(RandomPolicyConfig):
    views: list[str] = field(default_factory=lambda: ["agentview"])  # what the evaluation renders
    image_size: int = 64


class RandomOnViews(RandomPolicy):
    """The uniform random baseline, declaring the views to render (the world model's, not both cameras)."""

    config_class = RandomOnViewsConfig


def expert_episodes(ds: EpisodeDataset, tasks: list[int], per_task: int = 0) -> list[int]:
    """Successful expert episodes of `tasks` (the first `per_task` of each task; 0 = all), dataset order."""
    picked: list[int] = []
    for task in tasks:
        ids = ds.select(task_id=task, source="expert", success=True)
        picked += ids[:per_task] if per_task else ids
    return picked


def train_run(name: str, cfg: BCConfig, ds: EpisodeDataset, episodes: list[int]) -> dict:
    """Train (or reuse) one BC run in cfg.out_dir; a run made with other settings is started over."""
    out = Path(cfg.out_dir)
    key = {"config": asdict(cfg), "episodes": episodes, "data": str(Path(cfg.data_dir).resolve())}
    key_path, result_path = out / "key.json", out / "result.json"
    if key_path.is_file() and json.loads(key_path.read_text()) != key:
        print(f"  {name}: settings changed, training again", flush=True)
        shutil.rmtree(out)
    if result_path.is_file():
        print(f"  {name}: cached ({out})", flush=True)
        return json.loads(result_path.read_text())
    out.mkdir(parents=True, exist_ok=True)
    key_path.write_text(json.dumps(key, indent=2))
    print(f"  {name}: BC on {len(episodes)} expert episodes, {cfg.steps} steps -> {out}", flush=True)
    result = train_bc(cfg, [ds[i] for i in episodes], ds.stats["observation.state"], progress=False)
    result["snapshots"] = {str(k): v for k, v in result["snapshots"].items()}
    result["provenance"] = provenance(cfg.seed, {"episodes": episodes})
    result_path.write_text(json.dumps(result, indent=2))
    print(f"  {name}: {result['seconds']:.0f} s, loss {result['first_loss']:.4f} -> {result['final_loss']:.4f}",
          flush=True)
    return result


def make_candidates(args, wm: WorldModel) -> list[Candidate]:
    ds = EpisodeDataset(args.data, verify=False)
    views = list(wm.cfg.views)
    missing = [v for v in views if v not in ds.views]
    if missing:
        raise SystemExit(f"--data: the world model imagines {views} but {args.data} has views {list(ds.views)}")
    d = wm.cfg.denoiser
    base = load_config(BCConfig, "quick", group="bc")
    base = replace(base, data_dir=args.data, tasks=list(args.tasks), steps=args.bc_steps, seed=args.seed,
                   policy=replace(base.policy, views=views, image_size=d.image_size, chunk_len=wm.chunk_len),
                   checkpoint_every=max(100, args.bc_steps // 4), num_threads=args.threads)
    out = Path(args.out_dir) / "policies"
    full_eps = expert_episodes(ds, args.tasks)
    few_eps = expert_episodes(ds, args.tasks, args.few_episodes)
    if not full_eps:
        raise SystemExit(f"--data: no successful expert episodes of tasks {args.tasks} in {args.data}")
    snaps = sorted({s for s in args.snapshots if 0 < s < args.bc_steps})
    full = train_run("bc", replace(base, out_dir=str(out / "bc"), snapshot_steps=snaps), ds, full_eps)
    few = train_run("bc_few", replace(base, out_dir=str(out / "bc_few")), ds, few_eps)
    n = len(full_eps)
    cands = [Candidate(f"bc_s{s}", full["snapshots"][str(s)], True, f"BC, {n} episodes, step {s}") for s in snaps]
    cands.append(Candidate("bc", full["policy_path"], True, f"BC, {n} episodes, step {args.bc_steps}"))
    cands.append(Candidate("bc_few", few["policy_path"], True,
                           f"BC, {len(few_eps)} episodes, step {args.bc_steps}"))
    noisy = out / f"bc_noisy_std{args.noise_std:g}.pt"
    if not noisy.is_file() or noisy.stat().st_mtime < Path(full["policy_path"]).stat().st_mtime:
        policy = Policy.load(full["policy_path"])
        with torch.no_grad():
            cast(torch.Tensor, policy.log_std).fill_(math.log(args.noise_std))  # not declared by Policy
        policy.save(noisy)
    cands.append(Candidate("bc_noisy", str(noisy), False, f"bc, sampled, action std {args.noise_std:g}"))
    if not args.no_random:
        cands.append(Candidate("random", "random", True, "uniform random actions"))
    return cands + extra_candidates(args.policy, [c.name for c in cands])


def extra_candidates(specs: list[str], taken: list[str]) -> list[Candidate]:
    """--policy NAME=CHECKPOINT entries: a Policy.save file, or ws://host:port of a policy server."""
    out: list[Candidate] = []
    for spec in specs:
        name, sep, checkpoint = spec.partition("=")
        if not sep or not name or not checkpoint:
            raise SystemExit(f"--policy: expected NAME=CHECKPOINT (a Policy.save file or ws://host:port), got {spec!r}")
        if name in taken or name in [c.name for c in out]:
            raise SystemExit(f"--policy: the name {name!r} is taken; pick another")
        if not is_remote(checkpoint) and not Path(checkpoint).is_file():
            raise SystemExit(f"--policy: {checkpoint!r} is neither a file nor ws://host:port")
        out.append(Candidate(name, checkpoint, True, "served policy" if is_remote(checkpoint) else "given"))
    return out


__all__ = ["Candidate", "RandomOnViews", "RandomOnViewsConfig", "expert_episodes", "extra_candidates",
           "make_candidates", "train_run"]
