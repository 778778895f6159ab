"""The arms that tell imagination's own gain from what a user gets without it (bench/rl_gain.py's protocol v2 and
the loop's report), besides the start and the recipe, and what every arm consumed.

A gain of imagined RL is imagination's only against what a user gets without it on the same data:

    a  the start            the best BC the demonstrations give (chosen on init states 0-19, bench/protocol.py)
    b  real-data control    the start fine-tuned, with no world model, on every successful real episode with
                            camera frames that the recipe consumed (filtered BC / rejection-sampling fine-tuning)
    c  anchor control       only when the recipe adds a supervised anchor to RL (ImagineRLConfig.bc_coef): the
                            same anchor updates, as many, with the same optimiser, and no RL
    d  the recipe           imagined RL from the start, over several seeds

    imagination's own gain = d (job-averaged over its seeds) - max(a, b, c), paired over the benchmark's jobs.

What the recipe consumed is read from its own config (start data, the grasp judge's training data and label
folders, the datasets its goal reader was trained on), so the control cannot drift from it. Label-collection
folders hold simulator states without camera frames: they count in the budget, and no pixel policy can imitate them.
"""
from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import torch

from imagination.eval.stats import SeedAverage, seed_average
from imagination.rl.algo import freeze, make_optimizer, optimizer_step
from imagination.rl.training import ImagineRLConfig, bc_anchor
from infra.atomic import atomic_write_text
from policies.base import Policy
from policies.bc import BCConfig, load_episodes, train_bc_on_data
from robot_data.dataset import EpisodeDataset, is_dataset
from robot_data.label_frames import framed_copy

IMITATED_SOURCES = ["expert", "perturbed", "policy"]  # every recorded kind: success_only keeps what imitates well


@dataclass(frozen=True)
class Budget:
    """Real (simulated) episodes and env steps an arm consumed."""

    episodes: int = 0
    env_steps: int = 0

    def __add__(self, other: Budget) -> Budget:
        return Budget(self.episodes + other.episodes, self.env_steps + other.env_steps)

    def __str__(self) -> str:
        return f"{self.episodes} episodes, {self.env_steps} env steps"


def dataset_budget(path: str, success_only: bool = False, per_task: int = 0) -> Budget:
    """Episodes and steps of a recorded dataset (its successful ones; at most `per_task` of each task)."""
    metas = [m for m in EpisodeDataset(path, verify=False).meta if m.success or not success_only]
    if per_task:  # the first `per_task` of each task, in dataset order (as BC's episodes_per_task picks them)
        kept, seen = [], Counter[int]()
        for m in metas:
            seen[m.task_id] += 1
            if seen[m.task_id] <= per_task:
                kept.append(m)
        metas = kept
    return Budget(len(metas), sum(m.length for m in metas))


def label_budget(folder: str) -> Budget:
    """Episodes and steps of a label-collection folder (robot_data/label_collection.py: one .npz per episode)."""
    files = sorted(Path(folder).glob("*.npz"))
    return Budget(len(files), sum(len(np.load(f)["action"]) for f in files))


def goal_reader_data(rl_cfg: ImagineRLConfig) -> list[str]:
    """The recorded datasets the recipe's goal reader was trained on (its result.json, written beside reader.pt by
    scripts/train_goal_reader.py); [] unless the recipe's judge is reward "goal"."""
    im = rl_cfg.imagination
    if im.reward != "goal" or not im.goal_reader:
        return []
    result = Path(im.goal_reader).parent / "result.json"
    if not result.is_file():
        raise FileNotFoundError(f"imagination.goal_reader: {result} not found (scripts/train_goal_reader.py writes it "
                                "beside reader.pt; it names the real episodes the judge was trained on)")
    return [str(d) for d in json.loads(result.read_text())["data_dirs"]]


def consumed(rl_cfg: ImagineRLConfig) -> tuple[list[str], list[str]]:
    """What the recipe reads of the real world: (recorded datasets with camera frames, label-collection folders),
    each once, in the order its config names them. The held-out check's start episodes count too: they choose
    which iterate the recipe keeps (the whole dataset, where the check reads its first heldout.max_episodes: the
    control is never given less than the recipe read)."""
    anchor = [rl_cfg.bc_data] if rl_cfg.bc_data and rl_cfg.bc_coef > 0 else []
    heldout = [rl_cfg.heldout.start_data] if rl_cfg.heldout.every and rl_cfg.heldout.start_data else []
    image = list(dict.fromkeys([rl_cfg.start_data, *anchor, *rl_cfg.imagination.grasp_train_data,
                                *goal_reader_data(rl_cfg), *heldout]))
    labels = list(dict.fromkeys(rl_cfg.imagination.grasp_label_dirs))
    return image, labels


