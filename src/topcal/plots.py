"""The paper's figures for any labelled data: computed data first, drawing second.

Each figure has a *compute* function returning a small frozen dataclass of
arrays (pure, no matplotlib) and a *plot* function taking that dataclass and
returning a :class:`matplotlib.figure.Figure`. Plot functions import
matplotlib lazily, build figures with :class:`matplotlib.figure.Figure`
(no pyplot global state, so they work headless and in threads) and never
change ``rcParams``. Single-axes plots accept ``ax=None``; small-multiple
grids accept ``fig=None`` (a Figure to draw into).

=====================================  ======================================  ===========
compute                                plot                                    paper
=====================================  ======================================  ===========
:func:`joint_distribution`             :func:`plot_joint_distribution`         Fig. 1
:func:`calibration_curves`             :func:`plot_calibration_curves`         Figs. 3, 5, 7, 9, 14
:func:`kde_densities`                  :func:`plot_kde_densities`              Figs. 5, 6
:func:`ts_clouds`                      :func:`plot_ts_clouds`                  Figs. 10-12
:func:`method_scores`                  :func:`plot_method_bars`                Fig. 17
:func:`histogram_overlay`              :func:`plot_histogram_overlay`          Fig. 4
:func:`paired_scores`                  :func:`plot_paired_bars`                Figs. 18-19
:func:`added_samples_effect`           :func:`plot_added_samples`              Fig. 15
=====================================  ======================================  ===========

Drawn artists carry a ``gid`` ("curve:<method>", "hist", "uncalibrated",
"density:tp", ...) so tests and users can find the plotted data again.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .calibrators import Calibrator, ScoreCalibrator
from .data import TopLabelData
from .errors import DegenerateClassWarning, TopcalError
from .evaluate import fit_quietly
from .metrics import conf1 as _conf1
from .metrics import confusion_matrix

__all__ = [
    "is_score_curve",
    "HistogramBars",
    "JointDistribution",
    "CurvePanel",
    "CurveGrid",
    "DensityPanel",
    "CloudPanel",
    "MethodScores",
    "HistogramOverlay",
    "PairedScores",
    "AddedSamplesPanel",
    "class_histograms",
    "joint_distribution",
    "calibration_curves",
    "kde_densities",
    "ts_clouds",
    "method_scores",
    "histogram_overlay",
    "paired_scores",
    "added_samples_effect",
    "model_curve",
    "plot_joint_distribution",
    "plot_calibration_curves",
    "plot_kde_densities",
    "plot_ts_clouds",
    "plot_method_bars",
    "plot_histogram_overlay",
    "plot_paired_bars",
    "plot_added_samples",
    "METHOD_COLORS",
    "SPARSE_MIN",
    "MAX_CLOUD_POINTS",
]

#: Colour of each method's curve (paper colours where the paper fixes one:
#: Conf_KDE blue, b_mon2 magenta, b_opt maroon, Conf_Cum* green, Conf_Hist black).
METHOD_COLORS = {
    "hist": "black",
    "kde": "slateblue",
    "kde-mon": "tab:cyan",
    "kde-mon2": "tab:blue",
    "kde-mon4": "magenta",
    "kde-opt": "maroon",
    "cum": "tab:red",
    "cum-median": "tab:olive",
    "cum-opt": "tab:green",
    "conf1": "0.45",
    "sts": "tab:red",
    "csts": "tab:orange",
    "tswa": "tab:green",
    "cstswa": "tab:purple",
    "bts": "tab:pink",
    "btswa": "darkgoldenrod",
}
_FALLBACK_COLORS = ["tab:brown", "tab:pink", "darkgoldenrod", "teal", "navy", "crimson"]

#: A histogram bin with fewer positives than this is drawn hatched and dashed
#: ("sparse"): its height is a ratio of a handful of counts.
SPARSE_MIN = 10

#: Largest number of points drawn per class in a cloud (a seeded subsample
#: beyond it keeps PNGs small; the report says when it subsampled).
MAX_CLOUD_POINTS = 2500


def _color(name: str, order: list[str]) -> str:
    if name in METHOD_COLORS:
        return METHOD_COLORS[name]
    extra = [m for m in order if m not in METHOD_COLORS]
    return _FALLBACK_COLORS[extra.index(name) % len(_FALLBACK_COLORS)] if name in extra else "tab:brown"


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
        Non-empty bins with fewer than ``sparse_min`` positives, and the
        lowest non-empty bin (the paper draws it dashed in every figure).
    """

    edges: np.ndarray
    values: np.ndarray
    tp: np.ndarray
    fp: np.ndarray
    sparse: np.ndarray


