"""Camera frames between their layouts: per-view dicts, view-stacked arrays, model tensors and video tiles.

Every frame layout in the project, and the function that moves between two of them:

    Episode.frames            {view: uint8 [T, H, W, 3]}        the dataset's and the writer's
    views                     uint8 [..., V, H, W, 3]           observations, start episodes, policies
    channels                  uint8 [..., H, W, 3V]             the world model's clips (views as channels)
    model frames              float32 [..., 3V, H, W] in [-1, 1]  what the denoiser reads and writes
    tile                      uint8 [..., H, V*W, 3] (or [..., V*H, W, 3])  one picture for a video

    stack_views / split_views          dict <-> views
    views_to_channels / channels_to_views   views <-> channels
    to_model_frames / to_uint8         channels (or any [..., H, W, ch]) <-> model frames
    tile_views                         views -> tile, optionally upscaled for viewing

Views keep their config order throughout, so channel block v (channels 3v..3v+2) is view v.
Only numpy at import: `envs` runs on robot machines without torch, so the two torch functions
import it when called.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import torch


def stack_views(frames: Mapping[str, np.ndarray], views: Sequence[str]) -> np.ndarray:
    """{view: uint8 [T, H, W, 3]} -> uint8 [T, V, H, W, 3] with the views in the order of `views`."""
    return np.stack([frames[v] for v in views], axis=1)


def split_views(frames: np.ndarray, views: Sequence[str]) -> dict[str, np.ndarray]:
    """uint8 [T, V, H, W, 3] -> {view: [T, H, W, 3]} (views of the array, no copies), the inverse of
    `stack_views`."""
    if frames.ndim < 4 or frames.shape[-4] != len(views):
        raise ValueError(f"frames: expected [..., V={len(views)}, H, W, 3] for views {list(views)}, "
                         f"got shape {frames.shape}")
    return {v: frames[..., k, :, :, :] for k, v in enumerate(views)}


def views_to_channels(frames: np.ndarray) -> np.ndarray:
    """uint8 [..., V, H, W, 3] -> [..., H, W, 3V]: view v becomes channels 3v..3v+2."""
    x = np.moveaxis(frames, -4, -2)  # [..., H, W, V, 3]
    return x.reshape(*x.shape[:-2], -1)


def channels_to_views(frames: np.ndarray, views: int) -> np.ndarray:
    """uint8 [..., H, W, 3V] -> [..., V, H, W, 3], the inverse of `views_to_channels`."""
    if frames.shape[-1] != 3 * views:
        raise ValueError(f"frames: expected {3 * views} channels for {views} views, got shape {frames.shape}")
    x = frames.reshape(*frames.shape[:-1], views, 3)
    return np.moveaxis(x, -2, -4)


def to_model_frames(frames_uint8: np.ndarray | torch.Tensor) -> torch.Tensor:
    """uint8 [..., H, W, ch] -> float32 [..., ch, H, W] in [-1, 1] (0 -> -1, 255 -> 1)."""
    import torch

    x = torch.as_tensor(frames_uint8)
    return x.movedim(-1, -3).float().div(127.5).sub(1.0)


def to_uint8(frames: torch.Tensor) -> np.ndarray:
    """float [..., ch, H, W] in [-1, 1] -> uint8 [..., H, W, ch]; values outside the range are clipped,
    so an imagined frame that overshoots still shows. Rounds to nearest: to_uint8(to_model_frames(x)) == x."""
    import torch

    x = frames.detach().float().clamp(-1, 1).add(1).mul(127.5).round().to(torch.uint8)
    return x.movedim(-3, -1).cpu().numpy()


def tile_views(frames: np.ndarray, vertical: bool = False, scale: int = 1) -> np.ndarray:
    """uint8 [..., V, H, W, 3] -> one picture per frame: the views side by side, [..., H, V*W, 3], or
    stacked top to bottom with `vertical`, [..., V*H, W, 3]; then each pixel repeated `scale` x `scale`
    times (nearest neighbour: 64 px frames are small on a screen, and interpolation would blur them)."""
    if frames.ndim < 4 or frames.shape[-1] != 3:
        raise ValueError(f"frames: expected [..., V, H, W, 3], got shape {frames.shape}")
    if scale < 1:
        raise ValueError(f"scale: expected an integer >= 1, got {scale}")
    *lead, V, H, W, _ = frames.shape
    if vertical:  # [..., V, H, W, 3] is already view-major over rows
        x = frames.reshape(*lead, V * H, W, 3)
    else:
        x = np.moveaxis(frames, -4, -3).reshape(*lead, H, V * W, 3)  # via [..., H, V, W, 3]
    if scale > 1:
        return x.repeat(scale, axis=-3).repeat(scale, axis=-2)
    # a new array, never a view of the input (one view reshapes to one): renders are kept while the env moves on
    return x.copy() if np.may_share_memory(x, frames) else x
