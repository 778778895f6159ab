"""Switches against open-loop drift: residual to the anchor, one-step noise level, context noise."""
import dataclasses

import pytest
import torch

from tests.world_models.conftest import tiny_model_config
from world_models.denoiser import Denoiser, DenoiserConfig
from world_models.losses import noise_context
from world_models.model import WorldModel


def _den(**kw) -> Denoiser:
    torch.manual_seed(0)
    return Denoiser(dataclasses.replace(tiny_model_config().denoiser, **kw))


def _frames(B=3, C=2, ch=3, size=16):
    g = torch.Generator().manual_seed(1)
    ctx = torch.rand(B, C, ch, size, size, generator=g) * 2 - 1
    anchor = torch.rand(B, ch, size, size, generator=g) * 2 - 1
    return ctx, anchor


def test_reference_frame_follows_residual_to():
    ctx, anchor = _frames()
    assert torch.equal(_den(residual_to="last").reference(ctx, anchor), ctx[:, -1:])
    assert torch.equal(_den(residual_to="anchor").reference(ctx, anchor), anchor[:, None])
    assert torch.equal(_den(residual=False).reference(ctx, anchor), torch.zeros_like(ctx[:, -1:]))


def test_checkpoints_from_before_the_switch_stay_relative_to_the_last_frame(tmp_path):
    model = WorldModel(tiny_model_config())
    assert model.cfg.denoiser.residual_to == "anchor"  # the default now
    model.save(tmp_path / "wm.pt")
    blob = torch.load(tmp_path / "wm.pt", weights_only=True)
    del blob["config"]["denoiser"]["residual_to"]  # what an older checkpoint holds
    torch.save(blob, tmp_path / "old.pt")
    assert WorldModel.load(tmp_path / "old.pt").cfg.denoiser.residual_to == "last"
    assert WorldModel.load(tmp_path / "wm.pt").cfg.denoiser.residual_to == "anchor"


def test_anchor_residual_sampling_adds_the_anchor_back():
    """With residual_to=anchor a denoiser that predicts a zero residual returns the anchor itself."""
    cfg = dataclasses.replace(tiny_model_config(), denoiser=dataclasses.replace(
        tiny_model_config().denoiser, residual_to="anchor", sigma_max=1e-3, sigma_min=1e-4))
    model = WorldModel(cfg).eval()
    ctx, anchor = _frames(B=2)
    with torch.no_grad():
        for p in model.denoiser.parameters():
            p.zero_()  # F = 0; with sigma tiny, c_skip ~ 1 and x0 ~ the (tiny) noise: frames ~ reference
    frames, _, _ = model.predict(ctx, anchor, torch.zeros(2, cfg.denoiser.chunk_len, 7), steps=1,
                                 generator=torch.Generator().manual_seed(0))
    expected = anchor[:, None].expand_as(frames)
    assert (frames - expected).abs().max() < 1e-2
    assert (frames - ctx[:, -1:].expand_as(frames)).abs().max() > 0.5  # not the last context frame


def test_sigma_max_prob_puts_that_share_at_sigma_max():
    g = torch.Generator().manual_seed(0)
    plain = _den().sample_sigma(4000, g)
    heavy = _den(sigma_max_prob=0.5).sample_sigma(4000, torch.Generator().manual_seed(0))
    at_max = lambda s: (s == 5.0).float().mean().item()  # noqa: E731  (tiny config keeps sigma_max 5)
    assert _den().cfg.sigma_max == 5.0
    assert at_max(plain) < 0.1
    assert 0.45 < at_max(heavy) < 0.60  # half forced, plus the log-normal's own clipped tail
    # zero keeps the old random stream: runs and resumes from before the switch draw the same levels
    assert torch.equal(plain, _den(sigma_max_prob=0.0).sample_sigma(4000, torch.Generator().manual_seed(0)))


