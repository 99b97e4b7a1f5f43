"""``hier-platt``: per-class Platt scaling shrunk toward the pooled Platt curve.

The parametric twin of the count shrinkage (:mod:`topcal.calibrators.shrinkage`). On z =
logit(s) of the normalised top score s (clipped to [1e-12, 1 - 1e-12]), class k's confidence
is sigmoid(a_k z + b_k), theta_k = (a_k, b_k). The pooled Platt fit theta_0 (all classes as
one) is the prior's centre, and class k's parameters maximise

    sum_{i in k} log-likelihood_i(theta_k) - (lam / 2) (theta_k - theta_0)' I_0 (theta_k -
    theta_0)

where I_0 = (1/N) sum_i w_i p_i (1 - p_i) x_i x_i' (x_i = (z_i, 1)) is the pooled fit's
Fisher information *per sample*: a Gaussian prior worth ``lam`` pseudo-samples distributed
like the pooled data, so lam plays the role of the pseudo-count m (lam -> 0: per-class
Platt, ``btswa``; lam -> inf: pooled Platt, ``pooled-platt``). The prior is invariant to
affine changes of z.

The strength lam is chosen from the data, one for all classes (empirical Bayes by predictive
fit), on the grid 2^j, j = 0..24 (every other point, then the two neighbours of the best of
those; a cross-validation fold's fit walks downhill from the all-data fit's choice instead;
from 16,384 rows, with enough rows per class, the scan runs on binned rows, equal bins of
logit(s) per class, and the fits on the rows walk downhill from its choice: 1-5 fits on the
rows instead of 15 (neighbours whose binned losses are clearly worse are not fitted), the
same choice, parameters within 1e-6 relative: ``_solve.binned_search``,
tests/unit/calibrators/pooled/test_hier_binned.py), by the approximate leave-one-out NLL of
the fit (Rad & Maleki 2020): leaving one unit of weight at x_i out of its class's penalised
fit moves its margin to

    m_(-i) = m_i + l'_i h_i / (1 - l''_i h_i),   h_i = x_i' H_k^-1 x_i,

with l' = p - y, l'' = p (1 - p) and H_k the class's penalised Hessian (one Newton step from
the full fit, exact up to third-order terms). A class with no positives uses theta_0.

Intervals (``predict_interval``): the delta method on class k's approximate (Laplace)
posterior, x' theta_k -+ z sqrt(x' C_k x) on the log-odds scale, mapped through the logistic
function. C_k is the posterior covariance of the normal hierarchical model with the strength
lam fixed and the centre theta_0 estimated under a flat prior (Gelman et al., Bayesian Data
Analysis, 3rd ed., section 5.4, with each class's likelihood replaced by its Gaussian
approximation, information D_k = sum w p (1 - p) x x' at the fit):

    C_k = H_k^-1 + (H_k^-1 lam I_0) V_0 (lam I_0 H_k^-1),   H_k = D_k + lam I_0,
    V_0 = (sum_j D_j (I + (lam I_0)^-1 D_j)^-1)^-1

(the first term: theta_0 known; the second: the centre's own uncertainty). The strength is
not known either, and the approximate LOO loss pins it down poorly with a few classes (the
chosen lam often over-shrinks, and the intervals of C_k at the chosen lam then under-cover):
C_k is computed at the smallest fitted strength lam_I whose loss is within
``ALO_SLACK_PER_PARAM`` x p nats of the best, plus d_k d_k' with d_k the difference between
the chosen fit and lam_I's (so x' C_k x holds the squared margin difference between the two
fits). Where classes hold a few rows (at most 4 a parameter), the loss behind lam_I is the
exact leave-one-out loss for those classes, within 1.0 nats a parameter (:mod:`._strength`:
the approximate one is poor at high leverage). With a fixed ``shrinkage``, lam_I = lam. C_k
is stored per class in the model file (``cov``; docs/intervals.md).
"""

from __future__ import annotations

from typing import Any, ClassVar, cast

import numpy as np
from scipy.special import expit

