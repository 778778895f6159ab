"""Camera features of dtype "image": lerobot stores each frame as an encoded image (PNG) in the data parquet.

The column holds structs {"bytes": binary, "path": string} (Hugging Face datasets' Image feature);
frames are decoded with Pillow. Datasets written by EpisodeWriter use mp4 videos instead.
"""
from __future__ import annotations

import io

import numpy as np
import pyarrow as pa
from PIL import Image

from robot_data.dataset.errors import DatasetCorruptError


def decode_image_column(column: pa.ChunkedArray | pa.Array, where: str) -> np.ndarray:
    """An Image-feature column of T rows -> uint8 [T, H, W, 3] RGB; DatasetCorruptError naming `where`."""
    from PIL import Image, UnidentifiedImageError  # only datasets with image features need Pillow

    frames = []
    for t, cell in enumerate(column.to_pylist()):
        data = cell.get("bytes") if isinstance(cell, dict) else cell
        if not isinstance(data, bytes):
            raise DatasetCorruptError(f"{where}: frame {t} holds no image bytes (got {type(data).__name__}; "
                                      "images stored as separate files are not supported)")
        try:
            with Image.open(io.BytesIO(data)) as image:
                frames.append(np.asarray(image.convert("RGB"), dtype=np.uint8))
        except (UnidentifiedImageError, OSError) as err:
            raise DatasetCorruptError(f"{where}: frame {t} is not a decodable image: {err}") from err
    if not frames:
        raise DatasetCorruptError(f"{where}: no frames")
    return np.stack(frames)


def resize_frames(frames: np.ndarray, size: int) -> np.ndarray:
    """uint8 [T, H, W, 3] -> [T, size, size, 3] (size 0 or the same: unchanged). Down: area average (PIL's BOX
    filter); up: bicubic."""
    if not size or frames.shape[1:3] == (size, size):
        return frames
    down = frames.shape[1] >= size and frames.shape[2] >= size
    mode = Image.Resampling.BOX if down else Image.Resampling.BICUBIC
    return np.stack([np.asarray(Image.fromarray(f).resize((size, size), mode)) for f in frames])