@pytest.mark.parametrize("kw, field", [({"residual_to": "first"}, "denoiser.residual_to"),
                                       ({"sigma_max_prob": 1.5}, "denoiser.sigma_max_prob")])
def test_bad_drift_switches_name_the_field(kw, field):
    with pytest.raises(ValueError, match=field):
        Denoiser(DenoiserConfig(**kw))


def test_context_noise_touches_only_the_context():
    ctx, anchor = _frames(B=64)
    batch = {"context": ctx.clamp(-0.5, 0.5), "anchor": anchor, "target": ctx[:, :1].clone()}
    out = noise_context(batch, 0.1, torch.Generator().manual_seed(0))
    assert torch.equal(out["anchor"], batch["anchor"]) and torch.equal(out["target"], batch["target"])
    std = (out["context"] - batch["context"]).flatten(1).std(1)
    assert 0.0 <= std.min() and std.max() <= 0.1 + 5e-3 and std.mean() == pytest.approx(0.05, abs=0.01)
    assert noise_context(batch, 0.0) is batch  # off: nothing drawn, nothing changed


def _objective(**kw):
    from world_models.losses import WorldModelObjective

    torch.manual_seed(0)
    return WorldModelObjective(WorldModel(tiny_model_config()), **kw)


def test_moving_weight_favours_pixels_that_differ_from_the_anchor():
    obj = _objective(moving_weight=3.0, moving_threshold=0.1)
    anchor = torch.zeros(2, 3, 16, 16)
    target = torch.zeros(2, 4, 3, 16, 16)
    target[0, :, 1, :4, :4] = 0.5  # clip 0: a 4 x 4 patch moved (one channel is enough); clip 1: nothing moved
    target[0, :, 2, 8:, 8:] = 0.05  # below the threshold: not moving
    w = obj.pixel_weights(target, anchor)
    assert w.shape == (2, 4, 1, 16, 16)
    assert torch.allclose(w.flatten(1).mean(1), torch.ones(2))  # the loss keeps its scale
    assert torch.allclose(w[0, :, 0, :4, :4] / w[0, :, 0, 8:, 8:].mean(), torch.full((4, 4, 4), 4.0))
    assert torch.allclose(w[1], torch.ones_like(w[1]))  # nothing moved: uniform


def test_moving_weight_changes_the_loss_only_when_asked():
    from world_models.losses import draw_noise

    cfg = tiny_model_config().denoiser
    g = torch.Generator().manual_seed(0)
    B, C, K, S = 2, cfg.context_frames, cfg.chunk_len, cfg.image_size
    batch = {"context": torch.rand(B, C, 3, S, S, generator=g) * 2 - 1, "anchor": torch.zeros(B, 3, S, S),
             "target": torch.zeros(B, K, 3, S, S), "actions": torch.zeros(B, K, 7),
             "success": torch.zeros(B, K), "done": torch.zeros(B, K)}
    batch["target"][:, :, :, :4, :4] = 0.8
    sigma = torch.full((B,), 0.5)
    plain, weighted = _objective(), _objective(moving_weight=4.0)
    _, noise, _ = draw_noise(plain.model, batch, g)
    a = plain(batch, sigma, noise, batch["target"])
    b = weighted(batch, sigma, noise, batch["target"])
    assert torch.equal(a["mse"], b["mse"])  # the logged MSE stays unweighted
    assert not torch.allclose(a["denoise"], b["denoise"])
    assert torch.equal(_objective(moving_weight=0.0)(batch, sigma, noise, batch["target"])["denoise"], a["denoise"])


@pytest.mark.parametrize("kw, field", [({"moving_weight": -1.0}, "moving_weight"),
                                       ({"moving_weight": float("nan")}, "moving_weight"),
                                       ({"moving_threshold": 0.0}, "moving_threshold")])
def test_bad_moving_weights_name_the_field(kw, field):
    with pytest.raises(ValueError, match=field):
        _objective(**kw)
