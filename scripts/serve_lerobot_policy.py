"""Serve a LeRobot policy (ACT, diffusion, ... any `PreTrainedPolicy` folder) in this project's wire format.

lerobot's pins clash with ours, so this runs with the lerobot venv's python (`make lerobot-venv`):

    PYTHONPATH=. .venv-lerobot/bin/python scripts/serve_lerobot_policy.py policy=outputs/act_libero port=8765
    python scripts/eval_policy.py checkpoint=ws://127.0.0.1:8765 'tasks=[0,1]' episodes_per_task=10
    python scripts/eval_policy.py checkpoint=ws://127.0.0.1:8765 env=imagination ...   # in a world model

Our views go to the policy's camera features in order (`cameras`), resized to their shape; the policy's own
normalizing processors run around it; each request is answered with its next `n_action_steps` actions from
a fresh `reset()` (policies/lerobot_server.py). Loopback only: this server checks no token.
"""
from __future__ import annotations

from infra.cli import run_script
from policies.lerobot_server import LeRobotServeConfig, serve_lerobot


def main(cfg: LeRobotServeConfig) -> int:
    return serve_lerobot(cfg)


if __name__ == "__main__":
    run_script(main, LeRobotServeConfig, __doc__, group="serve", extra=(OSError,))