def class_histograms(data: TopLabelData, *, n_bins: int = 10, sparse_min: float = SPARSE_MIN,
                     model=None) -> list[HistogramBars | None]:
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
        model = fit_quietly("hist", data, params={"n_bins": n_bins, "shrinkage": 0}, collect=DegenerateClassWarning)
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
        counts[i, j]: samples of true class i predicted as j. None for binned
        data (which does not record the true class of false positives).
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
        method -> (score, confidence) of the class's positives for methods
        whose confidence is not a function of the score (temperature scaling).
    support : (float, float) or None
        Lowest and highest observed score of the class's positives.
    n_tp, n_fp : float
    """

    class_name: str
    hist: HistogramBars | None
    curves: dict
    clouds: dict
    support: tuple[float, float] | None
    n_tp: float
    n_fp: float


@dataclass(frozen=True)
class CurveGrid:
    """Calibration curves of several methods for every class (paper Figs. 3, 5, 7, 9, 14)."""

    score_range: tuple[float, float]
    methods: tuple[str, ...]
    panels: tuple[CurvePanel, ...]
    subsampled: bool = False


def _subsample(idx: np.ndarray, max_points: int, seed: int = 0) -> np.ndarray:
    if idx.size <= max_points:
        return idx
    rng = np.random.default_rng(seed)
    return np.sort(rng.choice(idx, max_points, replace=False))


def is_score_curve(model) -> bool:
    """Whether the model's confidence is a function of (class, score) alone."""
    return isinstance(model, ScoreCalibrator) or not getattr(model, "needs_full", False)


def model_curve(model, k: int, score: np.ndarray) -> np.ndarray:
    """Conf_k(score) of a fitted model whose confidence depends on the score only.

    Uses ``curve`` when the model has one, else predicts on unlabelled rows
    (class k, the given scores), which covers the binary temperature scalings.
    """
    if isinstance(model, ScoreCalibrator):
        return model.curve(k, score).confidence
    grid = TopLabelData(tuple(model.classes_), np.full(score.shape, k, dtype=np.int64),
                        np.asarray(score, dtype=np.float64), tuple(model.score_range_))
    return model.predict(grid)


def _class_items(data: TopLabelData, only) -> list[tuple[int, str]]:
    """(index, name) of every class, or of the class indices ``only`` (figures of many classes show a few)."""
    if only is None:
        return list(enumerate(data.classes))
    return [(int(k), data.classes[int(k)]) for k in only]


def calibration_curves(data: TopLabelData, models: dict, *, n_bins: int = 10, n_points: int = 401,
                       sparse_min: float = SPARSE_MIN, max_cloud_points: int = MAX_CLOUD_POINTS,
                       only=None) -> CurveGrid:
    """Per class: Conf_Hist bars plus each fitted model's curve (or cloud).

    Parameters
    ----------
    data : TopLabelData (labelled)
        The data the bars are computed from (usually the fitting data).
    models : dict of str -> fitted Calibrator
        Score-based models (with ``curve``) give curves; the others (the
        temperature-scaling family) give clouds: score vs ``predict`` for
        each positive of the class. ``uncalibrated`` is skipped (the plot
        always draws the dashed diagonal).
    n_bins : int, default 10
    n_points : int, default 401
        Grid size of each curve.
    sparse_min : float, default 10
    max_cloud_points : int, default 2500
        Clouds larger than this are subsampled (seeded).
    """
    hists = class_histograms(data, n_bins=n_bins, sparse_min=sparse_min)
    tp, fp = data.class_counts()
    lo, hi = data.score_range
    grid = np.linspace(lo, hi, n_points)
    preds = {}
    for name, m in models.items():
        if name != "uncalibrated" and not is_score_curve(m):
            preds[name] = m.predict(data)
    panels = []
    subsampled = False
    for k, cname in _class_items(data, only):
        curves = {}
        for name, m in models.items():
            if name == "uncalibrated" or not is_score_curve(m):
                continue
            curves[name] = (grid, model_curve(m, k, grid))
        clouds = {}
        idx = np.flatnonzero(data.pred == k)
        if idx.size > max_cloud_points:
            subsampled = subsampled or bool(preds)
        idx = _subsample(idx, max_cloud_points)
        for name, p in preds.items():
            clouds[name] = (data.score[idx], p[idx])
        panels.append(CurvePanel(cname, hists[k], curves, clouds, data.class_support(k), float(tp[k]), float(fp[k])))
    return CurveGrid(data.score_range, tuple(m for m in models if m != "uncalibrated"), tuple(panels), subsampled)


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
        Gaussian kernel sum over the k-th score of every sample *not*
        predicting k (full score vectors only).
    diluted : ndarray (m,) or None
        Confidence when those negatives join the false positives in the
        denominator (paper Fig. 6, red): the diluted signal.
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
        d = (x[:, None] - s[None, start:start + 4096]) / b
        out += (np.exp(-0.5 * d * d) * w[None, start:start + 4096]).sum(axis=1)
    return out / (b * math.sqrt(2 * math.pi))


#: Above this many samples the k-th scores behind the diluted curve are
#: histogrammed onto COMPRESS_BINS bins (weights at the bin centres) before
#: the kernel sums: the shift of at most half a bin, (hi - lo) / 8192, is
#: far below any bandwidth a rule picks, and the cost stops growing with n.
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


