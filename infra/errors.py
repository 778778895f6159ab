"""Errors a person can read: a script that fails on its input prints one line and exits 2.

    with one_line_errors("train_bc", show_traceback=False):
        main(cfg)
    # stderr: "train_bc: policy: 'x.pt' is not a file (a Policy.save checkpoint, e.g. from train_bc.py)"

The project reports bad input with its own errors, each message starting with the config field or the
path at fault: ValueError (a bad config value; DatasetCorruptError and CheckpointError are ValueErrors
too), FileNotFoundError (a missing input) and SystemExit with a message. A traceback under such a
message tells the user nothing more and hides the one line that matters, so these print that line
alone. Any other exception is a bug and keeps its traceback. `--traceback` (infra.cli.run_script,
run_main) or VLA_TRACEBACK=1 prints the full trace of input errors too.

Every entry point run from the command line ends through `end_process`, on every path: 0 on success, 2 on
an input error, 1 on a bug (traceback kept) or a benchmark's FAIL, 130 on Ctrl-C.
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
from typing import NoReturn

TRACEBACK_ENV = "VLA_TRACEBACK"
TRACEBACK_FLAG = "--traceback"
EXIT_INPUT_ERROR = 2  # as argparse exits on a bad command line
EXIT_INTERRUPTED = 130  # Ctrl-C: 128 + SIGINT, what shells report for a process the user interrupted
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
    running file; a --traceback among the arguments is taken out and asks for the full trace. With the real
    command line (`argv` None) the process ends here, through `end_process`, with main's own status."""
    args = list(sys.argv[1:] if argv is None else argv)

    def run() -> int | None:
        wanted = traceback_wanted(TRACEBACK_FLAG in args)
        with one_line_errors(Path(sys.argv[0]).stem, wanted):
            return main([a for a in args if a != TRACEBACK_FLAG])

    if argv is None:  # the real command line: this process ends here, on every path
        end_process(run)
    return run()


def end_process(job: Callable[[], int | None]) -> NoReturn:
    """Run `job` as the whole work of this process, then end it through `exit_after_cleanup` on every path,
    with the status a wrapper (shell, SLURM, Ray) reads:

        returned n (None: 0)             n          (a benchmark's FAIL returns 1)
        SystemExit                        its code   (input errors: 2, from one_line_errors; argparse: 2)
        KeyboardInterrupt (Ctrl-C)        130        (128 + SIGINT, as shells report it)
        any other exception               1          (a bug: its traceback is printed first)

    Why one path: an exception that leaves the script through the interpreter's own teardown meets the same
    pyarrow exit race as a success did (exit_after_cleanup), and dies with SIGABRT (-6) after its message."""
    try:
        code = _status(job())
    except SystemExit as err:
        if isinstance(err.code, str):  # sys.exit("message"): the interpreter prints it and exits 1
            print(err.code, file=sys.stderr)
            code = 1
        else:
            code = _status(err.code)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        code = EXIT_INTERRUPTED
    except BaseException:  # a bug: keep its traceback
        traceback.print_exc()
        code = 1
    exit_after_cleanup(code)


def _status(code: object) -> int:
    """A process exit status from what a job returned or SystemExit carried (None: 0)."""
    if code is None:
        return 0
    if isinstance(code, bool) or not isinstance(code, int):
        raise TypeError(f"an entry point returned {code!r}; expected an exit status (int) or None")
    return code


def exit_after_cleanup(code: int = 0) -> NoReturn:
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


__all__ = ["EXIT_INPUT_ERROR", "EXIT_INTERRUPTED", "INPUT_ERRORS", "TRACEBACK_ENV", "TRACEBACK_FLAG", "end_process",
           "exit_after_cleanup", "one_line", "one_line_errors", "run_main", "traceback_wanted"]
