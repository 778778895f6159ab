"""Open-loop fidelity of a trained world model on held-out real episodes (scripts/eval_world_model.py).

Each episode is replayed from its first frame with its real actions, the whole episode (or
max_steps) autoregressively: the model's context only ever holds its own predictions. Predicted
frame t is compared with the real frame after action t, per step and averaged:

  - PSNR and SSIM of the whole frame, and of the first frame held still ("nothing moves");
  - the same over the moving region (world_models.region: where the real frame differs from the
    first one), where the arm and the object are, and the model's gain there over the still frame;
  - the imagined end-effector track (the proprio model) and the goal object carried along it (the
    state reward, where the dataset has simulator labels) against the recorded ones (world_models.tracks);
  - F1 of the success head against the simulator's labels (on imagined frames, and on the real
    frames for reference; with no success step within the horizon F1 is 0 by convention).

Every figure comes with a 95% bootstrap interval over episodes (`ci95`). The episodes are the
held-out ones of the run's split.json (next to the checkpoint) unless `episodes` names others;
`include_new` adds those recorded into the dataset after training, `more_data` whole other datasets.
Writes to out_dir: eval.json (all figures), psnr_vs_horizon.png, and videos/ep*.mp4
(real | imagined | abs diff x2).
"""
from __future__ import annotations

import json
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from infra.atomic import atomic_write_json
from infra.cli import save_config
from infra.provenance import provenance
from robot_data.dataset import EpisodeDataset, encode_preview
from robot_data.sim_labels import read_sim_labels
from world_models.clips import to_model_frames, to_uint8
from world_models.metrics import f1, psnr_per_frame, ssim_per_frame
from world_models.model import WorldModel
from world_models.region import bootstrap_interval, masked_psnr, masked_ssim, moving_mask, pooled_mean
from world_models.tracks import fit_track_models, track_errors


@dataclass
class EvalWorldModelConfig:
    checkpoint: str = "outputs/demo/world_model/world_model.pt"
    data_dir: str = ""  # "" = the data_dir of the run's split.json
    episodes: list[int] = field(default_factory=list)  # [] = the run's held-out episodes
    include_new: bool = False  # also data_dir's episodes that split.json does not list (recorded after training)
    more_data: list[str] = field(default_factory=list)  # other datasets the model never trained on: all their episodes
    max_episodes: int = 0  # 0 = all; else this many, successes and failures alternating
    max_steps: int = 0  # 0 = whole episodes
    steps: int = 0  # sampler steps; 0 = the model's default
    scheduler: str = ""  # "" = the model's; or edm_euler / flow_match_euler
    proprio: str = ""  # a ProprioModel file, "" = fitted on the run's training episodes, "none" = no track figures
    state_reward: str = ""  # a StateReward file, "" = fitted on the training episodes' sim labels, "none" = none
    out_dir: str = ""  # "" = <checkpoint folder>/eval
    videos: int = 2  # side-by-side mp4s of the first episodes
    seed: int = 0
    num_threads: int = 0  # 0 = torch's default
    device: str = "cpu"  # where the model runs: cpu, cuda, cuda:1 (metrics are computed on the CPU)


def _split(cfg: EvalWorldModelConfig) -> tuple[Path, dict | None]:
    path = Path(cfg.checkpoint).parent / "split.json"
    return path, (json.loads(path.read_text()) if path.is_file() else None)


def _episodes_to_use(cfg: EvalWorldModelConfig) -> tuple[str, list[tuple[str, int]]]:
    """(data_dir, [(dataset, episode index), ...]): the episodes to replay, none of them trained on."""
    split_path, split = _split(cfg)
    data_dir = cfg.data_dir or (split["data_dir"] if split else "")
    if not data_dir:
        raise ValueError(f"data_dir: not given and no {split_path} to take it from")
    if cfg.episodes:
        picked = [(data_dir, int(i)) for i in cfg.episodes]
    else:
        if split is None:
            raise ValueError(f"episodes: not given and no {split_path} to take the held-out episodes from; "
                             "name some with episodes=[...]")
        held = list(split["held_out"])
        if cfg.include_new:  # episodes recorded into the dataset after the model was trained: never seen
            trained = set(split["train"]) | set(held)
            held += [i for i in range(len(EpisodeDataset(data_dir, verify=False))) if i not in trained]
        picked = [(data_dir, int(i)) for i in held]
    trained_dirs = {Path(d).resolve() for d in (split or {}).get("extra_train", {})}
    for d in cfg.more_data:
        if Path(d).resolve() in trained_dirs:
            raise ValueError(f"more_data: {d} is in the run's clips.extra_train_dirs ({split_path}): the model "
                             "trained on every episode there; name datasets it never saw")
        picked += [(d, i) for i in range(len(EpisodeDataset(d, verify=False)))]
    if not picked:
        raise ValueError(f"episodes: {split_path} lists no held-out episodes and more_data adds none; "
                         "name some with episodes=[...]")
    if cfg.max_episodes > 0:
        picked = _balanced(picked, cfg.max_episodes)
    return data_dir, picked