def kde_densities(data: TopLabelData, model, *, n_points: int = 401, n_bins: int = 10,
                  only=None) -> list[DensityPanel | None]:
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
        None for classes never predicted, and for degenerate classes (only
        TP or only FP: no bandwidth was chosen). When ``data`` has full score
        vectors, each panel also has the negatives' density and the diluted
        confidence, computed with ``topcal.calibrators.kde.kde_confidence``
        from the k-th score of *every* sample, with only the true positives
        as its positives (paper Fig. 6).
    """
    if not (hasattr(model, "densities") and hasattr(model, "bandwidth_")):
        raise TopcalError(
            f"kde_densities needs a fitted kernel-density model (kde, kde-mon2, ...), got {getattr(model, 'name', model)!r}"
        )
    lo, hi = data.score_range
    grid = np.linspace(lo, hi, n_points)
    hists = class_histograms(data, n_bins=n_bins)
    probs = None
    kde_confidence = None
    if data.has_full and data.labels is not None:
        from .calibrators.kde import kde_confidence  # noqa: F811

        probs = _class_probs(data)
    out: list[DensityPanel | None] = []
    for k, cname in _class_items(data, only):
        sup = data.class_support(k)
        if sup is None:
            out.append(None)
            continue
        b = float(np.asarray(model.bandwidth_)[k])
        if not (np.isfinite(b) and b > 0):  # degenerate class (only TP or only FP): no densities to show
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
        out.append(DensityPanel(cname, grid, tpd, fpd, np.asarray(conf, float), b, neg, dil, hists[k], sup))
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


def ts_clouds(data: TopLabelData, model: Calibrator, *, n_bins: int = 10,
              max_points: int = MAX_CLOUD_POINTS, only=None) -> list[CloudPanel | None]:
    """Score vs recalibrated confidence per class for one fitted model (any method).

    Parameters
    ----------
    data : TopLabelData (labelled)
    model : fitted Calibrator
        Typically sts, csts, tswa or cstswa; for score-based methods the
        cloud collapses onto the curve.
    n_bins : int, default 10
    max_points : int, default 2500
    """
    conf = model.predict(data)
    hists = class_histograms(data, n_bins=n_bins)
    out: list[CloudPanel | None] = []
    for k, cname in _class_items(data, only):
        idx = np.flatnonzero((data.pred == k) & (data.tp + data.fp > 0))
        if idx.size == 0:
            out.append(None)
            continue
        idx = _subsample(idx, max_points, seed=k)
        out.append(CloudPanel(cname, data.score[idx], conf[idx], data.tp[idx] > 0, hists[k], data.score_range))
    return out


@dataclass(frozen=True)
class MethodScores:
    """A metric per class and overall for several methods (paper Fig. 17).

    Attributes
    ----------
    metric : str
    classes : tuple of str
    methods : tuple of str
    per_class : ndarray (K, M)
        NaN where a class has no positives.
    overall : ndarray (M,)
    """

    metric: str
    classes: tuple[str, ...]
    methods: tuple[str, ...]
    per_class: np.ndarray
    overall: np.ndarray


def method_scores(comparison: dict, metric: str = "nll") -> MethodScores:
    """Pick one metric out of :func:`topcal.evaluate.compare_methods` output."""
    methods = tuple(comparison["methods"])
    if not methods:
        raise TopcalError("the comparison holds no methods; give at least one method that can run on this data")
    classes = tuple(comparison["methods"][methods[0]][metric]["per_class"])
    per = np.array([[np.nan if comparison["methods"][m][metric]["per_class"][c] is None
                     else comparison["methods"][m][metric]["per_class"][c] for m in methods] for c in classes],
                   dtype=float)
    overall = np.array([comparison["methods"][m][metric]["overall"] for m in methods], dtype=float)
    return MethodScores(metric, classes, methods, per, overall)


@dataclass(frozen=True)
class HistogramOverlay:
    """Two test sets' histogram confidences per class (paper Fig. 4)."""

    classes: tuple[str, ...]
    score_range: tuple[float, float]
    first: tuple
    second: tuple
    labels: tuple[str, str]


def histogram_overlay(data1: TopLabelData, data2: TopLabelData, *, n_bins: int = 10,
                      labels: tuple[str, str] = ("test set 1", "test set 2"), only=None) -> HistogramOverlay:
    """Conf_Hist of each class (or of the class indices ``only``) on two test sets with the same classes and scale."""
    if data1.classes != data2.classes or data1.score_range != data2.score_range:
        raise TopcalError("the two test sets must have the same classes and score range to be compared")
    items = _class_items(data1, only)
    h1, h2 = class_histograms(data1, n_bins=n_bins), class_histograms(data2, n_bins=n_bins)
    return HistogramOverlay(tuple(c for _, c in items), data1.score_range, tuple(h1[k] for k, _ in items),
                            tuple(h2[k] for k, _ in items), tuple(labels))


@dataclass(frozen=True)
class PairedScores:
    """A metric per method on two test sets, methods fitted on the first (paper Figs. 18-19).

    Attributes
    ----------
    metric : str
    methods : tuple of str
    first, second : ndarray (M,)
        Overall metric evaluated on the fitting set and on the second set.
    first_per_class, second_per_class : ndarray (K, M)
    labels : (str, str)
    """

    metric: str
    methods: tuple[str, ...]
    first: np.ndarray
    second: np.ndarray
    first_per_class: np.ndarray
    second_per_class: np.ndarray
    labels: tuple[str, str]


