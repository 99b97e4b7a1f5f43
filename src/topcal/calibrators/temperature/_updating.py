"""Updating the temperature family from statistics: sts and csts from merged loss tables,
bts and btswa from score counts (docs/scale.md). Functions of the tables and the method's
settings, called by :class:`~topcal.calibrators.temperature.calibrator.TemperatureBase`'s
``_stats_of`` and ``_refit`` (private module); ``solve`` and ``fallback`` are the fit's own
solver steps (TemperatureBase's ``_solve`` and ``_fallback``)."""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from ...data import TopLabelData, rows_by_class
from ...errors import ConvergenceError
from ._core import MultinomialObjective, bounded_newton
from ._tables import NODES, LossTables, tabulate_losses
from ._solver import degenerate_corner
from ._rows import LOG_T, split_rows

__all__ = ["loss_tables", "no_stats_reason", "solve_tables", "table_groups", "table_names"]


def no_stats_reason(name: str, updatable: bool) -> str:
    """Why a fitted temperature model of method ``name`` keeps no statistics (``updatable``:
    sts and csts, which keep loss tables where asked to)."""
    if updatable:
        return (
            f"this {name!r} model was fitted with keep_stats=False (the default), "
            "so it has no loss tables to merge; refit it on all the data (old and "
            "new), with keep_stats=True (--param keep_stats=true) to update it later"
        )
    return (
        f"method {name!r} has an award: its loss per class is a function of two "
        "parameters (T and A), which no table of bounded size summarises "
        "(docs/scale.md); refit it on all the data (old and new) instead of updating, "
        "or use csts/sts, which can be updated"
    )


def table_names(multinomial: bool, loss: str) -> tuple[str, ...]:
    """The losses the tables hold: the fit's objective(s) and the raw NLL that nll_
    reports."""
    if multinomial:
        return ("multinomial", "nll-raw")
    return ("nll", "brier", "nll-raw") if loss == "brier" else ("nll", "nll-raw")


def loss_tables(
    data: TopLabelData, names: tuple[str, ...], log_scores: Callable[[TopLabelData], Any]
) -> LossTables:
    """The loss tables ``names`` of labelled ``data`` (on the model's classes): per
    predicted class, each loss and its first two derivatives in log T at 257 nodes over
    [1e-3, 1e3] (:mod:`topcal.calibrators.temperature._tables`); ``log_scores``: the log
    score vectors of the multinomial objective. Computing them costs 257 evaluations of the
    loss, 20-100 times a fit."""
    k = data.n_classes
    tables = {name: np.zeros((k, len(NODES), 3)) for name in names}
    top = [name for name in names if name != "multinomial"]
    for c, idx in rows_by_class(data.pred, k):  # one sort, not a pass per class
        d, others = split_rows(data, idx)
        for name, t in tabulate_losses(
            d, others, data.tp[idx], data.fp[idx], NODES, top
        ).items():
            tables[name][c] = t
        if "multinomial" in names:
            obj = MultinomialObjective(
                log_scores(data.subset(idx)),
                data.labels[idx],
                data.tp[idx] + data.fp[idx],
            )
            for i, theta in enumerate(NODES):
                g, h = obj.grad_hess([theta])
                tables["multinomial"][c, i] = (obj.value([theta]), g[0], h[0, 0])
    tp, fp = data.class_counts()
    return LossTables(tables, tp, fp)


def solve_tables(
    stats: LossTables,
    flags,
    *,
    multinomial: bool,
    shared: bool,
    loss: str,
    max_iter: int,
    name: str,
    classes: tuple[str, ...],
    solve: Callable,
    fallback: Callable,
) -> tuple[np.ndarray, float, int]:
    """(log T per class, loss, Newton iterations) of the fit on merged loss tables:
    ``flags`` = (fitted, only TP, only FP) per class; the rest the method's settings."""
    fitted, only_tp, only_fp = flags
    theta = np.zeros(len(classes))
    lo, hi = np.array([LOG_T[0]]), np.array([LOG_T[1]])
    total = 0.0
    n_iter = 0
    if multinomial:
        obj = stats.objective("multinomial", fitted)
        try:
            res = bounded_newton(obj, [0.0], lo, hi, max_iter=max_iter, what=name)
        except ConvergenceError as exc:
            res = fallback(obj, np.zeros(1), lo, hi, None, name, exc)
        theta[fitted] = res.x[0]
        return theta, res.fun, res.n_iter
    if shared:
        res, _ = solve(
            lambda loss_name: stats.objective(loss_name, fitted), np.zeros(1), lo, hi, None, name
        )
        theta[fitted] = res.x[0]
        return theta, res.fun, res.n_iter
    for c in np.flatnonzero(fitted):

        def make(loss_name, c=c):
            return stats.objective(loss_name, [c])

        res = None
        if only_tp[c] or only_fp[c]:
            res = degenerate_corner(make(loss), bool(only_tp[c]), lo, hi)
        if res is None:
            res, _ = solve(make, np.zeros(1), lo, hi, None, f"{name} (class {classes[c]!r})")
        theta[c] = res.x[0]
        total += res.fun
        n_iter += res.n_iter
    return theta, total, n_iter


def table_groups(
    stats: LossTables, fitted, theta, *, multinomial: bool, shared: bool
) -> list[tuple[Any, Any, np.ndarray]]:
    """The (classes, objective, optimum) groups whose covariances an update keeps."""
    name = "multinomial" if multinomial else "nll"
    if shared:
        if not fitted.any():
            return []
        optimum = np.array([theta[fitted][0]])
        return [(np.flatnonzero(fitted), stats.objective(name, fitted), optimum)]
    return [
        ([c], stats.objective(name, [c]), np.array([theta[c]]))
        for c in np.flatnonzero(fitted)
    ]
