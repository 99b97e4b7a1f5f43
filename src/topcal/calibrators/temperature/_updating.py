"""Updating the temperature family from statistics: sts and csts from merged loss tables,
bts and btswa from score counts (docs/scale.md). A base of
:class:`~topcal.calibrators.temperature.calibrator.TemperatureBase` (private module), kept
apart from ``calibrator.py``; it uses the fit's ``_class_flags``, ``_solve``, ``_fallback``
and the intervals' ``_covariances``."""

from __future__ import annotations

from typing import Any, Callable, ClassVar

import numpy as np

from ...data import TopLabelData, rows_by_class
from ...errors import ConvergenceError, DataError, ParameterError
from ._core import MultinomialObjective, bounded_newton
from ._tables import NODES, LossTables, tabulate_losses
from ._solver import degenerate_corner
from ._rows import LOG_T, split_rows

__all__ = ["TemperatureUpdating"]


class TemperatureUpdating:
    """The statistics a temperature model keeps (loss tables or score counts) and
    ``update``'s refit from them."""

    #: sts and csts keep loss tables (one parameter per row group); the award methods cannot
    _updatable: ClassVar[bool] = False

    # from the calibrator it is mixed into (TemperatureBase, its Calibrator and the
    # intervals)
    name: ClassVar[str]
    _binary: ClassVar[bool]
    _shared: ClassVar[bool]
    keep_stats: bool
    loss: str
    max_iter: int
    classes_: tuple[str, ...]
    n_tp_: np.ndarray
    n_fp_: np.ndarray
    param_cov_: np.ndarray | None
    _objective_kind: Callable[[], str]
    _log_scores: Callable[[TopLabelData], np.ndarray]
    _check_compatible: Callable[[TopLabelData], TopLabelData]
    _check_data: Callable[[TopLabelData], None]
    _validate_params: Callable[[], None]
    _class_flags: Callable[[], Any]
    _solve: Callable[..., Any]
    _fallback: Callable[..., Any]
    _covariances: Callable[..., np.ndarray]

    def _keeps_stats(self) -> bool:
        return self._binary or (self._updatable and self.keep_stats)

    def _no_stats_reason(self) -> str:
        if self._updatable:
            return (
                f"this {self.name!r} model was fitted with keep_stats=False (the default), "
                "so it has no loss tables to merge; refit it on all the data (old and "
                "new), with keep_stats=True (--param keep_stats=true) to update it later"
            )
        return (
            f"method {self.name!r} has an award: its loss per class is a function of two "
            "parameters (T and A), which no table of bounded size summarises "
            "(docs/scale.md); refit it on all the data (old and new) instead of updating, "
            "or use csts/sts, which can be updated"
        )

    def _table_names(self) -> tuple[str, ...]:
        """The losses the tables hold: the fit's objective(s) and the raw NLL that nll_
        reports."""
        if self._objective_kind() == "multinomial":
            return ("multinomial", "nll-raw")
        return ("nll", "brier", "nll-raw") if self.loss == "brier" else ("nll", "nll-raw")

    def _stats_of(self, data: TopLabelData):
        """Statistics of labelled ``data`` that ``update`` adds: score counts (bts/btswa) or
        loss tables (sts/csts).

        The loss tables hold, per predicted class, each loss the fit needs and its first two
        derivatives in log T at 257 nodes over [1e-3, 1e3]
        (:mod:`topcal.calibrators.temperature._tables`); computing them costs 257
        evaluations of the loss, 20-100 times a fit.
        """
        if self._binary:
            # (EvidenceKeeping's, later in TemperatureBase's MRO: mypy sees object here)
            return super()._stats_of(data)  # type: ignore[misc]
        if not self._updatable:
            raise ParameterError(self._no_stats_reason())
        data = self._check_compatible(data)  # on the model's class list (a no-op within fit)
        self._check_data(data)
        data.require_labels(f"loss tables of {self.name!r}")
        k = data.n_classes
        names = self._table_names()
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
                    self._log_scores(data.subset(idx)),
                    data.labels[idx],
                    data.tp[idx] + data.fp[idx],
                )
                for i, theta in enumerate(NODES):
                    g, h = obj.grad_hess([theta])
                    tables["multinomial"][c, i] = (obj.value([theta]), g[0], h[0, 0])
        tp, fp = data.class_counts()
        return LossTables(tables, tp, fp)

    @classmethod
    def _stats_from_dict(cls, d, classes, score_range):
        if cls._binary:
            return super()._stats_from_dict(d, classes, score_range)
        return LossTables.from_dict(d, len(classes))

    def _refit(self, stats) -> None:
        """``update`` of sts/csts: the fit's own solver on the merged loss tables
        (bts/btswa: on counts)."""
        if self._binary:
            return super()._refit(stats)  # type: ignore[misc]  # (as in _stats_of)
        self._validate_params()
        if set(stats.tables) != set(self._table_names()):
            raise DataError(
                f"{self.name}: the statistics hold the losses {sorted(stats.tables)}, "
                f"this model needs {sorted(self._table_names())}"
            )
        self.n_tp_, self.n_fp_ = stats.n_tp.copy(), stats.n_fp.copy()
        fitted, only_tp, only_fp = self._class_flags()
        k = len(self.classes_)
        theta = np.zeros(k)
        lo, hi = np.array([LOG_T[0]]), np.array([LOG_T[1]])
        loss = 0.0
        n_iter = 0
        if self._objective_kind() == "multinomial":
            obj = stats.objective("multinomial", fitted)
            try:
                res = bounded_newton(obj, [0.0], lo, hi, max_iter=self.max_iter, what=self.name)
            except ConvergenceError as exc:
                res = self._fallback(obj, np.zeros(1), lo, hi, None, self.name, exc)
            theta[fitted], loss, n_iter = res.x[0], res.fun, res.n_iter
        elif self._shared:
            res, _ = self._solve(
                lambda name: stats.objective(name, fitted),
                np.zeros(1),
                lo,
                hi,
                None,
                self.name,
            )
            theta[fitted], loss, n_iter = res.x[0], res.fun, res.n_iter
        else:
            for c in np.flatnonzero(fitted):

                def make(name, c=c):
                    return stats.objective(name, [c])

                res = None
                if only_tp[c] or only_fp[c]:
                    res = degenerate_corner(make(self.loss), bool(only_tp[c]), lo, hi)
                if res is None:
                    res, _ = self._solve(
                        make,
                        np.zeros(1),
                        lo,
                        hi,
                        None,
                        f"{self.name} (class {self.classes_[c]!r})",
                    )
                theta[c] = res.x[0]
                loss += res.fun
                n_iter += res.n_iter
        self.temperature_ = np.where(fitted, np.exp(theta), 1.0)
        self.awards_ = np.zeros(k)
        self.fitted_classes_ = fitted
        self.loss_ = float(loss)
        self.n_iter_ = int(n_iter)
        self.class_nll_ = np.array(
            [stats.value("nll-raw", c, theta[c]) if fitted[c] else 0.0 for c in range(k)]
        )
        self.nll_ = float(self.class_nll_.sum())
        self.param_cov_ = self._covariances(self._table_groups(stats, fitted, theta))

    def _table_groups(self, stats, fitted, theta) -> list[tuple[Any, Any, np.ndarray]]:
        """The (classes, objective, optimum) groups whose covariances an update keeps."""
        name = "multinomial" if self._objective_kind() == "multinomial" else "nll"
        if self._shared:
            if not fitted.any():
                return []
            optimum = np.array([theta[fitted][0]])
            return [(np.flatnonzero(fitted), stats.objective(name, fitted), optimum)]
        return [
            ([c], stats.objective(name, [c]), np.array([theta[c]]))
            for c in np.flatnonzero(fitted)
        ]
