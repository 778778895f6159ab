"""The latent path: a tiny world model trained on a frozen autoencoder's latents keeps the pixel interface
(predict, rollout, heads) and imagines through ImaginationVectorEnv unchanged."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from envs.frames import to_uint8
from imagination.env import ImaginationConfig, ImaginationVectorEnv
from imagination.episodes import StartEpisode
from tests.world_models.conftest import SIZE, tiny_model_config, tiny_train_config
from world_models.autoencoder import Autoencoder, AutoencoderConfig
from world_models.autoencoder_training import TrainAutoencoderConfig, train_autoencoder
from world_models.clips import load_episodes
from world_models.model import WorldModel, WorldModelConfig
from world_models.proprio import ProprioConfig, ProprioModel
from world_models.train_setup import encode_clips
from world_models.training import Trainer, train


@pytest.fixture(scope="module")
def autoencoder_file(square_data, tmp_path_factory):
    """A 2x autoencoder (16 px -> 4 x 8 x 8) trained briefly on the square world."""
    out = tmp_path_factory.mktemp("ae")
    cfg = TrainAutoencoderConfig(out_dir=str(out), data_dir=str(square_data), steps=40, batch_size=8, lr=3e-3,
                                 model=AutoencoderConfig(image_size=SIZE, block_out_channels=[8, 16],
                                                         norm_num_groups=8, mid_block_attention=False),
                                 checkpoint_every=1000, eval_frames=32, scale_frames=64)
    train_autoencoder(cfg)
    return out / "autoencoder.pt"


@pytest.fixture(scope="module")
def latent_run(square_data, autoencoder_file, tmp_path_factory):
    cfg = tiny_train_config(square_data, tmp_path_factory.mktemp("latent_wm"), steps=12, batch_size=4,
                            autoencoder_from=str(autoencoder_file), context_noise=0.05, sample_every=12)
    cfg.augment.enabled = False  # latent_cache (the default) draws clips from latents encoded once
    cfg.model.denoiser.sigma_data = 0.5  # latents have unit std, residuals about half of it
    cfg.bootstrap.ramp_start, cfg.bootstrap.ramp_steps, cfg.bootstrap.prob_end = 0, 1, 0.5  # exercised on latents
    result = train(cfg)
    return WorldModel.load(result["model_path"]), result


def test_latent_model_saves_the_frozen_autoencoder_and_runs_the_denoiser_on_latents(latent_run, autoencoder_file):
    model, result = latent_run
    assert model.latent and result["steps"] == 12
    den = model.denoiser.cfg
    assert (den.image_size, den.channels) == (8, 4) and not model.denoiser.bounded
    assert (model.cfg.denoiser.image_size, model.cfg.denoiser.channels) == (SIZE, 3)  # the frames it takes
    ae = Autoencoder.load(autoencoder_file)
    assert model.autoencoder is not None and model.cfg.autoencoder == ae.cfg
    for k, v in ae.state_dict().items():  # frozen through training
        assert torch.equal(model.autoencoder.state_dict()[k], v), k


def test_predict_and_rollout_keep_the_pixel_interface(latent_run, square_data):
    model, _ = latent_run
    ep = load_episodes(square_data, ["agentview"])[0]
    frames = torch.from_numpy(ep.frames[:3]).permute(0, 3, 1, 2).float() / 127.5 - 1  # [3, 3, 16, 16]
    context, anchor = frames[None, 1:], frames[None, 0]
    actions = torch.from_numpy(ep.actions[:4])[None]
    pred, s, d = model.predict(context, anchor, actions, generator=torch.Generator().manual_seed(0))
    assert pred.shape == (1, 4, 3, SIZE, SIZE) and s.shape == d.shape == (1, 4)
    assert pred.min() >= -1 and pred.max() <= 1
    roll, s, _ = model.rollout(frames[0][None], None, torch.from_numpy(ep.actions[:10])[None],
                               generator=torch.Generator().manual_seed(0))
    assert roll.shape == (1, 10, 3, SIZE, SIZE) and s.shape == (1, 10)
    s_real, _ = model.score_frames(frames[None, 1:], frames[None, 0])  # heads on given frames
    assert s_real.shape == (1, 2)


def test_latent_model_imagines_through_the_vector_env(latent_run, square_data):
    model, _ = latent_run
    eps = [StartEpisode(ep.frames[:, None], np.zeros((len(ep), 8), np.float32), ep.actions, "move the square", i)
           for i, ep in enumerate(load_episodes(square_data, ["agentview"])[:3])]
    venv = ImaginationVectorEnv(model, ProprioModel(ProprioConfig(chunk_len=4, hidden=16, layers=1)), eps, num_envs=2)
    obs, _ = venv.reset(seed=0)
    for _ in range(2):
        obs, reward, term, trunc, info = venv.step(np.zeros((2, 4, 7), np.float32))
    assert obs["image"].shape == (2, 1, SIZE, SIZE, 3) and obs["image"].dtype == np.uint8
    assert reward.shape == (2,)


def test_the_vector_env_keeps_latents_and_decodes_only_the_frame_the_policy_sees(latent_run, square_data, monkeypatch):
    model, _ = latent_run
    eps = [StartEpisode(ep.frames[:, None], np.zeros((len(ep), 8), np.float32), ep.actions, "move the square", i)
           for i, ep in enumerate(load_episodes(square_data, ["agentview"])[:2])]
    # the head never ends an episode: every env runs the whole chunk
    venv = ImaginationVectorEnv(model, ProprioModel(ProprioConfig(chunk_len=4, hidden=16, layers=1)), eps, num_envs=2,
                                config=ImaginationConfig(success_threshold=2.0))
    space = tuple(model.encode(torch.zeros(1, 3, SIZE, SIZE)).shape[1:])  # [C_lat, h, w]
    assert space != (3, SIZE, SIZE)
    decoded: list[tuple[int, ...]] = []
    decode = model.decode

    def counted(x: torch.Tensor) -> torch.Tensor:
        decoded.append(tuple(x.shape))
        return decode(x)

    with monkeypatch.context() as patch:
        patch.setattr(model, "decode", counted)
        venv.reset(seed=0)
        context, anchor = venv._context.clone(), venv._anchor.clone()
        assert tuple(context.shape[2:]) == tuple(anchor.shape[1:]) == space  # latents, not frames
        acts = np.random.default_rng(0).uniform(-1, 1, (2, 4, 7)).astype(np.float32)
        venv._gen.manual_seed(5)
        obs, *_ = venv.step(acts)
    # one decoder pass per step on one frame per env (the chunk's last), not K frames each
    assert decoded == [(2, *space)]
    # that frame is the model's own prediction from latents encoded once, decoded
    x, _, _ = model.predict_encoded(context, anchor, torch.as_tensor(acts), None, torch.Generator().manual_seed(5))
    np.testing.assert_array_equal(obs["image"][:, 0], to_uint8(model.decode(x[:, -1])))
    # the next context holds the predicted latents as they are: no decode-encode round trip
    torch.testing.assert_close(venv._context[:, -1], x[:, -1])


def test_latents_encoded_once_are_the_clips_encoded_at_each_step(square_data, autoencoder_file, tmp_path):
    def trainer(cache: bool, augment: bool) -> Trainer:
        cfg = tiny_train_config(square_data, tmp_path / f"run_{cache}_{augment}", steps=2, batch_size=4,
                                autoencoder_from=str(autoencoder_file), latent_cache=cache)
        cfg.augment.enabled = augment
        return Trainer(cfg)

    cached, per_step = trainer(True, False), trainer(False, False)
    a = cached.state.sampler.sample(4)
    b = encode_clips(per_step.unwrapped(), per_step.state.sampler.sample(4))
    for k in ("history", "context", "target", "anchor"):
        assert a[k].shape == b[k].shape and torch.allclose(a[k], b[k], atol=1e-4), k
    assert np.isfinite(trainer(False, True).step()["loss"])  # style augmentation needs per-step encoding
    with pytest.raises(ValueError, match="augment.enabled: .* latent_cache"):
        trainer(True, True)


def test_an_autoencoder_for_other_frames_is_refused(square_data, tmp_path):
    ae = Autoencoder(AutoencoderConfig(image_size=32, block_out_channels=[8, 8], norm_num_groups=8))
    ae.save(tmp_path / "ae32.pt")
    cfg = tiny_train_config(square_data, tmp_path / "run", steps=1, autoencoder_from=str(tmp_path / "ae32.pt"))
    with pytest.raises(ValueError, match="autoencoder_from: .* takes 32 px frames but the data .* has 16 px"):
        Trainer(cfg)
    with pytest.raises(FileNotFoundError, match="autoencoder_from"):
        Trainer(dataclasses.replace(cfg, autoencoder_from=str(tmp_path / "missing.pt")))
    bad = dataclasses.replace(tiny_model_config(), autoencoder=ae.cfg)
    with pytest.raises(ValueError, match="autoencoder.image_size = 32 but denoiser.image_size = 16"):
        WorldModel(bad)


def test_pixel_checkpoints_without_an_autoencoder_field_load_as_pixel_models():
    d = dataclasses.asdict(WorldModelConfig())
    del d["autoencoder"]
    cfg = WorldModelConfig.from_dict(d)
    assert cfg.autoencoder is None and not WorldModel(cfg).latent
