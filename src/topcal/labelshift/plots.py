"""The label-shift panel of the report: source vs use-set priors, and how the curves moved.

Compute (:func:`label_shift_view`, pure) and draw (:func:`plot_label_shift`, matplotlib
imported lazily, no pyplot state, no rcParams changes) are separate, as in
:mod:`topcal.plots`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, cast

import numpy as np

from ..errors import TopcalError
from . import AdaptedCalibrator
from ..plots.draw import plain, plain_all

__all__ = ["LabelShiftView", "label_shift_view", "plot_label_shift"]


@dataclass(frozen=True)
class LabelShiftView:
    """What the panel shows.

    Attributes
    ----------
    classes : tuple of str
    source, priors : ndarray (K,)
        Test-set and use-set class priors.
    lower, upper : ndarray (K,) or None
        Bootstrap interval of the use-set priors.
    label : str
        How the priors were obtained (estimator and basis).
    curves : list of (class name, score, before, after)
        Confidence curves of the classes whose curve moved most (largest mean |after -
        before|), for score-based source methods; empty for methods without per-class
        curves.
    score_range : (float, float)
    """

    classes: tuple[str, ...]
    source: np.ndarray
    priors: np.ndarray
    lower: np.ndarray | None
    upper: np.ndarray | None
    label: str
    curves: list
    score_range: tuple[float, float]


def label_shift_view(
    adapted: AdaptedCalibrator, *, max_curves: int = 9, n_points: int = 201
) -> LabelShiftView:
    """Priors and the ``max_curves`` most-moved curves of an adapted model (see
    :func:`topcal.labelshift.adapt`)."""
    if not isinstance(adapted, AdaptedCalibrator):
        raise TopcalError(
            f"the label-shift panel needs an adapted model (topcal adapt), got "
            f"{type(adapted).__name__}"
        )
    e = adapted.estimate_
    label = (
        "given priors"
        if e.estimator == "given"
        else f"{e.estimator} on {e.n_use} use rows ({e.basis})"
    )
    curves = []
    moved = []
    try:
        for i, c in enumerate(adapted.classes_):
            # raises for methods without score curves
            after = adapted.curve(i, n_points=n_points)
            before = cast(Any, adapted.inner_).curve(i, n_points=n_points)
            moved.append(
                (
                    float(np.mean(np.abs(after.confidence - before.confidence))),
                    c,
                    before.score,
                    before.confidence,
                    after.confidence,
                )
            )
    except TopcalError:  # a method without per-class score curves (temperature family)
        moved = []
    moved.sort(key=lambda t: -t[0])
    curves = [(c, s, b, a) for _, c, s, b, a in moved[:max_curves]]
    return LabelShiftView(
        tuple(adapted.classes_),
        e.source.copy(),
        e.priors.copy(),
        None if e.lower is None else e.lower.copy(),
        None if e.upper is None else e.upper.copy(),
        label,
        curves,
        tuple(adapted.score_range_),
    )


def plot_label_shift(view: LabelShiftView, *, fig=None):
    """Bars of source and use-set priors (with intervals), then before/after curves per
    class.

    Returns
    -------
    matplotlib.figure.Figure
    """
    from matplotlib.figure import Figure

    K = len(view.classes)
    n_cur = len(view.curves)
    ncols = 3
    nrows = math.ceil(n_cur / ncols)
    width = max(7.5, min(16.0, 0.18 * K + 3))
    fig = fig or Figure(figsize=(width, 3.0 + 2.3 * nrows), layout="constrained")
    gs = fig.add_gridspec(1 + nrows, ncols, height_ratios=[1.3] + [1.0] * nrows)
    ax = fig.add_subplot(gs[0, :])
    x = np.arange(K)
    wbar = 0.4
    b1 = ax.bar(x - wbar / 2, view.source, wbar, color="0.65", label="test set (source)")
    for r in b1:
        r.set_gid("priors:source")
    yerr = None
    if view.lower is not None:
        yerr = np.vstack(
            [np.maximum(view.priors - view.lower, 0), np.maximum(view.upper - view.priors, 0)]
        )
    b2 = ax.bar(
        x + wbar / 2,
        view.priors,
        wbar,
        color="tab:blue",
        yerr=yerr,
        capsize=2 if K <= 30 else 0,
        error_kw={"lw": 0.8},
        label="use set: " + view.label,
    )
    for r in b2:
        r.set_gid("priors:use")
    if K <= 30:
        ax.set_xticks(
            x,
            plain_all(view.classes),
            rotation=45 if K > 8 else 0,
            ha="right" if K > 8 else "center",
            fontsize=8,
        )
    else:
        ax.set_xlabel("class index")
    ax.set_ylabel("class prior")
    ax.legend(fontsize=8, loc="upper right")
    ax.grid(axis="y", alpha=0.25, lw=0.5)
    for j, (name, s, before, after) in enumerate(view.curves):
        a = fig.add_subplot(gs[1 + j // ncols, j % ncols])
        a.plot(view.score_range, [0, 1], color="0.7", lw=0.8, ls=":")  # the uncalibrated score
        (l0,) = a.plot(
            s, before, color="0.35", ls="--", lw=1.3, label="before (test-set priors)"
        )
        (l1,) = a.plot(s, after, color="tab:blue", lw=1.6, label="after (use-set priors)")
        l0.set_gid(f"curve-before:{name}")
        l1.set_gid(f"curve-after:{name}")
        a.set_title(plain(name), fontsize=8.5)
        a.set_xlim(*view.score_range)
        a.set_ylim(0, 1.02)
        a.tick_params(labelsize=7)
        a.grid(alpha=0.25, lw=0.5)
        if j == 0:
            a.legend(fontsize=7, loc="upper left")
    return fig
