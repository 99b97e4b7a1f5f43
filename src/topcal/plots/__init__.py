"""The paper's figures for any labelled data: computed data first, drawing second.

Each figure has a *compute* function returning a small frozen dataclass of arrays (pure, no
matplotlib) and a *plot* function taking that dataclass and returning a
:class:`matplotlib.figure.Figure`. Plot functions import matplotlib lazily, build figures
with :class:`matplotlib.figure.Figure` (no pyplot global state, so they work headless and in
threads) and never change ``rcParams``. Single-axes plots accept ``ax=None``; small-multiple
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

Drawn artists carry a ``gid`` ("curve:<method>", "band:<method>", "hist", "uncalibrated",
"density:tp", ...) so tests and users can find the plotted data again.

The package: :mod:`topcal.plots.compute` and :mod:`topcal.plots.evaluation` (the dataclasses
and compute functions: per-class figures; figures of evaluated methods and second sets) and
:mod:`topcal.plots.draw` (the plot functions; their colours, text and panel-grid helpers in
:mod:`topcal.plots.primitives`); everything public is importable from ``topcal.plots``. A
new figure: a dataclass and compute function in ``compute``, a plot function in ``draw``,
both exported here.
"""

from .compute import (
    is_score_curve,
    HistogramBars,
    JointDistribution,
    CurvePanel,
    CurveGrid,
    DensityPanel,
    CloudPanel,
    class_histograms,
    joint_distribution,
    calibration_curves,
    kde_densities,
    ts_clouds,
    model_curve,
    model_band,
    BAND_LEVEL,
    SPARSE_MIN,
    MAX_CLOUD_POINTS,
)
from .evaluation import (
    MethodScores,
    HistogramOverlay,
    PairedScores,
    AddedSamplesPanel,
    method_scores,
    histogram_overlay,
    paired_scores,
    added_samples_effect,
)
from . import compute, draw, evaluation
from .draw import (
    plot_joint_distribution,
    plot_calibration_curves,
    plot_kde_densities,
    plot_ts_clouds,
    plot_method_bars,
    plot_histogram_overlay,
    plot_paired_bars,
    plot_added_samples,
    METHOD_COLORS,
)

__all__ = [
    *compute.__all__,
    *evaluation.__all__,
    *draw.__all__,
]  # each module lists its public names once
