"""envs.frames: layout round trips, tiling order, and equality with the expressions it replaced."""
import numpy as np
import pytest
import torch

from envs.frames import (
    channels_to_views,
    split_views,
    stack_views,
    tile_views,
    to_model_frames,
    to_uint8,
    views_to_channels,
)

VIEWS = ("agentview", "wrist", "side")


def _frames(*shape: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, shape, dtype=np.uint8)


def test_stack_and_split_views_round_trip_in_view_order():
    per_view = {v: _frames(5, 4, 6, 3, seed=k) for k, v in enumerate(VIEWS)}
    stacked = stack_views(per_view, ["wrist", "agentview"])  # [T, V, H, W, 3] in the order asked for
    assert stacked.shape == (5, 2, 4, 6, 3)
    np.testing.assert_array_equal(stacked[:, 0], per_view["wrist"])
    back = split_views(stacked, ["wrist", "agentview"])
    assert list(back) == ["wrist", "agentview"]
    for v in back:
        np.testing.assert_array_equal(back[v], per_view[v])
    # split_views hands out views of the array (no copy), as the code it replaced did
    assert np.shares_memory(back["wrist"], stacked)
    with pytest.raises(ValueError, match="V=3"):
        split_views(stacked, VIEWS)


def test_views_to_channels_puts_view_v_in_channels_3v_to_3v_plus_2():
    x = _frames(2, 3, 4, 5, 3)  # [T, V, H, W, 3]
    ch = views_to_channels(x)
    assert ch.shape == (2, 4, 5, 9)
    for v in range(3):
        np.testing.assert_array_equal(ch[..., 3 * v: 3 * v + 3], x[:, v])
    # the clip loader's former concatenation over views
    np.testing.assert_array_equal(ch, np.concatenate([x[:, v] for v in range(3)], axis=-1))
    np.testing.assert_array_equal(channels_to_views(ch, 3), x)
    np.testing.assert_array_equal(views_to_channels(x[0]), ch[0])  # one frame [V, H, W, 3]: no leading dims
    with pytest.raises(ValueError, match="6 channels for 2 views"):
        channels_to_views(ch, 2)


def test_model_frames_round_trip_and_range():
    x = _frames(2, 4, 5, 6)
    x[0, 0, 0] = [0, 255, 127, 128, 1, 254]
    m = to_model_frames(x)
    assert m.dtype == torch.float32 and m.shape == (2, 6, 4, 5)
    assert float(m.min()) >= -1.0 and float(m.max()) <= 1.0
    assert m[0, 0, 0, 0] == -1.0 and m[0, 1, 0, 0] == 1.0
    np.testing.assert_array_equal(to_uint8(m), x)
    np.testing.assert_array_equal(to_uint8(to_model_frames(torch.from_numpy(x))), x)  # tensors in too
    # out-of-range predictions clip instead of wrapping around
    assert to_uint8(torch.full((1, 1, 1), 3.0)).item() == 255
    assert to_uint8(torch.full((1, 1, 1), -3.0)).item() == 0


def test_tile_views_side_by_side_matches_the_former_concatenation():
    x = _frames(4, 3, 5, 6, 3)  # [T, V, H, W, 3]
    tiled = tile_views(x)
    assert tiled.shape == (4, 5, 18, 3)
    for v in range(3):
        np.testing.assert_array_equal(tiled[:, :, 6 * v: 6 * (v + 1)], x[:, v])
    np.testing.assert_array_equal(tiled, np.concatenate(list(x.transpose(1, 0, 2, 3, 4)), axis=2))
    np.testing.assert_array_equal(tile_views(x[0]), np.concatenate(list(x[0]), axis=1))  # one frame [V, H, W, 3]


def test_tile_views_vertical_and_scaled():
    x = _frames(2, 2, 3, 4, 3)
    up = tile_views(x, vertical=True)
    assert up.shape == (2, 6, 4, 3)
    np.testing.assert_array_equal(up, np.concatenate([x[:, 0], x[:, 1]], axis=1))
    big = tile_views(x, scale=2)
    np.testing.assert_array_equal(big, np.concatenate(list(x.transpose(1, 0, 2, 3, 4)), axis=2)
                                  .repeat(2, axis=1).repeat(2, axis=2))
    assert big[0, 1, 1].tolist() == big[0, 0, 0].tolist() == x[0, 0, 0, 0].tolist()  # a 2x2 block per pixel
    with pytest.raises(ValueError, match="scale"):
        tile_views(x, scale=0)
    with pytest.raises(ValueError, match=r"\[\.\.\., V, H, W, 3\]"):
        tile_views(x[..., :2])


def test_tile_views_never_aliases_its_input():
    # one view reshapes without a copy; a render kept by the caller must not change when the env steps on
    x = _frames(2, 1, 3, 4, 3)
    for out in (tile_views(x), tile_views(x, vertical=True)):
        assert not np.shares_memory(out, x)
