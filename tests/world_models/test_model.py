"""WorldModel: shapes and dtypes through predict/rollout, clear errors on bad input, save/load."""
import pytest
import torch

from tests.world_models.conftest import tiny_model_config
from world_models.model import WorldModel


def _inputs(B=2, C=2, K=4, size=16, ch=3):
    g = torch.Generator().manual_seed(0)
    ctx = torch.rand(B, C, ch, size, size, generator=g) * 2 - 1
    return ctx, ctx[:, 0].clone(), torch.rand(B, K, 7, generator=g) * 2 - 1


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    return WorldModel(tiny_model_config()).eval()


def test_predict_shapes_and_dtypes(model):
    ctx, anc, act = _inputs()
    frames, succ, done = model.predict(ctx, anc, act, steps=2, generator=torch.Generator().manual_seed(0))
    assert frames.shape == (2, 4, 3, 16, 16) and frames.dtype == torch.float32
    assert succ.shape == (2, 4) and done.shape == (2, 4) and succ.dtype == torch.float32
    assert frames.min() >= -1 and frames.max() <= 1 and torch.isfinite(succ).all()
    again, _, _ = model.predict(ctx, anc, act, steps=2, generator=torch.Generator().manual_seed(0))
    assert torch.equal(frames, again)  # same generator seed, same frames


def test_rollout_covers_any_length(model):
    ctx, anc, _ = _inputs(B=1)
    acts = torch.zeros(1, 10, 7)  # not a multiple of K = 4
    frames, succ, done = model.rollout(anc, None, acts, steps=1, generator=torch.Generator().manual_seed(0))
    assert frames.shape == (1, 10, 3, 16, 16) and succ.shape == (1, 10) and done.shape == (1, 10)
    frames2, _, _ = model.rollout(ctx, anc, acts, steps=1)
    assert frames2.shape == (1, 10, 3, 16, 16)


@pytest.mark.parametrize("what, make, message", [
    ("context length", lambda c, a, x: (c[:, :1], a, x), "C = 2 context frames"),
    ("action dim", lambda c, a, x: (c, a, x[..., :6]), "action dim 7"),
    ("chunk length", lambda c, a, x: (c, a, x[:, :3]), "K = 4 actions"),
    ("image size", lambda c, a, x: (c[..., :8, :8], a, x), "image size 16"),
    ("uint8 frames", lambda c, a, x: (((c + 1) * 127).to(torch.uint8), a, x), "float tensor"),
    ("anchor shape", lambda c, a, x: (c, a[:, :, :8], x), "anchor: expected"),
    ("numpy", lambda c, a, x: (c.numpy(), a, x), "torch.Tensor"),
])
def test_bad_inputs_give_clear_errors(model, what, make, message):
    with pytest.raises(ValueError, match=message):
        model.predict(*make(*_inputs()))


def test_views_must_match_channels():
    cfg = tiny_model_config()
    cfg.views = ["agentview", "wrist"]
    with pytest.raises(ValueError, match="3 per view"):
        WorldModel(cfg)


def test_save_load_round_trip(model, tmp_path):
    path = tmp_path / "wm.pt"
    model.save(path)
    assert path.is_file() and not (tmp_path / "wm.pt.tmp").exists()
    loaded = WorldModel.load(path)
    assert loaded.cfg == model.cfg
    ctx, anc, act = _inputs()
    a, _, _ = model.predict(ctx, anc, act, steps=1, generator=torch.Generator().manual_seed(0))
    b, _, _ = loaded.predict(ctx, anc, act, steps=1, generator=torch.Generator().manual_seed(0))
    assert torch.equal(a, b)
    torch.save({"something": 1}, tmp_path / "other.pt")
    with pytest.raises(ValueError, match="not a world model checkpoint"):
        WorldModel.load(tmp_path / "other.pt")
    with pytest.raises(FileNotFoundError):
        WorldModel.load(tmp_path / "missing.pt")
