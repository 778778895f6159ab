"""One way to set up imagination and one loop to run episodes in it.

    env = open_imagination("world_model.pt", "data/libero_spatial", num_envs=8,
                           config=ImaginationConfig(max_steps=160))   # proprio fitted with the model's K
    run = imagine(env, policy_mean(policy), [Keyframe(0, 0), Keyframe(3, 40)], seed=0)
    run.success, run.max_success_prob                               # one figure per started episode

`open_imagination` assembles world model, start episodes and proprio model (paths or objects) into an
`ImaginationVectorEnv`. `imagine` resets the envs at the given keyframes, asks `act` for a chunk per
step, freezes each env once its episode has ended (`ImaginationVectorEnv.freeze`: no compute for
episodes that would be thrown away) and returns flat per-step records and per-episode figures.
Action sources: `policy_sample` (sampled chunks with log_prob and value, for RL), `policy_mean`
(deterministic chunks) and `recorded_actions` (the start episodes' own actions, open loop).
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Protocol, cast

import numpy as np
import torch

from imagination.env import ImaginationConfig, ImaginationVectorEnv
from imagination.episodes import StartEpisode, load_start_episodes
from imagination.keyframes import Keyframe
from policies.base import Policy
from robot_data.dataset import EpisodeDataset, ReaderConfig
from world_models.model import WorldModel
from world_models.proprio import ProprioConfig, ProprioModel, fit_proprio

Chunk = np.ndarray | torch.Tensor


class ResettableActionSource(Protocol):
    """An action source with the optional reset(keyframes) that `imagine` calls."""

    def __call__(self, obs: dict) -> Chunk | dict: ...

    def reset(self, keyframes: list[Keyframe]) -> None: ...


# obs -> actions [B, K, 7], or {"actions": [B, K, 7], name: per-env values [B, ...], ...}. An optional
# act.reset(keyframes) (ResettableActionSource) is called after the envs are reset at `keyframes` (padding included).
ActionSource = Callable[[dict], Chunk | dict] | ResettableActionSource
DataSource = str | Path | Sequence[StartEpisode]


def _fit_arrays(data: DataSource, features: ReaderConfig | None = None) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """(states, actions) of every episode of a dataset path (read through `features`) or a list of `StartEpisode`."""
    if isinstance(data, (str, Path)):
        ds = EpisodeDataset(data, verify=False, features=features)
        pairs = [ds.arrays(i) for i in range(len(ds))]  # the numbers only: no video decoded
        return [s for s, _ in pairs], [a for _, a in pairs]
    return [e.state for e in data], [e.action for e in data]


def open_proprio(world_model: WorldModel, proprio: str | Path | ProprioModel = "",
                 fit_data: DataSource | None = None, cache: str | Path = "",
                 features: ReaderConfig | None = None) -> ProprioModel:
    """The proprio model for `world_model`: `proprio` (a model or a file); with proprio "", the one cached at
    `cache` when its chunk length is the world model's, else one fitted with the world model's chunk
    length on every episode of `fit_data` (saved at `cache` when given; a dataset read through `features`).
    The fit's initial weights come from torch's global random state: fit before building other models to get
    the same fit each time."""
    K = world_model.chunk_len
    if isinstance(proprio, ProprioModel):
        model = proprio
    elif proprio:
        if not Path(proprio).is_file():
            raise FileNotFoundError(f"proprio: {str(proprio)!r} is not a file (a ProprioModel.save file)")
        model = ProprioModel.load(proprio)
    else:
        if cache and Path(cache).is_file():
            cached = ProprioModel.load(cache)
            if cached.cfg.chunk_len == K:
                return cached
        if fit_data is None:
            raise ValueError("proprio: no proprio model given and no episodes to fit one on")
        states, actions = _fit_arrays(fit_data, features)
        with torch.enable_grad():  # callers may be inside no_grad
            model, _ = fit_proprio(states, actions, ProprioConfig(chunk_len=K))
        if cache:
            model.save(cache)
        return model
    if model.cfg.chunk_len != K:
        raise ValueError(f"proprio: chunk_len {model.cfg.chunk_len} differs from the world model's chunk_len {K}")
    return model


def open_imagination(world_model: str | Path | WorldModel, start_data: DataSource,
                     proprio: str | Path | ProprioModel = "", num_envs: int = 1,
                     config: ImaginationConfig | None = None, *, indices: Sequence[int] | None = None,
                     policy: Policy | None = None, proprio_fit_data: DataSource | None = None,
                     proprio_cache: str | Path = "") -> ImaginationVectorEnv:
    """An `ImaginationVectorEnv` of `num_envs` envs.

    world_model: a `WorldModel` or its file. start_data: a dataset directory (its episodes `indices`, default
    all, loaded with the world model's views) or a list of `StartEpisode` (frames [T, V, H, W, 3]).
    proprio: a `ProprioModel`, its file, or "" = fitted (see `open_proprio`) on every episode of
    `proprio_fit_data` (default: start_data, all of it), cached at `proprio_cache`. With `policy`, its
    chunk length must be the world model's and obs show only the views it reads (config.policy_views).
    """
    cfg = config or ImaginationConfig()
    if isinstance(world_model, WorldModel):
        wm = world_model
    else:
        if not world_model or not Path(world_model).is_file():
            raise FileNotFoundError(f"world_model: {str(world_model)!r} is not a file (a WorldModel.save checkpoint)")
        wm = WorldModel.load(world_model, map_location=cfg.device)
    views = list(wm.cfg.views)
    if isinstance(start_data, (str, Path)):
        if not start_data or not Path(start_data).exists():
            raise FileNotFoundError(f"start_data: {str(start_data)!r} does not exist (a dataset directory)")
        if indices is not None and not len(indices):
            raise ValueError(f"start_data: no episode of {start_data} selected (indices is empty)")
        episodes = load_start_episodes(str(start_data), views, None if indices is None else list(indices),
                                       features=cfg.features)
        if indices is None:
            start_data = episodes  # fit on these rather than decoding them again
    else:
        episodes = list(start_data) if indices is None else [start_data[i] for i in indices]
    if not episodes:
        raise ValueError("start_data: no episodes to start imagined ones from")
    model = open_proprio(wm, proprio, start_data if proprio_fit_data is None else proprio_fit_data, proprio_cache,
                         features=cfg.features)
    if policy is not None:
        if policy.chunk_len != wm.chunk_len:
            raise ValueError(f"policy: chunk_len {policy.chunk_len} differs from the world model's chunk_len "
                             f"{wm.chunk_len}")
        cfg = replace(cfg, policy_views=list(getattr(policy.config, "views", [])))
    return ImaginationVectorEnv(wm, model, episodes, num_envs, cfg)


@dataclass
class ImaginedEpisodes:
    """One batch of imagined episodes: N per-step records (alive envs only) and E = len(starts) episodes.

    Per step: env int64 [N] (episode = env index), step int64 [N] (chunk index in the episode), t int64 [N]
    (the env's control step when the chunk started), actions float32 [N, K, 7] (as executed), reward
    float32 [N], done bool [N] (terminated or truncated), success_prob float32 [N], uncertainty float32
    [N], extras {name: [N, ...]} (the act source's other outputs, torch tensors on CPU or arrays), and with
    keep_obs the observation the chunk was chosen on: image uint8 [N, V, H, W, 3], state float32 [N, S],
    instruction N strings. Per episode: keyframes (its start), episode_return float32 [E], success bool
    [E], length int64 [E] (chunks), final_t int64 [E], max_success_prob float32 [E], mean_uncertainty
    float64 [E].
    """

    env: np.ndarray
    step: np.ndarray
    t: np.ndarray
    actions: np.ndarray
    reward: np.ndarray
    done: np.ndarray
    success_prob: np.ndarray
    uncertainty: np.ndarray
    extras: dict[str, torch.Tensor | np.ndarray]
    image: np.ndarray | None
    state: np.ndarray | None
    instruction: list[str] | None
    keyframes: list[Keyframe]
    episode_return: np.ndarray
    success: np.ndarray
    length: np.ndarray
    final_t: np.ndarray
    max_success_prob: np.ndarray
    mean_uncertainty: np.ndarray

    def max_success_prob_before(self, end: np.ndarray) -> np.ndarray:
        """float32 [E]: each episode's highest success probability over the chunks that started before
        its control step end[e] (0 where none did)."""
        out = np.zeros(len(self.keyframes), np.float32)
        counted = self.t < np.asarray(end)[self.env]
        np.maximum.at(out, self.env[counted], self.success_prob[counted])
        return out


@torch.no_grad()
def imagine(env: ImaginationVectorEnv, act: ActionSource, starts: Sequence[Keyframe], *, seed: int,
            keep_obs: bool = False, keep_images: bool = True, max_chunks: int = 1000) -> ImaginedEpisodes:
    """Run one imagined episode from each of `starts` (len <= env.num_envs) to its end.

    The envs are reset with `seed` (world-model noise) at `starts`, the rest at starts[0] and frozen
    from the start; each episode's env is frozen once it terminates or is truncated. `act(obs)` is asked
    for a chunk [num_envs, K, 7] (or a dict of "actions" and per-env extras to record) every step.
    keep_images=False with keep_obs keeps state and instruction but not the env's images: for a source that
    records the images it acted on itself (an "image" extra), so a batch of frames is not held twice."""
    B, E = env.num_envs, len(starts)
    if not 1 <= E <= B:
        raise ValueError(f"starts: expected 1 to {B} keyframes (one per env at most), got {E}")
    keyframes = list(starts) + [starts[0]] * (B - E)
    obs, info = env.reset(seed=seed, options={"keyframes": keyframes})
    if callable(getattr(act, "reset", None)):
        cast(ResettableActionSource, act).reset(keyframes)
    alive = np.arange(B) < E
    env.freeze(~alive)
    t_now = np.asarray(info["t"])
    cols: dict[str, list] = {k: [] for k in ("env", "step", "t", "actions", "reward", "done", "success_prob",
                                             "uncertainty", "image", "state", "instruction")}
    extras: dict[str, list] = {}
    ep_return, success = np.zeros(B, np.float32), np.zeros(B, bool)
    length, final_t = np.zeros(B, np.int64), t_now.astype(np.int64)
    best, unc_sum = np.zeros(B, np.float32), np.zeros(B, np.float64)
    for c in range(max_chunks):
        out = act(obs)
        chunk = out["actions"] if isinstance(out, dict) else out
        actions = (chunk.detach().cpu().numpy() if isinstance(chunk, torch.Tensor)
                   else np.asarray(chunk)).astype(np.float32)
        nxt, reward, terminated, truncated, info = env.step(actions)
        idx = np.flatnonzero(alive)
        ended = terminated | truncated
        if keep_obs:
            if keep_images:
                cols["image"].append(obs["image"][idx])
            cols["state"].append(np.asarray(obs["state"])[idx])
            cols["instruction"] += [obs["instruction"][i] for i in idx]
        if isinstance(out, dict):
            pick = torch.as_tensor(idx)
            for k, v in out.items():
                if k != "actions":
                    extras.setdefault(k, []).append(v.detach().cpu()[pick] if isinstance(v, torch.Tensor)
                                                    else np.asarray(v)[idx])
        prob, unc = np.asarray(info["success_prob"]), np.asarray(info["uncertainty"])
        for k, v in (("env", idx), ("step", np.full(len(idx), c)), ("t", t_now[idx]), ("actions", actions[idx]),
                     ("reward", reward[idx]), ("done", ended[idx]), ("success_prob", prob[idx]),
                     ("uncertainty", unc[idx])):
            cols[k].append(v)
        ep_return[idx] += reward[idx]
        success[idx] |= np.asarray(info["success"], bool)[idx] & terminated[idx]
        length[idx] += 1
        unc_sum[idx] += unc[idx]
        best[idx] = np.maximum(best[idx], prob[idx])
        t_now = np.asarray(info["t"])
        final_t[idx] = t_now[idx]
        alive &= ~ended
        env.freeze(~alive)
        obs = nxt
        if not alive.any():
            break
    else:
        raise RuntimeError(f"imagined episodes did not end within {max_chunks} chunks: is the env's max_steps set?")
    cat = {k: np.concatenate(v) for k, v in cols.items() if k != "instruction" and v}
    return ImaginedEpisodes(
        env=cat["env"], step=cat["step"], t=cat["t"], actions=cat["actions"], reward=cat["reward"], done=cat["done"],
        success_prob=cat["success_prob"], uncertainty=cat["uncertainty"],
        extras={k: torch.cat(v) if isinstance(v[0], torch.Tensor) else np.concatenate(v) for k, v in extras.items()},
        image=cat.get("image"), state=cat["state"].astype(np.float32) if keep_obs else None,
        instruction=cols["instruction"] if keep_obs else None, keyframes=list(starts),
        episode_return=ep_return[:E], success=success[:E], length=length[:E], final_t=final_t[:E],
        max_success_prob=best[:E], mean_uncertainty=(unc_sum / np.maximum(length, 1))[:E])


class _PolicySource:
    def __init__(self, policy: Policy, generator: torch.Generator | None, sample: bool):
        self.policy, self.generator, self.sample = policy, generator, sample

    def reset(self, keyframes: list[Keyframe]) -> None:
        self.policy.reset()

    def __call__(self, obs: dict) -> Chunk | dict:
        if not self.sample:
            return self.policy.predict_action_chunk(obs)
        actions, log_prob, value = self.policy.sample(obs, generator=self.generator)
        return {"actions": actions, "log_prob": log_prob, "value": value}


def policy_sample(policy: Policy, generator: torch.Generator | None = None) -> ActionSource:
    """The policy's sampled chunks, drawn with `generator`; log_prob [B] and value [B] are recorded as extras."""
    return _PolicySource(policy, generator, sample=True)


def policy_mean(policy: Policy) -> ActionSource:
    """The policy's deterministic chunks (`predict_action_chunk`)."""
    return _PolicySource(policy, None, sample=False)


class RecordedActions:
    """The start episodes' recorded actions, open loop: env i plays its keyframe's episode from the
    keyframe's step, chunk by chunk; past the end of the recording it holds still (zero motion) with the
    gripper as last commanded."""

    def __init__(self, env: ImaginationVectorEnv):
        self.episodes, self.K = env.episodes, env.K
        self.starts: list[Keyframe] = []
        self.t = np.zeros(0, np.int64)

    def reset(self, keyframes: list[Keyframe]) -> None:
        self.starts = list(keyframes)
        self.t = np.array([kf.t for kf in keyframes], np.int64)

    def __call__(self, obs: dict) -> np.ndarray:
        actions = np.zeros((len(self.starts), self.K, 7), np.float32)
        for i, kf in enumerate(self.starts):
            ep = self.episodes[kf.episode]
            rec = ep.action[self.t[i]: self.t[i] + self.K]
            actions[i, : len(rec)] = rec
            actions[i, len(rec):, 6] = ep.action[-1, 6]
        # an env still running after this chunk ran all K of its actions (a shorter chunk ends the episode)
        self.t += self.K
        return actions


recorded_actions = RecordedActions  # act source: recorded_actions(env)


def recorded_ends(episodes: Sequence[StartEpisode], max_steps: int = 0) -> np.ndarray:
    """int64 [N]: where the replay of each episode stops counting, its recorded length capped at
    `max_steps` when > 0 (for `ImaginedEpisodes.max_success_prob_before`)."""
    return np.array([len(e.action) if max_steps <= 0 else min(len(e.action), max_steps) for e in episodes], np.int64)


__all__ = ["ActionSource", "ImaginedEpisodes", "RecordedActions", "ResettableActionSource", "imagine",
           "open_imagination", "open_proprio", "policy_mean", "policy_sample", "recorded_actions", "recorded_ends"]
