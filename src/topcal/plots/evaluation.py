"""Figures of evaluated methods and of a second test set: the NLL bars (paper Fig. 17), the
overlaid histograms of two sets (Fig. 4), paired bars set 1 against set 2 (Figs. 18-19) and
the effect of adding labelled samples (Fig. 15). Compute functions only (no matplotlib); the
plot functions are in :mod:`topcal.plots.draw`, the per-class curve figures in
:mod:`topcal.plots.compute`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import cast

import numpy as np

from ..data import TopLabelData
from ..errors import DegenerateClassWarning, TopcalError
from ..evaluate import Comparison, fit_quietly
from .compute import class_histograms, class_items, is_score_curve, model_curve

__all__ = [
    "MethodScores",
    "HistogramOverlay",
    "PairedScores",
    "AddedSamplesPanel",
    "method_scores",
    "histogram_overlay",
    "paired_scores",
    "added_samples_effect",
]


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


def method_scores(comparison, metric: str = "nll") -> MethodScores:
    """Pick one metric out of :func:`topcal.evaluate.compare_methods` output (or its dict
    form)."""
    res = Comparison.of(comparison).methods
    methods = tuple(res)
    if not methods:
        raise TopcalError(
            "the comparison holds no methods; give at least one method that can run on "
            "this data"
        )
    classes = tuple(res[methods[0]][metric].per_class)
    per = np.array(
        [
            [
                np.nan if res[m][metric].per_class[c] is None else res[m][metric].per_class[c]
                for m in methods
            ]
            for c in classes
        ],
        dtype=float,
    )
    overall = np.array([res[m][metric].overall for m in methods], dtype=float)
    return MethodScores(metric, classes, methods, per, overall)


@dataclass(frozen=True)
class HistogramOverlay:
    """Two test sets' histogram confidences per class (paper Fig. 4)."""

    classes: tuple[str, ...]
    score_range: tuple[float, float]
    first: tuple
    second: tuple
    labels: tuple[str, str]


def histogram_overlay(
    data1: TopLabelData,
    data2: TopLabelData,
    *,
    n_bins: int = 10,
    labels: tuple[str, str] = ("test set 1", "test set 2"),
    only=None,
) -> HistogramOverlay:
    """Conf_Hist of each class (or of the class indices ``only``) on two test sets with the
    same classes and scale."""
    if data1.classes != data2.classes or data1.score_range != data2.score_range:
        raise TopcalError(
            "the two test sets must have the same classes and score range to be compared"
        )
    items = class_items(data1, only)
    h1, h2 = class_histograms(data1, n_bins=n_bins), class_histograms(data2, n_bins=n_bins)
    return HistogramOverlay(
        tuple(c for _, c in items),
        data1.score_range,
        tuple(h1[k] for k, _ in items),
        tuple(h2[k] for k, _ in items),
        cast("tuple[str, str]", tuple(labels)),
    )


@dataclass(frozen=True)
class PairedScores:
    """A metric per method on two test sets, methods fitted on the first (paper Figs.
    18-19).

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


def paired_scores(
    same, holdout, metric: str = "nll", labels: tuple[str, str] = ("fit set", "second set")
) -> PairedScores:
    """Combine a "same" and a "holdout" comparison (same fitting data) into paired bars."""
    a, b = method_scores(same, metric), method_scores(holdout, metric)
    methods = tuple(m for m in a.methods if m in b.methods)
    ia = [a.methods.index(m) for m in methods]
    ib = [b.methods.index(m) for m in methods]
    return PairedScores(
        metric,
        methods,
        a.overall[ia],
        b.overall[ib],
        a.per_class[:, ia],
        b.per_class[:, ib],
        cast("tuple[str, str]", tuple(labels)),
    )


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


def added_samples_effect(
    data: TopLabelData,
    extra: TopLabelData,
    method: str = "hist",
    *,
    params: dict | None = None,
    n_points: int = 401,
    only=None,
) -> tuple[str, list[AddedSamplesPanel]]:
    """Refit ``method`` on ``data`` + ``extra`` and compare curves for the classes ``extra``
    touches.

    Parameters
    ----------
    data, extra : TopLabelData (labelled, same classes, scale and form)
    method : str, default "hist"
        A method whose confidence is a function of the score, e.g. "kde-mon2".
    params : dict, optional
        Its parameters (e.g. ``{"bandwidth": 0.3}`` for "kde", so that both fits share one
        bandwidth, as in the paper's Fig. 15).
    n_points : int, default 401

    Returns
    -------
    (str, list of AddedSamplesPanel)
        The method used and one panel per class predicted in ``extra``.
    """
    both = TopLabelData.concat([data, extra])
    old = fit_quietly(method, data, params=params, collect=DegenerateClassWarning)
    if not is_score_curve(old):
        raise TopcalError(
            f"the added-samples figure needs a score-based method (hist, kde-mon2, ...), not "
            f"{method!r}"
        )
    new = fit_quietly(method, both, params=params, collect=DegenerateClassWarning)
    lo, hi = data.score_range
    grid = np.linspace(lo, hi, n_points)
    etp, efp = extra.class_counts()
    otp, ofp = data.class_counts()
    panels = []
    for k, cname in class_items(data, only):
        if etp[k] + efp[k] <= 0:
            continue
        panels.append(
            AddedSamplesPanel(
                cname,
                grid,
                model_curve(old, k, grid),
                model_curve(new, k, grid),
                data.class_support(k),
                both.class_support(k),
                float(etp[k]),
                float(efp[k]),
                (float(otp[k]), float(ofp[k])),
                (float(otp[k] + etp[k]), float(ofp[k] + efp[k])),
            )
        )
    return method, panels
