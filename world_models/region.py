"""Fidelity where the scene changes: PSNR/SSIM over the moving region of an episode, and episode-level
bootstrap intervals for any per-frame figure.

Whole-frame PSNR/SSIM of a LIBERO replay are dominated by the static table and walls: holding the
first frame still scores within ~1.5 dB of a trained model (issue: world-model fidelity). The moving
region of real frame t is where it differs from the episode's first frame (the arm, the object, their
shadows), dilated by a few pixels so that a prediction that draws the arm slightly off is scored on
both the real and the predicted arm's place:

    mask  = dilate(any_channel(|real_t - real_0| > tol), radius)       bool [T, V, H, W]
    PSNR  = 10 log10(1 / mean over masked pixels of (pred - real)^2)   on [0, 1] images
    SSIM  = the SSIM map (Gaussian window 11, sigma 1.5) averaged over masked pixels

Frames are float in [-1, 1], shaped [T, ch, H, W] with ch = 3 x views, as in world_models.metrics.
A frame whose mask is empty (nothing has moved yet) has no moving-region figure: NaN.
"""
from __future__ import annotations

import numpy as np
import torch
from torch.nn import functional as F
from torchmetrics.functional.image import structural_similarity_index_measure

# A pixel moved when a channel changed by more than 10/255: MuJoCo renders a static scene identically
# frame after frame, so this only misses changes too faint to matter, and leaves out video-codec grain.
MOVE_TOL = 10 / 255
# 2 px at 64 px (a 5x5 square): the arm's edge is a few pixels wide; a predicted arm 1-2 px off still
# falls inside the mask, so the figure punishes drawing it elsewhere, not only blurring it.
MOVE_DILATE = 2


def _views01(x: torch.Tensor) -> torch.Tensor:
    """[T, ch, H, W] in [-1, 1] -> [T, V, 3, H, W] in [0, 1]."""
    T, ch, H, W = x.shape
    return x.detach().float().clamp(-1, 1).add(1).div(2).reshape(T, ch // 3, 3, H, W)


def moving_mask(real: torch.Tensor, first: torch.Tensor, tol: float = MOVE_TOL,
                dilate: int = MOVE_DILATE) -> torch.Tensor:
    """Where real frames [T, ch, H, W] differ from the first frame [ch, H, W]: bool [T, V, H, W]."""
    if real.ndim != 4 or first.shape != real.shape[1:]:
        raise ValueError(f"moving_mask: expected real [T, ch, H, W] and first [ch, H, W], "
                         f"got {tuple(real.shape)} and {tuple(first.shape)}")
    r, f = _views01(real), _views01(first[None])
    moved = ((r - f).abs() > tol).any(dim=2).float()  # [T, V, H, W]
    if dilate > 0:  # max-pooling a 0/1 image with stride 1 is a binary dilation by a square
        moved = F.max_pool2d(moved, kernel_size=2 * dilate + 1, stride=1, padding=dilate)
    return moved > 0.5


def _masked_mean(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """values and mask [T, V, H, W] -> mean over masked pixels per frame [T] (views pooled); NaN if empty."""
    m = mask.float()
    n = m.sum(dim=(1, 2, 3))
    return torch.where(n > 0, (values * m).sum(dim=(1, 2, 3)) / n.clamp_min(1), torch.full_like(n, float("nan")))


def masked_psnr(pred: torch.Tensor, real: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """PSNR in dB over the masked pixels of each frame: pred/real [T, ch, H, W], mask [T, V, H, W] -> [T]."""
    if pred.shape != real.shape:
        raise ValueError(f"masked_psnr: shapes differ: {tuple(pred.shape)} vs {tuple(real.shape)}")
    se = (_views01(pred) - _views01(real)).pow(2).mean(dim=2)  # [T, V, H, W], the 3 colours averaged
    mse = _masked_mean(se, mask)
    # 1e-10 caps an exact match at 100 dB instead of inf, which would swamp any average
    return 10 * torch.log10(1.0 / mse.clamp_min(1e-10))


def masked_ssim(pred: torch.Tensor, real: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """The SSIM map averaged over the masked pixels of each frame: [T, ch, H, W] x2, [T, V, H, W] -> [T]."""
    if pred.shape != real.shape:
        raise ValueError(f"masked_ssim: shapes differ: {tuple(pred.shape)} vs {tuple(real.shape)}")
    p, r = _views01(pred), _views01(real)
    T, V, _, H, W = p.shape
    _, full = structural_similarity_index_measure(p.reshape(T * V, 3, H, W), r.reshape(T * V, 3, H, W),
                                                  data_range=1.0, reduction="none", return_full_image=True)
    return _masked_mean(full.reshape(T, V, 3, H, W).mean(dim=2), mask)


def pooled_mean(rows: list[np.ndarray]) -> float:
    """The mean of every finite value of all rows (per-frame figures of each episode); NaN if none."""
    vals = np.concatenate([np.asarray(r, np.float64).ravel() for r in rows]) if rows else np.zeros(0)
    vals = vals[np.isfinite(vals)]
    return float(vals.mean()) if len(vals) else float("nan")


def bootstrap_interval(rows: list[np.ndarray], resamples: int = 2000, seed: int = 0,
                       level: float = 0.95) -> tuple[float, float]:
    """Percentile interval of `pooled_mean` with the episodes (rows) resampled with replacement.

    Why episodes and not frames: the frames of one episode share its scene and its drift, so they are
    not independent; the episode is the unit another draw of held-out data would change."""
    # the values pooled_mean averages: finite ones (an exact match's PSNR is inf, a still mask's NaN)
    finite = [np.asarray(r, np.float64)[np.isfinite(np.asarray(r, np.float64))] for r in rows]
    sums = np.array([f.sum() for f in finite])
    counts = np.array([len(f) for f in finite], np.float64)
    if len(rows) == 0 or counts.sum() == 0:
        return float("nan"), float("nan")
    idx = np.random.default_rng(seed).integers(0, len(rows), size=(resamples, len(rows)))
    n = counts[idx].sum(axis=1)
    means = sums[idx].sum(axis=1)[n > 0] / n[n > 0]  # a resample of only empty episodes has no mean
    lo, hi = np.quantile(means, [(1 - level) / 2, (1 + level) / 2])
    return float(lo), float(hi)


__all__ = ["MOVE_DILATE", "MOVE_TOL", "bootstrap_interval", "masked_psnr", "masked_ssim", "moving_mask",
           "pooled_mean"]
