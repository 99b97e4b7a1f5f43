"""Drawing the figures' data (:mod:`topcal.plots.compute`) as matplotlib Figures.

matplotlib is imported inside the functions, so importing this module stays light. It draws
eight figures (see the table in :mod:`topcal.plots`); what they share (colours, text drawn
as written, panel grids, legends) is in :mod:`topcal.plots.primitives`.
"""

from __future__ import annotations

import math

import numpy as np

from ..calibrators.registry import lookup
from ..errors import TopcalError
from .compute import BARS_METHOD, CurveGrid, JointDistribution, SPARSE_MIN
from .evaluation import HistogramOverlay, MethodScores, PairedScores
from .primitives import (
    METHOD_COLORS,
    color_of,
    diagonal,
    draw_hist,
    fig_legend,
    gid_bars,
    label_outer,
    new_figure,
    plain,
    plain_all,
    probability_axes,
    shade_outside,
    small_multiples,
    with_positives,
)

__all__ = [
    "plot_joint_distribution",
    "plot_calibration_curves",
    "plot_kde_densities",
    "plot_ts_clouds",
    "plot_method_bars",
    "plot_histogram_overlay",
    "plot_paired_bars",
    "plot_added_samples",
    "METHOD_COLORS",
    "plain",
    "plain_all",
]


def plot_joint_distribution(jd: JointDistribution, *, fig=None):
    """Paper Figure 1: counts, confusion matrix and reverse confusion matrix (Conf1 on its
    diagonal).

    For binned data (no true class of false positives) a bar chart of Conf1 and the TP/FP
    counts per class is drawn instead.

    Returns
    -------
    matplotlib.figure.Figure
    """
    k = len(jd.classes)
    if jd.counts is None:
        return _binned_joint(jd, fig)
    size = max(3.6, 0.4 * k + 1.6)
    fig = fig or new_figure((size * 3, size + 0.5))
    ax1, ax2, ax3 = fig.subplots(1, 3)
    panels = [
        (ax1, jd.counts, "joint counts (true x predicted)", "counts", "{:.0f}"),
        (ax2, jd.confusion, "confusion matrix P(pred | true)\n(rows sum to 1)", "confusion",
         "{:.2f}"),
        (ax3, jd.reverse,
         "reverse confusion P(true | pred)\n(columns sum to 1; diagonal = Conf1)", "reverse",
         "{:.2f}"),
    ]  # fmt: skip
    for panel in panels:
        _matrix_panel(*panel, jd.classes)
    return fig


def _binned_joint(jd: JointDistribution, fig):
    """:func:`plot_joint_distribution` of binned data: TP/FP counts and Conf1 per class."""
    k = len(jd.classes)
    fig = fig or new_figure((max(6.0, 0.55 * k + 2), 4.2))
    ax1, ax2 = fig.subplots(1, 2, gridspec_kw=dict(width_ratios=[1, 1]))
    x = np.arange(k)
    b1 = ax1.bar(x, jd.n_tp, color="tab:green", label="TP")
    b2 = ax1.bar(x, jd.n_fp, bottom=jd.n_tp, color="tab:orange", label="FP")
    gid_bars(b1, "counts:tp")
    gid_bars(b2, "counts:fp")
    tot = np.maximum(jd.n_tp + jd.n_fp, 1)
    if tot.max() > 50 * tot.min():
        ax1.set_yscale("log")  # stacked bars on log: FP segments of big classes stay visible
    ax1.set_title("positives per predicted class", fontsize=10)
    ax1.legend(fontsize=8)
    b3 = ax2.bar(x, np.nan_to_num(jd.conf1), color="tab:blue")
    gid_bars(b3, "conf1")
    for xi, v in zip(x, jd.conf1):
        if not np.isnan(v):
            ax2.text(xi, v + 0.01, f"{v:.2f}", ha="center", va="bottom", fontsize=7)
    ax2.set_ylim(0, 1.1)
    ax2.set_title("Conf1 = |TP| / |P| per predicted class", fontsize=10)
    for ax in (ax1, ax2):
        ax.set_xticks(x, plain_all(jd.classes), rotation=60, ha="right", fontsize=8)
        ax.set_xlabel("predicted class")
    return fig


