"""Feature statistics in the LeRobot format (min, max, mean, std, count, q01..q99).

Low-dim features [T, D] (scalars as [T]) get per-dimension stats of shape [D] ([1] for scalars).
Image features uint8 [T, H, W, 3] get per-channel stats of shape [3, 1, 1] on the [0, 1] scale, the
shape lerobot broadcasts against CHW image tensors. `count` is the number of frames, shape [1], so
episodes merge weighted by their length.

Dataset-level min/max/mean/std/count are exact merges of the per-episode stats (population std,
ddof=0). Dataset-level quantiles are the count-weighted mean of per-episode quantiles, the same
approximation lerobot uses: exact quantiles would need every frame re-read on each append.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

QUANTILES: dict[str, float] = {"q01": 0.01, "q10": 0.10, "q50": 0.50, "q90": 0.90, "q99": 0.99}
STAT_NAMES: tuple[str, ...] = ("min", "max", "mean", "std", "count", *QUANTILES)

Stats = dict[str, np.ndarray]  # stat name -> array


def lowdim_stats(values: np.ndarray) -> Stats:
    """Stats over time of `values` [T] or [T, D] (any numeric/bool dtype) -> arrays of shape [D]."""
    x = np.asarray(values, dtype=np.float64)
    if x.ndim == 1:
        x = x[:, None]
    x = x.reshape(x.shape[0], -1)
    out: Stats = {
        "min": x.min(axis=0),
        "max": x.max(axis=0),
        "mean": x.mean(axis=0),
        "std": x.std(axis=0),
        "count": np.array([x.shape[0]], dtype=np.int64),
    }
    qs = np.quantile(x, list(QUANTILES.values()), axis=0)
    out.update({name: qs[k] for k, name in enumerate(QUANTILES)})
    return out


def image_stats(frames: np.ndarray) -> Stats:
    """Per-channel stats of uint8 [T, H, W, 3] frames on the [0, 1] scale -> arrays [3, 1, 1].

    Built from a 256-bin histogram per channel: exact (uint8 has only 256 values) and linear in the
    pixel count, unlike sorting millions of pixels for the quantiles.
    """
    frames = np.asarray(frames)
    if frames.dtype != np.uint8 or frames.ndim != 4:
        raise ValueError(f"frames: expected uint8 [T, H, W, C], got {frames.dtype} {frames.shape}")
    channels = frames.shape[-1]
    hist = np.stack([np.bincount(frames[..., c].ravel(), minlength=256) for c in range(channels)])
    levels = np.arange(256, dtype=np.float64) / 255.0
    n = hist.sum(axis=1, keepdims=True).astype(np.float64)
    mean = (hist * levels).sum(axis=1) / n[:, 0]
    var = (hist * (levels[None, :] - mean[:, None]) ** 2).sum(axis=1) / n[:, 0]
    nonzero = hist > 0
    out: Stats = {
        "min": levels[nonzero.argmax(axis=1)],
        "max": levels[255 - nonzero[:, ::-1].argmax(axis=1)],
        "mean": mean,
        "std": np.sqrt(var),
    }
    cdf = np.cumsum(hist, axis=1) / n
    for name, q in QUANTILES.items():
        # inverted-CDF quantile: the smallest level whose cumulative share reaches q
        out[name] = levels[(cdf >= q).argmax(axis=1)]
    out = {k: v.reshape(channels, 1, 1) for k, v in out.items()}
    out["count"] = np.array([frames.shape[0]], dtype=np.int64)
    return out


def aggregate_stats(stats_list: Sequence[Mapping[str, Stats]]) -> dict[str, Stats]:
    """Merge per-episode (or partial dataset) stats of the same features, weighting by count."""
    if not stats_list:
        return {}
    keys = list(stats_list[0])
    for i, stats in enumerate(stats_list):
        # as sets: a stats.json rewritten by lerobot lists the same features in another order
        if set(stats) != set(keys):
            raise ValueError(f"stats #{i}: features {sorted(stats)} differ from {sorted(keys)}")
    return {key: _merge([s[key] for s in stats_list]) for key in keys}


def _merge(parts: Sequence[Stats]) -> Stats:
    counts = np.array([float(np.asarray(p["count"]).reshape(-1)[0]) for p in parts])
    total = counts.sum()
    weights = counts / total  # scalars, so they broadcast against stats of any shape ([D], [3, 1, 1])
    mean = sum(w * np.asarray(p["mean"], dtype=np.float64) for w, p in zip(weights, parts))
    # pooled population variance: within-part variance plus spread of the part means
    var = sum(
        w * (np.asarray(p["std"], dtype=np.float64) ** 2 + (np.asarray(p["mean"], dtype=np.float64) - mean) ** 2)
        for w, p in zip(weights, parts)
    )
    out: Stats = {
        "min": np.min(np.stack([np.asarray(p["min"], dtype=np.float64) for p in parts]), axis=0),
        "max": np.max(np.stack([np.asarray(p["max"], dtype=np.float64) for p in parts]), axis=0),
        "mean": mean,
        "std": np.sqrt(np.maximum(var, 0.0)),
        "count": np.array([int(total)], dtype=np.int64),
    }
    for name in QUANTILES:
        if all(name in p for p in parts):
            out[name] = sum(w * np.asarray(p[name], dtype=np.float64) for w, p in zip(weights, parts))
    return out


def stats_to_json(stats: Mapping[str, Stats]) -> dict[str, dict[str, list]]:
    """Nested lists for json.dump (stats.json) / pyarrow columns."""
    return {key: {name: np.asarray(v).tolist() for name, v in s.items()} for key, s in stats.items()}


def stats_from_json(data: Mapping[str, Mapping[str, object]]) -> dict[str, Stats]:
    """Inverse of `stats_to_json`: count as int64, everything else float64."""
    return {
        key: {name: np.asarray(v, dtype=np.int64 if name == "count" else np.float64) for name, v in s.items()}
        for key, s in data.items()
    }


def flatten_stats(stats: Mapping[str, Stats]) -> dict[str, list]:
    """{feature: {stat: array}} -> {"stats/<feature>/<stat>": nested list} (meta/episodes columns)."""
    return {f"stats/{key}/{name}": np.asarray(v).tolist() for key, s in stats.items() for name, v in s.items()}


def unflatten_stats(row: Mapping[str, object]) -> dict[str, Stats]:
    """Pick the "stats/<feature>/<stat>" entries of a meta/episodes row back into nested arrays."""
    nested: dict[str, dict[str, object]] = {}
    for column, value in row.items():
        if column.startswith("stats/"):
            key, _, name = column[len("stats/"):].rpartition("/")
            nested.setdefault(key, {})[name] = value
    return stats_from_json(nested)


def stats_of_rows(rows: Sequence[Mapping[str, object]]) -> dict[str, Stats]:
    """Dataset stats rebuilt from meta/episodes rows' own per-episode stats, merged commit by commit (each
    meta/episodes file was one commit, and `EpisodeWriter` merged its episodes into the running stats in one
    call), so the result equals what the writer wrote to stats.json up to float rounding."""
    import itertools

    stats: dict[str, Stats] = {}
    for _, group in itertools.groupby(rows, key=lambda r: r["meta/episodes/file"]):
        ep_stats = [unflatten_stats(row) for row in group]
        stats = aggregate_stats([stats, *ep_stats] if stats else ep_stats)
    return stats

