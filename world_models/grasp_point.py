"""Where the gripper first closes, relative to the object: an outcome predictor from robot states alone.

The BC policy's real failures are grasps that close 1-2 cm off the bowl (docs/notebook/loop.md, "How the
benchmark's failures happen"). Whether an
episode succeeds is then mostly decided at one moment: the first step the policy commands the gripper
shut. This module reads that moment from an episode's robot states and actions,

    features = [eef - object_start (3), close step / 220, |eef - object_start|_xy,
                target_start - object_start (3)]                                    (eef at the close step)

and fits a classifier (scikit-learn: standardize, quadratic terms, logistic regression, plus the task's
one-hot) of the episode's real outcome on labelled episodes (recorded datasets labelled by
`robot_data.sim_labels`, near-miss episodes of `robot_data.label_collection`). Only the object's and the target's
start positions come from the simulator; the rest are the robot's own states, which imagination
predicts with the proprio model. `bench/reward_ceiling.py` uses it to measure how much of the real
outcome survives each stage of imagination (recorded states, predicted states, the policy acting on
imagined frames).
"""
from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from scipy.special import expit, logit
from sklearn.linear_model import LogisticRegression
from sklearn.pipeline import Pipeline, make_pipeline
from sklearn.preprocessing import PolynomialFeatures, StandardScaler

from infra.checkpoint import config_from, load_model_file, save_model_file

GRIPPER = 6  # action dimension of the gripper command: > 0 closes (LIBERO / robosuite convention)
HORIZON = 220  # the close step is scaled by LIBERO-Spatial's episode horizon
NUM_TASKS = 10  # one-hot width: the tasks of one suite
_FORMAT = "wm-vla-rl/grasp_point"
_EPS = 1e-6  # probabilities are clipped to [eps, 1 - eps] before a logit: a judge's 0 or 1 stays finite


def grasp_features(state: np.ndarray, action: np.ndarray, object_start: np.ndarray,
                   target_start: np.ndarray) -> np.ndarray:
    """[8] features of one episode: state [T, S>=3] (eef position, axis-angle, ...), action [T, 7],
    object_start and target_start [3] (metres). An episode that never closes the gripper is read at its
    last step."""
    state, action = _checked(state, action)
    t = first_close(action)
    return features_at(state[t if t >= 0 else len(action) - 1], t if t >= 0 else len(action) - 1, object_start,
                       target_start)


