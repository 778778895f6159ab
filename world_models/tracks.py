"""What imagination predicts besides pixels, against the real episode: the robot's end-effector track
(world_models.proprio) and the goal object's position carried along it (world_models.object_state).

Both are replayed open loop exactly as `ImaginationVectorEnv.step` does it: chunk by chunk from the
episode's first recorded state (and, for the object, its first simulator label), each chunk starting
where the previous one's prediction ended, never from a real row. Row convention (robot_data.dataset): row t
is the observation before action t, so the prediction after action t is compared with row t + 1.

Errors are Euclidean distances in metres per step; the bench prints them in centimetres.
"""
from __future__ import annotations

import numpy as np
import torch

from world_models.object_state import StateReward, StateRewardConfig, fit_state_reward, labelled_episodes
from world_models.proprio import ProprioConfig, ProprioModel, fit_proprio

EEF = slice(0, 3)  # robot state layout (envs.robot): eef xyz, axis-angle, gripper finger qpos x2
GRIPPER = slice(6, 8)


def _chunks(actions: np.ndarray, K: int) -> torch.Tensor:
    """actions [A, 7] -> [ceil(A / K), K, 7], the last chunk completed with zero actions (as rollouts do)."""
    pad = (-len(actions)) % K
    a = np.concatenate([actions, np.zeros((pad, actions.shape[1]), np.float32)]) if pad else actions
    return torch.tensor(a, dtype=torch.float32).reshape(-1, K, actions.shape[1])


@torch.no_grad()
def proprio_track(model: ProprioModel, state0: np.ndarray, actions: np.ndarray) -> np.ndarray:
    """Robot states after each action [A, S], predicted open loop from state0 [S] and actions [A, 7]."""
    K = model.cfg.chunk_len
    state = torch.tensor(state0, dtype=torch.float32)[None]
    history = torch.zeros(1, model.cfg.history, np.shape(actions)[-1])  # the arm at rest before the first step
    out = []
    for chunk in _chunks(np.asarray(actions, np.float32), K):
        states = model.predict(state, chunk[None], history)  # [1, K, S]
        out.append(states[0])
        state = states[:, -1]
        history = model.next_history(history, chunk[None])
    return torch.cat(out).numpy()[: len(actions)] if out else np.zeros((0, len(state0)), np.float32)


@torch.no_grad()
def object_track(model: StateReward, state0: np.ndarray, states: np.ndarray, sim: dict) -> np.ndarray:
    """The goal object's positions after each action [A, 3], carried from its label at row 0 along the
    robot states state0 [S] then states [A, S] (predicted), as imagination carries it.

    sim: the episode's simulator labels (robot_data.sim_labels.read_sim_labels): object_pos/target_pos [T, 3],
    grasped [T]. The target does not move in LIBERO-Spatial; its row-0 position stands for every step."""
    K = model.cfg.chunk_len
    obj = torch.tensor(sim["object_pos"][0], dtype=torch.float32)[None]
    z0 = torch.tensor([float(sim["object_pos"][0, 2])])
    held = torch.tensor([float(sim["grasped"][0])])
    target = torch.tensor(sim["target_pos"][0], dtype=torch.float32)[None, None].expand(1, K, 3)
    A = len(states)
    pad = (-A) % K  # the padded rows repeat the last state: they only complete the last chunk, then are dropped
    full = np.concatenate([states, np.repeat(states[-1:], pad, 0)]) if pad else states
    prev = torch.tensor(state0, dtype=torch.float32)[None]
    out = []
    for start in range(0, len(full), K):
        nxt = torch.tensor(full[start:start + K], dtype=torch.float32)[None]  # [1, K, S]
        path, held_path, _ = model.carry(obj, z0, held, prev, nxt, target)
        out.append(path[0])
        obj, held, prev = path[:, -1], held_path[:, -1], nxt[:, -1]
    return torch.cat(out).numpy()[:A] if out else np.zeros((0, 3), np.float32)


