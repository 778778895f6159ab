"""Serve a policy over a websocket: observation in (msgpack + numpy), action chunk out.

    server = PolicyServer(Policy.load("policy.pt"), ServeConfig(port=0)).start()   # background thread
    print(server.url)        # ws://127.0.0.1:<port>
    ...
    server.stop()

Wire format and validation: `envs.robot.wire` (openpi's msgpack-numpy layout, so openpi-client's
WebsocketClientPolicy is a client too: it sends our observation dict and reads "actions").
Safety of the server itself:
  * binds 127.0.0.1 by default; any other address needs a token, checked at the handshake
    (`Authorization: Bearer <token>`, or openpi's `Api-Key <token>`; constant-time comparison) before a
    single message is read;
  * wrong or missing tokens are counted per address: after `auth_failures` within `auth_window_s`
    that address is refused (HTTP 429) before its token is compared; tokens need MIN_TOKEN_LEN
    characters and MIN_TOKEN_DISTINCT distinct ones (policies.server_limits);
  * at most `max_connections` are open at once (the next handshake gets HTTP 503), and a connection
    that sends no request for `idle_timeout_s` is closed (code 1000, reason "idle");
  * frames above `max_request_bytes` are refused by the transport (close code 1009) before they are
    buffered; everything else that is malformed gets an error reply and the connection stays open;
  * a policy exception is answered with an "internal" error and logged; it never stops the server;
  * every request's latency (decode, inference, total) is logged, optionally as JSON lines.
Inference runs in one worker thread, so requests of several clients are served one at a time while
the event loop keeps answering handshakes, pings and malformed requests.
"""
from __future__ import annotations

import asyncio
import hmac
import ipaddress
import json
import logging
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from http import HTTPStatus
from pathlib import Path
from typing import Any

import numpy as np
import torch
from websockets.asyncio.server import ServerConnection, serve
from websockets.exceptions import ConnectionClosed
from websockets.protocol import State

from envs.robot.wire import PROTOCOL_VERSION, RequestError, WireLimits, error_reply, pack, parse_request, unpack
from policies.base import ObservationError, Policy, RandomPolicy, RandomPolicyConfig
from policies.server_limits import (
    MIN_TOKEN_DISTINCT,
    MIN_TOKEN_LEN,
    FailureWindow,
    check_limits,
    check_token_strength,
    parse_host,
)

log = logging.getLogger("policy_server")
TOKEN_ENV = "POLICY_SERVER_TOKEN"


@dataclass
class ServeConfig:
    """Where and how a policy is served."""

    checkpoint: str = ""  # a Policy.save file, or "random" (uniform random actions, for tests and demos)
    # modules of your own package that define the checkpoint's policy class, imported before loading it: the
    # allow-list for a class outside this project's packages (policies/base.py, docs/policies.md)
    policy_modules: list[str] = field(default_factory=list)
    host: str = "127.0.0.1"  # IPv4, IPv6 (::1, ::) or a host name; any address other than loopback requires a token
    port: int = 8765  # 0 = a free port (printed at start)
    token: str = ""  # shared secret; empty = the POLICY_SERVER_TOKEN environment variable (keeps it out of `ps`)
    max_request_bytes: int = 4 * 1024 * 1024
    max_batch: int = 8
    max_image_side: int = 1024
    deterministic: bool = True  # the policy's mean chunk; False samples from its action distribution
    chunk_len: int = 8  # for checkpoint=random only
    seed: int = 0
    num_threads: int = 0  # torch threads for inference; 0 = torch's default
    latency_log: str = ""  # append one JSON line per request to this file ("" = log lines only)
    warmup: bool = True  # one inference at start, so the first real request is not slowed by lazy loading
    max_connections: int = 16  # connections open at once; the next handshake is refused with HTTP 503
    idle_timeout_s: float = 120.0  # close a connection that sends no request for this long; 0 = never
    # wrong or missing tokens one address may send within auth_window_s; its further handshakes are then
    # refused with HTTP 429 (right token or not) until the oldest failure ages out of the window
    auth_failures: int = 5
    auth_window_s: float = 60.0


