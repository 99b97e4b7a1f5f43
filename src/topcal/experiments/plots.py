"""Figures of the ensemble experiment (matplotlib, imported lazily).

* :func:`paired_bars`: median metric per class and method, test set 1 bar left (solid) and
  test set 2 bar right (hatched), one colour per method, quartiles as whiskers: the paper's
  Figures 18-19.
* :func:`curves_figure`: one ensemble's joint distribution (confusion matrix) and per-class
  calibration curves: the paper's Figure 16.

Plot functions take computed results plus ``ax=None`` and return the figure; they never
change global matplotlib settings.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np

from .._fileio import atomic_write

__all__ = ["METHOD_GROUPS", "paired_bars", "curves_figure", "write_figures"]

#: The paper's two comparisons: Figure 18 (temperature scaling family) and Figure 19
#: (bandwidth rules of the kernel-density calibrator).
METHOD_GROUPS = {
    "temperature": ("sts", "csts", "tswa", "cstswa"),
    "bandwidth": ("kde-mon", "kde-mon2", "kde-mon4", "kde-opt"),
}


def _mpl():
    # Figure objects directly (no pyplot): nothing global changes, no GUI backend needed.
    import matplotlib
    from matplotlib.figure import Figure

    return Figure, matplotlib.colormaps


def paired_bars(
    summary: dict,
    methods: Sequence[str],
    *,
    metric: str = "nll",
    classes: Sequence[str] | None = None,
    ax=None,
    title: str | None = None,
):
    """Paired bars of median ``metric`` per class: set 1 left, set 2 right, a colour per
    method.

    Parameters
    ----------
    summary : dict
        From :func:`topcal.experiments.run.summarize`.
    methods : sequence of str
        Methods to show, in order (each must be in the summary).
    metric : {"nll", "ece1", "ece2"}, default "nll"
    classes : sequence of str, optional
        Groups along the x axis; default every class then "overall".
    ax : matplotlib Axes, optional
    title : str, optional

    Returns
    -------
    matplotlib.figure.Figure
    """
    Figure, colormaps = _mpl()
    table = summary["metrics"][metric]
    missing = [m for m in methods if m not in table]
    if missing:
        raise KeyError(f"methods {missing} are not in the summary")
    if classes is None:
        classes = list(next(iter(table.values()))["test1"])
    if ax is None:
        fig = Figure(
            figsize=(max(6.0, 0.16 * len(classes) * 2 * len(methods) + 1.5), 3.2),
            layout="constrained",
        )
        ax = fig.subplots()
    else:
        fig = ax.figure
    n = len(methods)
    w = 0.8 / (2 * n)
    cmap = colormaps["tab10"]
    for j, m in enumerate(methods):
        _method_bars(ax, table[m], m, j, w, classes, cmap)
    ax.set_xticks(np.arange(len(classes)), [str(c) for c in classes])
    ax.set_xlim(-0.5, len(classes) - 0.5)
    ax.set_ylabel(f"median {metric.upper()}")
    ax.set_xlabel(
        "predicted class (solid: test set 1, hatched: test set 2; whiskers: quartiles)"
    )
    ax.legend(ncol=min(n, 6), fontsize="small", frameon=False, loc="upper left")
    ax.margins(y=0.15)
    if title:
        ax.set_title(title, fontsize="medium")
    return fig


def _method_bars(ax, rows, m, j, w, classes, cmap) -> None:
    """Method ``m``'s (the ``j``-th) bars and quartile whiskers on both test sets."""
    for s, hatch in ((0, None), (1, "////")):
        st = [rows[f"test{s + 1}"][c] for c in classes]
        med = np.array([np.nan if d["median"] is None else d["median"] for d in st])
        lo = np.array([np.nan if d["q25"] is None else d["q25"] for d in st])
        hi = np.array([np.nan if d["q75"] is None else d["q75"] for d in st])
        x = np.arange(len(classes)) - 0.4 + w * (2 * j + s + 0.5)
        ax.bar(
            x,
            med,
            width=w,
            color=cmap(j % 10),
            alpha=1.0 if s == 0 else 0.55,
            hatch=hatch,
            edgecolor="white" if s == 0 else cmap(j % 10),
            linewidth=0.3,
            label=m if s == 0 else None,
        )
        ax.errorbar(
            x,
            med,
            yerr=[med - lo, hi - med],
            fmt="none",
            ecolor="0.25",
            elinewidth=0.5,
            capsize=0,
        )


def curves_figure_size(n_classes: int) -> tuple[float, float]:
    """(width, height) in inches of :func:`curves_figure` for ``n_classes`` classes."""
    joint = max(3.6, 0.4 * n_classes + 1.6)  # a panel of topcal.plots' joint distribution
    ncols = (n_classes + 1) // 2
    # whole tenths of an inch: a whole number of pixels at 90 dpi
    return round(max(3 * joint, 2.4 * ncols + 0.4), 1), round(
        (joint + 0.5) + (2 * 2.4 * 0.9 + 0.9), 1
    )


