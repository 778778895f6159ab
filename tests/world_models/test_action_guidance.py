"""Action dropout in training and action guidance in sampling (classifier-free guidance on the actions alone)."""
import dataclasses

import pytest
import torch

from tests.world_models.conftest import tiny_model_config
from world_models.losses import WorldModelObjective, draw_noise, hide_actions
from world_models.model import WorldModel
from world_models.sampler import Sampler, SamplerConfig


def _null(model: WorldModel) -> torch.nn.Parameter:
    p = model.denoiser.null_actions
    assert p is not None
    return p


def _guided(dropout: float = 0.2, guidance: float = 1.0) -> WorldModel:
    cfg = tiny_model_config()
    cfg = dataclasses.replace(cfg, denoiser=dataclasses.replace(cfg.denoiser, action_dropout=dropout),
                              sampler=dataclasses.replace(cfg.sampler, action_guidance=guidance))
    torch.manual_seed(0)
    model = WorldModel(cfg).eval()
    with torch.no_grad():  # a null action unlike the test's actions, as training makes it
        _null(model).fill_(0.5)
    return model


def _inputs(B: int = 2):
    g = torch.Generator().manual_seed(1)
    ctx = torch.rand(B, 2, 3, 16, 16, generator=g) * 2 - 1
    return ctx, ctx[:, 0], torch.rand(B, 4, 7, generator=g) * 2 - 1


def test_guidance_one_is_plain_conditional_sampling_and_w_extrapolates_from_the_null_action():
    model = _guided()
    den = model.denoiser
    ctx, anc, act = _inputs()
    noise = torch.randn(2, 4, 3, 16, 16, generator=torch.Generator().manual_seed(2))
    plain = model.sampler.sample(den, ctx, anc, act, steps=1, noise=noise)
    assert torch.equal(model.sampler.sample(den, ctx, anc, act, steps=1, noise=noise, guidance=1.0), plain)
    # one EDM step from sigma_max ends at the clean estimate: the guided one is free + w (given - free)
    sigma = torch.full((2,), den.cfg.sigma_max)
    with torch.no_grad():
        given = den(noise * den.cfg.sigma_max, sigma, ctx, anc, act)
        free = den(noise * den.cfg.sigma_max, sigma, ctx, anc, act, hidden=torch.ones(2, dtype=torch.bool))
    assert not torch.allclose(given, free, atol=1e-4)  # the null action is another input
    ref = den.reference(ctx, anc)
    for w in (0.0, 2.5):
        guided = model.sampler.sample(den, ctx, anc, act, steps=1, noise=noise, guidance=w)
        assert torch.allclose(guided, (free + w * (given - free) + ref).clamp(-1, 1), atol=1e-5)
    # the model's own setting is the default, and predict_encoded passes a per-call value through
    model2 = _guided(guidance=2.5)
    a, _, _ = model2.predict_encoded(ctx, anc, act, steps=1, noise=noise)
    b, _, _ = model2.predict_encoded(ctx, anc, act, steps=1, noise=noise, guidance=1.0)
    assert torch.allclose(a, model.sampler.sample(den, ctx, anc, act, steps=1, noise=noise, guidance=2.5), atol=1e-5)
    assert torch.allclose(b, plain, atol=1e-6)


def test_guidance_with_more_steps_and_flow_match_stays_in_range():
    model = _guided()
    ctx, anc, act = _inputs()
    for scheduler in ("edm_euler", "flow_match_euler"):
        sampler = Sampler(SamplerConfig(scheduler=scheduler, steps=3))
        x = sampler.sample(model.denoiser, ctx, anc, act, generator=torch.Generator().manual_seed(0), guidance=3.0)
        y = sampler.sample(model.denoiser, ctx, anc, act, generator=torch.Generator().manual_seed(0))
        assert x.shape == (2, 4, 3, 16, 16) and x.abs().max() <= 1 and not torch.allclose(x, y, atol=1e-4)