def _matrix_panel(ax, mat, title, gid, fmt, classes) -> None:
    """One matrix of :func:`plot_joint_distribution`, each cell's value written in it where
    the classes are few."""
    from matplotlib.colors import LogNorm

    k = len(classes)
    if gid == "counts":
        shown = np.where(mat > 0, mat, np.nan)
        norm = LogNorm(vmin=1, vmax=max(2.0, float(np.nanmax(mat))))
    else:
        shown = mat
        norm = None
    im = ax.imshow(
        shown,
        cmap="Blues",
        norm=norm,
        vmin=None if norm else 0,
        vmax=None if norm else 1,
        aspect="equal",
    )
    im.set_gid(gid)
    ax.set_title(title if gid != "counts" else title + "\n ", fontsize=9)
    fs = 7 if k <= 12 else 5 if k <= 20 else 0
    for i, j in np.ndindex(k, k) if fs else ():
        v = mat[i, j]
        if np.isnan(v) or (gid == "counts" and v == 0):
            continue
        strong = float(im.norm(v)) > 0.6
        color, weight = "white" if strong else "black", "bold" if i == j else "normal"
        ax.text(j, i, fmt.format(v), ha="center", va="center", fontsize=fs, color=color,
                fontweight=weight)  # fmt: skip
    ticks = np.arange(k)
    ax.set_xticks(ticks, plain_all(classes), rotation=60, ha="right", fontsize=7)
    ax.set_yticks(ticks, plain_all(classes), fontsize=7)
    ax.set_xlabel("predicted class", fontsize=8)
    ax.set_ylabel("true class", fontsize=8)


def plot_calibration_curves(
    grid: CurveGrid,
    *,
    fig=None,
    ncols: int | None = None,
    title: str | None = None,
    panel_size: float = 2.6,
):
    """Small multiples, one panel per class: histogram bars, method curves, dashed diagonal.

    Around each curve with interval limits (``grid.band_level``), a translucent band in the
    curve's colour: the interval on the fitted curve (docs/intervals.md).

    Sparse bins (fewer than 10 positives, and the lowest non-empty bin) are hatched with a
    dashed outline; scores outside the class's observed ones are shaded grey (the curve
    there is extrapolation). Clouds of non-score methods are drawn as dots. Axes are shared.

    Returns
    -------
    matplotlib.figure.Figure
    """
    n = len(grid.panels)
    fig, axes, axes2d = small_multiples(fig, n, ncols, panel_size)
    methods = list(grid.methods)
    for ax, p in zip(axes, grid.panels):
        _curve_panel(ax, p, methods, grid.score_range)
    label_outer(axes2d, n, "score", "confidence")
    from matplotlib.patches import Patch

    extra = [
        Patch(fc="0.85", ec="black", label="Conf$_{Hist}$ (10 bins)"),
        Patch(
            fc="white",
            ec="0.35",
            hatch="///",
            ls="--",
            label=f"sparse bin (<{SPARSE_MIN:g} or lowest)",
        ),
        Patch(fc="0.6", alpha=0.3, label="outside observed scores"),
    ]
    if any(p.bands for p in grid.panels):
        extra.append(
            Patch(fc="0.5", alpha=0.25, label=f"{grid.band_level:.0%} interval on the curve")
        )
    fig_legend(fig, axes + [_LegendProxy(extra)])
    if title:
        fig.suptitle(plain(title), fontsize=11)
    return fig