def is_loopback(host: str) -> bool:
    """True for 127.0.0.0/8, ::1 and 'localhost': addresses only this machine can reach."""
    if host == "localhost":
        return True
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def resolve_token(cfg: ServeConfig) -> str:
    """The token to require ('' = none); ValueError when a non-loopback bind has no usable token."""
    token = cfg.token or os.environ.get(TOKEN_ENV, "")
    if token:
        check_token_strength(token, "token" if cfg.token else f"token (from {TOKEN_ENV})")
    if not token and not is_loopback(parse_host(cfg.host)):
        raise ValueError(f"token: binding {cfg.host!r} (reachable from other machines) requires a token; set "
                         f"token=... or the {TOKEN_ENV} environment variable, or bind host=127.0.0.1")
    return token


def load_policy(cfg: ServeConfig) -> Policy:
    """The policy named by `cfg.checkpoint`, in eval mode."""
    if cfg.checkpoint == "random":
        return RandomPolicy(RandomPolicyConfig(chunk_len=cfg.chunk_len, seed=cfg.seed))
    if not cfg.checkpoint or not Path(cfg.checkpoint).is_file():
        raise FileNotFoundError(f"checkpoint: {cfg.checkpoint!r} is not a file (a Policy.save checkpoint, or 'random')")
    return Policy.load(cfg.checkpoint, modules=cfg.policy_modules).eval()


def policy_metadata(policy: Policy, limits: WireLimits) -> dict[str, Any]:
    """What a client needs to know: chunk length, the views and image size the policy was trained on."""
    c = policy.config
    return {"type": "metadata", "protocol": PROTOCOL_VERSION, "policy": type(policy).__name__,
            "chunk_len": policy.chunk_len, "views": list(getattr(c, "views", [])),
            "image_size": int(getattr(c, "image_size", 0)), "action_dim": 7,
            "max_request_bytes": limits.max_request_bytes, "max_batch": limits.max_batch}


