"""Calibrate the success head's decision threshold on real episodes replayed in imagination.

Why: the head is trained on real frames and on the denoiser's one-step estimates, but in a long
imagined rollout it sees frames the model made from its own predictions. How often it passes 0.5
there depends on the model: a model trained on expert data only fires on a blurred arm that never
grasped (optimistic, RL learns to please it); one fine-tuned on many policy failures may not fire
even on replayed expert trajectories (pessimistic, RL sees no successes). Both rank policies
worse than their head's *ordering* allows. So we replay recorded real episodes, successes and
failures alike, with their real actions in imagination, take each episode's highest success
probability, and pick the threshold that best separates the two outcomes (balanced accuracy, so a
data set with few failures cannot be matched by a threshold that calls everything a success).

    probs = replay_success_prob(wm, proprio, episodes)           # [N] max prob per episode
    choice = pick_threshold(probs, real_success)                 # ThresholdChoice
    wm.cfg.head.success_threshold = choice.threshold             # saved with the checkpoint

`ImaginationConfig.success_threshold=None` (the default) then uses the checkpoint's threshold.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import torch

from imagination.env import ImaginationConfig
from imagination.episodes import StartEpisode
from imagination.imagine import imagine, open_imagination, recorded_actions, recorded_ends
from imagination.keyframes import Keyframe, KeyframeConfig
from infra.atomic import atomic_write_json
from infra.crash_points import crash_point
from infra.provenance import provenance
from robot_data.dataset import EpisodeDataset
from world_models.model import WorldModel
from world_models.proprio import ProprioModel


def replay_success_prob(
    wm: WorldModel,
    proprio: ProprioModel,
    episodes: list[StartEpisode],
    *,
    max_steps: int = 0,
    sampling_steps: int | None = None,
    batch_size: int = 32,
    seed: int = 0,
    device: str = "cpu",
) -> np.ndarray:
    """Highest success probability [N] the head gives along each episode's open-loop replay.

    Each episode starts from its real frame 0 and is driven by its recorded actions, chunk by chunk,
    for its recorded length (capped at `max_steps` when > 0); the model's context holds only its own
    predictions; `device` is where the model runs (the env moves it there). The head never ends an
    episode early here (threshold +inf), so the figure is the maximum over the whole replay."""
    if not episodes:
        raise ValueError("episodes: need at least one real episode to replay")
    if batch_size < 1:
        raise ValueError(f"batch_size: expected an integer >= 1, got {batch_size}")
    out = np.zeros(len(episodes), np.float32)
    for lo in range(0, len(episodes), batch_size):
        eps = episodes[lo: lo + batch_size]
        ends = recorded_ends(eps, max_steps)
        env = open_imagination(wm, eps, proprio, len(eps), ImaginationConfig(
            max_steps=int(ends.max()), success_threshold=float("inf"), sampling_steps=sampling_steps,
            keyframes=KeyframeConfig(mode="start"), device=device))
        # every env runs to the longest episode's end (the batch stays whole); each counts to its own
        run = imagine(env, recorded_actions(env), [Keyframe(i, 0) for i in range(len(eps))], seed=seed + lo)
        out[lo: lo + len(eps)] = run.max_success_prob_before(ends)
        env.close()
    return out


@dataclass
class ThresholdChoice:
    threshold: float
    balanced_accuracy: float  # mean of the true-positive and true-negative rates at `threshold`
    balanced_accuracy_at_default: float  # the same at 0.5, for comparison
    positives: int  # real successes among the episodes
    negatives: int


def balanced_accuracy(probs: np.ndarray, labels: np.ndarray, threshold: float) -> float:
    """Mean of the true-positive and true-negative rates of `probs >= threshold` against `labels`."""
    pred = np.asarray(probs) >= threshold
    labels = np.asarray(labels, dtype=bool)
    return 0.5 * (float(pred[labels].mean()) + float((~pred[~labels]).mean()))


def pick_threshold(probs: np.ndarray, labels: np.ndarray, default: float = 0.5) -> ThresholdChoice:
    """The threshold on max success probability that best separates real successes from failures.

    Candidates are `default` and the midpoints between consecutive distinct probabilities (a midpoint
    is as far as possible from both episodes it separates, so a slightly different sampler draw
    does not flip them). Ties go to the candidate nearest `default`."""
    probs = np.asarray(probs, dtype=np.float64)
    labels = np.asarray(labels, dtype=bool)
    if probs.ndim != 1 or probs.shape != labels.shape:
        raise ValueError(f"probs and labels: expected two 1-D arrays of one length, "
                         f"got {probs.shape} and {labels.shape}")
    pos, neg = int(labels.sum()), int((~labels).sum())
    if pos == 0 or neg == 0:
        raise ValueError(f"labels: need both real successes and real failures to calibrate, got {pos} successes "
                         f"and {neg} failures (record some policy rollouts: they bring the failures)")
    u = np.unique(probs)
    candidates = np.concatenate([[default], (u[:-1] + u[1:]) / 2])
    scores = np.array([balanced_accuracy(probs, labels, c) for c in candidates])
    best = np.flatnonzero(np.isclose(scores, scores.max()))
    pick = best[np.argmin(np.abs(candidates[best] - default))]
    return ThresholdChoice(float(candidates[pick]), float(scores[pick]), float(scores[0]), pos, neg)


def plot_outcome_histogram(path, probs: np.ndarray, labels: np.ndarray, threshold: float, xlabel: str,
                           threshold_label: str = "threshold", bins: int = 20) -> None:
    """Histograms of the highest success probability [N] of real successes and real failures, with the
    threshold drawn in: how far apart the two outcomes are is what the success head is worth as a reward."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    probs, labels = np.asarray(probs), np.asarray(labels, bool)
    fig, ax = plt.subplots(figsize=(6, 3.2))
    edges = np.linspace(0, 1, bins + 1).tolist()
    ax.hist(probs[labels], bins=edges, alpha=0.6, label=f"real success ({labels.sum()})")
    ax.hist(probs[~labels], bins=edges, alpha=0.6, label=f"real failure ({(~labels).sum()})")
    ax.axvline(threshold, color="k", ls="--", label=f"{threshold_label} {threshold:.2f}")
    ax.axvline(0.5, color="grey", ls=":", lw=1)
    ax.set_xlabel(xlabel)
    ax.set_ylabel("episodes")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


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


