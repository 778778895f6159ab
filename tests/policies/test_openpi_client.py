"""Our policy server and wire format against the real `openpi-client` package (PyPI), in its own venv.

openpi-client pins numpy < 2, so it is installed into `.venv-openpi` (`make openpi-venv`), and its
WebsocketClientPolicy runs in a subprocess against a server started here. Skipped, with the command
that builds the venv, when it is missing; CI builds it.
"""
from __future__ import annotations

import base64

import msgpack
import numpy as np
import pytest

from envs.robot.client import PolicyClient
from envs.robot.wire import OPENPI_ND_KEY, pack, parse_request, unpack
from policies.base import RandomPolicy, RandomPolicyConfig
from policies.serving import PolicyServer, ServeConfig
from tests.interop import require_venv, run_in_venv

TOKEN = "correct-horse-battery-staple"

# Connects with openpi's own client, sends one observation and one batch in our convention, and prints
# what came back (shapes, dtypes, values) as JSON; argv: url, api key ("" = none).
CLIENT_SCRIPT = """
import json, sys
import numpy as np
from openpi_client import msgpack_numpy
from openpi_client.websocket_client_policy import WebsocketClientPolicy

url, key = sys.argv[1], sys.argv[2] or None
policy = WebsocketClientPolicy(host=url, api_key=key)
meta = policy.get_server_metadata()
rng = np.random.default_rng(0)
obs = {"image": rng.integers(0, 256, (2, 64, 64, 3), dtype=np.uint8),
       "state": rng.normal(size=8).astype(np.float32), "instruction": "put the bowl on the plate"}
one = policy.infer(obs)
batch = policy.infer({"image": np.stack([obs["image"]] * 3), "state": np.stack([obs["state"]] * 3),
                      "instruction": [obs["instruction"]] * 3})
bad = policy.infer({**obs, "image": obs["image"].astype(np.float32)})  # error replies are maps, not text
print(json.dumps({
    "meta": {k: meta[k] for k in ("type", "protocol", "chunk_len", "views")},
    "one": {"shape": list(one["actions"].shape), "dtype": one["actions"].dtype.str,
            "actions": one["actions"].tolist(), "timing": sorted(one["timing_ms"])},
    "batch_shape": list(batch["actions"].shape),
    "error": bad.get("error", {}).get("code"),
    # openpi's own encoding of mixed arrays and scalars, for our decoder
    "packed": __import__("base64").b64encode(msgpack_numpy.packb({
        "u8": np.arange(6, dtype=np.uint8).reshape(2, 3), "f4": np.linspace(0, 1, 4, dtype=np.float32),
        "big": np.arange(3, dtype=">i4"), "flag": np.array([True, False]), "x": np.float64(2.5),
        "n": np.int32(7)})).decode(),
}))
"""


# openpi's LIBERO example client (examples/libero/main.py): 224 px upright agentview and wrist images, the
# 8-dim state as float64, the prompt; one observation per call. argv: url. Prints the action chunk.
LIBERO_SCRIPT = """
import json, sys
import numpy as np
from openpi_client.websocket_client_policy import WebsocketClientPolicy

policy = WebsocketClientPolicy(host=sys.argv[1])
img = (np.arange(224 * 224 * 3) % 251).astype(np.uint8).reshape(224, 224, 3)
element = {"observation/image": img, "observation/wrist_image": img[::-1].copy(),
           "observation/state": np.linspace(-0.5, 0.5, 8), "prompt": "put the black bowl on the plate"}
print(json.dumps({"actions": policy.infer(element)["actions"].tolist()}))
"""


@pytest.fixture(scope="module")
def openpi_python():
    return require_venv("openpi")


def test_openpi_websocket_client_gets_action_chunks_from_our_server(openpi_python):
    policy = RandomPolicy(RandomPolicyConfig(chunk_len=8, seed=3))
    with PolicyServer(policy, ServeConfig(port=0)) as server:
        out = run_in_venv("openpi", CLIENT_SCRIPT, [server.url, ""], timeout=120)
        assert out["meta"] == {"type": "metadata", "protocol": 2, "chunk_len": 8, "views": []}
        assert out["one"]["shape"] == [8, 7] and out["one"]["dtype"] == "<f4"
        actions = np.asarray(out["one"]["actions"], np.float32)
        assert np.all(np.abs(actions) <= 1) and out["one"]["timing"] == ["infer", "total"]
        assert out["batch_shape"] == [3, 8, 7]
        assert out["error"] == "bad_request"  # float pixels refused, the connection kept
        assert server.stats["requests"] == 3 and server.stats["errors"] == 1

    # what openpi's msgpack_numpy wrote decodes here to the same values, in native byte order
    got = unpack(base64.b64decode(out["packed"]))
    np.testing.assert_array_equal(got["u8"], np.arange(6, dtype=np.uint8).reshape(2, 3))
    np.testing.assert_array_equal(got["f4"], np.linspace(0, 1, 4, dtype=np.float32))
    assert got["big"].dtype == np.dtype("int32") and got["big"].tolist() == [0, 1, 2]
    assert got["flag"].tolist() == [True, False] and got["x"] == 2.5 and got["n"] == 7