def paired_scores(same: dict, holdout: dict, metric: str = "nll",
                  labels: tuple[str, str] = ("fit set", "second set")) -> PairedScores:
    """Combine a "same" and a "holdout" comparison (same fitting data) into paired bars."""
    a, b = method_scores(same, metric), method_scores(holdout, metric)
    methods = tuple(m for m in a.methods if m in b.methods)
    ia = [a.methods.index(m) for m in methods]
    ib = [b.methods.index(m) for m in methods]
    return PairedScores(metric, methods, a.overall[ia], b.overall[ib], a.per_class[:, ia], b.per_class[:, ib],
                        tuple(labels))


@dataclass(frozen=True)
class AddedSamplesPanel:
    """One class's curve before and after adding new labelled samples (paper Fig. 15).

    Attributes
    ----------
    class_name : str
    score : ndarray (m,)
    old, new : ndarray (m,)
        The method's curve fitted on the original data and on data + extra.
    old_support, new_support : (float, float) or None
    added_tp, added_fp : float
        Positives of this class in the extra data.
    old_counts, new_counts : (float, float)
        (|TP_k|, |FP_k|) before and after.
    """

    class_name: str
    score: np.ndarray
    old: np.ndarray
    new: np.ndarray
    old_support: tuple[float, float] | None
    new_support: tuple[float, float] | None
    added_tp: float
    added_fp: float
    old_counts: tuple[float, float]
    new_counts: tuple[float, float]


def added_samples_effect(data: TopLabelData, extra: TopLabelData, method: str = "hist", *,
                         params: dict | None = None, n_points: int = 401,
                         only=None) -> tuple[str, list[AddedSamplesPanel]]:
    """Refit ``method`` on ``data`` + ``extra`` and compare curves for the classes ``extra`` touches.

    Parameters
    ----------
    data, extra : TopLabelData (labelled, same classes, scale and form)
    method : str, default "hist"
        A method whose confidence is a function of the score, e.g. "kde-mon2".
    params : dict, optional
        Its parameters (e.g. ``{"bandwidth": 0.3}`` for "kde", so that both
        fits share one bandwidth, as in the paper's Fig. 15).
    n_points : int, default 401

    Returns
    -------
    (str, list of AddedSamplesPanel)
        The method used and one panel per class predicted in ``extra``.
    """
    both = TopLabelData.concat([data, extra])
    old = fit_quietly(method, data, params=params, collect=DegenerateClassWarning)
    if not is_score_curve(old):
        raise TopcalError(f"the added-samples figure needs a score-based method (hist, kde-mon2, ...), not {method!r}")
    new = fit_quietly(method, both, params=params, collect=DegenerateClassWarning)
    lo, hi = data.score_range
    grid = np.linspace(lo, hi, n_points)
    etp, efp = extra.class_counts()
    otp, ofp = data.class_counts()
    panels = []
    for k, cname in _class_items(data, only):
        if etp[k] + efp[k] <= 0:
            continue
        panels.append(AddedSamplesPanel(
            cname, grid, model_curve(old, k, grid), model_curve(new, k, grid),
            data.class_support(k), both.class_support(k), float(etp[k]), float(efp[k]),
            (float(otp[k]), float(ofp[k])), (float(otp[k] + etp[k]), float(ofp[k] + efp[k])),
        ))
    return method, panels


# -------------------------------------------------------------------- draw
def _new_figure(figsize):
    from matplotlib.figure import Figure

    return Figure(figsize=figsize, layout="constrained")


def _grid_axes(fig, n: int, ncols: int, *, sharex=True, sharey=True):
    nrows = max(1, math.ceil(n / ncols))
    axes = np.atleast_1d(fig.subplots(nrows, ncols, sharex=sharex, sharey=sharey, squeeze=False)).ravel()
    for ax in axes[n:]:
        ax.set_visible(False)
    return list(axes[:n]), axes.reshape(nrows, ncols)


def _label_outer(axes2d, n: int, xlabel: str, ylabel: str):
    nrows, ncols = axes2d.shape
    for i, ax in enumerate(axes2d.ravel()[:n]):
        r, c = divmod(i, ncols)
        below_empty = (r + 1) * ncols + c >= n
        if below_empty:
            ax.set_xlabel(xlabel)
            ax.tick_params(labelbottom=True)
        if c == 0:
            ax.set_ylabel(ylabel)


def _default_ncols(n: int) -> int:
    return 1 if n == 1 else 2 if n <= 4 else 3 if n <= 9 else 4


def _gid_bars(bars, gid: str) -> None:
    for patch in bars.patches:
        patch.set_gid(gid)


def _draw_hist(ax, h: HistogramBars, *, color="0.85", edge="black", label="_nolegend_", gid="hist"):
    ok = ~np.isnan(h.values)
    left = h.edges[:-1][ok]
    width = np.diff(h.edges)[ok]
    heights = h.values[ok]
    sparse = h.sparse[ok]
    bars = ax.bar(left, heights, width=width, align="edge", color=color, edgecolor=edge, linewidth=0.7,
                  label=label, zorder=1)
    _gid_bars(bars, gid)
    for patch, sp in zip(bars.patches, sparse):
        patch.set_gid(gid)
        if sp:
            patch.set_linestyle((0, (3, 2)))
            patch.set_hatch("///")
            patch.set_facecolor("white")
            patch.set_edgecolor("0.35")
    return bars