def _curve_panel(ax, p, methods, score_range) -> None:
    """One class's panel of :func:`plot_calibration_curves`."""
    shade_outside(ax, p.support, score_range)
    if p.hist is not None:
        draw_hist(ax, p.hist)
    diagonal(ax, score_range)
    for name, (s, c) in p.clouds.items():
        sc = ax.scatter(
            s,
            c,
            s=3,
            alpha=0.35,
            color=color_of(name, methods),
            lw=0,
            label=f"{name} (cloud)",
            zorder=3,
            rasterized=True,
        )
        sc.set_gid(f"cloud:{name}")
    for name, (s, lo, hi) in p.bands.items():
        band = ax.fill_between(
            s, lo, hi, color=color_of(name, methods), alpha=0.18, lw=0, zorder=3.5,
            label="_nolegend_",
        )  # fmt: skip
        band.set_gid(f"band:{name}")
    for name, (s, c) in p.curves.items():
        if name == BARS_METHOD and p.hist is not None and len(p.hist.values) == 10:
            continue  # the bars are this curve
        (ln,) = ax.plot(s, c, color=color_of(name, methods), lw=1.6, label=name, zorder=4)
        ln.set_gid(f"curve:{name}")
    ax.set_title(f"{plain(p.class_name)}  (TP {p.n_tp:.0f}, FP {p.n_fp:.0f})", fontsize=8.5)
    if p.support is None:
        ax.text(0.5, 0.55, "never predicted:\nraw score used", transform=ax.transAxes,
                ha="center", fontsize=8, color="0.3")  # fmt: skip
    probability_axes(ax, score_range)


class _LegendProxy:
    """Feeds extra legend entries to :func:`fig_legend`."""

    def __init__(self, handles):
        self.handles = handles

    def get_legend_handles_labels(self):
        return self.handles, [h.get_label() for h in self.handles]


def plot_kde_densities(panels: list, *, fig=None, ncols: int = 3, panel_size: float = 2.4):
    """Per class two panels: TP (green) and FP (orange) kernel densities, and Conf_KDE.

    Left of each pair: the weighted kernel sums over the true and false positives (and, with
    full score vectors, over every other sample's k-th score, black dotted: usually far off
    the scale, which is the point of the paper's Fig. 6). Right: Conf_KDE (blue) over the
    histogram, and the diluted confidence (red) when available.

    Returns
    -------
    matplotlib.figure.Figure
    """
    shown = with_positives(panels)
    n = len(shown)
    ncols = min(ncols, n)
    nrows = math.ceil(n / ncols)
    fig = fig or new_figure((2 * panel_size * ncols + 0.3, panel_size * 0.95 * nrows + 0.9))
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
        _density_panel(ad, p, (lo, hi))
        _kde_confidence_panel(ac, p, (lo, hi))
        for ax in (ad, ac):
            ax.tick_params(labelsize=6)
            ax.grid(alpha=0.25, lw=0.5)
        if r == nrows - 1 or i + ncols >= n:
            ad.set_xlabel("score", fontsize=7)
            ac.set_xlabel("score", fontsize=7)
    fig_legend(fig, [ax for ax in axes.ravel() if ax.get_visible()])
    return fig


def _density_panel(ad, p, span) -> None:
    """The TP and FP kernel densities of one class (:func:`plot_kde_densities`)."""
    (l1,) = ad.plot(p.score, p.tp_density, color="tab:green", lw=1.4, label="TP density")
    (l2,) = ad.plot(p.score, p.fp_density, color="tab:orange", lw=1.4, label="FP density")
    l1.set_gid("density:tp")
    l2.set_gid("density:fp")
    top = max(float(np.max(p.tp_density)), float(np.max(p.fp_density)), 1e-300) * 1.15
    if p.neg_density is not None:
        (l3,) = ad.plot(
            p.score, p.neg_density, color="black", ls=":", lw=1.2,
            label="k-th score of other samples",
        )  # fmt: skip
        l3.set_gid("density:neg")
        peak = float(np.max(p.neg_density))
        if peak > top:
            ad.text(0.97, 0.97, f"others peak {peak:.3g}\n(off scale)", transform=ad.transAxes,
                    ha="right", va="top", fontsize=6)  # fmt: skip
    ad.set_ylim(0, top)
    ad.set_xlim(*span)
    ad.set_title(f"{plain(p.class_name)}  b={p.bandwidth:.3g}", fontsize=8)


