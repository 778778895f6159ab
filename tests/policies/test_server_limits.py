"""Policy server limits over loopback: connection cap, idle timeout, handshake rate limit, token strength, hosts.

Every wait is a bounded poll (a few seconds at most); windows and timeouts are set to fractions of a second.
"""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path

import pytest
from websockets.exceptions import InvalidStatus
from websockets.sync.client import connect

from envs.robot.client import PolicyClient, ServerUnavailable
from infra.cli import load_config
from policies.base import RandomPolicy, RandomPolicyConfig
from policies.server_limits import FailureWindow, parse_host
from policies.serving import PolicyServer, ServeConfig, resolve_token
from tests.policies.test_serving import TOKEN, obs

REPO = Path(__file__).resolve().parents[2]


def serve(**overrides) -> PolicyServer:
    return PolicyServer(RandomPolicy(RandomPolicyConfig(chunk_len=4)), ServeConfig(port=0, **overrides))


def wait_for(condition: Callable[[], bool], seconds: float = 30.0) -> bool:
    """Poll until `condition` holds. The wait ends as soon as it does, so a long limit costs nothing when the
    test passes and keeps a loaded 2-core machine (the test suite beside another job) from failing it."""
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def handshake_status(url: str, token: str, source: str = "127.0.0.1") -> int:
    """HTTP status of one websocket handshake from `source` (101 when it opened)."""
    try:
        with connect(url, additional_headers={"Authorization": f"Bearer {token}"}, open_timeout=5, proxy=None,
                     source_address=(source, 0)):
            return 101
    except InvalidStatus as e:
        return e.response.status_code


def test_connection_cap_refuses_the_next_handshake_and_frees_slots_on_close():
    with serve(max_connections=3) as server:
        clients = [PolicyClient(server.url) for _ in range(3)]
        with pytest.raises(ServerUnavailable, match="HTTP 503"):
            PolicyClient(server.url)
        assert server.stats["refused_full"] == 1
        for c in clients:  # the three admitted ones are served
            assert c.infer(obs(), timeout=10).actions.shape == (4, 7)
        clients.pop().close()
        assert wait_for(lambda: len(server._admitted) == 2)
        clients.append(PolicyClient(server.url))
        assert clients[-1].infer(obs(), timeout=10).actions.shape == (4, 7)
        for c in clients:
            c.close()


def test_a_flood_of_idle_connections_is_capped_then_shed():
    # 2 s: long enough that no admitted connection idles out while the 40 connect on a loaded machine (at 0.3 s
    # one did, under a full test run beside other jobs, and a 9th was admitted), short enough to wait for below
    with serve(max_connections=8, idle_timeout_s=2.0) as server, ExitStack() as stack:
        opened, refused = 0, 0
        for _ in range(40):
            try:
                stack.enter_context(connect(server.url, open_timeout=5, proxy=None))
                opened += 1
            except InvalidStatus as e:
                assert e.response.status_code == 503
                refused += 1
        assert (opened, refused) == (8, 32)
        assert wait_for(lambda: server.stats["idle_closed"] == 8 and not server._admitted)
        with PolicyClient(server.url) as client:  # and the server still serves
            assert client.infer(obs(), timeout=10).actions.shape == (4, 7)


def test_idle_connections_are_closed_and_active_ones_kept():
    # 2 s: the busy client's requests 0.1 s apart must never leave a gap that long, even when the test runs
    # beside another CPU-bound job on 2 cores (at 0.4 s a scheduling stall could close `busy` too)
    with serve(idle_timeout_s=2.0, max_connections=2) as server:
        idle, busy = PolicyClient(server.url), PolicyClient(server.url)
        t_end = time.monotonic() + 3.0
        while time.monotonic() < t_end:  # a request every 0.1 s keeps `busy` open past the timeout
            assert busy.infer(obs(), timeout=10).actions.shape == (4, 7)
            time.sleep(0.1)
        assert wait_for(lambda: server.stats["idle_closed"] == 1)
        with pytest.raises(ServerUnavailable, match="idle"):
            idle.infer(obs(), timeout=10)
        # the idle connection's slot is free again for a new client
        assert wait_for(lambda: len(server._admitted) == 1)
        with PolicyClient(server.url) as again:
            assert again.infer(obs(), timeout=10).actions.shape == (4, 7)
        busy.close()
        idle.close()


def test_wrong_tokens_are_rate_limited_per_address():
    try:
        socket.socket().bind(("127.0.0.2", 0))
    except OSError:
        pytest.skip("no second loopback address here")
    # a 6 s window: the 21 handshakes below must all land inside it, also on a loaded machine
    with serve(host="0.0.0.0", token=TOKEN, auth_failures=3, auth_window_s=6.0) as server:
        url = f"ws://127.0.0.1:{server.port}"
        statuses = [handshake_status(url, f"wrong-{i:04d}-token-guess") for i in range(20)]
        assert statuses[:3] == [401] * 3 and set(statuses[3:]) == {429}
        assert handshake_status(url, TOKEN) == 429  # blocked: the right token is not even compared
        assert server.stats["rejected_handshakes"] == 3 and server.stats["rate_limited"] == 18
        assert handshake_status(url, TOKEN, source="127.0.0.2") == 101  # another address is not affected
        # once the window has passed, the address is let in again
        assert wait_for(lambda: handshake_status(url, TOKEN) == 101)
        assert server.stats["requests"] == 0