def _shade_outside(ax, support, score_range):
    lo, hi = score_range
    if support is None:
        ax.axvspan(lo, hi, color="0.6", alpha=0.18, lw=0, zorder=0)
        return
    if support[0] > lo:
        ax.axvspan(lo, support[0], color="0.6", alpha=0.18, lw=0, zorder=0, gid="extrapolated")
    if support[1] < hi:
        ax.axvspan(support[1], hi, color="0.6", alpha=0.18, lw=0, zorder=0, gid="extrapolated")


def _diagonal(ax, score_range, label="uncalibrated score"):
    lo, hi = score_range
    (ln,) = ax.plot([lo, hi], [0, 1], ls="--", color="0.3", lw=1, label=label, zorder=2)
    ln.set_gid("uncalibrated")


def _fig_legend(fig, axes, ncol=None):
    handles, labels = {}, []
    for ax in axes:
        for h, lab in zip(*ax.get_legend_handles_labels()):
            if lab not in handles and not lab.startswith("_"):
                handles[lab] = h
                labels.append(lab)
    if labels:
        fit = max(1, int(fig.get_figwidth() / 2.3))  # entries per row that fit the figure's width
        fig.legend([handles[lab] for lab in labels], labels, loc="outside lower center",
                   ncol=ncol or min(len(labels), fit), fontsize=8, frameon=False, markerscale=3)


def plot_joint_distribution(jd: JointDistribution, *, fig=None):
    """Paper Figure 1: counts, confusion matrix and reverse confusion matrix (Conf1 on its diagonal).

    For binned data (no true class of false positives) a bar chart of Conf1
    and the TP/FP counts per class is drawn instead.

    Returns
    -------
    matplotlib.figure.Figure
    """
    k = len(jd.classes)
    if jd.counts is None:
        fig = fig or _new_figure((max(6.0, 0.55 * k + 2), 4.2))
        ax1, ax2 = fig.subplots(1, 2, gridspec_kw=dict(width_ratios=[1, 1]))
        x = np.arange(k)
        b1 = ax1.bar(x, jd.n_tp, color="tab:green", label="TP")
        b2 = ax1.bar(x, jd.n_fp, bottom=jd.n_tp, color="tab:orange", label="FP")
        _gid_bars(b1, "counts:tp")
        _gid_bars(b2, "counts:fp")
        tot = np.maximum(jd.n_tp + jd.n_fp, 1)
        if tot.max() > 50 * tot.min():
            ax1.set_yscale("log")  # stacked bars on log: FP segments of big classes stay visible
        ax1.set_title("positives per predicted class", fontsize=10)
        ax1.legend(fontsize=8)
        b3 = ax2.bar(x, np.nan_to_num(jd.conf1), color="tab:blue")
        _gid_bars(b3, "conf1")
        for xi, v in zip(x, jd.conf1):
            if not np.isnan(v):
                ax2.text(xi, v + 0.01, f"{v:.2f}", ha="center", va="bottom", fontsize=7)
        ax2.set_ylim(0, 1.1)
        ax2.set_title("Conf1 = |TP| / |P| per predicted class", fontsize=10)
        for ax in (ax1, ax2):
            ax.set_xticks(x, jd.classes, rotation=60, ha="right", fontsize=8)
            ax.set_xlabel("predicted class")
        return fig
    size = max(3.6, 0.4 * k + 1.6)
    fig = fig or _new_figure((size * 3, size + 0.5))
    ax1, ax2, ax3 = fig.subplots(1, 3)
    panels = [
        (ax1, jd.counts, "joint counts (true x predicted)", "counts", "{:.0f}"),
        (ax2, jd.confusion, "confusion matrix P(pred | true)\n(rows sum to 1)", "confusion", "{:.2f}"),
        (ax3, jd.reverse, "reverse confusion P(true | pred)\n(columns sum to 1; diagonal = Conf1)", "reverse",
         "{:.2f}"),
    ]
    from matplotlib.colors import LogNorm

    for ax, mat, title, gid, fmt in panels:
        if gid == "counts":
            shown = np.where(mat > 0, mat, np.nan)
            norm = LogNorm(vmin=1, vmax=max(2.0, float(np.nanmax(mat))))
        else:
            shown = mat
            norm = None
        im = ax.imshow(shown, cmap="Blues", norm=norm, vmin=None if norm else 0, vmax=None if norm else 1,
                       aspect="equal")
        im.set_gid(gid)
        ax.set_title(title if gid != "counts" else title + "\n ", fontsize=9)
        fs = 7 if k <= 12 else 5 if k <= 20 else 0
        if fs:
            for i in range(k):
                for j in range(k):
                    v = mat[i, j]
                    if np.isnan(v) or (gid == "counts" and v == 0):
                        continue
                    strong = float(im.norm(v)) > 0.6
                    ax.text(j, i, fmt.format(v), ha="center", va="center", fontsize=fs,
                            color="white" if strong else "black", fontweight="bold" if i == j else "normal")
        ticks = np.arange(k)
        ax.set_xticks(ticks, jd.classes, rotation=60, ha="right", fontsize=7)
        ax.set_yticks(ticks, jd.classes, fontsize=7)
        ax.set_xlabel("predicted class", fontsize=8)
        ax.set_ylabel("true class", fontsize=8)
    return fig


