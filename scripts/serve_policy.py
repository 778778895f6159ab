"""Serve a policy checkpoint over a websocket: observation dict in (msgpack + numpy), action chunk out.

    python scripts/serve_policy.py checkpoint=outputs/bc/quick/policy.pt              # ws://127.0.0.1:8765
    python scripts/serve_policy.py checkpoint=random port=0                           # random actions, free port
    POLICY_SERVER_TOKEN=... python scripts/serve_policy.py checkpoint=policy.pt host=0.0.0.0

Binds 127.0.0.1 unless told otherwise; any other address needs a token (>= 16 characters, given as
token=... or, better, in the POLICY_SERVER_TOKEN environment variable), which clients send as
`Authorization: Bearer <token>`. The token is not encryption: across a network, tunnel the port
(ssh -L 8765:127.0.0.1:8765 gpu-host) or put a TLS proxy in front. Requests above
max_request_bytes are refused; malformed ones get an error reply. Each request's latency is logged
(and appended to latency_log as JSON lines when set). Wire format: envs/robot/wire.py; deployment
guide: docs/deploy.md. Ctrl-C stops the server.
"""
from __future__ import annotations

import logging

from infra.cli import run_script
from policies.serving import PolicyServer, ServeConfig, load_policy


def main(cfg: ServeConfig) -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    logging.getLogger("websockets").setLevel(logging.WARNING)  # our own log line per request is enough
    server = PolicyServer(load_policy(cfg), cfg)
    server.start()
    m = server.metadata
    print(f"serving {m['policy']} (chunk {m['chunk_len']}, views {m['views'] or 'any'}, "
          f"image {m['image_size'] or 'any'} px) "
          f"at {server.url}; token {'required' if server.token else 'not required (loopback only)'}; Ctrl-C stops",
          flush=True)
    server.wait()


if __name__ == "__main__":
    # besides input errors, one line for a port in use (OSError) or a server that cannot start
    run_script(main, ServeConfig, __doc__, group="serve", extra=(OSError, RuntimeError))
