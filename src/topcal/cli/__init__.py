"""The ``topcal`` command line: a thin layer over the library.

It parses arguments, reads files into TopLabelData, calls the library and writes files. Any
user mistake ends with exit code 2 and one line ``error: ...`` on stderr, never a traceback.

One module per command group, each with an ``add_commands(sub)`` that adds its subcommands
(``set_defaults(func=...)``; ``func(args)`` returns the exit code); :data:`COMMAND_GROUPS`
lists them, in help order. Shared options, progress lines and tables live in
:mod:`topcal.cli.common`. A new command goes into the group it belongs to, or a new module
added to :data:`COMMAND_GROUPS`.
"""

from __future__ import annotations

import functools
import sys
import warnings

from .. import _interrupt, _progress
from .._tables import EscapedStream, printable
from .._version import __version__
from ..errors import TopcalError
from ..experiments import cli as experiment_commands
from . import evaluation, models, trust
from .common import Parser, UsageError, one_line

__all__ = ["main", "build_parser", "COMMAND_GROUPS", "keep_freed_memory"]

#: The command groups, in the order of ``topcal --help``.
COMMAND_GROUPS = (
    models.add_commands,
    evaluation.add_commands,
    trust.add_commands,
    experiment_commands.add_commands,
)


def build_parser():
    parser = Parser(prog="topcal", description="Post-hoc top-label confidence calibration.")
    parser.add_argument("--version", action="version", version=f"topcal {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    for add_commands in COMMAND_GROUPS:
        add_commands(sub)
    _add_quiet(sub)
    return parser


@functools.lru_cache(maxsize=1)
def _parser():
    """The parser :func:`main` uses, built once per process: building it adds ~200 options
    (15-20 ms, most of an in-process command's overhead), and parsing leaves it as it was."""
    return build_parser()


def _add_quiet(sub) -> None:
    """``-q/--quiet`` on every command (progress bars show only on a terminal; this silences
    them)."""
    import argparse

    for p in dict.fromkeys(sub.choices.values()):
        nested = [a for a in p._actions if isinstance(a, argparse._SubParsersAction)]
        if nested:
            for a in nested:
                _add_quiet(a)
        elif "--quiet" not in p._option_string_actions:
            p.add_argument(
                "-q",
                "--quiet",
                action="store_true",
                help="no progress bars or progress lines on stderr",
            )


#: Seconds between plain progress lines when stderr is no terminal (docs/cli.md).
PROGRESS_SECONDS = 10.0


def _plain_seconds() -> float:
    """The interval of plain progress lines: $TOPCAL_PROGRESS_SECONDS, else
    :data:`PROGRESS_SECONDS`."""
    import os

    raw = os.environ.get("TOPCAL_PROGRESS_SECONDS")
    if raw is None:
        return PROGRESS_SECONDS
    try:
        value = float(raw)
    except ValueError:
        value = float("nan")
    if not (value > 0 and value < float("inf")):
        raise UsageError(
            f"TOPCAL_PROGRESS_SECONDS={raw!r} must be a positive number of seconds "
            "(or unset it for the default, 10)"
        )
    return value


def _one_line_warning(message, category, filename, lineno, file=None, line=None):
    print(f"warning: {printable(str(message))}", file=sys.stderr)


def _terminate_cleanly():
    """On SIGTERM (e.g. `kill`, a scheduler's time limit) and SIGHUP (the terminal closed)
    unwind like Ctrl-C, so half-written outputs are removed; returns a function that
    restores the previous handlers. (SIGKILL cannot be caught: its temporary files are
    removed by the next run writing the same output.)"""
    import signal
    import threading

    def handler(signum, frame):
        raise KeyboardInterrupt

    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    sigs = [signal.SIGTERM] + ([signal.SIGHUP] if hasattr(signal, "SIGHUP") else [])
    previous = {s: signal.signal(s, handler) for s in sigs}

    def restore():
        for s, h in previous.items():
            signal.signal(s, h)

    return restore


#: glibc's thresholds as the command line sets them (:func:`keep_freed_memory`): arrays up
#: to MMAP_THRESHOLD come from the heap, and up to TRIM_THRESHOLD of free heap is kept.
MMAP_THRESHOLD = 32 << 20
TRIM_THRESHOLD = 256 << 20
#: glibc's variables that set the same thresholds; where one is set, it decides.
_MALLOC_VARIABLES = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "GLIBC_TUNABLES")


def keep_freed_memory() -> bool:
    """Have glibc keep freed memory for the next array rather than hand it back at once;
    returns whether the thresholds were set.

    glibc gives a freed block of a few hundred KB or more back to the system (or trims it
    off the heap), and the next array of that size faults in fresh pages. On a virtual
    machine that reports freed pages to its host, as the 2-core benchmark machine does,
    that system time was about a tenth of ``adapt``'s time at 10^5 classes (45 -> 41 s),
    whose EM makes and drops arrays of the classes' size a few thousand times. The
    process's peak is what its largest moment holds either way; only its size between
    peaks stays up (by at most TRIM_THRESHOLD of free heap). Left alone where the C
    library is not glibc or the user set one of glibc's own variables
    (:data:`_MALLOC_VARIABLES`)."""
    import ctypes
    import os

    if any(v in os.environ for v in _MALLOC_VARIABLES):
        return False
    try:
        # glibc only: these thresholds are its allocator's (other C libraries differ)
        if not os.confstr("CS_GNU_LIBC_VERSION").startswith("glibc"):
            return False
        mallopt = ctypes.CDLL(None).mallopt  # the process's own C library
    except (AttributeError, OSError, ValueError):
        return False
    m_trim_threshold, m_mmap_threshold = -1, -3  # glibc's malloc.h
    return bool(mallopt(m_mmap_threshold, MMAP_THRESHOLD)) and bool(
        mallopt(m_trim_threshold, TRIM_THRESHOLD)
    )


def main(argv=None) -> int:
    """Entry point of the ``topcal`` command; returns the exit code."""
    keep_freed_memory()
    parser = _parser()
    restore_sigterm = _terminate_cleanly()
    old = warnings.showwarning
    warnings.showwarning = _one_line_warning
    was_quiet = _progress.quiet()
    was_plain = _progress.set_plain(None)
    stdout = sys.stdout
    # class names with terminal escapes are shown, not obeyed
    sys.stdout = EscapedStream(stdout)
    try:
        _interrupt.release()  # from here on Ctrl-C is a KeyboardInterrupt, answered below
        args = parser.parse_args(argv)
        _progress.set_quiet(was_quiet or getattr(args, "quiet", False))
        if args.command is None:
            parser.print_help(sys.stderr)
            print(
                "error: no command given; choose one of the commands above, e.g. 'topcal fit "
                "--help'",
                file=sys.stderr,
            )
            return 2
        _progress.set_plain(_plain_seconds())
        with _progress.heartbeat(args.command):
            return args.func(args)
    except (UsageError, TopcalError) as exc:
        print(f"error: {printable(one_line(exc))}", file=sys.stderr)
        return 2
    except MemoryError:
        print(
            "error: out of memory; the input or a size parameter (bins, classes) is too "
            "large for this machine",
            file=sys.stderr,
        )
        return 2
    except RecursionError:
        print("error: the input is nested too deeply to read", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # output piped into e.g. `head`, which closed early: not an error of ours; point
        # stdout at devnull so the interpreter's final flush stays quiet
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    finally:
        sys.stdout = stdout
        _progress.set_quiet(was_quiet)
        _progress.set_plain(was_plain)
        warnings.showwarning = old
        restore_sigterm()
