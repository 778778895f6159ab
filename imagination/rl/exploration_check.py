"""Before imagined RL: does the judge read the start the same under RL's exploration noise as without it?

GRPO scores the policy's *sampled* chunks; the real evaluation runs its *mean* chunks. Where the imagined episode
cannot correct what the noise does, the two part: with `imagination.observe: recorded` the policy acts on the
recording's frames, so per-step noise adds up open loop over the approach, and the gripper closes centimetres from
where the mean would put it. On LIBERO-Spatial's tasks with a long approach the judge then reads as failed the
start's sampled chunks where its mean chunks, and reality, succeed: RL "improves" a task that succeeds in reality,
and loses it (docs/results.md, "Exploration noise in open-loop imagination").

`exploration_gap` imagines the same keyframes twice, with the same world-model noise, once with the mean chunks and
once with sampled ones, and reports each task's imagined success both ways. `train_rl` runs it before the first
iteration when `exploration_check` > 0 and prints a warning naming every task whose sampled success lies more than
that below the mean's (lower init_log_std or exploration_data_scale there, and scale rl.lr with the std).

Where the start episodes record their real outcome (`StartEpisode.success`: the start's own rollouts, say), it also
sets the mean's reading against the recordings' real success, task by task, and warns about every task the judge
reads more than the tolerance *below* reality: there RL sets out to repair what already works in reality. On
LIBERO-Spatial the judge read two tasks the start mostly succeeds on as mostly failed, and RL lost both
(docs/results.md, "Protocol v2 on LIBERO-Spatial rebuilt on the CPU"). A reading above reality only leaves RL
without signal there, so it is shown, not warned about. The comparison is exact for starts at frame 0 (keyframes
mode "start"); from a later keyframe the recording's outcome is that of the whole recording, not of the imagined
remainder alone.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from imagination.env import ImaginationVectorEnv
from imagination.episodes import task_keys
from imagination.imagine import imagine, policy_mean, policy_sample
from policies.base import Policy


@dataclass
class ExplorationGap:
    """Per task t (named as imagination.episodes.task_keys names it: "task3", or "libero_object_task3" when the start
    episodes mix suites): `episodes[t]` keyframes imagined, the share imagined a success with the mean chunks
    (`mean[t]`) and with chunks sampled at the policy's exploration noise (`sampled[t]`), and the share of those
    keyframes' recordings that succeeded in reality (`recorded[t]`; empty when a start episode records no outcome)."""

    episodes: dict[str, int]
    mean: dict[str, float]
    sampled: dict[str, float]
    recorded: dict[str, float] = field(default_factory=dict)

    def drops(self, tolerance: float) -> dict[str, float]:
        """The tasks whose sampled success lies more than `tolerance` below the mean's: {task: mean - sampled}."""
        return {t: self.mean[t] - self.sampled[t] for t in self.mean if self.mean[t] - self.sampled[t] > tolerance}

    def under_reads(self, tolerance: float) -> dict[str, float]:
        """The tasks whose mean chunks the judge reads more than `tolerance` below their recordings' real success:
        {task: recorded - mean}; empty when the recordings carry no outcome."""
        return {t: self.recorded[t] - self.mean[t] for t in self.recorded
                if self.recorded[t] - self.mean[t] > tolerance}

    def as_dict(self) -> dict[str, dict[str, float]]:
        """JSON-ready: what result.json records."""
        return {t: {"episodes": self.episodes[t], "mean": self.mean[t], "sampled": self.sampled[t],
                    **({"recorded": self.recorded[t]} if t in self.recorded else {})}
                for t in sorted(self.mean)}

    def report(self, tolerance: float) -> str:
        """One line per task, and a warning naming the tasks past `tolerance`, each way."""
        lines = ["exploration check (imagined success of the start, mean chunks -> sampled chunks, same starts"
                 + ("; the recordings' real success" if self.recorded else "") + "):"]
        lines += [f"  {t}: {self.mean[t]:.2f} -> {self.sampled[t]:.2f} ({self.episodes[t]} starts"
                  + (f"; real {self.recorded[t]:.2f}" if t in self.recorded else "") + ")"
                  for t in sorted(self.mean)]
        if under := self.under_reads(tolerance):
            named = ", ".join(f"{t} (-{d:.2f})" for t, d in sorted(under.items()))
            lines.append(f"WARNING: the judge reads the start's own chunks below the recordings' real success on "
                         f"{named}, more than exploration_check={tolerance}: RL there would repair what works in "
                         "reality; leave those tasks out of `tasks` (the anchor holds them) or fix the judge")
        drops = self.drops(tolerance)
        if drops:
            named = ", ".join(f"{t} (-{d:.2f})" for t, d in sorted(drops.items()))
            lines.append(f"WARNING: the exploration noise alone lowers the judge's reading of {named}, more than "
                         f"exploration_check={tolerance}: RL there follows the noise, not the policy's real outcome; "
                         "lower init_log_std (or exploration_data_scale) and scale rl.lr with the std")
        return "\n".join(lines)


@torch.no_grad()
def exploration_gap(env: ImaginationVectorEnv, policy: Policy, num_starts: int, seed: int) -> ExplorationGap:
    """Imagine `num_starts` (<= env.num_envs) keyframes drawn by the env's sampler with `seed`, once with the
    policy's mean chunks and once with its sampled chunks (generator seeded with `seed`), under the same
    world-model noise; per start task (task_keys), the share of episodes the env's reward ends in success, and the
    share of the starts' recordings that succeeded in reality when every start episode records it."""
    if not 1 <= num_starts <= env.num_envs:
        raise ValueError(f"num_starts: expected 1 to {env.num_envs} (the env's num_envs), got {num_starts}")
    starts = env.keyframes.sample(num_starts, np.random.default_rng(seed))
    keys, names = task_keys(env.episodes)
    tasks = np.array([keys[kf.episode] for kf in starts])
    mean = imagine(env, policy_mean(policy), starts, seed=seed).success
    gen = torch.Generator(device=policy.device).manual_seed(seed)
    sampled = imagine(env, policy_sample(policy, gen), starts, seed=seed).success
    ids = [int(t) for t in np.unique(tasks)]
    outcomes = [env.episodes[kf.episode].success for kf in starts]
    real = np.array(outcomes, bool) if all(o is not None for o in outcomes) else None
    return ExplorationGap(episodes={names[t]: int((tasks == t).sum()) for t in ids},
                          mean={names[t]: float(mean[tasks == t].mean()) for t in ids},
                          sampled={names[t]: float(sampled[tasks == t].mean()) for t in ids},
                          recorded={} if real is None else {names[t]: float(real[tasks == t].mean()) for t in ids})


__all__ = ["ExplorationGap", "exploration_gap"]
