"""A success judgement grounded in the simulator's own quantities: where the goal's object is.

The video model's success head has to see, at 64 px, whether the fingers closed on a bowl rim one or
two pixels away (docs/notebook/loop.md, "How the benchmark's failures happen": within-task AUC 0.25-0.64 on
unseen episodes). The simulator knows the answer in numbers: whether the object rose with the gripper and where
it ended. This module learns those numbers from recorded real episodes (per-step labels that `robot_data.sim_labels`
reads by replaying each recorded episode in the simulator, kept beside the dataset) so that imagination can use
them where no simulator runs:

    ObjectModel    object position over a chunk, from the robot's: whether the object is held after
                   each step (logits g), and o[t+k] = o[t] + sum_j<=k sigmoid(g_j) (eef[t+j] - eef[t+j-1])
                   + r_k, where g and the residual r = f(o[t] - eef[t], lift[t], grip[t], grasped[t],
                   eef[t+1..t+K] - eef[t], grip[t+1..t+K]): a held object moves with the hand.
    SuccessModel   P(goal holds | object - target, lift, grip, grasped) for one state.

Both are small MLPs on metres scaled to decimetres, trained on consecutive rows of real episodes with
the recorded robot states (teacher forcing); in imagination the robot states come from the proprio
model (`world_models.proprio`) and the object is carried forward chunk by chunk from the keyframe's
recorded position. On a real robot only the trained models and the object's start position are needed.

Row convention (robot_data.dataset.Episode): row t is the observation before action t; success[t] is the
simulator's flag after action t, i.e. it describes row t + 1.
"""
from __future__ import annotations

import os
from dataclasses import asdict, dataclass

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from infra.checkpoint import config_from, load_model_file, restore, save_model_file

# LabelledEpisode lives in robot_data (label collection builds it too) and is exported here under its old name
from robot_data.sim_labels import LabelledEpisode, read_sim_labels

_FORMAT = "wm-vla-rl/state_reward"
SCALE = 10.0  # metres -> decimetres: inputs and targets of order 1
SIM_KEYS = ("object_pos", "target_pos", "grasped")  # the per-step labels this module reads (robot_data.sim_labels)


@dataclass
class StateRewardConfig:
    chunk_len: int = 8  # K, the world model's
    hidden: int = 256
    layers: int = 3
    steps: int = 3000  # training steps of each model in `fit_state_reward`
    batch_size: int = 256
    lr: float = 1e-3
    success_pos_weight: float = 5.0  # success rows are rare (the solved scene's last few rows)
    # What the success model reads. "geometry": object - target and lift only, as LIBERO's On/In predicates do;
    # "all": also the gripper and grasped. Why geometry: experts release before the goal holds, policies often
    # solve it still holding the bowl, so with the gripper in its inputs the model called those failures.
    success_inputs: str = "geometry"
    # Then this many steps of the success model alone on the objects the trained object model carries along
    # each episode from row 0 (`track`) besides the recorded ones. Why: in imagination it judges carried
    # objects, which drift a few cm from the truth over an episode; trained on exact ones it was so sharp that
    # it called most carried successes failures. 0: off.
    tracked_steps: int = 1000
    seed: int = 0


def _mlp(inp: int, out: int, hidden: int, layers: int) -> nn.Sequential:
    dims = [inp] + [hidden] * layers
    blocks: list[nn.Module] = []
    for i, o in zip(dims[:-1], dims[1:]):
        blocks += [nn.Linear(i, o), nn.SiLU()]
    return nn.Sequential(*blocks, nn.Linear(hidden, out))


def success_features(obj: torch.Tensor, target: torch.Tensor, lift: torch.Tensor, grip: torch.Tensor,
                     grasped: torch.Tensor) -> torch.Tensor:
    """[..., 7]: (object - target) [..., 3] and lift [...] in decimetres, gripper qpos [..., 2] x 10 (the fingers
    move ~4 cm), grasped [...] in {0, 1}."""
    return torch.cat([(obj - target) * SCALE, lift[..., None] * SCALE, grip * SCALE, grasped[..., None].float()], -1)