def _checked(state: np.ndarray, action: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """state [T, S>=3] and action [T, 7] as float64, or one ValueError naming both."""
    state, action = np.asarray(state, np.float64), np.asarray(action, np.float64)
    if state.ndim != 2 or state.shape[1] < 3 or action.ndim != 2 or action.shape[1] != 7:
        raise ValueError(f"state, action: expected [T, S>=3] and [T, 7], got {state.shape} and {action.shape}")
    if len(state) != len(action) or not len(state):
        raise ValueError(f"state, action: expected the same number T >= 1 of rows, got {len(state)} and {len(action)}")
    return state, action


def first_close(action: np.ndarray) -> int:
    """The first row of action [T, 7] that commands the gripper shut, -1 when none does."""
    closes = np.flatnonzero(np.asarray(action)[:, GRIPPER] > 0)
    return int(closes[0]) if len(closes) else -1


def features_at(state: np.ndarray, t: int, object_start: np.ndarray, target_start: np.ndarray) -> np.ndarray:
    """[8] features of the robot state [S>=3] at control step t, when the gripper is commanded shut."""
    state = np.asarray(state, np.float64)
    rel = state[:3] - np.asarray(object_start, np.float64)
    # No orientation: the demonstrations hardly roll or pitch, so a classifier that read the axis-angle would
    # extrapolate there, and imagined RL rolled the gripper to please it (real success fell to 0/8 on the first
    # jobs). Without it the within-task AUC on recorded states is 0.97 instead of 0.98 (docs/notebook/loop.md,
    # "RL on the grasp reward").
    return np.concatenate([rel, [t / HORIZON, np.linalg.norm(rel[:2])],
                           np.asarray(target_start, np.float64) - np.asarray(object_start, np.float64)])


def release_after(action: np.ndarray, t_close: int) -> int:
    """The first row of action [T, 7] after t_close that commands the gripper open, -1 when none does."""
    opens = np.flatnonzero(np.asarray(action)[t_close + 1:, GRIPPER] < 0)
    return t_close + 1 + int(opens[0]) if len(opens) else -1


def release_features_at(close_state: np.ndarray, t_close: int, release_state: np.ndarray, t_release: int,
                        object_start: np.ndarray, target_start: np.ndarray) -> np.ndarray:
    """[14] features of a grasp (robot state [S>=3] at close step t_close) and of the release that follows it
    (state at t_release, the first open command after the close): the grasp's 8, then where the object ends
    up relative to the target if it rode with the gripper from the close on (3), that offset's xy norm, the
    release step / 220 and how far the gripper rose or sank while holding it. Why: the object's start and the
    gripper's path are all imagination knows; a held object moves with the gripper, so where it is released
    follows from them, and an episode that lifts but never lowers or lets go reads as such."""
    close_state, release_state = np.asarray(close_state, np.float64), np.asarray(release_state, np.float64)
    carried = np.asarray(object_start, np.float64) + release_state[:3] - close_state[:3]
    rel = carried - np.asarray(target_start, np.float64)
    return np.concatenate([features_at(close_state, t_close, object_start, target_start), rel,
                           [np.linalg.norm(rel[:2]), t_release / HORIZON, release_state[2] - close_state[2]]])


def place_features(state: np.ndarray, action: np.ndarray, object_start: np.ndarray,
                   target_start: np.ndarray) -> np.ndarray:
    """[14] grasp-and-release features of one episode (`release_features_at`): state [T, S>=3], action [T, 7].
    A close or a release that never happens is read at the last step."""
    state, action = _checked(state, action)
    last = len(action) - 1
    t = first_close(action)
    t = t if t >= 0 else last
    r = release_after(action, t)
    r = r if r >= 0 else last
    return release_features_at(state[t], t, state[r], r, object_start, target_start)


@dataclass
class GraspPointConfig:
    c: float = 1.0  # inverse L2 strength of the logistic regression (scikit-learn's C)
    max_iter: int = 2000
    # Pessimism against a policy that optimizes the classifier: fit `ensemble` members on bootstrap resamples of
    # the labelled episodes and predict mean - pessimism * std over them. Why: where labelled grasps are few, the
    # quadratic terms extrapolate, and GRPO finds those grasps; the members disagree exactly there.
    ensemble: int = 1
    pessimism: float = 0.0
    seed: int = 0  # of the bootstrap draws
    # A logit offset per task id, added to what the classifier predicts: the judge's level moved to the start
    # policy's real success per task, its order within a task untouched (imagination/eval/task_bias.py fits it;
    # bench/reward_signal.py --task-bias prints it). Empty: none.
    task_bias: list[float] = field(default_factory=list)


class GraspPointClassifier:
    """P(episode succeeds | grasp features, task), fit on episodes with known outcomes."""

    def __init__(self, cfg: GraspPointConfig | None = None):
        self.cfg = cfg or GraspPointConfig()
        if self.cfg.task_bias and len(self.cfg.task_bias) != NUM_TASKS:
            raise ValueError(f"grasp_point.task_bias: expected {NUM_TASKS} logit offsets (one per task id) or none, "
                             f"got {len(self.cfg.task_bias)}")
        if self.cfg.ensemble < 1 or self.cfg.pessimism < 0:
            raise ValueError(f"grasp_point.ensemble, .pessimism: expected an integer >= 1 and a number >= 0, got "
                             f"{self.cfg.ensemble} and {self.cfg.pessimism}")
        self.model: Pipeline = self._pipeline()
        self.members: list[Pipeline] = []  # bootstrap members when cfg.ensemble > 1

    def _pipeline(self) -> Pipeline:
        return make_pipeline(StandardScaler(), PolynomialFeatures(2),
                             LogisticRegression(C=self.cfg.c, max_iter=self.cfg.max_iter))

    @staticmethod
    def _inputs(features: np.ndarray, task_ids: np.ndarray) -> np.ndarray:
        features, task_ids = np.asarray(features, np.float64), np.asarray(task_ids, np.int64)
        if features.ndim != 2 or task_ids.shape != (len(features),):
            raise ValueError(f"features, task_ids: expected [N, F] and [N], got {features.shape} and {task_ids.shape}")
        if len(task_ids) and not (0 <= task_ids.min() and task_ids.max() < NUM_TASKS):
            raise ValueError(f"task_ids: expected integers in [0, {NUM_TASKS}), got {sorted(set(task_ids.tolist()))}")
        return np.concatenate([features, np.eye(NUM_TASKS)[task_ids]], 1)

    def fit(self, features: np.ndarray, task_ids: np.ndarray, success: np.ndarray) -> GraspPointClassifier:
        """features [N, F], task_ids [N], success [N] bool; both outcomes must be present."""
        success = np.asarray(success, bool)
        if success.all() or not success.any():
            raise ValueError(f"success: expected both outcomes among the {len(success)} training episodes")
        x = self._inputs(features, task_ids)
        self.model.fit(x, success)
        rng = np.random.default_rng(self.cfg.seed)
        self.members = []
        for _ in range(self.cfg.ensemble if self.cfg.ensemble > 1 else 0):
            # resample each outcome apart, so that every member sees both
            rows = np.concatenate([rng.choice(np.flatnonzero(success == o), size=int((success == o).sum()))
                                   for o in (False, True)])
            self.members.append(self._pipeline().fit(x[rows], success[rows]))
        return self

    def predict(self, features: np.ndarray, task_ids: np.ndarray) -> np.ndarray:
        """P(success) [N]: the one model's, or with an ensemble mean - pessimism * std over its members,
        clipped to [0, 1]; then moved by cfg.task_bias."""
        x = self._inputs(features, task_ids)
        if self.members:
            probs = np.stack([m.predict_proba(x)[:, 1] for m in self.members])  # [members, N]
            p = np.clip(probs.mean(0) - self.cfg.pessimism * probs.std(0), 0.0, 1.0)
        else:
            p = self.model.predict_proba(x)[:, 1]
        return apply_task_bias(p, task_ids, list(self.cfg.task_bias))

    def state_dict(self) -> dict[str, torch.Tensor]:
        """The fitted numbers of the model and its members, as tensors: a file of them loads with
        `torch.load(weights_only=True)`, where a pickled scikit-learn object would run code on load."""
        out = {}
        for k, pipe in enumerate([self.model, *self.members]):
            scaler, lr = pipe.steps[0][1], pipe.steps[2][1]
            for name, value in (("mean", scaler.mean_), ("scale", scaler.scale_), ("coef", lr.coef_),
                                ("intercept", lr.intercept_)):
                out[f"{k}.{name}"] = torch.as_tensor(np.asarray(value, np.float64))
        return out

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> GraspPointClassifier:
        """The model and members of `state_dict`, rebuilt as fitted pipelines (they predict as the saved ones)."""
        pipes = []
        for k in range(len({key.split(".")[0] for key in state})):
            mean, scale = (state[f"{k}.{n}"].numpy() for n in ("mean", "scale"))
            pipe = self._pipeline()
            scaler, poly, lr = (step for _, step in pipe.steps)
            scaler.mean_, scaler.scale_, scaler.var_ = mean, scale, scale ** 2
            scaler.n_features_in_, scaler.n_samples_seen_ = len(mean), 1
            poly.fit(np.zeros((1, len(mean))))  # its powers depend on the input width only
            lr.coef_, lr.intercept_ = state[f"{k}.coef"].numpy(), state[f"{k}.intercept"].numpy()
            lr.classes_, lr.n_features_in_ = np.array([False, True]), lr.coef_.shape[1]
            pipes.append(pipe)
        self.model, self.members = pipes[0], pipes[1:]
        return self

    def save(self, path: str | os.PathLike, **extra: Any) -> None:
        """The fitted classifier, its config, and `extra` (what it was fit on, how well) in one file."""
        save_model_file(path, _FORMAT, asdict(self.cfg), self.state_dict(), **extra)

    @classmethod
    def load(cls, path: str | os.PathLike) -> tuple[GraspPointClassifier, dict]:
        """The classifier `save` wrote, and the file's other entries (what it was fit on, how well)."""
        blob = load_model_file(path, "grasp-point classifier", _FORMAT)
        clf = cls(config_from(GraspPointConfig, blob["config"], path, "grasp-point classifier"))
        extra = {k: v for k, v in blob.items() if k not in ("format", "config", "state_dict")}
        return clf.load_state_dict(blob["state_dict"]), extra


def prob_logits(probs: Any) -> np.ndarray:
    """logit(probs) as float64, probabilities clipped to [1e-6, 1 - 1e-6] first."""
    return np.asarray(logit(np.clip(np.asarray(probs, np.float64), _EPS, 1 - _EPS)))


def apply_task_bias(probs: Any, task_ids: Any, bias: Sequence[float]) -> np.ndarray:
    """probs [N] moved by the logit offset of each one's task (task_ids [N]); an empty bias, or a task's 0.0,
    leaves them as they are. Returns float64 [N]."""
    p, t = np.asarray(probs, np.float64), np.asarray(task_ids, np.int64)
    if not len(bias):
        return p
    if p.shape != t.shape:
        raise ValueError(f"probs, task_ids: expected one shape, got {p.shape} and {t.shape}")
    if len(t) and (t.min() < 0 or t.max() >= len(bias)):
        raise ValueError(f"task_bias: has {len(bias)} entries, task ids go up to {int(t.max())}; expected one "
                         "logit offset per task id of the suite")
    b = np.asarray(bias, np.float64)[t]
    return np.where(b == 0, p, expit(prob_logits(p) + b))  # a task without an offset keeps its exact 0s and 1s


def dataset_features(root: str, policy: str = "", place: bool = False
                     ) -> tuple[list[np.ndarray], list[int], list[bool], list[int]]:
    """Grasp features (with place=True grasp-and-release ones), task ids and real outcomes of every episode of
    a recorded dataset that has simulator labels (`scripts/label_episodes.py`; of `policy` only, when given),
    and their episode indices."""
    from robot_data.dataset import EpisodeDataset  # the dataset format stays out of the classifier's import path
    from robot_data.sim_labels import read_sim_labels

    ds = EpisodeDataset(root, verify=False)
    feats, tasks, outcomes, kept = [], [], [], []
    for m in ds.meta:
        if policy and m.extra.get("policy") != policy:
            continue
        sim = read_sim_labels(root, m.episode_index)
        if sim is None:
            continue
        state, action = ds.arrays(m.episode_index)
        feats.append((place_features if place else grasp_features)(state, action, sim["object_pos"][0],
                                                                   sim["target_pos"][0]))
        tasks.append(int(m.task_id))
        outcomes.append(bool(m.success))
        kept.append(int(m.episode_index))
    return feats, tasks, outcomes, kept


def label_dir_features(root: str, place: bool = False) -> tuple[list[np.ndarray], list[int], list[bool]]:
    """Grasp (place=True: grasp-and-release) features, task ids and outcomes of the episodes
    `scripts/collect_labels.py` wrote."""
    from robot_data.label_collection import read_episode

    feats, tasks, outcomes = [], [], []
    for p in sorted(Path(root).glob("task*_ep*.npz")):
        a, info = read_episode(p)
        feats.append((place_features if place else grasp_features)(a["state"], a["action"], a["object_pos"][0],
                                                                   a["target_pos"][0]))
        tasks.append(int(info["task_id"]))
        outcomes.append(bool(info["success"]))
    return feats, tasks, outcomes


def training_set(train_data: Sequence[str], label_dirs: Sequence[str] = (), place: bool = False,
                 names: tuple[str, str] = ("grasp_train_data", "grasp_label_dirs")
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Features [N, F], task ids [N] and real outcomes [N] of every labelled episode of the recorded datasets
    `train_data` and label-collection folders `label_dirs` (grasp features, or with place=True grasp-and-release
    ones). names: the two config fields an error names."""
    from robot_data.dataset import is_dataset  # as dataset_features: the format stays out of the import path

    feats: list[np.ndarray] = []
    tasks: list[int] = []
    outcomes: list[bool] = []
    for d in train_data:
        if not is_dataset(d):
            raise FileNotFoundError(f"{names[0]}: {d} is not a recorded dataset (no meta/info.json)")
        f, t, o, _ = dataset_features(d, place=place)
        feats, tasks, outcomes = feats + f, tasks + t, outcomes + o
    for d in label_dirs:
        if not Path(d).is_dir():
            raise FileNotFoundError(f"{names[1]}: {d} is not a directory (scripts/collect_labels.py writes one)")
        f, t, o = label_dir_features(d, place)
        feats, tasks, outcomes = feats + f, tasks + t, outcomes + o
    if not feats:
        raise ValueError(f"{names[0]}: no labelled episode in {list(train_data) + list(label_dirs)}; "
                         "label datasets with scripts/label_episodes.py")
    return np.array(feats), np.array(tasks), np.array(outcomes)


def fit_grasp_point(train_data: Sequence[str], label_dirs: Sequence[str] = (),
                    cfg: GraspPointConfig | None = None, place: bool = False) -> GraspPointClassifier:
    """The classifier fit on labelled recorded datasets and label-collection folders (training side only), on
    grasp features, or with place=True on grasp-and-release ones."""
    return GraspPointClassifier(cfg).fit(*training_set(train_data, label_dirs, place))


__all__ = ["GraspPointClassifier", "GraspPointConfig", "apply_task_bias", "dataset_features", "features_at",
           "first_close", "fit_grasp_point", "grasp_features", "label_dir_features", "place_features", "prob_logits",
           "release_after", "release_features_at", "training_set"]