def plot_calibration_curves(grid: CurveGrid, *, fig=None, ncols: int | None = None, title: str | None = None,
                            panel_size: float = 2.6):
    """Small multiples, one panel per class: histogram bars, method curves, dashed diagonal.

    Sparse bins (fewer than 10 positives, and the lowest non-empty bin) are
    hatched with a dashed outline; scores outside the class's observed ones
    are shaded grey (the curve there is extrapolation). Clouds of
    non-score methods are drawn as dots. Axes are shared.

    Returns
    -------
    matplotlib.figure.Figure
    """
    n = len(grid.panels)
    ncols = ncols or _default_ncols(n)
    nrows = math.ceil(n / ncols)
    fig = fig or _new_figure((panel_size * ncols + 0.4, panel_size * 0.9 * nrows + 0.9))
    axes, axes2d = _grid_axes(fig, n, ncols)
    methods = list(grid.methods)
    for ax, p in zip(axes, grid.panels):
        _shade_outside(ax, p.support, grid.score_range)
        if p.hist is not None:
            _draw_hist(ax, p.hist)
        _diagonal(ax, grid.score_range)
        for name, (s, c) in p.clouds.items():
            sc = ax.scatter(s, c, s=3, alpha=0.35, color=_color(name, methods), lw=0, label=f"{name} (cloud)",
                            zorder=3, rasterized=True)
            sc.set_gid(f"cloud:{name}")
        for name, (s, c) in p.curves.items():
            if name == "hist" and p.hist is not None and len(p.hist.values) == 10:
                continue  # the bars are this curve
            (ln,) = ax.plot(s, c, color=_color(name, methods), lw=1.6, label=name, zorder=4)
            ln.set_gid(f"curve:{name}")
        ax.set_title(f"{p.class_name}  (TP {p.n_tp:.0f}, FP {p.n_fp:.0f})", fontsize=8.5)
        if p.support is None:
            ax.text(0.5, 0.55, "never predicted:\nraw score used", transform=ax.transAxes, ha="center",
                    fontsize=8, color="0.3")
        ax.set_xlim(*grid.score_range)
        ax.set_ylim(0, 1.02)
        ax.tick_params(labelsize=7)
        ax.grid(alpha=0.25, lw=0.5)
    _label_outer(axes2d, n, "score", "confidence")
    from matplotlib.patches import Patch

    extra = [Patch(fc="0.85", ec="black", label="Conf$_{Hist}$ (10 bins)"),
             Patch(fc="white", ec="0.35", hatch="///", ls="--", label=f"sparse bin (<{SPARSE_MIN:g} or lowest)"),
             Patch(fc="0.6", alpha=0.3, label="outside observed scores")]
    _fig_legend(fig, axes + [_LegendProxy(extra)])
    if title:
        fig.suptitle(title, fontsize=11)
    return fig


class _LegendProxy:
    """Feeds extra legend entries to :func:`_fig_legend`."""

    def __init__(self, handles):
        self.handles = handles

    def get_legend_handles_labels(self):
        return self.handles, [h.get_label() for h in self.handles]


def plot_kde_densities(panels: list, *, fig=None, ncols: int = 3, panel_size: float = 2.4):
    """Per class two panels: TP (green) and FP (orange) kernel densities, and Conf_KDE.

    Left of each pair: the weighted kernel sums over the true and false
    positives (and, with full score vectors, over every other sample's k-th
    score, black dotted: usually far off the scale, which is the point of
    the paper's Fig. 6). Right: Conf_KDE (blue) over the histogram, and the
    diluted confidence (red) when available.

    Returns
    -------
    matplotlib.figure.Figure
    """
    shown = [p for p in panels if p is not None]
    if not shown:
        raise TopcalError("no class has positives; nothing to plot")
    n = len(shown)
    ncols = min(ncols, n)
    nrows = math.ceil(n / ncols)
    fig = fig or _new_figure((2 * panel_size * ncols + 0.3, panel_size * 0.95 * nrows + 0.9))
    axes = np.atleast_2d(fig.subplots(nrows, 2 * ncols, squeeze=False))
    lo = min(p.score[0] for p in shown)
    hi = max(p.score[-1] for p in shown)
    for i in range(nrows * ncols):
        r, c = divmod(i, ncols)
        ad, ac = axes[r, 2 * c], axes[r, 2 * c + 1]
        if i >= n:
            ad.set_visible(False)
            ac.set_visible(False)
            continue
        p = shown[i]
        (l1,) = ad.plot(p.score, p.tp_density, color="tab:green", lw=1.4, label="TP density")
        (l2,) = ad.plot(p.score, p.fp_density, color="tab:orange", lw=1.4, label="FP density")
        l1.set_gid("density:tp")
        l2.set_gid("density:fp")
        top = max(float(np.max(p.tp_density)), float(np.max(p.fp_density)), 1e-300) * 1.15
        if p.neg_density is not None:
            (l3,) = ad.plot(p.score, p.neg_density, color="black", ls=":", lw=1.2,
                            label="k-th score of other samples")
            l3.set_gid("density:neg")
            peak = float(np.max(p.neg_density))
            if peak > top:
                ad.text(0.97, 0.97, f"others peak {peak:.3g}\n(off scale)", transform=ad.transAxes, ha="right",
                        va="top", fontsize=6)
        ad.set_ylim(0, top)
        ad.set_xlim(lo, hi)
        ad.set_title(f"{p.class_name}  b={p.bandwidth:.3g}", fontsize=8)
        _shade_outside(ac, p.support, (lo, hi))
        if p.hist is not None:
            _draw_hist(ac, p.hist)
        (l4,) = ac.plot(p.score, p.confidence, color="tab:blue", lw=1.5, label="Conf$_{KDE}$")
        l4.set_gid("confidence")
        if p.diluted is not None:
            (l5,) = ac.plot(p.score, p.diluted, color="tab:red", lw=1.3, label="diluted (all samples' k-th score)")
            l5.set_gid("diluted")
        ac.set_ylim(0, 1.02)
        ac.set_xlim(lo, hi)
        ac.set_title("confidence", fontsize=8)
        for ax in (ad, ac):
            ax.tick_params(labelsize=6)
            ax.grid(alpha=0.25, lw=0.5)
        if r == nrows - 1 or i + ncols >= n:
            ad.set_xlabel("score", fontsize=7)
            ac.set_xlabel("score", fontsize=7)
    _fig_legend(fig, [ax for ax in axes.ravel() if ax.get_visible()])
    return fig


