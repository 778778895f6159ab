"""Training clips for the world model, sampled from episodes preloaded in memory.

A clip is anchored at an action step t of an episode (row t = observation before action t):

    history   frames t-K-C+1 .. t-K      [C, ch, H, W]  context of the *previous* chunk (bootstrapping)
    context   frames t-C+1 .. t          [C, ch, H, W]  what the model sees
    target    frames t+1 .. t+K          [K, ch, H, W]  what it must predict
    anchor    frame 0 of the episode     [ch, H, W]     (WoVR: keeps the scene from drifting)
    prev_actions  actions t-K .. t-1     [K, 7]         lead from history to the context
    actions       actions t .. t+K-1     [K, 7]         lead from the context to the target
    success   success after action t+k   [K]            (the frame t+k+1 shows a solved task)
    done      the episode stops at t+k   [K]            success or end of the recording

Frames before the episode start repeat frame 0 and their actions are zero (a rollout starts from a
context of C copies of the first frame); frames past the end repeat the last frame with zero actions
and done=1, so the model also learns that nothing moves once an episode is over. Frames are float
in [-1, 1]; with several views (`views=["agentview", "wrist"]`) each frame stacks them as channels,
ch = 3 * len(views). Batches add a leading B: context [B, C, ch, H, W].

Episode weighting (fine-tuning on a grown dataset): `ClipConfig.source_weights` and
`failure_weight` give each training episode a weight w; a clip's episode is drawn with probability
proportional to w x episode length and its step uniformly within the episode, so with equal weights
sampling is exactly the plain (episode, step) uniform draw it is without weighting.
"""
from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

from envs.frames import stack_views, to_model_frames, to_uint8, views_to_channels
from robot_data.dataset import SOURCES, Episode, EpisodeDataset, ReaderConfig

# to_model_frames / to_uint8 live with the other frame layouts (envs.frames); re-exported here, where the
# world model code has always imported them
__all__ = ["ClipConfig", "ClipSampler", "EpisodeArrays", "check_weights", "collate", "episode_weights",
           "load_episodes", "make_clip", "split_episodes", "to_model_frames", "to_uint8"]


@dataclass
class ClipConfig:
    data_dir: str = "outputs/data/libero_spatial_quick"
    # more datasets whose every episode is a training episode: data_dir alone is split, so its held-out
    # episodes (split.json, what evaluation scores) stay the same when training data is added
    extra_train_dirs: list[str] = field(default_factory=list)
    views: list[str] = field(default_factory=lambda: ["agentview"])
    context_frames: int = 4  # C
    chunk_len: int = 8  # K, the policy's action-chunk length
    holdout_fraction: float = 0.15  # share of episodes kept out of training (split by episode)
    holdout_min: int = 1  # at least this many held-out episodes when the dataset has 2 or more
    split_seed: int = 0
    max_episodes: int = 0  # 0 = all; a cap for quick experiments
    # episode weights for clip sampling, by episode source (robot_data.dataset.SOURCES), e.g. {"policy": 3.0};
    # sources not listed weigh 1. Empty = every (episode, step) equally likely.
    source_weights: dict[str, float] = field(default_factory=dict)
    failure_weight: float = 1.0  # multiplies the weight of episodes that never succeed (dataset meta `success`)
    # which of data_dir's features are the views, the state and the action (robot_data.dataset.ReaderConfig), e.g.
    # clips.features.cameras={agentview: observation.images.image}; the defaults map them automatically
    features: ReaderConfig = field(default_factory=ReaderConfig)

    def __post_init__(self) -> None:
        check_weights(self.source_weights, self.failure_weight)  # a bad command line fails before any loading


def check_weights(source_weights: Mapping[str, float], failure_weight: float) -> None:
    """Raise ValueError naming the config field unless every weight is a finite number >= 0 for a known source."""
    if not isinstance(source_weights, Mapping):
        raise ValueError(f"clips.source_weights: expected a mapping source -> weight such as {{policy: 3.0}}, "
                         f"got {type(source_weights).__name__}")
    for source, w in source_weights.items():
        if source not in SOURCES:
            raise ValueError(f"clips.source_weights: unknown episode source {source!r}; expected one of {SOURCES}")
        if not _is_weight(w):
            raise ValueError(f"clips.source_weights: the weight of {source!r} must be a finite number >= 0, got {w!r}")
    if not _is_weight(failure_weight):
        raise ValueError(f"clips.failure_weight: expected a finite number >= 0, got {failure_weight!r}")


def _is_weight(w: object) -> bool:
    # bool is an int subclass; `policy: true` is a typo, not a weight
    return bool(isinstance(w, (int, float, np.integer, np.floating)) and not isinstance(w, (bool, np.bool_))
                and math.isfinite(w) and w >= 0)