from .. import intervals
from ..._params import Interval, Options
from ...data import TopLabelData
from ..temperature import BINARY_SCORE_FLOOR
from ..base import Calibrator, Curve, finite_array, support_list, to_jsonable
from ..registry import register
from ._rows import Rows, binned_rows, merge_equal_rows
from ._strength import interval_strength
from ._solve import (
    BINNED_TOL,
    LAMBDA_GRID,
    binned_search,
    curvature,
    grid_search,
    local_search,
    newton,
    posterior_cov,
)

__all__ = ["HierarchicalPlatt", "HierarchicalBeta", "LAMBDA_GRID", "score_logit"]

#: The interval's strength: the smallest one whose approximate LOO loss is within this many
#: nats per parameter of the best (chosen on the simulations of
#: benchmarks/bench_intervals.py, docs/intervals.md)
ALO_SLACK_PER_PARAM = 0.6


def score_logit(data: TopLabelData) -> np.ndarray:
    """logit of the normalised top score, clipped to [1e-12, 1 - 1e-12] first (as ``bts``)."""
    s = np.clip(data.normalized_score(), BINARY_SCORE_FLOOR, 1.0 - BINARY_SCORE_FLOOR)
    return np.log(s) - np.log1p(-s)


class _StrengthConstraint:
    """The ``shrinkage`` parameter of hier-platt: "auto" or a prior strength > 0."""

    def ok(self, v) -> bool:
        if isinstance(v, str):
            return v == "auto"
        return Interval(1e-6, 1e12).ok(v)

    def __str__(self) -> str:
        return (
            "'auto' (chosen by approximate leave-one-out NLL) or a number in [1e-06, 1e+12] "
            "(the prior's weight in pseudo-samples)"
        )


