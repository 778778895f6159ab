"""Client side of the policy server: send an observation, get an action chunk, with a deadline.

    with PolicyClient("ws://127.0.0.1:8765") as client:
        print(client.metadata)                  # chunk_len, views, image_size of the served policy
        reply = client.infer(obs, timeout=0.5)  # obs: image uint8 [V, H, W, 3], state float32 [8], instruction str
        reply.actions                           # float32 [K, 7]

Every failure is one of three exceptions, so a control loop can tell them apart and stop the arm:
`ServerError` (the server answered with an error), `ServerUnavailable` (no connection, or it was
lost) and `TimeoutError` (no reply before the deadline). A late reply to an earlier request is
recognized by its id and dropped, never executed.
"""
from __future__ import annotations

import itertools
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
from websockets.exceptions import ConnectionClosed, InvalidStatus, WebSocketException
from websockets.sync.client import ClientConnection, connect

from envs.robot.wire import WireLimits, pack, unpack


class ServerError(RuntimeError):
    """The server answered with an error reply (or refused an oversized frame: code 'too_large')."""

    def __init__(self, code: str, message: str, field: str = ""):
        super().__init__(f"policy server error [{code}]" + (f" {field}:" if field else "") + f" {message}")
        self.code, self.field, self.message = code, field, message


class ServerUnavailable(ConnectionError):
    """No connection to the policy server, or the connection was lost."""


@dataclass
class Reply:
    actions: np.ndarray  # float32 [K, 7] (or [B, K, 7] for a batched request)
    round_trip_ms: float  # as measured by the client: encode + network + server + decode
    server_ms: dict  # the server's own timing: {"infer": ..., "total": ...}


def _as_request(obs: Mapping[str, Any]) -> dict[str, Any]:
    """The convention's dtypes, so that a float64 state from a driver is not refused by the server."""
    missing = [k for k in ("image", "state", "instruction") if k not in obs]
    if missing:
        raise ValueError(f"obs: missing key(s) {missing}; expected image, state, instruction")
    image = np.asarray(obs["image"])
    if image.dtype != np.uint8:
        raise ValueError(f"obs['image']: expected uint8 pixels, got {image.dtype}")
    text = obs["instruction"]
    return {"image": image, "state": np.asarray(obs["state"], dtype=np.float32),
            "instruction": text if isinstance(text, str) else [str(t) for t in text]}


class PolicyClient:
    """A synchronous websocket client of `policies.serving.PolicyServer`."""

    def __init__(self, url: str, token: str = "", open_timeout: float = 10.0, max_reply_bytes: int = 16 * 2**20):
        headers = {"Authorization": f"Bearer {token}"} if token else None
        try:
            # proxy=None: a loopback connection must never be routed through an HTTP proxy from the environment.
            # entered as a context manager (websockets' supported form); close() exits it.
            # close_timeout: a stalled server must not block close().
            self._ws: ClientConnection = connect(url, additional_headers=headers, open_timeout=open_timeout,
                                                 max_size=max_reply_bytes, compression=None, proxy=None,
                                                 close_timeout=1.0).__enter__()
        except InvalidStatus as e:
            code = e.response.status_code
            raise ServerUnavailable(f"{url} refused the connection: HTTP {code}"
                                    + (" (missing or wrong token)" if code == 401 else "")) from None
        except (OSError, TimeoutError, WebSocketException) as e:
            raise ServerUnavailable(f"cannot connect to the policy server at {url}: {e}") from None
        self.url = url
        self._ids = itertools.count(1)
        self._limits = WireLimits(max_request_bytes=max_reply_bytes)
        self.metadata: dict[str, Any] = self._recv(open_timeout)
        if self.metadata.get("type") != "metadata":
            raise ServerUnavailable(f"{url} did not start with a metadata message: {self.metadata!r:.200}")

    def _closed(self, e: ConnectionClosed) -> Exception:
        if e.rcvd is not None and e.rcvd.code == 1009:  # the server refused a frame above its size limit
            return ServerError("too_large", e.rcvd.reason or "message too big")
        return ServerUnavailable(f"connection to {self.url} lost: {e}")

    def _send(self, data: bytes | str) -> None:
        try:
            self._ws.send(data)
        except ConnectionClosed as e:
            raise self._closed(e) from None

    def _recv(self, timeout: float | None) -> Any:
        try:
            data = self._ws.recv(timeout=timeout)
        except ConnectionClosed as e:
            raise self._closed(e) from None
        return unpack(data, self._limits)

    def send_raw(self, data: bytes | str, timeout: float | None = 10.0) -> dict[str, Any]:
        """Send any frame (for tests and tools) and return the decoded reply; ServerError on an error reply."""
        self._send(data)
        reply = self._recv(timeout)
        if isinstance(reply, dict) and "error" in reply:
            err = reply["error"]
            raise ServerError(err.get("code", "?"), err.get("message", ""), err.get("field", ""))
        return reply

    def infer(self, obs: Mapping[str, Any], timeout: float | None = 1.0) -> Reply:
        """Action chunk for one observation (or a batch); waits at most `timeout` seconds in total."""
        rid = next(self._ids)
        request = _as_request(obs)
        request["id"] = rid
        t0 = time.perf_counter()
        deadline = None if timeout is None else t0 + timeout
        self._send(pack(request))
        while True:
            left = None if deadline is None else deadline - time.perf_counter()
            try:
                if left is not None and left <= 0:
                    raise TimeoutError
                reply = self._recv(left)
            except TimeoutError:
                raise TimeoutError(f"no reply from {self.url} within {timeout:g} s") from None
            if isinstance(reply, dict) and reply.get("id") not in (None, rid) and reply["id"] < rid:
                continue  # a late answer to a request that already timed out: never execute stale actions
            break
        if not isinstance(reply, dict):
            raise ServerError("bad_reply", f"expected a map, got {type(reply).__name__}")
        if "error" in reply:
            err = reply["error"]
            raise ServerError(err.get("code", "?"), err.get("message", ""), err.get("field", ""))
        actions = reply.get("actions")
        if not isinstance(actions, np.ndarray) or actions.shape[-1] != 7 or not np.all(np.isfinite(actions)):
            raise ServerError("bad_reply", f"actions: expected a finite float array [K, 7], got {actions!r:.100}")
        return Reply(actions.astype(np.float32), (time.perf_counter() - t0) * 1e3, dict(reply.get("timing_ms", {})))

    def close(self) -> None:
        self._ws.close()

    def __enter__(self) -> PolicyClient:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


__all__ = ["PolicyClient", "Reply", "ServerError", "ServerUnavailable"]
