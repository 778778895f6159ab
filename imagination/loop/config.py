"""The co-evolution loop's configuration, bookkeeping and exploitation guard (imagination.loop.run runs it).

    collect -> train world model -> BC -> evaluate BC (real + imagined)
    round r = 1..rounds:  RL in imagination (world model r-1) -> real rollouts of the new policy,
        recorded into the dataset (failures and near-successes flagged) -> imagined evaluation of the
        same jobs -> guard -> fine-tune the world model on the grown dataset (model r)
    final: RL in the last world model -> real and imagined evaluation

Every stage writes into its own folder of the run and is recorded in run_dir/loop.json once done;
re-running the same command reuses finished stages (and the library calls underneath resume unfinished
ones), so a stopped loop continues where it stopped.

The exploitation guard: a policy can learn to fool the world model (imagined success far above real
success). When the gap passes `guard_margin`, the report says so and the next fine-tune weights
failed episodes up by `guard_failure_weight`, so the model learns exactly the cases it got wrong.
"""
from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from imagination.eval.jobs import EvalConfig
from imagination.loop.grasp_inputs import GraspInputsConfig
from imagination.rl.training import ImagineRLConfig
from infra.atomic import atomic_write_json
from infra.crash_points import crash_point
from policies.bc import BCConfig
from robot_data.collection import CollectConfig
from world_models.training import TrainWorldModelConfig


@dataclass
class LoopConfig:
    """A whole loop run. Paths inside the stage configs are set by the loop (under out_dir)."""

    out_dir: str = "outputs/loop/quick"
    rounds: int = 1  # world-model refinements; RL runs rounds + 1 times
    collect: CollectConfig = field(default_factory=CollectConfig)
    world_model: TrainWorldModelConfig = field(default_factory=TrainWorldModelConfig)
    bc: BCConfig = field(default_factory=BCConfig)
    rl: ImagineRLConfig = field(default_factory=ImagineRLConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)  # real evaluation (and the imagined one's jobs)
    imagined_eval: bool = True  # also evaluate every policy in imagination from the same jobs
    wm_eval_steps: int = 64  # open-loop horizon of the world-model fidelity evaluation
    finetune_steps: int = 500  # world-model steps per round on the grown dataset
    # Clip-sampling weight of the policy's own episodes in the fine-tune. 1.0: measured (docs/notebook/loop.md,
    # "Measured: fine-tuning on the policy's own rollouts"):
    # x3 policy episodes with x2 failures made the head stop firing even on replayed expert episodes.
    policy_weight: float = 1.0
    guard_margin: float = 0.25  # imagined - real success above which the guard fires
    guard_failure_weight: float = 3.0  # failure weight of the next fine-tune when it fired
    calibrate: bool = True  # set each world model's success threshold on the data's replayed real episodes
    # With rl.imagination.reward=grasp (configs/loop/grasp.yaml): the own rollouts, near-miss grasps and proprio
    # model the reward reads, made on the collected init states (imagination/loop/grasp_inputs.py)
    grasp_inputs: GraspInputsConfig = field(default_factory=GraspInputsConfig)
    # With reward=grasp: before each round's RL, fit the judge's per-task logit offsets on the start policy's
    # real episodes re-run in imagination (imagination/eval/task_bias.py; a stage `round<r>_task_bias`)
    grasp_task_bias: bool = False
    # The real-data control (imagination/loop/arms.py): BC fine-tuned, with no world model, on every successful real
    # episode round 1's RL consumed, evaluated on the same jobs, so that the report can give imagination's own gain
    # (round 1 against the better of BC and this control) instead of a gain over BC alone
    control_arm: bool = True
    # A round's policy replaces the kept one only when its real evaluation, paired job by job, is not shown worse by
    # more than this success-rate difference (imagination/loop/adopt.py); else the next round starts from the kept
    # one. 1.0 adopts every round. Why: an unchecked round on LIBERO-Object made the policy worse and was carried on
    # (docs/suites.md, "The demo's recipe (the grasp reward) on LIBERO-Object")
    adopt_margin: float = 0.10

    def validate(self) -> None:
        if self.rounds < 0:
            raise ValueError(f"rounds: expected an integer >= 0, got {self.rounds}")
        if self.finetune_steps < 1 and self.rounds > 0:
            raise ValueError(f"finetune_steps: expected an integer >= 1, got {self.finetune_steps}")
        if not 0 <= self.guard_margin <= 1:
            raise ValueError(f"guard_margin: expected a success-rate gap in [0, 1], got {self.guard_margin}")
        if not 0 <= self.adopt_margin <= 1:
            raise ValueError(f"adopt_margin: expected a success-rate difference in [0, 1], got {self.adopt_margin}")
        for name in ("policy_weight", "guard_failure_weight"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name}: expected a number >= 0, got {getattr(self, name)}")
        if self.grasp_task_bias and self.rl.imagination.reward != "grasp":
            raise ValueError(f"grasp_task_bias: offsets are for the grasp judge; expected rl.imagination.reward=grasp, "
                             f"got {self.rl.imagination.reward!r}")
        if self.collect.suites and self.rl.imagination.reward == "grasp":
            raise ValueError(f"rl.imagination.reward: the grasp reward's classifier knows the tasks of one suite "
                             f"(its task one-hot is the task id); with collect.suites {list(self.collect.suites)} use "
                             f"rl.imagination.reward=head")
        views = list(self.world_model.clips.views)
        if not self.bc.policy.views or any(v not in views for v in self.bc.policy.views):
            raise ValueError(f"bc.policy.views {list(self.bc.policy.views)} must be among world_model.clips.views "
                             f"{views}: in imagination the policy sees only views the world model imagines")


