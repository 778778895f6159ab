"""infra.errors: an input error becomes one line and exit status 2; a bug keeps its traceback."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from infra.checkpoint import CheckpointError
from infra.errors import _status, one_line_errors, run_main, traceback_wanted
from robot_data.dataset import DatasetCorruptError


@pytest.mark.parametrize("err", [ValueError("steps: expected >= 1, got 0"), FileNotFoundError("data_dir: x not found"),
                                 DatasetCorruptError("episode 3: data/x.parquet checksum mismatch"),
                                 CheckpointError("run/checkpoint.pt: empty file"), SystemExit("policies: required")])
def test_an_input_error_is_one_line_and_exit_2(err, capsys):
    with pytest.raises(SystemExit) as stop, one_line_errors("prog"):
        raise err
    assert stop.value.code == 2
    assert capsys.readouterr().err == f"prog: {err.args[0]}\n"


def test_a_message_of_several_lines_is_joined(capsys):
    with pytest.raises(SystemExit), one_line_errors("prog"):
        raise ValueError("config: bad value\n    full_key: steps\n")
    assert capsys.readouterr().err == "prog: config: bad value full_key: steps\n"


def test_a_bug_and_a_plain_exit_pass_through(capsys):
    with pytest.raises(KeyError), one_line_errors("prog"):
        raise KeyError("features")
    with pytest.raises(SystemExit) as stop, one_line_errors("prog"):
        raise SystemExit(0)
    assert stop.value.code == 0 and capsys.readouterr().err == ""


def test_extra_types_and_the_full_trace(capsys):
    with pytest.raises(SystemExit), one_line_errors("prog", extra=(OSError,)):
        raise OSError("port 8765 in use")
    assert capsys.readouterr().err == "prog: port 8765 in use\n"
    with pytest.raises(SystemExit) as stop, one_line_errors("prog", show_traceback=True):
        raise ValueError("steps: bad")
    err = capsys.readouterr().err
    assert stop.value.code == 2 and err.startswith("Traceback (most recent call last)") and "steps: bad" in err


def test_traceback_is_asked_for_by_flag_or_environment(monkeypatch):
    monkeypatch.delenv("VLA_TRACEBACK", raising=False)
    assert not traceback_wanted() and traceback_wanted(True)
    monkeypatch.setenv("VLA_TRACEBACK", "0")
    assert not traceback_wanted()
    monkeypatch.setenv("VLA_TRACEBACK", "1")
    assert traceback_wanted()


def test_run_main_takes_the_flag_out_of_the_arguments(monkeypatch):
    monkeypatch.delenv("VLA_TRACEBACK", raising=False)
    seen: list[list[str]] = []

    def main(argv: list[str]) -> int:
        seen.append(argv)
        return 0

    assert run_main(main, ["--x", "1", "--traceback"]) == 0
    assert seen == [["--x", "1"]]


CHILD = """
import atexit, sys, threading, time
from pathlib import Path
import pyarrow as pa, pyarrow.parquet as pq
from infra.errors import run_main
out = Path(sys.argv[1])
pq.write_table(pa.table({"x": [1, 2]}), out / "t.parquet")


class Finalized:  # a module global's __del__ runs only in the interpreter's own teardown
    def __del__(self):
        (out / "finalized").write_text("ran")


KEEP = Finalized()


def main(argv):
    assert pq.read_table(out / "t.parquet").num_rows == 2  # starts pyarrow's thread pools
    atexit.register(lambda: (out / "atexit").write_text("ran"))
    threading.Thread(target=lambda: (time.sleep(0.3), (out / "thread").write_text("joined"))).start()
    sys.stdout.write("no newline, still buffered")
    how = argv[1]
    if how == "input":
        raise ValueError("steps: expected an int, got 'x'")
    if how == "bug":
        raise RuntimeError("a bug")
    if how == "interrupt":
        raise KeyboardInterrupt
    if how == "exit_message":
        sys.exit("stopped: a message")
    return int(how)

sys.exit(run_main(main))
"""


@pytest.mark.parametrize("how, code, stderr", [
    ("0", 0, ""), ("3", 3, ""),                                      # success, a benchmark's FAIL (any status)
    ("input", 2, "steps: expected an int, got 'x'"),               # an input error: one line, 2
    ("bug", 1, "RuntimeError: a bug"),                              # a bug: traceback kept, 1
    ("interrupt", 130, "interrupted"),                              # Ctrl-C: 130
    ("exit_message", 2, "-c: stopped: a message"),                  # sys.exit("..."): an input error too
])
def test_every_exit_path_has_its_own_status_after_the_python_cleanup(tmp_path, how, code, stderr):
    """run_main on the real command line ends the process itself on every path (end_process ->
    exit_after_cleanup): the status is the path's own, threads are joined, exit handlers run, buffered output is
    flushed, and the interpreter's teardown, where pyarrow's threads race their own destructors (SIGABRT), is
    skipped: a module global's __del__ never runs."""
    repo = Path(__file__).resolve().parents[2]
    proc = subprocess.run([sys.executable, "-c", CHILD, str(tmp_path), how], cwd=repo, capture_output=True,
                          text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(repo)})
    assert proc.returncode == code, proc.stderr
    assert stderr in proc.stderr and (stderr or proc.stderr == ""), proc.stderr
    if how == "input":
        assert proc.stderr.strip().count("\n") == 0 and "Traceback" not in proc.stderr, proc.stderr
    if how == "bug":
        assert "Traceback" in proc.stderr, proc.stderr
    assert proc.stdout == "no newline, still buffered"
    assert (tmp_path / "atexit").read_text() == "ran"
    assert (tmp_path / "thread").read_text() == "joined"
    assert not (tmp_path / "finalized").exists(), "the interpreter's teardown ran"


def test_end_process_refuses_a_status_that_is_not_an_int():
    with pytest.raises(TypeError, match="exit status"):
        _status("1")
    assert _status(None) == 0 and _status(2) == 2
