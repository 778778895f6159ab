"""Videos for people to watch are H.264 yuv420p (browsers and dataset viewers play it), even-sized and
faststart, while the dataset's own videos stay lossless RGB (what training reads back)."""
from __future__ import annotations

from pathlib import Path

import av
import numpy as np

from robot_data.collection import write_previews
from robot_data.dataset import DatasetConfig, EpisodeWriter, decode_video, encode_preview
from tests.robot_data.test_dataset import make_episode


def stream_of(path: Path) -> tuple[str, str, int, int]:
    """(codec, pix_fmt, width, height) of the mp4's video stream."""
    with av.open(str(path)) as container:
        s = container.streams.video[0]
        return s.codec_context.name, str(s.codec_context.pix_fmt), s.codec_context.width, s.codec_context.height


def test_previews_are_browser_playable_and_the_dataset_stays_lossless(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    root = tmp_path / "ds"
    with EpisodeWriter(root, DatasetConfig(views=("agentview", "wrist"), image_size=(32, 32), fps=10)) as w:
        for source in ("expert", "policy"):
            w.append(make_episode(rng, T=6, source=source))
    previews = write_previews(root, 2)
    assert len(previews) == 2
    for path in previews:
        codec, pix_fmt, width, height = stream_of(path)
        assert (codec, pix_fmt) == ("h264", "yuv420p") and width % 2 == 0 and height % 2 == 0
        data = path.read_bytes()
        assert data.index(b"moov") < data.index(b"mdat")  # faststart: playable while it downloads
    stored = sorted((root / "videos").rglob("*.mp4"))
    assert stored and {stream_of(p)[1] for p in stored} == {"gbrp"}  # lossless RGB, untouched


def test_an_odd_sized_preview_is_padded_to_even(tmp_path: Path) -> None:
    frames = np.random.default_rng(1).integers(0, 256, (4, 15, 21, 3), dtype=np.uint8)
    encode_preview(tmp_path / "odd.mp4", frames, fps=10)
    assert stream_of(tmp_path / "odd.mp4") == ("h264", "yuv420p", 22, 16)
    assert decode_video(tmp_path / "odd.mp4").shape == (4, 16, 22, 3)