def test_failure_window_forgets_old_failures():
    now = [0.0]
    window = FailureWindow(limit=2, window_s=10.0, clock=lambda: now[0])
    window.record("a")
    now[0] = 5.0
    window.record("a")
    assert window.blocked("a") and not window.blocked("b")
    now[0] = 10.0  # the first failure ages out
    assert not window.blocked("a")


@pytest.mark.parametrize("token, complaint", [
    ("a" * 16, "at least 8 distinct characters (got 1)"),
    ("ab" * 12, "at least 8 distinct characters (got 2)"),
    ("abc123", "at least 16 characters (got 6)"),
])
def test_weak_tokens_are_refused_at_start(token, complaint, monkeypatch):
    monkeypatch.delenv("POLICY_SERVER_TOKEN", raising=False)
    with pytest.raises(ValueError, match=rf"^token: must .*{complaint}".replace("(", r"\(").replace(")", r"\)")):
        serve(host="0.0.0.0", token=token)
    monkeypatch.setenv("POLICY_SERVER_TOKEN", token)
    with pytest.raises(ValueError, match=r"^token \(from POLICY_SERVER_TOKEN\): must"):
        resolve_token(ServeConfig(host="0.0.0.0"))
    monkeypatch.setenv("POLICY_SERVER_TOKEN", TOKEN)
    assert resolve_token(ServeConfig(host="0.0.0.0")) == TOKEN


@pytest.mark.parametrize("field, value", [("max_connections", 0), ("idle_timeout_s", -1.0),
                                          ("auth_failures", 0), ("auth_window_s", 0.0)])
def test_limits_out_of_range_name_the_field(field, value):
    with pytest.raises(ValueError, match=f"^{field}: expected"):
        serve(**{field: value})


def test_hosts_are_parsed_as_strings():
    assert parse_host("::1") == "::1" and parse_host("[::1]") == "::1" and parse_host("::") == "::"
    assert parse_host(" 0.0.0.0 ") == "0.0.0.0" and parse_host("localhost") == "localhost"
    assert parse_host("0:0:0:0:0:0:0:1") == "::1" and parse_host("gpu-host.local") == "gpu-host.local"
    for bad in ({":": None}, "", "no spaces please", "[::1", 8765):
        with pytest.raises(ValueError, match="^host: expected an IP address or host name as a string"):
            parse_host(bad)
    with pytest.raises(ValueError, match="^token:"):  # '::' listens on every address: a token is required
        serve(host="::")


def test_serves_over_ipv6_loopback():
    try:
        socket.socket(socket.AF_INET6).bind(("::1", 0))
    except OSError:
        pytest.skip("no IPv6 loopback here")
    with serve(host="[::1]") as server:
        assert server.url.startswith("ws://[::1]:")
        with PolicyClient(server.url) as client:
            assert client.infer(obs(), timeout=10).actions.shape == (4, 7)


def _serve_config(*overrides: str) -> ServeConfig:
    """A ServeConfig built the way scripts/serve_policy.py builds it: defaults <- `key=value` overrides."""
    return load_config(ServeConfig, None, list(overrides), group="serve")


@pytest.mark.parametrize("host", ["::", "[::]", "::1", "[::1]", "0:0:0:0:0:0:0:1"])
def test_ipv6_hosts_on_the_command_line_reach_the_config_as_strings(host):
    # YAML reads '::' as a mapping and '[::1]' as a list; the override must keep the text the user typed
    cfg = _serve_config(f"host={host}", "port=0")
    assert cfg.host == host and isinstance(cfg.host, str)
    assert parse_host(cfg.host) in ("::", "::1")


def test_the_script_refuses_every_ipv6_address_without_a_token_in_one_line(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "POLICY_SERVER_TOKEN"}
    out = subprocess.run([sys.executable, str(REPO / "scripts/serve_policy.py"), "checkpoint=random", "host=::",
                          "port=0"], capture_output=True, text=True, cwd=tmp_path, timeout=120,
                         env={**env, "PYTHONPATH": str(REPO)})
    assert out.returncode == 2, out.stderr
    assert len(out.stderr.splitlines()) == 1 and out.stderr.startswith("serve_policy: token: "), out.stderr
    assert "'::'" in out.stderr


def test_serves_over_ipv6_loopback_from_a_parsed_config():
    try:
        socket.socket(socket.AF_INET6).bind(("::1", 0))
    except OSError:
        pytest.skip("no IPv6 loopback here")
    cfg = _serve_config("host=[::1]", "port=0")
    with PolicyServer(RandomPolicy(RandomPolicyConfig(chunk_len=4)), cfg) as server:
        assert server.url.startswith("ws://[::1]:")
        with PolicyClient(server.url) as client:
            assert client.infer(obs(), timeout=10).actions.shape == (4, 7)
    cfg = _serve_config("host=::", f"token={TOKEN}", "port=0")  # every address, the loopback among them
    with PolicyServer(RandomPolicy(RandomPolicyConfig(chunk_len=4)), cfg) as server:
        with PolicyClient(server.url.replace("[::]", "[::1]"), token=TOKEN) as client:
            assert client.infer(obs(), timeout=10).actions.shape == (4, 7)
