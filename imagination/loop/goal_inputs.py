"""What imagined RL with reward "goal" reads besides the world model and the start data, built on the training init
states only (the benchmark's protocol on any suite, bench/protocol.py):

    own rollouts   the start policy's real episodes on the training init states, recorded (source "policy"): the
                   goals the policy really reaches and misses, with their outcomes
    goal labels    every step of the start data and the own rollouts: which of the task's BDDL goal predicates hold
                   and how near each is (robot_data/goal_labels.py, LIBERO's own evaluator on a replay)
    goal reader    trained on both (world_models/goal_reader.py): it reads the predicates from one camera frame

Why the own rollouts: demonstrations alone hold almost only successes, and a reader that has seen few failures
reads every imagined frame near the goal as reached. The simulator labels supervise the reader here, at build time;
at RL time the judge reads only imagined frames (imagination/rewards/goal.py), as a real robot could.
Every piece is made once and reused.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from imagination.eval.jobs import EvalConfig
from imagination.loop.grasp_inputs import own_rollouts
from robot_data.goal_labels import label_goal_dataset
from world_models.goal_reader import GoalReaderConfig
from world_models.goal_reader_training import TrainGoalReaderConfig, train_goal_reader


def quick_reader() -> GoalReaderConfig:
    """The quick reader measured on every suite's real frames (docs/results.md, "The goal reader on each suite")."""
    return GoalReaderConfig(channels=[16, 32, 32], batch_size=32, steps=2000)


@dataclass
class GoalInputsConfig:
    own_rollout_seed: int = 1  # the start policy's own rollouts: another seed than the demonstrations'
    # 0: the reader trains on every episode. Why: the recipe's judge should see every failure there is; how it reads
    # episodes it never saw is bench/goal_judge.py's measurement, on other init states
    holdout_every: int = 0
    reader: GoalReaderConfig = field(default_factory=quick_reader)


@dataclass(frozen=True)
class GoalInputPaths:
    """Where the inputs go: the own rollouts' dataset lives in `own_rollouts`/data, the reader in `goal_reader`."""

    own_rollouts: str
    goal_reader: str


def build_goal_inputs(paths: GoalInputPaths, data: str, policy: str, eval_cfg: EvalConfig,
                      cfg: GoalInputsConfig) -> dict[str, str]:
    """The policy's own rollouts on eval_cfg's jobs (the training init states: env, tasks, episodes_per_task from
    init_state_offset), the goal labels of `data` and of those rollouts, and the goal reader trained on both; each
    made or reused. Returns own_rollouts (the dataset) and goal_reader (the reader.pt ImaginationConfig.goal_reader
    takes)."""
    own = own_rollouts(paths.own_rollouts, policy, data, eval_cfg, cfg.own_rollout_seed, sim_labels=False)
    for folder in (data, own):
        label_goal_dataset(folder, progress=False)  # replays only episodes not labelled yet
    reader = Path(paths.goal_reader) / "reader.pt"
    if not reader.is_file():
        print(f"[goal inputs] training the goal reader on {data} and {own} ({cfg.reader.steps} steps)")
        train_goal_reader(TrainGoalReaderConfig(data_dirs=[data, own], out_dir=paths.goal_reader,
                                                holdout_every=cfg.holdout_every, reader=cfg.reader))
    return {"own_rollouts": own, "goal_reader": str(reader)}


__all__ = ["GoalInputPaths", "GoalInputsConfig", "build_goal_inputs", "quick_reader"]
