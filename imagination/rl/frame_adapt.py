"""Teach a policy to act on imagined frames as it acts on real ones, before RL reads its imagined episodes.

Why: imagined RL scores what the policy does on the world model's frames. A policy that reads the blurred imagined
arm otherwise than the real one (on protocol v2's CPU world model the start seldom let go of the bowl in imagination
where it always did in reality: docs/results.md, "Adapting the start to the imagined frames") is not the policy that
will act in reality, and whatever RL learns, it learns for that other policy.

The adaptation is supervised and adds no action label the start had not produced itself: from the start's own
recorded rollouts (`data`), each episode is imagined open loop with its recorded actions from `leads` steps before
its recorded release. The policy is fit to output, from each imagined frame and predicted robot state (what it reads
in imagined RL), the chunk it outputs on the recorded observation of the same step (target "start"), with every
recorded step of the same episodes weighted `real_weight` beside them (what it reads in reality, approach and grasp
included). The updates are supervision, not RL: protocol v2's anchor control (arm c) starts from the adapted
policy, so any gain from the adaptation alone is the control's.
"""
from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import torch

from imagination.env import ImaginationConfig, ImaginationVectorEnv
from imagination.imagine import open_imagination
from imagination.keyframes import Keyframe, placement_starts
from infra.atomic import atomic_write_text
from policies.base import Policy
from policies.bc_batch import bc_loss


@dataclass
class FrameAdaptConfig:
    policy: str = ""  # the policy to adapt (a Policy file): the start whose own rollouts `data` holds
    world_model: str = ""  # the world model RL imagines in
    proprio: str = ""  # its ProprioModel file (the RL recipe's `proprio`)
    data: str = ""  # the policy's own recorded rollouts (dataset directory)
    out_dir: str = ""  # writes policy.pt and adapt.json
    leads: list[int] = field(default_factory=lambda: [40, 32, 24, 16, 8])  # starts, steps before each release
    imagined_steps: int = 40  # imagined steps from each start (rounded up to whole chunks)
    steps: int = 300  # optimiser steps
    lr: float = 1e-4
    batch_size: int = 64  # imagined samples per step (and as many recorded ones when real_weight > 0)
    real_weight: float = 1.0  # weight of the recorded observations: every step of `data`'s episodes
    # "start": the policy's own chunks on the recorded observation of each step (start_targets); "recorded": the
    # recorded actions (the rollouts' own, which a start evaluated deterministically produced on full-size frames)
    target: str = "start"
    seed: int = 0  # the world model's noise and the batches' draws
    num_threads: int = 2
    # where the world model imagines and the policy is fit (an RL run passes its imagination.device). Why: on one GPU
    # a 16M-parameter world model's adaptation took 172 s on the machine's CPUs, longer than the RL after it
    device: str = "cpu"
    # the world model's action guidance while imagining (ImaginationConfig.action_guidance; 0: the model's own). An
    # RL run passes its imagination.action_guidance, so that the start is adapted to the frames RL imagines
    action_guidance: float = 0.0

    def validate(self) -> None:
        for name in ("policy", "world_model", "data", "out_dir"):
            if not getattr(self, name):
                raise ValueError(f"{name}: required (see scripts/adapt_to_imagination.py --help)")
        if self.target not in ("start", "recorded"):
            raise ValueError(f"target: expected 'start' or 'recorded', got {self.target!r}")
        if not self.leads or min(self.leads) < 1:
            raise ValueError(f"leads: expected a non-empty list of integers >= 1, got {self.leads}")
        if self.imagined_steps < 1 or self.steps < 0 or self.batch_size < 1 or self.lr <= 0 or self.real_weight < 0:
            raise ValueError("imagined_steps, steps, batch_size, lr, real_weight: expected >= 1, >= 0, >= 1, > 0, "
                             f">= 0; got {self.imagined_steps}, {self.steps}, {self.batch_size}, {self.lr}, "
                             f"{self.real_weight}")


