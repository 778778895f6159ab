"""Run a served policy on a robot arm: the deployment control loop, with client-side safety limits.

    python scripts/run_robot.py robot=sim                                    # random policy, served here
    python scripts/run_robot.py robot=sim checkpoint=outputs/bc/quick/policy.pt sim.task_id=3 episodes=2
    python scripts/run_robot.py robot=sim server=ws://127.0.0.1:8765         # a running serve_policy.py
    python scripts/run_robot.py robot=lerobot lerobot_factory=my_arm:make_arm server=ws://gpu-host:8765 \\
        control.max_steps=400 'safety.workspace_min=[0.15,-0.25,0.02]' 'safety.workspace_max=[0.45,0.25,0.35]'

robot=sim drives the real LIBERO simulation (`envs.robot.sim_arm.SimArm`) as a stand-in for an arm;
it renders the views and image size the served policy was trained with. robot=lerobot calls
`lerobot_factory` ("module:function", no arguments) to build a `LeRobotArm` (envs/robot/lerobot_arm.py;
docs/deploy.md shows one). With server="" a server is started in this process on 127.0.0.1 from
`checkpoint`; otherwise the client connects to `server` with `token` (or POLICY_SERVER_TOKEN).

Safety (`safety.*`: workspace box, per-step translation/rotation caps, gripper range) is enforced
here, on the robot side, whatever the server sends. The watchdog stops the arm when no reply comes
within control.server_deadline_s or the connection drops. Ctrl-C is an emergency stop (twice: quit).

Writes out_dir/summary.json (per-episode steps, stop reason, success, latency p50/p99, clamp counts)
and out_dir/episode_XXX.mp4 (views side by side).
"""
from __future__ import annotations

import importlib
import json
import logging
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a source checkout

import numpy as np

from envs.cli import parse_config, save_config
from envs.robot.base import RobotArm
from envs.robot.client import PolicyClient
from envs.robot.control import ControlConfig, EpisodeResult, run_episode
from envs.robot.safety import EmergencyStop, SafetyLimits, check_limits
from envs.robot.sim_arm import SimArmConfig

ROBOTS = ("sim", "lerobot")


@dataclass
class RunRobotConfig:
    """Which arm, which policy server, how many episodes, with which limits."""

    robot: str = "sim"  # sim (real LIBERO simulation) or lerobot
    server: str = ""  # ws://host:port of a running serve_policy.py; "" = serve `checkpoint` here on loopback
    checkpoint: str = "random"  # for server="": a Policy.save file, or random
    token: str = ""  # "" = the POLICY_SERVER_TOKEN environment variable
    episodes: int = 1
    sim: SimArmConfig = field(default_factory=SimArmConfig)  # episode e starts from sim.init_state_id + e
    lerobot_factory: str = ""  # robot=lerobot: "module:function" returning a LeRobotArm
    control: ControlConfig = field(default_factory=ControlConfig)
    safety: SafetyLimits = field(default_factory=SafetyLimits)
    video: bool = True
    out_dir: str = "outputs/robot/sim"


def make_arm(cfg: RunRobotConfig, metadata: dict[str, Any]) -> RobotArm:
    """The arm named by cfg.robot; a simulated arm renders what the served policy expects."""
    if cfg.robot == "sim":
        from envs.robot.sim_arm import SimArm

        sim = cfg.sim
        if metadata.get("views"):
            sim.views = list(metadata["views"])
        if metadata.get("image_size"):
            sim.image_size = int(metadata["image_size"])
        return SimArm(sim)
    if cfg.robot == "lerobot":
        module, _, name = cfg.lerobot_factory.partition(":")
        if not module or not name:
            raise ValueError(f"lerobot_factory: expected 'module:function', got {cfg.lerobot_factory!r}")
        try:
            factory = getattr(importlib.import_module(module), name)
        except (ImportError, AttributeError) as e:
            raise ImportError(f"lerobot_factory: cannot load {cfg.lerobot_factory!r} ({e})") from e
        arm = factory()
        if not isinstance(arm, RobotArm):
            raise TypeError(f"lerobot_factory: {cfg.lerobot_factory} returned a {type(arm).__name__}, not a RobotArm")
        return arm
    raise ValueError(f"robot: expected one of {list(ROBOTS)}, got {cfg.robot!r}")


def write_video(path: Path, result: EpisodeResult, fps: float) -> str:
    """Frames [T, V, H, W, 3] -> one mp4 with the views side by side, upscaled 2x (64 px is small)."""
    from envs.dataset import encode_video

    tiled = np.concatenate(list(np.stack(result.frames).transpose(1, 0, 2, 3, 4)), axis=2)
    encode_video(path, tiled.repeat(2, axis=1).repeat(2, axis=2), fps=fps, codec="h264", crf=20)
    return str(path)


def main(cfg: RunRobotConfig, arm: RobotArm | None = None) -> dict[str, Any]:
    """Run cfg.episodes episodes; `arm` replaces the one cfg.robot would build (tests reuse one simulator)."""
    check_limits(cfg.safety)
    if cfg.robot not in ROBOTS:
        raise ValueError(f"robot: expected one of {list(ROBOTS)}, got {cfg.robot!r}")
    if cfg.robot != "sim" and cfg.control.max_steps < 1:
        raise ValueError("control.max_steps: a real arm needs a bound on the episode length (e.g. 400)")
    if cfg.episodes < 1:
        raise ValueError(f"episodes: expected >= 1, got {cfg.episodes}")
    out = Path(cfg.out_dir)
    save_config(cfg, out / "config.yaml")
    server = None
    if not cfg.server:
        from policies.serving import PolicyServer, ServeConfig, load_policy

        serve_cfg = ServeConfig(checkpoint=cfg.checkpoint, port=0)
        server = PolicyServer(load_policy(serve_cfg), serve_cfg).start()
    url = cfg.server or server.url
    own_arm = arm is None
    client = estop = None
    try:
        client = PolicyClient(url, token=cfg.token or os.environ.get("POLICY_SERVER_TOKEN", ""))
        arm = arm or make_arm(cfg, client.metadata)
        estop, episodes = EmergencyStop(), []
        with estop.sigint():
            for e in range(cfg.episodes):
                options = {"init_state_id": cfg.sim.init_state_id + e} if cfg.robot == "sim" else {}
                arm.start_episode(**options)
                result = run_episode(arm, client, cfg.control, cfg.safety, estop)
                row = {"episode": e, **options, **result.summary()}
                if cfg.video and result.frames:
                    row["video"] = write_video(out / f"episode_{e:03d}.mp4", result, arm.control_hz)
                episodes.append(row)
                p50 = row["round_trip_ms"]["p50"] if result.requests else 0
                print(f"episode {e}: {result.steps} steps, {result.stop_reason} ({result.detail}), "
                      f"success={result.success}, round trip p50 {p50:.1f} ms, "
                      f"clamps {result.clamps}", flush=True)
                if estop.is_set():
                    break
    finally:
        if client is not None:
            client.close()
        if server is not None:
            server.stop()
        if own_arm and arm is not None:
            arm.close()
    summary = {"robot": cfg.robot, "server": url, "policy": client.metadata, "episodes": episodes,
               "success_rate": float(np.mean([r["success"] for r in episodes]))}
    (out / "summary.json").write_text(json.dumps(summary, indent=2))
    print(f"summary: {out / 'summary.json'}")
    return summary


if __name__ == "__main__":
    config = parse_config(RunRobotConfig, __doc__, group="robot")
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    try:
        main(config)
    except (ValueError, TypeError, FileNotFoundError, ImportError, ConnectionError) as e:
        sys.exit(f"run_robot: {e}")
