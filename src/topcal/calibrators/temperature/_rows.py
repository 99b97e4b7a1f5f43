"""Row helpers of the temperature family: the parameter box, the top margins of full vectors, the logit
of the top score, a guarded matrix inverse (private module of :mod:`topcal.calibrators.temperature`)."""

from __future__ import annotations

import numpy as np

from ...data import LOG_PROB_FLOOR, TopLabelData
from ._core import BINARY_SCORE_FLOOR, T_MAX, T_MIN, split_top

__all__ = ["LOG_T", "inverse_pd", "split_rows", "binary_logit"]

#: The box of log T every fit searches.
LOG_T = (float(np.log(T_MIN)), float(np.log(T_MAX)))


def inverse_pd(h: np.ndarray):
    """Inverse of a symmetric positive definite matrix, None where it is not (Cholesky fails)."""
    if h.size == 0 or not np.all(np.isfinite(h)):
        return None
    try:
        c = np.linalg.cholesky(h)
    except np.linalg.LinAlgError:
        return None
    ci = np.linalg.inv(c)
    return ci.T @ ci


def split_rows(data: TopLabelData, idx=None):
    """Top margins d and shifted other entries O (see :func:`split_top`) of rows ``idx``.

    Logits are used as given (softmax is shift invariant, so they fit exactly
    like their log-softmax); probabilities are logged on the fly with exact
    zeros floored at :data:`~topcal.data.LOG_PROB_FLOOR`.
    """
    full = data.full if idx is None else data.full[idx]
    pred = data.pred if idx is None else data.pred[idx]
    if data.full_kind == "logits":
        return split_top(full, pred)
    return split_top(full, pred, log_floor=LOG_PROB_FLOOR)


def binary_logit(data: TopLabelData) -> np.ndarray:
    """logit of the normalised top score, clipped to [1e-12, 1 - 1e-12] first."""
    s = np.clip(data.normalized_score(), BINARY_SCORE_FLOOR, 1.0 - BINARY_SCORE_FLOOR)
    return np.log(s) - np.log1p(-s)
