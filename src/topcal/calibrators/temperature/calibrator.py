"""Top-label temperature scaling: STS, CSTS, TSwA, CSTSwA and binary variants (paper
sections 8-11, appendix).

All methods recalibrate the entry of the *predicted* class k = k(X) (always the class
predicted by the original scores, even where an award moves the argmax: the paper's remark
after the TSwA equation) and are fitted by minimising the top-label binary loss over the
positives (paper eq. 14;
eq. 15, Brier, with ``loss="brier"``)::

    Loss_NLL = - sum_TP log yhat_k - sum_FP log(1 - yhat_k)

The definitions (sts, csts, tswa, cstswa; bts, btswa on the normalised top score), the loss,
the bounded Newton optimiser in (log T, A / T) and the degenerate cases are in
docs/temperature.md. The six registered methods are in ``methods.py``; what they share is
:class:`TemperatureBase` here (fit, update from loss tables, persistence, describe), its
intervals (``_intervals.py``), update from statistics (``_updating.py``) and file state
(``_state.py``) are functions it calls with its fitted values, the objective and solver
``_core.py`` / ``_solver.py``.
"""

from __future__ import annotations

import warnings
from typing import Any, ClassVar

import numpy as np
from scipy.special import expit

from ..._numeric import one_blas_thread
from ..._params import MAX_ITER, Interval, Options
from ...data import LOG_PROB_FLOOR, TopLabelData, canonical_order, class_order, preview
from ...errors import ConvergenceError, DataError, DegenerateClassWarning, ParameterError
from ._core import (
    OFFSET_MAX,
    T_MAX,
    T_MIN,
    MultinomialObjective,
    NewtonResult,
    TopLabelObjective,
    bounded_newton,
    softplus,
    top_label_margin,
    top_label_margin_rows,
)
from ..base import Calibrator, Curve
from ..foldmemo import memo, memo_data
from ._intervals import cov_blocks, covariances, held_block, interval
from ._state import file_state, read_state
from ._tables import LossTables
from ._updating import loss_tables, no_stats_reason, solve_tables, table_groups, table_names
from ._local import newton
from ._lockstep import solve_classes
from ._profile import ProfileObjective
from ._solver import degenerate_corner
from ._rows import (
    LOG_T,
    binary_logit,
    class_rows,
    fit_split,
    lockstep_split,
    split_rows,
    warm_start,
)

__all__ = ["TemperatureBase"]


