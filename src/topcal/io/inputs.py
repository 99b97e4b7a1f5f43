"""Turning what users already hold into :class:`TopLabelData`.

Calibrators' ``fit`` and ``predict`` (and :func:`topcal.compare`, :func:`topcal.report`)
accept, besides a :class:`TopLabelData`:

* a 2-d array of scores, one row a sample, one column a class: NumPy arrays, nested lists,
  or anything with ``__array__`` (a CPU torch tensor, a JAX or CuPy-on-host array), with the
  true classes ``y`` as a second argument;
* a pandas DataFrame following the column conventions of :mod:`topcal.io` (``p_<class>`` or
  ``logit_<class>`` columns, ``pred``/``score``, binned counts), its labels in a ``label``
  column or given as ``y``;
* a path to a data file (CSV, Parquet, .npz), read by :func:`topcal.io.read_data`.

One reader per form, each from the input to validated data in one step: :func:`read_arrays`
(arrays), :func:`topcal.io.read_frame` (a DataFrame, with ``y`` beside it or a label column
in it) and :func:`topcal.io.read_data` (a file); :func:`as_data` only picks one.

Probabilities or logits? ``kind="auto"`` (the default) reads a matrix as probabilities when
every entry lies in [0, 1] and every row sums to 1 (within
:data:`topcal.data.SUM_TOLERANCE`), and as logits when some entry is negative or above 1. A
matrix inside [0, 1] whose rows do not sum to 1 is rejected rather than guessed at (it is
more likely a bug, e.g. a missing column, than logits); pass ``kind="probs"`` or
``kind="logits"`` to say.
"""

from __future__ import annotations

from os import PathLike

import numpy as np

from ..data import SUM_TOLERANCE, TopLabelData
from ..errors import DataError, first_line
from . import read_data, read_frame

__all__ = ["as_data", "read_arrays", "to_array", "KINDS"]

#: Accepted values of ``kind``.
KINDS = ("auto", "probs", "logits")


def to_array(x, name: str) -> np.ndarray:
    """``x`` as a NumPy array (a tensor detached first); a one-line DataError when it cannot
    be one."""
    if hasattr(x, "detach") and getattr(x, "requires_grad", False):
        x = x.detach()  # a tensor that tracks gradients: calibration needs its values only
    try:
        return np.asarray(x)
    except (TypeError, ValueError, RuntimeError) as exc:  # e.g. a CUDA tensor
        raise DataError(
            f"cannot read {name} ({type(x).__name__}) as an array: {first_line(exc)}; "
            "move it to the CPU as a NumPy array first (tensor.cpu().numpy())"
        ) from None


def _is_frame(x) -> bool:
    import pandas as pd

    return isinstance(x, pd.DataFrame)


def _matrix_kind(m: np.ndarray) -> str:
    """'probs' or 'logits' for a finite 2-d float matrix (see the module docstring)."""
    if m.min() < 0 or m.max() > 1:
        return "logits"
    sums = m.sum(axis=1)
    off = np.abs(sums - 1.0) > SUM_TOLERANCE
    if off.any():
        i = int(np.flatnonzero(off)[0])
        raise DataError(
            f"X looks like probabilities (every value in [0, 1]) but row {i + 1} sums to "
            f"{sums[i]:.6g}, not 1; pass kind='logits' if these are logits, or normalise "
            "the rows (kind='probs' and TopLabelData.from_probs(..., renormalize=True))"
        )
    return "probs"


def _check_kind(kind: str) -> None:
    if kind not in KINDS:
        raise DataError(f"kind must be one of {', '.join(map(repr, KINDS))}, got {kind!r}")


def read_arrays(X, y=None, *, classes=None, kind: str = "auto") -> TopLabelData:
    """The array form: a 2-d score matrix ``X`` (rows x classes) and optional true classes
    ``y``.

    ``X`` is anything NumPy reads as an array (nested lists, a CPU tensor); ``kind`` says
    whether it holds probabilities or logits ("auto": see the module docstring). One step
    from the arrays to validated :class:`TopLabelData` (``from_probs`` / ``from_logits``).
    """
    _check_kind(kind)
    m = to_array(X, "X")
    if m.ndim != 2:
        raise DataError(
            f"X must be a 2-d array of scores (rows x classes), got shape {m.shape}; "
            "for top scores only, build TopLabelData.from_scores(pred, score, labels)"
        )
    if m.dtype.kind not in "biuf":
        raise DataError(
            f"X must be numeric, got dtype {m.dtype}; pass probabilities or logits"
        )
    m = m.astype(np.float64, copy=False)
    labels = None if y is None else to_array(y, "y")
    if labels is not None and labels.ndim == 2 and labels.shape[1] == 1:
        labels = labels[:, 0]
    if kind == "auto":
        if m.size and not np.all(np.isfinite(m)):
            return TopLabelData.from_probs(m, labels, classes)  # names the bad entry
        kind = _matrix_kind(m) if m.size else "probs"
    if kind == "logits":
        return TopLabelData.from_logits(m, labels, classes)
    return TopLabelData.from_probs(m, labels, classes)


def as_data(X, y=None, *, classes=None, kind: str = "auto") -> TopLabelData:
    """Build :class:`TopLabelData` from any accepted input (see the module docstring).

    Chooses the reader of the input's form: :func:`topcal.io.read_data` (a path),
    :func:`topcal.io.read_frame` (a DataFrame) or :func:`read_arrays` (anything else); each
    validates once.

    Parameters
    ----------
    X : TopLabelData, array-like of shape (n, K), pandas DataFrame, or path
        Scores of n samples over K classes (probabilities or logits).
    y : array-like of shape (n,), optional
        True classes, as names or integer column indices. Omit for data that is only to be
        calibrated (``predict``).
    classes : sequence of str, optional
        Names of the K columns (default: as :meth:`TopLabelData.from_probs`).
    kind : {"auto", "probs", "logits"}, default "auto"
        What the matrix holds.

    Returns
    -------
    TopLabelData
    """
    _check_kind(kind)
    if isinstance(X, TopLabelData):
        if y is not None:
            raise DataError(
                "y was given with a TopLabelData, which carries its own labels; pass one "
                "or the other"
            )
        return X
    if isinstance(X, (str, PathLike)):
        if y is not None:
            raise DataError(
                "y was given with a data file, which carries its own label column; pass "
                "one or the other"
            )
        return read_data(X, logits=kind == "logits", classes=classes)
    if _is_frame(X):
        return read_frame(
            X,
            y=None if y is None else to_array(y, "y"),
            logits=kind == "logits",
            classes=classes,
        )
    return read_arrays(X, y, classes=classes, kind=kind)
