"""What a fit keeps of its rows, so that the statistics only some users need are counted when asked for.

Every fitted model can give its label-shift confusion counts (``confusion_``,
for ``adapt``) and its mergeable score statistics (``stats_``, for ``update``
and for the saved file). Counting them costs about as much as fitting
``hist`` itself (issue 26), and most fits are never adapted or updated, so a
fit keeps a compact copy of the three columns they are counted from, the
predicted class, the top score and the true class, and
:class:`~topcal.calibrators.base.Calibrator` counts them on first use (saving,
``describe``, ``update``, ``adapt``, or reading the attribute): the same
functions on the same numbers, so the counts are bit for bit those an eager
count gives. The copy holds 8 bytes (score) plus two small integer codes per
row, a fraction of the score matrix it was fitted on, and is dropped once
both counts are made. Copies, not references: the caller may change its
arrays after the fit.
"""

from __future__ import annotations

import numpy as np

from ..data import TopLabelData

__all__ = ["FitRows"]


def _codes(values: np.ndarray, n_classes: int) -> np.ndarray:
    """Class codes in the smallest integer type that holds them (a copy)."""
    for t in (np.int8, np.int16, np.int32):
        if n_classes <= np.iinfo(t).max:
            return values.astype(t)
    return values.astype(np.int64)


class FitRows:
    """A compact copy of labelled per-sample data's predicted class, top score and true class."""

    __slots__ = ("classes", "score_range", "pred", "score", "labels")

    def __init__(self, data: TopLabelData):
        K = data.n_classes
        self.classes, self.score_range = data.classes, data.score_range
        self.pred, self.labels = _codes(data.pred, K), _codes(data.labels, K)
        self.score = np.array(data.score, dtype=np.float64)

    @classmethod
    def of(cls, data: TopLabelData) -> "FitRows | None":
        """The copy, or None where it would not give back the same counts (binned or weighted rows,
        no true classes, full score vectors the statistics are made of): count those at once."""
        if data.is_binned or data.labels is None or data.tp is None:
            return None
        right = data.labels == data.pred
        if not (np.array_equal(data.tp, right) and np.array_equal(data.fp, ~right)):
            return None  # weighted rows
        return cls(data)

    def data(self) -> TopLabelData:
        """The labelled per-sample data the counts are made from (integer codes as int64, weights 0/1)."""
        pred, labels = self.pred.astype(np.int64), self.labels.astype(np.int64)
        right = labels == pred
        return TopLabelData(self.classes, pred, self.score, self.score_range,
                            tp=right.astype(np.float64), fp=(~right).astype(np.float64), labels=labels)
