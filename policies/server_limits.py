"""Limits that keep the policy server (`policies.serving`) answering under load and abuse.

    host = parse_host(cfg.host)                  # "::1", "[::1]", "0.0.0.0", "localhost" -> the address to bind
    check_token_strength(token)                  # length and distinct characters, at start
    check_limits(cfg)                            # max_connections, idle_timeout_s, auth_failures, auth_window_s
    failures = FailureWindow(limit=5, window_s=60.0)
    if failures.blocked(addr): refuse (HTTP 429)     # before the token is even compared
    failures.record(addr)                        # after a wrong or missing token

Why each: a long token of one repeated character is as guessable as a short one; a client that
guesses tokens at line rate must be slowed down per address, not answered 300 times; idle or
abandoned connections each hold a socket and a task, so their number is capped and they time out.
"""
from __future__ import annotations

import ipaddress
import re
import time
from collections import deque
from collections.abc import Callable
from typing import Any

MIN_TOKEN_LEN = 16
MIN_TOKEN_DISTINCT = 8  # 16 characters drawn from 8 or more symbols: no 'aaaa…' or 'abababab…' tokens
_HOSTNAME = re.compile(r"^(?=.{1,253}$)[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
                       r"(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*$")
_HOST_FORMS = "an IP address or host name as a string, e.g. 127.0.0.1, ::1, 0.0.0.0, :: or localhost"
_TOKEN_HINT = "e.g. python -c 'import secrets; print(secrets.token_urlsafe(24))'"


def parse_host(host: Any) -> str:
    """The address to bind for `host`: IPv4 or IPv6 (brackets allowed, '[::1]'), or a host name.

    ValueError naming the field otherwise (a YAML-parsed value that is not a string included).
    """
    if not isinstance(host, str) or not host.strip():
        raise ValueError(f"host: expected {_HOST_FORMS}; got {host!r}")
    text = host.strip()
    if text.startswith("[") and text.endswith("]"):
        text = text[1:-1]
    try:
        return str(ipaddress.ip_address(text))
    except ValueError:
        pass
    if _HOSTNAME.match(text):
        return text
    raise ValueError(f"host: expected {_HOST_FORMS}; got {host!r}")


def check_token_strength(token: str, field: str = "token") -> None:
    """ValueError naming `field` unless `token` has MIN_TOKEN_LEN characters and MIN_TOKEN_DISTINCT distinct ones."""
    if len(token) < MIN_TOKEN_LEN:
        raise ValueError(f"{field}: must have at least {MIN_TOKEN_LEN} characters (got {len(token)}); {_TOKEN_HINT}")
    distinct = len(set(token))
    if distinct < MIN_TOKEN_DISTINCT:
        raise ValueError(f"{field}: must use at least {MIN_TOKEN_DISTINCT} distinct characters (got {distinct}): "
                         f"a repetitive token is easy to guess; {_TOKEN_HINT}")


def check_limits(cfg: Any) -> None:
    """ValueError naming the first out-of-range connection limit of a ServeConfig."""
    checks = (("max_connections", cfg.max_connections >= 1, "an int >= 1"),
              ("idle_timeout_s", cfg.idle_timeout_s >= 0, "seconds >= 0 (0 = never)"),
              ("auth_failures", cfg.auth_failures >= 1, "an int >= 1"),
              ("auth_window_s", cfg.auth_window_s > 0, "seconds > 0"))
    for name, ok, expected in checks:
        if not ok:
            raise ValueError(f"{name}: expected {expected}, got {getattr(cfg, name)!r}")


class FailureWindow:
    """Failed handshakes per address in a sliding window: `limit` failures within `window_s` block the address.

    The address stays blocked until its oldest failure in the window has aged out. Addresses whose
    failures have all aged out are forgotten, so many one-off clients cannot grow the table.
    """

    def __init__(self, limit: int, window_s: float, clock: Callable[[], float] = time.monotonic):
        self.limit, self.window_s, self.clock = limit, window_s, clock
        self._failures: dict[str, deque[float]] = {}

    def _recent(self, addr: str, now: float) -> deque[float]:
        times = self._failures.get(addr, deque())
        while times and now - times[0] >= self.window_s:
            times.popleft()
        return times

    def blocked(self, addr: str) -> bool:
        """True while `addr` has `limit` failures within the window."""
        return len(self._recent(addr, self.clock())) >= self.limit

    def record(self, addr: str) -> None:
        """Count one failed handshake of `addr`."""
        now = self.clock()
        times = self._recent(addr, now)
        times.append(now)
        self._failures[addr] = times
        if len(self._failures) > 4096:  # forget addresses with nothing left in the window
            for other in [a for a in self._failures if not self._recent(a, now)]:
                del self._failures[other]


__all__ = ["MIN_TOKEN_DISTINCT", "MIN_TOKEN_LEN", "FailureWindow", "check_limits", "check_token_strength",
           "parse_host"]