def plot_ts_clouds(panels: list, *, method: str = "", fig=None, ncols: int | None = None,
                   panel_size: float = 2.5):
    """Paper Figs. 10-12: per class, score vs recalibrated yhat_k (TP green, FP orange).

    The class's Conf_Hist bars and the dashed diagonal are drawn for
    reference: a good fit puts the cloud through the bar tops.

    Returns
    -------
    matplotlib.figure.Figure
    """
    shown = [p for p in panels if p is not None]
    if not shown:
        raise TopcalError("no class has positives; nothing to plot")
    n = len(shown)
    ncols = ncols or _default_ncols(n)
    nrows = math.ceil(n / ncols)
    fig = fig or _new_figure((panel_size * ncols + 0.4, panel_size * 0.9 * nrows + 1.0))
    axes, axes2d = _grid_axes(fig, n, ncols)
    lo, hi = shown[0].score_range
    for ax, p in zip(axes, shown):
        if p.hist is not None:
            _draw_hist(ax, p.hist, color="0.92", edge="0.5")
        _diagonal(ax, (lo, hi))
        for mask, color, lab in ((p.correct, "tab:green", "TP"), (~p.correct, "tab:orange", "FP")):
            sc = ax.scatter(p.score[mask], p.confidence[mask], s=3, color=color, alpha=0.45, lw=0,
                            label=f"{method} yhat$_k$ ({lab})", rasterized=True, zorder=3)
            sc.set_gid(f"cloud:{lab.lower()}")
        ax.set_title(p.class_name, fontsize=9)
        ax.set_xlim(lo, hi)
        ax.set_ylim(0, 1.02)
        ax.tick_params(labelsize=7)
        ax.grid(alpha=0.25, lw=0.5)
    _label_outer(axes2d, n, "score y$_k$", "recalibrated ŷ$_k$")
    _fig_legend(fig, axes)
    if method:
        fig.suptitle(f"{method}: score vs recalibrated confidence", fontsize=11)
    return fig


def plot_method_bars(scores: MethodScores, *, ax=None, include_overall: bool = True):
    """Paper Fig. 17: grouped bars of a metric per class, one bar per method.

    Returns
    -------
    matplotlib.figure.Figure
    """
    k, m = scores.per_class.shape
    if ax is None:
        fig = _new_figure((max(7.0, min(12.5, 0.065 * (k + 1) * m + 3)), 4.2))
        ax = fig.add_subplot()
    else:
        fig = ax.figure
    groups = list(scores.classes) + (["overall"] if include_overall else [])
    vals = np.vstack([scores.per_class, scores.overall[None, :]]) if include_overall else scores.per_class
    x = np.arange(len(groups))
    width = 0.85 / m
    methods = list(scores.methods)
    for j, name in enumerate(methods):
        color = "0.8" if name == "uncalibrated" else _color(name, methods)
        bars = ax.bar(x - 0.425 + (j + 0.5) * width, np.nan_to_num(vals[:, j]), width=width, color=color,
                      label=name, edgecolor="white", linewidth=0.3)
        _gid_bars(bars, f"bars:{name}")
    ax.set_xticks(x, groups, rotation=45, ha="right", fontsize=8)
    ax.set_ylabel(f"{scores.metric.upper()} per sample")
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=7, ncol=min(m, 8), frameon=False, loc="lower center", bbox_to_anchor=(0.5, 1.0))
    if include_overall:
        ax.axvline(len(groups) - 1.5, color="0.6", lw=0.8, ls=":")
    return fig


