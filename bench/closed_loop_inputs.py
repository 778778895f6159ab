"""Which input makes a policy act otherwise in imagination than in reality: imagined frames or the predicted state.

    python bench/closed_loop_inputs.py          # the rl_gain protocol's world model, BC and gate episodes, from 24
                                                # steps before each recorded release (the carry recipe's starts)
    python bench/closed_loop_inputs.py --world-model wm_ft/world_model.pt --lead 16 --steps 32
    python bench/closed_loop_inputs.py --videos 2   # also 2 closed loops a task as videos, imagined above recorded

From `--lead` steps before each gate episode's recorded release (rounded down to the policy's decision steps, as
imagined RL's placement starts are), the policy acts for `--steps` steps in the world model. At every chunk its
observation mixes two sources: the image is the imagined frame or the recorded one at the same step, and the robot
state is the one imagination predicts or the recorded one (recorded observations stop at the recording's release
step: later ones show the gripper open). The world model and the proprio model run the same way
in all four mixes; only what the policy reads differs. Each mix prints in how many episodes the policy commanded the
release within the steps (the recording released `--lead` steps in, every time) and the median step it did:

    imagined / imagined   what imagined RL's episodes are (closed loop)
    imagined / recorded   imagined frames alone
    recorded / imagined   the predicted state alone
    recorded / recorded   the recording's own observations: the policy's own chunks, released as in reality

`BENCH closed_loop_inputs ... PASS|FAIL`: PASS when the closed loop releases in at least --threshold of the episodes
(0.80); the exit status is 1 otherwise, 2 when an input is missing. Figures: docs/results.md.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import torch

from bench.protocol import PROTOCOL_V2
from envs.frames import tile_views
from imagination.env import ImaginationConfig, ImaginationVectorEnv
from imagination.eval.grasp_gate import placement_starts
from imagination.imagine import open_imagination
from imagination.keyframes import Keyframe
from infra.errors import run_main
from policies.base import Policy
from robot_data.dataset.video import encode_preview
from world_models.grasp_point import first_close, release_after

SOURCES = ("imagined", "recorded")
GRIPPER = 6  # action column of the gripper command (< 0: open)


def mixed_run(env: ImaginationVectorEnv, policy: Policy, starts: list[Keyframe], chunks: int, image: str,
              state: str, seed: int = 0, last: list[int] | None = None,
              film: list[np.ndarray] | None = None) -> np.ndarray:
    """The policy's mean chunks [B, chunks, K, 7] acting from `starts` (one per env) in `env`, reading the imagined
    or the recorded (`image`, `state` in SOURCES) observation at each chunk: the recording's at the same step, and
    at step `last[b]` (default: the recording's last step) from then on. Why a last step: a recorded observation
    after the recording's release shows the gripper open, which tells the policy the release happened.
    `film`, when given, gets one picture per chunk, uint8 [B, 2H, V*W, 3]: the imagined views above the recording's
    at the same step (the recording goes on past `last`: it shows what reality did)."""
    if image not in SOURCES or state not in SOURCES:
        raise ValueError(f"image, state: expected each of {list(SOURCES)}, got {image!r}, {state!r}")
    if len(starts) != env.num_envs:
        raise ValueError(f"starts: expected one per env ({env.num_envs}), got {len(starts)}")
    eps = [env.episodes[kf.episode] for kf in starts]
    ends = last if last is not None else [len(ep.action) - 1 for ep in eps]
    obs, _ = env.reset(seed=seed, options={"keyframes": starts})
    out = []
    for j in range(chunks):
        t = [min(kf.t + j * env.K, end) for kf, end in zip(starts, ends)]
        seen = dict(obs)
        if image == "recorded":
            seen["image"] = np.stack([env.policy_views(ep.frames[s][None])[0] for ep, s in zip(eps, t)])
        if state == "recorded":
            seen["state"] = np.stack([ep.state[s] for ep, s in zip(eps, t)]).astype(np.float32)
        with torch.no_grad():
            act = policy.predict_action_chunk(seen).cpu().numpy()
        out.append(act)
        obs, *_ = env.step(act)
        if film is not None:
            real = [ep.frames[min(kf.t + (j + 1) * env.K, len(ep.frames) - 1)] for ep, kf in zip(eps, starts)]
            film.append(np.concatenate([env.render(), tile_views(np.stack(real))], axis=1))
    return np.stack(out, axis=1)


def write_films(film: list[np.ndarray], names: list[str], out_dir: Path, fps: float) -> list[str]:
    """One mp4 per env from `film` (mixed_run's pictures, [B, H', W', 3] per chunk), named by `names`."""
    out_dir.mkdir(parents=True, exist_ok=True)
    frames = np.stack(film, axis=1)  # [B, chunks, H', W', 3]
    paths = [str(out_dir / f"{name}.mp4") for name in names]
    for path, clip in zip(paths, frames):
        encode_preview(path, tile_views(clip[:, None], scale=2), fps)
    return paths


def first_release(chunks: np.ndarray) -> np.ndarray:
    """Per env, the first step of chunks [B, n, K, 7] that commands the gripper open; -1 where none does."""
    flat = chunks.reshape(chunks.shape[0], -1, chunks.shape[-1])[:, :, GRIPPER] < 0
    return np.where(flat.any(1), flat.argmax(1), -1)


def main(argv: list[str] | None = None) -> int:
    proto = PROTOCOL_V2
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--gate-data", default=proto.path("gate_rollouts/data"),
                   help="recorded episodes of --policy that close and release (init states no model trained on)")
    p.add_argument("--policy", default=proto.path("bc_file"), help="who acts (whose episodes --gate-data holds)")
    p.add_argument("--world-model", default=proto.path("world_model_file"))
    p.add_argument("--proprio", default=proto.path("own_proprio_file"), help="ProprioModel file (the recipe's)")
    p.add_argument("--lead", type=int, default=24, help="start this many steps before each recorded release")
    p.add_argument("--steps", type=int, default=48, help="imagined steps from each start (rounded up to chunks)")
    p.add_argument("--align", type=int, default=None,
                   help="round each start down to a multiple of this (default: the policy's n_action_steps)")
    p.add_argument("--seed", type=int, default=0, help="the world model's noise")
    p.add_argument("--threshold", type=float, default=0.8, help="closed-loop release fraction that passes")
    p.add_argument("--videos", type=int, default=0,
                   help="write the closed loop of this many episodes per task as videos: imagined views above the "
                        "recording's, one picture per chunk")
    p.add_argument("--out-dir", default="outputs/bench/closed_loop_inputs", help="where --videos go")
    args = p.parse_args(argv)
    for name, path in (("--world-model", args.world_model), ("--proprio", args.proprio), ("--policy", args.policy),
                       ("--gate-data", args.gate_data)):
        if not Path(path).exists():
            print(f"{name}: {path} not found; `python bench/rl_gain.py` builds the protocol's inputs")
            return 2
    if args.lead < 1 or args.steps < 1 or args.videos < 0:
        p.error(f"--lead, --steps, --videos: expected integers >= 1, >= 1, >= 0, got {args.lead}, {args.steps}, "
                f"{args.videos}")
    torch.set_num_threads(1)
    policy = Policy.load(args.policy)
    policy.eval()
    align = policy.n_action_steps if args.align is None else args.align
    from robot_data.dataset import EpisodeDataset

    dataset = EpisodeDataset(args.gate_data, verify=False)
    idx = [m.episode_index for m in dataset.meta]
    actions = [dataset.arrays(i)[1] for i in idx]  # [T, 7] each, read once: the starts and the releases need them
    t0 = placement_starts(actions, args.lead, align)
    keep = np.flatnonzero(t0 >= 0)
    if not len(keep):
        print(f"--gate-data: no episode of {args.gate_data} releases {args.lead} steps or more after its close")
        return 2
    idx = [idx[k] for k in keep]
    tasks = np.array([dataset.meta[k].task_id for k in keep])
    env = open_imagination(args.world_model, args.gate_data, args.proprio, num_envs=len(idx),
                           config=ImaginationConfig(max_steps=10_000, success_threshold=2.0), indices=idx,
                           policy=policy)
    starts = [Keyframe(b, int(t0[k])) for b, k in enumerate(keep)]
    # the recorded observations go no further than the step of the recording's release (the one before it shows)
    releases = [release_after(a, first_close(a)) for a in (actions[k] for k in keep)]
    chunks = -(-args.steps // env.K)
    print(f"{len(idx)} episodes of {args.policy} in {args.gate_data}, from {args.lead} steps before each release "
          f"(aligned to {align}), {chunks * env.K} imagined steps; world model {args.world_model}")
    rates = {}
    for image in SOURCES:
        for state in SOURCES:
            film: list[np.ndarray] | None = [] if args.videos and image == state == "imagined" else None
            rel = first_release(mixed_run(env, policy, starts, chunks, image, state, args.seed, releases, film))
            done = rel >= 0
            if film is not None:
                pick = [b for t in np.unique(tasks) for b in np.flatnonzero(tasks == t)[:args.videos]]
                names = [f"task{tasks[b]}_episode{idx[b]}_{'released' if done[b] else 'held'}" for b in pick]
                fps = env.metadata["render_fps"] / env.K  # one picture per chunk
                paths = write_films([f[pick] for f in film], names, Path(args.out_dir), fps)
                print(f"closed-loop videos (imagined above, recorded below): {len(paths)} in {args.out_dir}")
            rates[(image, state)] = float(done.mean())
            per_task = " ".join(f"{t}:{int(done[tasks == t].sum())}/{int((tasks == t).sum())}"
                                for t in np.unique(tasks))
            median = f"{np.median(rel[done]):.0f}" if done.any() else "-"
            print(f"image {image:8s} state {state:8s}: released in {int(done.sum())}/{len(idx)} (per task {per_task}), "
                  f"median step {median}")
    closed = rates[("imagined", "imagined")]
    ok = closed >= args.threshold
    print(f"BENCH closed_loop_inputs lead={args.lead} steps={chunks * env.K} episodes={len(idx)} "
          f"closed_loop={closed:.2f} image_only={rates[('imagined', 'recorded')]:.2f} "
          f"state_only={rates[('recorded', 'imagined')]:.2f} recorded={rates[('recorded', 'recorded')]:.2f} "
          f"threshold={args.threshold:.2f} {'PASS' if ok else 'FAIL'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(run_main(main))
