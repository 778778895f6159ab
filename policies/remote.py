"""A policy served elsewhere, behind the project's policy contract: evaluate or rank it like a checkpoint.

    python scripts/serve_policy.py checkpoint=outputs/bc/quick/policy.pt port=8765          # one machine
    python scripts/eval_policy.py checkpoint=ws://127.0.0.1:8765 tasks=[0,1] episodes_per_task=10   # another

`checkpoint=ws://...` (or wss://) anywhere a policy checkpoint is evaluated makes a `RemotePolicy`: every
`predict_action_chunk` is one request to the server (`policies.serving.PolicyServer`, or any server speaking
its wire format, `envs.robot.wire`), split into batches the server accepts. The chunk length, views and image
size come from the server's metadata, so the evaluation renders what the served policy was trained on.
A token for a server off this machine is read from POLICY_SERVER_TOKEN, never from the command line.

`protocol=openpi` talks to an openpi policy server (its `serve_policy.py`, e.g. pi0 on LIBERO) instead: one
observation per request in openpi's LIBERO keys (`observation/image`, `observation/wrist_image`,
`observation/state`, `prompt`), the first `chunk_len` rows of its "actions" reply executed. openpi's metadata
says nothing of chunks or image sizes, so they come from the evaluation (`action_steps`, `image_size`).

What it cannot do: imagined RL. Its weights live in the server's process, so there is nothing here for
GRPO/PPO to update, and `sample`/`evaluate` say so. Policies that can be RL-trained are this project's own
(`policies.vla.VLAPolicy`); a served policy can be evaluated in real LIBERO and in imagination, and ranked.
"""
from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from envs.robot.client import PolicyClient, ServerError, ServerUnavailable
from envs.robot.wire import pack, unpack
from policies.base import Policy, PolicyConfig, batch_obs
from policies.serving import TOKEN_ENV  # the variable the server reads its token from

SCHEMES = ("ws://", "wss://")
PROTOCOLS = ("project", "openpi")


def is_remote(checkpoint: str) -> bool:
    """Whether a checkpoint argument names a policy server rather than a file."""
    return checkpoint.startswith(SCHEMES)


@dataclass
class RemotePolicyConfig(PolicyConfig):
    url: str = ""  # ws://host:port of the policy server
    # "project": policies.serving's protocol (batched, metadata with chunk, views, size); "openpi": an openpi
    # server, one LIBERO-keyed observation per request
    protocol: str = "project"
    timeout_s: float = 30.0  # per request: a CPU server answering a batch of 8 can take seconds
    # from the server's metadata on connect ("project"); given by the caller for "openpi"
    views: list[str] = field(default_factory=list)
    image_size: int = 0


class RemotePolicy(Policy):
    """A client of a policy server that acts as a `Policy` (inference only)."""

    config_class = RemotePolicyConfig
    config: RemotePolicyConfig

    def __init__(self, config: RemotePolicyConfig):
        if not is_remote(config.url):
            raise ValueError(f"url: expected ws://host:port or wss://host:port, got {config.url!r}")
        if config.protocol not in PROTOCOLS:
            raise ValueError(f"protocol: expected one of {list(PROTOCOLS)}, got {config.protocol!r}")
        self._client: PolicyClient | _OpenpiClient
        if config.protocol == "openpi":
            config.views = list(config.views) or ["agentview", "wrist"]
            super().__init__(config)
            self._client, self._max_batch = _OpenpiClient(config.url, config.timeout_s), 1
            return
        client = PolicyClient(config.url, token=os.environ.get(TOKEN_ENV, ""))
        meta = client.metadata
        config.chunk_len = int(meta.get("chunk_len") or config.chunk_len)
        config.views = list(meta.get("views") or config.views)
        config.image_size = int(meta.get("image_size") or config.image_size)
        super().__init__(config)
        self._client, self._max_batch = client, max(1, int(meta.get("max_batch") or 1))

    @torch.no_grad()
    def predict_action_chunk(self, obs: Mapping[str, Any]) -> torch.Tensor:
        """obs batched as in `policies.base` -> actions [B, K, 7], from the server."""
        b = batch_obs(obs)
        image, state, text = b["image"].numpy(), b["state"].numpy(), list(b["instruction"])
        chunks = []
        for i in range(0, len(image), self._max_batch):
            j = slice(i, i + self._max_batch)
            if isinstance(self._client, _OpenpiClient):
                chunks.append(self._client.infer(image[i], state[i], text[i])[None, :self.chunk_len])
                continue
            reply = self._client.infer({"image": image[j], "state": state[j], "instruction": text[j]},
                                       timeout=self.config.timeout_s)
            chunks.append(reply.actions.reshape(-1, *reply.actions.shape[-2:]))
        actions = torch.from_numpy(np.concatenate(chunks))
        if actions.shape != (len(image), self.chunk_len, 7):
            raise ValueError(f"{self.config.url} answered actions {tuple(actions.shape)}, expected "
                             f"[{len(image)}, {self.chunk_len}, 7] (chunk_len from its metadata)")
        return actions

    def _no_training(self) -> RuntimeError:
        return RuntimeError(f"{self.config.url}: a served policy cannot be trained with imagined RL here (its weights "
                            "are in the server's process); evaluate it with deterministic=true, or RL-train one of "
                            "this project's policies")

    def sample(self, obs, generator=None):
        raise self._no_training()

    def evaluate(self, obs, actions, per_dim=False):
        raise self._no_training()

    def save(self, path: str | os.PathLike) -> None:
        raise RuntimeError(f"{self.config.url}: a served policy has no weights here to save")

    def close(self) -> None:
        self._client.close()


class _OpenpiClient:
    """openpi's websocket protocol: a metadata map on connect, then one packed observation per request and one
    packed {"actions": [H, A], ...} per reply (a text frame is the server's error)."""

    def __init__(self, url: str, timeout: float):
        from websockets.exceptions import WebSocketException
        from websockets.sync.client import connect

        headers = {"Authorization": f"Api-Key {os.environ[TOKEN_ENV]}"} if os.environ.get(TOKEN_ENV) else None
        try:
            # entered as a context manager, websockets' supported form (as envs/robot/client.py); close() exits it
            self._ws = connect(url, additional_headers=headers, open_timeout=timeout, compression=None, max_size=None,
                               proxy=None, close_timeout=1.0).__enter__()
            self.metadata = unpack(self._ws.recv(timeout=timeout))
        except (OSError, TimeoutError, WebSocketException) as e:
            raise ServerUnavailable(f"cannot connect to the openpi server at {url}: {e}") from None
        self.url, self.timeout = url, timeout

    def infer(self, image: np.ndarray, state: np.ndarray, instruction: str) -> np.ndarray:
        """One observation (image uint8 [V, H, W, 3], state [S]) -> its action chunk float32 [H, 7]."""
        obs = {"observation/image": image[0], "observation/state": state, "prompt": instruction}
        if len(image) > 1:
            obs["observation/wrist_image"] = image[1]
        self._ws.send(pack(obs))
        reply = self._ws.recv(timeout=self.timeout)
        if isinstance(reply, str):
            raise ServerError("openpi", reply[-500:])
        actions = unpack(reply).get("actions")
        if not isinstance(actions, np.ndarray) or actions.ndim != 2 or actions.shape[1] < 7:
            raise ServerError("bad_reply", f"actions: expected an array [H, >=7], got {actions!r:.100}")
        return actions[:, :7].astype(np.float32)

    def close(self) -> None:
        self._ws.close()


__all__ = ["PROTOCOLS", "RemotePolicy", "RemotePolicyConfig", "TOKEN_ENV", "is_remote"]
