"""policies/bc_batch.py: BC's chunk samples, their masks, and the image augmentations its batches draw."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from policies.bc_batch import ChunkData, pixel_noise, random_shift
from tests.policies.conftest import square_episode


def test_chunk_targets_are_future_actions_masked_past_the_end():
    ep = square_episode(np.random.default_rng(0), T=6)
    data = ChunkData([ep], ["agentview", "wrist"], chunk_len=4, image_size=16)
    assert len(data) == 6 and data.image.shape == (6, 2, 16, 16, 3) and data.image.dtype == torch.uint8
    torch.testing.assert_close(data.target[1], torch.from_numpy(ep.action[1:5]))
    assert data.mask[2].all() and data.mask[3].tolist() == [True, True, True, False]
    assert data.mask[5].tolist() == [True, False, False, False]
    with pytest.raises(ValueError, match="lacks views"):
        ChunkData([ep], ["agentview", "side"], 4, 16)
    with pytest.raises(ValueError, match="no episodes"):
        ChunkData([], ["agentview"], 4, 16)


def test_random_shift_moves_images_with_replicated_edges():
    rng = np.random.default_rng(0)
    image = torch.from_numpy(rng.integers(0, 256, (3, 2, 10, 12, 3), dtype=np.uint8))
    g = torch.Generator().manual_seed(0)
    assert torch.equal(random_shift(image, 0, g), image)
    out = random_shift(image, 3, g).numpy()
    assert out.shape == image.shape and out.dtype == np.uint8
    padded = np.pad(image.numpy(), ((0, 0), (0, 0), (3, 3), (3, 3), (0, 0)), mode="edge")
    for b in range(3):
        for v in range(2):  # each output is some crop of the edge-padded image
            crops = [padded[b, v, y:y + 10, x:x + 12] for y in range(7) for x in range(7)]
            assert any(np.array_equal(out[b, v], c) for c in crops)
    assert not np.array_equal(out, image.numpy())


def test_pixel_noise_varies_its_strength_per_sample_and_stays_uint8():
    image = torch.full((400, 1, 8, 8, 3), 128, dtype=torch.uint8)
    g = torch.Generator().manual_seed(0)
    out = pixel_noise(image, 16.0, g)
    assert out.dtype == torch.uint8 and out.shape == image.shape
    std = (out.float() - 128).flatten(1).std(dim=1)  # each sample's own noise level
    assert std.min() < 2 and 13 < std.max() < 18.5  # drawn from U(0, 16): near-clean and strong samples alike
    assert abs(float(std.mean()) - 8) < 1
    edge = torch.full((4, 1, 8, 8, 3), 255, dtype=torch.uint8)
    assert int(pixel_noise(edge, 50.0, g).max()) == 255  # clamped, not wrapped around
