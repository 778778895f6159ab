"""`ImaginationVectorEnv`: a Gymnasium `VectorEnv` whose dynamics are a learned world model.

Same observation and action spaces as the real LIBERO env with the world model's views, or the subset
`policy_views` the policy reads (built by `envs.spaces`), so a policy cannot tell which one it runs in:

    obs["image"] uint8 [B, V, H, W, 3], obs["state"] float32 [B, 8], obs["instruction"] B strings
    action float32 [B, K, 7] chunk in [-1, 1]

One `step` imagines the K frames of the chunk in one batched `WorldModel.predict_encoded` call, in the
denoiser's space (latents for a latent model, kept from chunk to chunk; only the frame the policy sees is
decoded); the proprio model gives the states. The judge (`ImaginationConfig.reward`, one module of
imagination/rewards/ each) gives P(success) after each action: with the success head (the env's default, which needs
nothing but the world model), reward 1.0 and `terminated` when it passes the threshold (the chunk stops there, as the
real env stops on success); `truncated` at the horizon. The grasp judge, which the shipped RL recipe uses
(imagination/rl/training.py's defaults), ends every episode at its first gripper close (or its release), with the
classifier's probability as the reward. Episodes start from keyframes of real
episodes (see `imagination.keyframes`). With uncertainty on, each chunk is imagined twice with
different noise; the per-env disagreement (mean absolute pixel difference, frames in [-1, 1]) is
reported in info["uncertainty"] and can truncate or penalize.
Autoreset: next-step (an env that ended is reset by the following `step`, which ignores its action).
"""
from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import torch
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space

from envs.frames import channels_to_views, tile_views, to_model_frames, to_uint8, views_to_channels
from envs.spaces import BatchObservation, Info, Observation, action_space, check_action_chunk, observation_space
from imagination.env_config import OBSERVE_MODES, UNCERTAINTY_MODES, ImaginationConfig
from imagination.episodes import StartEpisode, task_keys
from imagination.keyframes import KeyframeSampler
from imagination.rewards.base import Reward, build_reward
from imagination.rewards.horizon import episode_end
from world_models import rng
from world_models.model import WorldModel
from world_models.proprio import ProprioModel, history_at
from world_models.sampler import check_guidance


