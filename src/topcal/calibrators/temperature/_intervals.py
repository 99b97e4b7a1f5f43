"""Intervals of the temperature family: the delta method on each class's (log T, A / T),
with the inverse NLL Hessian at the fit as their covariance (docs/intervals.md). Functions of
the fitted values, called by
:class:`~topcal.calibrators.temperature.calibrator.TemperatureBase` (private module).

``shared``, ``has_award`` and ``binary`` are the method's flags of the same names
(TemperatureBase's ``_shared``, ``_has_award``, ``_binary``).
"""

from __future__ import annotations

from typing import Callable

import numpy as np
from scipy.special import expit

from ...data import TopLabelData, rows_by_class
from .. import intervals
from ._core import Evaluated, MultinomialObjective, TopLabelObjective
from ._arrow import arrowhead_inverse
from ._rows import binary_logit, inverse_pd

__all__ = ["cov_blocks", "covariances", "held_block", "interval"]


class _Held:
    """A block's gradient and Hessian, evaluated already (:func:`held_block`)."""

    def __init__(self, g, h):
        self._gh = (g, h)

    def grad_hess(self, x):
        return self._gh


def cov_blocks(
    data: TopLabelData,
    fitted,
    temps,
    awards,
    *,
    log_scores: Callable[[TopLabelData], np.ndarray] | None,
    split: Callable,
    shared: bool,
    has_award: bool,
    binary: bool,
):
    """(classes, objective, x) blocks for :func:`covariances` of each class's (log T, A / T)
    at the fit (``temps``, ``awards``): the inverse NLL Hessian (observed information), one
    objective at a time (a per-class fit's K objectives are never all held at once).

    One NLL objective per fitted parameter block, evaluated once at the fitted parameters (a
    loss ``"brier"`` fit uses the NLL's information too: an approximation,
    docs/intervals.md). ``log_scores``: the log score vectors of the multinomial objective
    (None: the top-label one); ``split(data, idx=None)``: the rows' top entries and the
    others. The full-vector methods evaluate theirs during the fit instead
    (:func:`held_block`).
    """
    theta = np.log(temps)
    b = awards / temps
    n_aw = 1 if has_award else 0
    if log_scores is not None:
        if fitted.any():
            obj: Evaluated = MultinomialObjective(
                log_scores(data), data.labels, data.tp + data.fp
            )
            yield (np.flatnonzero(fitted), obj, np.array([theta[fitted][0]]))
    elif shared:
        if fitted.any():
            d, others = split(data)
            k = data.n_classes
            obj = TopLabelObjective(
                d,
                others,
                data.tp,
                data.fp,
                loss="nll",
                n_awards=k if n_aw else 0,
                groups=data.pred if n_aw else None,
            )
            x = np.concatenate([[theta[fitted][0]], b if n_aw else []])
            yield (np.flatnonzero(fitted), obj, x)
    else:
        z = binary_logit(data) if binary else None
        for c, idx in rows_by_class(data.pred, data.n_classes):
            if not fitted[c]:
                continue
            d, others = (z[idx], None) if binary else split(data, idx)
            obj = TopLabelObjective(
                d, others, data.tp[idx], data.fp[idx], loss="nll", n_awards=n_aw
            )
            yield ([c], obj, np.array([theta[c]] + ([b[c]] if n_aw else [])))


def held_block(classes, obj, make, temps, awards, at, *, has_award: bool):
    """A block for :func:`covariances` evaluated now, on a fit's own objective while its
    rows are at hand.

    ``obj``: the fit's objective on the block's rows, ``make(loss)`` one with another loss;
    ``classes``: the fitted classes (a mask, shared fit); ``temps``, ``awards``: the fitted
    values; ``at``: the class (per-class fit) or None (shared). The point is
    :func:`cov_blocks`'s (log T and A / T of the fitted values, the same operations), and an
    NLL objective on the same rows gives the same numbers, so the covariance is that of a
    second pass over the data without one (that pass split every row of the score matrix
    again).
    """
    theta = np.log(temps if at is None else temps[at : at + 1])
    b = (awards / temps) if at is None else (awards[at : at + 1] / temps[at : at + 1])
    if at is None:
        fitted = np.asarray(classes)
        x = np.concatenate([[theta[fitted][0]], b if has_award else []])
    else:
        x = np.array([theta[0]] + ([b[0]] if has_award else []))
    nll = obj if obj.loss == "nll" else make("nll")
    last = nll._at if isinstance(nll, TopLabelObjective) else None
    if at is None and last is not None and np.allclose(last[0], x, rtol=4e-16, atol=0):
        # sts: the fit's own last point (log(exp(log T)) may differ from it by an ulp): its
        # Hessian, not a second pass over the data and a third for the margins
        x = last[0]
    return (np.flatnonzero(classes) if at is None else [at], _Held(*nll.grad_hess(x)), x)