def guard(round_: int, phase: str, imagined: float, real: float, margin: float, failure_weight: float) -> dict:
    """The exploitation-guard record of one round: fired when imagined - real success > margin."""
    gap = imagined - real
    fired = gap > margin
    return {"round": round_, "phase": phase, "imagined_success": imagined, "real_success": real, "gap": gap,
            "margin": margin, "fired": fired, "failure_weight": failure_weight if fired else 1.0}


def finetune_config(cfg: LoopConfig, data_dir: str, out_dir: str, init_from: str,
                    failure_weight: float) -> TrainWorldModelConfig:
    """The world-model fine-tune of one round: init_from the previous model, on the grown dataset.

    The policy's own episodes are drawn `policy_weight` times as often, failures `failure_weight` times.
    Bootstrapping starts at its final probability: its ramp exists to keep an untrained model's noise
    out of the context, and a fine-tune (500 steps in the quick preset, shorter than the ramp's start)
    would otherwise never see its own predictions, the very condition RL rollouts run in.
    """
    wm = cfg.world_model
    clips = replace(wm.clips, data_dir=data_dir,
                    source_weights={**wm.clips.source_weights, "policy": cfg.policy_weight},
                    failure_weight=failure_weight)
    bootstrap = replace(wm.bootstrap, prob_start=wm.bootstrap.prob_end, ramp_start=0)
    return replace(wm, out_dir=out_dir, clips=clips, init_from=init_from, steps=cfg.finetune_steps,
                   warmup_steps=min(wm.warmup_steps, cfg.finetune_steps // 10), bootstrap=bootstrap)


class LoopState:
    """run_dir/loop.json: finished stages (with seconds), phases, world models, guard records, data."""

    def __init__(self, cfg: LoopConfig):
        self.run_dir = Path(cfg.out_dir)
        self.path = self.run_dir / "loop.json"
        self.data: dict[str, Any] = {"run_dir": str(self.run_dir), "config": asdict(cfg), "stages": [],
                                     "phases": [], "world_models": [], "guard": [], "adoption": [], "data": {},
                                     "bc_dir": ""}
        if self.path.exists():
            old = json.loads(self.path.read_text())
            kept = ("stages", "phases", "world_models", "guard", "adoption", "data", "bc_dir", "provenance")
            self.data.update({k: old[k] for k in kept if k in old})
        self.run_dir.mkdir(parents=True, exist_ok=True)

    def save(self) -> None:
        atomic_write_json(self.path, self.data, indent=1, default=str)

    def done(self, name: str) -> dict | None:
        return next((s for s in self.data["stages"] if s["name"] == name and s["status"] in ("done", "reused")), None)

    def stage(self, name: str, fn: Callable[[], Any], log: Callable[[str], None] = print) -> Any:
        """Run fn once: a stage already recorded as done returns its stored result without running."""
        prev = self.done(name)
        if prev is not None:
            log(f"[loop] {name}: done before ({prev['seconds'] / 60:.1f} min), reused")
            return prev.get("result")
        log(f"[loop] {name} ...")
        t0 = time.time()
        result = fn()
        seconds = time.time() - t0
        crash_point("loop.stage_done")
        self.data["stages"] = [s for s in self.data["stages"] if s["name"] != name]
        self.data["stages"].append({"name": name, "seconds": seconds, "status": "done", "result": result})
        self.save()
        log(f"[loop] {name}: {seconds / 60:.1f} min")
        return result

    def upsert(self, key: str, record: dict, match: str = "name") -> None:
        items = [r for r in self.data[key] if r.get(match) != record.get(match)]
        self.data[key] = items + [record]
        self.save()


__all__ = ["LoopConfig", "LoopState", "finetune_config", "guard"]