def split_episodes(n: int, holdout_fraction: float, seed: int, holdout_min: int = 1) -> tuple[list[int], list[int]]:
    """Deterministic (train, held_out) split of episode indices 0..n-1."""
    if n < 1:
        raise ValueError("split_episodes: the dataset has no episodes")
    if not 0.0 <= holdout_fraction < 1.0:
        raise ValueError(f"holdout_fraction: expected a value in [0, 1), got {holdout_fraction}")
    n_hold = int(round(n * holdout_fraction))
    if n >= 2:
        n_hold = min(max(n_hold, holdout_min), n - 1)
    else:
        n_hold = 0
    perm = np.random.default_rng(seed).permutation(n)
    return sorted(perm[n_hold:].tolist()), sorted(perm[:n_hold].tolist())


@dataclass
class EpisodeArrays:
    """One episode in memory for clip sampling: frames uint8 [T, H, W, ch] (views stacked as channels,
    ch = 3V), actions float32 [T, 7].

    Built from an `robot_data.dataset.Episode` by `from_episode`. Why the channel layout here, unlike the
    [T, V, H, W, 3] one outside world_models: it is the denoiser's, so a clip is a slice of it that
    `to_model_frames` converts as it is; views would need a `views_to_channels` copy per clip drawn."""

    frames: np.ndarray
    actions: np.ndarray
    success: np.ndarray  # bool [T]
    index: int
    task_id: int
    instruction: str
    source: str = "expert"  # robot_data.dataset.SOURCES
    episode_success: bool | None = None  # the dataset's episode-level flag; None = any(success)

    def __post_init__(self) -> None:
        if self.episode_success is None:
            self.episode_success = bool(np.asarray(self.success).any())

    def __len__(self) -> int:
        return len(self.actions)

    @classmethod
    def from_episode(cls, ep: Episode, views: Sequence[str], index: int,
                     episode_success: bool | None = None) -> EpisodeArrays:
        """`ep` (episode `index` of its dataset) with `views` stacked as channels; episode_success: the
        dataset's episode-level flag (None: any step's success)."""
        frames = views_to_channels(stack_views(ep.frames, views))  # [T, H, W, 3V]
        return cls(frames, ep.action.astype(np.float32), ep.success.astype(bool), index, ep.task_id,
                   ep.instruction, source=ep.source, episode_success=episode_success)


def load_episodes(root: str | os.PathLike, views: list[str], indices: list[int] | None = None,
                  features: ReaderConfig | None = None) -> list[EpisodeArrays]:
    """Decode the given episodes (all by default) of the dataset at `root` into memory; `features` maps its
    cameras, state and action (default: automatically)."""
    ds = EpisodeDataset(root, verify=False, features=features)
    ds.require_views(views)
    meta = ds.meta
    return [EpisodeArrays.from_episode(ds[i], views, i, episode_success=bool(meta[i].success))
            for i in (range(len(ds)) if indices is None else indices)]


def episode_weights(episodes: Sequence[EpisodeArrays], source_weights: Mapping[str, float],
                    failure_weight: float = 1.0) -> np.ndarray:
    """Sampling weight of each episode, float64 [N]: source_weights[source] (1 if absent), times
    failure_weight for an episode whose episode-level success is False."""
    check_weights(source_weights, failure_weight)
    return np.array([float(source_weights.get(ep.source, 1.0)) * (1.0 if ep.episode_success else float(failure_weight))
                     for ep in episodes], dtype=np.float64)


def make_clip(ep: EpisodeArrays, t: int, context_frames: int, chunk_len: int) -> dict[str, np.ndarray]:
    """The clip of `ep` at action step t (see the module docstring), as uint8/float32 numpy arrays."""
    C, K, T = context_frames, chunk_len, len(ep)
    frame_idx = np.arange(t - K - C + 1, t + K + 1)  # history | prev chunk | target, C + 2K frames
    frames = ep.frames[np.clip(frame_idx, 0, T - 1)]
    act_idx = np.arange(t - K, t + K)
    valid = (act_idx >= 0) & (act_idx < T)
    actions = np.where(valid[:, None], ep.actions[np.clip(act_idx, 0, T - 1)], 0.0).astype(np.float32)
    steps = np.arange(t, t + K)
    # once solved, an episode stays solved: the padded steps past the end carry the final label
    success = ep.success[np.clip(steps, 0, T - 1)] | (ep.success.any() & (steps >= T - 1))
    done = success | (steps >= T - 1)
    return {
        "history": frames[:C],
        "context": frames[K: K + C],
        "target": frames[C + K:],
        "anchor": ep.frames[0],
        "prev_actions": actions[:K],
        "actions": actions[K:],
        "success": success.astype(np.float32),
        "done": done.astype(np.float32),
    }


