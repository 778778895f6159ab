"""What imagined RL with reward "grasp" reads besides the world model and the start data, built on the
training init states only (the benchmark's protocol, bench/protocol.py, and the loop, imagination/loop/run.py):

    simulator labels   the start data's per-step object and target positions (robot_data.sim_labels, replayed)
    own rollouts       the start policy's real episodes on the training init states, recorded and labelled
                       (source "policy"): the grasps the policy really makes, with their outcomes
    near-miss grasps   scripted grasps that close 0-8 cm from the grasp point (robot_data.label_collection):
                       outcomes on both sides of the boundary where the policy fails; the successful ones also
                       recorded with frames (<near-miss folder>_frames), for the real-data control to imitate
    proprio model      fitted on the demonstrations and the own rollouts, with the world model's chunk length

Why each (docs/notebook/loop.md, "A proprio model that reads the arm's velocity"): the grasp-point classifier
must see the policy's own misses to score them, and the proprio model that rebuilds the end effector at the
imagined close drifted 1.4 cm on the policy's episodes when fitted on demonstrations alone (0.7 cm with the own
rollouts), as much as the grasps miss by.
Every piece is made once and reused; an interrupted recording starts over (it is derived data).
It lives in loop/, not rl/: it records real evaluations (eval/) to make RL's inputs, and loop/ is the layer that
builds on both eval/ and rl/ (docs/architecture.md).
"""
from __future__ import annotations

import json
import shutil
from dataclasses import dataclass, field, replace
from pathlib import Path

from envs.libero_suites import DRAWN_LAYOUT_BASE
from imagination.eval.jobs import EvalConfig
from imagination.eval.real_rollouts import evaluate_and_record
from infra.atomic import atomic_write_text
from policies.base import Policy
from robot_data.dataset import EpisodeDataset, EpisodeWriter
from robot_data.label_collection import LabelCollectConfig, collect_labels
from robot_data.label_frames import framed_copy, record_label_frames
from robot_data.sim_labels import label_dataset
from world_models.model import WorldModel
from world_models.proprio import FitProprioConfig, ProprioConfig, fit_proprio_on_data


@dataclass
class GraspInputsConfig:
    """How much of each input to make (the rl_gain protocol's figures are the defaults)."""

    own_rollout_seed: int = 1  # the start policy's own rollouts: another seed than the demonstrations'
    near_miss_episodes_per_task: int = 32  # scripted grasps closing 0-8 cm from the grasp point
    near_miss_strength: float = 1.6  # near_miss offsets up to 0.05 m x strength
    # the plan (LabelCollectConfig.kinds): episode j of a task runs kinds[j % len(kinds)]
    near_miss_kinds: list[str] = field(default_factory=lambda: list(LabelCollectConfig().kinds))
    proprio_steps: int = 3000
    # the start's own rollouts also on this many drawn layouts of each task (own_rollouts): RL's starts and the
    # judge's and the real-data control's episodes beyond the training init states
    own_drawn_layouts: int = 0


@dataclass(frozen=True)
class GraspInputPaths:
    """Where the inputs go: the own rollouts' dataset lives in `own_rollouts`/data."""

    own_rollouts: str
    near_miss_labels: str  # "": no near-miss grasp is simulated (a judge fit on the recorded episodes alone)
    proprio: str


