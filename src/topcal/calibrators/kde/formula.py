"""The bare formula Conf_KDE (paper eqs. 7-9) by direct summation: ``kde_confidence``.

For the calibrators' fitted curves see :mod:`topcal.calibrators.kde.methods`; this function
is for figures and checks (e.g. the paper's Fig. 6 "diluted" curve: add negatives as FP).
"""

from __future__ import annotations

from typing import cast

import numpy as np

from ...errors import DataError, ParameterError
from . import _engine as eng

__all__ = ["kde_confidence"]


def kde_confidence(
    eval_scores, scores, tp_weight, fp_weight, bandwidth, *, boundary=None
) -> np.ndarray:
    """Conf_KDE at ``eval_scores`` from scores with TP/FP weights, by direct summation.

    Computed with a per-point shift in the exponent (log-sum-exp), so it is defined
    everywhere, also far from the data where both kernel sums underflow (there it tends to
    the ratio at the nearest kernel centre). No clamping to the data's support (the
    calibrators add that).

    Parameters
    ----------
    eval_scores : array-like, shape (m,)
        Where to evaluate.
    scores : array-like, shape (n,)
        Kernel centres (the class's positive scores, or bin midpoints).
    tp_weight, fp_weight : array-like, shape (n,)
        Non-negative weights: 1/0 per sample, or counts. Pass the negatives' scores as extra
        FP weight to get the paper's "diluted" curve (Fig. 6).
    bandwidth : float
        Kernel standard deviation b > 0, in score units.
    boundary : (float, float) or None, default None
        Hard score limits (lo, hi) at which kernels are reflected.

    Returns
    -------
    ndarray, shape (m,)
        Values in [0, 1].
    """
    x = np.atleast_1d(np.asarray(eval_scores, dtype=np.float64))
    s = np.atleast_1d(np.asarray(scores, dtype=np.float64))
    t = np.atleast_1d(np.asarray(tp_weight, dtype=np.float64))
    f = np.atleast_1d(np.asarray(fp_weight, dtype=np.float64))
    if x.ndim != 1 or s.ndim != 1 or t.shape != s.shape or f.shape != s.shape:
        raise DataError(
            "kde_confidence: scores, tp_weight and fp_weight must be 1-d of one length, "
            f"got {s.shape}, {t.shape}, {f.shape}; pass one weight per score"
        )
    for name, a in (("eval_scores", x), ("scores", s), ("tp_weight", t), ("fp_weight", f)):
        if not np.all(np.isfinite(a)):
            raise DataError(
                f"kde_confidence: {name} has non-finite values; remove NaN/inf first"
            )
    if (t < 0).any() or (f < 0).any() or (t + f).sum() <= 0:
        raise DataError(
            "kde_confidence: tp_weight and fp_weight must be >= 0 with a positive total; "
            "pass at least one sample with weight"
        )
    if (
        isinstance(bandwidth, bool)
        or not np.isscalar(bandwidth)
        or not (float(cast(float, bandwidth)) > 0)
        or not np.isfinite(bandwidth)
    ):
        raise ParameterError(
            "kde_confidence: parameter 'bandwidth' must be a finite number > 0, got "
            f"{bandwidth!r}; pass the kernel standard deviation in score units"
        )
    bounds = _check_boundary(boundary)
    return eng.exact_confidence(x, s, t, f, float(cast(float, bandwidth)), bounds)


def _check_boundary(boundary):
    if boundary is None:
        return None
    try:
        lo, hi = (float(v) for v in boundary)
    except (TypeError, ValueError):
        raise ParameterError(
            f"kde_confidence: parameter 'boundary' must be None or (lo, hi), got {boundary!r}"
        ) from None
    if not (np.isfinite(lo) and np.isfinite(hi) and lo < hi):
        raise ParameterError(
            f"kde_confidence: parameter 'boundary' must have lo < hi, got {boundary!r}"
        )
    return (lo, hi)


# ------------------------------------------------------------ estimators