def test_openpi_libero_example_keys_drive_our_policy(openpi_python):
    import torch

    from policies.vla import VLAPolicy
    from tests.policies.conftest import tiny_config

    torch.manual_seed(0)
    policy = VLAPolicy(tiny_config(views=["agentview", "wrist"])).eval()
    with PolicyServer(policy, ServeConfig(port=0)) as server:
        out = run_in_venv("openpi", LIBERO_SCRIPT, [server.url], timeout=120)
    img = (np.arange(224 * 224 * 3) % 251).astype(np.uint8).reshape(224, 224, 3)
    obs = {"image": np.stack([img, img[::-1]])[None], "state": np.linspace(-0.5, 0.5, 8, dtype=np.float32)[None],
           "instruction": ["put the black bowl on the plate"]}
    want = policy.predict_action_chunk(obs)[0].numpy()
    np.testing.assert_allclose(np.asarray(out["actions"], np.float32), want, atol=1e-5)


def test_openpi_libero_keys_are_checked_by_name():
    img = np.zeros((32, 32, 3), np.uint8)
    ok = {"observation/image": img, "observation/state": np.zeros(8), "prompt": "pick", "id": 3}
    obs, batched, rid = parse_request(ok)
    assert obs["image"].shape == (1, 1, 32, 32, 3) and obs["state"].dtype == np.float32 and rid == 3
    assert not batched and obs["instruction"] == ["pick"]
    with pytest.raises(ValueError, match="observation/wrist_image"):
        parse_request({**ok, "observation/wrist_image": np.zeros((16, 16, 3), np.uint8)})
    with pytest.raises(ValueError, match="prompt"):
        parse_request({k: v for k, v in ok.items() if k != "prompt"})
    with pytest.raises(ValueError, match="observation/extra"):
        parse_request({**ok, "observation/extra": img})


def test_openpi_client_api_key_is_our_token(openpi_python):
    cfg = ServeConfig(host="0.0.0.0", port=0, token=TOKEN)
    with PolicyServer(RandomPolicy(RandomPolicyConfig(chunk_len=4)), cfg) as server:
        url = f"ws://127.0.0.1:{server.port}"
        assert run_in_venv("openpi", CLIENT_SCRIPT, [url, TOKEN], timeout=120)["one"]["shape"] == [4, 7]
        with pytest.raises(AssertionError, match="401"):
            run_in_venv("openpi", CLIENT_SCRIPT, [url, "wrong-token-of-enough-length"], timeout=120)


def test_we_write_openpi_layout_and_still_read_protocol_1():
    packed = pack({"a": np.arange(4, dtype=np.float32)})
    raw = msgpack.unpackb(packed, raw=False)
    assert raw["a"][OPENPI_ND_KEY] is True and raw["a"][b"dtype"] == "<f4" and raw["a"][b"shape"] == [4]
    # protocol 1 (str keys, dtype by name): what earlier clients of ours send
    old = msgpack.packb({"image": {"__ndarray__": True, "dtype": "uint8", "shape": [1, 8, 8, 3],
                                   "data": bytes(192)},
                         "state": {"__ndarray__": True, "dtype": "float32", "shape": [8], "data": bytes(32)},
                         "instruction": "pick"}, use_bin_type=True)
    obs, batched, _ = parse_request(unpack(old))
    assert not batched and obs["image"].shape == (1, 1, 8, 8, 3) and obs["state"].dtype == np.float32
    for bad in ("O", "<U4", "V8", "<f16", "|S3", "<c8", "<u8", "float128", "<f1", "|b4", 7, None):
        enc = msgpack.packb({"x": {OPENPI_ND_KEY: True, b"dtype": bad, b"shape": [1], b"data": bytes(8)}})
        with pytest.raises(ValueError, match="dtype"):
            unpack(enc)


def test_our_client_reads_the_new_replies():
    with PolicyServer(RandomPolicy(RandomPolicyConfig(chunk_len=5)), ServeConfig(port=0)) as server:
        with PolicyClient(server.url) as client:
            assert client.metadata["protocol"] == 2
            obs = {"image": np.zeros((1, 32, 32, 3), np.uint8), "state": np.zeros(8, np.float32),
                   "instruction": "pick"}
            reply = client.infer(obs, timeout=10)
            assert reply.actions.shape == (5, 7) and reply.actions.dtype == np.float32