class StateReward(nn.Module):
    """The object model and the success model, saved and loaded together."""

    def __init__(self, cfg: StateRewardConfig):
        super().__init__()
        if cfg.success_inputs not in ("geometry", "all"):
            raise ValueError(f"success_inputs: expected 'geometry' or 'all', got {cfg.success_inputs!r}")
        self.cfg = cfg
        K, H, L = cfg.chunk_len, cfg.hidden, cfg.layers
        self.object_net = _mlp(3 + 1 + 2 + 1 + K * 3 + K * 2, K * 4, H, L)  # -> K x (delta xyz, grasped logit)
        self.success_net = _mlp(7, 1, H // 2, max(1, L - 1))

    def object_step(self, obj: torch.Tensor, lift: torch.Tensor, grasped: torch.Tensor, state: torch.Tensor,
                    next_states: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """obj [B, 3], lift [B], grasped [B] at row t, robot state [B, S] at t and states [B, K, S] after each
        action of the chunk (eef xyz = state[..., :3], gripper qpos = state[..., 6:8]) ->
        object positions [B, K, 3] after each action and grasped logits [B, K]."""
        B, K = obj.shape[0], self.cfg.chunk_len
        if next_states.shape[:2] != (B, K) or state.shape[0] != B:
            raise ValueError(f"state reward: expected state [B={B}, S] and next_states [B, K={K}, S], got "
                             f"{tuple(state.shape)} and {tuple(next_states.shape)}")
        eef, grip = state[:, :3], state[:, 6:8]
        x = torch.cat([(obj - eef) * SCALE, lift[:, None] * SCALE, grip * SCALE, grasped[:, None].float(),
                       ((next_states[..., :3] - eef[:, None]) * SCALE).flatten(1),
                       (next_states[..., 6:8] * SCALE).flatten(1)], 1)
        out = self.object_net(x).view(B, K, 4)
        # Why this form: a held object moves with the hand. Step j carries it by the hand's step times the
        # probability that it is held then; the net adds only what the hand does not explain (a drop, a slip).
        eef_path = torch.cat([eef[:, None], next_states[..., :3]], 1)  # [B, K + 1, 3]
        carried = (torch.sigmoid(out[..., 3:]) * eef_path.diff(dim=1)).cumsum(1)
        return obj[:, None] + carried + out[..., :3] / SCALE, out[..., 3]

    def carry(self, obj: torch.Tensor, z0: torch.Tensor, held: torch.Tensor, state: torch.Tensor,
              next_states: torch.Tensor, target: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """One chunk of the judgement imagination makes: the object at obj [B, 3] (start height z0 [B], held
        [B] in {0, 1}) carried along robot states [B, S] -> next_states [B, K, S], then judged against target
        [B, K, 3]. Returns object positions [B, K, 3], held [B, K] (0/1), success probabilities [B, K]."""
        nxt, grasp_logits = self.object_step(obj, obj[:, 2] - z0, held, state, next_states)
        now_held = (torch.sigmoid(grasp_logits) > 0.5).float()
        prob = torch.sigmoid(self.success_logit(nxt, target, nxt[..., 2] - z0[:, None], next_states[..., 6:8],
                                                now_held))
        return nxt, now_held, prob

    def success_logit(self, obj: torch.Tensor, target: torch.Tensor, lift: torch.Tensor, grip: torch.Tensor,
                      grasped: torch.Tensor) -> torch.Tensor:
        """[...]: the goal's logit for states with object/target [..., 3], lift [...], grip [..., 2], grasped [...]."""
        if self.cfg.success_inputs == "geometry":
            grip, grasped = torch.zeros_like(grip), torch.zeros_like(grasped)
        return self.success_net(success_features(obj, target, lift, grip, grasped))[..., 0]

    def save(self, path: str | os.PathLike) -> None:
        save_model_file(path, _FORMAT, asdict(self.cfg), self.state_dict())

    @classmethod
    def load(cls, path: str | os.PathLike) -> StateReward:
        what = "state-reward checkpoint (StateReward.save)"
        blob = load_model_file(path, what, _FORMAT)
        model = cls(config_from(StateRewardConfig, blob["config"], path, "state-reward"))
        restore(model, blob["state_dict"], path, "state-reward model")
        return model.eval()


@torch.no_grad()
def track(model: StateReward, ep: LabelledEpisode, t0: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Carry the object chunk by chunk along an episode's recorded robot states from row t0 (its recorded
    object as the start), as imagination does with predicted ones: (object positions [N, 3], success
    probabilities [N]) for rows t0+1 .. t0+N, N = the whole chunks that fit."""
    # torch.tensor copies: dataset arrays are read-only, and as_tensor would warn on every call
    K = model.cfg.chunk_len
    obj = torch.tensor(ep.object_pos[t0], dtype=torch.float32)[None]
    z0, grasped = torch.tensor([float(ep.object_pos[0, 2])]), torch.tensor([float(ep.grasped[t0])])
    objs, probs = [], []
    for t in range(t0, len(ep.state) - K, K):
        states = torch.tensor(ep.state[t + 1:t + K + 1], dtype=torch.float32)[None]
        state = torch.tensor(ep.state[t], dtype=torch.float32)[None]
        target = torch.tensor(ep.target_pos[t + 1:t + K + 1], dtype=torch.float32)[None]
        nxt, held, p = model.carry(obj, z0, grasped, state, states, target)
        obj, grasped = nxt[:, -1], held[:, -1]
        objs.append(nxt[0].numpy())
        probs.append(p[0].numpy())
    if not objs:
        return np.zeros((0, 3), np.float32), np.zeros(0, np.float32)
    return np.concatenate(objs), np.concatenate(probs)


def labelled_episodes(data_dir: str, indices: list[int] | None = None) -> tuple[list[LabelledEpisode], list[int]]:
    """The episodes of a dataset (all, or `indices`) that have per-step simulator labels (SIM_KEYS, written
    beside the dataset by `robot_data.sim_labels.label_dataset`), and their indices; episodes without them
    (tasks with no pick-and-place object, replays that did not reproduce the recording, datasets not
    labelled yet: scripts/label_episodes.py) are skipped."""
    # The dataset format stays out of the model's import path (robot_data.sim_labels imports neither it nor the
    # simulator).
    from robot_data.dataset import EpisodeDataset

    ds = EpisodeDataset(data_dir, verify=False)
    out, kept = [], []
    for i in range(len(ds)) if indices is None else indices:
        sim = read_sim_labels(data_dir, i)
        if sim is None or not np.isfinite(sim["object_pos"]).all():
            continue
        ep = ds[i]
        rows = len(sim["grasped"])  # fewer than the episode's when its replay diverged (the rows before it)
        if sim["info"].get("length", rows) != len(ep) or rows > len(ep):
            raise ValueError(f"{data_dir}: the labels of episode {i} were made for {sim['info'].get('length', rows)} "
                             f"rows, the episode has {len(ep)}: stale labels of another dataset? Delete sim_labels/ "
                             "and label again")
        out.append(LabelledEpisode(ep.state[:rows], sim["object_pos"], sim["target_pos"], sim["grasped"],
                                   np.asarray(ep.success, bool)[:rows]))
        kept.append(i)
    return out, kept


def object_pairs(episodes: list[LabelledEpisode], K: int) -> dict[str, torch.Tensor]:
    """Chunk samples over every row t with a successor: inputs at t, targets at t+1..t+K, mask [N, K]."""
    keys = ("obj", "lift", "grasped", "state", "next", "target_obj", "target_grasp", "mask")
    cols: dict[str, list] = {k: [] for k in keys}
    for e in episodes:
        T = len(e.state)
        lift = e.object_pos[:, 2] - e.object_pos[0, 2]
        for t in range(T - 1):
            idx = np.minimum(np.arange(t + 1, t + K + 1), T - 1)
            cols["obj"].append(e.object_pos[t])
            cols["lift"].append(lift[t])
            cols["grasped"].append(float(e.grasped[t]))
            cols["state"].append(e.state[t])
            cols["next"].append(e.state[idx])
            cols["target_obj"].append(e.object_pos[idx])
            cols["target_grasp"].append(e.grasped[idx].astype(np.float32))
            cols["mask"].append((np.arange(t + 1, t + K + 1) < T).astype(np.float32))
    if not cols["obj"]:
        raise ValueError("state reward: the episodes need at least 2 rows each to form training pairs")
    return {k: torch.as_tensor(np.asarray(v, np.float32)) for k, v in cols.items()}


def success_rows(episodes: list[LabelledEpisode]) -> dict[str, torch.Tensor]:
    """One sample per row: the row's object, target, lift, gripper, grasped and whether the goal holds there
    (success[t - 1]; row 0: the start, never solved)."""
    obj, target, lift, grip, grasped, label = [], [], [], [], [], []
    for e in episodes:
        obj.append(e.object_pos)
        target.append(e.target_pos)
        grip.append(e.state[:, 6:8])
        lift.append(e.object_pos[:, 2] - e.object_pos[0, 2])
        grasped.append(e.grasped.astype(np.float32))
        label.append(np.concatenate([[False], np.asarray(e.success[:-1], bool)]).astype(np.float32))
    return {k: torch.as_tensor(np.concatenate(v).astype(np.float32)) for k, v in
            (("obj", obj), ("target", target), ("lift", lift), ("grip", grip), ("grasped", grasped), ("label", label))}


def fit_state_reward(episodes: list[LabelledEpisode], cfg: StateRewardConfig | None = None) -> tuple[StateReward, dict]:
    """Train both models on labelled real episodes; returns (model, {"object_loss": [...], "success_loss": [...]})."""
    cfg = cfg or StateRewardConfig()
    torch.manual_seed(cfg.seed)
    gen = torch.Generator().manual_seed(cfg.seed)
    model = StateReward(cfg)
    pairs, rows = object_pairs(episodes, cfg.chunk_len), success_rows(episodes)
    if rows["label"].sum() == 0:
        raise ValueError("state reward: no recorded row is a success; the success model needs solved episodes")
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, cfg.steps)
    pos_weight = torch.tensor(cfg.success_pos_weight)
    log: dict[str, list[float]] = {"object_loss": [], "success_loss": []}
    model.train()
    for _ in range(cfg.steps):
        i = torch.randint(0, len(pairs["obj"]), (min(cfg.batch_size, len(pairs["obj"])),), generator=gen)
        pred, grasp_logit = model.object_step(pairs["obj"][i], pairs["lift"][i], pairs["grasped"][i], pairs["state"][i],
                                              pairs["next"][i])
        m = pairs["mask"][i]
        pos_err = ((pred - pairs["target_obj"][i]) * SCALE).pow(2).sum(-1)  # squared decimetres per step
        grasp_err = F.binary_cross_entropy_with_logits(grasp_logit, pairs["target_grasp"][i], reduction="none")
        obj_loss = ((pos_err + grasp_err) * m).sum() / m.sum().clamp_min(1.0)
        j = torch.randint(0, len(rows["obj"]), (min(cfg.batch_size, len(rows["obj"])),), generator=gen)
        logit = model.success_logit(rows["obj"][j], rows["target"][j], rows["lift"][j], rows["grip"][j],
                                    rows["grasped"][j])
        succ_loss = F.binary_cross_entropy_with_logits(logit, rows["label"][j], pos_weight=pos_weight)
        opt.zero_grad()
        (obj_loss + succ_loss).backward()
        opt.step()
        sched.step()
        log["object_loss"].append(float(obj_loss.detach()))
        log["success_loss"].append(float(succ_loss.detach()))
    if cfg.tracked_steps > 0:
        tracked = tracked_rows(model.eval(), episodes)
        rows = {k: torch.cat([rows[k], tracked[k]]) for k in rows}
        model.train()
        opt = torch.optim.AdamW(model.success_net.parameters(), lr=cfg.lr)
        for _ in range(cfg.tracked_steps):
            j = torch.randint(0, len(rows["obj"]), (min(cfg.batch_size, len(rows["obj"])),), generator=gen)
            logit = model.success_logit(rows["obj"][j], rows["target"][j], rows["lift"][j], rows["grip"][j],
                                        rows["grasped"][j])
            succ_loss = F.binary_cross_entropy_with_logits(logit, rows["label"][j], pos_weight=pos_weight)
            opt.zero_grad()
            succ_loss.backward()
            opt.step()
            log["success_loss"].append(float(succ_loss.detach()))
    return model.eval(), log


@torch.no_grad()
def tracked_rows(model: StateReward, episodes: list[LabelledEpisode]) -> dict[str, torch.Tensor]:
    """`success_rows` with the object where `track` carries it from row 0 instead of where it was: rows
    1..N of every episode (N: whole chunks), labelled with the recorded success."""
    obj, target, lift, grip, grasped, label = [], [], [], [], [], []
    for e in episodes:
        objs, _ = track(model, e, 0)
        n = len(objs)
        if n == 0:
            continue
        obj.append(objs)
        target.append(e.target_pos[1:n + 1])
        grip.append(e.state[1:n + 1, 6:8])
        lift.append(objs[:, 2] - e.object_pos[0, 2])
        grasped.append(e.grasped[1:n + 1].astype(np.float32))
        label.append(np.asarray(e.success[:n], np.float32))  # row t holds after action t - 1
    return {k: torch.as_tensor(np.concatenate(v).astype(np.float32)) for k, v in
            (("obj", obj), ("target", target), ("lift", lift), ("grip", grip), ("grasped", grasped), ("label", label))}


__all__ = ["LabelledEpisode", "SIM_KEYS", "StateReward", "StateRewardConfig", "fit_state_reward", "labelled_episodes",
           "object_pairs", "success_features", "success_rows", "track", "tracked_rows"]
