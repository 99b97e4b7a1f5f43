"""What the figures of :mod:`topcal.plots.draw` share: each method's colour, text drawn as
written, new figures and grids of panels, shared legends, histogram bars, the dashed
diagonal and the shaded extrapolation.

Kept apart from ``draw.py``, the helpers under public names (``draw.py`` imports them; it
re-exports ``METHOD_COLORS``, ``plain`` and ``plain_all``). matplotlib is imported inside
the functions, so importing this module stays light.
"""

from __future__ import annotations

import math

import numpy as np

from .._tables import printable
from ..calibrators.registry import BASELINE
from ..errors import TopcalError
from .compute import BARS_METHOD, HistogramBars

__all__ = [
    "METHOD_COLORS",
    "color_of",
    "MAX_DRAWN",
    "plain",
    "plain_all",
    "new_figure",
    "grid_axes",
    "small_multiples",
    "with_positives",
    "label_outer",
    "default_ncols",
    "gid_bars",
    "draw_hist",
    "shade_outside",
    "diagonal",
    "probability_axes",
    "fig_legend",
]

#: Colour of each method's curve and bar (paper colours where the paper fixes one: Conf_KDE
#: blue, b_mon2 magenta, b_opt maroon, Conf_Cum* green, Conf_Hist black); no two methods
#: share one, so every method of a bar chart is told apart (``uncalibrated`` bars are grey).
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
    "sts": "tab:orange",
    "csts": "chocolate",
    "tswa": "yellowgreen",
    "cstswa": "tab:purple",
    "bts": "tab:pink",
    "btswa": "darkgoldenrod",
    "auto": "teal",
}
_FALLBACK_COLORS = [
    c
    for c in (
        "tab:brown",
        "navy",
        "crimson",
        "darkseagreen",
        "orchid",
        "steelblue",
        "sienna",
        "darkkhaki",
        "indigo",
        "lightcoral",
        "cadetblue",
        "olivedrab",
    )
    if c not in METHOD_COLORS.values()
]


def color_of(name: str, order: list[str]) -> str:
    if name in METHOD_COLORS:
        return METHOD_COLORS[name]
    extra = [m for m in order if m not in METHOD_COLORS]
    return (
        _FALLBACK_COLORS[extra.index(name) % len(_FALLBACK_COLORS)]
        if name in extra
        else "tab:brown"
    )


#: Longest text :func:`plain` draws whole; longer names keep their start and end around an
#: ellipsis (matplotlib took minutes to lay out a report's 10,000-character class names).
MAX_DRAWN = 80


def plain(text) -> str:
    """``text`` drawn as written: a ``$`` (class names like ``under $5``) would start
    matplotlib's math mode; beyond :data:`MAX_DRAWN` characters, its first and last ones
    around "…"; control characters written as escapes (``\\x1b``: no font has a glyph for
    them)."""
    text = printable(str(text), keep="\n")
    if len(text) > MAX_DRAWN:
        text = text[: MAX_DRAWN - 30] + "…" + text[-29:]
    return text.replace("$", r"\$")


def plain_all(texts) -> list:
    return [plain(t) for t in texts]


# ------------------------------------------------------------ figures and panels
def new_figure(figsize):
    from matplotlib.figure import Figure

    return Figure(figsize=figsize, layout="constrained")


def grid_axes(fig, n: int, ncols: int, *, sharex=True, sharey=True):
    nrows = max(1, math.ceil(n / ncols))
    axes = np.atleast_1d(
        fig.subplots(nrows, ncols, sharex=sharex, sharey=sharey, squeeze=False)
    ).ravel()
    for ax in axes[n:]:
        ax.set_visible(False)
    return list(axes[:n]), axes.reshape(nrows, ncols)


def small_multiples(fig, n: int, ncols, panel_size: float, extra_height: float = 0.9):
    """(fig, axes, axes2d) of ``n`` panels in ``ncols`` columns (default
    :func:`default_ncols`); a new figure sized for them unless ``fig`` is given."""
    ncols = ncols or default_ncols(n)
    nrows = math.ceil(n / ncols)
    fig = fig or new_figure(
        (panel_size * ncols + 0.4, panel_size * 0.9 * nrows + extra_height)
    )
    axes, axes2d = grid_axes(fig, n, ncols)
    return fig, axes, axes2d


