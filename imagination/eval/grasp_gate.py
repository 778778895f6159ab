"""The reward gate for reward "grasp": what the grasp-point classifier says of a policy's recorded real
episodes, read at three stages, one record per episode.

    recorded     the robot states the simulator recorded: how much of the outcome the grasp point holds
    predicted    the recorded actions through imagination's proprio model (open loop): what its drift costs
    closed_loop  the policy acting on imagined frames from the episode's first frame (world model + proprio):
                 what imagined RL with reward "grasp" scores (imagination/rewards/grasp.py)

bench/reward_ceiling.py prints all three; bench/reward_signal.py --reward grasp scores the closed loop with
the gate's AUC and calibration (imagination/eval/reward_gate.py). The classifier is fit on training-side
episodes only (labelled datasets and label-collection folders, world_models/grasp_point.py).
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import numpy as np
import torch

from imagination.env import ImaginationConfig
from imagination.imagine import ImaginedEpisodes, imagine, open_imagination, policy_mean, recorded_actions
from imagination.keyframes import Keyframe, grasp_starts, placement_starts
from policies.base import Policy
from robot_data.sim_labels import read_sim_labels
from world_models.grasp_point import (
    GraspPointClassifier,
    GraspPointConfig,
    dataset_features,
    fit_grasp_point,
    grasp_features,
    place_features,
)
from world_models.proprio import ProprioModel

STAGES = ("recorded", "predicted", "closed_loop")


@dataclass
class GraspGateConfig:
    """The classifier's training data, the imagination that re-runs the gate's episodes, and the ending."""

    world_model: str = ""
    proprio: str = ""  # ProprioModel file: the one imagined RL uses
    train_data: list[str] = field(default_factory=list)  # labelled datasets (scripts/label_episodes.py)
    label_dirs: list[str] = field(default_factory=list)  # scripts/collect_labels.py out_dirs
    until: str = "close"  # "close": judge the grasp; "release": the grasp and where the object is let go
    num_envs: int = 10  # imagined episodes per batch
    max_steps: int = 220  # imagined horizon
    seed: int = 0
    # Imagined runs per episode and stage (seeds seed, seed+1, ...: the world model's sampling noise), and how
    # their probabilities combine: "mean" estimates P(success) over the model's noise; "min" counts a success
    # only where every run agrees (pessimism). One run per episode is the policy's single imagined future.
    samples: int = 1
    combine: str = "mean"
    # modules of your own package that define the policy's class, imported before it loads (docs/policies.md)
    policy_modules: list[str] = field(default_factory=list)
    grasp_point: GraspPointConfig = field(default_factory=GraspPointConfig)  # the classifier (task_bias, ...)
    # > 0: imagine each episode from this many steps before its recorded event, the recording before it kept:
    # with until "release", before its release (the placement), holding the recording's grasp, episodes whose
    # release does not come that long after their close left out (imagination/keyframes.py mode "release"); with
    # until "close", before its first close (the grasp), episodes that close sooner or never left out. Left-out
    # episodes are out of every stage
    lead: int = 0
    # > 1: round each start down to a multiple of this many steps (the policy's `n_action_steps`). Why: a policy
    # recorded in reality chose its actions only at those steps (a chunk at step 0, 8, 16, ...); started between two
    # of them, the policy decides where it never decided for real, and the imagined future follows another chunk
    # than the recorded one even before any imagined frame is read (imagination/keyframes.py, `align`)
    align: int = 0


def imagined_features(run: ImaginedEpisodes, proprio: ProprioModel, starts: list[np.ndarray],
                      targets: list[np.ndarray], place: bool = False,
                      before: list[tuple[np.ndarray, np.ndarray]] | None = None) -> list[np.ndarray]:
    """Grasp (place=True: grasp-and-release) features of each imagined episode: every step's robot state
    rebuilt from the chunk-start states the run kept and the proprio model's prediction within each chunk.
    before: per episode, the recorded states [t0, S] and actions [t0, 7] before its keyframe t0 (default: the
    run starts at frame 0), which the features read as the episode's beginning."""
    assert run.state is not None  # imagine(keep_obs=True)
    out = []
    for e in range(len(run.keyframes)):
        rows = np.flatnonzero(run.env == e)
        rows = rows[np.argsort(run.step[rows])]
        acts = torch.as_tensor(run.actions[rows])  # [n, K, 7]
        past_s, past_a = before[e] if before is not None else (np.zeros((0, run.state.shape[1])), np.zeros((0, 7)))
        # the actions before each chunk, as the env fed them: the recording's, then the previous chunks'
        K, H = acts.shape[1], proprio.cfg.history
        flat = torch.cat([torch.zeros(H, 7), torch.tensor(past_a, dtype=acts.dtype), acts.reshape(-1, 7)])
        t0 = len(past_a)
        history = torch.stack([flat[t0 + j * K:t0 + j * K + H] for j in range(len(rows))])
        with torch.no_grad():  # [n, K, S]: the state after each action of each chunk
            after = proprio.predict(torch.as_tensor(run.state[rows]), acts, history).numpy()
        states = np.concatenate([past_s, *(np.concatenate([run.state[r][None], after[j, :-1]])
                                           for j, r in enumerate(rows))])
        featurize = place_features if place else grasp_features
        out.append(featurize(states, np.concatenate([past_a, run.actions[rows].reshape(-1, 7)]), starts[e],
                             targets[e]))
    return out


