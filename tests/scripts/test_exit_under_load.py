"""Every exit path keeps its own status under load: a script that has read parquet and mp4, run many times at
once while other processes hold both cores, exits 2 on its input error and 0 on success every time, and a
benchmark's FAIL exits 1 every time, never -6 (SIGABRT from pyarrow's teardown race, infra/errors.py
`exit_after_cleanup`)."""
from __future__ import annotations

import json
import multiprocessing as mp
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.robot_data.test_dataset import make_episodes, write

REPO = Path(__file__).resolve().parents[2]
RUNS = 6  # per path; three at a time, beside one CPU burner per core
AT_ONCE = 3


def _burn(stop_at: float) -> None:
    while time.time() < stop_at:
        sum(i * i for i in range(10_000))


@pytest.fixture
def loaded_cores() -> Iterator[None]:
    """One busy process per core for the test's length (at most 10 minutes), stopped after it."""
    ctx = mp.get_context("spawn")
    burners = [ctx.Process(target=_burn, args=(time.time() + 600,), daemon=True) for _ in range(os.cpu_count() or 2)]
    for b in burners:
        b.start()
    yield
    for b in burners:
        b.terminate()
        b.join()


def _run_many(commands: list[list[str]], cwd: Path) -> list[subprocess.CompletedProcess]:
    def one(args: list[str]) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, *args], capture_output=True, text=True, cwd=cwd, timeout=600,
                              env={**os.environ, "PYTHONPATH": str(REPO)})

    with ThreadPoolExecutor(AT_ONCE) as pool:
        return list(pool.map(one, commands))


def _statuses(done: list[subprocess.CompletedProcess]) -> list[int]:
    return [p.returncode for p in done]


@pytest.mark.slow
def test_a_pipeline_script_exits_2_then_0_every_time_under_load(tmp_path, loaded_cores):
    good, bad = tmp_path / "good", tmp_path / "bad"
    for data in (good, bad):
        write(data, make_episodes()[:2])
    rel = "videos/observation.images.agentview/chunk-000/file-001.mp4"
    raw = bytearray((bad / rel).read_bytes())
    raw[len(raw) // 2] ^= 0x10  # a flipped bit: train_bc reads parquet and mp4, then stops on the checksum
    (bad / rel).write_bytes(bytes(raw))
    args = ["scripts/train_bc.py", "--config", "quick", "steps=1", "success_only=false", "sources=[expert,perturbed]"]
    errors = _run_many([[str(REPO / args[0]), *args[1:], f"data_dir={bad}", f"out_dir={tmp_path / f'e{i}'}"]
                        for i in range(RUNS)], tmp_path)
    assert _statuses(errors) == [2] * RUNS, [p.stderr[-300:] for p in errors if p.returncode != 2]
    for p in errors:
        assert p.stderr.splitlines() == [p.stderr.strip()] and "checksum mismatch" in p.stderr, p.stderr
    successes = _run_many([[str(REPO / args[0]), *args[1:], f"data_dir={good}", f"out_dir={tmp_path / f's{i}'}"]
                           for i in range(RUNS)], tmp_path)
    assert _statuses(successes) == [0] * RUNS, [p.stderr[-300:] for p in successes if p.returncode != 0]
    assert all((tmp_path / f"s{i}" / "policy.pt").is_file() for i in range(RUNS))


def _results(path: Path, outcomes: list[bool]) -> str:
    """An evaluate() results.json of one task, jobs 0..n-1, with these outcomes."""
    eps = [{"task_id": 0, "init_state_id": i, "seed": 0, "success": s} for i, s in enumerate(outcomes)]
    path.write_text(json.dumps({"episodes": eps}))
    return str(path)


@pytest.mark.slow
def test_a_benchmark_fail_exits_1_every_time_under_load(tmp_path, loaded_cores):
    before = _results(tmp_path / "before.json", [True, False] * 10)
    after = _results(tmp_path / "after.json", [True, False] * 10)  # no gain: FAIL
    done = _run_many([[str(REPO / "bench/seeds.py"), before, after] for _ in range(RUNS)], tmp_path)
    assert _statuses(done) == [1] * RUNS, [p.stderr[-300:] for p in done if p.returncode != 1]
    assert all("BENCH seeds" in p.stdout and p.stdout.rstrip().endswith("FAIL") for p in done)
