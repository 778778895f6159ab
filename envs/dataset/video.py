"""MP4 encode/decode of uint8 RGB frame stacks with PyAV (videos are written atomically: envs.atomic).

Two encoders are supported:

- ``"libx264rgb"`` (default): H.264 in planar RGB (decoders report pix_fmt ``gbrp``). With crf 0 it
  is encoded at constant QP 0, which is mathematically lossless, so frames round-trip bit-exactly.
  Any frame size works (no chroma subsampling).
- ``"h264"``: libx264 with yuv420p and a constant rate factor (``crf``, 0-51; ~18-28 is typical).
  Small lossy files that every player understands; yuv420p needs even height and width.
"""
from __future__ import annotations

import hashlib
import os
from fractions import Fraction
from typing import BinaryIO

import av
import numpy as np

from envs.atomic import atomic_file

# config name -> (PyAV encoder name, encoder input pix_fmt, pix_fmt a decoder reports for the stream)
VIDEO_CODECS: dict[str, tuple[str, str, str]] = {
    "libx264rgb": ("libx264rgb", "rgb24", "gbrp"),
    "h264": ("libx264", "yuv420p", "yuv420p"),
}



class VideoDecodeError(ValueError):
    """The file is missing, not a decodable video, or has no video stream."""


def check_video_codec(codec: str, height: int, width: int, crf: int) -> None:
    """Raise ValueError if `codec`/`crf` are unknown or the frame size does not suit the codec."""
    if codec not in VIDEO_CODECS:
        raise ValueError(f"video_codec: expected one of {sorted(VIDEO_CODECS)}, got {codec!r}")
    if not 0 <= int(crf) <= 51:
        raise ValueError(f"crf: expected an int in [0, 51], got {crf!r}")
    if height < 1 or width < 1:
        raise ValueError(f"image_size: expected positive (H, W), got ({height}, {width})")
    if VIDEO_CODECS[codec][1] == "yuv420p" and (height % 2 or width % 2):
        raise ValueError(
            f"image_size: video_codec={codec!r} encodes yuv420p, which needs even height and width; "
            f"got (H={height}, W={width}). Resize/crop to even sizes or use the lossless 'libx264rgb'."
        )


def encode_video(path: str | os.PathLike, frames: np.ndarray, fps: float, codec: str = "libx264rgb",
                 crf: int = 0) -> None:
    """Write `frames` uint8 [T, H, W, 3] (RGB) to an mp4 at `path`, atomically.

    The file is written under a temporary name in the same directory, fsynced and then renamed over
    `path`, so a reader (or a crash) never sees a half-written video at `path`.
    Frame t gets presentation time t / fps, i.e. the stream starts at timestamp 0.
    """
    frames = np.asarray(frames)
    if frames.dtype != np.uint8 or frames.ndim != 4 or frames.shape[-1] != 3 or frames.shape[0] < 1:
        raise ValueError(f"frames: expected uint8 [T>=1, H, W, 3], got {frames.dtype} {frames.shape}")
    _, height, width, _ = frames.shape
    check_video_codec(codec, height, width, crf)
    encoder, pix_fmt, _ = VIDEO_CODECS[codec]
    rate = Fraction(fps).limit_denominator(1001)
    if codec == "libx264rgb" and int(crf) == 0:
        # Constant QP 0 is x264's lossless mode; CRF alone does not guarantee it for every build.
        options = {"qp": "0"}
    else:
        options = {"crf": str(int(crf))}

    with atomic_file(path) as tmp:
        # format="mp4" explicitly: the temporary name does not end in .mp4.
        with av.open(str(tmp), mode="w", format="mp4") as container:
            stream = container.add_stream(encoder, rate=rate)
            stream.width, stream.height, stream.pix_fmt = width, height, pix_fmt
            stream.time_base = 1 / rate
            stream.options = options
            for t, image in enumerate(frames):
                frame = av.VideoFrame.from_ndarray(np.ascontiguousarray(image), format="rgb24")
                frame.pts, frame.time_base = t, 1 / rate
                for packet in stream.encode(frame):
                    container.mux(packet)
            for packet in stream.encode():  # flush delayed (B-)frames
                container.mux(packet)


def decode_video(path: str | os.PathLike | BinaryIO) -> np.ndarray:
    """Decode every frame of the first video stream of `path` (a file, or its bytes in a binary file
    object) -> uint8 [T, H, W, 3] RGB.

    Raises VideoDecodeError if the file cannot be opened/decoded or holds no frames.
    """
    source = path if hasattr(path, "read") else str(path)
    try:
        with av.open(source, mode="r") as container:
            if not container.streams.video:
                raise VideoDecodeError(f"{path}: no video stream")
            stream = container.streams.video[0]
            stream.thread_type = "AUTO"
            images = [frame.to_ndarray(format="rgb24") for frame in container.decode(stream)]
    except av.FFmpegError as err:
        raise VideoDecodeError(f"{path}: cannot decode video: {err}") from err
    if not images:
        raise VideoDecodeError(f"{path}: video stream holds no frames")
    return np.stack(images)


def sha256_file(path: str | os.PathLike) -> str:
    """Hex sha256 of a file's bytes, read in 1 MiB blocks."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