def fit_gate_classifier(cfg: GraspGateConfig) -> GraspPointClassifier:
    """The grasp-point classifier the gate judges with: fit on cfg.train_data and cfg.label_dirs, on the
    features cfg.until names. The same config gives the same classifier: fit once for several policies."""
    return fit_grasp_point(cfg.train_data, cfg.label_dirs, cfg.grasp_point, place=cfg.until == "release")


def grasp_gate_records(gate_data: str, policy_path: str, cfg: GraspGateConfig,
                       stages: Sequence[str] = STAGES,
                       classifier: GraspPointClassifier | None = None) -> dict[str, list[dict[str, Any]]]:
    """Per stage, one record per labelled episode of `policy_path` in the recorded dataset `gate_data`:
    task_id, init_state_id, episode, real_success and max_success_prob (the classifier's P(success) at the
    stage's grasp), the fields imagination.eval.reward_gate.gate_figures reads. `classifier`: fit_gate_classifier(cfg)
    made once by the caller (fit here when None)."""
    bad = [s for s in stages if s not in STAGES]
    if bad:
        raise ValueError(f"stages: expected some of {list(STAGES)}, got {bad}")
    if cfg.until not in ("close", "release"):
        raise ValueError(f"until: expected 'close' or 'release', got {cfg.until!r}")
    if cfg.samples < 1 or cfg.combine not in ("mean", "min"):
        raise ValueError(f"samples, combine: expected an integer >= 1 and 'mean' or 'min', got {cfg.samples}, "
                         f"{cfg.combine!r}")
    place = cfg.until == "release"
    feats, tasks, real, idx = dataset_features(gate_data, policy_path, place)
    if not idx:
        raise ValueError(f"gate_data: {gate_data} holds no labelled episode of {policy_path} "
                         "(record it with bench/reward_signal.py, label it with scripts/label_episodes.py)")
    from robot_data.dataset import EpisodeDataset

    dataset = EpisodeDataset(gate_data, verify=False)
    t0 = np.zeros(len(idx), np.int64)
    if cfg.lead > 0:
        find_starts = placement_starts if place else grasp_starts
        t0 = find_starts([dataset.arrays(i)[1] for i in idx], cfg.lead, cfg.align)
        keep = np.flatnonzero(t0 >= 0)
        if not len(keep):
            event = "releases more than {} steps after its close" if place else "closes {} steps or more in"
            raise ValueError(f"lead: no episode of {policy_path} in {gate_data} {event.format(cfg.lead)}")
        feats, tasks, real = [feats[k] for k in keep], [tasks[k] for k in keep], [real[k] for k in keep]
        idx, t0 = [idx[k] for k in keep], t0[keep]
    clf = classifier or fit_gate_classifier(cfg)
    task_arr = np.array(tasks)
    sims = cast(list[dict[str, Any]], [read_sim_labels(gate_data, i) for i in idx])  # labelled: none is None
    meta = {m.episode_index: m for m in dataset.meta}

    def records(probs: np.ndarray) -> list[dict[str, Any]]:
        return [{"task_id": int(tasks[k]), "init_state_id": int(meta[i].init_state_id), "episode": int(i),
                 "real_success": bool(real[k]), "max_success_prob": float(probs[k])} for k, i in enumerate(idx)]

    out: dict[str, list[dict[str, Any]]] = {}
    if "recorded" in stages:
        out["recorded"] = records(clf.predict(np.array(feats), task_arr))
    imagined = [s for s in stages if s != "recorded"]
    if not imagined:
        return out
    policy = Policy.load(policy_path, modules=cfg.policy_modules)
    policy.eval()
    # the success threshold is out of reach: nothing ends an episode before the horizon, as in the gate
    env = open_imagination(cfg.world_model, gate_data, cfg.proprio, num_envs=cfg.num_envs,
                           config=ImaginationConfig(max_steps=cfg.max_steps, success_threshold=2.0), indices=idx,
                           policy=policy)
    starts, targets = [s["object_pos"][0] for s in sims], [s["target_pos"][0] for s in sims]
    acts: dict[str, Callable[[], Any]] = {"predicted": lambda: recorded_actions(env),
                                          "closed_loop": lambda: policy_mean(policy)}
    for name in imagined:
        runs = []
        # the predicted stage plays recorded actions through the proprio model: the frames' noise cannot move it
        for seed in range(cfg.seed, cfg.seed + (cfg.samples if name == "closed_loop" else 1)):
            got: list[np.ndarray] = []
            for b in range(0, len(idx), env.num_envs):
                k = list(range(b, min(b + env.num_envs, len(idx))))
                run = imagine(env, acts[name](), [Keyframe(i, int(t0[i])) for i in k], seed=seed, keep_obs=True)
                before = [(env.episodes[i].state[:t0[i]], env.episodes[i].action[:t0[i]]) for i in k]
                got += imagined_features(run, env.proprio, [starts[i] for i in k], [targets[i] for i in k], place,
                                         before)
            runs.append(clf.predict(np.array(got), task_arr))
        probs = np.stack(runs)  # [samples, episodes]
        out[name] = records(probs.mean(0) if cfg.combine == "mean" else probs.min(0))
    return out


__all__ = ["STAGES", "GraspGateConfig", "grasp_gate_records", "grasp_starts", "imagined_features", "placement_starts"]