def missing_outcome(data_dir: str) -> str:
    """Why data_dir's episodes cannot calibrate a success threshold, or "" when they can: the threshold is chosen
    between real successes and real failures, so the data needs both (a --smoke run's one episode a task may not)."""
    outcomes = {bool(m.success) for m in EpisodeDataset(data_dir, verify=False).meta}
    if outcomes == {True, False}:
        return ""
    return f"the data has only {'successes' if True in outcomes else 'failures'}"


def calibrate_success(cfg: CalibrateConfig) -> dict:
    """Replay cfg's episodes, write the best threshold into the checkpoint (or cfg.out) and
    calibration.json / calibration.png beside it; returns calibration.json's content."""
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
    meta = {m.episode_index: m for m in ds.meta}
    labels = np.array([bool(meta[i].success) for i in indices])
    sources = [str(meta[i].source) for i in indices]
    # the start episodes and the proprio model (fitted with the world model's chunk length when none is given)
    env = open_imagination(wm, data, cfg.proprio, indices=indices, config=ImaginationConfig(device=cfg.device))
    episodes = env.episodes
    print(f"replaying {len(episodes)} episodes ({labels.sum()} real successes) in imagination", flush=True)
    probs = replay_success_prob(wm, env.proprio, episodes, max_steps=cfg.max_steps, batch_size=cfg.batch_size,
                                sampling_steps=cfg.sampling_steps or None, seed=cfg.seed, device=cfg.device)
    choice = pick_threshold(probs, labels)
    out = Path(cfg.out or cfg.checkpoint)
    # calibration.json is the record of this calibration and is written last: an earlier run's record (and
    # figure) goes first, so that a kill between the model file and the record leaves no record naming a
    # threshold the model file no longer holds (export_hub and the model card quote calibration.json)
    for stale in (out.parent / "calibration.json", out.parent / "calibration.png"):
        stale.unlink(missing_ok=True)
    wm.cfg.head.success_threshold = choice.threshold
    wm.save(out)  # atomic
    crash_point("calibrate.before_record")
    result = {"checkpoint": cfg.checkpoint, "out": str(out), "data_dir": data, **asdict(choice),
              "episodes": [{"episode_index": i, "source": s, "real_success": bool(label), "max_success_prob": float(p)}
                           for i, s, label, p in zip(indices, sources, labels, probs)],
              "provenance": provenance(cfg.seed, {"episodes": indices})}
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
