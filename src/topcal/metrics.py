"""Top-label metrics: plain functions of (data, confidence).

Every loss here is the *binary* loss of the top-label problem (Gupta and Ramdas 2022; paper
eqs. 14-15): for class k only the positives P_k (rows predicted as k) count; a true positive
has label 1, a false positive label 0, and ``confidence`` is the predicted probability of
label 1. Rows are weighted by their TP/FP counts, so binned and per-sample data give the
same numbers.

Each metric returns a :class:`ClassMetric`: one value per class (NaN for a class with no
positives) and one overall value:

* NLL and Brier: ``overall`` is the mean over all samples; ``per_class`` the mean over the
  class's positives.
* ECE1 / ECE2: ``per_class`` is the binned calibration error of the class's positives (L1:
  sum_b w_b |acc_b - conf_b|, L2: sqrt(sum_b w_b (acc_b - conf_b)^2), w_b the share of the
  class's weight in bin b); ``overall`` is the top-label ECE, the positive-weighted mean
  over classes (for ECE2, the root of the weighted mean of squares).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from ._params import check_bin_count
from ._numeric import PROB_CLIP, bin_index, binary_nll, weighted_quantile_edges
from ._typing import ArrayLike
from .data import TopLabelData
from .errors import DataError, ParameterError

__all__ = [
    "PROB_CLIP",
    "ClassMetric",
    "confusion_matrix",
    "reverse_confusion_matrix",
    "conf1",
    "nll",
    "brier",
    "vector_nll",
    "vector_brier",
    "ece",
    "ece1",
    "ece2",
    "summary",
    "SUMMARY_COLUMNS",
    "bundle",
    "BUNDLE",
]

# PROB_CLIP (the NLL's clip of confidences) is defined in topcal._numeric, re-exported here.


@dataclass(frozen=True)
class ClassMetric:
    """A metric per predicted class and overall.

    Attributes
    ----------
    name : str
    classes : tuple of str
    per_class : ndarray of shape (K,)
        NaN for classes with no positives.
    overall : float
    """

    name: str
    classes: tuple[str, ...]
    per_class: np.ndarray
    overall: float

    def to_dict(self) -> dict:
        """{"overall": float, "per_class": {class: float or None}}."""
        return {
            "overall": float(self.overall),
            "per_class": {
                c: (None if np.isnan(v) else float(v))
                for c, v in zip(self.classes, self.per_class)
            },
        }


def _check(data: TopLabelData, confidence) -> np.ndarray:
    if not isinstance(data, TopLabelData):
        raise DataError(f"metrics expect a TopLabelData, got {type(data).__name__}")
    data.require_labels("computing a calibration metric")
    c = np.asarray(confidence, dtype=np.float64)
    if c.shape != (data.n_rows,):
        raise DataError(
            f"confidence has shape {c.shape} but the data has {data.n_rows} rows; give one "
            f"confidence per row"
        )
    bad = ~np.isfinite(c) | (c < 0) | (c > 1)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise DataError(
            f"confidence {float(c[i]):g} at row {i + 1} is not a probability in [0, 1]; "
            "rescale the scores first"
        )
    return c


def _per_class_mean(data: TopLabelData, loss_rows: np.ndarray, name: str) -> ClassMetric:
    k = data.n_classes
    w = data.tp + data.fp
    tot = np.bincount(data.pred, weights=loss_rows, minlength=k)
    cnt = np.bincount(data.pred, weights=w, minlength=k)
    with np.errstate(invalid="ignore", divide="ignore"):
        per = np.where(cnt > 0, tot / np.where(cnt > 0, cnt, 1.0), np.nan)
    return ClassMetric(name, data.classes, per, float(tot.sum() / cnt.sum()))


def nll(data: TopLabelData, confidence: ArrayLike) -> ClassMetric:
    """Top-label binary negative log-likelihood (paper eq. 14), mean per sample.

    -[tp log c + fp log(1 - c)] per row, with c clipped to [PROB_CLIP, 1 - PROB_CLIP].
    """
    return _nll(data, _check(data, confidence))


def _nll(data: TopLabelData, c: np.ndarray) -> ClassMetric:  # c checked by the caller
    return _per_class_mean(data, binary_nll(data.tp, data.fp, c), "nll")


def brier(data: TopLabelData, confidence: ArrayLike) -> ClassMetric:
    """Top-label Brier score (paper eq. 15), mean per sample: tp (1 - c)^2 + fp c^2."""
    return _brier(data, _check(data, confidence))


def _brier(data: TopLabelData, c: np.ndarray) -> ClassMetric:  # c checked by the caller
    return _per_class_mean(data, data.tp * (1.0 - c) ** 2 + data.fp * c**2, "brier")


def check_vectors(data: TopLabelData, proba: ArrayLike) -> np.ndarray:
    """``proba`` checked as one probability vector per row of labelled per-sample ``data``."""
    if not isinstance(data, TopLabelData):
        raise DataError(f"metrics expect a TopLabelData, got {type(data).__name__}")
    data.require_labels("computing a full-vector metric")
    if data.labels is None:
        raise DataError(
            "full-vector metrics need each row's true class; binned counts have none"
        )
    p = np.asarray(proba, dtype=np.float64)
    if p.shape != (data.n_rows, data.n_classes):
        raise DataError(
            f"the probability vectors have shape {p.shape} but the data has {data.n_rows} "
            f"rows and {data.n_classes} classes; give one probability per row and class"
        )
    bad = ~np.isfinite(p) | (p < 0) | (p > 1)
    off = np.abs(p.sum(axis=1) - 1.0) > 1e-6
    if bad.any() or off.any():
        i = int(np.flatnonzero(bad.any(axis=1) | off)[0])
        raise DataError(
            f"row {i + 1} of the probability vectors is not a probability vector (entries in "
            "[0, 1] summing to 1); give calibrated probabilities, not scores"
        )
    return p


def vector_nll(data: TopLabelData, proba: ArrayLike) -> ClassMetric:
    """Full-vector negative log-likelihood (multinomial log loss), mean per sample: -log p_y
    with p_y clipped to [PROB_CLIP, 1], ``proba`` one row per sample and one column per
    class of ``data.classes``; ``per_class`` by predicted class, as the top-label metrics."""
    p = check_vectors(data, proba)
    py = p[np.arange(data.n_rows), data.labels]
    return _per_class_mean(data, -np.log(np.maximum(py, PROB_CLIP)), "vector_nll")


def vector_brier(data: TopLabelData, proba: ArrayLike) -> ClassMetric:
    """Full-vector Brier score, mean per sample: sum_j (p_j - [y = j])^2 (0 to 2)."""
    p = check_vectors(data, proba)
    rows = np.arange(data.n_rows)
    py = p[rows, data.labels]
    loss = np.einsum("ij,ij->i", p, p) - 2.0 * py + 1.0
    return _per_class_mean(data, np.maximum(loss, 0.0), "vector_brier")


def _ece_bins(conf: np.ndarray, w: np.ndarray, n_bins: int, strategy: str) -> np.ndarray:
    if strategy == "uniform":
        edges = np.linspace(0.0, 1.0, n_bins + 1)
    else:
        edges = weighted_quantile_edges(conf, w, n_bins, 0.0, 1.0)
    # bins (a, b], the first one closed: same convention as the histogram calibrator and
    # scikit-learn's calibration_curve
    return bin_index(edges, conf)


def ece(
    data: TopLabelData,
    confidence: ArrayLike,
    *,
    norm: int = 1,
    n_bins: int = 10,
    strategy: str = "uniform",
) -> ClassMetric:
    """Binned expected calibration error per class and top-label overall.

    Parameters
    ----------
    data : TopLabelData (labelled)
    confidence : array-like of shape (n_rows,)
    norm : {1, 2}, default 1
        1 for ECE1 (mean absolute gap), 2 for ECE2 (root mean squared gap).
    n_bins : int, default 10
    strategy : {"uniform", "quantile"}, default "uniform"
        Equal-width bins on [0, 1], or equal-mass bins per class.
    """
    if norm not in (1, 2):
        raise ParameterError(f"ece: parameter 'norm' must be 1 or 2, got {norm!r}")
    check_bin_count(n_bins, owner="ece")
    if strategy not in ("uniform", "quantile"):
        raise ParameterError(
            f"ece: parameter 'strategy' must be 'uniform' or 'quantile', got {strategy!r}"
        )
    return _ece(data, _check(data, confidence), norm, n_bins, strategy)


def _ece(
    data: TopLabelData, c: np.ndarray, norm: int, n_bins: int, strategy: str
) -> ClassMetric:
    """:func:`ece` of confidences ``c`` already checked (and parameters already validated)."""
    k = data.n_classes
    w = data.tp + data.fp
    per = np.full(k, np.nan)
    cnt = np.bincount(data.pred, weights=w, minlength=k)
    if strategy == "uniform":
        b = _ece_bins(c, w, n_bins, strategy)
        # only the (class, bin) cells that hold rows: memory O(rows), not O(classes x bins)
        cells, inv = np.unique(data.pred.astype(np.int64) * n_bins + b, return_inverse=True)
        inv = inv.ravel()
        wb = np.bincount(inv, weights=w, minlength=cells.size)
        tb = np.bincount(inv, weights=data.tp, minlength=cells.size)
        cb = np.bincount(inv, weights=w * c, minlength=cells.size)
        _cell_gaps(wb, tb, cb, cells // n_bins, cnt, norm, per)
    else:
        for i in np.flatnonzero(cnt > 0):
            m = data.pred == i
            b = _ece_bins(c[m], w[m], n_bins, strategy)
            nb = int(b.max()) + 1
            wbi = np.bincount(b, weights=w[m], minlength=nb)
            tbi = np.bincount(b, weights=data.tp[m], minlength=nb)
            cbi = np.bincount(b, weights=w[m] * c[m], minlength=nb)
            nz = wbi > 0
            gap = np.abs(tbi[nz] - cbi[nz]) / wbi[nz]
            share = wbi[nz] / cnt[i]
            per[i] = np.sum(share * gap) if norm == 1 else np.sqrt(np.sum(share * gap**2))
    has = cnt > 0
    share = cnt[has] / cnt[has].sum()
    if norm == 1:
        overall = float(np.sum(share * per[has]))
    else:
        overall = float(np.sqrt(np.sum(share * per[has] ** 2)))
    return ClassMetric(f"ece{norm}", data.classes, per, overall)


def _cell_gaps(wb, tb, cb, cls, cnt, norm: int, per) -> None:
    """Each class's ECE into ``per`` from its (class, bin) cells' weights ``wb``, TPs ``tb``
    and confidence sums ``cb`` (cells sorted by class ``cls``): the share-weighted mean gap
    (norm 1), or the root of its squares (norm 2), over its non-empty bins.

    One pass over the cells. A class's terms are added one after the other, as ``np.sum``
    adds fewer than 8 numbers, so the figures are a class-at-a-time ``np.sum``'s bit for bit;
    a class with 8 or more non-empty bins (where np.sum pairs them) is summed by np.sum
    itself. The class-at-a-time loop cost ~8 microseconds a class: seconds a call at 10^5
    classes."""
    keep = (wb > 0) & (cnt[cls] > 0)
    w, t, c, owner = wb[keep], tb[keep], cb[keep], cls[keep]
    if owner.size == 0:
        return
    gap = np.abs(t - c) / w
    share = w / cnt[owner]
    term = share * gap if norm == 1 else share * gap**2
    starts = np.flatnonzero(np.r_[True, owner[1:] != owner[:-1]])
    size = np.diff(np.r_[starts, owner.size])
    total = np.zeros(starts.size)
    for j in range(int(min(size.max(), 7))):  # ((0 + t0) + t1) + ...: np.sum below 8 terms
        more = size > j
        total[more] += term[starts[more] + j]
    for i in np.flatnonzero(size >= 8):  # np.sum's pairwise blocks
        total[i] = np.sum(term[starts[i] : starts[i] + size[i]])
    per[owner[starts]] = total if norm == 1 else np.sqrt(total)


def ece1(
    data: TopLabelData, confidence: ArrayLike, *, n_bins: int = 10, strategy: str = "uniform"
) -> ClassMetric:
    """ECE1: L1 binned calibration error (see :func:`ece`)."""
    return ece(data, confidence, norm=1, n_bins=n_bins, strategy=strategy)


def ece2(
    data: TopLabelData, confidence: ArrayLike, *, n_bins: int = 10, strategy: str = "uniform"
) -> ClassMetric:
    """ECE2: L2 binned calibration error (see :func:`ece`)."""
    return ece(data, confidence, norm=2, n_bins=n_bins, strategy=strategy)


def conf1(data: TopLabelData) -> np.ndarray:
    """Conf1 per class (paper eq. 1): |TP_k| / |P_k|, NaN for classes never predicted."""
    tp, fp = data.class_counts()
    n = tp + fp
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(n > 0, tp / np.where(n > 0, n, 1.0), np.nan)


def confusion_matrix(data: TopLabelData) -> np.ndarray:
    """Counts C[i, j] of samples with true class i predicted as j, shape (K, K).

    Needs per-sample labels: binned data does not say which class a false positive truly
    was.
    """
    if data.labels is None:
        raise DataError(
            "the confusion matrix needs each sample's true class; binned or unlabelled data "
            "only has TP/FP counts (use conf1() for the diagonal of the reverse matrix)"
        )
    k = data.n_classes
    return (
        np.bincount(data.labels * k + data.pred, minlength=k * k)
        .reshape(k, k)
        .astype(np.float64)
    )


def reverse_confusion_matrix(data: TopLabelData) -> np.ndarray:
    """P(true class i | predicted class j): the confusion matrix with each column (predicted
    class) normalised to sum to 1; its diagonal is Conf1.

    Columns of classes never predicted are NaN.
    """
    cm = confusion_matrix(data)
    col = cm.sum(axis=0, keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(col > 0, cm / np.where(col > 0, col, 1.0), np.nan)


#: The metric bundle every comparison table shows, in table order.
BUNDLE = ("nll", "brier", "ece1", "ece2")

#: The bundle's metrics on confidences checked once by :func:`bundle`.
_BUNDLE_METRICS = {
    "nll": lambda d, c, n_bins: _nll(d, c),
    "brier": lambda d, c, n_bins: _brier(d, c),
    "ece1": lambda d, c, n_bins: _ece(d, c, 1, n_bins, "uniform"),
    "ece2": lambda d, c, n_bins: _ece(d, c, 2, n_bins, "uniform"),
}


def bundle(
    data: TopLabelData,
    confidence: ArrayLike,
    *,
    n_bins: int = 10,
    names: Sequence[str] = BUNDLE,
) -> list[ClassMetric]:
    """The metrics ``names`` (default NLL, Brier, ECE1, ECE2) of ``confidence`` on ``data``,
    in that order.

    The one place topcal computes a set of metrics: :func:`summary`,
    :func:`topcal.evaluate.evaluate` (compare, report) and the ensemble experiment all call
    it.
    """
    unknown = [n for n in names if n not in _BUNDLE_METRICS]
    if unknown:
        raise ParameterError(
            f"unknown metric {unknown[0]!r}; options are {', '.join(_BUNDLE_METRICS)}"
        )
    check_bin_count(n_bins)
    c = _check(data, confidence)  # once for every metric of the bundle
    return [_BUNDLE_METRICS[n](data, c, n_bins) for n in names]


#: The values of each row of :func:`summary` (per class and overall), in the order tables
#: show them.
SUMMARY_COLUMNS = ("tp", "fp", "conf1") + BUNDLE


def summary(data: TopLabelData, confidence: ArrayLike, *, n_bins: int = 10) -> dict:
    """Per-class and overall NLL, Brier, ECE1, ECE2, Conf1 and counts, JSON-ready."""
    metrics = bundle(data, confidence, n_bins=n_bins)
    tp, fp = data.class_counts()
    c1 = conf1(data)
    out: dict[str, dict] = {"classes": {}, "overall": {}}
    for i, name in enumerate(data.classes):
        row = {
            "tp": float(tp[i]),
            "fp": float(fp[i]),
            "conf1": None if np.isnan(c1[i]) else float(c1[i]),
        }
        for m in metrics:
            v = m.per_class[i]
            row[m.name] = None if np.isnan(v) else float(v)
        out["classes"][name] = row
    out["overall"] = {
        "tp": float(tp.sum()),
        "fp": float(fp.sum()),
        "conf1": float(tp.sum() / (tp.sum() + fp.sum())),
        **{m.name: m.overall for m in metrics},
    }
    return out