def curves_figure(test1, models: dict, *, title: str | None = None):
    """Paper Figure 16 for one ensemble: the joint distribution on top, the per-class curves
    below.

    Drawn by :mod:`topcal.plots` (the same figures ``topcal report`` shows), into two
    sub-figures of one figure.

    Parameters
    ----------
    test1 : TopLabelData
        The ensemble's test set 1 (with labels).
    models : dict
        {label: fitted calibrator with ``curve``}; each is drawn as a curve per class.
    title : str, optional

    Returns
    -------
    matplotlib.figure.Figure
    """
    Figure, _ = _mpl()
    from ..plots import (
        calibration_curves,
        joint_distribution,
        plot_calibration_curves,
        plot_joint_distribution,
    )

    k = test1.n_classes
    width, height = curves_figure_size(k)
    joint_h = max(3.6, 0.4 * k + 1.6) + 0.5
    fig = Figure(figsize=(width, height), layout="constrained")
    top, bottom = fig.subfigures(2, 1, height_ratios=[joint_h, height - joint_h])
    plot_joint_distribution(joint_distribution(test1), fig=top)
    plot_calibration_curves(calibration_curves(test1, models), fig=bottom, ncols=(k + 1) // 2)
    if title:
        fig.suptitle(title, fontsize="medium")
    return fig


def write_figures(out: Path, results, summary: dict, outputs, cfg) -> dict:
    """Write the experiment's PNGs into ``out``; return {kind: path}."""
    from ..calibrators import get_class, paper_calibrator
    from ..calibrators import ScoreCalibrator
    from ..errors import DegenerateClassWarning, TopcalError
    from ..evaluate import fit_quietly

    Figure, _ = _mpl()
    paths = {}
    regime = (
        f"{cfg.regime}-trained, M={cfg.n_networks}, E={cfg.n_ensembles}, {cfg.combine} rule"
    )
    for group, members in METHOD_GROUPS.items():
        present = [m for m in members if m in results.methods]
        if not present:
            continue
        fig = paired_bars(
            summary, present, metric="nll", title=f"{group} methods, median NLL ({regime})"
        )
        paths[f"nll_{group}"] = out / f"nll_{group}.png"
        _save(fig, paths[f"nll_{group}"])
    fig = Figure(
        figsize=(max(7.0, 0.42 * len(results.methods) + 2), 7.5), layout="constrained"
    )
    axes = fig.subplots(3, 1)
    for ax, metric in zip(axes, ("nll", "ece1", "ece2")):
        _overall_bars(summary, results.methods, metric, ax)
    axes[0].set_title(f"all methods, overall medians ({regime})", fontsize="medium")
    paths["overall"] = out / "overall.png"
    _save(fig, paths["overall"])
    sets = outputs.ensemble_data(results.ensembles[0], cfg.combine)
    models = {}
    for name in ("kde-mon", "kde-mon2", "hist"):
        if name in results.methods and issubclass(get_class(name), ScoreCalibrator):
            try:
                models[name] = fit_quietly(
                    paper_calibrator(name), sets[0], collect=DegenerateClassWarning
                )
            except TopcalError:
                continue
    if models:
        fig = curves_figure(sets[0], models, title=f"ensemble 0 of the {regime} run")
        paths["curves"] = out / "curves.png"
        _save(fig, paths["curves"])
    return paths


def _save(fig, path) -> None:
    """A figure as PNG, atomically (temp file + rename)."""
    with atomic_write(path) as tmp:
        fig.savefig(tmp, dpi=90, format="png")


def _overall_bars(summary: dict, methods, metric: str, ax) -> None:
    table = summary["metrics"][metric]
    x = np.arange(len(methods))
    for s, (hatch, alpha) in enumerate(((None, 1.0), ("////", 0.55))):
        med = np.array(
            [
                np.nan
                if table[m][f"test{s + 1}"]["overall"]["median"] is None
                else table[m][f"test{s + 1}"]["overall"]["median"]
                for m in methods
            ]
        )
        ax.bar(
            x - 0.2 + 0.4 * s,
            med,
            width=0.4,
            color=[f"C{j % 10}" for j in range(len(methods))],
            alpha=alpha,
            hatch=hatch,
            edgecolor="white",
            linewidth=0.3,
        )
    ax.set_xticks(x, methods, rotation=30, ha="right", fontsize=7)
    ax.set_ylabel(f"overall {metric.upper()}", fontsize=8)
    ax.tick_params(axis="y", labelsize=7)