def _kde_confidence_panel(ac, p, span) -> None:
    """Conf_KDE of one class over its histogram (:func:`plot_kde_densities`)."""
    shade_outside(ac, p.support, span)
    if p.hist is not None:
        draw_hist(ac, p.hist)
    (l4,) = ac.plot(p.score, p.confidence, color="tab:blue", lw=1.5, label="Conf$_{KDE}$")
    l4.set_gid("confidence")
    if p.diluted is not None:
        (l5,) = ac.plot(
            p.score,
            p.diluted,
            color="tab:red",
            lw=1.3,
            label="diluted (all samples' k-th score)",
        )
        l5.set_gid("diluted")
    ac.set_ylim(0, 1.02)
    ac.set_xlim(*span)
    ac.set_title("confidence", fontsize=8)


def plot_ts_clouds(
    panels: list,
    *,
    method: str = "",
    fig=None,
    ncols: int | None = None,
    panel_size: float = 2.5,
):
    """Paper Figs. 10-12: per class, score vs recalibrated yhat_k (TP green, FP orange).

    The class's Conf_Hist bars and the dashed diagonal are drawn for reference: a good fit
    puts the cloud through the bar tops.

    Returns
    -------
    matplotlib.figure.Figure
    """
    shown = with_positives(panels)
    n = len(shown)
    fig, axes, axes2d = small_multiples(fig, n, ncols, panel_size, 1.0)
    lo, hi = shown[0].score_range
    for ax, p in zip(axes, shown):
        if p.hist is not None:
            draw_hist(ax, p.hist, color="0.92", edge="0.5")
        diagonal(ax, (lo, hi))
        for mask, color, lab in (
            (p.correct, "tab:green", "TP"),
            (~p.correct, "tab:orange", "FP"),
        ):
            sc = ax.scatter(
                p.score[mask],
                p.confidence[mask],
                s=3,
                color=color,
                alpha=0.45,
                lw=0,
                label=f"{method} yhat$_k$ ({lab})",
                rasterized=True,
                zorder=3,
            )
            sc.set_gid(f"cloud:{lab.lower()}")
        ax.set_title(plain(p.class_name), fontsize=9)
        probability_axes(ax, (lo, hi))
    label_outer(axes2d, n, "score y$_k$", "recalibrated ŷ$_k$")
    fig_legend(fig, axes)
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
        fig = new_figure((max(7.0, min(12.5, 0.065 * (k + 1) * m + 3)), 4.2))
        ax = fig.add_subplot()
    else:
        fig = ax.figure
    groups = list(scores.classes) + (["overall"] if include_overall else [])
    vals = (
        np.vstack([scores.per_class, scores.overall[None, :]])
        if include_overall
        else scores.per_class
    )
    x = np.arange(len(groups))
    width = 0.85 / m
    methods = list(scores.methods)
    for j, name in enumerate(methods):
        color = (
            "0.8" if getattr(lookup(name), "is_baseline", False) else color_of(name, methods)
        )
        bars = ax.bar(
            x - 0.425 + (j + 0.5) * width,
            np.nan_to_num(vals[:, j]),
            width=width,
            color=color,
            label=name,
            edgecolor="white",
            linewidth=0.3,
        )
        gid_bars(bars, f"bars:{name}")
    ax.set_xticks(x, plain_all(groups), rotation=45, ha="right", fontsize=8)
    ax.set_ylabel(f"{scores.metric.upper()} per sample")
    ax.grid(axis="y", alpha=0.3)
    ax.legend(
        fontsize=7,
        ncol=min(m, 8),
        frameon=False,
        loc="lower center",
        bbox_to_anchor=(0.5, 1.0),
    )
    if include_overall:
        ax.axvline(len(groups) - 1.5, color="0.6", lw=0.8, ls=":")
    return fig


