"""Whole-vector scalings: ridge vector scaling ``vs`` and structured matrix scaling ``sms``.

Both recalibrate the whole score vector, yhat = softmax(a x + v * x + W x + b) with x = log
Y(X) (``vs``: W = 0), fitted by the penalised multinomial NLL (numeric core: ``_core.py``;
docs/vector.md). Like every method, the confidence returned is the recalibrated entry of the
class the *original* scores predict, k(X), also where the map moves the argmax.
"""

from __future__ import annotations

import hashlib
import warnings
from typing import ClassVar

import numpy as np

from ..._numeric import binary_nll, one_blas_thread
from ..._params import MAX_ITER, Interval
from ...data import TopLabelData
from ...errors import DegenerateClassWarning, ParameterError
from .. import intervals
from ..base import Calibrator, finite_array, to_jsonable
from ..foldmemo import kept, memo, shared
from ..registry import register
from ._solve import solve
from ._core import (
    Layout,
    VectorObjective,
    conf_from_margin,
    data_margin,
    data_rest,
    features,
    inverse_pd,
    log_scores,
    margin_variance,
    rescale,
    temperature,
    top_margin,
)

__all__ = ["VectorScaling", "StructuredMatrixScaling", "COV_MAX_PARAMS"]

#: The first stage (one inverse temperature) is fitted on at most this many evenly spaced
#: rows: one parameter is pinned down by far fewer, and at 10^5 rows its passes were a third
#: of a fit.
FIRST_STAGE_ROWS = 20_000

#: The parameters' covariance is the inverse observed information on at most this many
#: evenly spaced rows (every ceil(n / COV_ROWS)-th, its NLL part rescaled to all n rows): at
#: 10^6 x 10 the all-row Hessian of sms was 1.5-3 s, a third of the fit; the 90% intervals'
#: half-widths moved by 0.12% (median) and 0.8% (max) there (docs/vector.md; tested in
#: tests/unit/calibrators/vector/test_vector.py).
COV_ROWS = 200_000

#: The parameters' covariance (for ``predict_interval``) is computed and stored up to this
#: many parameters (its JSON grows with their square): vs up to K = 127 classes, sms up to K
#: = 15.
COV_MAX_PARAMS = 256


