"""Samplers: diffusers EDM Euler and flow-match Euler over the same EDM denoiser, swappable by config."""
import pytest
import torch

from tests.world_models.conftest import tiny_model_config
from world_models.model import WorldModel
from world_models.sampler import Sampler, SamplerConfig


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    return WorldModel(tiny_model_config()).eval()


def _inputs():
    g = torch.Generator().manual_seed(1)
    ctx = torch.rand(2, 2, 3, 16, 16, generator=g) * 2 - 1
    return ctx, ctx[:, 0], torch.rand(2, 4, 7, generator=g) * 2 - 1


def test_scheduler_swap(model):
    from diffusers import EDMEulerScheduler, FlowMatchEulerDiscreteScheduler

    ctx, anc, act = _inputs()
    model.set_scheduler("edm_euler")
    assert isinstance(model.sampler.make_scheduler(model.denoiser), EDMEulerScheduler)
    edm1, _, _ = model.predict(ctx, anc, act, steps=1, generator=torch.Generator().manual_seed(0))
    edm3, _, _ = model.predict(ctx, anc, act, steps=3, generator=torch.Generator().manual_seed(0))
    model.set_scheduler("flow_match_euler", steps=3)
    assert model.cfg.sampler.scheduler == "flow_match_euler"
    assert isinstance(model.sampler.make_scheduler(model.denoiser), FlowMatchEulerDiscreteScheduler)
    fm1, _, _ = model.predict(ctx, anc, act, steps=1, generator=torch.Generator().manual_seed(0))
    fm3, _, _ = model.predict(ctx, anc, act, generator=torch.Generator().manual_seed(0))
    model.set_scheduler("edm_euler")
    # one step from sigma_max is the same computation in both parameterisations
    assert torch.allclose(edm1, fm1, atol=1e-4)
    # more steps: different intermediate noise levels, so different (but valid) frames
    assert not torch.allclose(edm3, fm3, atol=1e-3)
    for x in (edm3, fm3):
        assert x.shape == (2, 4, 3, 16, 16) and torch.isfinite(x).all() and x.abs().max() <= 1


def test_flow_match_euler_step_matches_edm_euler_on_the_same_noise_levels(model):
    # the rescaling x_s = (1 - s)(x0 + sigma n) makes an Euler step in either space the same step
    ctx, anc, act = _inputs()
    den = model.denoiser
    sampler = Sampler(SamplerConfig(scheduler="flow_match_euler"))
    sch = sampler.make_scheduler(den)
    sigmas = [2.0, 0.5]
    s_grid = [s / (1 + s) for s in sigmas]
    sch.set_timesteps(sigmas=s_grid)
    g = torch.Generator().manual_seed(0)
    n = torch.randn(2, 4, 3, 16, 16, generator=g)
    with torch.no_grad():
        x = n * s_grid[0] / (1 - s_grid[0]) * (1 - s_grid[0])  # = s n, the flow state at s
        x0 = den(x / (1 - s_grid[0]), torch.full((2,), sigmas[0]), ctx, anc, act)
        x_flow = sch.step((x - x0) / s_grid[0], sch.timesteps[0], x).prev_sample / (1 - s_grid[1])
        y = n * sigmas[0]  # the EDM state at sigma
        y_edm = y + (sigmas[1] - sigmas[0]) * (y - x0) / sigmas[0]
    assert torch.allclose(x_flow, y_edm, atol=1e-4)


def test_bad_sampler_config():
    with pytest.raises(ValueError, match="scheduler"):
        Sampler(SamplerConfig(scheduler="ddim"))
    with pytest.raises(ValueError, match="steps"):
        Sampler(SamplerConfig(steps=0))


def test_given_noise_replaces_the_generators_draw(model):
    ctx, anc, act = _inputs()
    enc_ctx, enc_anc = model.encode(ctx), model.encode(anc)
    noise = torch.randn(2, 4, *enc_ctx.shape[2:], generator=torch.Generator().manual_seed(5))
    drawn, _, _ = model.predict_encoded(enc_ctx, enc_anc, act, 2, torch.Generator().manual_seed(5))
    given, _, _ = model.predict_encoded(enc_ctx, enc_anc, act, 2, torch.Generator().manual_seed(9), noise)
    assert torch.equal(drawn, given)  # the generator's draw of seed 5 is that noise; seed 9's is not used
    with pytest.raises(ValueError, match="noise: expected shape"):
        model.predict_encoded(enc_ctx, enc_anc, act, 2, None, noise[:1])
