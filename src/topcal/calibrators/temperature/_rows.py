"""Row helpers of the temperature family: the parameter box, the top margins of full
vectors, the logit of the top score, a guarded matrix inverse (private module of
:mod:`topcal.calibrators.temperature`)."""

from __future__ import annotations

import numpy as np

from ..._numeric import inverse_pd
from ...data import LOG_PROB_FLOOR, TopLabelData
from ..foldmemo import memo, shared
from ._core import BINARY_SCORE_FLOOR, T_MAX, T_MIN, split_top

__all__ = [
    "LOG_T",
    "inverse_pd",
    "split_rows",
    "fit_split",
    "lockstep_split",
    "class_rows",
    "binary_logit",
    "warm_start",
]

#: The box of log T every fit searches.
LOG_T = (float(np.log(T_MIN)), float(np.log(T_MAX)))


def split_rows(data: TopLabelData, idx=None, source=None):
    """Top margins d and shifted other entries O (see :func:`split_top`) of rows ``idx``.

    Logits are used as given (softmax is shift invariant, so they fit exactly like their
    log-softmax); probabilities are logged on the fly with exact zeros floored at
    :data:`~topcal.data.LOG_PROB_FLOOR`. ``source``: None, or (score matrix, its kind, row
    order) for a fit whose ``data`` holds its rows in that order without the matrix: row i
    is read from the matrix's row order[i], block by block (the same numbers as a reordered
    copy, without it).
    """
    if source is not None:
        full, kind, order = source
        rows = order if idx is None else order[idx]
        pred = data.pred if idx is None else data.pred[idx]
        return split_top(
            full, pred, log_floor=None if kind == "logits" else LOG_PROB_FLOOR, rows=rows
        )
    full = data.full if idx is None else data.full[idx]
    pred = data.pred if idx is None else data.pred[idx]
    if data.full_kind == "logits":
        return split_top(full, pred)
    return split_top(full, pred, log_floor=LOG_PROB_FLOOR)


def fit_split(data: TopLabelData, idx=None, source=None):
    """:func:`split_rows` for a fit. In a cross-validation fold
    (:func:`~topcal.calibrators.foldmemo.shared` data) the split of all the rows is made
    once for the fold's methods, and a class's rows (contiguous in the canonical order) are
    a slice of it: the same numbers, as every row's split is its own."""
    if shared(data):
        d, others = memo(data, "split", lambda: split_rows(data, None, source))
        if idx is None:
            return d, others
        a, b = int(idx[0]), int(idx[-1]) + 1
        if b - a == idx.size:
            return d[a:b], others[:, a:b]
    return split_rows(data, idx, source)


#: csts/cstswa solve their classes in lockstep on the split of all the rows at once: in a
#: cross-validation fold it is made once anyway (:func:`fit_split`); elsewhere only up to
#: this many other entries (32 MB), else class by class (one class's split at a time: peak
#: memory).
LOCKSTEP_SPLIT = 1 << 22
#: ... and only where the classes hold at most this many rows on average: csts's 5 folds at K = 10
#: (5 rounds interleaved, load 2.3-2.9), loop ÷ lockstep time 1.05-1.20 at 800 rows a class,
#: 0.99 at 1,200 and 1,600, 0.89 at 2,400, 0.90 at 8,000 (the loop's own blocks are larger).
LOCKSTEP_CLASS_ROWS = 1024


def lockstep_split(data: TopLabelData, source=None):
    """(d, others) of all the rows of ``data`` for the many-class lockstep solve
    (:func:`fit_split`), or None where the classes are large (:data:`LOCKSTEP_CLASS_ROWS`)
    or the split would be a new array above :data:`LOCKSTEP_SPLIT` entries."""
    if data.n_rows > LOCKSTEP_CLASS_ROWS * data.n_classes:
        return None
    if not shared(data) and data.n_rows * (data.n_classes - 1) > LOCKSTEP_SPLIT:
        return None
    return fit_split(data, None, source)


def class_rows(order, heads, c: int) -> np.ndarray:
    """Rows of class ``c``, ascending: ``order[heads[c]:heads[c + 1]]`` of the rows sorted
    by class (a stable argsort), or where ``order`` is None (a fit's rows in their canonical
    order are sorted by class already: no n-sized argsort) the range ``heads[c]:heads[c +
    1]``."""
    return (
        np.arange(heads[c], heads[c + 1]) if order is None else order[heads[c] : heads[c + 1]]
    )


def binary_logit(data: TopLabelData) -> np.ndarray:
    """logit of the normalised top score, clipped to [1e-12, 1 - 1e-12] first."""
    s = np.clip(data.normalized_score(), BINARY_SCORE_FLOOR, 1.0 - BINARY_SCORE_FLOOR)
    return np.log(s) - np.log1p(-s)


def warm_start(warm, c, size: int) -> np.ndarray:
    """Newton's starting point in the optimiser's coordinates (log T, A / T): zeros (T = 1,
    no award), or for a cross-validation fold's fit
    (:mod:`topcal.calibrators.select.crossfit`) the optimum of the same method on all the
    data, the fitted model ``warm``: class ``c``'s, or the shared ones for c None."""
    x = np.zeros(size)
    if warm is None:
        return x
    fitted = np.asarray(warm.fitted_classes_, bool)
    if c is None:
        if fitted.any():
            i = int(np.argmax(fitted))
            x[0] = np.log(warm.temperature_[i])
            if size > 1:
                x[1:] = np.where(fitted, warm.awards_ / warm.temperature_, 0.0)
    elif fitted[c]:
        x[0] = np.log(warm.temperature_[c])
        if size > 1:
            x[1] = warm.awards_[c] / warm.temperature_[c]
    return x
