"""Fidelity metrics for open-loop replays (torchmetrics): PSNR and SSIM per frame, F1 of the heads.

Frames are float in [-1, 1], shaped [T, ch, H, W] or [B, T, ch, H, W]; metrics are computed on
[0, 1] images (data_range 1) per frame, per view (ch = 3 x views is split into RGB views).
"""
from __future__ import annotations

import torch
from torchmetrics.functional.classification import binary_f1_score
from torchmetrics.functional.image import peak_signal_noise_ratio, structural_similarity_index_measure


def _per_frame_views(x: torch.Tensor) -> torch.Tensor:
    """[..., T, ch, H, W] in [-1, 1] -> [N, 3, H, W] in [0, 1], N = (batch x) T x views."""
    x = x.detach().float().clamp(-1, 1).add(1).div(2)
    ch, H, W = x.shape[-3:]
    return x.reshape(-1, ch // 3, 3, H, W).reshape(-1, 3, H, W)


def psnr_per_frame(pred: torch.Tensor, real: torch.Tensor) -> torch.Tensor:
    """PSNR in dB per frame: [..., T] (views averaged)."""
    if pred.shape != real.shape:
        raise ValueError(f"psnr: shapes differ: {tuple(pred.shape)} vs {tuple(real.shape)}")
    p, r = _per_frame_views(pred), _per_frame_views(real)
    v = pred.shape[-3] // 3
    out = peak_signal_noise_ratio(p, r, data_range=1.0, reduction="none", dim=(1, 2, 3))
    return out.reshape(*pred.shape[:-3], v).mean(-1)


def ssim_per_frame(pred: torch.Tensor, real: torch.Tensor) -> torch.Tensor:
    """SSIM (Gaussian window 11, sigma 1.5) per frame: [..., T] (views averaged)."""
    if pred.shape != real.shape:
        raise ValueError(f"ssim: shapes differ: {tuple(pred.shape)} vs {tuple(real.shape)}")
    p, r = _per_frame_views(pred), _per_frame_views(real)
    v = pred.shape[-3] // 3
    out = structural_similarity_index_measure(p, r, data_range=1.0, reduction="none")
    assert isinstance(out, torch.Tensor)  # a tuple only with return_full_image/return_contrast_sensitivity
    return out.reshape(*pred.shape[:-3], v).mean(-1)


def f1(logits: torch.Tensor, labels: torch.Tensor, threshold: float = 0.5) -> float:
    """Binary F1 of sigmoid(logits) >= threshold against 0/1 labels (any matching shapes).

    0.0 when there are no positives in either predictions or labels (torchmetrics' convention).
    """
    probs = torch.sigmoid(logits.detach().float()).flatten()
    return float(binary_f1_score(probs, labels.detach().flatten().long(), threshold=threshold))


def fidelity(pred: torch.Tensor, real: torch.Tensor) -> dict[str, object]:
    """Per-step and mean PSNR/SSIM of one or a batch of replays ([B,] T, ch, H, W)."""
    psnr = psnr_per_frame(pred, real)
    ssim = ssim_per_frame(pred, real)
    if psnr.ndim > 1:  # average over the batch per step
        psnr, ssim = psnr.mean(0), ssim.mean(0)
    return {"psnr": float(psnr.mean()), "ssim": float(ssim.mean()),
            "psnr_per_step": psnr.tolist(), "ssim_per_step": ssim.tolist()}
