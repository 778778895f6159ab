"""Where random draws happen: on the device of the generator that drives them.

Training and imagination pass one `torch.Generator` through every random choice (clips' noise
levels, noise, augmentation, bootstrapping, sampling), which is what makes a resumed run exact. A
CPU generator keeps the historical CPU stream, so CPU results and saved CPU runs do not change; a
CUDA generator (GPU training, a GPU imagination env) draws on the GPU, where copying tens of
megabytes of noise per step from the host would cost more than the step itself.
"""
from __future__ import annotations

import torch


def generator_device(generator: torch.Generator | None) -> torch.device:
    """The device `generator` draws on; the CPU when there is none (torch's default generator)."""
    return generator.device if generator is not None else torch.device("cpu")


def randn(shape: tuple[int, ...] | torch.Size, generator: torch.Generator | None) -> torch.Tensor:
    """Standard normal float32 noise of `shape`, drawn on the generator's device."""
    return torch.randn(tuple(shape), generator=generator, dtype=torch.float32, device=generator_device(generator))


def rand(shape: tuple[int, ...] | torch.Size | int, generator: torch.Generator | None) -> torch.Tensor:
    """Uniform [0, 1) float32 of `shape`, drawn on the generator's device."""
    shape = (shape,) if isinstance(shape, int) else tuple(shape)
    return torch.rand(shape, generator=generator, dtype=torch.float32, device=generator_device(generator))
