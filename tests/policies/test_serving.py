"""Policy server over loopback: valid requests, 1,000 malformed ones, tokens off loopback, latency log."""
from __future__ import annotations

import json
import time

import msgpack
import numpy as np
import pytest

from envs.robot.client import PolicyClient, ServerError, ServerUnavailable
from envs.robot.wire import ND_KEY, RequestError, WireLimits, pack, parse_request, unpack
from policies.base import RandomPolicy, RandomPolicyConfig
from policies.serving import PolicyServer, ServeConfig, is_loopback, resolve_token
from policies.vla import VLAPolicy
from tests.policies.conftest import tiny_config

LIMIT = 256 * 1024  # small request limit, so oversized requests are cheap to make
TOKEN = "correct-horse-battery-staple"


def obs(views: int = 2, size: int = 64, batch: int = 0, seed: int = 0) -> dict:
    """One observation (batch=0) or a batch, in the project's convention."""
    rng = np.random.default_rng(seed)
    lead = (batch,) if batch else ()
    text = "put the black bowl on the plate"
    return {"image": rng.integers(0, 256, (*lead, views, size, size, 3), dtype=np.uint8),
            "state": rng.normal(size=(*lead, 8)).astype(np.float32),
            "instruction": [text] * batch if batch else text}


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """A small untrained VLA (agentview + wrist, 64 px, chunk 8) served on 127.0.0.1."""
    policy = VLAPolicy(tiny_config(image_size=64, chunk_len=8, views=["agentview", "wrist"]))
    log = tmp_path_factory.mktemp("serve") / "latency.jsonl"
    cfg = ServeConfig(port=0, max_request_bytes=LIMIT, latency_log=str(log))
    with PolicyServer(policy, cfg) as s:
        yield s


def test_valid_requests_single_and_batched(server):
    with PolicyClient(server.url) as client:
        m = client.metadata
        assert ((m["policy"], m["chunk_len"], m["views"], m["image_size"])
                == ("VLAPolicy", 8, ["agentview", "wrist"], 64))
        one = client.infer(obs(), timeout=10)
        assert one.actions.shape == (8, 7) and one.actions.dtype == np.float32
        assert np.all(np.abs(one.actions) <= 1) and one.server_ms["infer"] > 0 and one.round_trip_ms > 0
        batch = client.infer(obs(batch=3), timeout=10)
        assert batch.actions.shape == (3, 8, 7)
        # deterministic policy: the same observation gives the same chunk, alone or in a batch
        np.testing.assert_allclose(client.infer(obs(), timeout=10).actions, one.actions, atol=1e-5)


def _nd(dtype: str, shape: list, data: bytes) -> dict:
    return {ND_KEY: True, "dtype": dtype, "shape": shape, "data": data}


def malformed_requests() -> list[tuple[str, bytes | str]]:
    """(kind, frame) pairs: every way a request can be wrong that the server must answer with an error."""
    good = obs()
    def with_(**kw):
        return pack({**good, **kw})
    def without(key):
        return pack({k: v for k, v in good.items() if k != key})
    img = good["image"]
    return [
        ("garbage", b"\xc1\x00\xff not msgpack"),
        ("empty", b""),
        ("truncated", pack(good)[:-10]),
        ("text frame", "image=1"),
        ("not a map", pack([1, 2, 3])),
        ("scalar", pack(42)),
        ("missing image", without("image")),
        ("missing state", without("state")),
        ("missing instruction", without("instruction")),
        ("unknown key", with_(extra=1)),
        ("image float32", with_(image=img.astype(np.float32))),
        ("image float64", with_(image=img.astype(np.float64) / 255)),
        ("image int64", with_(image=img.astype(np.int64))),
        ("image 3-D", with_(image=img[0])),
        ("image 2 channels", with_(image=np.ascontiguousarray(img[..., :2]))),
        ("too many views", with_(image=np.zeros((5, 64, 64, 3), np.uint8))),
        ("image side too large", with_(image=np.zeros((1, 8, 4000, 3), np.uint8))),
        ("image as list", with_(image=img.tolist()[0][0][:2])),
        ("state float64", with_(state=good["state"].astype(np.float64))),
        ("state int32", with_(state=np.zeros(8, np.int32))),
        ("state NaN", with_(state=np.full(8, np.nan, np.float32))),
        ("state batched, image not", with_(state=good["state"][None])),
        ("state of 5 (policy refuses)", with_(state=np.zeros(5, np.float32))),
        ("3 views (policy refuses)", with_(image=np.zeros((3, 64, 64, 3), np.uint8))),
        ("instruction int", with_(instruction=7)),
        ("instruction empty", with_(instruction="")),
        ("instruction too long", with_(instruction="x" * 1000)),
        ("instruction list, single obs", with_(instruction=["a"])),
        ("id not an int", with_(id="seven")),
        ("object dtype", with_(image=_nd("object", [1], b"\x00" * 8))),
        ("data size mismatch", with_(image=_nd("uint8", [2, 64, 64, 3], b"\x00" * 10))),
        ("negative shape", with_(image=_nd("uint8", [-1, 64, 64, 3], b""))),
        ("absurd shape", with_(image=_nd("uint8", [10**12, 10**12], b"\x00"))),
        ("data not bytes", with_(image=_nd("uint8", [2], "ab"))),  # type: ignore[arg-type]  # the wrong type on purpose
        ("deep nesting", pack({"image": [[[[[[[[1]]]]]]]]})),
        ("ext type", msgpack.packb({"image": msgpack.ExtType(42, b"\x00" * 16)})),
        ("too big for the batch", with_(image=np.zeros((9, 2, 8, 8, 3), np.uint8), state=np.zeros((9, 8), np.float32),
                                        instruction=["a"] * 9)),
        ("oversized frame", pack({**good, "image": np.zeros((2, 512, 512, 3), np.uint8)})),  # ~1.5 MB > LIMIT
    ]


