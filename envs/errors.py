"""Errors a person can read: a script that fails on its input prints one line and exits 2.

    with one_line_errors("train_bc", show_traceback=False):
        main(cfg)
    # stderr: "train_bc: policy: 'x.pt' is not a file (a Policy.save checkpoint, e.g. from train_bc.py)"

The project reports bad input with its own errors, each message starting with the config field or the
path at fault: ValueError (a bad config value; DatasetCorruptError and CheckpointError are ValueErrors
too), FileNotFoundError (a missing input) and SystemExit with a message. A traceback under such a
message tells the user nothing more and hides the one line that matters, so these print that line
alone. Any other exception is a bug and keeps its traceback. `--traceback` (envs.cli.run_script,
run_main) or VLA_TRACEBACK=1 prints the full trace of input errors too.
"""
from __future__ import annotations

import atexit
import os
import sys
import threading
import traceback
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

TRACEBACK_ENV = "VLA_TRACEBACK"
TRACEBACK_FLAG = "--traceback"
EXIT_INPUT_ERROR = 2  # as argparse exits on a bad command line
# input errors: a bad config value (ValueError and its subclasses), a missing or misplaced input file
INPUT_ERRORS: tuple[type[BaseException], ...] = (ValueError, FileNotFoundError, NotADirectoryError,
                                                 IsADirectoryError)


def traceback_wanted(flag: bool = False) -> bool:
    """True when the full trace was asked for: `flag` (--traceback) or VLA_TRACEBACK set to anything but 0."""
    return flag or os.environ.get(TRACEBACK_ENV, "").strip() not in ("", "0")


def one_line(err: BaseException | str) -> str:
    """The error's message on one line (its lines joined), or its type name when it has none."""
    text = err if isinstance(err, str) else str(err)
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    if not lines:
        return type(err).__name__
    return " ".join(lines)


@contextmanager
def one_line_errors(prog: str, show_traceback: bool = False,
                    extra: tuple[type[BaseException], ...] = ()) -> Iterator[None]:
    """Turn an input error (INPUT_ERRORS, `extra`, or a SystemExit carrying a message) raised in the block
    into "<prog>: <message>" on stderr and exit status 2; with `show_traceback`, the full trace first."""
    try:
        yield
    except SystemExit as err:
        if not isinstance(err.code, str):  # sys.exit(0), sys.exit(2), argparse's own exits: as they are
            raise
        _report(prog, err.code, show_traceback)
    except (*INPUT_ERRORS, *extra) as err:
        _report(prog, err, show_traceback)


def run_main(main: Callable[[list[str]], int | None], argv: Sequence[str] | None = None) -> int | None:
    """Run an argparse entry point `main(argv)` (the benchmarks') under `one_line_errors`, named after the
    running file; a --traceback among the arguments is taken out and asks for the full trace."""
    args = list(sys.argv[1:] if argv is None else argv)
    wanted = traceback_wanted(TRACEBACK_FLAG in args)
    with one_line_errors(Path(sys.argv[0]).stem, wanted):
        code = main([a for a in args if a != TRACEBACK_FLAG])
    if argv is None:  # the real command line: this process ends here
        exit_after_cleanup(int(code or 0))
    return code


def exit_after_cleanup(code: int = 0) -> None:
    """End a finished script: wait for its threads, run the Python exit handlers (logging, Ray, worker
    processes), flush stdout and stderr, then leave without C++ static destructors.

    Why: pyarrow's thread pools race their own teardown at interpreter exit. Now and then a script whose
    work is all done and committed dies with "terminate called without an active exception" (SIGABRT, exit
    -6; apache/arrow#34314, seen here on a collect.py run under load). Everything the Python side needs at
    exit still runs; only the native destructors, which free memory the OS takes back anyway, are skipped."""
    threading._shutdown()  # type: ignore[attr-defined]  # what the interpreter does first: join non-daemon threads
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # closed or a broken pipe: nothing left to save
            pass
    os._exit(code)


def _report(prog: str, err: BaseException | str, show_traceback: bool) -> None:
    if show_traceback:
        traceback.print_exc()
    else:
        print(f"{prog}: {one_line(err)}", file=sys.stderr)
    raise SystemExit(EXIT_INPUT_ERROR) from None


__all__ = ["EXIT_INPUT_ERROR", "INPUT_ERRORS", "TRACEBACK_ENV", "TRACEBACK_FLAG", "exit_after_cleanup", "one_line",
           "one_line_errors", "run_main", "traceback_wanted"]