@dataclass
class Pairs:
    """Observations and the recorded chunk at the same step. image uint8 [N, V, H, W, 3] (imagined or recorded),
    state float32 [N, S], target float32 [N, K, 7], mask bool [N, K] (False past the episode's end)."""

    image: np.ndarray
    state: np.ndarray
    instruction: list[str]
    target: np.ndarray
    mask: np.ndarray

    def __len__(self) -> int:
        return len(self.target)

    def batch(self, idx: np.ndarray) -> tuple[dict, torch.Tensor, torch.Tensor]:
        obs = {"image": self.image[idx], "state": self.state[idx], "instruction": [self.instruction[i] for i in idx]}
        return obs, torch.as_tensor(self.target[idx]), torch.as_tensor(self.mask[idx])


def release_starts(env: ImaginationVectorEnv, leads: list[int], align: int) -> list[Keyframe]:
    """Keyframes `lead` steps before each of env's episodes' first release after its close (rounded down to
    `align`), for every lead; episodes that never release that far after a close give none."""
    actions = [np.asarray(ep.action) for ep in env.episodes]
    starts = []
    for lead in leads:
        t0 = placement_starts(actions, lead, align)
        starts += [Keyframe(int(e), int(t0[e])) for e in np.flatnonzero(t0 >= 0)]
    return starts


def imagined_pairs(env: ImaginationVectorEnv, starts: list[Keyframe], chunks: int,
                   seed: int = 0) -> tuple[Pairs, Pairs]:
    """From `starts` (at most env.num_envs at a time), `chunks` chunks of each episode imagined open loop with its
    recorded actions -> (imagined, recorded): the observation the policy reads at each chunk's first step in the
    world model and in the recording, both with the recorded chunk from that step as the target."""
    K, B = env.K, env.num_envs
    out: dict[str, dict[str, list]] = {k: {"image": [], "state": [], "instruction": [], "target": [], "mask": []}
                                       for k in ("imagined", "recorded")}
    for lo in range(0, len(starts), B):
        part = starts[lo: lo + B]
        part = part + [part[-1]] * (B - len(part))  # pad the last batch; the padding is dropped below
        n_real = min(B, len(starts) - lo)
        obs, _ = env.reset(seed=seed + lo, options={"keyframes": part})
        eps = [env.episodes[kf.episode] for kf in part]
        for j in range(chunks):
            t = [kf.t + j * K for kf in part]
            act = np.zeros((B, K, 7), np.float32)
            mask = np.zeros((B, K), bool)
            for b, (ep, s) in enumerate(zip(eps, t)):
                a = np.asarray(ep.action[s: s + K], np.float32)
                act[b, : len(a)], mask[b, : len(a)] = a, True
                if len(a) < K:  # past the recording's end the world model gets its last action again
                    act[b, len(a):] = a[-1] if len(a) else 0.0
            live = [b for b in range(n_real) if t[b] < len(eps[b].action)]
            rec_img = env.policy_views(np.stack([eps[b].frames[t[b]] for b in live])) if live else None
            for key, image, state in (
                    ("imagined", obs["image"][live], obs["state"][live]),
                    ("recorded", rec_img, np.stack([eps[b].state[t[b]] for b in live]) if live else None)):
                if not live:
                    continue
                out[key]["image"].append(np.asarray(image))
                out[key]["state"].append(np.asarray(state, np.float32))
                out[key]["instruction"] += [eps[b].instruction for b in live]
                out[key]["target"].append(act[live])
                out[key]["mask"].append(mask[live])
            obs, *_ = env.step(act)

    def pairs(d: dict[str, list]) -> Pairs:
        if not d["target"]:
            raise ValueError("data: no imagined step to adapt on (no episode releases after its close)")
        return Pairs(np.concatenate(d["image"]), np.concatenate(d["state"]), d["instruction"],
                     np.concatenate(d["target"]), np.concatenate(d["mask"]))

    return pairs(out["imagined"]), pairs(out["recorded"])


def recorded_pairs(env: ImaginationVectorEnv, stride: int = 1) -> Pairs:
    """Every `stride`-th step of env's episodes as the recording shows it, with the recorded chunk from that step:
    what holds the policy's real behaviour over whole episodes (approach and grasp included) while it adapts."""
    K = env.K
    image, state, instruction, target, mask = [], [], [], [], []
    for ep in env.episodes:
        T = len(ep.action)
        steps = np.arange(0, T, stride)
        idx = steps[:, None] + np.arange(K)[None, :]  # [n, K]
        image.append(env.policy_views(np.asarray(ep.frames)[steps]))
        state.append(np.asarray(ep.state, np.float32)[steps])
        instruction += [ep.instruction] * len(steps)
        target.append(np.asarray(ep.action, np.float32)[np.minimum(idx, T - 1)])
        mask.append(idx < T)
    return Pairs(np.concatenate(image), np.concatenate(state), instruction, np.concatenate(target),
                 np.concatenate(mask))


