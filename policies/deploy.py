"""Run a served policy on a robot arm (scripts/run_robot.py): the deployment control loop with its
client-side safety limits, against a policy server given by URL or started here on loopback.

Safety (`safety.*`) is enforced on the robot side, whatever the server sends; the watchdog stops the
arm when no reply comes in time or the connection drops; Ctrl-C is an emergency stop. Writes
out_dir/summary.json and out_dir/episode_XXX.mp4 (views side by side).
"""
from __future__ import annotations

import importlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from envs.frames import tile_views
from envs.robot.base import RobotArm
from envs.robot.client import PolicyClient
from envs.robot.control import ControlConfig, EpisodeResult, run_episode
from envs.robot.safety import EmergencyStop, SafetyLimits, check_limits
from envs.robot.sim_arm import SimArmConfig
from infra.cli import save_config

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
    from robot_data.dataset import encode_preview

    encode_preview(path, tile_views(np.stack(result.frames), scale=2), fps=fps)
    return str(path)


def run_robot(cfg: RunRobotConfig, arm: RobotArm | None = None) -> dict[str, Any]:
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
    url = server.url if server is not None else cfg.server  # server is None exactly when cfg.server is set
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


__all__ = ["ROBOTS", "RunRobotConfig", "make_arm", "run_robot", "write_video"]
