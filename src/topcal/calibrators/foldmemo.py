"""What several methods derive alike from one cross-validation fold's training rows, derived
once.

:func:`~topcal.calibrators.select.crossfit.cross_fit` fits every candidate on the same
training part of a fold, a :class:`~topcal.data.TopLabelData` it builds itself and hands to
no one for change. The temperature family's fits all begin alike on it: a canonical row
order, the rows in that order, the split of their score vectors into top margins and other
entries (``sts``, ``tswa`` and ``csts`` the same split; at 10^5 x 10 about 0.1 s a method).
Inside :func:`sharing` (the fold's fits), :func:`memo` keeps such a result per data object
for the fold's other methods; outside it (every fit a user runs) :func:`memo` just computes,
so a user's arrays changed between two fits are never read stale. The results are shared, so
the methods treat them as read-only (as they treat their data). They are dropped when the
block ends. The fold's test part (and the first look's) is shared too while the fold's
models predict it: models of one map (a fold's ``vs`` and the map of its ``vs-hier-platt``)
compute its margins once.
"""

from __future__ import annotations

import contextlib
import threading
import weakref
from typing import Callable

__all__ = ["sharing", "shared", "memo", "memo_data", "kept"]

_LOCK = threading.Lock()
#: data object -> {key: result}; only for the data objects of an open :func:`sharing` block
_MEMO: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


@contextlib.contextmanager
def sharing(data):
    """Within the block, :func:`memo` on ``data`` (and on data derived by :func:`memo_data`)
    keeps results. Nested in a block of the same data (a fold's ``auto``, whose
    cross-validation shares its all-data fits' work), it keeps the outer block's results and
    leaves them to it."""
    derived: list = []
    with _LOCK:
        nested = data in _MEMO
        if not nested:
            _MEMO[data] = {"": derived}
    if nested:
        yield
        return
    try:
        yield
    finally:
        with _LOCK:
            for d in derived:
                _MEMO.pop(d, None)
            _MEMO.pop(data, None)


def shared(data) -> bool:
    """Whether ``data`` is in an open :func:`sharing` block."""
    return data in _MEMO


def memo(data, key: str, compute: Callable):
    """``compute()``, kept under ``key`` for ``data`` while it is shared (computed again
    otherwise)."""
    store = _MEMO.get(data)
    if store is None:
        return compute()
    if key not in store:
        store[key] = compute()
    return store[key]


def kept(data, key: str):
    """What :func:`memo` keeps under ``key`` for ``data`` (None where nothing is kept:
    ``data`` not shared, or not computed yet); computes nothing and keeps nothing."""
    store = _MEMO.get(data)
    return None if store is None else store.get(key)


def memo_data(data, key: str, compute: Callable):
    """:func:`memo` of a data object derived from ``data`` (e.g. its rows reordered), itself
    shared for as long as ``data`` is: what is memoised on it is kept too."""
    store = _MEMO.get(data)
    if store is None:
        return compute()
    if key not in store:
        out = store[key] = compute()
        with _LOCK:
            _MEMO[out] = {"": store[""]}
            store[""].append(out)
    return store[key]