def plot_histogram_overlay(
    overlay: HistogramOverlay, *, fig=None, ncols: int | None = None, panel_size: float = 2.5
):
    """Paper Fig. 4: per class, two test sets' Conf_Hist (solid black vs dashed red).

    Returns
    -------
    matplotlib.figure.Figure
    """
    n = len(overlay.classes)
    fig, axes, axes2d = small_multiples(fig, n, ncols, panel_size)
    styles = (dict(color="black", ls="-"), dict(color="tab:red", ls="--"))
    for ax, cname, h1, h2 in zip(axes, overlay.classes, overlay.first, overlay.second):
        diagonal(ax, overlay.score_range)
        for h, st, lab, gid in (
            (h1, styles[0], overlay.labels[0], "hist:1"),
            (h2, styles[1], overlay.labels[1], "hist:2"),
        ):
            if h is None:
                continue
            y = np.concatenate([h.values, h.values[-1:]])
            (ln,) = ax.step(h.edges, y, where="post", lw=1.5, label=lab, **st)
            ln.set_gid(gid)
        ax.set_title(plain(cname), fontsize=9)
        probability_axes(ax, overlay.score_range)
    label_outer(axes2d, n, "score", "Conf$_{Hist}$")
    fig_legend(fig, axes)
    return fig


def plot_paired_bars(scores: PairedScores, *, ax=None):
    """Paper Figs. 18-19: per method, the metric on the fitting set (left) and the second
    set (right).

    Returns
    -------
    matplotlib.figure.Figure
    """
    m = len(scores.methods)
    if ax is None:
        fig = new_figure((max(5.5, min(12.5, 0.6 * m + 2)), 3.8))
        ax = fig.add_subplot()
    else:
        fig = ax.figure
    x = np.arange(m)
    b1 = ax.bar(x - 0.2, scores.first, width=0.38, color="tab:blue", label=scores.labels[0])
    b2 = ax.bar(x + 0.2, scores.second, width=0.38, color="tab:orange", label=scores.labels[1])
    gid_bars(b1, "paired:1")
    gid_bars(b2, "paired:2")
    ax.set_xticks(x, plain_all(scores.methods), rotation=45, ha="right", fontsize=8)
    vals = np.concatenate([scores.first, scores.second])
    vals = vals[np.isfinite(vals)]
    if vals.size and vals.min() > 0:
        # differences between the sets are small next to the values: crop the axis (and say
        # so)
        span = vals.max() - vals.min()
        ax.set_ylim(max(0.0, vals.min() - 0.6 * span - 1e-9), vals.max() + 0.25 * span + 1e-9)
        ax.set_ylabel(f"{scores.metric.upper()} per sample (axis cropped)")
    else:
        ax.set_ylabel(f"{scores.metric.upper()} per sample")
    ax.set_title(f"fitted on the {scores.labels[0]}, evaluated on both", fontsize=9)
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=8, frameon=False)
    return fig


def plot_added_samples(
    method: str, panels: list, *, fig=None, ncols: int | None = None, panel_size: float = 2.8
):
    """Paper Fig. 15: a class's curve before (black) and after (red) adding new samples.

    Returns
    -------
    matplotlib.figure.Figure
    """
    if not panels:
        raise TopcalError("the extra data predicts none of the classes; nothing to compare")
    n = len(panels)
    if n == 1:
        panel_size = max(panel_size, 4.2)  # room for the legend under a single panel
    fig, axes, axes2d = small_multiples(fig, n, ncols, panel_size)
    lo, hi = float(panels[0].score[0]), float(panels[0].score[-1])
    for ax, p in zip(axes, panels):
        shade_outside(ax, p.new_support, (lo, hi))
        diagonal(ax, (lo, hi))
        (l1,) = ax.plot(
            p.score, p.old, color="black", lw=1.5, label=f"{method}, original data"
        )
        (l2,) = ax.plot(
            p.score, p.new, color="tab:red", lw=1.5, label=f"{method}, with added samples"
        )
        l1.set_gid("old")
        l2.set_gid("new")
        ax.set_title(
            f"{plain(p.class_name)}: +{p.added_tp:.0f} TP, +{p.added_fp:.0f} FP", fontsize=9
        )
        ax.text(
            0.03,
            0.97,
            f"TP/FP {p.old_counts[0]:.0f}/{p.old_counts[1]:.0f} → "
            f"{p.new_counts[0]:.0f}/{p.new_counts[1]:.0f}",
            transform=ax.transAxes,
            va="top",
            fontsize=7,
        )
        probability_axes(ax, (lo, hi))
    label_outer(axes2d, n, "score", "confidence")
    fig_legend(fig, axes)
    return fig
