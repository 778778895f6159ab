"""Every world-model preset in configs/world_model/ loads into TrainWorldModelConfig; the protocol's GPU presets
hold out the same episodes as the CPU models they are compared with."""
import pytest

from infra.cli import CONFIGS, load_config
from world_models.training import TrainWorldModelConfig

PRESETS = sorted(p.stem for p in (CONFIGS / "world_model").glob("*.yaml"))


@pytest.mark.parametrize("name", PRESETS)
def test_preset_loads(name):
    cfg = load_config(TrainWorldModelConfig, name, group="world_model")
    assert cfg.steps >= 1 and cfg.batch_size >= 1
    assert cfg.out_dir.startswith("outputs/"), "presets write under outputs/ (gitignored)"


def test_latent_gpu_preset_is_the_cpu_latent_model_scaled_up():
    """latent_rl_gain_gpu is compared, held-out episode for held-out episode, with latent_quick trained on the
    protocol's 128 px data (docs/world_model.md): same split, clip shape, autoencoder path form and latent cache,
    a wider denoiser."""
    cpu = load_config(TrainWorldModelConfig, "latent_quick", group="world_model")
    gpu = load_config(TrainWorldModelConfig, "latent_rl_gain_gpu", group="world_model")
    pixel_gpu = load_config(TrainWorldModelConfig, "rl_gain_gpu", group="world_model")
    split = ("holdout_fraction", "holdout_min", "split_seed")
    assert [getattr(gpu.clips, k) for k in split] == [getattr(pixel_gpu.clips, k) for k in split] == \
           [getattr(cpu.clips, k) for k in split]
    assert (gpu.clips.context_frames, gpu.clips.chunk_len, gpu.clips.views) == \
           (cpu.clips.context_frames, cpu.clips.chunk_len, cpu.clips.views)
    assert gpu.latent_cache and not gpu.augment.enabled
    assert gpu.autoencoder_from.endswith("autoencoder.pt")
    assert gpu.model.sampler.steps == cpu.model.sampler.steps == 1
    wide, narrow = gpu.model.denoiser.block_out_channels, cpu.model.denoiser.block_out_channels
    assert len(wide) == len(narrow) and all(w >= n for w, n in zip(wide, narrow)) and wide != narrow


def test_cpu_rl_gain_preset_is_quick_with_more_clips():
    """rl_gain_cpu is the measured batch-32 CPU model (docs/results.md): quick's denoiser, sampler and split, four
    times the batch for two thirds of the steps."""
    quick = load_config(TrainWorldModelConfig, "quick", group="world_model")
    cpu = load_config(TrainWorldModelConfig, "rl_gain_cpu", group="world_model")
    assert cpu.model == quick.model and cpu.bootstrap == quick.bootstrap
    split = ("holdout_fraction", "holdout_min", "split_seed", "views", "context_frames", "chunk_len")
    assert [getattr(cpu.clips, k) for k in split] == [getattr(quick.clips, k) for k in split]
    assert (cpu.batch_size, cpu.steps) == (32, 2000) and cpu.batch_size * cpu.steps > quick.batch_size * quick.steps