def recipe_budget(rl_cfg: ImagineRLConfig) -> Budget:
    """Every real episode the recipe consumed: its datasets and label folders. (Replaying a recorded episode
    for its simulator labels adds no episode and no new state, so replays are not counted again.)"""
    image, labels = consumed(rl_cfg)
    total = Budget()
    for path in image:
        total = total + dataset_budget(path)
    for folder in labels:
        total = total + label_budget(folder)
    return total


def control_config(rl_cfg: ImagineRLConfig, start_bc: BCConfig, out_dir: str) -> BCConfig:
    """Arm b's BC: the start (rl_cfg.policy) fine-tuned on every successful episode of the recipe's recorded
    datasets and label folders, with the start's own BC settings (steps, lr, batch, augmentation). A label folder's
    successes are imitated from its copy with frames (robot_data/label_frames.py); one without that copy is named."""
    read, labels = consumed(rl_cfg)
    for d in labels:
        if is_dataset(framed_copy(d)):
            read.append(framed_copy(d))
        else:
            print(f"[real-data control] {d}: no copy with frames at {framed_copy(d)} (robot_data/label_frames.py "
                  "records one), so b does not imitate its successful episodes")
    # a dataset with no success to imitate (a weak start's own rollouts) adds nothing to a success-only fine-tune
    image = [d for d in read if _imitable(d)]
    if not image:
        raise ValueError(f"real-data control: no successful real episode in what the recipe consumed ({read}) to "
                         "imitate")
    return replace(start_bc, data_dir=image[0], extra_data_dirs=image[1:], out_dir=out_dir, init_policy=rl_cfg.policy,
                   sources=list(IMITATED_SOURCES), success_only=True, episodes_per_task=0, max_episodes=0,
                   task_weights=[])


def _imitable(path: str) -> bool:
    """Whether the recorded dataset at `path` holds a successful episode arm b imitates."""
    return any(m.success and m.source in IMITATED_SOURCES for m in EpisodeDataset(path, verify=False).meta)


def check_same_control(record: dict, rl_cfg: ImagineRLConfig, done: Path) -> None:
    """ValueError unless the control `done` records (control.json: "datasets", what it imitated) imitated what rl_cfg
    consumes: no dataset beyond it, and none left out that holds a success to imitate. A dataset not on this machine
    cannot be read and is not held against it (a control trained elsewhere is reused as it is), nor is a record
    written before it kept its datasets. Why: a second run in the same out_dir whose recipe consumed other episodes
    (a loop round decided otherwise) silently reused the first run's b."""
    if "datasets" not in record:
        return
    read, labels = consumed(rl_cfg)
    wanted = [*read, *(framed_copy(d) for d in labels)]
    beyond = [d for d in record["datasets"] if d not in wanted]
    left_out = [d for d in wanted if d not in record["datasets"] and is_dataset(d) and _imitable(d)]
    if beyond or left_out:
        raise ValueError(f"real-data control: {done} imitated other real episodes than the recipe consumes now "
                         f"(beyond them: {beyond}; left out: {left_out}); give the run another out_dir")


def real_data_control(rl_cfg: ImagineRLConfig, start_bc: BCConfig, out_dir: str) -> dict:
    """Train (or reuse) arm b; returns {"policy_path", "episodes", "env_steps"} of what it imitated. A control
    already in out_dir is reused when it imitated what rl_cfg consumes (`check_same_control`)."""
    done = Path(out_dir) / "control.json"
    if done.is_file():
        record = json.loads(done.read_text())
        check_same_control(record, rl_cfg, done)
        return record
    cfg = control_config(rl_cfg, start_bc, out_dir)
    episodes, _ = load_episodes(cfg)
    print(f"[real-data control] the start fine-tuned on {len(episodes)} successful real episodes of "
          f"{[cfg.data_dir, *cfg.extra_data_dirs]}, {cfg.steps} steps")
    result = train_bc_on_data(cfg)
    out = {"policy_path": result["policy_path"], "episodes": len(episodes),
           "env_steps": int(sum(len(e.action) for e in episodes)), "datasets": [cfg.data_dir, *cfg.extra_data_dirs]}
    atomic_write_text(done, json.dumps(out, indent=2))
    return out


def anchor_updates(rl_result: dict) -> int:
    """How many minibatch updates the recipe's kept policy received (each carried one anchor loss): every iteration's,
    or up to the iteration its held-out check kept (result.json's heldout.best_iteration; 0 = the start itself)."""
    kept = (rl_result.get("heldout") or {}).get("best_iteration")
    history = [row for row in rl_result["history"] if kept is None or row["iteration"] <= kept]
    counts = [row.get("updates") for row in history]
    if (not counts and kept is None) or any(c is None for c in counts):
        raise ValueError("rl run: its history does not count its updates (a run made before they were logged); "
                         "run the recipe again to give the anchor control its count")
    return int(sum(counts))


