"""What the overall metrics share: the checked inputs, parameter checks, the
:class:`Estimate`."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..data import TopLabelData
from ..errors import ParameterError
from ..metrics import nll as class_nll

#: Default level of every interval.
LEVEL = 0.9
#: Default number of bootstrap resamples.
RESAMPLES = 1000
# Sub-bins per equal-width bin: what a resample knows of the confidences inside a bin.
SUB_BINS = 64
# Resamples drawn together (bounds memory at ~100 x cells floats).
CHUNK = 100
# The calibration loss's recalibration: Platt scaling on logit(confidence), 5 folds, fitted
# on the logits binned to this many cells (the fit then costs nothing next to reading the
# rows).
RECAL_FOLDS = 5
RECAL_CELLS = 4096


@dataclass(frozen=True)
class Estimate:
    """A metric's value with its interval.

    Attributes
    ----------
    value : float or None
        None where the metric is undefined (``reason`` says why).
    lo, hi : float or None
        The interval's ends at the level asked for; None where no interval exists (too few
        samples: ``reason`` says why).
    reason : str or None
        Why the value or the interval is missing.
    """

    value: float | None
    lo: float | None = None
    hi: float | None = None
    reason: str | None = None

    def to_dict(self) -> dict:
        """``{"value", "lo", "hi"}`` (plus ``"reason"`` where one is missing), JSON-ready."""
        out: dict = {"value": self.value, "lo": self.lo, "hi": self.hi}
        if self.reason is not None:
            out["reason"] = self.reason
        return out


@dataclass(frozen=True)
class Rows:
    """The checked inputs: confidence, weights of right (tp) and wrong (fp) predictions."""

    c: np.ndarray
    tp: np.ndarray
    fp: np.ndarray
    pred: np.ndarray
    n_classes: int

    @property
    def total(self) -> float:
        return float(self.tp.sum() + self.fp.sum())


def rows_of(data: TopLabelData, confidence) -> Rows:
    class_nll(data, confidence)  # the one check of data and confidences (layer 2's rules)
    c = np.asarray(confidence, dtype=np.float64)
    return Rows(
        c, data.tp.astype(np.float64), data.fp.astype(np.float64), data.pred, data.n_classes
    )


def check_level(level, resamples, seed) -> None:
    if isinstance(level, bool) or not isinstance(level, (int, float)) or not 0 < level < 1:
        raise ParameterError(f"parameter 'level' must be a number in (0, 1), got {level!r}")
    if (
        isinstance(resamples, bool)
        or not isinstance(resamples, (int, np.integer))
        or not (10 <= resamples <= 100_000)
    ):
        raise ParameterError(
            f"parameter 'resamples' must be an integer in [10, 100000], got {resamples!r}"
        )
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ParameterError(f"parameter 'seed' must be an integer >= 0, got {seed!r}")


