"""Policy-server latency: request round trips to the built-in VLA over loopback, as a robot client sees them.

    python bench/serve_latency.py                                   # default VLA architecture, untrained
    python bench/serve_latency.py --checkpoint outputs/bc/quick/policy.pt --requests 500

The server runs as its own process (scripts/serve_policy.py), as in a deployment; the client sends
one observation per request (agentview + wrist at the policy's image size, proprio, instruction) and
times encode + send + inference + reply + decode. Latency does not depend on the weights, so without
a checkpoint the default `VLAConfig` is timed untrained. Prints p50/p99 of the round trip and of the
server's inference time, and a final `BENCH serve_latency ... PASS|FAIL`; exits 1 when p99 is above
--max-p99-ms: by default one control period at 20 Hz (50 ms), the budget a request has before the
arm's next step would be late.
"""
from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from bench.inputs import report_missing
from envs.robot.client import PolicyClient
from infra.errors import run_main

ROOT = Path(__file__).resolve().parents[1]


def start_server(checkpoint: str, threads: int, log_path: Path) -> tuple[subprocess.Popen, str]:
    """scripts/serve_policy.py on a free loopback port; returns (process, url) once it is serving."""
    log = open(log_path, "w")
    proc = subprocess.Popen([sys.executable, str(ROOT / "scripts/serve_policy.py"), f"checkpoint={checkpoint}",
                             "port=0", f"num_threads={threads}"],
                            stdout=subprocess.PIPE, stderr=log, text=True, cwd=ROOT)
    assert proc.stdout is not None  # stdout=PIPE
    line = proc.stdout.readline()
    match = re.search(r"ws://[^\s;]+", line)
    if not match:
        proc.kill()
        raise RuntimeError(f"server did not start: {line!r}; see {log_path}")
    return proc, match.group(0)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--checkpoint", default="", help="a Policy.save file (default: the built-in VLA, untrained)")
    p.add_argument("--requests", type=int, default=300)
    p.add_argument("--warmup", type=int, default=10, help="requests sent before timing")
    p.add_argument("--threads", type=int, default=0, help="torch threads of the server (0 = torch's default)")
    p.add_argument("--max-p99-ms", type=float, default=50.0)
    args = p.parse_args(argv)
    needed = [("policy", args.checkpoint, Path(args.checkpoint).is_file())]
    if args.checkpoint and report_missing("serve_latency", needed,
                                          instead="leave --checkpoint out to time the built-in VLA untrained"):
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        checkpoint = args.checkpoint
        if not checkpoint:
            from policies.vla import VLAConfig, VLAPolicy

            checkpoint = str(Path(tmp) / "vla.pt")
            VLAPolicy(VLAConfig()).save(checkpoint)
        proc, url = start_server(checkpoint, args.threads, Path(tmp) / "server.log")
        try:
            with PolicyClient(url) as client:
                m = client.metadata
                views, size = max(1, len(m["views"])), m["image_size"] or 64
                rng = np.random.default_rng(0)
                image = rng.integers(0, 256, (views, size, size, 3), dtype=np.uint8)
                obs = {"image": image,
                       "state": rng.normal(size=8).astype(np.float32),
                       "instruction": "put the black bowl on the plate"}
                for _ in range(args.warmup):
                    client.infer(obs, timeout=60)
                rtt, infer = [], []
                t0 = time.perf_counter()
                for i in range(args.requests):
                    image[0, 0, 0, 0] = i % 256  # a new frame every time, as from a camera
                    reply = client.infer(obs, timeout=10)
                    rtt.append(reply.round_trip_ms)
                    infer.append(reply.server_ms["infer"])
                elapsed = time.perf_counter() - t0
        finally:
            proc.terminate()
            proc.wait(10)
    p50, p99 = np.percentile(rtt, 50), np.percentile(rtt, 99)
    i50, i99 = np.percentile(infer, 50), np.percentile(infer, 99)
    print(f"{m['policy']}: {views} views at {size} px, chunk {m['chunk_len']}, {args.requests} requests over loopback")
    print(f"  round trip: p50 {p50:.1f} ms, p99 {p99:.1f} ms, max {max(rtt):.1f} ms "
          f"({args.requests / elapsed:.0f} requests/s)")
    print(f"  server inference: p50 {i50:.1f} ms, p99 {i99:.1f} ms")
    ok = p99 <= args.max_p99_ms
    print(f"BENCH serve_latency requests={args.requests} p50_ms={p50:.1f} p99_ms={p99:.1f} infer_p50_ms={i50:.1f} "
          f"infer_p99_ms={i99:.1f} threshold_p99_ms={args.max_p99_ms:g} {'PASS' if ok else 'FAIL'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(run_main(main))  # input errors as one line, exit 2 (infra/errors.py)