def with_positives(panels: list) -> list:
    """The panels of classes with positives (None marks one without); an error if there are
    none."""
    shown = [p for p in panels if p is not None]
    if not shown:
        raise TopcalError("no class has positives; nothing to plot")
    return shown


def label_outer(axes2d, n: int, xlabel: str, ylabel: str):
    nrows, ncols = axes2d.shape
    for i, ax in enumerate(axes2d.ravel()[:n]):
        r, c = divmod(i, ncols)
        below_empty = (r + 1) * ncols + c >= n
        if below_empty:
            ax.set_xlabel(xlabel)
            ax.tick_params(labelbottom=True)
        if c == 0:
            ax.set_ylabel(ylabel)


def default_ncols(n: int) -> int:
    return 1 if n == 1 else 2 if n <= 4 else 3 if n <= 9 else 4


def gid_bars(bars, gid: str) -> None:
    for patch in bars.patches:
        patch.set_gid(gid)


def draw_hist(
    ax, h: HistogramBars, *, color="0.85", edge="black", label="_nolegend_", gid=BARS_METHOD
):
    ok = ~np.isnan(h.values)
    left = h.edges[:-1][ok]
    width = np.diff(h.edges)[ok]
    heights = h.values[ok]
    sparse = h.sparse[ok]
    bars = ax.bar(
        left,
        heights,
        width=width,
        align="edge",
        color=color,
        edgecolor=edge,
        linewidth=0.7,
        label=label,
        zorder=1,
    )
    gid_bars(bars, gid)
    for patch, sp in zip(bars.patches, sparse):
        patch.set_gid(gid)
        if sp:
            patch.set_linestyle((0, (3, 2)))
            patch.set_hatch("///")
            patch.set_facecolor("white")
            patch.set_edgecolor("0.35")
    return bars


def shade_outside(ax, support, score_range):
    lo, hi = score_range
    if support is None:
        ax.axvspan(lo, hi, color="0.6", alpha=0.18, lw=0, zorder=0)
        return
    if support[0] > lo:
        ax.axvspan(lo, support[0], color="0.6", alpha=0.18, lw=0, zorder=0, gid="extrapolated")
    if support[1] < hi:
        ax.axvspan(support[1], hi, color="0.6", alpha=0.18, lw=0, zorder=0, gid="extrapolated")


def diagonal(ax, score_range, label="uncalibrated score"):
    lo, hi = score_range
    (ln,) = ax.plot([lo, hi], [0, 1], ls="--", color="0.3", lw=1, label=label, zorder=2)
    ln.set_gid(BASELINE)


def probability_axes(ax, score_range) -> None:
    """A panel's axes for a probability against the score: the score range across, [0, 1]
    up (a little headroom), small ticks and a faint grid."""
    ax.set_xlim(*score_range)
    ax.set_ylim(0, 1.02)
    ax.tick_params(labelsize=7)
    ax.grid(alpha=0.25, lw=0.5)


def fig_legend(fig, axes, ncol=None):
    handles, labels = {}, []
    for ax in axes:
        for h, lab in zip(*ax.get_legend_handles_labels()):
            if lab not in handles and not lab.startswith("_"):
                handles[lab] = h
                labels.append(lab)
    if labels:
        # entries per row that fit the width (a sub-figure of a larger figure has no
        # get_figwidth)
        width = (
            fig.get_figwidth()
            if hasattr(fig, "get_figwidth")
            else fig.bbox.width / fig.figure.dpi
        )
        fit = max(1, int(width / 2.3))
        fig.legend(
            [handles[lab] for lab in labels],
            labels,
            loc="outside lower center",
            ncol=ncol or min(len(labels), fit),
            fontsize=8,
            frameon=False,
            markerscale=3,
        )