class _Hierarchical(Calibrator):
    """Per-class logistic fits on features of the top score, shrunk toward the pooled fit.

    Subclasses give the features (``_columns``: all but the constant last one), the
    parameters' names and the identity parameters (``_identity``: the fit that returns the
    normalised score itself).

    Attributes
    ----------
    theta_ : ndarray (K, p)
        Every class's parameters (the pooled ones for classes without positives).
    pooled_ : ndarray (p,)
        The pooled fit.
    strength_ : float
        The prior's weight lam.
    """

    in_paper = (
        # not one of the paper's methods (the paper-reproducing experiments leave it out)
        False
    )
    tier = 2  # per-class curves shrunk toward the pooled one
    _names: ClassVar[tuple] = ()
    _identity: ClassVar[tuple] = ()
    _warm_starts = True  # cross-validation folds start from the all-data optimum (crossfit.py)
    #: an all-data fit's fits per strength and its strength's index: a fold's warm start
    #: (not saved)
    _strength_fits: dict = {}
    #: per class, the covariance of the fitted parameters (None: a fold's fit, an old file)
    cov_ = None
    _strength_index = None
    _parameter_constraints = {"shrinkage": _StrengthConstraint(), "loss": Options(("nll",))}

    def __init__(self, *, shrinkage="auto", loss: str = "nll"):
        self.shrinkage = shrinkage
        self.loss = loss

    @staticmethod
    def _columns(data: TopLabelData) -> list:  # pragma: no cover - abstract
        """The features but the last, constant one (the intercept's), as (n,) columns."""
        raise NotImplementedError

    @staticmethod
    def _logit(cols: list) -> np.ndarray:  # pragma: no cover - abstract
        """logit(s) of the rows from their feature columns (what the scan's bins are cut
        on)."""
        raise NotImplementedError

    @classmethod
    def _features(cls, data: TopLabelData) -> np.ndarray:
        """The features (n, p): the columns and a column of ones."""
        return np.stack(cls._columns(data) + [np.ones(data.n_rows)], axis=1)

    def _fit(self, data: TopLabelData) -> None:
        k = data.n_classes
        p = len(self._names)
        self.support_ = data.class_supports()
        cols, tp, fp, g = merge_equal_rows(data, self._columns(data))
        # binned rows (where they pay) scan the strengths and give the fits on the rows
        # their starts
        binned = binned_rows(cols, tp, fp, g, k, self._logit(cols))
        # the pooled rows first, in the data's order, dropped before the per-class rows are
        # made (memory); one class (pooled-beta's curve) is its own pool: the same rows
        # serve both
        one = Rows(cols, tp, fp, g, 1)
        # a cross-validation fold's fit (crossfit.py) starts every Newton solve at the
        # optimum of the same solve on all the data (fit's ``warm``) instead of the identity
        # or the last strength's
        warm = self._warm
        theta0, q, prior = self._pooled_fit(one, binned, warm, p)
        if k == 1:
            rows = one
        else:
            del one, q
            q = None
            rows = Rows(cols, tp, fp, g, k)
        del cols
        brows = None if binned is None else Rows(*binned, k)
        del binned
        # keep the prior proper where the pool is (nearly) separated: floor its eigenvalues
        vals, vecs = np.linalg.eigh(prior)
        prior = (vecs * np.maximum(vals, 1e-6 * max(vals.max(), 1e-12))) @ vecs.T
        center = np.broadcast_to(theta0, (k, p))
        # the rows' probabilities at the interval's fit, where its solve was the last
        q_i = None
        if k == 1 and self._scratch:
            # one class (pooled-beta's curve) is its own pool: its penalised fit at any
            # strength is the pooled fit (they differ by the pooled fit's 1e-6 ridge, ~1e-16
            # relative, and by Newton's stop); a scratch fit (a fold's, scored and dropped)
            # searches no strength: confidences within 1.5e-9 relative of an ordinary fit's
            # on every fold of the benchmark sets (tested: test_crossfit.py)
            lam = float(LAMBDA_GRID[-1]) if self.shrinkage == "auto" else float(self.shrinkage)
            theta = center.copy()
            self.strength_loss_ = None
            interval_fit = (lam, theta)
        elif self.shrinkage == "auto":
            lam, theta, interval_fit, q_i = self._search_strength(
                rows, brows, center, prior, warm, q, k, p
            )
        else:
            lam = float(self.shrinkage)
            begin, scale = center.copy() if warm is None else cast(Any, warm).theta_, None
            if warm is None and brows is not None:
                begin, _, scale, _ = newton(brows, begin, center, prior, lam, BINNED_TOL)
            theta, q_i, _, _ = newton(rows, begin, center, prior, lam, scale=scale)
            self.strength_loss_ = None
            interval_fit = (lam, theta)
        has = rows.counts > 0
        self.theta_ = np.where(has[:, None], theta, theta0[None, :])
        self.pooled_ = theta0.copy()
        self.prior_ = prior
        self.strength_ = lam
        lam_i, theta_i = interval_fit
        theta_i = np.where(has[:, None], theta_i, theta0[None, :])
        d = self.theta_ - theta_i
        # a cross-validation fold's fit is scored and dropped: no interval statistics
        # (crossfit.py)
        self.cov_ = (
            None
            if self._scratch
            else posterior_cov(rows, theta_i, prior, lam_i, q_i)
            + d[:, :, None] * d[:, None, :]
        )

    def _pooled_fit(self, one, binned, warm, p):
        """The pooled curve's parameters, the rows' probabilities there and the prior's
        precision (the pooled fit's Hessian per row), from the pooled rows ``one``."""
        start = np.array([self._identity], dtype=np.float64)
        # pooled fit: a tiny ridge toward the identity keeps a one-outcome pool finite
        n = float(one.w.sum())
        ridge = np.eye(p) / max(n, 1.0)
        begin, scale = (start, None) if warm is None else (warm.pooled_[None, :], None)
        if warm is None and binned is not None:  # the binned fit: the start and its losses
            # from the constant fit (the pooled accuracy; 3-4 loss passes on the binned rows
            # instead of 6-13 from the identity, whose overconfident scores cost long steps)
            acc = np.clip(float(one.tp.sum()) / max(n, 1e-300), 1e-6, 1.0 - 1e-6)
            flat = np.zeros((1, p))
            flat[0, -1] = np.log(acc) - np.log1p(-acc)
            begin, _, scale, _ = newton(Rows(*binned, 1), flat, start, ridge, 1e-6, BINNED_TOL)
        theta0, q, _, _ = newton(one, begin, start, ridge, 1e-6, scale=scale)
        prior = one.hessian(curvature(one, q), one.T)[0] / max(n, 1.0)
        return theta0[0], q, prior

    def _search_strength(self, rows, brows, center, prior, warm, q, k, p):
        """shrinkage="auto": the strength by the (approximate) leave-one-out loss, its fit,
        and the interval's strength and fit; ``(lam, theta, (lam_i, theta_i), q_i)``.

        A cross-validation fold's scratch fit searches the strength locally, from the
        all-data fit's choice (local_search); every other fit scans the grid (grid_search),
        on binned rows where they pay (binned_search)."""
        warm_fits = {} if warm is None else warm._strength_fits
        # by strength, the binned fit's losses (newton's scale) where scanned on them
        scales = {}
        q_i = None
        near_j = None if warm is None or not self._scratch else warm._strength_index
        if near_j is not None:
            fits, losses, exact = local_search(rows, center, prior, warm_fits, near_j)
        elif brows is not None:
            # one class (pooled-beta's curve) is its own pool: every strength's fit is the
            # pooled fit (see _fit), its LOO loss taken there, with the pooled fit's q
            q_center = q if k == 1 else None
            fits, losses, exact, scales = binned_search(
                rows, brows, center, prior, warm_fits, q_center
            )
        else:
            fits, losses = grid_search(rows, center, prior, warm_fits)
        if near_j is None and brows is None:
            exact = np.isfinite(losses)
        self._strength_fits = fits  # warm starts for cross-validation folds (not saved)
        # the smallest strength on ties; only the fits on the rows compete
        j = int(np.argmin(np.where(exact, losses, np.inf)))
        self._strength_index = j  # where a fold's local search starts (not saved)
        lam, theta = float(LAMBDA_GRID[j]), fits[j]
        self.strength_loss_ = losses
        # the interval's strength: the smallest one whose loss is within ALO_SLACK_PER_PARAM
        # * p of the best (the strength is not known; docs/intervals.md), its fit's distance
        # to the chosen one added (classes of a few rows: the exact leave-one-out loss,
        # _strength; not for a cross-validation fold's scratch fit, which keeps no interval)
        small_ok = k > 1 and not self._scratch
        ji = interval_strength(rows, fits, exact, center, prior, j) if small_ok else None
        if ji is None:  # no small class (or one class): the scan's approximate losses
            ji = int(np.flatnonzero(losses <= losses[j] + ALO_SLACK_PER_PARAM * p).min())
        lam_i = float(LAMBDA_GRID[ji])
        if not exact[ji]:  # a binned fit: its fit on the rows (one class: the pooled fit)
            if k == 1:
                fits[ji] = center.copy()
            else:
                fits[ji], q_i, _, _ = newton(
                    rows, fits[ji], center, prior, lam_i, scale=scales.get(ji)
                )
        return lam, theta, (lam_i, fits[ji]), q_i

    def _predict(self, data: TopLabelData) -> np.ndarray:
        return expit(np.einsum("np,np->n", self._features(data), self.theta_[data.pred]))

    def _interval(self, data: TopLabelData, level: float):
        """Delta method on the class's posterior: expit(x' theta_k -+ z sqrt(x' C_k x))."""
        cov = self.cov_
        if cov is None:
            raise self._no_interval_stats("parameter covariance")
        X = self._features(data)
        m = np.einsum("np,np->n", X, self.theta_[data.pred])
        var = np.einsum("ni,nij,nj->n", X, cov[data.pred], X)
        return intervals.margin_interval(m, np.sqrt(np.maximum(var, 0.0)), level)

    @property
    def n_params_(self) -> int:
        p = len(self._names)
        return p * int(np.sum((self.n_tp_ + self.n_fp_) > 0)) + p

    def curve(self, k, score=None, *, n_points: int = 401) -> Curve:
        """Conf_k sampled on ``score`` (default: ``n_points`` evenly spaced over the score
        range)."""
        self._check_fitted()
        return self._predicted_curve(k, score, n_points)

    def describe(self) -> dict:
        d = super().describe()
        d["hierarchical"] = {
            **{f"pooled_{n}": float(v) for n, v in zip(self._names, self.pooled_)},
            "strength": float(self.strength_),
            "rule": "auto" if self.shrinkage == "auto" else "fixed",
        }
        return d

    def _describe_classes(self) -> list[dict]:
        return [
            {
                **{n: float(v) for n, v in zip(self._names, th)},
                "support": None if s is None else list(s),
            }
            for th, s in zip(self.theta_, self.support_)
        ]

    def _get_state(self) -> dict:
        out = {
            "theta": self.theta_,
            "pooled": self.pooled_,
            "prior": self.prior_,
            "strength": self.strength_,
            "support": [None if s is None else list(s) for s in self.support_],
        }
        if self.cov_ is not None:
            out["cov"] = self.cov_  # K x p x p; files before intervals have none
        return to_jsonable(out)

    def _set_state(self, state: dict) -> None:
        k, p = len(self.classes_), len(self._names)
        theta = np.asarray(state["theta"], dtype=np.float64)
        if theta.shape != (k, p) or not np.all(np.isfinite(theta)):
            raise ValueError(f"theta must be a finite {k} x {p} matrix")
        self.theta_ = theta
        self.pooled_ = finite_array(state["pooled"], "pooled", p)
        prior = np.asarray(state["prior"], dtype=np.float64)
        if prior.shape != (p, p) or not np.all(np.isfinite(prior)):
            raise ValueError(f"prior must be a finite {p} x {p} matrix")
        self.prior_ = prior
        (self.strength_,) = (float(v) for v in finite_array([state["strength"]], "strength"))
        if not self.strength_ > 0:
            raise ValueError("strength must be > 0")
        sup = state["support"]
        self.support_ = support_list(sup, k)
        self.strength_loss_ = None
        cov = state.get(
            "cov"
        )  # files before intervals have none: predict_interval asks for a refit
        if cov is not None:
            cov = np.asarray(cov, dtype=np.float64)
            if cov.shape != (k, p, p) or not np.all(np.isfinite(cov)):
                raise ValueError(f"cov must be {k} finite {p} x {p} matrices")
        self.cov_ = cov


