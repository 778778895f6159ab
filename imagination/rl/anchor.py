"""An anchor for what imagined episodes never reach: a supervised loss added to every RL minibatch.

With reward "grasp" every imagined episode ends at the first close of the gripper, so GRPO rewards the
approach and the grasp only. The network is shared, so everything after the grasp (lift, carry, lower,
release) drifts with no reward to hold it. Measured from the 1000-step BC start
(docs/notebook/loop.md, "RL on the grasp reward"): RL
halved the never-lifted failures (13 -> 6 of 50 gate jobs) while lifted-not-placed ones doubled (5 -> 11):
the bowl was carried over the plate and held there until the horizon.

Two targets:

    "demos"           the start data's successful expert demonstrations (the first `episodes_per_task` of
                      each task), as BC trained on them;
    "start_policy"    the starting policy's own chunks (deterministic mean) on every start episode's frames
                      (experts and perturbed ones). No action label the starting policy had not already
                      learned enters RL: a gain stays the RL's, not more behaviour cloning.

`phase="after_grasp"` keeps only the frames from each episode's first gripper close on, which leaves the
approach and the grasp, the part the reward judges, to RL alone. `phase="before_grasp"` keeps the frames before it
(the whole of an episode that never closes), which leaves the carry and the placement to RL. Why: imagined episodes
that start at the placement never reach the approach, which then drifts with nothing to hold it (RL that mended the
start's placements lost some of its grasps: docs/notebook/protocol_v2.md, section 11). Anchored to the start's own
chunks (`target="start_policy"`) on the frames of its own rollouts, the approach stays the start's.
`phase="before_release"` keeps every frame before `release_lead` steps ahead of each episode's first release after
its close (the whole of an episode that never closes or never releases): the approach, the grasp and the carry, all
that placement starts `release_lead` steps before the release never show RL. Why: held only before the grasp, RL
from placement starts raised its held-out placement check and carried the bowl past the plate in reality
(docs/notebook/protocol_v2.md, section 17).
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import cast

import torch

from policies.base import Policy
from robot_data.dataset import EpisodeDataset, ReaderConfig
from world_models.grasp_point import first_close, release_after

TARGETS = ("demos", "start_policy")
PHASES = ("all", "after_grasp", "before_grasp", "before_release")


@dataclass
class AnchorConfig:
    coef: float = 0.0  # weight of the anchor's MSE in every RL minibatch; 0 = off
    target: str = "demos"  # "demos" | "start_policy" (module docstring)
    phase: str = "all"  # "all" | "after_grasp" | "before_grasp" | "before_release": which frames are anchored
    episodes_per_task: int = 1  # target "demos": how many successful expert episodes per task
    release_lead: int = 8  # phase "before_release": the anchored frames stop this many steps before the release


def kept_frames(action, phase: str, release_lead: int = 8) -> tuple[int, int]:
    """The frames [start, stop) of an episode with actions [T, 7] that `phase` keeps (AnchorConfig.phase)."""
    T, start, stop = len(action), 0, len(action)
    t0 = first_close(action)
    if phase == "after_grasp":
        start = T if t0 < 0 else t0  # an episode that never closes has nothing after a grasp
    elif phase == "before_grasp":
        stop = T if t0 < 0 else t0  # an episode that never closes is all approach
    elif phase == "before_release":
        r = release_after(action, t0) if t0 >= 0 else -1
        stop = T if r < 0 else max(0, r - release_lead)  # never closed or never let go: nothing RL starts from
    return start, stop


def _samples(ds: EpisodeDataset, picked: list[int], phase: str, data, release_lead: int = 8) -> torch.Tensor:
    """Indices into ChunkData `data` (built from `picked` in order) of the frames `phase` keeps."""
    keep, offset = [], 0
    for i in picked:
        action = ds.arrays(i)[1]
        T = len(action)
        start, stop = kept_frames(action, phase, release_lead)
        keep.append(torch.arange(offset + start, offset + stop))
        offset += T
    if offset != len(data):
        raise RuntimeError(f"anchor: {offset} frames counted, {len(data)} in the chunk data")
    return torch.cat(keep)


def make_anchor(cfg: AnchorConfig, policy: Policy, start_data: str, tasks: list[int], batch_size: int,
                seed: int, features: ReaderConfig | None = None,
                generator: torch.Generator | None = None) -> Callable[[], torch.Tensor]:
    """A closure returning cfg.coef x the anchor's MSE of `policy` on a fresh batch of `batch_size` frames
    (start_data read through `features`). generator: what draws the batches (default: one seeded with
    `seed`); a caller that checkpoints its state resumes the same sequence of batches."""
    from policies.bc_batch import ChunkData, bc_loss
    from policies.vla import VLAConfig

    if cfg.target not in TARGETS or cfg.phase not in PHASES:
        raise ValueError(f"anchor: target must be one of {TARGETS} and phase one of {PHASES}, "
                         f"got {cfg.target!r} and {cfg.phase!r}")
    ds = EpisodeDataset(start_data, verify=False, features=features)
    if cfg.target == "demos":
        per_task: dict[int, list[int]] = {}
        for i in ds.select(source="expert", success=True, task_id=tasks or None):
            per_task.setdefault(ds.meta[i].task_id, []).append(i)
        picked = sorted(i for ids in per_task.values() for i in ids[: cfg.episodes_per_task])
        if not picked:
            raise ValueError(f"bc_coef: {start_data} has no successful expert episode to anchor on")
    else:
        picked = ds.select(task_id=tasks or None)
        if not picked:
            raise ValueError(f"bc_coef: {start_data} has no episode of tasks {tasks} to anchor on")
    pc = cast(VLAConfig, policy.config)  # BC trains VLA policies only
    data = ChunkData([ds[i] for i in picked], list(pc.views), policy.chunk_len, pc.image_size)
    rows = _samples(ds, picked, cfg.phase, data, cfg.release_lead)
    if not len(rows):
        raise ValueError(f"bc_coef: no frame of {start_data}'s anchor episodes is left by phase {cfg.phase!r}")
    if cfg.target == "start_policy":  # the starting policy's own chunks, computed once before RL moves it
        was_training = policy.training
        policy.eval()
        with torch.no_grad():
            for lo in range(0, len(rows), 256):
                idx = rows[lo: lo + 256]
                obs = {"image": data.image[idx], "state": data.state[idx],
                       "instruction": [data.instructions[k] for k in data.text_id[idx]]}
                data.target[idx] = policy(obs).mean.cpu()  # the mean BC fit, unclipped, as bc_loss reads it
                data.mask[idx] = True  # the policy's chunk is whole, also near an episode's end
        policy.train(was_training)
    gen = torch.Generator().manual_seed(seed) if generator is None else generator
    device = next(policy.parameters()).device

    def anchor() -> torch.Tensor:
        idx = rows[torch.randint(0, len(rows), (batch_size,), generator=gen)]
        obs, target, mask = data.batch(idx, 0, gen)
        return cfg.coef * bc_loss(policy, obs, target.to(device), mask.to(device), "mse")[0]

    return anchor


__all__ = ["AnchorConfig", "PHASES", "TARGETS", "kept_frames", "make_anchor"]
