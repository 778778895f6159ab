"""envs.errors: an input error becomes one line and exit status 2; a bug keeps its traceback."""
from __future__ import annotations

import pytest

from envs.checkpoint import CheckpointError
from envs.dataset import DatasetCorruptError
from envs.errors import one_line_errors, run_main, traceback_wanted


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
