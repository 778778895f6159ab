"""Proprioception dynamics: the robot state after each action of a chunk, learned from episodes.

The video model imagines what the cameras see; a policy also reads proprio state (eef pose, gripper
fingers). The OSC controller makes the state a simple function of the previous state and the
commanded deltas, so a small MLP predicts it well without looking at pixels:

    states [B, K, S] = state [B, S] + cumsum(deltas),
    deltas = MLP(normalized state, previous actions [B, H, 7], actions [B, K, 7])

The state holds no velocity, and under OSC a moving arm keeps moving: the H actions before the chunk stand
in for it (zeros before an episode's first step, when the arm is at rest). On held-out policy episodes of
the rl_gain protocol, the open-loop end-effector error at the first gripper close was 1.43 cm (median) for
the model without history fit on the demonstrations; 0.99 cm fit on the policy's own rollouts too; 0.68 cm
with H = 8 as well (docs/notebook/loop.md, "A proprio model that reads the arm's velocity"). H = 0 is the model
saved before the history existed.

Trained on consecutive rows of real episodes (row t = state before action t).
"""
from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import torch
from torch import nn

from infra.atomic import atomic_write_text
from infra.checkpoint import config_from, load_model_file, restore, save_model_file
from infra.hub import CONFIG, WEIGHTS, load_folder, save_folder
from infra.model_card import CardFacts, render_card
from infra.provenance import versions
from robot_data.dataset import EpisodeDataset

_FORMAT = "wm-vla-rl/proprio_model"


@dataclass
class ProprioConfig:
    state_dim: int = 8
    action_dim: int = 7
    chunk_len: int = 8  # K
    history: int = 8  # H: actions before the chunk fed as input (the arm's velocity); 0 = none
    hidden: int = 256
    layers: int = 3
    steps: int = 2000  # training steps of `fit`
    batch_size: int = 256
    lr: float = 1e-3
    seed: int = 0


@dataclass
class FitProprioConfig:
    """scripts/fit_proprio.py: a proprio model fitted on recorded datasets, for imagination's `proprio` field."""

    # recorded datasets whose robot states and actions it learns from: the more of the arm's motion they
    # cover (the policy's own rollouts, not only the demonstrations), the less the imagined state drifts
    data: list[str] = field(default_factory=lambda: ["outputs/bench/rl_gain/data"])
    out: str = "outputs/proprio/proprio.pt"  # the ProprioModel.save file written
    model: ProprioConfig = field(default_factory=ProprioConfig)


