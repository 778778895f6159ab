"""world_models.rng: random draws happen on the generator's device, and CPU draws are the historical ones."""
import torch

from tests.world_models.conftest import tiny_model_config
from world_models import rng
from world_models.model import WorldModel


def test_cpu_draws_are_torchs_own_stream():
    # checkpoints, resumes and measured CPU runs depend on this stream: it must not change
    a, b = torch.Generator().manual_seed(3), torch.Generator().manual_seed(3)
    assert torch.equal(rng.randn((2, 5), a), torch.randn(2, 5, generator=b))
    assert torch.equal(rng.rand(7, a), torch.rand(7, generator=b))
    assert rng.randn((3,), a).dtype == torch.float32 and rng.rand((2, 2), a).device.type == "cpu"


def test_generator_device():
    assert rng.generator_device(None) == torch.device("cpu")
    assert rng.generator_device(torch.Generator()) == torch.device("cpu")
    assert rng.rand((4,), None).shape == (4,)


def test_sampling_with_a_cpu_generator_is_reproducible_and_seed_dependent():
    model = WorldModel(tiny_model_config()).eval()
    d = model.cfg.denoiser
    ctx = torch.zeros(2, d.context_frames, d.channels, d.image_size, d.image_size)
    act = torch.zeros(2, d.chunk_len, d.action_dim)
    f1, _, _ = model.predict(ctx, ctx[:, 0], act, steps=1, generator=torch.Generator().manual_seed(0))
    f2, _, _ = model.predict(ctx, ctx[:, 0], act, steps=1, generator=torch.Generator().manual_seed(0))
    f3, _, _ = model.predict(ctx, ctx[:, 0], act, steps=1, generator=torch.Generator().manual_seed(1))
    assert torch.equal(f1, f2)
    assert not torch.equal(f1, f3)
