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

import logging

from infra.cli import run_script
from policies.deploy import RunRobotConfig, run_robot


def main(cfg: RunRobotConfig) -> dict:
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    return run_robot(cfg)


if __name__ == "__main__":
    # besides input errors, one line for a lerobot_factory that cannot be imported or called, or no server
    run_script(main, RunRobotConfig, __doc__, group="robot", extra=(TypeError, ImportError, ConnectionError))
