"""world_models/video_transformer.py and the denoiser's `family="transformer"`: token layout, the identity start,
frame-level action conditioning, bad settings named, learning on a fixed batch, and a checkpoint round trip."""
import pytest
import torch

from world_models.denoiser import Denoiser, DenoiserConfig
from world_models.video_transformer import VideoTransformer, unpatchify

CFG = DenoiserConfig(image_size=8, channels=4, context_frames=2, chunk_len=3, family="transformer", patch_size=2,
                     width=32, depth=2, heads=4, sigma_data=0.3)


def _batch(B: int = 2, seed: int = 0) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(seed)
    K, C, ch, H = CFG.chunk_len, CFG.context_frames, CFG.channels, CFG.image_size
    return (torch.randn(B, K, ch, H, H, generator=g), torch.rand(B, generator=g) + 0.1,
            torch.randn(B, C, ch, H, H, generator=g), torch.randn(B, ch, H, H, generator=g),
            torch.randn(B, K, 7, generator=g))


def test_unpatchify_inverts_the_convolutions_patch_order():
    x = torch.randn(2, 3, 4, 8, 8)  # [B, T, ch, H, W]
    p, s = 2, 4
    # token i*s + j holds patch (i, j); its features in (row in patch, column in patch, channel) order
    tokens = x.reshape(2, 3, 4, s, p, s, p).permute(0, 1, 3, 5, 4, 6, 2).reshape(2, 3, s * s, p * p * 4)
    assert torch.equal(unpatchify(tokens, p, 4), x)
    # and Conv2d(stride=p).flatten(2) numbers the patches the same way
    conv = torch.nn.Conv2d(1, 1, p, stride=p, bias=False)
    torch.nn.init.ones_(conv.weight)
    img = torch.arange(64.0).reshape(1, 1, 8, 8)
    sums = conv(img).flatten(2)[0, 0]
    assert sums[1] == img[0, 0, 0:2, 2:4].sum() and sums[s] == img[0, 0, 2:4, 0:2].sum()


def test_the_transformer_denoiser_starts_as_c_skip_x_and_reads_each_frames_action():
    torch.manual_seed(0)
    d = Denoiser(CFG, bounded=False)
    assert not hasattr(d, "unet") and isinstance(d.net, VideoTransformer)
    noisy, sigma, context, anchor, actions = _batch()
    x0 = d(noisy, sigma, context, anchor, actions)
    assert x0.shape == noisy.shape
    # the output layer starts at zero, so F = 0 and the estimate is the skip connection alone
    assert torch.allclose(x0, d.c_skip(sigma)[:, None, None, None, None] * noisy, atol=1e-6)
    torch.nn.init.normal_(d.net.out.weight, std=0.1)  # as after some training
    for name, param in d.net.blocks.named_parameters():
        if name.endswith("ada.1.weight"):  # the blocks' adaLN-Zero modulation, zero at the start
            torch.nn.init.normal_(param, std=0.1)
    base = d(noisy, sigma, context, anchor, actions)
    moved = actions.clone()
    moved[:, 1] += 1.0  # the second target frame's action only
    assert not torch.allclose(d(noisy, sigma, context, anchor, moved), base, atol=1e-5)
    # context and anchor are read too
    assert not torch.allclose(d(noisy, sigma, context + 1.0, anchor, actions), base, atol=1e-5)
    assert not torch.allclose(d(noisy, sigma, context, anchor + 1.0, actions), base, atol=1e-5)


def test_bad_settings_are_named():
    with pytest.raises(ValueError, match="denoiser.family: expected 'unet' or 'transformer'"):
        Denoiser(DenoiserConfig(family="vit"))
    with pytest.raises(ValueError, match="denoiser.patch_size: expected a divisor of the image"):
        Denoiser(DenoiserConfig(image_size=8, family="transformer", patch_size=3))
    with pytest.raises(ValueError, match="denoiser.width: expected an even multiple of denoiser.heads = 4"):
        Denoiser(DenoiserConfig(image_size=8, family="transformer", patch_size=2, width=30, heads=4))


def test_it_learns_a_fixed_batch():
    torch.manual_seed(0)
    d = Denoiser(CFG, bounded=False)
    noisy, sigma, context, anchor, actions = _batch(4)
    target = context[:, -1:].expand_as(noisy) + 0.1 * actions[:, :, :1, None, None]  # what an action moved
    opt = torch.optim.AdamW(d.parameters(), lr=3e-3)

    def loss() -> torch.Tensor:
        return (d(noisy, sigma, context, anchor, actions) - target).pow(2).mean()

    first = loss().item()
    for _ in range(60):
        opt.zero_grad()
        loss().backward()
        opt.step()
    assert loss().item() < 0.5 * first


def test_a_transformer_world_model_saves_and_loads(tmp_path):
    from world_models.model import WorldModel, WorldModelConfig

    torch.manual_seed(0)
    wm = WorldModel(WorldModelConfig(views=["agentview"], denoiser=DenoiserConfig(
        image_size=8, channels=3, context_frames=2, chunk_len=3, family="transformer", patch_size=2, width=32,
        depth=1, heads=2)))
    wm.save(tmp_path / "wm.pt")
    back = WorldModel.load(tmp_path / "wm.pt")
    assert back.cfg.denoiser.family == "transformer" and back.cfg.denoiser.depth == 1
    for a, b in zip(wm.state_dict().values(), back.state_dict().values()):
        assert torch.equal(a, b)
