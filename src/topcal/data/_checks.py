"""The numeric checks :class:`TopLabelData`'s constructors share (finite values, shapes, the
score range).

Every check raises a one-line :class:`~topcal.errors.DataError` naming the array, the row
and the fix.
"""

from __future__ import annotations

import numpy as np

from ..errors import DataError

#: Floor of probabilities before their logs are taken (temperature and vector scaling, label
#: shift): log(max(p, LOG_PROB_FLOOR)), the smallest normal float32 number (about 1.18e-38).
#: Below it a float32 softmax output (most networks') holds only exact zeros and denormals,
#: and a float64 output (a naive Bayes classifier's) differs only in how far it underflowed:
#: with the former floor 1e-300, exact zeros sat hundreds of nats below such entries and set
#: the temperature (digits with naive Bayes: held-out NLL of sts 0.60, 0.39 at this floor).
#: probmetrics floors its logits at the same value; scikit-learn takes log(p + 1e-12).
#: Entries above it are unchanged.
LOG_PROB_FLOOR = float(np.finfo(np.float32).tiny)

#: Default tolerance on |sum of a probability row - 1|. float32 softmax outputs of 1000
#: classes sum to 1 within ~1e-5; 1e-4 accepts them and still catches a missing column or
#: unnormalised scores.
SUM_TOLERANCE = 1e-4

#: Most samples (total weight) one data set or model may hold: 2^53, the largest count
#: float64 adds exactly; beyond it rates such as TP / (TP + FP) round to 0 or 1 and a model
#: is not valid.
MAX_SAMPLES = 2.0**53


def check_sample_total(total: float, what: str = "the data") -> None:
    """Raise a DataError when ``total`` samples exceed :data:`MAX_SAMPLES`."""
    if not total <= MAX_SAMPLES:
        raise DataError(
            f"{what} holds {total:.3g} samples, more than 2^53 ({MAX_SAMPLES:.3g}), the "
            "largest count float64 adds exactly; scale the tp/fp counts down by a common "
            "factor"
        )


#: Narrowest accepted score range, relative to max(1, |lo|, |hi|): below it the rescaled
#: scores (S - lo) / (hi - lo) lose their precision, and (0, 1e-300) made widths like (hi -
#: lo) / 4096 underflow to 0.
MIN_RANGE_WIDTH = 1e-9


def _float_array(x, name: str, ndim: int) -> np.ndarray:
    """``x`` as a non-empty float64 array of ``ndim`` dimensions (no copy where it is one)."""
    try:
        arr = np.asarray(x, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise DataError(
            f"{name} must be numeric: {exc}; convert the column to numbers"
        ) from None
    if arr.ndim != ndim:
        shape = (
            "a 1-d array (one value per row)" if ndim == 1 else "a 2-d array (rows x classes)"
        )
        raise DataError(f"{name} must be {shape}, got shape {arr.shape}")
    if arr.size == 0:
        raise DataError(f"{name} is empty; topcal needs at least one row")
    return arr


def as_float_array(x, name: str, ndim: int) -> np.ndarray:
    arr = _float_array(x, name, ndim)
    bad = ~np.isfinite(arr)
    if bad.any():
        where = np.argwhere(bad)[0]
        if ndim == 1:
            loc = f"row {where[0] + 1}"
        else:
            loc = f"row {where[0] + 1}, column {where[1] + 1}"
        raise DataError(
            f"{name} has a non-finite value ({arr[tuple(where)]}) at {loc}; "
            "remove or impute NaN/inf before calibrating"
        )
    return arr


#: Elements per block in the one-pass validation of an (n, K) matrix (2 MB: the block's
#: temporaries stay in cache and no n x K temporary is made).
_BLOCK_ELEMENTS = 1 << 18


def as_matrix(x, name: str) -> np.ndarray:
    """An (n, K) float64 array, without copying one that already is; finiteness is checked
    by the caller."""
    return _float_array(x, name, 2)


def row_blocks(n: int, k: int):
    step = max(1, _BLOCK_ELEMENTS // max(k, 1))
    for a in range(0, n, step):
        yield a, min(a + step, n)


def check_finite_rows(
    block: np.ndarray, row_sums: np.ndarray, name: str, first_row: int
) -> None:
    """Raise for the first non-finite value of ``block``; ``row_sums`` finite proves there
    is none."""
    if np.isfinite(row_sums).all():  # NaN or +-inf anywhere in a row makes its sum non-finite
        return
    bad = ~np.isfinite(block)
    if bad.any():  # else the sum overflowed from finite values
        r, c = np.argwhere(bad)[0]
        raise DataError(
            f"{name} has a non-finite value ({block[r, c]}) at row {first_row + r + 1}, "
            f"column {c + 1}; remove or impute NaN/inf before calibrating"
        )


def check_range(score_range) -> tuple[float, float]:
    try:
        lo, hi = (float(v) for v in score_range)
    except (TypeError, ValueError):
        raise DataError(
            f"score_range must be two numbers (lo, hi), got {score_range!r}"
        ) from None
    if not (np.isfinite(lo) and np.isfinite(hi) and lo < hi):
        raise DataError(f"score_range must be finite with lo < hi, got ({lo:g}, {hi:g})")
    if hi - lo < MIN_RANGE_WIDTH * max(1.0, abs(lo), abs(hi)):
        raise DataError(
            f"score_range ({lo:g}, {hi:g}) is too narrow: its width must be at least "
            f"{MIN_RANGE_WIDTH:g} of its largest bound (or of 1); rescale the scores"
        )
    return lo, hi


def check_scores_in_range(
    score: np.ndarray, lo: float, hi: float, name: str = "score"
) -> None:
    # A relative slack of 1e-9 of the range absorbs round-off (e.g. a sum of ten softmax
    # outputs that comes to 10.000000000000002).
    slack = 1e-9 * (hi - lo)
    bad = (score < lo - slack) | (score > hi + slack)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise DataError(
            f"{name} {float(score[i]):g} at row {i + 1} is outside the declared score "
            f"range [{lo:g}, {hi:g}]; declare a score_range (--score-range LO HI) that "
            "covers every score"
        )


def check_row_index(index, n: int) -> np.ndarray:
    """``index`` (integer row indices, negative from the end, or a boolean mask of ``n``
    entries) as a 1-d integer array of rows in range; one-line DataError otherwise."""
    try:
        idx = np.asarray(index)
    except (TypeError, ValueError):
        idx = np.asarray([None])  # ragged: reported below as what it is not
    if idx.dtype == bool:
        if idx.shape != (n,):
            raise DataError(
                f"a boolean subset mask needs one entry per row ({n}), got shape {idx.shape}"
            )
        idx = np.flatnonzero(idx)
    if idx.ndim != 1 or idx.dtype.kind not in "iu":
        raise DataError(
            "subset takes a 1-d sequence of integer row indices or a boolean mask, got "
            f"{'dtype ' + str(idx.dtype) if idx.ndim == 1 else f'shape {idx.shape}'}"
        )
    if idx.size == 0:
        raise DataError("subset is empty; select at least one row")
    lo, hi = int(idx.min()), int(idx.max())
    if lo < -n or hi >= n:
        raise DataError(
            f"subset index {lo if lo < -n else hi} is out of range for {n} rows "
            f"(valid: {-n}..{n - 1})"
        )
    return idx