def anchor_control(rl_cfg: ImagineRLConfig, rl_result: dict, out_dir: str) -> dict:
    """Arm c: from the recipe's start (rl_result's start_policy: the start adapted to the world model's frames when the
    recipe adapts it), the recipe's anchor loss alone (the same draws, optimiser, learning rate and gradient
    clip), applied as many times as the recipe's kept policy received it (anchor_updates).
    Returns {"policy_path", "updates", "max_param_change"} (the largest change of any weight from the start; 0.0: the
    start's own weights) and the anchor it applied (start, anchor settings, seed: check_same_anchor)."""
    if rl_cfg.bc_coef <= 0:
        raise ValueError("bc_coef: the recipe adds no supervised anchor, so it has no anchor control")
    done, path = Path(out_dir) / "control.json", Path(out_dir) / "policy.pt"
    start = rl_result.get("start_policy") or rl_cfg.policy  # the adapted start when the recipe adapts (cfg.adapt)
    anchor_of = {"start": str(start), "bc_coef": rl_cfg.bc_coef, "bc_data": rl_cfg.bc_data,
                 "bc_target": rl_cfg.bc_target, "bc_tasks": list(rl_cfg.bc_tasks), "seed": rl_cfg.seed,
                 "frozen": list(rl_cfg.frozen)}
    if done.is_file():
        record = json.loads(done.read_text())
        try:
            anchor_of["updates"] = anchor_updates(rl_result)
        except ValueError:  # a run made before its updates were logged: its control is checked on the rest
            pass
        check_same_anchor(record, anchor_of, done)
        if "max_param_change" not in record:  # written before the field existed: measured from the saved weights
            weights = list(Policy.load(start).parameters())
            record = {**record, "max_param_change": _max_change(Policy.load(record["policy_path"]), weights)}
        return record
    n = anchor_updates(rl_result)
    torch.manual_seed(rl_cfg.seed)
    policy = Policy.load(start)
    anchor = bc_anchor(replace(rl_cfg, policy=start), policy, torch.Generator().manual_seed(rl_cfg.seed))
    freeze(policy, rl_cfg.frozen)  # the recipe's anchor moves only what its RL may move
    optimizer, schedule = make_optimizer(policy, rl_cfg.rl)  # the recipe's warmup too
    print(f"[anchor control] {n} anchor updates from {start}, no RL")
    before = [p.detach().clone() for p in policy.parameters()]
    policy.train()
    for _ in range(n):
        optimizer_step(policy, optimizer, anchor(), rl_cfg.rl.max_grad_norm, schedule)  # the step update() takes
    policy.eval()
    Path(out_dir).mkdir(parents=True, exist_ok=True)
    policy.save(path)
    # an anchor towards the start's own chunks has (up to rounding) nothing to pull while no RL moves the policy;
    # where its updates left every weight exactly as it was, arm c is the start itself and plays its episodes
    change = _max_change(policy, before)
    out = {"policy_path": str(path), "updates": n, "max_param_change": change, **anchor_of}
    atomic_write_text(done, json.dumps(out, indent=2))
    return out


def check_same_anchor(record: dict, anchor_of: dict, done: Path) -> None:
    """ValueError unless the anchor control `done` records applied the anchor the recipe applies now: from the same
    start, as many updates, on the same anchor data and seed. A record written before it kept these (only
    "updates") is checked on its count alone. Why: a second run in the same out_dir (another recipe, a loop round, more
    iterations) silently reused the first run's arm c."""
    differ = [k for k, v in anchor_of.items() if k in record and record[k] != v]
    if differ:
        said = ", ".join(f"{k} {record[k]!r} (now {anchor_of[k]!r})" for k in differ)
        raise ValueError(f"anchor control: {done} applied another anchor than the recipe's: {said}; give the run "
                         "another out_dir")


def _max_change(policy: Policy, before: Sequence[torch.Tensor]) -> float:
    """The largest absolute difference of any weight of `policy` from `before` (the start's parameters)."""
    return max((float((p.detach() - q.detach()).abs().max()) for p, q in zip(policy.parameters(), before)),
               default=0.0)


def own_gain(controls: dict[str, list[dict]], seeds: list[list[dict]]) -> tuple[str, SeedAverage]:
    """Imagination's own gain: the recipe's seeds, job-averaged, against the control arm with the most real
    successes on the same jobs (ties: the first named). Returns (that arm's name, the paired comparison)."""
    if not controls or not seeds:
        raise ValueError("own gain: expected at least one control arm and one seed of the recipe")
    best = max(controls, key=lambda name: sum(bool(r["success"]) for r in controls[name]))
    return best, seed_average(controls[best], seeds)


__all__ = ["IMITATED_SOURCES", "Budget", "anchor_control", "anchor_updates", "check_same_anchor", "check_same_control",
           "consumed", "control_config", "dataset_budget", "label_budget", "own_gain", "real_data_control",
           "recipe_budget"]