def own_rollouts(root: str, policy: str, data: str, eval_cfg: EvalConfig, seed: int, sim_labels: bool = True,
                 drawn_layouts: int = 0) -> str:
    """The policy's real episodes on eval_cfg's jobs, and on drawn layouts 0..drawn_layouts-1 of each of its tasks
    (envs/libero_suites.py, DRAWN_LAYOUT_BASE), recorded into root/data (source "policy"), with their simulator
    labels unless `sim_labels` is False (a judge that reads other labels). `data` gives the dataset layout (views,
    image size). Why drawn layouts: imagined RL that starts only from the training init states learns those
    layouts; each drawn one is another real start (a real episode of the recipe's budget)."""
    own, done = str(Path(root) / "data"), Path(root) / "result.json"
    if not done.is_file():
        # an interrupted recording would be appended to twice on a re-run: start it over (it is derived)
        shutil.rmtree(own, ignore_errors=True)
        EpisodeWriter(own, EpisodeDataset(data, verify=False).config).close()
        cfg = replace(eval_cfg, checkpoint=policy, seed=seed, fast_render=True, videos=0,
                      out_dir=str(Path(root) / "eval"))
        drawn = replace(cfg, init_state_offset=DRAWN_LAYOUT_BASE, episodes_per_task=drawn_layouts,
                        out_dir=str(Path(root) / "eval_drawn"))
        plans = [(cfg, f"init state {cfg.init_state_offset}")] + ([(drawn, "drawn layout 0")] if drawn_layouts else [])
        start = Policy.load(policy)  # one policy for both recordings
        recorded: dict[str, int] = {}
        for plan, first in plans:
            print(f"[own rollouts] recording {policy}'s own rollouts: {len(plan.tasks)} tasks x "
                  f"{plan.episodes_per_task} from {first}")
            result = evaluate_and_record(plan, start, own, {"policy": policy, "phase": "own_rollouts"})
            recorded = {k: recorded.get(k, 0) + v for k, v in result["recorded"].items()}
        atomic_write_text(done, json.dumps({"recorded": recorded, "policy": policy, "drawn_layouts": drawn_layouts},
                                           indent=2))
    elif (made := json.loads(done.read_text()).get("drawn_layouts", 0)) != drawn_layouts:
        raise ValueError(f"own rollouts: {root} holds the start's rollouts on {made} drawn layouts per task, not the "
                         f"{drawn_layouts} asked for; give each count its own folder")
    if sim_labels:
        label_dataset(own, progress=False)
    return own


def build_grasp_inputs(paths: GraspInputPaths, data: str, policy: str, world_model: str, eval_cfg: EvalConfig,
                       cfg: GraspInputsConfig, near_miss_tasks: list[int] | None = None) -> dict[str, str]:
    """Labels of `data`, the policy's own labelled rollouts on eval_cfg's jobs (the training init states:
    env, tasks, episodes_per_task from init_state_offset), near-miss grasps on the same init states (of
    `near_miss_tasks`, default eval_cfg's tasks) and the proprio model fitted on both datasets; each made or
    reused. Returns own_rollouts (the dataset),
    near_miss_labels and proprio: the paths ImagineRLConfig's grasp_train_data, grasp_label_dirs and proprio
    take."""
    label_dataset(data, progress=False)  # replays only episodes not labelled yet
    own = own_rollouts(paths.own_rollouts, policy, data, eval_cfg, cfg.own_rollout_seed,
                       drawn_layouts=cfg.own_drawn_layouts)
    if paths.near_miss_labels:  # "" for a judge that reads no scripted grasp
        # resumes from the episodes already written
        collect_labels(LabelCollectConfig(out_dir=paths.near_miss_labels, suite=eval_cfg.env,
                                          tasks=list(near_miss_tasks or eval_cfg.tasks),
                                          episodes_per_task=cfg.near_miss_episodes_per_task,
                                          init_state_offset=eval_cfg.init_state_offset,
                                          init_states=eval_cfg.episodes_per_task, strength=cfg.near_miss_strength,
                                          kinds=list(cfg.near_miss_kinds)))
        # the near misses that succeeded, recorded with the data's cameras: the real-data control (arm b) imitates
        # them, as a user without a world model would (robot_data/label_frames.py)
        record_label_frames(paths.near_miss_labels, framed_copy(paths.near_miss_labels), eval_cfg.env, data,
                            num_workers=eval_cfg.num_envs)
    fit_proprio_once(paths.proprio, [data, own], world_model, cfg.proprio_steps)
    return {"own_rollouts": own, "near_miss_labels": paths.near_miss_labels, "proprio": paths.proprio}


def fit_proprio_once(out: str, data: list[str], world_model: str, steps: int) -> str:
    """The proprio model fitted on `data` (the demonstrations and the own rollouts) with the world model's chunk
    length, saved at `out` unless it is there. Returns `out`."""
    if not Path(out).is_file():
        chunk = WorldModel.load(world_model).chunk_len
        print(f"[recipe inputs] fitting the proprio model on {data}")
        fit_proprio_on_data(FitProprioConfig(data=list(data), out=out, model=ProprioConfig(chunk_len=chunk,
                                                                                            steps=steps)))
    return out


__all__ = ["GraspInputPaths", "GraspInputsConfig", "build_grasp_inputs", "fit_proprio_once", "own_rollouts"]
