"""The figures' data: pure functions of data and fitted models returning small frozen
dataclasses.

No matplotlib here; :mod:`topcal.plots.draw` turns each dataclass into a Figure. Long
because it holds eight figures' data, each a dataclass and its compute function (see the
table in :mod:`topcal.plots`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from ..calibrators import Calibrator
from ..data import TopLabelData
from ..errors import DegenerateClassWarning, ModelFileError, ParameterError, TopcalError
from ..evaluate import fit_quietly
from ..metrics import conf1 as _conf1
from ..metrics import confusion_matrix

__all__ = [
    "is_score_curve",
    "HistogramBars",
    "JointDistribution",
    "CurvePanel",
    "CurveGrid",
    "DensityPanel",
    "CloudPanel",
    "class_histograms",
    "joint_distribution",
    "calibration_curves",
    "kde_densities",
    "ts_clouds",
    "model_curve",
    "model_band",
    "BAND_LEVEL",
    "SPARSE_MIN",
    "MAX_CLOUD_POINTS",
    "BARS_METHOD",
]

#: The method of the reference bars under every curve figure: Conf_Hist, unshrunk (paper
#: Fig. 3). The bars' artists carry it as their gid; a fitted model of it with the bars'
#: bins is not drawn again as a curve.
BARS_METHOD = "hist"

#: A histogram bin with fewer positives than this is drawn hatched and dashed ("sparse"):
#: its height is a ratio of a handful of counts.
SPARSE_MIN = 10

#: Largest number of points drawn per class in a cloud (a seeded subsample beyond it keeps
#: PNGs small; the report says when it subsampled).
MAX_CLOUD_POINTS = 2500

#: Level of the interval band drawn around each fitted curve (``predict_interval``,
#: docs/intervals.md).
BAND_LEVEL = 0.9


# ----------------------------------------------------------------- compute
@dataclass(frozen=True)
class HistogramBars:
    """One class's 10-bin (by default) histogram confidence, Conf_Hist (paper eq. 6).

    Attributes
    ----------
    edges : ndarray, shape (m + 1,)
    values : ndarray, shape (m,)
        TP / (TP + FP) per bin; NaN for empty bins (not drawn).
    tp, fp : ndarray, shape (m,)
        Weighted counts per bin.
    sparse : ndarray of bool, shape (m,)
        Non-empty bins with fewer than ``sparse_min`` positives, and the lowest non-empty
        bin (the paper draws it dashed in every figure).
    """

    edges: np.ndarray
    values: np.ndarray
    tp: np.ndarray
    fp: np.ndarray
    sparse: np.ndarray


def class_histograms(
    data: TopLabelData, *, n_bins: int = 10, sparse_min: float = SPARSE_MIN, model=None
) -> list[HistogramBars | None]:
    """Per class, the histogram bars of Conf_Hist (None for classes never predicted).

    Parameters
    ----------
    data : TopLabelData (labelled)
    n_bins : int, default 10
        Equal-width bins over the score range (the paper's 10).
    sparse_min : float, default 10
        Bins with fewer positives are marked sparse.
    model : fitted ``hist`` calibrator, optional
        Use its bins and counts instead of fitting one on ``data``.
    """
    if model is None:  # a side fit for the figure: its class warnings are the user's own fit's
        model = fit_quietly(
            BARS_METHOD,
            data,
            params={"n_bins": n_bins, "shrinkage": 0},
            collect=DegenerateClassWarning,
        )
    hist = model
    out: list[HistogramBars | None] = []
    for st in hist.class_state_:
        if st is None:
            out.append(None)
            continue
        tp, fp = np.asarray(st["tp"], float), np.asarray(st["fp"], float)
        n = tp + fp
        values = np.where(n > 0, np.asarray(st["values"], float), np.nan)
        sparse = (n > 0) & (n < sparse_min)
        nz = np.flatnonzero(n > 0)
        if nz.size:
            sparse[nz[0]] = True
        out.append(HistogramBars(np.asarray(st["edges"], float), values, tp, fp, sparse))
    return out


@dataclass(frozen=True)
class JointDistribution:
    """Joint distribution of true and predicted class (paper Figure 1).

    Attributes
    ----------
    classes : tuple of str
    counts : ndarray (K, K) or None
        counts[i, j]: samples of true class i predicted as j. None for binned data (which
        does not record the true class of false positives).
    confusion : ndarray (K, K) or None
        counts normalised by row: P(predicted j | true i).
    reverse : ndarray (K, K) or None
        counts normalised by column: P(true i | predicted j); diagonal = Conf1.
    conf1 : ndarray (K,)
        |TP_k| / |P_k| (NaN for classes never predicted).
    n_tp, n_fp : ndarray (K,)
    """

    classes: tuple[str, ...]
    counts: np.ndarray | None
    confusion: np.ndarray | None
    reverse: np.ndarray | None
    conf1: np.ndarray
    n_tp: np.ndarray
    n_fp: np.ndarray


def joint_distribution(data: TopLabelData) -> JointDistribution:
    """Counts, confusion and reverse confusion matrices, and Conf1 per class."""
    tp, fp = data.class_counts()
    c1 = _conf1(data)
    if data.labels is None:
        return JointDistribution(data.classes, None, None, None, c1, tp, fp)
    cm = confusion_matrix(data)
    with np.errstate(invalid="ignore", divide="ignore"):
        row = cm.sum(axis=1, keepdims=True)
        col = cm.sum(axis=0, keepdims=True)
        conf = np.where(row > 0, cm / np.where(row > 0, row, 1), np.nan)
        rev = np.where(col > 0, cm / np.where(col > 0, col, 1), np.nan)
    return JointDistribution(data.classes, cm, conf, rev, c1, tp, fp)


@dataclass(frozen=True)
class CurvePanel:
    """What one class's calibration panel shows.

    Attributes
    ----------
    class_name : str
    hist : HistogramBars or None
    curves : dict
        method -> (score, confidence) arrays of score-based methods.
    clouds : dict
        method -> (score, confidence) of the class's positives for methods whose confidence
        is not a function of the score (temperature scaling).
    support : (float, float) or None
        Lowest and highest observed score of the class's positives.
    n_tp, n_fp : float
    bands : dict
        method -> (score, lower, upper): the ``predict_interval`` limits on the curve's grid
        (methods in ``curves`` whose model holds interval statistics).
    """

    class_name: str
    hist: HistogramBars | None
    curves: dict
    clouds: dict
    support: tuple[float, float] | None
    n_tp: float
    n_fp: float
    bands: dict = field(default_factory=dict)


@dataclass(frozen=True)
class CurveGrid:
    """Calibration curves of several methods for every class (paper Figs. 3, 5, 7, 9, 14)."""

    score_range: tuple[float, float]
    methods: tuple[str, ...]
    panels: tuple[CurvePanel, ...]
    subsampled: bool = False
    #: Level of the bands (None: none asked for) and the methods whose models hold no
    #: interval statistics (files saved by an older topcal): they draw no band.
    band_level: float | None = None
    no_band: tuple[str, ...] = ()


def _subsample(idx: np.ndarray, max_points: int, seed: int = 0) -> np.ndarray:
    if idx.size <= max_points:
        return idx
    rng = np.random.default_rng(seed)
    return np.sort(rng.choice(idx, max_points, replace=False))


def is_score_curve(model) -> bool:
    """Whether the model's confidence is a function of (class, score) alone
    (:attr:`Calibrator.has_curve`)."""
    return model.has_curve


def model_curve(model, k: int, score: np.ndarray) -> np.ndarray:
    """Conf_k(score) of a fitted model whose confidence depends on the score only.

    Every such model has ``curve`` (the score calibrators, bts and btswa, and ``auto`` when
    it chose one of them).
    """
    return model.curve(k, np.asarray(score, dtype=np.float64)).confidence


def model_band(model, k: int, score: np.ndarray, level: float = BAND_LEVEL):
    """(lower, upper) of the ``level`` interval on Conf_k at ``score``
    (:meth:`predict_interval`), or None where the model holds no interval statistics (a file
    saved by an older topcal) or has no interval."""
    s = np.asarray(score, dtype=np.float64)
    rows = TopLabelData(
        tuple(model.classes_),
        np.full(s.shape, int(k), dtype=np.int64),
        s,
        tuple(model.score_range_),
    )
    try:
        return model.predict_interval(rows, level)
    except (ModelFileError, ParameterError):
        return None


def class_items(data: TopLabelData, only) -> list[tuple[int, str]]:
    """(index, name) of every class, or of the class indices ``only`` (figures of many
    classes show a few)."""
    if only is None:
        return list(enumerate(data.classes))
    return [(int(k), data.classes[int(k)]) for k in only]


def calibration_curves(
    data: TopLabelData,
    models: dict,
    *,
    n_bins: int = 10,
    n_points: int = 401,
    sparse_min: float = SPARSE_MIN,
    max_cloud_points: int = MAX_CLOUD_POINTS,
    only=None,
    band: float | None = BAND_LEVEL,
) -> CurveGrid:
    """Per class: Conf_Hist bars plus each fitted model's curve (or cloud).

    Parameters
    ----------
    data : TopLabelData (labelled)
        The data the bars are computed from (usually the fitting data).
    models : dict of str -> fitted Calibrator
        Score-based models (with ``curve``) give curves; the others (the temperature-scaling
        family) give clouds: score vs ``predict`` for each positive of the class.
        ``uncalibrated`` is skipped (the plot always draws the dashed diagonal).
    n_bins : int, default 10
    n_points : int, default 401
        Grid size of each curve.
    sparse_min : float, default 10
    max_cloud_points : int, default 2500
        Clouds larger than this are subsampled (seeded).
    band : float in (0, 1) or None, default 0.9
        Level of the interval band around each curve (None: no bands).
    """
    hists = class_histograms(data, n_bins=n_bins, sparse_min=sparse_min)
    tp, fp = data.class_counts()
    lo, hi = data.score_range
    grid = np.linspace(lo, hi, n_points)
    preds = {}
    for name, m in models.items():
        if not m.is_baseline and not is_score_curve(m):
            preds[name] = m.predict(data)
    panels = []
    subsampled = False
    no_band: set = set()
    for k, cname in class_items(data, only):
        curves, bands = {}, {}
        for name, m in models.items():
            if m.is_baseline or not is_score_curve(m):
                continue
            curves[name] = (grid, model_curve(m, k, grid))
            lim = None if band is None or name in no_band else model_band(m, k, grid, band)
            if lim is not None:
                bands[name] = (grid, *lim)
            elif band is not None:
                no_band.add(name)
        clouds = {}
        idx = np.flatnonzero(data.pred == k)
        if idx.size > max_cloud_points:
            subsampled = subsampled or bool(preds)
        idx = _subsample(idx, max_cloud_points)
        for name, p in preds.items():
            clouds[name] = (data.score[idx], p[idx])
        panels.append(
            CurvePanel(
                cname,
                hists[k],
                curves,
                clouds,
                data.class_support(k),
                float(tp[k]),
                float(fp[k]),
                bands,
            )
        )
    methods = tuple(n for n, m in models.items() if not m.is_baseline)
    return CurveGrid(
        data.score_range,
        methods,
        tuple(panels),
        subsampled,
        band,
        tuple(m for m in methods if m in no_band),
    )


@dataclass(frozen=True)
class DensityPanel:
    """The kernel densities behind one class's Conf_KDE (paper Figs. 5, 6).

    Attributes
    ----------
    class_name : str
    score : ndarray (m,)
    tp_density, fp_density : ndarray (m,)
        Weighted kernel sums over the class's true and false positives.
    confidence : ndarray (m,)
        Conf_KDE on ``score`` (the model's curve).
    bandwidth : float
    neg_density : ndarray (m,) or None
        Gaussian kernel sum over the k-th score of every sample *not* predicting k (full
        score vectors only).
    diluted : ndarray (m,) or None
        Confidence when those negatives join the false positives in the denominator (paper
        Fig. 6, red): the diluted signal.
    hist : HistogramBars or None
    support : (float, float) or None
    """

    class_name: str
    score: np.ndarray
    tp_density: np.ndarray
    fp_density: np.ndarray
    confidence: np.ndarray
    bandwidth: float
    neg_density: np.ndarray | None
    diluted: np.ndarray | None
    hist: HistogramBars | None
    support: tuple[float, float] | None


def _gauss_sum(x: np.ndarray, s: np.ndarray, w: np.ndarray, b: float) -> np.ndarray:
    """sum_i w_i phi_b(x - s_i), phi_b the normal density with sd b (chunked)."""
    out = np.zeros_like(x)
    keep = w > 0
    s, w = s[keep], w[keep]
    for start in range(0, s.size, 4096):
        d = (x[:, None] - s[None, start : start + 4096]) / b
        out += (np.exp(-0.5 * d * d) * w[None, start : start + 4096]).sum(axis=1)
    return out / (b * math.sqrt(2 * math.pi))


#: Above this many samples the k-th scores behind the diluted curve are histogrammed onto
#: COMPRESS_BINS bins (weights at the bin centres) before the kernel sums: the shift of at
#: most half a bin, (hi - lo) / 8192, is far below any bandwidth a rule picks, and the cost
#: stops growing with n.
COMPRESS_ABOVE = 20_000
COMPRESS_BINS = 4096


def _compress(s: np.ndarray, weights, lo: float, hi: float):
    if s.size <= COMPRESS_ABOVE:
        return s, weights
    edges = np.linspace(lo, hi, COMPRESS_BINS + 1)
    centres = 0.5 * (edges[:-1] + edges[1:])
    return centres, tuple(np.histogram(s, bins=edges, weights=w)[0] for w in weights)


def _class_probs(data: TopLabelData) -> np.ndarray:
    return np.exp(data.log_probs())


def kde_densities(
    data: TopLabelData, model, *, n_points: int = 401, n_bins: int = 10, only=None
) -> list[DensityPanel | None]:
    """Per class, the TP and FP densities of a fitted kernel-density model.

    Parameters
    ----------
    data : TopLabelData (labelled)
        The data ``model`` was fitted on.
    model : fitted kde-family calibrator
        Needs ``bandwidth_``, ``densities(k, score)`` and ``curve(k, score)``.
    n_points : int, default 401
    n_bins : int, default 10
        Bins of the histogram drawn for reference.

    Returns
    -------
    list of DensityPanel or None
        None for classes never predicted, and for degenerate classes (only TP or only FP: no
        bandwidth was chosen). When ``data`` has full score vectors, each panel also has the
        negatives' density and the diluted confidence, computed with
        ``topcal.calibrators.kde.kde_confidence`` from the k-th score of *every* sample,
        with only the true positives as its positives (paper Fig. 6).
    """
    if not (hasattr(model, "densities") and hasattr(model, "bandwidth_")):
        raise TopcalError(
            f"kde_densities needs a fitted kernel-density model (kde, kde-mon2, ...), got "
            f"{getattr(model, 'name', model)!r}"
        )
    lo, hi = data.score_range
    grid = np.linspace(lo, hi, n_points)
    hists = class_histograms(data, n_bins=n_bins)
    probs = None
    kde_confidence: Callable[..., Any] | None = None
    if data.has_full and data.labels is not None:
        from ..calibrators.kde import kde_confidence  # noqa: F811

        probs = _class_probs(data)
    out: list[DensityPanel | None] = []
    for k, cname in class_items(data, only):
        sup = data.class_support(k)
        if sup is None:
            out.append(None)
            continue
        b = float(np.asarray(model.bandwidth_)[k])
        if not (
            np.isfinite(b) and b > 0
        ):  # degenerate class (only TP or only FP): no densities to show
            out.append(None)
            continue
        tpd, fpd = (np.asarray(a, float) for a in model.densities(k, grid))
        conf = model.curve(k, grid).confidence
        neg = dil = None
        if probs is not None:
            yk = probs[:, k]
            is_tp = ((data.pred == k) & (data.labels == k)).astype(float)
            negw = (data.pred != k).astype(float)
            centres, (is_tp, negw, rest) = _compress(yk, (is_tp, negw, 1.0 - is_tp), lo, hi)
            neg = _gauss_sum(grid, centres, negw, b)
            dil = np.asarray(kde_confidence(grid, centres, is_tp, rest, b), float)
        out.append(
            DensityPanel(
                cname, grid, tpd, fpd, np.asarray(conf, float), b, neg, dil, hists[k], sup
            )
        )
    return out


@dataclass(frozen=True)
class CloudPanel:
    """One class's temperature-scaling cloud (paper Figs. 10-12).

    Attributes
    ----------
    class_name : str
    score : ndarray
        Top scores of the class's positives (subsampled beyond 2,500).
    confidence : ndarray
        The method's recalibrated yhat_k(X) for the same samples.
    correct : ndarray of bool
        Whether each sample was a true positive.
    hist : HistogramBars or None
    score_range : (float, float)
    """

    class_name: str
    score: np.ndarray
    confidence: np.ndarray
    correct: np.ndarray
    hist: HistogramBars | None
    score_range: tuple[float, float] = (0.0, 1.0)


def ts_clouds(
    data: TopLabelData,
    model: Calibrator,
    *,
    n_bins: int = 10,
    max_points: int = MAX_CLOUD_POINTS,
    only=None,
) -> list[CloudPanel | None]:
    """Score vs recalibrated confidence per class for one fitted model (any method).

    Parameters
    ----------
    data : TopLabelData (labelled)
    model : fitted Calibrator
        Typically sts, csts, tswa or cstswa; for score-based methods the cloud collapses
        onto the curve.
    n_bins : int, default 10
    max_points : int, default 2500
    """
    conf = model.predict(data)
    hists = class_histograms(data, n_bins=n_bins)
    out: list[CloudPanel | None] = []
    for k, cname in class_items(data, only):
        idx = np.flatnonzero((data.pred == k) & (data.tp + data.fp > 0))
        if idx.size == 0:
            out.append(None)
            continue
        idx = _subsample(idx, max_points, seed=k)
        out.append(
            CloudPanel(
                cname, data.score[idx], conf[idx], data.tp[idx] > 0, hists[k], data.score_range
            )
        )
    return out