def masked_mse(policy: Policy, obs: dict, target: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """MSE of the policy's mean chunk [B, K, 7] against target over the unmasked steps (BC's own loss)."""
    return bc_loss(policy, obs, target.to(policy.device), mask.to(policy.device), "mse")[0]


def adapt(policy: Policy, imagined: Pairs, recorded: Pairs, cfg: FrameAdaptConfig) -> list[dict]:
    """cfg.steps Adam steps on the imagined pairs (and the recorded ones, weighted cfg.real_weight); returns one
    log row per 50 steps and the last."""
    rng = np.random.default_rng(cfg.seed)
    opt = torch.optim.Adam([p for p in policy.parameters() if p.requires_grad], lr=cfg.lr)
    policy.train()
    logs = []
    for step in range(cfg.steps):
        idx = rng.integers(0, len(imagined), cfg.batch_size)
        loss_i = masked_mse(policy, *imagined.batch(idx))
        loss_r = masked_mse(policy, *recorded.batch(rng.integers(0, len(recorded), cfg.batch_size))) \
            if cfg.real_weight > 0 else torch.zeros(())
        loss = loss_i + cfg.real_weight * loss_r
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(policy.parameters(), 1.0)
        opt.step()
        if step % 50 == 0 or step == cfg.steps - 1:
            logs.append({"step": step, "imagined_mse": loss_i.item(), "recorded_mse": loss_r.item()})
    policy.eval()
    return logs


@torch.no_grad()
def own_targets(policy: Policy, pairs: Pairs) -> np.ndarray:
    """The policy's mean chunks [N, K, 7] on `pairs`' observations (evaluation mode)."""
    was = policy.training
    policy.eval()
    out = [policy(pairs.batch(np.arange(lo, min(lo + 256, len(pairs))))[0]).mean.cpu().numpy()
           for lo in range(0, len(pairs), 256)]
    policy.train(was)
    return np.concatenate(out).astype(np.float32)


def start_targets(policy: Policy, imagined: Pairs, window: Pairs, recorded: Pairs) -> None:
    """Set every target to the policy's own chunk on the recorded observation of the same step, before it moves:
    on an imagined step, what it does on the real frame of that step (`window`, pair for pair); on a recorded step,
    what it does there already. No action label it had not produced itself enters, and the recorded term starts
    at zero: it only holds what reality sees of the policy while the imagined term moves it."""
    if len(imagined) != len(window):
        raise ValueError(f"window: expected one recorded step per imagined one ({len(imagined)}), got {len(window)}")
    imagined.target = own_targets(policy, window)
    recorded.target = own_targets(policy, recorded)
    for p in (imagined, recorded):
        p.mask = np.ones_like(p.mask)  # the policy's chunk is whole, also near an episode's end


@torch.no_grad()
def pair_mse(policy: Policy, pairs: Pairs) -> float:
    """The policy's masked MSE against the recorded chunks over every pair (evaluation mode)."""
    was = policy.training
    policy.eval()
    total, n = 0.0, 0
    for lo in range(0, len(pairs), 256):
        idx = np.arange(lo, min(lo + 256, len(pairs)))
        total += float(masked_mse(policy, *pairs.batch(idx))) * len(idx)
        n += len(idx)
    policy.train(was)
    return total / max(n, 1)


def run_adapt(cfg: FrameAdaptConfig) -> dict:
    """scripts/adapt_to_imagination.py: imagine cfg.data's release windows, adapt the policy, write out_dir/policy.pt
    and out_dir/adapt.json (both errors before and after); returns what adapt.json holds."""
    cfg.validate()
    for name in ("policy", "world_model", "proprio"):
        path = getattr(cfg, name)
        if path and not Path(path).is_file():
            raise FileNotFoundError(f"{name}: {path!r} is not a file")
    if not Path(cfg.data).is_dir():
        raise FileNotFoundError(f"data: {cfg.data!r} is not a dataset directory")
    torch.set_num_threads(cfg.num_threads)
    torch.manual_seed(cfg.seed)
    t0 = time.time()
    policy = Policy.load(cfg.policy, map_location=cfg.device)
    policy.eval()
    imagine = ImaginationConfig(max_steps=10_000, success_threshold=2.0, device=cfg.device,
                                action_guidance=cfg.action_guidance)
    probe = open_imagination(cfg.world_model, cfg.data, cfg.proprio, num_envs=1, config=imagine, policy=policy)
    starts = release_starts(probe, list(cfg.leads), policy.n_action_steps)
    if not starts:
        raise ValueError(f"data: no episode of {cfg.data} releases {min(cfg.leads)} steps or more after its close")
    env = open_imagination(probe.wm, probe.episodes, probe.proprio, num_envs=min(64, len(starts)), config=imagine,
                           policy=policy)
    chunks = -(-cfg.imagined_steps // env.K)
    imagined, window = imagined_pairs(env, starts, chunks, cfg.seed)
    recorded = recorded_pairs(env)
    if cfg.target == "start":
        window_actions = window.target.copy()
        start_targets(policy, imagined, window, recorded)
        window.target, window.mask = imagined.target, imagined.mask  # the window now scores against the same chunks
        print(f"the start against its recorded actions in the window: "
              f"{float(((window.target - window_actions) ** 2).mean()):.5f}")

    def fit() -> dict:
        return {"imagined_mse": pair_mse(policy, imagined), "recorded_window_mse": pair_mse(policy, window),
                "recorded_mse": pair_mse(policy, recorded)}

    before = fit()
    print(f"{len(starts)} starts, {len(imagined)} imagined steps, {len(recorded)} recorded steps; before: {before}")
    logs = adapt(policy, imagined, recorded, cfg)
    after = fit()
    print(f"after {cfg.steps} steps: {after}")
    out = Path(cfg.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    policy.save(out / "policy.pt")
    result = {"policy_path": str(out / "policy.pt"), "config": asdict(cfg), "starts": len(starts),
              "pairs": len(imagined), "before": before, "after": after, "log": logs, "seconds": time.time() - t0}
    atomic_write_text(out / "adapt.json", json.dumps(result, indent=2))
    return result


def adapt_once(cfg: FrameAdaptConfig) -> str:
    """The adapted policy's path: the one an earlier run_adapt with the same config wrote in cfg.out_dir, else
    run_adapt(cfg)'s. So a resumed RL run adapts once, and the seeds of one recipe given one out_dir share one
    adaptation (its seed is its own, not the RL run's): the threads it ran with do not make another. A lock on the
    folder makes seeds started together wait for the first one's adaptation instead of making it twice."""
    from filelock import FileLock  # a torch dependency; imported here so the module imports without it

    out = Path(cfg.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    with FileLock(str(out / "adapt.lock")):
        done = out / "adapt.json"
        if done.is_file():
            earlier = json.loads(done.read_text())
            if (_same_adaptation(earlier.get("config", {}), asdict(cfg))
                    and Path(earlier["policy_path"]).is_file()):
                print(f"[adapt] reusing {earlier['policy_path']}")
                return str(earlier["policy_path"])
        return str(run_adapt(cfg)["policy_path"])


_WHERE_IT_RAN = ("num_threads", "device")  # an adaptation made on a GPU is reused on the CPU, and back
_ADDED_LATER = {"action_guidance": 0.0}  # fields adapt.json files written before them lack: their value then


def _same_adaptation(a: dict, b: dict) -> bool:
    """Two adapt configs that make the same adaptation: equal but for where they ran (threads, device)."""
    a, b = {**_ADDED_LATER, **a}, {**_ADDED_LATER, **b}
    return ({k: v for k, v in a.items() if k not in _WHERE_IT_RAN}
            == {k: v for k, v in b.items() if k not in _WHERE_IT_RAN})


__all__ = ["FrameAdaptConfig", "Pairs", "adapt", "adapt_once", "imagined_pairs", "own_targets", "pair_mse",
           "recorded_pairs", "release_starts", "run_adapt", "start_targets"]