class ProprioModel(nn.Module):
    """state [B, S] + previous actions [B, H, A] + actions [B, K, A] -> states after each action [B, K, S]."""

    # buffers (register_buffer): normalisation statistics
    state_mean: torch.Tensor
    state_std: torch.Tensor
    delta_std: torch.Tensor

    def __init__(self, cfg: ProprioConfig):
        super().__init__()
        self.cfg = cfg
        S, A, K, H = cfg.state_dim, cfg.action_dim, cfg.chunk_len, cfg.hidden
        if cfg.history < 0:
            raise ValueError(f"history: expected a number of previous actions >= 0, got {cfg.history}")
        dims = [S + (cfg.history + K) * A] + [H] * cfg.layers
        blocks: list[nn.Module] = []
        for i, o in zip(dims[:-1], dims[1:]):
            blocks += [nn.Linear(i, o), nn.SiLU()]
        self.net = nn.Sequential(*blocks, nn.Linear(H, K * S))
        # Normalization statistics, set by `fit` from the data (identity until then).
        self.register_buffer("state_mean", torch.zeros(S))
        self.register_buffer("state_std", torch.ones(S))
        self.register_buffer("delta_std", torch.ones(S))

    def forward(self, state: torch.Tensor, actions: torch.Tensor, history: torch.Tensor | None = None
                ) -> torch.Tensor:
        """history: the H actions before the chunk [B, H, A], oldest first; None = the arm at rest (zeros)."""
        B, K, S, A, H = state.shape[0], self.cfg.chunk_len, self.cfg.state_dim, self.cfg.action_dim, self.cfg.history
        if state.shape != (B, S) or actions.shape != (B, K, A):
            raise ValueError(
                f"proprio: expected state [B, {S}] and actions [B, {K}, {A}], "
                f"got {tuple(state.shape)} and {tuple(actions.shape)}"
            )
        if history is None:
            history = actions.new_zeros(B, H, A)
        if history.shape != (B, H, A):
            raise ValueError(f"proprio: expected history [B, {H}, {A}] (the actions before the chunk), "
                             f"got {tuple(history.shape)}")
        x = torch.cat([(state - self.state_mean) / self.state_std, history.flatten(1), actions.flatten(1)], dim=1)
        deltas = self.net(x).view(B, K, S) * self.delta_std
        return state[:, None] + deltas.cumsum(dim=1)

    @torch.no_grad()
    def predict(self, state: torch.Tensor, actions: torch.Tensor, history: torch.Tensor | None = None
                ) -> torch.Tensor:
        return self.forward(state.float(), actions.float(), None if history is None else history.float())

    def next_history(self, history: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        """The history after executing actions [B, n, A] (n <= K): the last H of history [B, H, A] + actions."""
        H = self.cfg.history
        return torch.cat([history, actions], dim=1)[:, actions.shape[1]:] if H else history

    def save(self, path: str | os.PathLike) -> None:
        save_model_file(path, _FORMAT, asdict(self.cfg), self.state_dict())

    @classmethod
    def load(cls, path: str | os.PathLike) -> ProprioModel:
        what = "proprio model (ProprioModel.save)"
        blob = load_model_file(path, what, _FORMAT)
        return cls._build(blob["config"], blob["state_dict"], path, path)

    @classmethod
    def _build(cls, config: dict, state: dict, config_path: str | os.PathLike, state_path: str | os.PathLike
               ) -> ProprioModel:
        config = {"history": 0, **config}  # files saved before the history existed read no previous actions
        model = cls(config_from(ProprioConfig, config, config_path, "proprio"))
        restore(model, state, state_path, "proprio model")
        return model.eval()

    def save_pretrained(self, folder: str | os.PathLike, facts: CardFacts | None = None) -> Path:
        """The Hub layout in `folder`: config.json, model.safetensors (weights and normalisation), README.md."""
        c = self.cfg
        what = (f"Proprioception dynamics (wm-vla-rl): the robot state ({c.state_dim} values) after each of "
                f"{c.chunk_len} actions, from the state before them; it feeds obs['state'] to a policy acting "
                "inside the video world model.")
        code = ("from world_models.proprio import ProprioModel\n"
                "proprio = ProprioModel.from_pretrained({name})\n"
                "states = proprio.predict(state, actions)   # [B, S], [B, K, 7] -> [B, K, S]")
        card = render_card("Proprio model", what, code, facts or CardFacts(), versions(), tags=["world-model"])
        return save_folder(folder, fmt=_FORMAT, version=None, config=asdict(self.cfg), state_dict=self.state_dict(),
                           card=card)

    @classmethod
    def from_pretrained(cls, folder_or_repo_id: str | os.PathLike, map_location: str | torch.device = "cpu",
                        revision: str | None = None) -> ProprioModel:
        """The model of a save_pretrained folder, or of a Hub repo id (downloaded), in eval mode."""
        folder, blob, state = load_folder(folder_or_repo_id, "proprio model folder (ProprioModel.save_pretrained)",
                                          _FORMAT, None, map_location=map_location, revision=revision)
        return cls._build(blob["config"], state, folder / CONFIG, folder / WEIGHTS)


def history_at(actions: np.ndarray, t: int, H: int) -> np.ndarray:
    """The H actions of an episode's actions [T, A] before step t [H, A], zeros before its first step."""
    actions = np.asarray(actions, np.float32)
    before = actions[max(0, t - H):t]
    return np.concatenate([np.zeros((H - len(before), actions.shape[1]), np.float32), before])


def chunk_pairs(states: list[np.ndarray], actions: list[np.ndarray], K: int, H: int = 0
                ) -> tuple[np.ndarray, ...]:
    """(state_t [N, S], actions t-H..t-1 [N, H, A], actions t..t+K-1 [N, K, A], states t+1..t+K [N, K, S],
    mask [N, K]) over episodes.

    Steps past an episode's end are masked: the last recorded row has no successor state. Actions before an
    episode's first step are zeros: the arm starts at rest.
    """
    s0, hist, acts, targets, masks = [], [], [], [], []
    for st, ac in zip(states, actions):
        T = len(ac)
        padded = np.concatenate([np.zeros((H, ac.shape[1]), np.float32), ac])
        for t in range(T - 1):
            idx = np.arange(t, t + K)
            valid = idx + 1 < T
            s0.append(st[t])
            hist.append(padded[t:t + H])
            acts.append(np.where(valid[:, None], ac[np.minimum(idx, T - 1)], 0.0))
            targets.append(st[np.minimum(idx + 1, T - 1)])
            masks.append(valid)
    if not s0:
        raise ValueError("proprio: the episodes need at least 2 steps each to form training pairs")
    A = actions[0].shape[1]
    return (np.asarray(s0, np.float32), np.asarray(hist, np.float32).reshape(len(s0), H, A),
            np.asarray(acts, np.float32), np.asarray(targets, np.float32), np.asarray(masks, np.float32))


def fit_proprio(states: list[np.ndarray], actions: list[np.ndarray],
                cfg: ProprioConfig | None = None) -> tuple[ProprioModel, list[float]]:
    """Train a `ProprioModel` on episodes (state [T, S], action [T, A] each); returns (model, losses)."""
    cfg = cfg or ProprioConfig()
    s0, hist, acts, targets, masks = (torch.from_numpy(a)
                                      for a in chunk_pairs(states, actions, cfg.chunk_len, cfg.history))
    torch.manual_seed(cfg.seed)  # before the model: its initial weights come from the global generator
    model = ProprioModel(cfg)
    model.state_mean.copy_(s0.mean(0))
    model.state_std.copy_(s0.std(0).clamp_min(1e-3))
    step_deltas = (targets[:, 0] - s0)
    model.delta_std.copy_(step_deltas.std(0).clamp_min(1e-4))
    gen = torch.Generator().manual_seed(cfg.seed)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, cfg.steps)
    losses = []
    model.train()
    for _ in range(cfg.steps):
        idx = torch.randint(0, len(s0), (min(cfg.batch_size, len(s0)),), generator=gen)
        pred = model(s0[idx], acts[idx], hist[idx])
        # Error in units of a typical one-step change, so every state dimension counts alike.
        err = ((pred - targets[idx]) / model.delta_std).pow(2).mean(-1)
        loss = (err * masks[idx]).sum() / masks[idx].sum().clamp_min(1.0)
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
        losses.append(float(loss.detach()))
    return model.eval(), losses


