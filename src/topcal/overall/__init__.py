"""Overall calibration metrics, each with an interval: the figures a table of results
quotes.

Every function takes labelled :class:`~topcal.data.TopLabelData` and one confidence per row
(the top-label probability that the predicted class is right) and returns an
:class:`Estimate`: the value, a two-sided interval at ``level`` (90% by default) and, where
the metric is undefined, the reason instead of a number. docs/metrics.md defines each metric
and says which to trust for what.

Rows carry weights (``tp`` for a right prediction, ``fp`` for a wrong one), so binned counts
and per-sample rows give the same numbers. Intervals:

* means (NLL, Brier, their paired differences, the calibration loss): the normal interval of
  a mean of per-sample values, mean +- z * sd / sqrt(n) (central limit theorem; exact in the
  weights);
* the calibration errors (``ece15``, ``smece``, ``ece_debiased``, ``ece_top_label``): a
  percentile bootstrap over samples, seeded. It never refits anything per resample: the bins
  (and smooth ECE's bandwidth) are those of the whole data; each metric is a function of
  weighted sums over a few thousand cells (a bin split into sub-bins, by label), so a
  resample draws a Poisson(n) count per cell (the Poisson bootstrap, Hanley and MacGibbon
  2006) instead of touching every row. Within a cell the resampled rows carry the cell's
  mean confidence: the point estimate is exact, the resamples are approximate at the
  sub-bin's width (1/960 for ``ece15``).
"""

from __future__ import annotations

from .._params import check_bin_count
from ..data import TopLabelData
from ._classes import CLASS_COLUMNS, KEYWORDS, parse_classes, per_class, pick_classes
from ._classwise import classwise_ece
from ._binned import (
    ece15,
    ece15_of,
    ece_debiased,
    ece_debiased_of,
    ece_top_label,
    ece_top_label_of,
)
from ._common import LEVEL, RECAL_FOLDS, RESAMPLES, Estimate, check_level, rows_of
from ._means import (
    brier,
    calibration_loss,
    calibration_losses,
    improvement,
    improvement_of,
    losses,
    mean_estimate,
    nll,
)
from ._smooth import GRIDS, smece, smece_bandwidth, smece_of

__all__ = [
    "Estimate",
    "overall_metrics",
    "OVERALL",
    "LEVEL",
    "RESAMPLES",
    "nll",
    "brier",
    "ece15",
    "smece",
    "smece_bandwidth",
    "ece_debiased",
    "ece_top_label",
    "classwise_ece",
    "calibration_loss",
    "improvement",
    "per_class",
    "paired_ranking",
    "pick_classes",
    "parse_classes",
    "CLASS_COLUMNS",
    "KEYWORDS",
    "DESCRIPTIONS",
]

#: One line per overall metric, for tables (docs/metrics.md has the definitions).
DESCRIPTIONS = {
    "nll": "top-label log loss (proper score)",
    "brier": "top-label Brier score (proper score)",
    "nll_improvement": "NLL of the reference (uncalibrated) minus this (paired)",
    "brier_improvement": "Brier of the reference (uncalibrated) minus this (paired)",
    "ece15": "pooled 15-bin ECE (Guo et al.; TorchMetrics)",
    "smece": "smooth ECE (Blasiok & Nakkiran; relplot)",
    "ece_debiased": "debiased L2 ECE, equal-mass bins (Kumar et al.)",
    "ece_top_label": "top-label ECE per predicted class (Gupta & Ramdas)",
    "calibration_loss": "NLL minus NLL after out-of-fold recalibration",
    "calibration_loss_brier": "Brier minus Brier after out-of-fold recalibration",
    "classwise_ece": "class-wise ECE of the full vector (Kull et al.)",
}

#: The overall metrics :func:`overall_metrics` returns, in table order.
OVERALL = (
    "nll",
    "brier",
    "ece15",
    "smece",
    "ece_debiased",
    "ece_top_label",
    "calibration_loss",
    "calibration_loss_brier",
)


