"""Large scratch arrays recycled within one long fit.

A cross-validated fit at many rows and classes makes, fold after fold, the same few arrays
of the data's size (a fold's training rows, their log-scores, their split into top margins
and other entries) and drops each at the end of its fold. On a virtual machine that hands
freed memory back to its host (free page reporting, as on the 2-core benchmark machine)
every fresh array then pays a page fault per 4 KB page: at 10^5 x 1,000 a 640 MB array cost
about 2 s to touch again, about a fifth of ``auto``'s fit. Inside :func:`recycling`,
:func:`empty` hands out a dropped array's memory again instead.

An array is handed out again only when nothing holds it any more: the pool keeps the owner
of each buffer, every view of it (numpy points a view's ``base`` at the owner) holds a
reference, so the owner's reference count says whether any array still uses its memory.
Outside a :func:`recycling` block :func:`empty` is ``np.empty``.
"""

from __future__ import annotations

import contextlib
import sys
import threading

import numpy as np

__all__ = ["recycling", "empty"]

#: Arrays smaller than this are left to numpy's allocator (only the data-sized ones matter).
MIN_BYTES = 16 << 20

#: A dropped buffer serves an array of at least 1 / MAX_SLACK of its size (a fold's training
#: rows take the all-data fit's: 1.25 x at 5 folds).
MAX_SLACK = 1.5


class _State(threading.local):
    pool: list | None = None  # this thread's open block's buffers


_STATE = _State()


@contextlib.contextmanager
def recycling():
    """Within the block, :func:`empty` of this thread reuses the memory of large arrays that
    nothing holds any more; it is freed when the outermost block ends."""
    outer = _STATE.pool
    if outer is not None:  # nested: the outer block's pool serves
        yield
        return
    _STATE.pool = []
    try:
        yield
    finally:
        _STATE.pool = None


def _free(pool: list, i: int) -> bool:
    # references to the owner: the pool's list entry and getrefcount's argument; a live view
    # of it adds one (no local name may hold it here)
    return sys.getrefcount(pool[i]) <= 2


def empty(shape, dtype=np.float64) -> np.ndarray:
    """An uninitialised C-contiguous array of ``shape`` (``np.empty``), inside a
    :func:`recycling` block made from a pooled buffer that no array uses any more where one
    is large enough (the smallest such)."""
    pool = _STATE.pool
    dtype = np.dtype(dtype)
    size = int(np.prod(shape, dtype=np.int64))
    nbytes = size * dtype.itemsize
    if pool is None or nbytes < MIN_BYTES:
        return np.empty(shape, dtype=dtype)
    free = [i for i in range(len(pool)) if _free(pool, i)]
    # (not one much larger: the array may live long, e.g. a fold, and would hold all of it)
    fits = [i for i in free if nbytes <= pool[i].nbytes <= nbytes * MAX_SLACK]
    if fits:
        owner = pool[min(fits, key=lambda i: pool[i].nbytes)]
    else:
        # a dropped buffer too small for this array is let go (the arrays of a fit come in a
        # few sizes that recur: kept, it would only hold memory)
        for i in sorted(free, reverse=True):
            if pool[i].nbytes < nbytes:
                del pool[i]
        owner = np.empty(nbytes, dtype=np.uint8)
        pool.append(owner)
    return owner[:nbytes].view(dtype).reshape(shape)