class _VectorBase(Calibrator):
    """Shared fit, predict, intervals, description and persistence of ``vs`` and ``sms``.

    Fitted attributes
    -----------------
    beta_ : float
        Inverse temperature of the first stage, multinomial temperature scaling.
    mix_ : float
        1 / (n + 1): the map's input is x = log((1 - mix_) softmax(beta_ log Y(X)) + mix_ /
        K).
    theta_ : ndarray
        Packed parameters (a, v, b[, W off the diagonal, row by row]) of the map on x.
    scale_ : ndarray (K,)
        a + v_j: the scale of each class's x (1 / its temperature relative to the first
        stage).
    bias_ : ndarray (K,)
    off_diagonal_ : ndarray (K, K) or None
        W (zero diagonal; ``sms`` only).
    loss_ : float
        Penalised mean multinomial NLL reached.
    nll_ : float
        Top-label NLL of the fitting data, summed over samples; ``class_nll_`` its share per
        class.
    n_iter_ : int
    converged_ : bool
    param_cov_ : ndarray or None
        Covariance of theta (inverse observed information of the penalised NLL), where
        ``n_params_`` <= :data:`COV_MAX_PARAMS` (None otherwise, and for a model fitted
        inside a cross-validation).
    """

    needs_full = True
    in_paper = False
    _off: ClassVar[bool] = False
    #: the parameters' covariance (None until fitted, or where the delta method is not run)
    param_cov_ = None
    # a fold's fit starts from the all-data fit's parameters, first-stage temperature and
    # Hessian (with the Hessian kept, a fold's solve is a few gradient passes; without it
    # the all-data fit cost more than the folds saved)
    _warm_starts = True
    #: auto's final fit may start from the cross-validation's all-data fit (auto.py)
    _warm_refit: ClassVar[bool] = True
    #: a scratch fit's Hessian of the mean NLL (penalty excluded) at its optimum, for a warm
    #: start (not saved)
    _nll_hessian = None
    #: an all-data scratch fit's margins of its rows, for a final fit its caller says is on
    #: the same rows (``FitContext.same_rows``; _fit_single; not saved)
    _own = None
    #: a cross-validation fold's fit (_fit_single; not saved)
    _fold = False
    #: the foldmemo key of the fit's solve (its margins for _fit_confidence; not saved)
    _solve_key = ""
    _full_alternative = "bts"
    _parameter_constraints = {
        "reg": Interval(0, 1e6),
        "max_iter": Interval(1, MAX_ITER, integer=True),
    }

    def __init__(self, *, reg: float = 1.0, max_iter: int = 500):
        self.reg = reg
        self.max_iter = max_iter

    # ------------------------------------------------------------------ fit
    def _fit(self, data: TopLabelData) -> None:
        # the products here are small (K x K, rows x K): OpenBLAS's threads cost more than
        # they save, and on a loaded machine their spin-waits made an sms fit 100 x slower
        # (0.015 s vs 1.9 s for one Hessian)
        with one_blas_thread():
            self._fit_single(data)

    def _fit_single(self, data: TopLabelData) -> None:
        k = data.n_classes
        layout = Layout(k, self._off)
        w = data.tp + data.fp
        warm = self._usable_warm(k)
        # a cross-validation fold (a scratch fit started from a fit on more rows: the
        # all-data fit) takes one Newton step from that fit's first-stage temperature and
        # stops its solve at FOLD_TOL (approximate cross-validation;
        # docs/vector.md#fold-fits)
        fold = warm is not None and self._fold_fit(data)
        self._fold = fold
        # auto's final fit on the very rows its cross-validation's all-data fit was made on:
        # that fit's optimum as it is (docs/vector.md#same-rows)
        own = None
        same = self._context is not None and self._context.same_rows
        if same and warm is not None and not self._scratch and warm.max_iter == self.max_iter:
            own = warm._own
        obj = x = None
        if own is None:
            self.beta_, self.mix_, x = self._first_stage(
                data, None if warm is None else warm.beta_, fold=fold
            )
            obj = VectorObjective(x, data.labels, w, layout, float(self.reg), pred=data.pred)
            start, hess = layout.start(), None
            # a fold: from the all-data optimum, its Hessian (this penalty)
            if warm is not None:
                start, hess = warm.theta_, warm._nll_hessian + np.diag(2.0 * obj.r)

            def compute():
                theta, loss, n_iter, ok = solve(
                    obj, start, int(self.max_iter), hessian=hess, fold=fold
                )
                # the rows' margins from the solve's last pass where it was at theta (else
                # None)
                return theta, loss, n_iter, ok, obj.last_hessian, obj.margin_at(theta)

        else:
            self.beta_, self.mix_ = warm.beta_, warm.mix_

            def compute():
                return warm.theta_, warm.loss_, warm.n_iter_, warm.converged_, None, own

        # a fold's (and the folds' all-data) vs and vs-hier-platt, sms and sms-pooled-beta
        # share the solve, its last Hessian and margins (read-only here)
        key = (
            f"vector_solve:{int(self._off)}:{float(self.reg)!r}:{int(self.max_iter)}:{fold:d}"
        )
        self._solve_key = key
        theta, loss, n_iter, ok, last, margin = memo(data, key, compute)
        self._nll_hessian = None
        if self._scratch and last is not None:
            self._nll_hessian = last - np.diag(2.0 * obj.r)
        if not ok:
            warnings.warn(
                f"{self.name}: the optimiser stopped after {n_iter} iterations without "
                f"meeting its tolerance (penalised NLL {loss:.6g}); the fit is usable, "
                "raise max_iter (--param max_iter=...) to go further",
                DegenerateClassWarning,
                stacklevel=4,
            )
        self._set_theta(layout, theta)
        self.loss_, self.n_iter_, self.converged_ = float(loss), int(n_iter), bool(ok)
        self.param_cov_ = None
        # a cross-validation fold's model: scored and dropped
        self.class_nll_ = np.full(k, np.nan)
        if self._scratch:
            self.nll_ = float("nan")
            # an all-data fit (not a fold's) keeps its rows' margins for a final fit on them
            self._own = None if fold or margin is None else margin
            return
        self._set_statistics(data, layout, theta, margin, x, obj)

    def _usable_warm(self, k: int):
        """The warm start (:attr:`_warm`) when it is a fit of this method on ``k`` classes
        with this penalty and a kept Hessian; else None."""
        warm = self._warm
        if not (
            isinstance(warm, type(self))
            and len(warm.classes_) == k
            and warm._nll_hessian is not None
            and warm.reg == self.reg
        ):
            return None
        return warm

    def _set_statistics(self, data: TopLabelData, layout, theta, margin, x, obj) -> None:
        """A final fit's NLL per class and, for few parameters, the parameters' covariance
        (``margin``, ``x`` and ``obj``: the solve's, or None where it was reused)."""
        k = data.n_classes
        if margin is None:
            margin = top_margin(layout, theta, x, data.pred)
        rows = binary_nll(data.tp, data.fp, conf_from_margin(margin))
        self.class_nll_ = np.bincount(data.pred, weights=rows, minlength=k)
        self.nll_ = float(self.class_nll_.sum())
        if layout.size <= COV_MAX_PARAMS:
            if obj is None:
                x = features(data, self.beta_, self.mix_)
                obj = VectorObjective(
                    x, data.labels, data.tp + data.fp, layout, float(self.reg), pred=data.pred
                )
            stride = max(1, -(-x.shape[0] // COV_ROWS))
            self.param_cov_ = inverse_pd(obj.hessian(theta, stride, summed=True))

    @staticmethod
    def _first_stage(data: TopLabelData, start: float | None = None, fold: bool = False):
        """(beta, mix, x): temperature scaling's inverse temperature on ``data`` (its Newton
        from ``start``, e.g. the all-data fit's; ``fold``: one unchecked step from it, a
        cross-validation fold's), the uniform mix and the map's input x (n, K). A
        cross-validation fold's vs, sms and their corrected forms share it (foldmemo.py;
        read-only)."""

        def compute():
            w = data.tp + data.fp
            # every row's log once, rescaled in place: at 10^5 x 1,000 that was faster than
            # the log of the strided rows for the temperature and then x block by block from
            # the scores (3.22 s against 3.36 s; docs/vector.md#log-scores)
            x = log_scores(data)
            # one parameter: evenly spaced rows
            step = max(1, -(-x.shape[0] // FIRST_STAGE_ROWS))
            beta = temperature(
                x[::step], data.labels[::step], w[::step], start=start, one_step=fold
            )
            # mixed with the uniform distribution at 1 / (n + 1), as probmetrics' sms/svs
            # do: a log-probability below about log(1 / (n K)) is not resolved by n rows
            mix = 1.0 / (float(w.sum()) + 1.0)
            return beta, mix, rescale(x, beta, mix)

        return memo(data, f"vector_first_stage:{fold:d}", compute)

    def _fit_confidence(self, data: TopLabelData) -> np.ndarray:
        """The fitted map's confidence on the rows it was just fitted on (in a fold: from
        the shared first stage, without computing the features again)."""
        if not shared(data):
            return self._predict(data)
        solved = kept(data, self._solve_key)  # the fit's own solve, just memoised
        if solved is not None and solved[5] is not None:
            return conf_from_margin(solved[5])
        x = self._first_stage(data, fold=self._fold)[2]
        with one_blas_thread():
            return conf_from_margin(top_margin(self._layout(), self.theta_, x, data.pred))

    def _set_theta(self, layout: Layout, theta) -> None:
        self.theta_ = np.asarray(theta, dtype=np.float64)
        a, v, b, w = layout.unpack(self.theta_)
        self.scale_ = a + v
        self.bias_ = np.array(b)
        self.off_diagonal_ = w

    def _layout(self) -> Layout:
        return Layout(len(self.classes_), self._off)

    # -------------------------------------------------------------- predict
    def _predict(self, data: TopLabelData) -> np.ndarray:
        return conf_from_margin(self._margin(data))

    def _margin(self, data: TopLabelData) -> np.ndarray:
        """The top label's log-odds on ``data``'s rows (read-only where shared): inside a
        :func:`~..foldmemo.sharing` block of ``data`` (a cross-validation fold's test part,
        the first look's) kept for every model with the same map (a fold's ``vs`` and the
        map of its ``vs-hier-platt`` are one solve: at 1,000 classes one pass over the
        scores costs about 3 exp/log an entry)."""
        state = np.concatenate([[float(self._off), self.beta_, self.mix_], self.theta_])
        key = "vector_margin:" + hashlib.sha1(state.tobytes()).hexdigest()

        def compute():
            with one_blas_thread():
                return data_margin(self._layout(), self.theta_, data, self.beta_, self.mix_)

        return memo(data, key, compute)

    def _vector_map(self) -> "_VectorBase":
        """The map is the model itself: its whole vector is the calibrated one."""
        return self

    def _rest(self, data: TopLabelData) -> np.ndarray:
        """The map's distribution over each row's other classes (:func:`._core.data_rest`)."""
        with one_blas_thread():
            return data_rest(self._layout(), self.theta_, data, self.beta_, self.mix_)

    def _interval(self, data: TopLabelData, level: float):
        """Delta method on the top label's log-odds m: m -+ z se(m), se(m)^2 = g^T
        Cov(theta) g."""
        cov = self.param_cov_
        if cov is None:
            if self.n_params_ > COV_MAX_PARAMS:
                raise ParameterError(
                    f"{self.name} with {len(self.classes_)} classes has {self.n_params_} "
                    f"parameters; their covariance is kept up to {COV_MAX_PARAMS} (its "
                    "size grows with their square), so this model has no intervals; use vs "
                    "(fewer parameters) or sts/csts for intervals"
                )
            raise ParameterError(
                f"this {self.name!r} model holds no parameter covariance (its information "
                "matrix was not positive definite); refit it, or use sts for intervals"
            )
        layout, x = self._layout(), features(data, self.beta_, self.mix_)
        with one_blas_thread():
            m = top_margin(layout, self.theta_, x, data.pred)
            var = margin_variance(layout, self.theta_, cov, x, data.pred)
        lo, hi = intervals.margin_interval(m, np.sqrt(np.maximum(var, 0.0)), level)
        return intervals.include_point(lo, hi, conf_from_margin(m))

    # ------------------------------------------------------------- describe
    @property
    def n_params_(self) -> int:
        return self._layout().size

    @property
    def aic_(self) -> float:
        """2 n_params_ + 2 nll_ (the ridge makes the parameters' effective number smaller)."""
        return 2.0 * self.n_params_ + 2.0 * self.nll_

    def describe(self) -> dict:
        """Per class: scale (1 / temperature of its log score), bias, top-label NLL;
        ``fit``: the penalised multinomial NLL, the top-label NLL, parameters, iterations."""
        d = super().describe()
        d["fit"] = {
            "objective": "multinomial + ridge",
            "reg": float(self.reg),
            "loss_value": self.loss_,
            "nll": self.nll_,
            "n_params": self.n_params_,
            "aic": self.aic_,
            "n_iter": self.n_iter_,
            "converged": self.converged_,
            "temperature": float(1.0 / self.beta_),  # of the first stage, temperature scaling
            "mix": self.mix_,
            "scale": float(self.theta_[0]),
        }
        if self.off_diagonal_ is not None:
            d["fit"]["off_diagonal_max"] = float(np.abs(self.off_diagonal_).max())
        return d

    def _describe_classes(self) -> list[dict]:
        out = []
        for i in range(len(self.classes_)):
            row = {
                "scale": float(self.scale_[i]),
                "bias": float(self.bias_[i]),
                "nll": float(self.class_nll_[i]),
            }
            if self.off_diagonal_ is not None:
                row["off_diagonal_max"] = float(np.abs(self.off_diagonal_[i]).max())
            out.append(row)
        return out

    # ---------------------------------------------------------- persistence
    def _get_state(self) -> dict:
        cov = self.param_cov_
        return to_jsonable(
            {
                "beta": self.beta_,
                "mix": self.mix_,
                "theta": self.theta_,
                "param_cov": None if cov is None else cov.reshape(-1),
                "loss": self.loss_,
                "nll": self.nll_,
                "class_nll": self.class_nll_,
                "n_iter": self.n_iter_,
                "converged": bool(self.converged_),
            }
        )

    def _set_state(self, state: dict) -> None:
        k = len(self.classes_)
        layout = self._layout()
        beta = float(finite_array([state["beta"]], "beta")[0])
        if not 1e-3 * (1 - 1e-9) <= beta <= 1e3 * (1 + 1e-9):
            raise ValueError("beta must lie in [1e-3, 1e3], the range a fit searches")
        self.beta_ = beta
        mix = float(finite_array([state["mix"]], "mix")[0])
        if not 0.0 <= mix < 1.0:
            raise ValueError("mix must lie in [0, 1)")
        self.mix_ = mix
        self._set_theta(layout, finite_array(state["theta"], "theta", layout.size))
        cov = state.get("param_cov")
        self.param_cov_ = (
            None
            if cov is None
            else finite_array(cov, "param_cov", layout.size**2).reshape(
                layout.size, layout.size
            )
        )
        self.loss_, self.nll_ = (
            float(v) for v in finite_array([state["loss"], state["nll"]], "loss")
        )
        self.class_nll_ = finite_array(state["class_nll"], "class_nll", k)
        self.n_iter_ = int(state["n_iter"])
        conv = state["converged"]
        if not isinstance(conv, bool):
            raise ValueError("converged must be true or false")
        self.converged_ = conv


@register
class VectorScaling(_VectorBase):
    """Ridge-regularised vector scaling: softmax((a + v) * log Y + b), 2K + 1 parameters.

    Guo et al.'s (2017) vector scaling on the log scores, with the class-wise scales v and
    biases b shrunk toward temperature scaling by a ridge penalty reg K / n (|v|^2 + |b|^2)
    on the mean multinomial NLL (the scaling of structured vector scaling, Berta et al.
    2025). The confidence is the recalibrated entry of the originally predicted class.

    Parameters
    ----------
    reg : float >= 0, default 1.0
        Multiplier of the ridge penalty (0: unregularised vector scaling).
    max_iter : int, default 500
        Iterations of the optimiser.
    """

    name = "vs"
    tier = 2  # class-wise scales and biases shrunk toward one temperature
    summary = (
        "vector scaling, softmax((a + v_k) log y_k + b_k), 2K + 1 parameters shrunk toward "
        "sts by a ridge"
    )


@register
class StructuredMatrixScaling(_VectorBase):
    """Structured matrix scaling: softmax((a + v) * x + W x + b), K^2 + K + 1 parameters.

    In the spirit of SMS (Berta, Holzmüller, Jordan & Bach 2025): vector scaling plus an
    off-diagonal matrix W through which a class's score can move with the other classes' log
    scores; v and b carry the ridge penalty reg K / n, W the heavier reg K (K - 1) / n, so
    with few rows per class pair the fit stays close to vector scaling. Fitting costs O(n
    K^2) per pass.

    Parameters
    ----------
    reg : float >= 0, default 1.0
        Multiplier of the ridge penalties.
    max_iter : int, default 500
    """

    name = "sms"
    tier = 2.5  # vs plus an off-diagonal matrix, shrunk harder
    #: ``auto`` runs it by default only up to this many classes: there it is fitted by
    #: Newton (at most :data:`._solve.NEWTON_MAX_PARAMS` parameters); above, each pass costs
    #: O(n K^2) and the ridge reg K (K - 1) / n leaves W near 0 on data of realistic size
    #: (vs is then as good)
    auto_max_classes: ClassVar[int] = 15
    summary = (
        "structured matrix scaling, vs plus a ridge-shrunk off-diagonal matrix, K^2 + K + 1 "
        "parameters"
    )
    _off = True
