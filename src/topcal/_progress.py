"""Progress on stderr for long work, shown only where someone is watching.

One place decides whether progress is shown: :func:`enabled` is true when stderr is a
terminal and nobody asked for quiet (``topcal ... --quiet`` calls :func:`set_quiet`; the
library's callers may too). Everything long (auto's cross-validation, ``compare``,
``report``, streamed fit/apply, Dask, ``adapt``'s bootstrap, the experiments) draws its bar
with :func:`bar`; where progress is not enabled, or tqdm is not installed, the bar is a
silent stand-in with the same methods, so callers never branch.

Plain lines: where stderr is no terminal (CI, ``nohup``, ``2> log``, a notebook's
``!topcal``), the command line calls :func:`set_plain` so that long work still says it is
alive: the bars and step lines become a plain line at most every ``seconds``, and
:func:`heartbeat` prints one when nothing else did for that long (a fit, an EM or a read
without a bar). Short runs print nothing. The library alone never prints plain lines.
"""

from __future__ import annotations

import contextlib
import sys
import threading
import time

from ._tables import printable

__all__ = ["bar", "enabled", "quiet", "set_quiet", "write", "set_plain", "plain", "heartbeat"]

_QUIET = False
#: Seconds between plain progress lines (None: no plain lines; see :func:`set_plain`).
_PLAIN: float | None = None
_LOCK = threading.Lock()
_LAST = [0.0]  # when the last plain line (or the start of the plain run) was printed


def set_plain(seconds: float | None) -> float | None:
    """Plain progress lines at most every ``seconds`` where stderr is no terminal (None:
    off).

    Returns the previous setting. Starts the clock: the first line comes ``seconds`` from
    now.
    """
    global _PLAIN
    old, _PLAIN = _PLAIN, (None if seconds is None else float(seconds))
    _LAST[0] = time.monotonic()
    return old


def plain() -> bool:
    """Whether plain lines are shown: asked for, stderr no terminal, and quiet off."""
    return _PLAIN is not None and not _QUIET and not enabled()


def _plain_line(msg: str, *, force: bool = False) -> None:
    """Print ``msg`` as a plain line if the last one is at least the plain interval old."""
    with _LOCK:
        now = time.monotonic()
        if _PLAIN is None or (not force and now - _LAST[0] < _PLAIN):
            return
        _LAST[0] = now
        try:
            print(printable(msg), file=sys.stderr, flush=True)
        # stderr closed or full: progress is never worth an error
        except (OSError, ValueError):
            pass


def set_quiet(quiet: bool) -> bool:
    """Silence (True) or allow (False) progress output; returns the previous setting."""
    global _QUIET
    old, _QUIET = _QUIET, bool(quiet)
    return old


def quiet() -> bool:
    """Whether progress output was silenced with :func:`set_quiet`."""
    return _QUIET


def enabled() -> bool:
    """Whether progress is shown: stderr is a terminal and quiet is off."""
    if _QUIET:
        return False
    try:
        return bool(sys.stderr.isatty())
    except (AttributeError, ValueError):  # no stderr, or a closed one
        return False


class _Silent:
    """What :func:`bar` gives where nothing is shown: iterates, counts, closes, prints
    nothing."""

    def __init__(self, iterable=None, total=None, **_):
        self.iterable, self.total, self.n = iterable, total, 0

    def __iter__(self):
        return iter(self.iterable if self.iterable is not None else ())

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def update(self, n=1):
        self.n += n

    def set_description(self, *_, **__):
        pass

    def set_postfix_str(self, *_, **__):
        pass

    def close(self):
        pass


class _Plain(_Silent):
    """A bar that prints a plain line (``desc: n/total``) at most every plain interval."""

    def __init__(self, iterable=None, total=None, desc=None, unit="it", **_):
        super().__init__(iterable, total)
        self.desc, self.unit, self.t0 = (
            desc or "working",
            unit.strip() or "it",
            time.monotonic(),
        )

    def __iter__(self):
        for item in super().__iter__():
            yield item
            self.update()

    def update(self, n=1):
        self.n += n
        of = f"/{self.total:g}" if self.total else ""
        _plain_line(
            f"topcal: {self.desc}: {self.n:g}{of} {self.unit}, "
            f"{time.monotonic() - self.t0:.0f} s"
        )


def bar(
    iterable=None,
    *,
    total=None,
    desc: str | None = None,
    unit: str = "it",
    leave: bool = False,
    show: bool = True,
    **kwargs,
):
    """A tqdm bar on stderr where :func:`enabled`, plain lines where :func:`plain`, else
    (or with ``show=False``: a part of a larger step that has its own) a silent stand-in
    (same methods)."""
    if not show:
        return _Silent(iterable, total)
    if enabled():
        try:
            from tqdm.auto import tqdm
        except ImportError:  # pragma: no cover - tqdm is a core dependency
            pass
        else:
            return tqdm(
                iterable,
                total=total,
                desc=desc,
                unit=unit,
                leave=leave,
                file=sys.stderr,
                dynamic_ncols=True,
                **kwargs,
            )
    if plain():
        return _Plain(iterable, total, desc=desc, unit=unit)
    return _Silent(iterable, total)


def write(msg: str) -> None:
    """One progress message line on stderr where :func:`enabled` (above any bar being
    drawn); where :func:`plain`, the line if the last plain line is at least the plain
    interval old."""
    if not enabled():
        if plain():
            _plain_line(f"topcal: {msg.strip()}")
        return
    # a class name in a progress line is shown, not obeyed by the terminal
    msg = printable(msg)
    try:
        from tqdm.auto import tqdm
    except ImportError:  # pragma: no cover - tqdm is a core dependency
        print(msg, file=sys.stderr, flush=True)
    else:
        tqdm.write(msg, file=sys.stderr)


@contextlib.contextmanager
def heartbeat(what: str):
    """Around a command: where :func:`plain`, a line ``topcal WHAT: working, N s`` whenever
    no other plain line came for the plain interval (a daemon thread; stops with the block)."""
    if not plain():
        yield
        return
    stop = threading.Event()
    t0 = time.monotonic()
    step = min(1.0, _PLAIN / 4) if _PLAIN else 1.0

    def beat():
        while not stop.wait(step):
            if plain():
                _plain_line(f"topcal {what}: working, {time.monotonic() - t0:.0f} s")

    thread = threading.Thread(target=beat, name="topcal-heartbeat", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=2)
