"""A policy served elsewhere, behind the project's policy contract: evaluate or rank it like a checkpoint.

    python scripts/serve_policy.py checkpoint=outputs/bc/quick/policy.pt port=8765          # one machine
    python scripts/eval_policy.py checkpoint=ws://127.0.0.1:8765 tasks=[0,1] episodes_per_task=10   # another

`checkpoint=ws://...` (or wss://) anywhere a policy checkpoint is evaluated makes a `RemotePolicy`: every
`predict_action_chunk` is one request to the server (`policies.serving.PolicyServer`, or any server speaking
its wire format, `envs.robot.wire`), split into batches the server accepts. The chunk length, views and image
size come from the server's metadata, so the evaluation renders what the served policy was trained on.
A token for a server off this machine is read from POLICY_SERVER_TOKEN, never from the command line.

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

from envs.robot.client import PolicyClient
from policies.base import Policy, PolicyConfig, batch_obs
from policies.serving import TOKEN_ENV  # the variable the server reads its token from

SCHEMES = ("ws://", "wss://")


def is_remote(checkpoint: str) -> bool:
    """Whether a checkpoint argument names a policy server rather than a file."""
    return checkpoint.startswith(SCHEMES)


@dataclass
class RemotePolicyConfig(PolicyConfig):
    url: str = ""  # ws://host:port of the policy server
    timeout_s: float = 30.0  # per request: a CPU server answering a batch of 8 can take seconds
    # filled from the server's metadata on connect
    views: list[str] = field(default_factory=list)
    image_size: int = 0


class RemotePolicy(Policy):
    """A client of a policy server that acts as a `Policy` (inference only)."""

    config_class = RemotePolicyConfig
    config: RemotePolicyConfig

    def __init__(self, config: RemotePolicyConfig):
        if not is_remote(config.url):
            raise ValueError(f"url: expected ws://host:port or wss://host:port, got {config.url!r}")
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


__all__ = ["RemotePolicy", "RemotePolicyConfig", "TOKEN_ENV", "is_remote"]