def plot_histogram_overlay(overlay: HistogramOverlay, *, fig=None, ncols: int | None = None,
                           panel_size: float = 2.5):
    """Paper Fig. 4: per class, two test sets' Conf_Hist (solid black vs dashed red).

    Returns
    -------
    matplotlib.figure.Figure
    """
    n = len(overlay.classes)
    ncols = ncols or _default_ncols(n)
    nrows = math.ceil(n / ncols)
    fig = fig or _new_figure((panel_size * ncols + 0.4, panel_size * 0.9 * nrows + 0.9))
    axes, axes2d = _grid_axes(fig, n, ncols)
    styles = (dict(color="black", ls="-"), dict(color="tab:red", ls="--"))
    for ax, cname, h1, h2 in zip(axes, overlay.classes, overlay.first, overlay.second):
        _diagonal(ax, overlay.score_range)
        for h, st, lab, gid in ((h1, styles[0], overlay.labels[0], "hist:1"), (h2, styles[1], overlay.labels[1],
                                                                               "hist:2")):
            if h is None:
                continue
            y = np.concatenate([h.values, h.values[-1:]])
            (ln,) = ax.step(h.edges, y, where="post", lw=1.5, label=lab, **st)
            ln.set_gid(gid)
        ax.set_title(cname, fontsize=9)
        ax.set_xlim(*overlay.score_range)
        ax.set_ylim(0, 1.02)
        ax.tick_params(labelsize=7)
        ax.grid(alpha=0.25, lw=0.5)
    _label_outer(axes2d, n, "score", "Conf$_{Hist}$")
    _fig_legend(fig, axes)
    return fig


def plot_paired_bars(scores: PairedScores, *, ax=None):
    """Paper Figs. 18-19: per method, the metric on the fitting set (left) and the second set (right).

    Returns
    -------
    matplotlib.figure.Figure
    """
    m = len(scores.methods)
    if ax is None:
        fig = _new_figure((max(5.5, min(12.5, 0.6 * m + 2)), 3.8))
        ax = fig.add_subplot()
    else:
        fig = ax.figure
    x = np.arange(m)
    b1 = ax.bar(x - 0.2, scores.first, width=0.38, color="tab:blue", label=scores.labels[0])
    b2 = ax.bar(x + 0.2, scores.second, width=0.38, color="tab:orange", label=scores.labels[1])
    _gid_bars(b1, "paired:1")
    _gid_bars(b2, "paired:2")
    ax.set_xticks(x, scores.methods, rotation=45, ha="right", fontsize=8)
    vals = np.concatenate([scores.first, scores.second])
    vals = vals[np.isfinite(vals)]
    if vals.size and vals.min() > 0:
        # differences between the sets are small next to the values: crop the axis (and say so)
        span = vals.max() - vals.min()
        ax.set_ylim(max(0.0, vals.min() - 0.6 * span - 1e-9), vals.max() + 0.25 * span + 1e-9)
        ax.set_ylabel(f"{scores.metric.upper()} per sample (axis cropped)")
    else:
        ax.set_ylabel(f"{scores.metric.upper()} per sample")
    ax.set_title(f"fitted on the {scores.labels[0]}, evaluated on both", fontsize=9)
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=8, frameon=False)
    return fig


def plot_added_samples(method: str, panels: list, *, fig=None, ncols: int | None = None, panel_size: float = 2.8):
    """Paper Fig. 15: a class's curve before (black) and after (red) adding new samples.

    Returns
    -------
    matplotlib.figure.Figure
    """
    if not panels:
        raise TopcalError("the extra data predicts none of the classes; nothing to compare")
    n = len(panels)
    ncols = ncols or _default_ncols(n)
    nrows = math.ceil(n / ncols)
    if n == 1:
        panel_size = max(panel_size, 4.2)  # room for the legend under a single panel
    fig = fig or _new_figure((panel_size * ncols + 0.4, panel_size * 0.9 * nrows + 0.9))
    axes, axes2d = _grid_axes(fig, n, ncols)
    lo, hi = float(panels[0].score[0]), float(panels[0].score[-1])
    for ax, p in zip(axes, panels):
        _shade_outside(ax, p.new_support, (lo, hi))
        _diagonal(ax, (lo, hi))
        (l1,) = ax.plot(p.score, p.old, color="black", lw=1.5,
                        label=f"{method}, original data")
        (l2,) = ax.plot(p.score, p.new, color="tab:red", lw=1.5, label=f"{method}, with added samples")
        l1.set_gid("old")
        l2.set_gid("new")
        ax.set_title(f"{p.class_name}: +{p.added_tp:.0f} TP, +{p.added_fp:.0f} FP", fontsize=9)
        ax.text(0.03, 0.97, f"TP/FP {p.old_counts[0]:.0f}/{p.old_counts[1]:.0f} → "
                f"{p.new_counts[0]:.0f}/{p.new_counts[1]:.0f}", transform=ax.transAxes, va="top", fontsize=7)
        ax.set_xlim(lo, hi)
        ax.set_ylim(0, 1.02)
        ax.tick_params(labelsize=7)
        ax.grid(alpha=0.25, lw=0.5)
    _label_outer(axes2d, n, "score", "confidence")
    _fig_legend(fig, axes)
    return fig