def covariances(
    groups, n_tp, n_fp, fitted_classes, *, shared: bool, has_award: bool
) -> np.ndarray:
    """(K, 2, 2) covariances of (log T, A / T) per class from (classes, objective, x)
    blocks; ``n_tp``, ``n_fp``: the classes' counts, ``fitted_classes``: the fitted ones.

    NaN where the information is not positive definite (a class with only TP or only FP,
    parameters at a bound): those classes get the Jeffreys interval of their accuracy
    instead (:func:`interval`).
    """
    k = len(n_tp)
    cov = np.full((k, 2, 2), np.nan)
    fixed_b = (n_tp == 0) | (n_fp == 0)
    for classes, obj, x in groups:
        _, h = obj.grad_hess(x)
        h = np.atleast_2d(h)
        if shared and has_award:  # x = (log T, b_0 .. b_K-1): held offsets are not free
            free = np.concatenate([[True], ~fixed_b & (np.asarray(fitted_classes, bool))])
        else:
            free = np.ones(h.shape[0], dtype=bool)
        full = np.full(h.shape, np.nan)
        sub = h[np.ix_(free, free)]
        parts = arrowhead_inverse(sub) if sub.shape[0] > 2 else None
        if parts is not None:  # tswa: the entries used below, in O(K) (_arrow.py)
            idx = np.flatnonzero(free)
            full[0, 0] = parts[0]
            full[0, idx[1:]] = full[idx[1:], 0] = parts[1]
            full[idx[1:], idx[1:]] = parts[2]
        else:
            inv = inverse_pd(sub)
            if inv is not None:
                full[np.ix_(free, free)] = inv
        for c in classes:
            if fixed_b[c] and (has_award or not shared):  # its parameters sit at a bound
                continue
            j = (1 + int(c)) if (shared and has_award) else 1
            cov[c, 0, 0] = full[0, 0]
            if has_award:
                cov[c, 0, 1] = cov[c, 1, 0] = full[0, j]
                cov[c, 1, 1] = full[j, j]
            else:
                cov[c, 0, 1] = cov[c, 1, 0] = cov[c, 1, 1] = 0.0
    return cov


def interval(data: TopLabelData, level: float, cov, margin: Callable, temps, awards, n_tp, n_fp):
    """Delta method on the margin: m -+ z se(m), se(m)^2 = g V_tt g + 2 g V_tb + V_bb, g =
    dm / d log T. ``margin(data, temperature=None, awards=None)``: the rows' log-odds at the
    fit (``temps``, ``awards``) or at the given values; ``cov``: :func:`covariances`."""
    m = margin(data)
    # central difference in log T at fixed A / T (dm / d log T is smooth; error O(h^2))
    h = 1e-4
    up = margin(data, temps * np.exp(h), awards * np.exp(h))
    down = margin(data, temps * np.exp(-h), awards * np.exp(-h))
    g = (up - down) / (2 * h)
    c = cov[data.pred]
    var = g * g * c[:, 0, 0] + 2 * g * c[:, 0, 1] + c[:, 1, 1]
    lo, hi = intervals.margin_interval(m, np.sqrt(np.maximum(var, 0.0)), level)
    bad = ~np.isfinite(var)
    if bad.any():  # no information (one-sided class) or never predicted
        t, f = n_tp[data.pred[bad]], n_fp[data.pred[bad]]
        jl, jh = intervals.count_interval(t, t + f, level)
        conf = expit(m[bad])
        never = (t + f) == 0  # the uncalibrated score: nothing estimated
        lo[bad], hi[bad] = np.where(never, conf, jl), np.where(never, conf, jh)
    return intervals.include_point(lo, hi, expit(m))