def test_1000_malformed_requests_each_get_an_error_and_the_server_stays_up(server):
    cases = malformed_requests()
    before = dict(server.stats)
    client = PolicyClient(server.url)
    codes: dict[str, int] = {}
    try:
        for i in range(1000):
            kind, frame = cases[i % len(cases)]
            with pytest.raises(ServerError) as e:
                client.send_raw(frame, timeout=10)
            codes[e.value.code] = codes.get(e.value.code, 0) + 1
            assert e.value.code in ("bad_request", "too_large"), (kind, e.value)
            if kind == "oversized frame":  # the transport refused it (close 1009): a new connection follows
                client.close()
                client = PolicyClient(server.url)
        reply = client.infer(obs(), timeout=10)  # still serving
        assert reply.actions.shape == (8, 7)
    finally:
        client.close()
    assert sum(codes.values()) == 1000 and codes["too_large"] >= 1000 // len(cases)
    deadline = time.monotonic() + 30  # a refused frame is counted when its connection's close completes
    while server.stats["requests"] - before["requests"] < 1001 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert server.stats["errors"] - before["errors"] == 1000
    assert server.stats["requests"] - before["requests"] == 1001


def test_latency_is_logged_per_request(server):
    with PolicyClient(server.url) as client:
        client.infer(obs(), timeout=10)
    rows = [json.loads(line) for line in open(server.cfg.latency_log)]
    ok = [r for r in rows if r["status"] == "ok"]
    assert ok and all(r["total_ms"] >= r["infer_ms"] > 0 for r in ok)
    assert {"peer", "bytes", "batch", "status", "total_ms"} <= set(rows[-1])


def test_token_is_required_off_loopback(monkeypatch):
    monkeypatch.delenv("POLICY_SERVER_TOKEN", raising=False)
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("0.0.0.0") and not is_loopback("192.168.1.20")
    for host in ("0.0.0.0", "192.168.1.20", "::"):
        with pytest.raises(ValueError, match="token"):
            resolve_token(ServeConfig(host=host))
    with pytest.raises(ValueError, match="token: must have at least"):
        resolve_token(ServeConfig(host="0.0.0.0", token="short"))
    assert resolve_token(ServeConfig(host="127.0.0.1")) == ""
    monkeypatch.setenv("POLICY_SERVER_TOKEN", TOKEN)
    assert resolve_token(ServeConfig(host="0.0.0.0")) == TOKEN

    cfg = ServeConfig(host="0.0.0.0", port=0, token=TOKEN)
    with PolicyServer(RandomPolicy(RandomPolicyConfig(chunk_len=4)), cfg) as s:
        url = f"ws://127.0.0.1:{s.port}"
        for token in ("", "wrong-token-of-enough-length", TOKEN[:-1]):
            with pytest.raises(ServerUnavailable, match="401"):
                PolicyClient(url, token=token)
        assert s.stats["rejected_handshakes"] == 3 and s.stats["requests"] == 0  # refused before any message
        with PolicyClient(url, token=TOKEN) as client:
            assert client.infer(obs(), timeout=10).actions.shape == (4, 7)


def test_wire_round_trip_and_limits():
    arrays: list[np.ndarray] = [np.arange(6, dtype=d).reshape(2, 3)
                                for d in ("uint8", "int16", "int64", "float16", "float32", "float64")]
    arrays.append(np.arange(4, dtype=">f4"))  # big-endian input is sent little-endian
    back = unpack(pack({"a": arrays}))["a"]
    for x, y in zip(arrays, back):
        np.testing.assert_array_equal(x, y)
    with pytest.raises(TypeError, match="dtype"):
        pack({"x": np.array([object()])})
    with pytest.raises(RequestError) as e:
        unpack(b"\x00" * 100, WireLimits(max_request_bytes=10))
    assert e.value.code == "too_large"
    with pytest.raises(RequestError, match="state"):
        parse_request(unpack(pack({**obs(), "state": np.zeros(8)})))
    batch, batched, rid = parse_request(unpack(pack({**obs(), "id": 5})))
    assert not batched and rid == 5 and batch["image"].shape == (1, 2, 64, 64, 3)
    assert batch["instruction"] == [obs()["instruction"]]