def _balanced(picked: list[tuple[str, int]], n: int) -> list[tuple[str, int]]:
    """n of the episodes, successes and failures alternating while both last (a model that only
    draws the expert's motions must not pass on successes alone), in dataset order otherwise."""
    metas = {d: EpisodeDataset(d, verify=False).meta for d in {d for d, _ in picked}}
    wins = [e for e in picked if metas[e[0]][e[1]].success]
    losses = [e for e in picked if not metas[e[0]][e[1]].success]
    out: list[tuple[str, int]] = []
    while len(out) < n and (wins or losses):
        for group in (wins, losses):
            if group and len(out) < n:
                out.append(group.pop(0))
    return out


def _plot(path: Path, psnr: np.ndarray, ssim: np.ndarray, baseline: np.ndarray, moving: np.ndarray,
          moving_base: np.ndarray) -> None:
    import matplotlib

    matplotlib.use("Agg")  # headless
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(1, 2, figsize=(10, 3.5))
    steps = np.arange(1, len(psnr) + 1)
    ax[0].plot(steps, psnr, label="world model, whole frame")
    ax[0].plot(steps, baseline, "--", label="first frame held still, whole frame")
    ax[0].plot(steps, moving, label="world model, moving region")
    ax[0].plot(steps, moving_base, "--", label="first frame held still, moving region")
    ax[0].set(xlabel="steps into the episode (open loop)", ylabel="PSNR (dB)", title="PSNR vs horizon")
    ax[0].legend(fontsize=7)
    ax[1].plot(steps, ssim)
    ax[1].set(xlabel="steps into the episode (open loop)", ylabel="SSIM", title="SSIM vs horizon")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


# per-frame figures of each episode (rows), pooled over frames and bootstrapped over episodes
FRAME_FIGURES = ("psnr", "ssim", "static_psnr", "static_ssim", "moving_psnr", "moving_ssim", "static_moving_psnr",
                 "static_moving_ssim", "moving_gain_db", "moving_fraction", "eef_err", "gripper_err", "object_err",
                 "object_err_recorded")
# one value per episode: the error at its last scored step
END_FIGURES = ("eef_err_end", "object_err_end")


def _load(datasets: dict[str, EpisodeDataset], data_dir: str, i: int, views: list[str]) -> tuple:
    """(frames uint8 [T, H, W, 3 x views], episode, the dataset's episode-level success flag)."""
    if data_dir not in datasets:
        datasets[data_dir] = EpisodeDataset(data_dir, verify=False)
        datasets[data_dir].require_views(views)
    ds = datasets[data_dir]
    ep = ds[i]
    return np.concatenate([ep.frames[v] for v in views], axis=-1), ep, bool(ds.meta[i].success)


def _sim_labels(data_dir: str, i: int, length: int) -> dict | None:
    sim = read_sim_labels(data_dir, i)
    if sim is None or not np.isfinite(sim["object_pos"]).all():
        return None  # no labels, or a scene whose goal has no pick-and-place object
    if sim["info"].get("length", len(sim["grasped"])) != length:
        raise ValueError(f"{data_dir}: the sim labels of episode {i} were made for {sim['info'].get('length')} rows, "
                         f"the episode has {length}: stale labels of another dataset? Delete sim_labels/ and "
                         "label again")
    return sim