class PolicyServer:
    """A websocket server around one policy; `start()` runs it in a background thread, `serve_forever()` here."""

    def __init__(self, policy: Policy, cfg: ServeConfig | None = None):
        self.cfg = cfg = cfg or ServeConfig()
        self.host = parse_host(cfg.host)
        check_limits(cfg)
        self.token = resolve_token(cfg)
        self.policy = policy.eval()
        self.limits = WireLimits(max_request_bytes=cfg.max_request_bytes, max_batch=cfg.max_batch,
                                 max_image_side=cfg.max_image_side)
        self.metadata = policy_metadata(self.policy, self.limits)
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="policy-infer")
        self._generator = torch.Generator().manual_seed(cfg.seed)
        self._latency_file = open(cfg.latency_log, "a") if cfg.latency_log else None
        self.stats = {"requests": 0, "errors": 0, "rejected_handshakes": 0, "rate_limited": 0, "refused_full": 0,
                      "idle_closed": 0}
        self._auth_failures = FailureWindow(cfg.auth_failures, cfg.auth_window_s)
        self._admitted: set[ServerConnection] = set()  # past the handshake hook and not closed yet
        self.port: int | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None
        if cfg.num_threads > 0:
            torch.set_num_threads(cfg.num_threads)

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"ws://{host}:{self.port}"

    # ------------------------------------------------------------------ inference
    def _infer(self, obs: dict[str, Any]) -> np.ndarray:
        """Batched obs -> float32 [B, K, 7]; runs in the worker thread."""
        with torch.no_grad():
            if self.cfg.deterministic:
                actions = self.policy.predict_action_chunk(obs)
            else:
                actions = self.policy.sample(obs, generator=self._generator)[0]
        out = actions.detach().cpu().numpy().astype(np.float32)
        if out.ndim != 3 or out.shape[2] != 7 or not np.all(np.isfinite(out)):
            raise RuntimeError(f"policy returned actions of shape {out.shape} (expected [B, K, 7], finite)")
        return np.clip(out, -1.0, 1.0)

    def warmup(self) -> None:
        """One inference on a blank observation (loads lazily initialized parts, e.g. the language model)."""
        views = max(1, len(self.metadata["views"]))
        size = self.metadata["image_size"] or 64
        obs = {"image": np.zeros((1, views, size, size, 3), np.uint8), "state": np.zeros((1, 8), np.float32),
               "instruction": ["warm up"]}
        self._infer(obs)

    async def _answer(self, message: Any, peer: str) -> bytes:
        t0 = time.perf_counter()
        rid, code, t_infer, batch = None, "ok", 0.0, 0
        try:
            if isinstance(message, str):
                raise RequestError("", "expected a binary msgpack message, got a text frame")
            msg = unpack(message, self.limits)
            if isinstance(msg, dict) and type(msg.get("id")) is int:
                rid = msg["id"]
            obs, batched, rid = parse_request(msg, self.limits)
            batch = len(obs["instruction"])
            t1 = time.perf_counter()
            actions = await asyncio.get_running_loop().run_in_executor(self._executor, self._infer, obs)
            t_infer = time.perf_counter() - t1
            total_ms = (time.perf_counter() - t0) * 1e3
            timing = {"infer": t_infer * 1e3, "total": total_ms}
            reply = pack({"id": rid, "actions": actions if batched else actions[0], "timing_ms": timing})
        except RequestError as e:
            code, reply = e.code, error_reply(rid, e.code, e.message, e.field)
        except (ObservationError, ValueError) as e:  # the policy's own input checks (views, state size)
            code, reply = "bad_request", error_reply(rid, "bad_request", str(e))
        except Exception as e:  # a policy bug must not take the server down
            log.exception("inference failed for a request from %s", peer)
            code, reply = "internal", error_reply(rid, "internal", f"{type(e).__name__}: {e}")
        self._record(peer, rid, len(message), batch, code, t_infer, time.perf_counter() - t0)
        return reply

    def _record(self, peer: str, rid: int | None, size: int, batch: int, code: str, t_infer: float,
                total: float) -> None:
        self.stats["requests"] += 1
        self.stats["errors"] += code != "ok"
        log.log(logging.INFO if code == "ok" else logging.WARNING,
                "request peer=%s id=%s bytes=%d batch=%d status=%s infer_ms=%.2f total_ms=%.2f",
                peer, rid, size, batch, code, t_infer * 1e3, total * 1e3)
        if self._latency_file is not None:
            self._latency_file.write(json.dumps({"time": time.time(), "peer": peer, "id": rid, "bytes": size,
                                                 "batch": batch, "status": code, "infer_ms": t_infer * 1e3,
                                                 "total_ms": total * 1e3}) + "\n")
            self._latency_file.flush()

    # ------------------------------------------------------------------ transport
    def _process_request(self, connection: ServerConnection, request: Any):
        """Handshake hook, before any message is read: rate limit, token (HTTP 401), connection cap (HTTP 503)."""
        addr = str(connection.remote_address[0]) if connection.remote_address else "?"
        if self.token:
            if self._auth_failures.blocked(addr):
                self.stats["rate_limited"] += 1
                return connection.respond(HTTPStatus.TOO_MANY_REQUESTS, "too many failed handshakes from this "
                                          f"address; retry in {self.cfg.auth_window_s:g} s\n")
            given = request.headers.get("Authorization", "").encode()
            # "Bearer" from our client, "Api-Key" from openpi's WebsocketClientPolicy(api_key=...); both compared
            # in constant time (no short-circuit: `|` evaluates both)
            if not (hmac.compare_digest(given, f"Bearer {self.token}".encode())
                    | hmac.compare_digest(given, f"Api-Key {self.token}".encode())):
                self._auth_failures.record(addr)
                self.stats["rejected_handshakes"] += 1
                log.warning("refused a connection from %s: missing or wrong token", addr)
                return connection.respond(HTTPStatus.UNAUTHORIZED,
                                          "a valid token is required (Authorization: Bearer ...)\n")
        # a connection whose handshake was admitted but then failed is aborted by websockets: drop it here
        self._admitted = {c for c in self._admitted if c.state is not State.CLOSED and not c.transport.is_closing()}
        if len(self._admitted) >= self.cfg.max_connections:
            self.stats["refused_full"] += 1
            log.warning("refused a connection from %s: %d connections open (max_connections)", addr,
                        len(self._admitted))
            return connection.respond(HTTPStatus.SERVICE_UNAVAILABLE,
                                      f"the server holds max_connections={self.cfg.max_connections}; retry later\n")
        self._admitted.add(connection)
        return None

    async def _next_message(self, ws: ServerConnection) -> Any:
        """The next request, or None once the connection has been idle for idle_timeout_s (then it is closed)."""
        if self.cfg.idle_timeout_s <= 0:
            return await ws.recv()
        try:  # cancelling recv() on the timeout is safe: no message is lost or half read
            return await asyncio.wait_for(ws.recv(), self.cfg.idle_timeout_s)
        except asyncio.TimeoutError:  # not the builtin TimeoutError before Python 3.11
            self.stats["idle_closed"] += 1
            await ws.close(1000, f"idle for {self.cfg.idle_timeout_s:g} s")
            return None

    async def _handler(self, ws: ServerConnection) -> None:
        peer = "{}:{}".format(*ws.remote_address[:2]) if ws.remote_address else "?"
        try:
            await ws.send(pack(self.metadata))
            while (message := await self._next_message(ws)) is not None:
                await ws.send(await self._answer(message, peer))
        except ConnectionClosed as e:
            # 1009 = a frame above max_request_bytes: the transport refused it, and said so to the client
            if (e.rcvd is not None and e.rcvd.code == 1009) or (e.sent is not None and e.sent.code == 1009):
                self._record(peer, None, 0, 0, "too_large", 0.0, 0.0)
            log.info("connection from %s closed (%s)", peer, e)
        finally:
            self._admitted.discard(ws)

    async def _main(self) -> None:
        self._loop, self._stop = asyncio.get_running_loop(), asyncio.Event()
        # compression=None: images barely compress, and compression would cost latency and invite zip bombs.
        async with serve(self._handler, self.host, self.cfg.port, max_size=self.cfg.max_request_bytes,
                         process_request=self._process_request, compression=None) as server:
            self.port = server.sockets[0].getsockname()[1]
            log.info("serving %s at %s (token %s)", self.metadata["policy"], self.url,
                     "required" if self.token else "not required: loopback only")
            self._ready.set()
            await self._stop.wait()

    def _run(self) -> None:
        try:
            asyncio.run(self._main())
        except BaseException as e:  # e.g. address in use: reported by start()
            self._error = e
            self._ready.set()

    def start(self, timeout: float = 60.0) -> PolicyServer:
        """Warm up, bind and serve in a background thread; returns once the port is open."""
        if self.cfg.warmup:
            self.warmup()
        self._thread = threading.Thread(target=self._run, name="policy-server", daemon=True)
        self._thread.start()
        if not self._ready.wait(timeout) or self._error is not None:
            raise RuntimeError(f"policy server did not start on {self.host} port {self.cfg.port}: {self._error}")
        return self

    def serve_forever(self) -> None:
        """Start, then serve until stop() is called or Ctrl-C."""
        self.start()
        self.wait()

    def wait(self) -> None:
        """Block until the server stops or Ctrl-C (then stop it)."""
        try:
            while self._thread is not None and self._thread.is_alive():
                self._thread.join(0.5)
        except KeyboardInterrupt:
            log.info("interrupted")
        finally:
            self.stop()

    def stop(self) -> None:
        """Close every connection and the listening socket; idempotent."""
        if self._loop is not None and self._stop is not None and self._thread is not None and self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._stop.set)
            self._thread.join(10)
        self._executor.shutdown(wait=False)
        if self._latency_file is not None:
            self._latency_file.close()
            self._latency_file = None

    def __enter__(self) -> PolicyServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


__all__ = ["MIN_TOKEN_DISTINCT", "MIN_TOKEN_LEN", "PolicyServer", "ServeConfig", "TOKEN_ENV", "is_loopback",
           "load_policy", "policy_metadata", "resolve_token"]