def overall_metrics(
    data: TopLabelData,
    confidence,
    *,
    reference=None,
    level: float = LEVEL,
    resamples: int = RESAMPLES,
    seed: int = 0,
    n_bins: int = 10,
    folds: int = RECAL_FOLDS,
) -> dict:
    """Every overall metric of ``confidence`` on ``data`` with its interval.

    Parameters
    ----------
    data : TopLabelData (labelled)
    confidence : array-like of shape (n_rows,)
    reference : array-like of shape (n_rows,), optional
        The confidences to improve on (e.g. the uncalibrated scores): adds
        ``nll_improvement`` and ``brier_improvement``, reference's score minus this one's,
        with paired intervals.
    level : float, default 0.9
    resamples : int, default 1000
        Bootstrap resamples of the calibration errors.
    seed : int, default 0
        Seed of the bootstrap and of the calibration loss's folds.
    n_bins : int, default 10
        Bins per class of ``ece_top_label`` (``ece15`` has 15, ``ece_debiased`` 15
        equal-mass).
    folds : int, default 5
        Folds of the calibration loss's recalibration.

    Returns
    -------
    dict
        ``{name: Estimate}`` for the names of :data:`OVERALL` (then the improvements).
    """
    check_bin_count(n_bins)
    check_level(level, resamples, seed)
    r = rows_of(data, confidence)
    out = {
        "nll": mean_estimate(list(losses("nll", r.c)), [r.tp, r.fp], level),
        "brier": mean_estimate(list(losses("brier", r.c)), [r.tp, r.fp], level),
        "ece15": ece15_of(r, 15, level, resamples, seed),
        "smece": smece_of(r, level, resamples, seed, GRIDS["relplot"]),
        "ece_debiased": ece_debiased_of(r, 15, level, resamples, seed),
        "ece_top_label": ece_top_label_of(r, n_bins, level, resamples, seed),
    }
    cl = calibration_losses(r, ("nll", "brier"), folds, seed, level)
    out["calibration_loss"] = cl["nll"]
    out["calibration_loss_brier"] = cl["brier"]
    if reference is not None:
        ref = rows_of(data, reference).c
        out["nll_improvement"] = improvement_of(r, ref, "nll", level)
        out["brier_improvement"] = improvement_of(r, ref, "brier", level)
    return out


def paired_ranking(
    data: TopLabelData, confidences: dict, *, baseline=None, level=LEVEL
) -> dict:
    """Methods ranked by NLL on the same rows, with paired intervals.

    Parameters
    ----------
    data : TopLabelData (labelled)
    confidences : dict of str -> array-like of shape (n_rows,)
        Each method's confidence on ``data``'s rows.
    baseline : str, optional
        The name among ``confidences`` of the reference (e.g. the uncalibrated score).
    level : float, default 0.9

    Returns
    -------
    dict
        ``{method: {"rank", "nll", "vs_best", "vs_baseline", "calibration_loss"}}`` in rank
        order (1 = lowest NLL), each metric ``{"value", "lo", "hi"}``: the method's NLL; its
        NLL minus the best method's (the paired normal interval of the per-sample
        difference: 0 for the best itself, an interval above 0 means behind by more than
        noise); the baseline's NLL minus the method's (its improvement; None without a
        baseline); its calibration loss (:func:`calibration_loss`, seed 0).
    """
    check_level(level, RESAMPLES, 0)
    rows = {name: rows_of(data, c) for name, c in confidences.items()}
    est = {
        name: mean_estimate(list(losses("nll", r.c)), [r.tp, r.fp], level)
        for name, r in rows.items()
    }
    order = sorted(est, key=lambda n: est[n].value)
    out = {}
    for i, name in enumerate(order):
        r = rows[name]
        behind = improvement_of(r, rows[order[0]].c, "nll", level)  # best's loss - this one's
        gap = Estimate(-behind.value, -behind.hi, -behind.lo) if i else Estimate(0.0, 0.0, 0.0)
        ref = None
        if baseline is not None and baseline in rows:
            ref = improvement_of(r, rows[baseline].c, "nll", level).to_dict()
        out[name] = {
            "rank": i + 1,
            "nll": est[name].to_dict(),
            "vs_best": gap.to_dict(),
            "vs_baseline": ref,
            "calibration_loss": calibration_losses(r, ("nll",), RECAL_FOLDS, 0, level)[
                "nll"
            ].to_dict(),
        }
    return out
