"""Our remote policy as a client of an openpi policy server (policies/remote.py, protocol "openpi").

The server is openpi's websocket server loop (its `WebsocketPolicyServer`: a packed metadata map on connect,
then one packed observation in, one packed {"actions": ...} out) written with `openpi-client`'s own
msgpack_numpy in the openpi venv, around a fixed function of the observation, so the expected actions are
known here. openpi's full server package (JAX models) is not installable on this machine.
"""
from __future__ import annotations

import json
import os
import subprocess

import numpy as np
import pytest

from imagination.eval.jobs import EvalConfig
from policies.remote import RemotePolicy, RemotePolicyConfig
from tests.interop import require_venv

SERVER = """
import asyncio, json, sys
import numpy as np
import websockets.asyncio.server
from openpi_client import msgpack_numpy

def policy(obs):  # a fixed function of every key openpi's LIBERO client sends; a 10-step chunk of 8 dims
    img, wrist = obs["observation/image"], obs["observation/wrist_image"]
    x = img.mean() / 255.0 - wrist.mean() / 510.0 - obs["observation/state"].sum() / 8 + len(obs["prompt"]) / 100
    return {"actions": np.tanh(x * np.arange(1, 9)[None] + 0.01 * np.arange(10)[:, None]), "policy_timing": {}}

async def handler(ws):
    packer = msgpack_numpy.Packer()
    await ws.send(packer.pack({"note": "openpi-style metadata"}))
    async for message in ws:
        await ws.send(packer.pack(policy(msgpack_numpy.unpackb(message))))

async def main():
    async with websockets.asyncio.server.serve(handler, "127.0.0.1", 0, compression=None, max_size=None) as s:
        print(json.dumps({"port": s.sockets[0].getsockname()[1]}), flush=True)
        await asyncio.Future()

asyncio.run(main())
"""


def expected(image: np.ndarray, state: np.ndarray, prompt: str) -> np.ndarray:
    x = image[0].mean() / 255.0 - image[1].mean() / 510.0 - state.astype(np.float64).sum() / 8 + len(prompt) / 100
    return np.tanh(x * np.arange(1, 9)[None] + 0.01 * np.arange(10)[:, None])[:, :7]


@pytest.fixture(scope="module")
def openpi_server():
    python = require_venv("openpi")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.Popen([str(python), "-c", SERVER], cwd="/", env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline() if proc.stdout else ""
        if not line:
            raise AssertionError(f"the openpi-style server did not start:\n{proc.stderr.read() if proc.stderr else ''}")
        yield f"ws://127.0.0.1:{json.loads(line)['port']}"
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_openpi_protocol_sends_libero_keys_and_takes_the_chunk_head(openpi_server):
    remote = RemotePolicy(RemotePolicyConfig(url=openpi_server, protocol="openpi", chunk_len=5, image_size=32))
    try:
        rng = np.random.default_rng(0)
        image = rng.integers(0, 256, (3, 2, 32, 32, 3), dtype=np.uint8)
        state = rng.normal(size=(3, 8)).astype(np.float32)
        obs = {"image": image, "state": state, "instruction": ["open the drawer"] * 3}
        got = remote.predict_action_chunk(obs).numpy()  # 3 observations: 3 requests, one each
        want = np.stack([expected(image[b], state[b], "open the drawer")[:5] for b in range(3)])
        np.testing.assert_allclose(got, want, atol=1e-5)
        assert remote.config.views == ["agentview", "wrist"]
    finally:
        remote.close()


@pytest.mark.libero
def test_eval_policy_runs_an_openpi_server_in_real_libero(openpi_server, tmp_path):
    from imagination.eval.evaluate import evaluate, load_policy

    with pytest.raises(ValueError, match="action_steps"):
        load_policy(EvalConfig(checkpoint=openpi_server, remote_protocol="openpi"))
    cfg = EvalConfig(checkpoint=openpi_server, remote_protocol="openpi", action_steps=5, image_size=64,
                     env="libero_spatial", tasks=[0], episodes_per_task=1, num_envs=1, max_steps=10, videos=0,
                     out_dir=str(tmp_path))
    result: dict = evaluate(cfg, progress=False)
    assert result["policy"] == "RemotePolicy" and [e["steps"] for e in result["episodes"]] == [10]
