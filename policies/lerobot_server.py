"""Serve a LeRobot policy (ACT, diffusion, ... any `PreTrainedPolicy` folder) in this project's wire format.

Run by scripts/serve_lerobot_policy.py with the lerobot venv's python (lerobot's pins clash with ours): this
module imports nothing of ours but the wire format (`envs/robot/wire.py`: numpy and msgpack), and lerobot only
inside `load`. Each request is one observation batch in our convention (image uint8 [B, V, H, W, 3], state
[B, S], instruction). Our views map to the policy's camera features in order (`cameras`, default: the policy's
image features in their config order), frames are scaled to [0, 1], resized to the feature's shape and
channel-first; state is `observation.state` and the instruction `task`. The policy's own pre/post processors
(normalization) run around it. The reply is its next `n_action_steps` actions from a fresh `reset()`, taken
with the public `select_action`, so that chunking (ACT) and observation-queue (diffusion) policies are served
alike. A policy with n_obs_steps > 1 sees the current observation repeated, as at an episode's first step.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from websockets.sync.server import ServerConnection, serve

from envs.robot.wire import PROTOCOL_VERSION, RequestError, WireLimits, error_reply, pack, parse_request, unpack

LOOPBACK = ("127.0.0.1", "::1", "localhost")


@dataclass
class LeRobotServeConfig:
    policy: str = ""  # a LeRobot save_pretrained folder (config.json, weights, policy_pre/postprocessor.json)
    host: str = "127.0.0.1"  # loopback only: this server checks no token (tunnel to reach it from elsewhere)
    port: int = 8765  # 0: any free port (the URL is printed as a JSON line on stdout)
    # the policy's camera features for our views in order (agentview, wrist); [] = its image features
    cameras: list[str] = field(default_factory=list)


def load(folder: str) -> tuple[Any, Any, Any]:
    """(policy, preprocessor, postprocessor) of a `save_pretrained` folder with its processors."""
    from lerobot.configs.policies import PreTrainedConfig
    from lerobot.policies.factory import get_policy_class, make_pre_post_processors

    cfg = PreTrainedConfig.from_pretrained(folder)
    cfg.device = "cpu" if not torch.cuda.is_available() else cfg.device
    policy = get_policy_class(cfg.type).from_pretrained(folder, config=cfg).eval()
    pre, post = make_pre_post_processors(cfg, pretrained_path=folder)
    return policy, pre, post


class LeRobotServer:
    """Answers our requests with a LeRobot policy's actions."""

    def __init__(self, policy: Any, pre: Any, post: Any, cameras: list[str], limits: WireLimits):
        self.policy, self.pre, self.post, self.limits = policy, pre, post, limits
        features = policy.config.image_features
        self.cameras = cameras or list(features)
        missing = [c for c in self.cameras if c not in features]
        if missing:
            raise ValueError(f"cameras: {missing} are not image features of the policy ({list(features)})")
        self.shapes = {c: tuple(features[c].shape) for c in self.cameras}  # (C, H, W)
        self.chunk_len = int(policy.config.n_action_steps)
        self.metadata = {"type": "metadata", "protocol": PROTOCOL_VERSION, "policy": f"lerobot:{policy.config.type}",
                         "chunk_len": self.chunk_len, "views": ["agentview", "wrist"][:len(self.cameras)],
                         "image_size": int(self.shapes[self.cameras[0]][-1]), "action_dim": 7,
                         "max_request_bytes": limits.max_request_bytes, "max_batch": limits.max_batch}

    def batch(self, obs: dict[str, Any]) -> dict[str, Any]:
        image = torch.from_numpy(obs["image"]).float().div(255.0)  # [B, V, H, W, 3]
        if image.shape[1] != len(self.cameras):
            raise RequestError("image", f"expected {len(self.cameras)} views ({self.cameras}), got {image.shape[1]}")
        out: dict[str, Any] = {"observation.state": torch.from_numpy(obs["state"]), "task": obs["instruction"]}
        for v, cam in enumerate(self.cameras):
            x = image[:, v].permute(0, 3, 1, 2)  # [B, 3, H, W]
            out[cam] = torch.nn.functional.interpolate(x, size=self.shapes[cam][1:], mode="area")
        return out

    @torch.no_grad()
    def act(self, obs: dict[str, Any]) -> np.ndarray:
        """obs (parsed, batched) -> actions float32 [B, K, 7]."""
        batch = self.pre(self.batch(obs))
        self.policy.reset()
        steps = [self.post(self.policy.select_action(batch)) for _ in range(self.chunk_len)]
        return torch.stack(steps, 1).clamp(-1, 1).float().cpu().numpy()

    def handle(self, ws: ServerConnection) -> None:
        ws.send(pack(self.metadata))
        for message in ws:
            rid = None
            try:
                obs, batched, rid = parse_request(unpack(message, self.limits), self.limits)
                actions = self.act(obs)
                ws.send(pack({"id": rid, "actions": actions if batched else actions[0], "timing_ms": {}}))
            except RequestError as e:
                ws.send(error_reply(rid, e.code, str(e), e.field))


def serve_lerobot(cfg: LeRobotServeConfig) -> int:
    """Load cfg.policy and serve it until interrupted; prints {"url", "policy", "chunk_len", "cameras"} first."""
    if cfg.host not in LOOPBACK:
        raise ValueError(f"host: this server checks no token, so it binds loopback only, got {cfg.host!r}; reach it "
                         "from another machine through a tunnel (ssh -N -L 8765:127.0.0.1:8765 host), or serve "
                         "this project's policies with scripts/serve_policy.py, which checks one")
    if not cfg.policy:
        raise ValueError("policy: expected a LeRobot save_pretrained folder, e.g. policy=outputs/act_libero")
    policy, pre, post = load(cfg.policy)
    server = LeRobotServer(policy, pre, post, cfg.cameras, WireLimits())
    with serve(server.handle, cfg.host, cfg.port, compression=None, max_size=WireLimits().max_request_bytes) as ws:
        port = ws.socket.getsockname()[1]
        print(json.dumps({"url": f"ws://{cfg.host}:{port}", "policy": server.metadata["policy"],
                          "chunk_len": server.chunk_len, "cameras": server.cameras}), flush=True)
        ws.serve_forever()
    return 0


__all__ = ["LeRobotServeConfig", "LeRobotServer", "load", "serve_lerobot"]
