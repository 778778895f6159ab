"""Evaluate a policy in real LIBERO and record its episodes into the dataset (the loop's data growth).

`RecordingEvalEnv` wraps `LiberoEvalEnv`: the simulator renders every view the dataset stores
(agentview and wrist), the policy is shown only the views it reads, and every low-level step is
buffered. When an episode ends, it is written to the dataset as source "policy", labelled with the
simulator's success, the round and the policy, with the simulator's outcome (`envs.outcome`: never
lifted / lifted, not placed) and a near-success flag for failures: the goal's object was lifted but
not placed, or, for tasks without such an object, the proprio rule of `near_success`. The same
`imagination.eval.evaluate.evaluate` loop drives it, so the recorded episodes *are* the evaluation
episodes: one set of real rollouts gives both the success figures and the new training data.

Row convention (as in collection): row t holds the observation before action t, action t, and
success after it. The real env stops on success, so the final observation (the solved scene) is
added as one more row with a hold action (no motion, the last gripper command); without it no
recorded frame would show the success the head must learn.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from envs.frames import split_views
from envs.outcome import outcome
from imagination.eval.evaluate import evaluate, load_policy
from imagination.eval.jobs import EnvSpec, EvalConfig, Job
from imagination.eval.libero import LiberoEvalEnv
from infra.atomic import atomic_write_json
from infra.cli import save_config
from policies.base import Policy
from robot_data.dataset import Episode, EpisodeDataset, EpisodeWriter
from robot_data.dataset.layout import INFO_PATH


def near_success(episode_success: bool, state: np.ndarray) -> bool:
    """A failure that got somewhere: the gripper closed on something and the arm moved it.

    Proprio only (no privileged object state, so it works on a real robot's logs too): the gripper
    fingers closed at some point (qpos gap below 80% of its opening at the start) while the
    end-effector then travelled more than 5 cm. Failures of this kind are the most useful new data
    for the world model: they sit next to the successes the policy is being pushed toward.
    """
    if episode_success or len(state) < 2:
        return False
    gap = np.abs(state[:, 6] - state[:, 7])
    closed = np.flatnonzero(gap < 0.8 * gap[0])
    if not len(closed):
        return False
    travel = np.linalg.norm(state[closed[0]:, :3] - state[closed[0], :3], axis=1).max()
    return bool(travel > 0.05)


class RecordingEvalEnv:
    """`EvalEnv` over real LIBERO that shows the policy `policy_views` and records `dataset_views`."""

    def __init__(self, cfg: EvalConfig, spec: EnvSpec, first_tasks: list[int], writer: EpisodeWriter,
                 extra: dict[str, Any]):
        views = tuple(writer.config.views)
        missing = [v for v in spec.views if v not in views]
        if missing:
            raise ValueError(f"the policy reads views {missing} that the dataset does not store ({list(views)})")
        self.inner = LiberoEvalEnv(cfg, replace(spec, views=views), first_tasks, record=True)
        self.num_envs, self.writer, self.extra = self.inner.num_envs, writer, extra
        self._pick = [views.index(v) for v in spec.views]
        self._buffers: list[dict | None] = [None] * self.num_envs
        self._written: set[int] = set()  # job indices already recorded (padding envs repeat jobs)
        self.recorded: list[dict] = []

    def num_tasks(self) -> int:
        return self.inner.num_tasks()

    def num_init_states(self, task_id: int) -> int:
        return self.inner.num_init_states(task_id)

    def instruction(self, task_id: int) -> str:
        return self.inner.instruction(task_id)

    def _policy_obs(self, obs: dict) -> dict:
        return {**obs, "image": np.asarray(obs["image"])[:, self._pick]}

    def reset_envs(self, jobs: Sequence[Job | None]) -> dict[str, Any]:
        obs = self.inner.reset_envs(jobs)
        for i, job in enumerate(jobs):
            if job is not None:
                self._buffers[i] = {"job": job, "images": [obs["image"][i]], "states": [obs["state"][i]], "actions": []}
        return self._policy_obs(obs)

    def step(self, actions: np.ndarray):
        obs, reward, terminated, truncated, info = self.inner.step(actions)
        for i, buf in enumerate(self._buffers):
            if buf is None:
                continue
            n = len(info["frames"][i])
            buf["actions"].extend(np.asarray(actions[i, :n], np.float32))
            buf["images"].extend(info["frames"][i])
            buf["states"].extend(info["states"][i])
            if terminated[i] or truncated[i]:
                self._finish(i, bool(terminated[i]), float(info["object_lift_m"][i]))
        # videos show what the policy saw, like every other evaluation
        shown = {**info, "frames": [f[:, self._pick] for f in info["frames"]]}
        return self._policy_obs(obs), reward, terminated, truncated, shown

    def _finish(self, i: int, success: bool, object_lift_m: float) -> None:
        buf, self._buffers[i] = self._buffers[i], None
        assert buf is not None  # called for an env that is recording an episode
        job: Job = buf["job"]
        if job.index in self._written:
            return
        self._written.add(job.index)
        actions = np.stack(buf["actions"])
        hold = np.zeros(7, np.float32)
        hold[6] = actions[-1, 6]
        action = np.concatenate([actions, hold[None]])  # the extra row for the final observation
        images, state = np.stack(buf["images"]), np.stack(buf["states"]).astype(np.float32)
        T = len(action)
        flags = np.zeros(T, bool)
        flags[-2:] = success  # after the last real action and after the hold
        how = outcome(success, object_lift_m)
        # the simulator knows whether the object left the table; the proprio rule only guesses it (a
        # gripper that closes on nothing and then travels counts for it too)
        near = how == "lifted, not placed" if how != "failure" else near_success(success, state)
        views = self.writer.config.views
        self.writer.append(Episode(
            frames=split_views(images, views), state=state, action=action,
            reward=flags.astype(np.float32), success=flags, instruction=self.instruction(job.task_id),
            suite=self.inner.suite, task_id=job.task_id, source="policy", seed=job.seed,
            init_state_id=job.init_state_id,
            extra={**self.extra, "job": job.index, "near_success": near, "outcome": how}))
        self.recorded.append({"job": job.index, "task_id": job.task_id, "success": success, "near_success": near,
                              "steps": T - 1})

    def close(self) -> None:
        self.inner.close()


def evaluate_and_record(cfg: EvalConfig, policy: Policy, data_dir: str | Path, extra: dict[str, Any],
                        progress: bool = True) -> dict:
    """`evaluate` in real LIBERO, appending every episode to the dataset at data_dir (source "policy").

    Returns evaluate's result plus result["recorded"]: {episodes, successes, failures, near_successes}, also
    written to out_dir/results.json (a resumed loop that reuses the file keeps its counts).
    """
    writer = EpisodeWriter(data_dir, EpisodeDataset(data_dir, verify=False).config)
    envs: list[RecordingEvalEnv] = []

    def factory(c: EvalConfig, spec: EnvSpec, first_tasks: list[int]) -> RecordingEvalEnv:
        envs.append(RecordingEvalEnv(c, spec, first_tasks, writer, extra))
        return envs[-1]

    with writer:  # the episodes are committed to the dataset before results.json says they were recorded
        result = evaluate(cfg, policy, progress=progress, env_factory=factory, write=False)
    rec = envs[0].recorded if envs else []
    result["recorded"] = {"episodes": len(rec), "successes": sum(r["success"] for r in rec),
                          "failures": sum(not r["success"] for r in rec),
                          "near_successes": sum(r["near_success"] for r in rec)}
    atomic_write_json(Path(cfg.out_dir) / "results.json", result, indent=2)
    return result



@dataclass
class EvalPolicyConfig(EvalConfig):
    record_to: str = ""  # a dataset folder: append every real episode to it (source policy); "" = do not record
    # several LIBERO suites, one after another with these settings, into out_dir/<suite>/, plus a table per
    # suite and their average in out_dir/suites.md (imagination/eval/suites.py); overrides env when set
    suites: list[str] = field(default_factory=list)


def evaluate_policy(cfg: EvalConfig) -> dict:
    """`evaluate` cfg (or, with `record_to`, `evaluate_and_record` into that dataset), with the config
    saved in out_dir and the figures printed."""
    record_to = getattr(cfg, "record_to", "")
    if record_to and cfg.env == "imagination":
        raise SystemExit("record_to: only real episodes are recorded; use a LIBERO suite as env")
    if record_to and not Path(record_to, INFO_PATH).is_file():
        raise SystemExit(f"record_to: {record_to} is not a dataset folder (expected {record_to}/{INFO_PATH}, "
                         "as scripts/collect.py writes it)")
    save_config(cfg, Path(cfg.out_dir) / "config.yaml")
    if record_to:
        result = evaluate_and_record(cfg, load_policy(cfg), record_to, {"policy": cfg.checkpoint})
    else:
        result = evaluate(cfg)
    o, t = result["overall"], result["timing"]
    print(f"{result['policy']} on {cfg.env} ({cfg.checkpoint}): success {o['successes']}/{o['episodes']} = "
          f"{o['success_rate']:.2f}  95% CI [{o['ci95'][0]:.2f}, {o['ci95'][1]:.2f}]")
    for task, row in result["per_task"].items():
        print(f"  task {task:>2}: {row['successes']}/{row['episodes']}  CI [{row['ci95'][0]:.2f}, {row['ci95'][1]:.2f}]"
              f"  mean steps {row['mean_steps']:.0f}  {row['instruction']}")
    if o.get("failures"):
        print("  failures: " + ", ".join(f"{k} {n}" for k, n in o["failures"].items()))
    print(f"  {t['seconds']:.0f} s, {t['env_steps_per_second']:.1f} env steps/s, "
          f"{t['episodes_per_minute']:.1f} episodes/min")
    print(f"  results: {Path(cfg.out_dir) / 'results.json'}")
    if record_to:
        r = result["recorded"]
        print(f"  recorded into {record_to}: {r['episodes']} episodes ({r['successes']} successes, "
              f"{r['failures']} failures, {r['near_successes']} near-successes)")
    return result


__all__ = ["EvalPolicyConfig", "RecordingEvalEnv", "evaluate_and_record", "evaluate_policy", "near_success"]