class TemperatureBase(Calibrator):
    """Shared machinery of the temperature methods.

    Fitted attributes
    -----------------
    temperature_ : ndarray (K,)
        Temperature used for each predicted class (all equal for sts and tswa).
    awards_ : ndarray (K,)
        Award of each predicted class (zeros for methods without awards).
    fitted_classes_ : ndarray of bool (K,)
        Classes predicted in the fitting data. The others fall back to the uncalibrated
        score (T = 1, A = 0 gives yhat_k = y_k, or s).
    loss_ : float
        Minimised objective, summed over samples (top-label NLL or Brier, or the multinomial
        NLL for ``sts`` with ``objective="multinomial"``).
    nll_ : float
        Top-label NLL summed over samples at the fitted parameters (equal to ``loss_`` for
        the default loss).
    class_nll_ : ndarray (K,)
        Its share per predicted class.
    n_iter_ : int
        Newton iterations, summed over the per-class fits.
    n_params_ : int
        Fitted parameters (temperatures and awards of fitted classes).
    aic_ : float
        Akaike information criterion 2 n_params_ + 2 nll_ (Akaike 1974): the paper's
        argument for csts/tswa over the 2K-parameter cstswa.
    """

    _shared: ClassVar[bool] = False
    _has_award: ClassVar[bool] = False
    _binary: ClassVar[bool] = False
    #: sts and csts keep loss tables (one parameter per row group); the award methods cannot
    _updatable: ClassVar[bool] = False
    keep_stats: bool  # a parameter of the updatable methods (methods.py)
    #: per class, the covariance of (log T, A / T) (``_intervals.py``); None: a fold's fit,
    #: or a file saved before intervals
    param_cov_: np.ndarray | None = None
    # only sts's folds start warm: per-class fits can be flat toward a bound (crossfit.py)
    _warm_starts = False
    # during a fit: the score vectors, their kind and the order they are read in
    _fit_full = None
    #: bts/btswa, csts/cstswa solve their classes in lockstep (_lockstep.py; csts/cstswa
    #: where _rows.lockstep_split allows); False: one bounded_newton per class (the tests
    #: compare them)
    _lockstep: ClassVar[bool] = True
    #: the binary method to suggest for data without full score vectors
    _full_alternative: ClassVar[str | None] = "bts"

    _parameter_constraints = {
        "loss": Options(("nll", "brier")),
        "max_iter": Interval(1, MAX_ITER, integer=True),
    }

    def __init__(self, *, loss: str = "nll", max_iter: int = 100):
        self.loss = loss
        self.max_iter = max_iter

    # ------------------------------------------------------------------ fit
    def _objective_kind(self) -> str:
        return "top-label"

    @staticmethod
    def _log_scores(data: TopLabelData) -> np.ndarray:
        """Log scores (n, K): the logits as given, or floored log-probabilities (new array)."""
        if data.full_kind == "logits":
            return data.full
        z = np.maximum(data.full, LOG_PROB_FLOOR)
        return np.log(z, out=z)

    def _fit(self, data: TopLabelData) -> None:
        # A canonical row order (by predicted class, top score, outcome, true class and the
        # full vector, so rows tied on the top score are ordered too): sums over rows are
        # then added in the same order whatever order the rows came in, so where the loss is
        # flat (a ridge, a quasi-separated class) the optimiser stops at the same point. A
        # fold's methods share the order, the ordered rows, their split (foldmemo.py).
        order = memo(data, "canonical_order", lambda: canonical_order(data))
        try:
            if np.any(order[1:] != order[:-1] + 1):
                multinomial = self._objective_kind() == "multinomial" and not self._binary
                if multinomial:  # reads the whole matrix
                    data = data.subset(order)
                # bts/btswa read the top score alone, others the matrix through the order
                else:
                    self._fit_full = (
                        None if self._binary else (data.full, data.full_kind, order)
                    )
                    full = data
                    data = memo_data(
                        full,
                        "canonical_top",
                        lambda: full.subset(order, keep_full=False, keep_labels=False),
                    )
            self._fit_ordered(data)
        finally:
            self._fit_full = None

    def _split(self, data: TopLabelData, idx=None):
        """:func:`._rows.fit_split` of ``data`` (rows ``idx``), through the fit's row order
        where one is set."""
        return fit_split(data, idx, self._fit_full)

    def _fit_ordered(self, data: TopLabelData) -> None:
        k = data.n_classes
        if self._binary:
            self.support_ = [
                data.class_support(i, v) for i, v in enumerate(data.class_views())
            ]
        fitted, only_tp, only_fp = self._class_flags()
        temps = np.ones(k)
        awards = np.zeros(k)
        tp = data.tp
        fp = data.fp
        if self._objective_kind() == "multinomial":
            obj = MultinomialObjective(self._log_scores(data), data.labels, tp + fp)
            start = self._warm_x(None, 1)
            try:
                res = bounded_newton(
                    obj, start, [LOG_T[0]], [LOG_T[1]], max_iter=self.max_iter, what=self.name
                )
            except ConvergenceError as exc:
                res = self._fallback(
                    obj,
                    np.zeros(1),
                    np.array([LOG_T[0]]),
                    np.array([LOG_T[1]]),
                    None,
                    self.name,
                    exc,
                )
            temps[fitted] = np.exp(res.x[0])
            loss, n_iter, m, held = res.fun, res.n_iter, None, None
        elif self._shared:
            temps, awards, loss, n_iter, m, held = self._fit_shared(
                data, fitted, only_tp, only_fp
            )
        else:
            temps, awards, loss, n_iter, m, held = self._fit_per_class(
                data, fitted, only_tp, only_fp
            )
        self.temperature_ = temps
        self.awards_ = awards
        self.fitted_classes_ = fitted
        self.loss_ = float(loss)
        self.n_iter_ = int(n_iter)
        # a fold's sts: no training NLL
        if m is None and self._shared and self._fold_fit(data):
            self.class_nll_, self.nll_, self.param_cov_ = (
                np.full(k, np.nan),
                float("nan"),
                None,
            )
            return
        if m is None:
            m = self._margin(data)
        rows = tp * softplus(-m) + fp * softplus(m)
        self.class_nll_ = np.bincount(data.pred, weights=rows, minlength=k)
        self.nll_ = float(self.class_nll_.sum())
        # freed first; then the parameters' covariance (intervals, describe; from the held
        # blocks)
        del m, rows
        self.param_cov_ = (
            None
            if self._scratch
            else self._covariances(held or self._cov_blocks(data, fitted))
        )

    def _cov_blocks(self, data: TopLabelData, fitted):
        """:func:`._intervals.cov_blocks` of this fit."""
        multinomial = self._objective_kind() == "multinomial"
        return cov_blocks(
            data,
            fitted,
            self.temperature_,
            self.awards_,
            log_scores=self._log_scores if multinomial else None,
            split=self._split,
            shared=self._shared,
            has_award=self._has_award,
            binary=self._binary,
        )

    def _covariances(self, groups) -> np.ndarray:
        """:func:`._intervals.covariances` of this fit's blocks ``groups``."""
        return covariances(
            groups,
            self.n_tp_,
            self.n_fp_,
            self.fitted_classes_,
            shared=self._shared,
            has_award=self._has_award,
        )

    def _warm_x(self, c, size: int) -> np.ndarray:
        """Newton's start for class ``c`` (None: the shared parameters); see
        :func:`._rows.warm_start`."""
        return warm_start(self._warm, c, size)

    def _class_flags(self):
        """Classes with positives, with only TP, with only FP (from n_tp_, n_fp_); warns
        about one-sided ones."""
        tpc, fpc = self.n_tp_, self.n_fp_
        fitted = (tpc + fpc) > 0
        only_tp = fitted & (fpc == 0)
        only_fp = fitted & (tpc == 0)
        if not self._shared or self._has_award:
            bad = [c for c, a, b in zip(self.classes_, only_tp, only_fp) if a or b]
            if bad:
                what = (
                    "award offset"
                    if self._shared
                    else ("temperature and award" if self._has_award else "temperature")
                )
                warnings.warn(
                    f"{self.name}: class(es) {preview(bad)} have only true positives or "
                    f"only false positives; their {what} run to the bounds (T in "
                    f"[{T_MIN:g}, {T_MAX:g}], |A / T| <= {OFFSET_MAX:g}), so their "
                    "confidence is pinned near 1 (only TP) or as low as the method allows "
                    "(only FP)",
                    DegenerateClassWarning,
                    stacklevel=4,
                )
        return fitted, only_tp, only_fp

    def _fit_shared(self, data, fitted, only_tp, only_fp):
        k = data.n_classes
        d, others = self._split(data)
        n_aw = k if self._has_award else 0

        def make(loss):
            return TopLabelObjective(
                d,
                others,
                data.tp,
                data.fp,
                loss=loss,
                n_awards=n_aw,
                groups=data.pred if n_aw else None,
                rows=not n_aw,  # sts: its rows' moments kept for _local.newton's model
            )

        x0 = self._warm_x(None, 1 + n_aw)
        lo = np.array([LOG_T[0]] + [-OFFSET_MAX] * n_aw)
        hi = np.array([LOG_T[1]] + [OFFSET_MAX] * n_aw)
        fixed = np.zeros(1 + n_aw, bool)
        if n_aw:
            # Awards of classes never predicted have no data (held at 0); a class with only
            # TP (FP) would push its award to +inf (-inf): its offset A / T is held at the
            # bound so the joint Newton system stays regular.
            fixed[1:] = ~fitted | only_tp | only_fp
            x0[1:][fixed[1:]] = 0.0
            x0[1:][only_tp] = OFFSET_MAX
            x0[1:][only_fp] = -OFFSET_MAX
        # sts in a fold: _local.newton's unconfirmed step
        fold = not n_aw and self._fold_fit(data)
        if n_aw:  # tswa: Newton in log T on the loss minimised over the offsets (_profile.py)
            res, obj = self._solve_profile(d, others, data, make, x0, lo, hi, fixed)
        else:
            res, obj = self._solve(make, x0, lo, hi, fixed, self.name, fold=fold)
        temps = np.where(fitted, np.exp(res.x[0]), 1.0)
        awards = np.where(fitted, res.x[1:] * np.exp(res.x[0]), 0.0) if n_aw else np.zeros(k)
        held = (
            None
            if self._scratch or not fitted.any()
            else [held_block(fitted, obj, make, temps, awards, None, has_award=self._has_award)]
        )
        m = None if fold else obj.margin(res.x, copy=False)
        return temps, awards, res.fun, res.n_iter, m, held

    def _fit_per_class(self, data, fitted, only_tp, only_fp):
        k = data.n_classes
        temps = np.ones(k)
        awards = np.zeros(k)
        loss = 0.0
        n_iter = 0
        m = np.zeros(data.n_rows)
        z = memo(data, "binary_logit", lambda: binary_logit(data)) if self._binary else None
        n_aw = 1 if self._has_award else 0
        lo = np.array([LOG_T[0]] + [-OFFSET_MAX] * n_aw)
        hi = np.array([LOG_T[1]] + [OFFSET_MAX] * n_aw)
        order = (
            None if np.all(data.pred[1:] >= data.pred[:-1]) else class_order(data.pred, k)
        )  # see class_rows
        heads = np.concatenate([[0], np.cumsum(np.bincount(data.pred, minlength=k))])
        solved = {}
        held = (
            None if self._binary or self._scratch else []
        )  # the information blocks (_held_block), class by class
        # csts/cstswa: a scratch fit's rows split at once, where cheap (lockstep_split)
        whole = (
            None
            if self._binary or not self._scratch or order is not None or not self._lockstep
            else lockstep_split(data, self._fit_full)
        )
        if self._lockstep and (self._binary or whole is not None):
            # the classes' Newton solves together (_lockstep.py), the rest below
            zz, oo = (z, None) if self._binary else whole
            whole = None
            solved = self._solve_lockstep(
                data,
                zz,
                oo,
                fitted & ~only_tp & ~only_fp,
                fitted,
                only_tp,
                order,
                heads,
                (lo, hi),
                m,
            )
            zz = oo = None
        for c in np.flatnonzero(fitted):
            idx = class_rows(order, heads, c)
            res = solved.get(c)
            if res is None:
                d, others = (z[idx], None) if self._binary else self._split(data, idx)

                def make(loss, d=d, others=others, idx=idx):
                    return TopLabelObjective(
                        d, others, data.tp[idx], data.fp[idx], loss=loss, n_awards=n_aw
                    )

                if only_tp[c] or only_fp[c]:
                    obj = make(self.loss)
                    res = degenerate_corner(obj, bool(only_tp[c]), lo, hi)
                if res is None:
                    res, obj = self._solve(
                        make,
                        self._warm_x(c, 1 + n_aw),
                        lo,
                        hi,
                        None,
                        f"{self.name} (class {data.classes[c]!r})",
                    )
                m[idx] = obj.margin(res.x, copy=False)
            temps[c] = np.exp(res.x[0])
            if n_aw:
                awards[c] = res.x[1] * temps[c]  # the optimiser's coordinate is b = A / T
            if held is not None:
                aw = self._has_award
                held.append(held_block(None, obj, make, temps, awards, c, has_award=aw))
            obj = make = d = others = (
                None  # this class's rows and scratch go before the next class's are split
            )
            loss += res.fun
            n_iter += res.n_iter
        return temps, awards, loss, n_iter, m, held

    def _solve_lockstep(self, data, zz, oo, which, fitted, only_tp, order, heads, box, m):
        """The classes' solves in lockstep (:func:`solve_classes`), a one-sided class at its
        corner (:func:`degenerate_corner`) where it has one; the margins into ``m``. Returns
        {class: result}."""
        lo, hi = box
        n_aw = 1 if self._has_award else 0
        solved = {}
        # a one-sided class at its corner; else Newton
        for c in np.flatnonzero(fitted & ~which):
            idx = class_rows(order, heads, c)
            obj = TopLabelObjective(
                zz[idx],
                None if oo is None else oo[:, idx],
                data.tp[idx],
                data.fp[idx],
                loss=self.loss,
                n_awards=n_aw,
            )
            res = degenerate_corner(obj, bool(only_tp[c]), lo, hi)
            which[c] = res is None
            if res is not None:
                solved[c], m[idx] = res, obj.margin(res.x, copy=False)
        x0 = np.array([self._warm_x(c, 1 + n_aw) for c in np.flatnonzero(which)]).reshape(
            -1, 1 + n_aw
        )
        solved.update(
            solve_classes(
                zz,
                data,
                which,
                order,
                x0,
                lo,
                hi,
                loss=self.loss,
                max_iter=self.max_iter,
                m=m,
                others=oo,
            )
        )
        return solved

    def _solve(self, make, x0, lo, hi, fixed, what, fold: bool = False):
        """Newton on the chosen loss (``fold``: see _local.newton); Brier from the NLL
        optimum.

        The Brier loss is flat where confidences saturate (its gradient in m carries a
        factor p(1 - p)), so from T = 1 on sharp scores Newton can stall at once; the NLL
        optimum is a start inside its basin.
        """
        n_iter = 0
        if self.loss == "brier":
            try:
                warm = newton(
                    make("nll"), x0, lo, hi, fixed=fixed, max_iter=self.max_iter, what=what
                )
                x0, n_iter = warm.x, warm.n_iter
            except ConvergenceError:
                pass  # start the Brier fit from x0 instead
        obj = make(self.loss)
        try:
            res = newton(
                obj, x0, lo, hi, fixed=fixed, max_iter=self.max_iter, what=what, fold=fold
            )
        except ConvergenceError as exc:
            res = self._fallback(obj, x0, lo, hi, fixed, what, exc)
        return NewtonResult(res.x, res.fun, res.n_iter + n_iter), obj

    def _solve_profile(self, d, others, data, make, x0, lo, hi, fixed):
        """:meth:`_solve` for tswa by the profile loss
        (:class:`._profile.ProfileObjective`): the same optimum, one pass over the others
        per step however many classes. Where it fails, the joint Newton of :meth:`_solve`
        (and its fallback) instead."""

        def profile(loss, start):
            obj = ProfileObjective(
                d,
                others,
                data.tp,
                data.fp,
                data.pred,
                start[1:],
                fixed[1:],
                lo[1],
                hi[1],
                loss=loss,
            )
            res = bounded_newton(
                obj, start[:1], lo[:1], hi[:1], max_iter=self.max_iter, what=self.name
            )
            x, joint = obj.joint(res.x)
            return NewtonResult(x, res.fun, res.n_iter), joint

        n_iter, start = 0, x0
        try:
            if self.loss == "brier":  # from the NLL optimum, as _solve
                try:
                    warm, _ = profile("nll", x0)
                    start, n_iter = warm.x, warm.n_iter
                except ConvergenceError:
                    pass
            res, obj = profile(self.loss, start)
        except ConvergenceError:
            return self._solve(make, x0, lo, hi, fixed, self.name)
        return NewtonResult(res.x, res.fun, res.n_iter + n_iter), obj

    def _fallback(self, obj, x0, lo, hi, fixed, what, exc):
        """When Newton fails: L-BFGS-B in the same box; if that fails too, the starting
        point.

        Newton fails on valid data where the loss has no interior minimum in reach (a
        quasi-separated class whose loss keeps falling along a ray toward a bound) or is
        flat to rounding. L-BFGS-B (Byrd et al. 1995, scipy) needs only gradients and stops
        at a bound or on a flat stretch; either way the result is the best point it saw,
        never worse than the start. A warning says which fit needed it. It runs on one BLAS
        thread: its BLAS calls on 1-2 numbers cost ~5 ms each threaded on a busy machine (10
        of 22 s of an auto fit on 2,000 rows of 100 classes).
        """
        from scipy.optimize import minimize

        lo, hi = np.asarray(lo, dtype=np.float64), np.asarray(hi, dtype=np.float64)
        x0 = np.clip(np.asarray(x0, dtype=np.float64), lo, hi)
        free = ~(np.zeros(x0.shape, bool) if fixed is None else np.asarray(fixed, bool))

        def fun(v):
            x = x0.copy()
            x[free] = v
            f = obj.value(x)
            g, _ = obj.grad_hess(x)
            return f, g[free]

        f0 = obj.value(x0)
        x = x0
        note = "kept the starting point (T = 1, no award)"
        try:
            with one_blas_thread():
                r = minimize(
                    fun,
                    x0[free],
                    jac=True,
                    method="L-BFGS-B",
                    bounds=list(zip(lo[free], hi[free])),
                    options={"maxiter": 1000},
                )
            if np.isfinite(r.fun) and r.fun <= f0:
                x = x0.copy()
                x[free] = r.x
                note = "used L-BFGS-B instead"
        except (ValueError, FloatingPointError, ArithmeticError):
            pass
        warnings.warn(
            f"{what}: Newton's method failed ({str(exc).split(';')[0]}); {note}. "
            "The fit is usable; inspect its curve",
            DegenerateClassWarning,
            stacklevel=5,
        )
        return NewtonResult(x, obj.value(x), 0)

    # ------------------------------------------------- statistics and update
    def _keeps_stats(self) -> bool:
        return self._binary or (self._updatable and self.keep_stats)

    def _no_stats_reason(self) -> str:
        return no_stats_reason(self.name, self._updatable)

    def _table_names(self) -> tuple[str, ...]:
        return table_names(self._objective_kind() == "multinomial", self.loss)

    def _stats_of(self, data: TopLabelData):
        """Statistics of labelled ``data`` that ``update`` adds: score counts (bts/btswa) or
        loss tables (sts/csts: :func:`._updating.loss_tables`)."""
        if self._binary:
            return super()._stats_of(data)
        if not self._updatable:
            raise ParameterError(self._no_stats_reason())
        data = self._check_compatible(data)  # on the model's class list (a no-op within fit)
        self._check_data(data)
        data.require_labels(f"loss tables of {self.name!r}")
        return loss_tables(data, self._table_names(), self._log_scores)

    @classmethod
    def _stats_from_dict(cls, d, classes, score_range):
        if cls._binary:
            return super()._stats_from_dict(d, classes, score_range)
        return LossTables.from_dict(d, len(classes))

    def _refit(self, stats) -> None:
        """``update`` of sts/csts: the fit's own solver on the merged loss tables
        (:func:`._updating.solve_tables`; bts/btswa: on counts)."""
        if self._binary:
            return super()._refit(stats)
        self._validate_params()
        if set(stats.tables) != set(self._table_names()):
            raise DataError(
                f"{self.name}: the statistics hold the losses {sorted(stats.tables)}, "
                f"this model needs {sorted(self._table_names())}"
            )
        self.n_tp_, self.n_fp_ = stats.n_tp.copy(), stats.n_fp.copy()
        flags = self._class_flags()
        multinomial = self._objective_kind() == "multinomial"
        theta, loss, n_iter = solve_tables(
            stats,
            flags,
            multinomial=multinomial,
            shared=self._shared,
            loss=self.loss,
            max_iter=self.max_iter,
            name=self.name,
            classes=self.classes_,
            solve=self._solve,
            fallback=self._fallback,
        )
        fitted = flags[0]
        k = len(self.classes_)
        self.temperature_ = np.where(fitted, np.exp(theta), 1.0)
        self.awards_ = np.zeros(k)
        self.fitted_classes_ = fitted
        self.loss_ = float(loss)
        self.n_iter_ = int(n_iter)
        self.class_nll_ = np.array(
            [stats.value("nll-raw", c, theta[c]) if fitted[c] else 0.0 for c in range(k)]
        )
        self.nll_ = float(self.class_nll_.sum())
        groups = table_groups(stats, fitted, theta, multinomial=multinomial, shared=self._shared)
        self.param_cov_ = self._covariances(groups)


    def _margin(self, data: TopLabelData, temperature=None, awards=None) -> np.ndarray:
        """Per-row log-odds m of yhat_{k(X)} under the fitted parameters (or the given
        ones)."""
        pred = data.pred
        temps = (self.temperature_ if temperature is None else temperature)[pred]
        beta = 1.0 / temps
        award = (self.awards_ if awards is None else awards)[pred]
        if self._binary:
            return (binary_logit(data) + award) * beta
        if np.all(temps == temps[0]):
            beta = float(beta[0])  # one scalar multiply: no (K - 1, n) broadcast of beta
        if data.full.shape[1] < 2:
            d, others = split_rows(data)
            return top_label_margin(d, others, beta, award)
        # straight from the score matrix, block by block: no others matrix, no softmax
        floor = None if data.full_kind == "logits" else LOG_PROB_FLOOR
        return top_label_margin_rows(data.full, pred, beta, award, log_floor=floor)

    def _predict(self, data: TopLabelData) -> np.ndarray:
        return expit(self._margin(data))

    def _interval(self, data: TopLabelData, level: float):
        """The delta method on each class's (log T, A / T) (:func:`._intervals.interval`)."""
        if self.param_cov_ is None:
            raise self._no_interval_stats("parameter covariance")
        return interval(
            data,
            level,
            self.param_cov_,
            self._margin,
            self.temperature_,
            self.awards_,
            self.n_tp_,
            self.n_fp_,
        )

    # ---------------------------------------------------------- model file
    def _get_state(self) -> dict:
        fitted = {
            "temperature": self.temperature_,
            "awards": self.awards_,
            "fitted": self.fitted_classes_,
            "loss": self.loss_,
            "nll": self.nll_,
            "class_nll": self.class_nll_,
            "n_iter": self.n_iter_,
        }
        return file_state(fitted, self.param_cov_, self.support_ if self._binary else None)

    def _set_state(self, state: dict) -> None:
        v = read_state(state, len(self.classes_), self._binary)
        self.temperature_, self.awards_, self.fitted_classes_ = (
            v["temperature"],
            v["awards"],
            v["fitted"],
        )
        self.loss_, self.nll_, self.class_nll_ = v["loss"], v["nll"], v["class_nll"]
        self.n_iter_, self.param_cov_ = v["n_iter"], v["param_cov"]
        if self._binary:
            self.support_ = v["support"]

    # ------------------------------------------------------------- describe
    @property
    def n_params_(self) -> int:
        n_fit = int(np.sum(self.fitted_classes_))
        if self._shared:
            return 1 + (n_fit if self._has_award else 0)
        return n_fit * (2 if self._has_award else 1)

    @property
    def aic_(self) -> float:
        """2 n_params_ + 2 nll_ (Akaike 1974), NLL summed over samples."""
        return 2.0 * self.n_params_ + 2.0 * self.nll_

    def describe(self) -> dict:
        """Fitted parameters per class plus ``fit``: loss, NLL, n_params, AIC, iterations."""
        d = super().describe()
        d["fit"] = {
            "objective": self._objective_kind(),
            "loss": self.loss,
            "loss_value": self.loss_,
            "nll": self.nll_,
            "n_params": self.n_params_,
            "aic": self.aic_,
            "n_iter": self.n_iter_,
        }
        if self._shared:
            d["fit"]["temperature"] = float(self.temperature_[np.argmax(self.fitted_classes_)])
        return d

    def _describe_classes(self) -> list[dict]:
        out = []
        for i in range(len(self.classes_)):
            if not self.fitted_classes_[i]:
                out.append(
                    {"fallback": "uncalibrated (class never predicted in fitting data)"}
                )
                continue
            row: dict[str, Any] = {"temperature": float(self.temperature_[i])}
            cov = self.param_cov_
            if cov is not None and np.isfinite(
                cov[i, 0, 0]
            ):  # 90% interval of T from the delta method on log T
                half = 1.6448536269514722 * np.sqrt(cov[i, 0, 0])
                with np.errstate(
                    over="ignore"
                ):  # log T barely identified: the interval is (0, inf), no warning
                    row["temperature_90"] = [
                        float(self.temperature_[i] * x) for x in np.exp([-half, half])
                    ]
            if self._has_award:
                row["award"] = float(self.awards_[i])
            row["nll"] = float(self.class_nll_[i])
            if self.n_tp_[i] == 0 or self.n_fp_[i] == 0:
                row["degenerate"] = (
                    "only false positives" if self.n_tp_[i] == 0 else "only true positives"
                )
            if self._binary and self.support_[i] is not None:
                row["support"] = list(self.support_[i])
            out.append(row)
        return out

    def curve(self, k, score=None, *, n_points: int = 401) -> Curve:
        """Conf_k sampled on ``score`` (default: ``n_points`` evenly spaced over the score
        range).

        Only for bts and btswa, whose confidence is a function of the class and the top
        score alone (the other variants recalibrate the full vector). ``support`` is the
        class's score range in the fitting data; None where the class had no positives, or
        for models saved before it was stored.
        """
        self._check_fitted()
        if not self.has_curve:
            raise ParameterError(
                f"{self.name} recalibrates the full score vector: its confidence is not a "
                "function of the top score alone, so it has no curve; plot its confidences "
                "against the score instead (or use bts/btswa)"
            )
        return self._predicted_curve(k, score, n_points)
