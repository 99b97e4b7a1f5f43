"""The visual check as one HTML page: figures, metric tables, fitted parameters, warnings.

"We would not recommend using any calibration without a visual check" (Salamon et al.,
section 12). :func:`build_report` fits the chosen methods on the user's data and writes
``DIR/index.html``: one self-contained file (every image is embedded as a PNG data URI, no
script, no network), with the PNGs also saved under ``DIR/figures/`` for reuse. By default
it fits what the user decides about (:mod:`~topcal.report.focus`: ``auto``, its own
cross-validation reused as its candidates' out-of-sample table, the baseline and two peers);
``methods="all"`` fits and cross-fits every method.

The page holds, in order: the data summary; the headline (what ``auto`` chose and what it
gains out of sample); the metric table (overall, and per class NLL, Brier, ECE1, ECE2 per
method in collapsed sections); the warnings (those about the model in use and the data
first, the rest folded; a kind that repeats over classes is one line with its count and the
worst classes, over a collapsed list of all); the joint distribution (paper Fig. 1); the
calibration curves per class over the 10-bin histogram (Figs. 3, 5, 7, 9), the KDE bandwidth
rules side by side (Fig. 14); the TP/FP kernel densities with the diluted curve (Figs. 5,
6); the temperature-scaling clouds (Figs. 10-12); per-class NLL bars (Fig. 17); with a
second test set, both sets' histograms (Fig. 4) and the paired bars (Figs. 18-19); with
extra samples, the old vs new curves (Fig. 15); and the fitted parameters of every method.

The warnings (:func:`diagnose`) are what a careful analyst checks first: classes with few
positives or without TP or FP, curves with many wiggles, large extrapolated score ranges,
and classes whose raw score is already close to calibrated.

The package: :mod:`~topcal.report.checks` (the warnings), :mod:`~topcal.report.figures`
(which figures), :mod:`~topcal.report.classes` (for which classes: ``--classes``),
:mod:`~topcal.report.focus` (the default's fits), :mod:`~topcal.report.page` (the page's
pieces) and :mod:`~topcal.report.build` (:func:`build_report`, which ties them together).
"""

from .build import ALL, ReportResult, build_report, default_methods
from .checks import (
    CLOSE_ECE1,
    MAX_EXTRAPOLATED,
    MAX_SIGN_CHANGES,
    MIN_POSITIVES,
    WIGGLE_AMPLITUDE,
    Finding,
    FindingGroup,
    align_classes,
    count_wiggles,
    diagnose,
    group_findings,
)
from .figures import figure_png

__all__ = [
    "build_report",
    "ALL",
    "diagnose",
    "ReportResult",
    "Finding",
    "FindingGroup",
    "group_findings",
    "default_methods",
    "align_classes",
    "figure_png",
    "MIN_POSITIVES",
    "MAX_SIGN_CHANGES",
    "MAX_EXTRAPOLATED",
    "CLOSE_ECE1",
    "count_wiggles",
    "WIGGLE_AMPLITUDE",
]