def track_errors(model: ProprioModel, state: np.ndarray, actions: np.ndarray, steps: int,
                 state_reward: StateReward | None = None, sim: dict | None = None) -> dict[str, np.ndarray]:
    """Per-step errors of the first `steps` actions of an episode (state [T, S], actions [T, 7] as recorded):
    eef_err [N] (m), gripper_err [N] (m, the two finger positions' mean absolute error), and with a state
    reward and labels, object_err [M] (m) over the M <= N steps whose row the labels cover (a replay that
    diverged labels only a prefix) and object_err_recorded [M], the object carried along the recorded
    states. N = min(steps, T - 1): the row after the last action is not recorded."""
    N = min(steps, len(state) - 1)
    if N < 1:
        raise ValueError(f"track_errors: the episode needs at least 2 rows, has {len(state)}")
    pred = proprio_track(model, state[0], actions[:N])
    real = np.asarray(state[1:N + 1], np.float32)
    out = {"eef_err": np.linalg.norm(pred[:, EEF] - real[:, EEF], axis=1),
           "gripper_err": np.abs(pred[:, GRIPPER] - real[:, GRIPPER]).mean(axis=1)}
    if state_reward is not None and sim is not None:
        M = min(N, len(sim["grasped"]) - 1)
        if M >= 1:
            obj = object_track(state_reward, state[0], pred[:M], sim)
            out["object_err"] = np.linalg.norm(obj - sim["object_pos"][1:M + 1], axis=1)
            # the same carry along the recorded states: the object model's own error, without the track's
            obj = object_track(state_reward, state[0], real[:M], sim)
            out["object_err_recorded"] = np.linalg.norm(obj - sim["object_pos"][1:M + 1], axis=1)
    return out


def fit_track_models(data_dir: str, train: list[int], chunk_len: int, proprio: str = "", state_reward: str = ""
                     ) -> tuple[ProprioModel | None, StateReward | None, str]:
    """The proprio model and state reward to score, and a note on what is left out and why.

    proprio / state_reward: a checkpoint file, "none" (left out), or "" = fitted here on the training
    episodes `train` of data_dir (the world model's, so that no scored episode was fitted on). The state
    reward is fitted only when those episodes carry simulator labels (scripts/label_episodes.py)."""
    from robot_data.dataset import EpisodeDataset  # the dataset format stays out of the models' import path

    notes = []
    pm: ProprioModel | None = None
    if proprio == "none":
        notes.append("proprio: left out")
    elif proprio:
        pm = ProprioModel.load(proprio)
    elif not train:
        notes.append("proprio: no training episodes to fit on (no split.json)")
    else:
        ds = EpisodeDataset(data_dir, verify=False)
        eps = [ds[i] for i in train]
        # fit_proprio draws its initial weights from torch's global generator: seeded here, in a fork so that
        # the caller's stream is untouched, the same run fits the same model
        with torch.random.fork_rng(devices=[]), torch.enable_grad():
            torch.manual_seed(0)
            pm, _ = fit_proprio([e.state for e in eps], [e.action for e in eps], ProprioConfig(chunk_len=chunk_len))
    if pm is not None and pm.cfg.chunk_len != chunk_len:
        raise ValueError(f"proprio: chunk_len {pm.cfg.chunk_len} differs from the world model's {chunk_len}")
    sr: StateReward | None = None
    if state_reward == "none" or pm is None:
        notes.append("object: left out" + ("" if pm is not None else " (it is carried along the proprio track)"))
    elif state_reward:
        sr = StateReward.load(state_reward)
    else:
        labelled, _ = labelled_episodes(data_dir, train)
        if not labelled or not any(e.success.any() for e in labelled):
            notes.append(f"object: the training episodes of {data_dir} carry no simulator labels with a success "
                         "(scripts/label_episodes.py writes them)")
        else:
            with torch.random.fork_rng(devices=[]), torch.enable_grad():  # fit_state_reward seeds itself
                sr, _ = fit_state_reward(labelled, StateRewardConfig(chunk_len=chunk_len))
    if sr is not None and sr.cfg.chunk_len != chunk_len:
        raise ValueError(f"state_reward: chunk_len {sr.cfg.chunk_len} differs from the world model's {chunk_len}")
    return pm, sr, "; ".join(notes)


__all__ = ["fit_track_models", "object_track", "proprio_track", "track_errors"]
