"""The report's acceptance panel: per class, accepted fraction against precision, with the
chosen cut-off.

Compute (:func:`acceptance_view`, pure) and draw (:func:`plot_acceptance`, matplotlib
imported lazily, no pyplot state, no rcParams changes) are separate, as in
:mod:`topcal.plots`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..data import TopLabelData, rows_by_class
from ..plots.draw import plain
from .core import Thresholds

__all__ = [
    "AcceptanceCurve",
    "AcceptanceView",
    "acceptance_curve",
    "acceptance_view",
    "plot_acceptance",
]


@dataclass(frozen=True)
class AcceptanceCurve:
    """One class's (or all classes') trade-off on labelled data.

    Attributes
    ----------
    name : str
        Class name, or "(all)" for every prediction under one cut-off.
    accepted_fraction, precision : ndarray (m,)
        For each distinct calibrated confidence c, from the highest down: the share of the
        class's predictions with confidence >= c, and their precision.
    cutoff : float or None
        The cut-off of the thresholds file (None: the class has none).
    chosen : (float, float) or None
        (accepted fraction, precision) at the cut-off on this data.
    reason : str or None
        Why the class has no cut-off.
    """

    name: str
    accepted_fraction: np.ndarray
    precision: np.ndarray
    cutoff: float | None
    chosen: tuple[float, float] | None
    reason: str | None
    #: what the cut-off and the curve's order are on: "confidence" or the raw "score"
    on: str = "confidence"


@dataclass(frozen=True)
class AcceptanceView:
    """The panel: target, delta, mode, and the curves ("(all)" first)."""

    target: float
    delta: float
    mode: str
    curves: tuple[AcceptanceCurve, ...]


def acceptance_curve(
    name,
    conf,
    tp,
    fp,
    cutoff=None,
    reason=None,
    *,
    max_points: int = 400,
    accepted=None,
    on: str = "confidence",
) -> AcceptanceCurve:
    """Accepted fraction and precision at every distinct confidence of these rows (thinned
    to ``max_points``)."""
    order = np.argsort(-conf, kind="stable")
    s = conf[order]
    ctp, cn = np.cumsum(tp[order]), np.cumsum(tp[order] + fp[order])
    last = np.flatnonzero(np.r_[s[1:] != s[:-1], True])  # the last row of each tie group
    last = last[cn[last] > 0]
    total = cn[-1] if cn.size else 0.0
    if last.size > max_points:
        last = last[np.unique(np.linspace(0, last.size - 1, max_points).round().astype(int))]
    frac = cn[last] / total if total > 0 else np.zeros(0)
    prec = ctp[last] / cn[last]
    chosen = None
    if cutoff is not None:
        acc = (
            conf >= cutoff if accepted is None else accepted
        )  # ``accepted``: the cut-off's own rule
        n = float(tp[acc].sum() + fp[acc].sum())
        if n > 0:
            chosen = (n / total, float(tp[acc].sum()) / n)
    return AcceptanceCurve(str(name), frac, prec, cutoff, chosen, reason, on)


def acceptance_view(
    model, data: TopLabelData, thresholds: Thresholds, *, max_classes: int = 11
) -> AcceptanceView:
    """The panel's curves for ``model`` (the thresholds' model, checked) on labelled
    ``data``: all classes together, then the ``max_classes`` most predicted classes."""
    thresholds.check_model(model)
    data.require_labels("the acceptance panel")
    data = data.with_classes(model.classes_, "the data")
    conf = model.predict(data)
    overall_on = data.score if thresholds.overall.on == "score" else conf
    curves = [
        acceptance_curve(
            "(all)",
            overall_on,
            data.tp,
            data.fp,
            thresholds.overall.cutoff,
            thresholds.overall.reason,
            accepted=thresholds.overall.accepts(conf, data.score),
            on=thresholds.overall.on,
        )
    ]
    groups = sorted(
        rows_by_class(data.pred, data.n_classes),
        key=lambda t: -(data.tp[t[1]] + data.fp[t[1]]).sum(),
    )
    for k, idx in groups[:max_classes]:
        c = thresholds.per_class[k]
        curves.append(
            acceptance_curve(
                c.name,
                (data.score if c.on == "score" else conf)[idx],
                data.tp[idx],
                data.fp[idx],
                c.cutoff,
                c.reason,
                accepted=c.accepts(conf[idx], data.score[idx]),
                on=c.on,
            )
        )
    return AcceptanceView(
        thresholds.precision, thresholds.delta, thresholds.mode, tuple(curves)
    )


def plot_acceptance(view: AcceptanceView, *, fig=None, ncols: int = 4):
    """One panel per curve: precision against accepted fraction, the target as a line, the
    cut-off as a dot.

    Returns
    -------
    matplotlib.figure.Figure
    """
    from matplotlib.figure import Figure

    n = len(view.curves)
    ncols = min(ncols, n)
    nrows = math.ceil(n / ncols)
    fig = fig or Figure(figsize=(2.7 * ncols + 0.4, 2.4 * nrows + 0.6), layout="constrained")
    axes = np.atleast_1d(fig.subplots(nrows, ncols, squeeze=False)).ravel()
    for ax in axes[n:]:
        ax.set_visible(False)
    for ax, c in zip(axes, view.curves):
        (line,) = ax.plot(
            c.accepted_fraction,
            c.precision,
            color="tab:blue",
            lw=1.4,
            label="precision on this data",
        )
        line.set_gid(f"acceptance:{c.name}")
        ax.axhline(view.target, color="0.4", ls="--", lw=0.9, label=f"target {view.target:g}")
        if c.chosen is not None:
            (dot,) = ax.plot(
                *c.chosen, "o", color="tab:red", ms=6, label="cut-off (guaranteed)"
            )
            dot.set_gid(f"cutoff:{c.name}")
            what = "raw score" if c.on == "score" else "confidence"
            ax.set_title(f"{plain(c.name)}: {what} >= {c.cutoff:.4g}", fontsize=8.5)
        else:
            ax.set_title(f"{plain(c.name)}: no cut-off", fontsize=8.5)
        ax.set_xlim(0, 1.02)
        lo = min(view.target, float(np.min(c.precision))) if c.precision.size else view.target
        ax.set_ylim(max(0.0, lo - 0.05), 1.005)
        ax.tick_params(labelsize=7)
        ax.grid(alpha=0.25, lw=0.5)
        ax.set_xlabel("accepted fraction", fontsize=7.5)
        ax.set_ylabel("precision", fontsize=7.5)
    axes[0].legend(fontsize=6.5, loc="lower left")
    return fig
