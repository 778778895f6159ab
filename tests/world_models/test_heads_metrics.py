"""Success/done head and the fidelity metrics."""
import math

import torch

from world_models.heads import HeadConfig, SuccessDoneHead, degrade
from world_models.metrics import f1, fidelity, psnr_per_frame, ssim_per_frame


def test_head_shapes_and_degrade():
    head = SuccessDoneHead(HeadConfig(channels=[8, 16]), image_channels=3)
    frames = torch.rand(2, 5, 3, 16, 16) * 2 - 1
    s, d = head(frames, frames[:, 0])
    assert s.shape == (2, 5) and d.shape == (2, 5)
    g = torch.Generator().manual_seed(0)
    out = degrade(frames, 1.5, 0.1, g)
    assert out.shape == frames.shape and out.abs().max() <= 1
    assert not torch.allclose(out, frames)
    assert torch.equal(degrade(frames, 0.0, 0.0, g), frames.clamp(-1, 1)) or torch.allclose(
        degrade(frames, 0.0, 0.0, g), frames, atol=1e-5)


def test_psnr_and_ssim():
    real = torch.rand(6, 3, 16, 16) * 2 - 1
    noisy = (real + 0.1 * torch.randn(6, 3, 16, 16, generator=torch.Generator().manual_seed(0))).clamp(-1, 1)
    p = psnr_per_frame(noisy, real)
    assert p.shape == (6,)
    mse01 = ((noisy - real) / 2).pow(2).flatten(1).mean(1)
    assert torch.allclose(p, -10 * torch.log10(mse01), atol=1e-3)  # PSNR on [0, 1] images
    s = ssim_per_frame(noisy, real)
    assert s.shape == (6,) and (s < 1).all() and torch.allclose(ssim_per_frame(real, real), torch.ones(6), atol=1e-5)
    # two views stacked as channels are scored per view and averaged
    two = torch.cat([real, real], 1)
    assert psnr_per_frame(torch.cat([noisy, real], 1), two).shape == (6,)
    fig = fidelity(noisy[None].expand(2, -1, -1, -1, -1), real[None].expand(2, -1, -1, -1, -1))
    per_step, mean = fig["psnr_per_step"], fig["psnr"]
    assert isinstance(per_step, list) and isinstance(mean, float)
    assert len(per_step) == 6 and math.isclose(mean, float(p.mean()), rel_tol=1e-5)


def test_f1():
    labels = torch.tensor([0, 0, 1, 1.0])
    assert f1(torch.tensor([-5, -5, 5, 5.0]), labels) == 1.0
    assert abs(f1(torch.tensor([5, -5, 5, -5.0]), labels) - 0.5) < 1e-6