def evaluate_world_model(cfg: EvalWorldModelConfig) -> dict:
    """Replay the episodes open loop; writes eval.json, psnr_vs_horizon.png and videos; returns eval.json's content."""
    if cfg.num_threads > 0:
        torch.set_num_threads(cfg.num_threads)
    device = torch.device(cfg.device)
    model = WorldModel.load(cfg.checkpoint).to(device)
    if cfg.scheduler:
        model.set_scheduler(cfg.scheduler)
    data_dir, picked = _episodes_to_use(cfg)
    out = Path(cfg.out_dir) if cfg.out_dir else Path(cfg.checkpoint).parent / "eval"
    save_config(cfg, out / "eval_config.yaml")
    _, split = _split(cfg)
    train = list(split["train"]) if split else []
    proprio, state_reward, track_note = fit_track_models(data_dir, train, model.chunk_len, cfg.proprio,
                                                         cfg.state_reward)
    if proprio is not None and not cfg.proprio:  # kept, so that a second pass scores the same fitted models
        proprio.save(out / "proprio.pt")
    if state_reward is not None and not cfg.state_reward:
        state_reward.save(out / "state_reward.pt")
    steps = cfg.steps or None
    views = list(model.cfg.views)
    rows: dict[str, list[np.ndarray]] = {k: [] for k in FRAME_FIGURES + END_FIGURES}
    per_ep: list[dict] = []
    succ_logits, succ_labels, done_logits, done_labels, succ_real, succ_real_labels = [], [], [], [], [], []
    datasets: dict[str, EpisodeDataset] = {}
    for n, (ep_dir, index) in enumerate(picked):
        frames, ep, ep_success = _load(datasets, ep_dir, index, views)
        # replay A actions; the frame after the last recorded action is not in the dataset, so frames
        # are compared for the first T = min(A, len - 1) steps while the heads are scored on all A
        A = len(ep) if cfg.max_steps <= 0 else min(cfg.max_steps, len(ep))
        T = min(A, len(ep) - 1)
        if T < 1:
            continue
        real = to_model_frames(frames[: T + 1])
        actions = torch.from_numpy(ep.action[:A].astype(np.float32))[None]
        gen = torch.Generator().manual_seed(cfg.seed + n)
        pred_all, s_log, d_log = model.rollout(real[0][None].to(device), None, actions.to(device), steps=steps,
                                               generator=gen)
        pred_all, s_log, d_log = pred_all.float().cpu(), s_log.float().cpu(), d_log.float().cpu()
        pred = pred_all[0, :T]
        with torch.no_grad():  # the head on the real frames: tells head errors from imagination errors
            s_real, _ = model.score_frames(real[1:][None].to(device), real[0][None].to(device))
        succ_real.append(s_real[0].float().cpu())
        succ_real_labels.append(torch.from_numpy(ep.success[:T].astype(np.float32)))
        still = real[:1].expand(T, -1, -1, -1)  # the "nothing moves" reference
        mask = moving_mask(real[1:], real[0])
        fig = {"psnr": psnr_per_frame(pred, real[1:]), "ssim": ssim_per_frame(pred, real[1:]),
               "static_psnr": psnr_per_frame(still, real[1:]), "static_ssim": ssim_per_frame(still, real[1:]),
               "moving_psnr": masked_psnr(pred, real[1:], mask), "moving_ssim": masked_ssim(pred, real[1:], mask),
               "static_moving_psnr": masked_psnr(still, real[1:], mask),
               "static_moving_ssim": masked_ssim(still, real[1:], mask),
               "moving_fraction": mask.float().mean(dim=(1, 2, 3))}
        e_rows = {k: v.numpy().astype(np.float64) for k, v in fig.items()}
        e_rows["moving_gain_db"] = e_rows["moving_psnr"] - e_rows["static_moving_psnr"]
        if proprio is not None:
            sim = _sim_labels(ep_dir, index, len(ep)) if state_reward is not None else None
            errs = track_errors(proprio, ep.state, ep.action, T, state_reward, sim)
            e_rows.update(errs)
            e_rows["eef_err_end"] = errs["eef_err"][-1:]
            if "object_err" in errs:
                e_rows["object_err_end"] = errs["object_err"][-1:]
        for k, v in e_rows.items():
            rows[k].append(v)
        done = ep.success[:A] | (np.arange(A) >= len(ep) - 1)
        succ_logits.append(s_log[0])
        succ_labels.append(torch.from_numpy(ep.success[:A].astype(np.float32)))
        done_logits.append(d_log[0])
        done_labels.append(torch.from_numpy(done.astype(np.float32)))
        per_ep.append({"data_dir": ep_dir, "episode": index, "task_id": ep.task_id, "source": ep.source, "steps": T,
                       **{k: float(np.nanmean(v)) if np.isfinite(v).any() else None for k, v in e_rows.items()},
                       "success": bool(ep.success[:A].any()), "episode_success": ep_success,
                       "predicted_success": bool((s_log[0] > 0).any())})
        if n < cfg.videos:
            r, p = to_uint8(real[1:]), to_uint8(pred)
            diff = np.clip(np.abs(r.astype(np.int16) - p.astype(np.int16)) * 2, 0, 255).astype(np.uint8)
            side = np.concatenate([r, p, diff], axis=2)  # [T, H, 3W, ch]
            side = np.concatenate([side[..., 3 * v: 3 * v + 3] for v in range(side.shape[-1] // 3)], axis=1)
            encode_preview(out / "videos" / f"ep{index:04d}.mp4", side.repeat(2, 1).repeat(2, 2), fps=10)
    if not per_ep:
        raise ValueError("no episode with at least 2 frames to evaluate")
    H = max(len(r) for r in rows["psnr"])

    def by_step(name: str) -> np.ndarray:  # mean over the episodes that reach each step (and have a value there)
        a = np.full((len(rows[name]), H), np.nan)
        for i, r in enumerate(rows[name]):
            a[i, : len(r)] = r
        with warnings.catch_warnings():  # a step no episode has a value at (nothing moved yet) is NaN, said once
            warnings.simplefilter("ignore", RuntimeWarning)
            return np.nanmean(a, axis=0)

    figures = {k: pooled_mean(rows[k]) for k in FRAME_FIGURES + END_FIGURES}
    ci95 = {k: bootstrap_interval(rows[k], seed=cfg.seed) for k in FRAME_FIGURES + END_FIGURES if rows[k]}
    result = {
        "checkpoint": cfg.checkpoint, "data_dir": data_dir, "episodes": [e["episode"] for e in per_ep],
        "episode_data": [e["data_dir"] for e in per_ep],
        "successes": sum(e["episode_success"] for e in per_ep),
        "failures": sum(not e["episode_success"] for e in per_ep),
        "sampler": model.cfg.sampler.scheduler, "sampler_steps": steps or model.cfg.sampler.steps,
        **figures, "ci95": ci95,
        "object_episodes": len(rows["object_err"]), "tracks_note": track_note,
        "proprio": cfg.proprio or (str(out / "proprio.pt") if proprio is not None else "none"),
        "state_reward": cfg.state_reward or (str(out / "state_reward.pt") if state_reward is not None else "none"),
        "success_f1": f1(torch.cat(succ_logits), torch.cat(succ_labels)),
        "done_f1": f1(torch.cat(done_logits), torch.cat(done_labels)),
        "success_f1_real_frames": f1(torch.cat(succ_real), torch.cat(succ_real_labels)),
        "success_labels": int(torch.cat(succ_labels).sum()),
        # the outcome an RL episode is scored by: did the head fire at any step, against the simulator
        "episode_success_f1": f1(torch.tensor([1.0 if e["predicted_success"] else -1.0 for e in per_ep]),
                                 torch.tensor([float(e["success"]) for e in per_ep])),
        **{f"{k}_per_step": by_step(k).tolist() for k in ("psnr", "ssim", "static_psnr", "moving_psnr",
                                                          "static_moving_psnr")},
        "per_episode": per_ep,
        "provenance": provenance(cfg.seed, {"data_dir": data_dir, "episodes": [e["episode"] for e in per_ep]}),
    }
    out.mkdir(parents=True, exist_ok=True)
    _plot(out / "psnr_vs_horizon.png", *(np.asarray(result[f"{k}_per_step"]) for k in
                                         ("psnr", "ssim", "static_psnr", "moving_psnr", "static_moving_psnr")))
    atomic_write_json(out / "eval.json", _finite(result), indent=1)
    print(f"open loop over {len(per_ep)} episodes ({sum(e['steps'] for e in per_ep)} steps): "
          f"PSNR {result['psnr']:.2f} dB (first frame held still: {result['static_psnr']:.2f}), "
          f"moving region {result['moving_psnr']:.2f} dB (still: {result['static_moving_psnr']:.2f}), "
          f"SSIM {result['ssim']:.3f} (still: {result['static_ssim']:.3f}), "
          f"success F1 {result['success_f1']:.2f} (on real frames {result['success_f1_real_frames']:.2f}; "
          f"{result['success_labels']} success steps), done F1 {result['done_f1']:.2f}, "
          f"episode outcome F1 {result['episode_success_f1']:.2f}")
    print(f"  {out / 'eval.json'}  {out / 'psnr_vs_horizon.png'}")
    return result


def _finite(x: object) -> object:
    """NaN -> None throughout, so that eval.json is strict JSON (a figure with no value, e.g. no labels)."""
    if isinstance(x, float):
        return x if np.isfinite(x) else None
    if isinstance(x, dict):
        return {k: _finite(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_finite(v) for v in x]
    return x


__all__ = ["EvalWorldModelConfig", "evaluate_world_model"]