class ClipSampler:
    """Random clips from in-memory episodes, with a resumable random state.

    Without weights every (episode, step) pair of the given episodes is equally likely, so long
    episodes weigh more. With `weights` [N] (see `episode_weights`) a step of episode e is drawn with
    probability proportional to weights[e]: episode e supplies a share weights[e] x T_e / sum_j
    weights[j] x T_j of the clips. Equal weights take the unweighted path, draw for draw.
    `state_dict()` / `load_state_dict()` capture the generator, so a resumed run draws the very
    clips the interrupted run would have drawn next.
    """

    def __init__(self, episodes: list[EpisodeArrays], context_frames: int, chunk_len: int, seed: int = 0,
                 weights: Sequence[float] | np.ndarray | None = None):
        if not episodes:
            raise ValueError("ClipSampler: no episodes to sample from")
        if context_frames < 1 or chunk_len < 1:
            raise ValueError(f"context_frames and chunk_len must be >= 1, got {context_frames}, {chunk_len}")
        self.episodes = episodes
        self.context_frames = context_frames
        self.chunk_len = chunk_len
        self._lengths = np.array([len(ep) for ep in episodes])
        self._starts = np.concatenate([[0], np.cumsum(self._lengths)])
        self.rng = np.random.default_rng(seed)
        self._cum_mass: np.ndarray | None = None  # cumulative weight x length per episode; None = unweighted
        if weights is not None:
            w = np.asarray(weights, dtype=np.float64)
            if w.shape != (len(episodes),):
                raise ValueError(f"ClipSampler: weights must have one entry per episode ({len(episodes)}), "
                                 f"got shape {w.shape}")
            if not np.isfinite(w).all() or (w < 0).any():
                raise ValueError("ClipSampler: weights must be finite and >= 0 (clips.source_weights, "
                                 "clips.failure_weight)")
            if not (w > 0).any():
                raise ValueError("clips.source_weights / clips.failure_weight give every training episode weight 0: "
                                 "there is nothing to sample")
            if not np.all(w == w[0]):
                self._cum_mass = np.cumsum(w * self._lengths)
                self._last_drawable = int(np.flatnonzero(w > 0)[-1])

    def episode_probabilities(self) -> np.ndarray:
        """Probability that a clip comes from each episode, float64 [N] (sums to 1)."""
        mass = self._lengths.astype(np.float64) if self._cum_mass is None else np.diff(self._cum_mass, prepend=0.0)
        return mass / mass.sum()

    def __len__(self) -> int:
        return int(self._starts[-1])

    def clip(self, flat_index: int) -> dict[str, np.ndarray]:
        e = int(np.searchsorted(self._starts, flat_index, side="right") - 1)
        return make_clip(self.episodes[e], int(flat_index - self._starts[e]), self.context_frames, self.chunk_len)

    def sample(self, batch_size: int, device: torch.device | str = "cpu") -> dict[str, torch.Tensor]:
        """A batch: history/context [B, C, ch, H, W], target [B, K, ch, H, W], anchor [B, ch, H, W],
        prev_actions/actions [B, K, 7], success/done [B, K]; frames float in [-1, 1]."""
        return collate([self.clip(int(i)) for i in self.draw(batch_size)], device)

    def draw(self, n: int) -> np.ndarray:
        """n flat (episode, step) indices into the concatenated episodes, int64 [n]; advances the generator."""
        if self._cum_mass is None:  # the original draw: keep it bit-identical for unweighted runs and resumes
            return self.rng.integers(0, len(self), size=n)
        # episode by inverse CDF of weight x length, then a uniform step within it
        u = self.rng.random(n) * self._cum_mass[-1]
        e = np.minimum(np.searchsorted(self._cum_mass, u, side="right"), self._last_drawable)  # u*total may round up
        return self._starts[e] + self.rng.integers(0, self._lengths[e])

    def state_dict(self) -> dict:
        return {"bit_generator": self.rng.bit_generator.state}

    def load_state_dict(self, state: dict) -> None:
        self.rng.bit_generator.state = state["bit_generator"]


_FRAME_KEYS = ("history", "context", "target", "anchor")


def collate(clips: list[dict[str, np.ndarray]], device: torch.device | str = "cpu") -> dict[str, torch.Tensor]:
    """Stack clips from `make_clip` into a batch of tensors: uint8 frames converted to float [-1, 1],
    float ones (latents of episodes encoded once, world_models.training.encode_episodes) only moved to
    channels-first."""
    out = {}
    for key in clips[0]:
        arr = np.stack([c[key] for c in clips])
        t = torch.from_numpy(arr).to(device)  # frames travel as uint8 (4x fewer bytes) and convert there
        if key in _FRAME_KEYS:
            t = to_model_frames(t) if t.dtype == torch.uint8 else t.movedim(-1, -3)
        out[key] = t
    return out