@register
class HierarchicalPlatt(_Hierarchical):
    """Per-class Platt scaling of logit(s) with a Gaussian prior centred on the pooled Platt
    fit.

    Parameters
    ----------
    shrinkage : "auto" or float > 0, default "auto"
        The prior's weight in pseudo-samples (see the module docstring); "auto" chooses it
        by approximate leave-one-out NLL.
    loss : {"nll"}, default "nll"
        The fitted loss (only the NLL: the prior is a likelihood's).

    Attributes
    ----------
    slope_, intercept_ : ndarray (K,)
        a_k and b_k of every class (the pooled values for classes without positives).
    """

    name = "hier-platt"
    summary = (
        "per-class Platt scaling of logit(top score) shrunk toward the pooled fit "
        "(strength by LOO)"
    )
    _names = ("slope", "intercept")
    _identity = (1.0, 0.0)

    @staticmethod
    def _columns(data: TopLabelData) -> list:
        return [score_logit(data)]

    @staticmethod
    def _logit(cols: list) -> np.ndarray:
        return cols[0]

    @property
    def slope_(self) -> np.ndarray:
        return self.theta_[:, 0]

    @property
    def intercept_(self) -> np.ndarray:
        return self.theta_[:, 1]


@register
class HierarchicalBeta(_Hierarchical):
    """Per-class beta calibration (Kull et al. 2017) shrunk toward the pooled beta fit.

    sigmoid(a_k ln s - b_k ln(1 - s) + c_k) on the normalised top score s (clipped to
    [1e-12, 1 - 1e-12]), the prior and its strength as for ``hier-platt``. Unlike Kull et
    al.'s fit, a and b are not constrained to be >= 0 (the prior keeps small classes near
    the pooled fit; a class's curve may then be non-monotone where its own data say so).

    Parameters
    ----------
    shrinkage : "auto" or float > 0, default "auto"
    loss : {"nll"}, default "nll"
    """

    name = "hier-beta"
    summary = (
        "per-class beta calibration of the top score shrunk toward the pooled fit "
        "(strength by LOO)"
    )
    _names = ("a", "b", "c")
    _identity = (1.0, 1.0, 0.0)

    @staticmethod
    def _columns(data: TopLabelData) -> list:
        s = np.clip(data.normalized_score(), BINARY_SCORE_FLOOR, 1.0 - BINARY_SCORE_FLOOR)
        return [np.log(s), -np.log1p(-s)]

    @staticmethod
    def _logit(cols: list) -> np.ndarray:
        return cols[0] + cols[1]  # ln s - ln(1 - s)
