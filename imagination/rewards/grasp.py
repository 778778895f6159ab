"""Reward "grasp" of the imagination env: a classifier of the real outcome read from the imagined robot state.

Two endings (`ImaginationConfig.grasp_until`):

    "close"     the episode ends at the first action that commands the gripper shut, with P(success) of
                the grasp point there (world_models/grasp_point.py `features_at`);
    "release"   the episode goes on holding, and ends at the first action after the close that commands
                the gripper open, with P(success) of the grasp and of where the object, carried by the
                gripper, is let go (`release_features_at`). An episode that closes but never opens is read
                at its last step before the horizon (`held="read"`), or fails there (`held="fail"`).

Why `held="fail"`: from placement starts the judge read part of an RL policy's held-out gain in episodes that never
let the bowl go, at their last step (docs/notebook/protocol_v2.md, section 17); a real placement needs the release.

Why "release": with "close" nothing judges what follows the grasp, and RL from the 1000-step BC doubled the
lifted-but-not-placed failures (5 -> 11 of 50 gate jobs) while it halved the never-lifted ones
(docs/notebook/loop.md, "RL on the grasp reward").
An episode that never closes gets reward 0 either way.

With "release" an episode may also start after the recording's close, holding (keyframes mode "release": some
tens of steps before the placement): the grasp is then the recording's own, its step and robot state, and the
judge waits for the imagined release. Why: many of the start's real failures on LIBERO-Spatial tasks 5-9 (the
others never lift the object) are placements a few centimetres off the target, and over those few steps the proprio
model drifts far less than from frame 0 (docs/notebook/protocol_v2.md, "10. Placement starts").

Where the object and its target start comes from `object_starts`: the start episodes' simulator labels, or, with
an object reader (world_models/object_reader.py), the episode's first camera image. With the reader the judge
reads only what a real robot has: the image, and the robot states the proprio model predicts.
"""
from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from imagination.rewards.horizon import episode_end
from world_models.grasp_point import (
    GraspPointClassifier,
    GraspPointConfig,
    features_at,
    first_close,
    release_after,
    release_features_at,
)

if TYPE_CHECKING:
    from imagination.episodes import StartEpisode

ENDINGS = ("close", "release")
HELD = ("read", "fail")  # grasp_until "release": what an episode that holds to the horizon is paid


