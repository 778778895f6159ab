"""Training: the loss falls, the model follows actions, resume is exact, bootstrapping replaces context."""
import numpy as np
import pytest
import torch

from tests.world_models.conftest import SIZE, render, tiny_model_config, tiny_train_config
from world_models.clips import ClipSampler, load_episodes
from world_models.losses import BootstrapConfig, bootstrap_context
from world_models.model import WorldModel
from world_models.training import Trainer, TrainWorldModelConfig, train

pytestmark = pytest.mark.slow


def test_loss_decreases(trained_square):
    _, losses, _ = trained_square
    first, last = np.mean(losses[:50]), np.mean(losses[-50:])
    assert last < 0.6 * first, (first, last)


def _centroid(frames: torch.Tensor) -> torch.Tensor:
    """Mean (x, y) of the bright square over frames [K, 3, H, W] -> [K, 2] (its red channel is high)."""
    w = ((frames[:, 0] + 1) / 2 - 0.5).clamp(min=0)
    axis = torch.arange(SIZE, dtype=torch.float32)
    ys, xs = torch.meshgrid(axis, axis, indexing="ij")
    mass = w.sum((1, 2)).clamp_min(1e-6)
    return torch.stack([(w * xs).sum((1, 2)) / mass, (w * ys).sum((1, 2)) / mass], -1)


def test_model_follows_actions(trained_square):
    model, _, _ = trained_square
    frame = torch.from_numpy(render(np.array([6.0, 6.0]))).permute(2, 0, 1).float() / 127.5 - 1
    context, anchor = frame[None, None].repeat(1, 2, 1, 1, 1), frame[None]

    def predict(dx: float, dy: float) -> torch.Tensor:
        a = torch.zeros(1, 4, 7)
        a[..., 0], a[..., 1] = dx, dy
        return model.predict(context, anchor, a, steps=2, generator=torch.Generator().manual_seed(0))[0][0]

    right, left, down, up = predict(1, 0), predict(-1, 0), predict(0, 1), predict(0, -1)
    # different action chunks from the same context give measurably different frames
    assert (right - left).abs().mean() > 0.02
    # and the square goes where the action sends it (4 steps of up to 2 px: the true gap is 16 px)
    gap_x = _centroid(right)[-1, 0] - _centroid(left)[-1, 0]
    gap_y = _centroid(down)[-1, 1] - _centroid(up)[-1, 1]
    assert gap_x > 2.0, gap_x
    assert gap_y > 1.0, gap_y


def test_resume_gives_identical_next_step_loss(square_data, tmp_path):
    cfg = tiny_train_config(square_data, tmp_path / "run", steps=3, batch_size=4, checkpoint_every=3)
    cfg.bootstrap = BootstrapConfig(prob_start=0.5, prob_end=0.5, ramp_start=0, sample_steps=1)
    cfg.model = tiny_model_config()
    cfg.model.denoiser.block_out_channels = [8, 16]
    cfg.model.denoiser.norm_num_groups = 4
    trainer = Trainer(cfg)
    train(cfg, trainer)  # 3 steps, checkpoint at step 3
    assert [p.name for p in trainer.list_checkpoints()] == ["step_0000003"]
    expected = trainer.step()  # step 4 of the uninterrupted run

    resumed = Trainer(cfg)
    assert resumed.load_checkpoint() and resumed.step_count == 3
    got = resumed.step()
    assert got["loss"] == expected["loss"] and got["denoise"] == expected["denoise"]
    assert got["lr"] == expected["lr"]
    # and without the checkpoint the step differs (the test can fail)
    fresh = Trainer(cfg)
    assert fresh.step()["loss"] != expected["loss"]
    assert (tmp_path / "run" / "world_model.pt").is_file()
    WorldModel.load(tmp_path / "run" / "world_model.pt")


def test_bootstrapping_replaces_context(square_data):
    torch.manual_seed(0)
    model = WorldModel(tiny_model_config()).eval()
    batch = ClipSampler(load_episodes(square_data, ["agentview"]), 2, 4, seed=0).sample(6)
    g = torch.Generator().manual_seed(0)
    out, mask = bootstrap_context(model, batch, prob=1.0, sample_steps=1, generator=g)
    assert mask.all()
    assert not torch.allclose(out["context"], batch["context"], atol=1e-3)  # an untrained model's guess
    assert torch.equal(out["target"], batch["target"]) and torch.equal(out["actions"], batch["actions"])
    # the replacement is the model's own prediction of the previous chunk (its last C frames)
    g2 = torch.Generator().manual_seed(0)
    torch.rand(6, generator=g2)  # the mask draw comes first
    pred = model.sampler.sample(model.denoiser, batch["history"], batch["anchor"], batch["prev_actions"], steps=1,
                                generator=g2)
    assert torch.allclose(out["context"], pred[:, -2:], atol=1e-6)
    same, none = bootstrap_context(model, batch, prob=0.0, sample_steps=1, generator=g)
    assert not none.any() and torch.equal(same["context"], batch["context"])


def test_bootstrap_schedule_and_switch():
    cfg = BootstrapConfig(prob_start=0.1, prob_end=0.5, ramp_start=100, ramp_steps=200)
    assert cfg.probability(0) == pytest.approx(0.1) and cfg.probability(100) == pytest.approx(0.1)
    assert cfg.probability(200) == pytest.approx(0.3) and cfg.probability(10_000) == pytest.approx(0.5)
    cfg.enabled = False
    assert cfg.probability(10_000) == 0.0


def test_training_step_bootstraps_when_enabled(square_data, tmp_path):
    cfg = tiny_train_config(square_data, tmp_path / "b", steps=1, batch_size=8)
    cfg.bootstrap = BootstrapConfig(prob_start=1.0, prob_end=1.0, ramp_start=0)
    assert Trainer(cfg).step()["bootstrapped"] == 1.0
    cfg.bootstrap.enabled = False
    assert Trainer(cfg).step()["bootstrapped"] == 0.0


def test_mixed_precision_is_checked_with_a_hint(tmp_path):
    # what `mixed_precision: no` becomes in YAML read outside infra/cli
    with pytest.raises(ValueError, match="quote it"):
        Trainer(TrainWorldModelConfig(out_dir=str(tmp_path), mixed_precision="False"))
    with pytest.raises(ValueError, match=r"expected one of \['no', 'fp16', 'bf16'\], got 'fp64'"):
        Trainer(TrainWorldModelConfig(out_dir=str(tmp_path), mixed_precision="fp64"))
