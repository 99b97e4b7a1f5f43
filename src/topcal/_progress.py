"""Progress bars on stderr for long work (tqdm), shown only where someone is watching.

One place decides whether progress is shown: :func:`enabled` is true when stderr
is a terminal and nobody asked for quiet (``topcal ... --quiet`` calls
:func:`set_quiet`; the library's callers may too). Everything long (auto's
cross-validation, ``compare``, ``report``, streamed fit/apply, Dask, ``adapt``'s
bootstrap, the experiments) draws its bar with :func:`bar`; where progress is not
enabled, or tqdm is not installed, the bar is a silent stand-in with the same
methods, so callers never branch.
"""

from __future__ import annotations

import sys

from ._tables import printable

__all__ = ["bar", "enabled", "quiet", "set_quiet", "write"]

_QUIET = False


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
    """What :func:`bar` gives where nothing is shown: iterates, counts, closes, prints nothing."""

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


def bar(iterable=None, *, total=None, desc: str | None = None, unit: str = "it", leave: bool = False, **kwargs):
    """A tqdm bar on stderr where :func:`enabled`, else a silent stand-in (same methods)."""
    if enabled():
        try:
            from tqdm.auto import tqdm
        except ImportError:  # pragma: no cover - tqdm is a core dependency
            pass
        else:
            return tqdm(iterable, total=total, desc=desc, unit=unit, leave=leave, file=sys.stderr,
                        dynamic_ncols=True, **kwargs)
    return _Silent(iterable, total)


def write(msg: str) -> None:
    """One progress message line on stderr where :func:`enabled` (above any bar being drawn)."""
    if not enabled():
        return
    msg = printable(msg)  # a class name in a progress line is shown, not obeyed by the terminal
    try:
        from tqdm.auto import tqdm
    except ImportError:  # pragma: no cover - tqdm is a core dependency
        print(msg, file=sys.stderr, flush=True)
    else:
        tqdm.write(msg, file=sys.stderr)