def test_a_model_without_dropout_has_no_null_action_and_refuses_guidance():
    torch.manual_seed(0)
    plain = WorldModel(tiny_model_config()).eval()
    assert not plain.denoiser.guidable and not any("null" in n for n, _ in plain.named_parameters())
    ctx, anc, act = _inputs()
    with pytest.raises(ValueError, match="action_guidance: 2.0 needs a world model trained with"):
        plain.predict_encoded(ctx, anc, act, guidance=2.0)
    with pytest.raises(ValueError, match="action_dropout > 0"):
        plain.denoiser.hide(act, torch.ones(2, dtype=torch.bool))
    x, _, _ = plain.predict_encoded(ctx, anc, act, guidance=1.0)  # 1 is no guidance: allowed
    assert torch.isfinite(x).all()
    cfg = tiny_model_config()
    with pytest.raises(ValueError,
                       match="sampler.action_guidance: 2.0 needs a world model trained with "
                             "denoiser.action_dropout > 0"):
        WorldModel(dataclasses.replace(cfg, sampler=dataclasses.replace(cfg.sampler, action_guidance=2.0)))


@pytest.mark.parametrize("w", [-1.0, float("nan"), float("inf")])
def test_bad_guidance_is_refused_with_the_field(w):
    with pytest.raises(ValueError, match="sampler.action_guidance: expected a finite number >= 0"):
        Sampler(SamplerConfig(action_guidance=w))
    model = _guided()
    ctx, anc, act = _inputs()
    with pytest.raises(ValueError, match="sampler.action_guidance"):
        model.predict_encoded(ctx, anc, act, guidance=w)


@pytest.mark.parametrize("p", [-0.1, 1.0])
def test_bad_dropout_is_refused_with_the_field(p):
    cfg = tiny_model_config()
    with pytest.raises(ValueError, match="denoiser.action_dropout: expected a share in"):
        WorldModel(dataclasses.replace(cfg, denoiser=dataclasses.replace(cfg.denoiser, action_dropout=p)))


def _batch(B: int = 64):
    cfg = tiny_model_config().denoiser
    g = torch.Generator().manual_seed(0)
    C, K, S = cfg.context_frames, cfg.chunk_len, cfg.image_size
    return {"context": torch.rand(B, C, 3, S, S, generator=g) * 2 - 1, "anchor": torch.zeros(B, 3, S, S),
            "target": torch.rand(B, K, 3, S, S, generator=g) * 2 - 1, "actions": torch.rand(B, K, 7, generator=g),
            "success": torch.zeros(B, K), "done": torch.zeros(B, K)}


def test_dropout_hides_about_its_share_of_clips_and_trains_the_null_action():
    model = _guided(dropout=0.25).train()
    batch = _batch()
    g = torch.Generator().manual_seed(0)
    out = hide_actions(model, batch, g)
    share = out["hidden"].float().mean().item()
    assert out["hidden"].dtype == torch.bool and 0.1 < share < 0.45
    assert torch.equal(out["actions"], batch["actions"])  # the denoiser swaps them itself, inside forward
    obj = WorldModelObjective(model)
    sigma, noise, degraded = draw_noise(model, out, g)
    obj(out, sigma, noise, degraded)["loss"].backward()
    grad = _null(model).grad
    assert grad is not None and grad.abs().sum() > 0  # the null action is learned from the hidden clips
    model.zero_grad()
    shown = dict(out, hidden=torch.zeros_like(out["hidden"]))
    obj(shown, sigma, noise, degraded)["loss"].backward()
    grad = _null(model).grad
    assert grad is None or grad.abs().sum() == 0


def test_no_dropout_draws_nothing_and_keeps_the_batch():
    torch.manual_seed(0)
    plain = WorldModel(tiny_model_config())
    batch = _batch(4)
    g = torch.Generator().manual_seed(3)
    assert hide_actions(plain, batch, g) is batch
    assert torch.equal(torch.rand(1, generator=g), torch.rand(1, generator=torch.Generator().manual_seed(3)))


def test_the_null_action_and_guidance_survive_save_and_load(tmp_path):
    model = _guided(guidance=2.0)
    model.save(tmp_path / "wm.pt")
    back = WorldModel.load(tmp_path / "wm.pt")
    assert back.cfg.denoiser.action_dropout == 0.2 and back.cfg.sampler.action_guidance == 2.0
    assert torch.equal(_null(back), _null(model))
