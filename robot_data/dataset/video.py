"""MP4 encode/decode of uint8 RGB frame stacks with PyAV (videos are written atomically: infra.atomic).

Two encoders are supported:

- ``"libx264rgb"`` (default): H.264 in planar RGB (decoders report pix_fmt ``gbrp``). With crf 0 it
  is encoded at constant QP 0, which is mathematically lossless, so frames round-trip bit-exactly.
  Any frame size works (no chroma subsampling).
- ``"h264"``: libx264 with yuv420p and a constant rate factor (``crf``, 0-51; ~18-28 is typical).
  Small lossy files that every player understands; yuv420p needs even height and width.

Videos for people to watch (collection previews, evaluation and imagination videos, training samples)
go through `encode_preview`: H.264 yuv420p, padded to even sizes, with the index at the front of the
file, which browsers and dataset viewers play. The lossless RGB (4:4:4) stream is not playable there,
but it is what the dataset keeps, since training reads its frames back.
"""
from __future__ import annotations

import os
import tempfile
from fractions import Fraction
from pathlib import Path
from typing import Any, BinaryIO

import av
import numpy as np
from av.video.frame import PictureType

from infra.atomic import FILE_MODE, atomic_file, fsync_dir, fsync_file

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
                 crf: int = 0, faststart: bool = False) -> None:
    """Write `frames` uint8 [T, H, W, 3] (RGB) to an mp4 at `path`, atomically.

    The file is written under a temporary name in the same directory, fsynced and then renamed over
    `path`, so a reader (or a crash) never sees a half-written video at `path`.
    Frame t gets presentation time t / fps, i.e. the stream starts at timestamp 0. faststart puts the
    index (moov) before the frames, so a browser plays the file while it downloads.
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
        container_options = {"movflags": "+faststart"} if faststart else {}
        with av.open(str(tmp), mode="w", format="mp4", options=container_options) as container:
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


# what a preview is encoded as: the pixel format and quality browsers play
PREVIEW_CODEC, PREVIEW_CRF = "h264", 20


def encode_preview(path: str | os.PathLike, frames: np.ndarray, fps: float, crf: int = PREVIEW_CRF) -> None:
    """Write `frames` uint8 [T, H, W, 3] (RGB) as an mp4 for people to watch in a browser: H.264 yuv420p
    (browsers and dataset viewers do not play 4:4:4 or RGB H.264), an odd height or width padded by one
    repeated edge row / column to the even size yuv420p needs, the index at the front (faststart).
    Atomic, like `encode_video`."""
    frames = np.asarray(frames)
    if frames.dtype != np.uint8 or frames.ndim != 4 or frames.shape[-1] != 3 or frames.shape[0] < 1:
        raise ValueError(f"frames: expected uint8 [T>=1, H, W, 3], got {frames.dtype} {frames.shape}")
    _, height, width, _ = frames.shape
    if height % 2 or width % 2:
        frames = np.pad(frames, ((0, 0), (0, height % 2), (0, width % 2), (0, 0)), mode="edge")
    encode_video(path, frames, fps, PREVIEW_CODEC, crf, faststart=True)


def _video_stream(container: Any, path: object) -> Any:
    """The first video stream of an open container, decoded with threads; VideoDecodeError when it has none."""
    if not container.streams.video:
        raise VideoDecodeError(f"{path}: no video stream")
    stream = container.streams.video[0]
    stream.thread_type = "AUTO"
    return stream


def decode_video(path: str | os.PathLike | BinaryIO) -> np.ndarray:
    """Decode every frame of the first video stream of `path` (a file, or its bytes in a binary file
    object) -> uint8 [T, H, W, 3] RGB.

    Raises VideoDecodeError if the file cannot be opened/decoded or holds no frames.
    """
    source = path if hasattr(path, "read") else str(path)
    try:
        with av.open(source, mode="r") as container:
            stream = _video_stream(container, path)
            images = [frame.to_ndarray(format="rgb24") for frame in container.decode(stream)]
    except av.FFmpegError as err:
        raise VideoDecodeError(f"{path}: cannot decode video: {err}") from err
    if not images:
        raise VideoDecodeError(f"{path}: video stream holds no frames")
    return np.stack(images)


def decode_video_span(path: str | os.PathLike | BinaryIO, start_s: float, n_frames: int, fps: float,
                      tolerance_s: float = 1e-4) -> np.ndarray:
    """The `n_frames` frames of `path` shown at start_s, start_s + 1/fps, ... -> uint8 [n, H, W, 3] RGB.

    How lerobot's multi-episode mp4s are read: an episode is the span [from_timestamp, to_timestamp) of a
    file holding many. Seeks to the keyframe at or before start_s, so an episode late in a long file does
    not decode the ones before it. Raises VideoDecodeError when a frame is missing or more than
    tolerance_s away from its time (a wrong from_timestamp, a short file).
    """
    source = path if hasattr(path, "read") else str(path)
    wanted = start_s + np.arange(n_frames) / fps
    images: list[np.ndarray] = []
    try:
        with av.open(source, mode="r") as container:
            stream = _video_stream(container, path)
            if start_s > tolerance_s and stream.time_base is not None:
                container.seek(int(max(start_s - tolerance_s, 0.0) / stream.time_base), stream=stream,
                               backward=True, any_frame=False)
            for frame in container.decode(stream):
                if frame.time is None:
                    raise VideoDecodeError(f"{path}: a frame without a timestamp")
                if frame.time < wanted[len(images)] - tolerance_s:
                    continue  # before the span (decoded from the keyframe on)
                if abs(frame.time - wanted[len(images)]) > tolerance_s:
                    raise VideoDecodeError(f"{path}: frame {len(images)} of the span from {start_s:.4f} s should show "
                                           f"at {wanted[len(images)]:.4f} s, the next frame is at {frame.time:.4f} s")
                images.append(frame.to_ndarray(format="rgb24"))
                if len(images) == n_frames:
                    break
    except av.FFmpegError as err:
        raise VideoDecodeError(f"{path}: cannot decode video: {err}") from err
    if len(images) != n_frames:
        raise VideoDecodeError(f"{path}: holds {len(images)} of the {n_frames} frames from {start_s:.4f} s "
                               f"({n_frames / fps:.4f} s at {fps} fps)")
    return np.stack(images)


class VideoAppender:
    """One mp4 that many episodes are encoded into, one after the other (lerobot's multi-episode files).

    Each episode starts on a keyframe at the time returned by `append`, so a reader seeks straight to it.
    The file is written under a temporary name beside `path` and moved onto it by `close()`; `abort()`
    removes it. `size` (bytes muxed so far) lets the writer keep files under video_files_size_in_mb.
    """

    def __init__(self, path: str | os.PathLike, fps: float, height: int, width: int, codec: str = "libx264rgb",
                 crf: int = 0):
        check_video_codec(codec, height, width, crf)
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd, name = tempfile.mkstemp(prefix=f".{self.path.name}.", suffix=".tmp", dir=self.path.parent)
        os.close(fd)
        self._tmp = Path(name)
        encoder, pix_fmt, _ = VIDEO_CODECS[codec]
        self._rate = Fraction(fps).limit_denominator(1001)
        self._container = av.open(str(self._tmp), mode="w", format="mp4")
        stream = self._container.add_stream(encoder, rate=self._rate)
        assert isinstance(stream, av.VideoStream)  # for the type checker: an encoder name gives a video stream
        self._stream = stream
        self._stream.width, self._stream.height, self._stream.pix_fmt = width, height, pix_fmt
        self._stream.time_base = 1 / self._rate
        self._stream.options = {"qp": "0"} if codec == "libx264rgb" and int(crf) == 0 else {"crf": str(int(crf))}
        self.frames = 0  # frames given to the encoder
        self.packets = 0  # frames it has returned as packets so far (x264 holds some back for lookahead)
        self.size = 0  # bytes of those packets
        self._raw_frame = height * width * 3

    def append(self, frames: np.ndarray) -> float:
        """Encode uint8 [T, H, W, 3] frames after those already in the file; return their start time (s)."""
        start = float(self.frames / self._rate)
        for t, image in enumerate(np.asarray(frames)):
            frame = av.VideoFrame.from_ndarray(np.ascontiguousarray(image), format="rgb24")
            frame.pts, frame.time_base = self.frames, 1 / self._rate
            if t == 0:
                frame.pict_type = PictureType.I  # an episode starts on a keyframe: readers seek to it
            self._mux(self._stream.encode(frame))
            self.frames += 1
        return start

    def close(self) -> Path:
        """Flush the encoder, finish the file and move it onto `path` (atomically)."""
        self._mux(self._stream.encode())
        self._container.close()
        os.chmod(self._tmp, FILE_MODE)
        fsync_file(self._tmp)
        os.replace(self._tmp, self.path)
        fsync_dir(self.path.parent)
        return self.path

    def abort(self) -> None:
        try:
            self._container.close()
        except (av.FFmpegError, ValueError, OSError):
            pass  # the file is discarded anyway
        self._tmp.unlink(missing_ok=True)

    def projected_size(self, more_frames: int) -> float:
        """Bytes the file will hold with `more_frames` frames more: the frames still in the encoder and
        those at the mean packet size so far (at raw size while no packet has come out yet)."""
        per_frame = self.size / self.packets if self.packets else self._raw_frame
        return self.size + per_frame * (self.frames - self.packets + more_frames)

    def _mux(self, packets: list[av.Packet]) -> None:
        for packet in packets:
            self.size += packet.size
            self.packets += 1
            self._container.mux(packet)
