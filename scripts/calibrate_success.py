"""Calibrate a world model's success threshold on real episodes replayed in imagination.

    python scripts/calibrate_success.py checkpoint=outputs/world_model/quick/world_model.pt
    python scripts/calibrate_success.py checkpoint=... data_dir=outputs/loop/round1/data out=calibrated.pt

Every episode of the data set (or `episodes`), successes and failures alike, is replayed from its
first frame with its recorded actions, open loop; the head's highest success probability along each
replay is compared with the simulator's outcome, and the threshold that best separates them
(balanced accuracy) is written into the checkpoint (`head.success_threshold`). Imagined envs,
`eval_policy.py --env imagination`, RL and the benchmarks then use it unless they set their own.
The data need real failures: policy rollouts recorded by the loop, or perturbed expert episodes.
Writes calibration.json (every episode's figure) and calibration.png next to the output checkpoint.
"""
from __future__ import annotations

import json
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a source checkout

import numpy as np
import torch

from envs.atomic import atomic_write_json
from envs.cli import parse_config
from envs.dataset import EpisodeDataset
from imagination.env import ImaginationConfig
from imagination.eval.calibrate import pick_threshold, plot_outcome_histogram, replay_success_prob
from imagination.imagine import open_imagination
from world_models.model import WorldModel


@dataclass
class CalibrateConfig:
    checkpoint: str = "outputs/world_model/quick/world_model.pt"
    data_dir: str = ""  # "" = the data_dir of the run's split.json
    episodes: list[int] = field(default_factory=list)  # [] = every episode of data_dir
    out: str = ""  # "" = write the threshold into `checkpoint` itself (atomic)
    proprio: str = ""  # a saved proprio model; "" = fit one on data_dir (~15 s; it only feeds obs["state"])
    max_steps: int = 0  # replay length cap; 0 = each episode's recorded length
    sampling_steps: int = 0  # denoising steps per chunk; 0 = the model's default
    batch_size: int = 32
    seed: int = 0
    num_threads: int = 0  # 0 = torch's default
    device: str = "cpu"  # where the world model runs: cpu, cuda


def _data_dir(cfg: CalibrateConfig) -> str:
    if cfg.data_dir:
        return cfg.data_dir
    split = Path(cfg.checkpoint).parent / "split.json"
    if not split.is_file():
        raise SystemExit(f"data_dir: not set and no split.json next to {cfg.checkpoint} to read it from")
    return json.loads(split.read_text())["data_dir"]


def main(cfg: CalibrateConfig) -> dict:
    if cfg.num_threads:
        torch.set_num_threads(cfg.num_threads)
    if not Path(cfg.checkpoint).is_file():
        raise SystemExit(f"checkpoint: {cfg.checkpoint!r} is not a file (a world model from train_world_model.py)")
    data = _data_dir(cfg)
    if not Path(data).is_dir():
        raise SystemExit(f"data_dir: {data!r} is not a directory (a dataset from collect.py or the loop)")
    wm = WorldModel.load(cfg.checkpoint)
    ds = EpisodeDataset(data, verify=False)
    indices = list(cfg.episodes) or list(range(len(ds)))
    bad = [i for i in indices if not 0 <= i < len(ds)]
    if bad:
        raise SystemExit(f"episodes: {bad} are not episode indices of {data} (0..{len(ds) - 1})")
    meta = {m["episode_index"]: m for m in ds.meta}
    labels = np.array([bool(meta[i]["success"]) for i in indices])
    sources = [str(meta[i]["source"]) for i in indices]
    # the start episodes and the proprio model (fitted with the world model's chunk length when none is given)
    env = open_imagination(wm, data, cfg.proprio, indices=indices, config=ImaginationConfig(device=cfg.device))
    episodes = env.episodes
    print(f"replaying {len(episodes)} episodes ({labels.sum()} real successes) in imagination", flush=True)
    probs = replay_success_prob(wm, env.proprio, episodes, max_steps=cfg.max_steps, batch_size=cfg.batch_size,
                                sampling_steps=cfg.sampling_steps or None, seed=cfg.seed, device=cfg.device)
    choice = pick_threshold(probs, labels)
    out = Path(cfg.out or cfg.checkpoint)
    wm.cfg.head.success_threshold = choice.threshold
    wm.save(out)
    result = {"checkpoint": cfg.checkpoint, "out": str(out), "data_dir": data, **asdict(choice),
              "episodes": [{"episode_index": i, "source": s, "real_success": bool(label), "max_success_prob": float(p)}
                           for i, s, label, p in zip(indices, sources, labels, probs)]}
    atomic_write_json(out.parent / "calibration.json", result, indent=2)
    plot_outcome_histogram(out.parent / "calibration.png", probs, labels, choice.threshold,
                           "highest success probability along the imagined replay", "threshold", bins=20)
    for s in sorted(set(sources)):
        for outcome in (True, False):
            m = np.array([x == s for x in sources]) & (labels == outcome)
            if m.any():
                fired = int((probs[m] >= choice.threshold).sum())
                print(f"  {s:<10} real {'success' if outcome else 'failure':<8} {int(m.sum()):>3} episodes, "
                      f"imagined success {fired}/{int(m.sum())} (median max prob {np.median(probs[m]):.2f})")
    print(f"threshold {choice.threshold:.3f}: balanced accuracy {choice.balanced_accuracy:.3f} "
          f"(at 0.5: {choice.balanced_accuracy_at_default:.3f}) -> {out}")
    return result


if __name__ == "__main__":
    main(parse_config(CalibrateConfig, __doc__, group="calibrate_success"))