class GraspJudge:
    """`Reward` (imagination/rewards/base.py) "grasp": per-env bookkeeping for a batch of `num_envs` imagined
    episodes, whose start episodes' objects and targets start at `starts` [E, 2, 3] (`object_starts`)."""

    default_threshold = 0.5  # a probability trained as one
    graded = True  # the classifier's probability where the judge ended the episode: a graded outcome for GRPO
    reads_frames = False  # robot states only

    def __init__(self, classifier: GraspPointClassifier, num_envs: int, state_dim: int, until: str = "close",
                 max_steps: int = 220, starts: np.ndarray | None = None, imagined_steps: int = 0, held: str = "read"):
        """imagined_steps > 0: an episode also ends that many steps after its start (ImaginationConfig); held: what
        a "release" episode that never lets go is paid at the horizon, "read" (the classifier there) or "fail" (0)."""
        if until not in ENDINGS:
            raise ValueError(f"grasp_until: expected one of {list(ENDINGS)}, got {until!r}")
        if held not in HELD:
            raise ValueError(f"grasp_held: expected one of {list(HELD)}, got {held!r}")
        self.classifier, self.until, self.max_steps, self.held = classifier, until, max_steps, held
        self.imagined_steps = imagined_steps
        self.limit = np.full(num_envs, max_steps, np.int64)  # the step each env's episode ends at, at the latest
        self.starts = np.zeros((0, 2, 3)) if starts is None else starts
        self.obj0, self.target0 = np.zeros((num_envs, 3)), np.zeros((num_envs, 3))
        self.task = np.zeros(num_envs, np.int64)
        self.t_close = np.full(num_envs, -1, np.int64)  # "release": the close's control step, -1 before it
        self.close_state = np.zeros((num_envs, state_dim))

    def start_limit(self, episode: StartEpisode, max_steps: int) -> int:
        """"close": before the recording's own first close (the judge judges the first close); "release": up to
        and with the recording's first release after it (a start holding takes the recording's grasp); and where
        labels exist, the rows they cover."""
        end = min(max_steps, len(episode.sim["grasped"])) if episode.sim else max_steps
        c = first_close(episode.action)
        if c > 0 and self.until == "release":
            r = release_after(episode.action, c)
            return min(end, r + 1) if r > 0 else end
        return min(end, c) if c > 0 else end

    def start(self, i: int, episode_index: int, episode: StartEpisode, t: int) -> None:
        c = first_close(episode.action)
        held = 0 <= c <= t and t > 0  # the recording closed the gripper before this start
        r = release_after(episode.action, c) if held else -1
        if held and (self.until == "close" or 0 <= r < t):
            where = "before the recording first closes the gripper" if self.until == "close" else \
                f"before the recording's first release after its close (frame {r})"
            raise ValueError(f"keyframe at frame {t} of start episode {episode_index}: reward 'grasp' "
                             f"(grasp_until {self.until!r}) starts {where} (close at frame {c})")
        obj0, target0 = self.starts[episode_index]
        self.obj0[i], self.target0[i], self.task[i], self.t_close[i] = obj0, target0, episode.task_id, -1
        if held:  # a start holding: the grasp is the recording's, its state the one before the closing action
            self.t_close[i], self.close_state[i] = c, episode.state[c]
        self.limit[i] = episode_end(t, self.max_steps, self.imagined_steps)

    def chunk(self, envs: np.ndarray, t: np.ndarray, before: torch.Tensor, acts: torch.Tensor, states: torch.Tensor,
              success_logits: torch.Tensor, frames: torch.Tensor | None = None) -> tuple[np.ndarray, np.ndarray]:
        return self.judge(envs, t, before.cpu().numpy(), acts.cpu().numpy(), states.cpu().numpy())

    def advance(self, j: int, i: int, n: int) -> None:
        pass  # `judge` keeps the close's state itself

    def judge(self, envs: np.ndarray, t: np.ndarray, before: np.ndarray, acts: np.ndarray,
              states: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """One chunk of the envs `envs` [b], at control steps t [b], robot states before the chunk [b, S],
        actions [b, K, 7] and the proprio model's states after each action [b, K, S] -> P(success) [b, K]
        (non-zero only where an episode ends) and the action index [b] where each ends (-1: it goes on)."""
        b, K = acts.shape[:2]
        prob, end = np.zeros((b, K), np.float32), np.full(b, -1, np.int64)
        feats, rows = [], []
        for j, i in enumerate(envs):
            limit = min(K, int(self.limit[i]) - int(t[j]))  # actions of this chunk the episode still executes
            path = np.concatenate([before[j][None], states[j, :-1]])  # [K, S]: the state before each action
            c = first_close(acts[j, :limit]) if self.until == "close" or self.t_close[i] < 0 else -1
            if self.until == "close":
                if c >= 0:
                    end[j] = c
                    feats.append(features_at(path[c], int(t[j]) + c, self.obj0[i], self.target0[i]))
                    rows.append(j)
                continue
            if c >= 0:  # the close happens in this chunk: remember where, look for the release after it
                self.t_close[i], self.close_state[i] = int(t[j]) + c, path[c]
            if self.t_close[i] < 0:
                continue
            opens = np.flatnonzero(acts[j, c + 1:limit, 6] < 0)
            r = c + 1 + int(opens[0]) if len(opens) else -1
            if r < 0 and int(t[j]) + limit >= int(self.limit[i]):  # held to the horizon: read at the last step
                r = limit - 1
                if self.held == "fail":  # ends there, paid 0
                    end[j] = r
                    continue
            if r >= 0:
                end[j] = r
                feats.append(release_features_at(self.close_state[i], int(self.t_close[i]), path[r], int(t[j]) + r,
                                                 self.obj0[i], self.target0[i]))
                rows.append(j)
        if rows:  # one classifier call for every env that ended in this chunk
            rows_a = np.array(rows)
            prob[rows_a, end[rows_a]] = self.classifier.predict(np.stack(feats), self.task[envs[rows_a]])
        return prob, end


def object_starts(episodes: Sequence[Any], reader_path: str = "", views: Sequence[str] = ()) -> np.ndarray:
    """Where each start episode's object and target start, [E, 2, 3] (m): read by the object reader at
    `reader_path` from the episode's first frame (StartEpisode.frames [T, V, H, W, 3], views in `views` order),
    or, without one, taken from its simulator labels (`sim`)."""
    if not reader_path:
        unlabelled = [k for k, e in enumerate(episodes) if e.sim is None]
        if unlabelled:
            raise ValueError(f"start episodes {unlabelled[:5]}{'...' if len(unlabelled) > 5 else ''} have no "
                             "simulator labels, which reward 'grasp' reads the object's start from: run "
                             "scripts/label_episodes.py, or read it from the image (imagination.object_reader)")
        return np.stack([np.stack([e.sim["object_pos"][0], e.sim["target_pos"][0]]) for e in episodes])
    from world_models.object_reader import ObjectReader

    reader = ObjectReader.load(reader_path)
    if reader.cfg.view not in views:
        raise ValueError(f"object_reader: {reader_path} reads view {reader.cfg.view!r}, which the world model does "
                         f"not imagine (views {list(views)})")
    suites = sorted({e.suite for e in episodes if e.suite} - {reader.suite})
    if suites:
        raise ValueError(f"object_reader: {reader_path} was trained on {reader.suite}, the start episodes are of "
                         f"{suites}")
    v = list(views).index(reader.cfg.view)
    obj, target = reader.read(np.stack([e.frames[0, v] for e in episodes]), np.array([e.task_id for e in episodes]))
    return np.stack([obj, target], 1)


@dataclass
class FitGraspJudgeConfig:
    """scripts/fit_grasp_judge.py: the judge's own fitting step."""

    train_data: list[str] = field(default_factory=list)  # recorded datasets labelled by scripts/label_episodes.py
    label_dirs: list[str] = field(default_factory=list)  # near-miss episodes of scripts/collect_labels.py
    until: str = "close"  # the ending it judges (ImaginationConfig.grasp_until): its features differ
    grasp_point: GraspPointConfig = field(default_factory=GraspPointConfig)  # the classifier's settings
    out: str = "outputs/grasp_judge/grasp_judge.pt"


def fit_grasp_judge(cfg: FitGraspJudgeConfig) -> dict:
    """`fit_grasp_judge_file` on cfg's data; prints and returns what it was fit on and its in-sample AUC."""
    if cfg.until not in ENDINGS:
        raise ValueError(f"until: expected one of {list(ENDINGS)}, got {cfg.until!r}")
    record = fit_grasp_judge_file(cfg.train_data, cfg.label_dirs, cfg.out, cfg.until, cfg.grasp_point,
                                  ("train_data", "label_dirs"))
    tasks = ", ".join(f"task {k}: {v['successes']}/{v['episodes']}" for k, v in record["per_task"].items())
    print(f"grasp judge ({cfg.until}) fit on {record['episodes']} labelled episodes ({tasks}); in-sample AUC "
          f"{record['train_auc']:.3f}; written to {cfg.out}", flush=True)
    return record


JUDGE_FILE = "grasp_judge.pt"  # what an RL run fits into its out_dir when given training data, not a judge


def fit_grasp_judge_file(train_data: Sequence[str], label_dirs: Sequence[str], out: str | os.PathLike,
                         until: str = "close", cfg: GraspPointConfig | None = None,
                         names: tuple[str, str] = ("grasp_train_data", "grasp_label_dirs")) -> dict:
    """Fit the judge's classifier on the labelled datasets `train_data` and label-collection folders `label_dirs`
    (world_models/grasp_point.py) and write it to `out` with what it was fit on and how it ranks its own training
    episodes (`scripts/fit_grasp_judge.py`). Returns that record. names: the config fields an error names."""
    from sklearn.metrics import roc_auc_score

    from world_models.grasp_point import training_set

    if until not in ENDINGS:  # before the fit, which reads every training episode
        raise ValueError(f"grasp_until: expected one of {list(ENDINGS)}, got {until!r}")
    if not train_data and not label_dirs:
        raise ValueError(f"{names[0]}: the grasp judge needs labelled episodes to fit its classifier on "
                         f"(datasets labelled by scripts/label_episodes.py, or {names[1]})")
    feats, tasks, outcomes = training_set(train_data, label_dirs, until == "release", names)
    classifier = GraspPointClassifier(cfg).fit(feats, tasks, outcomes)
    prob = classifier.predict(feats, tasks)
    per_task = {int(k): {"episodes": int((tasks == k).sum()), "successes": int(outcomes[tasks == k].sum())}
                for k in np.unique(tasks)}
    record = {"until": until, "train_data": [str(d) for d in train_data], "label_dirs": [str(d) for d in label_dirs],
              "episodes": len(outcomes), "successes": int(outcomes.sum()), "per_task": per_task,
              # in-sample: how well the features separate the outcomes they were fit on, not a held-out figure
              "train_auc": float(roc_auc_score(outcomes, prob))}
    classifier.save(out, fitted_on=record)
    return record


def load_grasp_judge(path: str, episodes: Sequence[Any], num_envs: int, until: str = "close", max_steps: int = 220,
                     cfg: GraspPointConfig | None = None, reader_path: str = "", views: Sequence[str] = (),
                     imagined_steps: int = 0, held: str = "read") -> GraspJudge:
    """The judge of reward "grasp" for `num_envs` envs starting from `episodes` (StartEpisode): the classifier
    `fit_grasp_judge_file` wrote to `path`, with each start episode's object and target start [E, 2, 3]
    (`object_starts`: the reader at `reader_path` reading the first frame of `views`, or the simulator labels).
    cfg (ImaginationConfig.grasp_point): its task_bias is applied to the loaded classifier; its fit settings must
    be left at their defaults or equal the file's (the file was fit with them)."""
    if until not in ENDINGS:
        raise ValueError(f"grasp_until: expected one of {list(ENDINGS)}, got {until!r}")
    if held not in HELD:
        raise ValueError(f"grasp_held: expected one of {list(HELD)}, got {held!r}")
    if not path or not Path(path).is_file():
        raise FileNotFoundError(f"grasp_judge: {path!r} is not a file (scripts/fit_grasp_judge.py writes one)")
    starts = object_starts(episodes, reader_path, views)  # a missing label fails before the load
    classifier, extra = GraspPointClassifier.load(path)
    fitted_until = extra.get("fitted_on", {}).get("until")
    if fitted_until != until:
        raise ValueError(f"grasp_until: {until!r}, but {path} was fit for grasp_until {fitted_until!r} (its features "
                         "differ): fit one for this ending with scripts/fit_grasp_judge.py")
    if cfg is not None:
        default = GraspPointConfig()
        for f in fields(GraspPointConfig):
            want, have = getattr(cfg, f.name), getattr(classifier.cfg, f.name)
            if f.name != "task_bias" and want != getattr(default, f.name) and want != have:
                raise ValueError(f"grasp_point.{f.name}: {want!r}, but {path} was fit with {have!r}; leave it "
                                 "unset, or fit a judge with it (scripts/fit_grasp_judge.py)")
        if cfg.task_bias:
            classifier = GraspPointClassifier(replace(classifier.cfg, task_bias=list(cfg.task_bias))) \
                .load_state_dict(classifier.state_dict())
    return GraspJudge(classifier, num_envs, episodes[0].state.shape[1], until, max_steps, starts, imagined_steps,
                      held)


def judge_for_run(cfg: Any, out_dir: str | os.PathLike) -> Any:
    """An ImaginationConfig whose reward "grasp" reads a judge file: `cfg` itself when it names one
    (grasp_judge) or another reward, else `cfg` with the judge fit on its grasp_train_data and grasp_label_dirs
    into out_dir/grasp_judge.pt, its own step before RL starts. A file from an earlier start of the same run is
    reused when it was fit on the same data with the same settings (a resumed run judges as it did)."""
    if cfg.reward != "grasp" or cfg.grasp_judge:
        return cfg
    path = Path(out_dir) / JUDGE_FILE
    want = {"until": cfg.grasp_until, "train_data": [str(d) for d in cfg.grasp_train_data],
            "label_dirs": [str(d) for d in cfg.grasp_label_dirs]}
    fit_cfg = replace(cfg.grasp_point, task_bias=[])  # applied on load: a per-round calibration, not a fit setting
    if path.is_file():
        old, extra = GraspPointClassifier.load(path)
        done = extra.get("fitted_on", {})
        if old.cfg == fit_cfg and all(done.get(k) == v for k, v in want.items()):
            return replace(cfg, grasp_judge=str(path))
    Path(out_dir).mkdir(parents=True, exist_ok=True)
    record = fit_grasp_judge_file(cfg.grasp_train_data, cfg.grasp_label_dirs, path, cfg.grasp_until, fit_cfg)
    print(f"[grasp judge] fit on {record['episodes']} labelled episodes ({record['successes']} successes), "
          f"in-sample AUC {record['train_auc']:.3f} -> {path}", flush=True)
    return replace(cfg, grasp_judge=str(path))


__all__ = ["ENDINGS", "FitGraspJudgeConfig", "GraspJudge", "JUDGE_FILE", "fit_grasp_judge", "fit_grasp_judge_file",
           "judge_for_run", "load_grasp_judge", "object_starts"]
