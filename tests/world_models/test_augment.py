"""Style augmentation: one colour map per clip, identical on every frame; structure kept; switchable."""
import torch

from world_models.augment import StyleAugConfig, augment_clip, sample_style


def _batch(B=4, T=3):
    g = torch.Generator().manual_seed(0)
    frames = torch.rand(B, 1, 3, 8, 8, generator=g) * 1.6 - 0.8
    # every frame of a clip is the same image: a consistent style keeps them the same
    return {"context": frames.expand(B, T, 3, 8, 8).clone(), "target": frames.expand(B, 2, 3, 8, 8).clone(),
            "anchor": frames[:, 0].clone(), "actions": torch.zeros(B, 2, 7)}


def test_same_style_on_every_frame_of_a_clip():
    b = _batch()
    out = augment_clip(b, StyleAugConfig(prob=1.0), torch.Generator().manual_seed(1))
    ref = out["anchor"]
    for k in ("context", "target"):
        assert torch.allclose(out[k], ref[:, None].expand_as(out[k]), atol=1e-6)
    assert not torch.allclose(out["anchor"], b["anchor"], atol=1e-3)  # the style did change
    assert not torch.allclose(out["anchor"][0], out["anchor"][1] - b["anchor"][1] + b["anchor"][0], atol=1e-3)
    assert torch.equal(out["actions"], b["actions"])


def test_structure_is_kept():
    # a per-pixel colour map cannot move an edge: the augmented image's spatial gradients are a
    # per-clip linear map of the original's, so a pixel-wise flat region stays flat
    b = _batch(B=2)
    b["anchor"][:, :, :, :4] = 0.3
    out = augment_clip(b, StyleAugConfig(prob=1.0, brightness=0.0), torch.Generator().manual_seed(2))
    flat = out["anchor"][:, :, :, :4]
    assert torch.allclose(flat, flat[..., :1, :1].expand_as(flat), atol=1e-6)


def test_off_switch_and_identity_maps():
    b = _batch()
    off = augment_clip(b, StyleAugConfig(enabled=False), torch.Generator().manual_seed(1))
    assert all(torch.equal(off[k], b[k]) for k in b)
    m, bias = sample_style(StyleAugConfig(prob=0.0), 3, torch.Generator().manual_seed(0))
    assert torch.equal(m, torch.eye(3).expand(3, 3, 3)) and torch.equal(bias, torch.zeros(3, 3))


def test_grey_stays_grey_under_hue_and_saturation():
    grey = torch.zeros(1, 1, 3, 2, 2) + 0.2
    cfg = StyleAugConfig(prob=1.0, brightness=0.0, contrast=0.0, gain=0.0, hue=0.5, saturation=0.9)
    out = augment_clip({"context": grey}, cfg, torch.Generator().manual_seed(0))["context"]
    assert torch.allclose(out, grey, atol=1e-5)