def fit_proprio_on_data(cfg: FitProprioConfig) -> dict:
    """Fit a ProprioModel on every episode of the datasets cfg.data and save it at cfg.out, with a .json beside
    it: episodes, final loss and the median one-step end-effector error on the training pairs (in cm; a
    sanity figure, not held out). Returns that summary."""
    states, actions = [], []
    for d in cfg.data:
        if not (Path(d) / "meta" / "info.json").is_file():
            raise ValueError(f"data: {d} is not an episode dataset (no meta/info.json)")
        ds = EpisodeDataset(d, verify=False)
        for i in range(len(ds)):
            s, a = ds.arrays(i)  # the numbers only: no video decoded
            states.append(s)
            actions.append(a)
    print(f"fitting the proprio model on {len(states)} episodes of {len(cfg.data)} datasets "
          f"(chunk {cfg.model.chunk_len}, history {cfg.model.history}, {cfg.model.steps} steps)")
    model, losses = fit_proprio(states, actions, cfg.model)
    Path(cfg.out).parent.mkdir(parents=True, exist_ok=True)
    model.save(cfg.out)
    s0, hist, acts, targets, mask = chunk_pairs(states, actions, cfg.model.chunk_len, cfg.model.history)
    n = min(len(s0), 4096)
    pred = ProprioModel.load(cfg.out).predict(*(torch.from_numpy(x[:n]) for x in (s0, acts, hist)))
    err = np.linalg.norm((pred.numpy() - targets[:n])[..., :3], axis=-1)[mask[:n] > 0]
    result = {"out": cfg.out, "episodes": len(states), "data": list(cfg.data),
              "final_loss": float(np.mean(losses[-50:])), "train_eef_error_cm_median": float(np.median(err) * 100)}
    atomic_write_text(Path(cfg.out).with_suffix(".json"), json.dumps(result, indent=2))
    return result
