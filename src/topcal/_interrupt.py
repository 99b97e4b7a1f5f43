"""Ctrl-C while the ``topcal`` command is still importing (about a second of numpy, pandas,
scipy): one line ``error: interrupted`` and exit code 130, as after start-up, not a
``KeyboardInterrupt`` traceback from inside some library's import.

Python runs the package's ``__init__`` before any code of the command, so the guard is set
there, first, and only when the process is the command (the ``topcal`` script or ``python -m
topcal.cli``): importing topcal as a library changes no signal handler. :func:`release`
(called by the command's ``main``) puts Python's own handler back, from where ``main`` turns
Ctrl-C into the same line.
"""

from __future__ import annotations

import os
import signal
import sys

__all__ = ["guard_cli_import", "release"]

#: Names of the console script (pip writes ``topcal``; ``topcal.exe`` / ``-script.py`` on
#: Windows).
_SCRIPT_NAMES = ("topcal", "topcal.exe", "topcal-script.py")


def _is_cli() -> bool:
    argv0 = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else ""
    if argv0 in _SCRIPT_NAMES:
        return True
    orig = list(sys.orig_argv)  # python -m topcal.cli: sys.argv[0] is still "-m"
    return any(a == "-m" and b == "topcal.cli" for a, b in zip(orig, orig[1:]))


def _interrupted(signum, frame):
    # Exit at once rather than raise: an exception raised here while a C extension
    # initialises (numpy's, under load) comes out as that library's ImportError and a
    # traceback. Nothing is written yet before ``main`` (which releases this guard), so
    # there is nothing to clean up.
    sys.stderr.write("error: interrupted\n")
    sys.stderr.flush()
    os._exit(130)


def guard_cli_import() -> None:
    """In the ``topcal`` command, answer Ctrl-C with one line and exit 130 until
    :func:`release`."""
    try:
        if _is_cli() and signal.getsignal(signal.SIGINT) is signal.default_int_handler:
            signal.signal(signal.SIGINT, _interrupted)
    except (ValueError, OSError):  # not the main thread, or no signals here
        pass


def release() -> None:
    """Python's own Ctrl-C handler again (KeyboardInterrupt), if the guard was set."""
    try:
        if signal.getsignal(signal.SIGINT) is _interrupted:
            signal.signal(signal.SIGINT, signal.default_int_handler)
    except (ValueError, OSError):
        pass