class ImaginationVectorEnv(VectorEnv):
    metadata = {"autoreset_mode": AutoresetMode.NEXT_STEP, "render_modes": ["rgb_array"], "render_fps": 20}

    def __init__(
        self,
        world_model: WorldModel,
        proprio: ProprioModel,
        episodes: list[StartEpisode],
        num_envs: int = 1,
        config: ImaginationConfig | None = None,
        reward: Reward | None = None,
    ):
        """reward: a judge of your own (imagination/rewards/base.py `Reward`) instead of the one config.reward
        names."""
        self.cfg = cfg = config or ImaginationConfig()
        if cfg.uncertainty not in UNCERTAINTY_MODES:
            hint = " (YAML read outside infra/cli turns a bare off into false: quote it, 'off')" \
                if str(cfg.uncertainty).lower() == "false" else ""
            raise ValueError(f"uncertainty: expected one of {list(UNCERTAINTY_MODES)}, got {cfg.uncertainty!r}{hint}")
        if cfg.observe not in OBSERVE_MODES:
            raise ValueError(f"observe: expected one of {list(OBSERVE_MODES)}, got {cfg.observe!r}")
        if cfg.imagined_steps < 0:
            raise ValueError(f"imagined_steps: expected an integer >= 0 (0: to max_steps), got {cfg.imagined_steps}")
        if num_envs < 1:
            raise ValueError(f"num_envs: expected an integer >= 1, got {num_envs}")
        if cfg.noise_group < 1 or num_envs % cfg.noise_group:
            raise ValueError(f"noise_group: expected an integer >= 1 that divides num_envs ({num_envs}), "
                             f"got {cfg.noise_group}")
        if not episodes:
            raise ValueError("episodes: need at least one real episode to start imagined episodes from")
        if cfg.action_guidance != 0:  # 0: the model's own setting, checked when the model was built
            check_guidance(cfg.action_guidance, world_model.denoiser, "action_guidance")
        self._guidance = cfg.action_guidance or None  # None: the model's own sampler setting
        self.wm = world_model.to(cfg.device).eval()
        # the judge (imagination/rewards/)
        self.reward = reward if reward is not None else build_reward(cfg, world_model, episodes, num_envs)
        t = self.reward.default_threshold
        self.success_threshold = t if cfg.success_threshold is None else cfg.success_threshold
        self.proprio = proprio.to(cfg.device).eval()
        if proprio.cfg.chunk_len != world_model.chunk_len:
            raise ValueError(f"proprio chunk_len {proprio.cfg.chunk_len} != world model chunk_len "
                             f"{world_model.chunk_len}")
        T0, V, H, W, _ = episodes[0].frames.shape
        d = world_model.cfg.denoiser
        if V != len(world_model.cfg.views) or H != d.image_size or W != d.image_size:
            raise ValueError(
                f"episodes: frames {episodes[0].frames.shape[1:]} do not match the world model "
                f"({len(world_model.cfg.views)} views {world_model.cfg.views}, {d.image_size} px); a dataset of "
                f"another frame size is resized on read with imagination.features.image_size={d.image_size}"
            )
        wm_views = list(world_model.cfg.views)
        shown = list(cfg.policy_views) or wm_views
        if any(v not in wm_views for v in shown) or len(set(shown)) != len(shown):
            raise ValueError(f"policy_views: the policy reads views {list(cfg.policy_views)} but the world model "
                             f"imagines {wm_views}: expected distinct views among those (train the policy on them)")
        self._pick = [wm_views.index(v) for v in shown]  # indices into the world model's views
        self.episodes = episodes
        # only starts that leave something to do before the horizon (real episodes may run past it), and where
        # the judge can judge them
        ends = [self.reward.start_limit(e, cfg.max_steps) for e in episodes]
        self.keyframes = KeyframeSampler([e.action[:end] for e, end in zip(episodes, ends)], cfg.keyframes,
                                         task_keys(episodes)[0])
        self.num_envs = num_envs
        self.K, self.C, self.V = world_model.chunk_len, world_model.context_frames, V
        self.single_observation_space = observation_space(len(self._pick), H, W, episodes[0].state.shape[1])
        self.single_action_space = action_space(self.K)
        self.observation_space = batch_space(self.single_observation_space, num_envs)
        self.action_space = batch_space(self.single_action_space, num_envs)
        self.device = torch.device(cfg.device)
        self._rng = np.random.default_rng()
        self._gen = torch.Generator(device=self.device)
        B, ch = num_envs, 3 * V
        # context and anchor live where the denoiser runs: latents in latent mode, encoded once at a keyframe.
        # Why: re-encoding decoded frames every chunk costs an encoder pass per context frame and drifts
        # off the latents the model trained its own context on (bootstrapping slides over latents too)
        self._dtype = next(world_model.parameters()).dtype
        space = tuple(world_model.encode(torch.zeros(1, ch, H, W, device=self.device, dtype=self._dtype)).shape[1:])
        self._context = torch.zeros(B, self.C, *space, device=self.device, dtype=self._dtype)
        self._anchor = torch.zeros(B, *space, device=self.device, dtype=self._dtype)
        self._state = torch.zeros(B, episodes[0].state.shape[1], device=self.device)
        # the actions executed before each env's next chunk, which the proprio model reads for the arm's velocity
        self._history = torch.zeros(B, proprio.cfg.history, 7, device=self.device)
        self._image = np.zeros((B, V, H, W, 3), np.uint8)
        self._instruction = [""] * B
        self._t = np.zeros(B, np.int64)
        self._limit = np.full(B, cfg.max_steps, np.int64)  # the step each env's episode ends at, at the latest
        self._start = np.zeros((B, 2), np.int64)  # (episode, t) of each env's keyframe
        self._needs_reset = np.zeros(B, bool)
        self._frozen = np.zeros(B, bool)

    # ------------------------------------------------------------------------------------------
    def policy_views(self, frames: np.ndarray) -> np.ndarray:
        """Frames of the world model's views [N, V, H, W, 3] as the policy sees them: its views, in its order
        (ImaginationConfig.policy_views) [N, V', H, W, 3]."""
        return frames[:, self._pick]

    def _group_noise(self, active: np.ndarray) -> torch.Tensor | None:
        """The sampler's starting noise [b, K, c, h, w] for the `active` envs, one draw per noise group
        (ImaginationConfig.noise_group); None (each env its own draw) when groups are off."""
        g = self.cfg.noise_group
        if g <= 1:
            return None
        groups, inverse = np.unique(active // g, return_inverse=True)
        shape = (len(groups), self.K, *self._context.shape[2:])
        return rng.randn(shape, self._gen)[torch.as_tensor(inverse)].to(self.device)

    def _obs(self) -> dict:
        image, state = self._image, self._state.cpu().numpy().astype(np.float32)
        if self.cfg.observe in ("recorded", "recorded_image"):
            seen = [self.episodes[e].recorded_at(t) for e, t in zip(self._start[:, 0], self._t)]
            image = np.stack([f for f, _ in seen])
            if self.cfg.observe == "recorded":
                state = np.stack([s for _, s in seen])
        return {"image": self.policy_views(image), "state": state, "instruction": tuple(self._instruction)}

    def _start_envs(self, mask: np.ndarray, keyframes=None) -> None:
        """Put the envs in `mask` at keyframes of real episodes: context frames, anchor, state."""
        idx = np.flatnonzero(mask)
        for i, kf in zip(idx, keyframes or self.keyframes.sample(len(idx), self._rng)):
            ep = self.episodes[kf.episode]
            ctx = ep.frames[np.clip(np.arange(kf.t - self.C + 1, kf.t + 1), 0, None)]  # [C, V, H, W, 3]
            first = np.concatenate([ctx, ep.frames[:1]])  # [C + 1, V, H, W, 3]: the context, then the anchor
            z = self.wm.encode(to_model_frames(views_to_channels(first)).to(self.device, self._dtype))
            self._context[i], self._anchor[i] = z[:-1], z[-1]
            self._state[i] = torch.tensor(ep.state[kf.t], device=self.device)  # copy: dataset arrays are read-only
            self._history[i] = torch.as_tensor(history_at(ep.action, kf.t, self.proprio.cfg.history),
                                               device=self.device)
            self._image[i] = ep.frames[kf.t]
            self._instruction[i] = ep.instruction
            self._t[i] = kf.t
            self._limit[i] = episode_end(kf.t, self.cfg.max_steps, self.cfg.imagined_steps)
            self._start[i] = (kf.episode, kf.t)
            self.reward.start(int(i), kf.episode, ep, kf.t)
        self._needs_reset[idx] = False
        self._frozen[idx] = False

    def freeze(self, mask: np.ndarray) -> None:
        """Idle the envs in `mask` (bool [B]) until they are reset: `step` skips the world model for them
        and returns their last observation with reward 0, neither terminated nor truncated, and no
        autoreset. Why: a batch of episodes collected to their ends (GRPO groups) would otherwise keep
        imagining new episodes in the envs that finished first, at full cost, only to throw them away."""
        mask = np.asarray(mask, dtype=bool)
        if mask.shape != (self.num_envs,):
            raise ValueError(f"freeze mask: expected {self.num_envs} booleans (one per env), got shape {mask.shape}")
        self._frozen |= mask

    def reset(self, *, seed: int | None = None,
              options: dict[str, Any] | None = None) -> tuple[BatchObservation, Info]:
        """options: {"keyframes": [Keyframe | None, ...]} starts env i at a given real frame (None: drawn);
        {"reset_mask": bool [B]} restarts only those envs (the others keep their episode)."""
        if seed is not None:
            self._rng = np.random.default_rng(seed)
            self._gen.manual_seed(seed)
        options = options or {}
        mask = np.asarray(options.get("reset_mask", np.ones(self.num_envs, bool)), dtype=bool)
        keyframes = options.get("keyframes")
        if mask.shape != (self.num_envs,):
            raise ValueError(f"reset options['reset_mask']: expected {self.num_envs} booleans (one per env), "
                             f"got shape {mask.shape}")
        if keyframes is not None and len(keyframes) != self.num_envs:
            raise ValueError(f"reset options['keyframes']: expected {self.num_envs} keyframes (one per env), "
                             f"got {len(keyframes)}")
        drawn = iter(self.keyframes.sample(self.num_envs, self._rng))
        chosen = [(keyframes[i] if keyframes is not None and keyframes[i] is not None else next(drawn))
                  for i in np.flatnonzero(mask)]
        self._start_envs(mask, chosen)
        return self._obs(), self._info(np.zeros(self.num_envs, bool))

    def _info(self, success: np.ndarray, **extra) -> dict:
        return {"success": success, "t": self._t.copy(), "keyframe_episode": self._start[:, 0].copy(),
                "keyframe_t": self._start[:, 1].copy(), **extra}

    @torch.no_grad()
    def step(self, actions: np.ndarray) -> tuple[BatchObservation, np.ndarray, np.ndarray, np.ndarray, Info]:
        """actions float32 [B, K, 7] -> obs, reward float32 [B], terminated, truncated bool [B], info (per-env
        arrays: success, t, steps, success_prob, uncertainty, reset, keyframe_episode, keyframe_t)."""
        actions = np.asarray(actions, dtype=np.float32)
        if actions.shape != (self.num_envs, self.K, 7):
            raise ValueError(f"actions: expected float array [B={self.num_envs}, K={self.K}, 7], "
                             f"got shape {actions.shape}")
        B = self.num_envs
        reward = np.zeros(B, np.float32)
        terminated, truncated, success = np.zeros(B, bool), np.zeros(B, bool), np.zeros(B, bool)
        ended = np.zeros(B, bool)  # episodes the judge ended in this chunk (reward "grasp" at its close)
        uncertainty, success_prob, executed = np.zeros(B, np.float32), np.zeros(B, np.float32), np.zeros(B, np.int64)
        frozen = self._frozen.copy()
        resetting = self._needs_reset & ~frozen
        if resetting.any():
            self._start_envs(resetting)
        active = np.flatnonzero(~resetting & ~frozen)
        if len(active):
            acts = torch.as_tensor(np.stack([check_action_chunk(actions[i], self.K) for i in active]),
                                   device=self.device)
            a = torch.as_tensor(active, device=self.device)
            # [b, K, c, h, w] in the denoiser's space; only the frame each env stops on is decoded (below)
            x, s_logits, _ = self.wm.predict_encoded(self._context[a], self._anchor[a], acts.to(self._dtype),
                                                     self.cfg.sampling_steps, self._gen, self._group_noise(active),
                                                     self._guidance)
            states = self.proprio.predict(self._state[a], acts, self._history[a])  # [b, K, S]
            frames = None  # the whole chunk decoded: only uncertainty and a judge that reads frames need it
            if self.cfg.uncertainty != "off":  # in pixels, whatever the space: its threshold is a pixel difference
                again, _, _ = self.wm.predict_encoded(self._context[a], self._anchor[a], acts.to(self._dtype),
                                                      self.cfg.sampling_steps, self._gen, guidance=self._guidance)
                frames = self.wm.decode(x)
                disagreement = (frames - self.wm.decode(again)).abs().mean(dim=(2, 3, 4))  # [b, K]
            if self.reward.reads_frames and frames is None:
                frames = self.wm.decode(x)
            last = np.zeros(len(active), np.int64)  # per active env, the index of the frame it stops on
            # P(success) after each action [b, K], and where the judge ends each episode [b] (-1: it goes on)
            prob, end = self.reward.chunk(active, self._t[active], self._state[a], acts, states, s_logits,
                                          frames if self.reward.reads_frames else None)
            for j, i in enumerate(active):
                hit = np.flatnonzero(prob[j] >= self.success_threshold)
                n = min(self.K, int(self._limit[i] - self._t[i]))
                if 0 <= end[j] < n:  # the judge decides: the episode ends there
                    n, ended[i] = int(end[j]) + 1, True
                    success[i] = bool(prob[j, end[j]] >= self.success_threshold)
                elif len(hit) and hit[0] < n:
                    n, success[i] = int(hit[0]) + 1, True
                executed[i], success_prob[i] = n, prob[j, :n].max()
                self._context[i] = torch.cat([self._context[i], x[j, :n]], 0)[-self.C:]
                last[j] = n - 1
                self._state[i] = states[j, n - 1]
                self._history[i] = self.proprio.next_history(self._history[i][None], acts[j, :n][None])[0]
                self.reward.advance(j, int(i), n)
                self._t[i] += n
                if self.cfg.uncertainty != "off":
                    uncertainty[i] = float(disagreement[j, :n].mean())
            # the policy sees one frame per chunk: decoding only it is K times less decoder work in latent mode
            pick = (torch.arange(len(active)), torch.as_tensor(last))
            shown = frames[pick] if frames is not None else self.wm.decode(x[pick])  # [b, ch, H, W]
            for j, i in enumerate(active):
                self._image[i] = channels_to_views(to_uint8(shown[j]), self.V)
            terminated[active] = success[active] | ended[active]
            # a graded judge: its probability where the episode ended (reward "grasp": the close, or the release)
            reward[active] = (success_prob if self.reward.graded else success)[active].astype(np.float32)
            truncated[active] = ~success[active] & ~ended[active] & (self._t[active] >= self._limit[active])
            uncertain = uncertainty > self.cfg.uncertainty_threshold
            if self.cfg.uncertainty == "truncate":
                truncated |= uncertain & ~terminated & ~resetting & ~frozen
            elif self.cfg.uncertainty == "penalize":
                reward -= self.cfg.uncertainty_penalty * (uncertain & ~resetting & ~frozen)
        self._needs_reset = (terminated | truncated) | (self._needs_reset & frozen)
        info = self._info(success, steps=executed, success_prob=success_prob, uncertainty=uncertainty, reset=resetting)
        return self._obs(), reward, terminated, truncated, info

    def render(self) -> np.ndarray:  # type: ignore[override]  # one array for all envs, not a tuple of frames
        """uint8 [B, H, V*W, 3]: every env's current views side by side."""
        return tile_views(self._image)


class ImaginationEnv(gym.Env):
    """Single-env view of `ImaginationVectorEnv` (num_envs = 1): `check_env`, step-by-step use."""

    metadata = {"render_modes": ["rgb_array"], "render_fps": 20}

    def __init__(self, world_model: WorldModel, proprio: ProprioModel, episodes: list[StartEpisode],
                 config: ImaginationConfig | None = None):
        self.vec = ImaginationVectorEnv(world_model, proprio, episodes, 1, config)
        self.observation_space = self.vec.single_observation_space
        self.action_space = self.vec.single_action_space
        self.render_mode = "rgb_array"

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Observation, Info]:
        super().reset(seed=seed)
        obs, info = self.vec.reset(seed=seed, options=options)
        return _first(obs), _first(info)

    def step(self, action: np.ndarray) -> tuple[Observation, float, bool, bool, Info]:
        if self.vec._needs_reset[0]:
            raise RuntimeError("step() called on a finished episode: call reset() first")
        obs, reward, terminated, truncated, info = self.vec.step(np.asarray(action, np.float32)[None])
        return _first(obs), float(reward[0]), bool(terminated[0]), bool(truncated[0]), _first(info)

    def render(self) -> np.ndarray:
        return self.vec.render()[0]


def _first(batch: dict) -> dict:
    return {k: v[0] for k, v in batch.items()}


__all__ = ["OBSERVE_MODES", "UNCERTAINTY_MODES", "ImaginationConfig", "ImaginationEnv", "ImaginationVectorEnv"]
