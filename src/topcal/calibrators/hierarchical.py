"""``hier-platt``: per-class Platt scaling shrunk toward the pooled Platt curve.

The parametric twin of the count shrinkage (:mod:`topcal.calibrators.shrinkage`).
On z = logit(s) of the normalised top score s (clipped to [1e-12, 1 - 1e-12]),
class k's confidence is sigmoid(a_k z + b_k), theta_k = (a_k, b_k). The pooled
Platt fit theta_0 (all classes as one) is the prior's centre, and class k's
parameters maximise

    sum_{i in k} log-likelihood_i(theta_k) - (lam / 2) (theta_k - theta_0)' I_0 (theta_k - theta_0)

where I_0 = (1/N) sum_i w_i p_i (1 - p_i) x_i x_i' (x_i = (z_i, 1)) is the pooled
fit's Fisher information *per sample*: a Gaussian prior worth ``lam``
pseudo-samples distributed like the pooled data, so lam plays the role of the
pseudo-count m (lam -> 0: per-class Platt, ``btswa``; lam -> inf: pooled
Platt, ``pooled-platt``). The prior is invariant to affine changes of z.

The strength lam is chosen from the data, one for all classes (empirical
Bayes by predictive fit), on the grid 2^j, j = 0..24 (every other point, then
the two neighbours of the best of those; a cross-validation fold's fit walks
downhill from the all-data fit's choice instead), by the approximate
leave-one-out NLL of the fit (Rad & Maleki 2020): leaving one unit of weight
at x_i out of its class's penalised fit moves its margin to

    m_(-i) = m_i + l'_i h_i / (1 - l''_i h_i),   h_i = x_i' H_k^-1 x_i,

with l' = p - y, l'' = p (1 - p) and H_k the class's penalised Hessian (one
Newton step from the full fit, exact up to third-order terms). A class with
no positives uses theta_0.

Intervals (``predict_interval``): the delta method on class k's approximate
(Laplace) posterior, x' theta_k -+ z sqrt(x' C_k x) on the log-odds scale,
mapped through the logistic function. C_k is the posterior covariance of the
normal hierarchical model with the strength lam fixed and the centre theta_0
estimated under a flat prior (Gelman et al., Bayesian Data Analysis, 3rd ed.,
section 5.4, with each class's likelihood replaced by its Gaussian
approximation, information D_k = sum w p (1 - p) x x' at the fit):

    C_k = H_k^-1 + (H_k^-1 lam I_0) V_0 (lam I_0 H_k^-1),   H_k = D_k + lam I_0,
    V_0 = (sum_j D_j (I + (lam I_0)^-1 D_j)^-1)^-1

(the first term: theta_0 known; the second: the centre's own uncertainty).
The strength is not known either, and the approximate LOO loss pins it down
poorly with a few classes (the chosen lam often over-shrinks, and the
intervals of C_k at the chosen lam then under-cover): C_k is computed at the
smallest fitted strength lam_I whose loss is within ``ALO_SLACK_PER_PARAM`` x p
nats of the best, plus d_k d_k' with d_k the difference between the chosen fit
and lam_I's (so x' C_k x holds the squared margin difference between the two
fits). With a fixed ``shrinkage``, lam_I = lam. C_k is stored per class in the
model file (``cov``; docs/intervals.md).
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np
from scipy.special import expit

from . import intervals
from .._params import Interval, Options
from ..data import TopLabelData, canonical_order, class_order
from .temperature import BINARY_SCORE_FLOOR
from .base import Calibrator, Curve, finite_array, support_list, to_jsonable
from .foldmemo import memo, shared
from .registry import register
from ._hier_solve import LAMBDA_GRID, curvature, grid_search, local_search, newton, posterior_cov

__all__ = ["HierarchicalPlatt", "HierarchicalBeta", "LAMBDA_GRID", "score_logit"]

#: The interval's strength: the smallest one whose approximate LOO loss is within this many nats per
#: parameter of the best (chosen on the simulations of benchmarks/bench_intervals.py,
#: docs/intervals.md)
ALO_SLACK_PER_PARAM = 0.6
#: Rows with equal (class, score) are merged into one (:func:`_merge_equal_rows`) where that divides
#: their
#: number by at least this factor (rounded or binned scores); below it the merge's sort costs more
#: than it saves
MERGE_GAIN = 1.25


def score_logit(data: TopLabelData) -> np.ndarray:
    """logit of the normalised top score, clipped to [1e-12, 1 - 1e-12] first (as ``bts``)."""
    s = np.clip(data.normalized_score(), BINARY_SCORE_FLOOR, 1.0 - BINARY_SCORE_FLOOR)
    return np.log(s) - np.log1p(-s)


def _may_merge(score: np.ndarray) -> bool:
    """False where the scores alone show that :func:`_merge_equal_rows` would not merge (its sort
    skipped).

    A lower bound on the number of distinct scores, which bounds the distinct (class, score) pairs
    from
    below: the number of occupied slots when each score's bits are hashed into a table of >= 8 x n
    slots,
    less one (two equal scores share a slot but 0.0 and -0.0, so occupied slots - 1 <= distinct
    scores;
    each NaN counts as distinct in the merge, and shares one slot here). Where that bound times
    :data:`MERGE_GAIN` exceeds n, the merge would not pay (the same decision as counting the pairs);
    otherwise (ties, or an unlucky hash) the exact count decides. One pass and a table of 8-16 n
    bytes, against
    a two-key sort (~20 x longer at 10^5 rows).
    """
    n = score.size
    slots = 1 << max(int(8 * n - 1).bit_length(), 4)
    h = np.ascontiguousarray(score, dtype=np.float64).view(np.uint64) * np.uint64(
        0x9E3779B97F4A7C15
    )
    h >>= np.uint64(64 - slots.bit_length() + 1)
    seen = np.zeros(slots, dtype=bool)
    seen[h] = True
    return not (np.count_nonzero(seen) - 1) * MERGE_GAIN > n


def _merge_equal_rows(data: TopLabelData, cols):
    """(cols, tp, fp, class) of the fit's rows, rows of equal (class, score) merged into one where
    that pays.

    ``cols``: the feature columns (a list of (n,) arrays). The features are a function of the score,
    and
    the NLL, its derivatives and the approximate LOO loss are sums over rows linear in the TP and FP
    weights at the row's features, so a merged row holding the summed weights gives the same fit
    (lossless; up to the order of the sums: tested). Merged only where it divides the rows by
    :data:`MERGE_GAIN` (scores rounded to a few digits, binned data); otherwise the rows as given.
    """
    n = data.n_rows
    if n < 2 or not _may_merge(data.score):
        return cols, data.tp, data.fp, data.pred
    # any order by (class, score) serves; a fold's canonical one is there already
    order = (
        memo(data, "canonical_order", lambda: canonical_order(data))
        if shared(data)
        else np.lexsort((data.score, data.pred))
    )
    pred, score = data.pred[order], data.score[order]
    new = np.empty(n, dtype=bool)
    new[0] = True
    np.not_equal(pred[1:], pred[:-1], out=new[1:])
    new[1:] |= score[1:] != score[:-1]
    starts = np.flatnonzero(new)
    if starts.size * MERGE_GAIN > n:
        return cols, data.tp, data.fp, data.pred
    first = order[starts]
    return (
        [c[first] for c in cols],
        np.add.reduceat(data.tp[order], starts),
        np.add.reduceat(data.fp[order], starts),
        pred[starts],
    )


class _Rows:
    """Rows with weight, grouped by class: feature columns, tp, fp, class sizes.

    The rows are stored class by class (a stable sort: each class keeps its rows' order, so a
    per-class sum adds the same numbers in the same order). The features are the columns ``cols``
    and a last, constant one (the intercept), which is never stored: a product with it is the other
    factor itself, bit for bit, so it is skipped. The pairwise products of the columns (the
    Hessian's and the leverages' terms, x_i x_j) are made where used, into a scratch buffer.

    Memory (issue 26): every row-length intermediate of the Newton and LOO passes is written into a
    few buffers kept with the rows (``out=``; no fresh row-length arrays, whose page faults cost as
    much as the arithmetic): S, T, E (scratch), M (margins) and two probability buffers (the Newton
    iterate's and the trial step's). The arithmetic is the former allocating code's, operation for
    operation, so the fits are bit for bit those of before (tested: test_platt_beta_memory.py).
    """

    def __init__(self, cols, tp, fp, g, k):
        keep = np.flatnonzero((tp + fp) > 0)
        if k == 1:
            self.counts = np.array([keep.size])
            idx = None if keep.size == tp.size else keep  # None: all rows, in their order
        else:
            g = g.take(keep)
            self.counts = np.bincount(g, minlength=k)
            # the kept rows by class: class_order is np.argsort(g, kind="stable"), faster
            idx = keep.take(class_order(g, k))
        del keep, g
        if idx is None:  # the caller's arrays (only read)
            self.tp, self.fp, self.cols = tp, fp, list(cols)
        else:
            self.tp, self.fp = tp.take(idx), fp.take(idx)
            self.cols = [c.take(idx) for c in cols]
        del idx
        self.w = self.tp + self.fp
        self.k = k
        self.p = len(self.cols) + 1  # the constant column last
        self.is_pos, self.is_neg = self.tp > 0, self.fp > 0
        self.tp_pos, self.fp_neg = self.tp[self.is_pos], self.fp[self.is_neg]
        self._has = self.counts > 0
        self._starts = (np.cumsum(self.counts) - self.counts)[self._has]
        self.pairs = [(i, j) for i in range(self.p) for j in range(i, self.p)]

    def __getattr__(self, name):
        """The buffers, made on first use (after the caller has dropped what the rows were made
        from)."""
        if name not in ("S", "T", "E", "M", "Q", "_sign"):
            raise AttributeError(name)
        n = self.tp.size
        self.S, self.T, self.E, self.M = (np.empty(n) for _ in range(4))
        self.Q = (
            np.empty(n),
            np.empty(n),
        )  # the Newton iterate's probabilities and the trial step's
        self._sign = np.empty(n, dtype=bool)
        return getattr(self, name)

    def pair(self, i, j, scratch):
        """x_i x_j per row: into ``scratch`` for two stored columns (computed where used: no stored
        products), the column itself where j is the constant one, None (ones) for both constant."""
        last = self.p - 1
        if i == last:
            return None
        if j == last:
            return self.cols[i]
        return np.multiply(self.cols[i], self.cols[j], out=scratch)

    def sums(self, v):
        """Per-class sums of v (K,) (``np.add.reduceat`` over the class blocks: ~20 x
        ``np.bincount``)."""
        out = np.zeros(self.k)
        if self._starts.size:
            out[self._has] = np.add.reduceat(v, self._starts)
        return out

    def per_row(self, v):
        """v (K,) spread to the rows (n,)."""
        return np.repeat(v, self.counts)

    def loss(self, m, q):
        """Per-class NLL at margins m; the rows' probabilities expit(m) into q (a buffer, not S, T,
        E, m).

        The NLL is tp softplus(-m) + fp softplus(m) summed per class, softplus(+-m) = max(+-m, 0) +
        log1p(e) with e = exp(-|m|) as :func:`~topcal._numeric.softplus_both` (rows of weight 0/1
        get
        its numbers bit for bit), and expit(m) = (1 or e) / (1 + e) from the same e (within 4.5e-16
        relative of scipy's ``expit``, which takes one more exp: Newton needs both at every
        iterate);
        "1 or e" is max(e, [m >= 0]) (e <= 1), the value of np.where(m >= 0, 1, e) at a tenth of its
        cost.
        """
        s, t, e = self.S, self.T, self.E
        np.abs(m, out=e)
        np.negative(
            e, out=e
        )  # (np.copysign(m, -1) gives the same in one pass, at 4 x the time of these two)
        np.exp(e, out=e)
        np.log1p(e, out=s)
        np.multiply(self.w, s, out=s)
        np.maximum(m, 0.0, out=t)
        np.multiply(t, self.fp, out=t)
        s += t
        np.minimum(m, 0.0, out=t)  # -max(-m, 0) (up to the sign of a zero)
        np.multiply(t, self.tp, out=t)
        s -= t  # s + max(-m, 0) tp: s - x is s + (-x), bit for bit
        np.greater_equal(m, 0.0, out=self._sign)
        np.maximum(e, self._sign, out=q)
        np.add(e, 1.0, out=t)
        q /= t
        return self.sums(s)

    def margin(self, theta, out):
        """x' theta_k per row, into ``out`` (T: scratch)."""
        np.multiply(self.cols[0], self.per_row(theta[:, 0]), out=out)
        for i in range(1, self.p - 1):
            out += np.multiply(self.cols[i], self.per_row(theta[:, i]), out=self.T)
        out += self.per_row(theta[:, self.p - 1])
        return out

    def gradient(self, r, scratch):
        """Per-class sums of r x (K, p)."""
        return np.stack(
            [self.sums(np.multiply(r, c, out=scratch)) for c in self.cols] + [self.sums(r)], axis=1
        )

    def hessian(self, h, scratch):
        """Per-class sum of h x x' (K, p, p)."""
        p = self.p
        H = np.empty((self.k, p, p))
        for i, j in self.pairs:
            xx = self.pair(i, j, scratch)
            H[:, i, j] = H[:, j, i] = self.sums(
                h if xx is None else np.multiply(h, xx, out=scratch)
            )
        return H

    def leverage(self, Hinv, out, scratch):
        """x' Hinv_k x per row (Hinv: (K, p, p), symmetric), into ``out``."""
        out.fill(0.0)
        for i, j in self.pairs:
            # (1 or 2) x per_row(Hinv_ij): exact either way, so the factor goes in before the spread
            v = self.per_row((1.0 if i == j else 2.0) * Hinv[:, i, j])
            xx = self.pair(i, j, scratch)
            out += v if xx is None else np.multiply(v, xx, out=scratch)
        return out


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

    Subclasses give the features (``_columns``: all but the constant last one), the parameters'
    names and the identity
    parameters (``_identity``: the fit that returns the normalised score itself).

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
        False  # not one of the paper's methods (the paper-reproducing experiments leave it out)
    )
    tier = 2  # per-class curves shrunk toward the pooled one
    _names: ClassVar[tuple] = ()
    _identity: ClassVar[tuple] = ()
    _warm_starts = True  # cross-validation folds start from the all-data optimum (crossfit.py)
    #: an all-data fit's fits per strength and its strength's index: a fold's warm start (not saved)
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

    @classmethod
    def _features(cls, data: TopLabelData) -> np.ndarray:
        """The features (n, p): the columns and a column of ones."""
        return np.stack(cls._columns(data) + [np.ones(data.n_rows)], axis=1)

    def _fit(self, data: TopLabelData) -> None:
        k = data.n_classes
        p = len(self._names)
        self.support_ = [data.class_support(i, v) for i, v in enumerate(data.class_views())]
        cols, tp, fp, g = _merge_equal_rows(data, self._columns(data))
        # the pooled rows first, in the data's order, dropped before the per-class rows are made
        # (memory);
        # one class (pooled-beta's curve) is its own pool: the same rows serve both
        one = _Rows(cols, tp, fp, g, 1)
        start = np.array([self._identity], dtype=np.float64)
        # a cross-validation fold's fit (crossfit.py) starts every Newton solve at the optimum of
        # the
        # same solve on all the data (fit's ``warm``) instead of the identity or the last strength's
        warm = self._warm
        warm_fits = {} if warm is None else warm._strength_fits
        # pooled fit: a tiny ridge toward the identity keeps a one-outcome pool finite
        n = float(one.w.sum())
        begin = start if warm is None else warm.pooled_[None, :]
        theta0, q = newton(one, begin, start, np.eye(p) / max(n, 1.0), 1e-6)
        theta0 = theta0[0]
        prior = one.hessian(curvature(one, q), one.T)[0] / max(n, 1.0)
        if k == 1:
            rows = one
        else:
            del one, q
            rows = _Rows(cols, tp, fp, g, k)
        del cols
        # keep the prior proper where the pool is (nearly) separated: floor its eigenvalues
        vals, vecs = np.linalg.eigh(prior)
        prior = (vecs * np.maximum(vals, 1e-6 * max(vals.max(), 1e-12))) @ vecs.T
        center = np.broadcast_to(theta0, (k, p))
        if k == 1 and self._scratch:
            # one class (pooled-beta's curve) is its own pool: its penalised fit at any strength is
            # the pooled
            # fit (they differ by the pooled fit's 1e-6 ridge, ~1e-16 relative, and by Newton's
            # stop); a scratch
            # fit (a fold's, scored and dropped) searches no strength: confidences within 1.5e-9
            # relative of an
            # ordinary fit's on every fold of the benchmark sets (tested: test_crossfit.py)
            lam = float(LAMBDA_GRID[-1]) if self.shrinkage == "auto" else float(self.shrinkage)
            theta = center.copy()
            self.strength_loss_ = None
            interval_fit = (lam, theta)
        elif self.shrinkage == "auto":
            # a cross-validation fold's scratch fit searches the strength locally, from the all-data
            # fit's
            # choice (local_search); every other fit scans the grid (grid_search)
            near_j = None if warm is None or not self._scratch else warm._strength_index
            if near_j is None:
                fits, losses = grid_search(rows, center, prior, warm_fits)
            else:
                fits, losses = local_search(rows, center, prior, warm_fits, near_j)
            self._strength_fits = fits  # warm starts for cross-validation folds (not saved)
            j = int(np.argmin(losses))  # the smallest strength on ties
            self._strength_index = j  # where a fold's local search starts (not saved)
            lam, theta = float(LAMBDA_GRID[j]), fits[j]
            self.strength_loss_ = losses
            # the interval's strength: the smallest one whose loss is within ALO_SLACK_PER_PARAM * p
            # of the best
            # (the strength is not known; docs/intervals.md), its fit's distance to the chosen one
            # added
            near = np.flatnonzero(losses <= losses[j] + ALO_SLACK_PER_PARAM * p)
            ji = int(near.min())  # a strength that was fitted (the others' losses are inf)
            interval_fit = (float(LAMBDA_GRID[ji]), fits[ji])
        else:
            lam = float(self.shrinkage)
            theta = newton(
                rows, center.copy() if warm is None else warm.theta_, center, prior, lam
            )[0]
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
        # a cross-validation fold's fit is scored and dropped: no interval statistics (crossfit.py)
        self.cov_ = (
            None
            if self._scratch
            else posterior_cov(rows, theta_i, prior, lam_i) + d[:, :, None] * d[:, None, :]
        )

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
        i = self._class_index(k)
        lo, hi = self.score_range_
        s = np.linspace(lo, hi, n_points) if score is None else np.asarray(score, dtype=np.float64)
        grid = TopLabelData(tuple(self.classes_), np.full(s.shape, i, dtype=np.int64), s, (lo, hi))
        return Curve(self.classes_[i], s, self.predict(grid), self.support_[i])

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
    """Per-class Platt scaling of logit(s) with a Gaussian prior centred on the pooled Platt fit.

    Parameters
    ----------
    shrinkage : "auto" or float > 0, default "auto"
        The prior's weight in pseudo-samples (see the module docstring);
        "auto" chooses it by approximate leave-one-out NLL.
    loss : {"nll"}, default "nll"
        The fitted loss (only the NLL: the prior is a likelihood's).

    Attributes
    ----------
    slope_, intercept_ : ndarray (K,)
        a_k and b_k of every class (the pooled values for classes without positives).
    """

    name = "hier-platt"
    summary = (
        "per-class Platt scaling of logit(top score) shrunk toward the pooled fit (strength by LOO)"
    )
    _names = ("slope", "intercept")
    _identity = (1.0, 0.0)

    @staticmethod
    def _columns(data: TopLabelData) -> list:
        return [score_logit(data)]

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
    al.'s fit, a and b are not constrained to be >= 0 (the prior keeps small classes near the
    pooled fit; a class's curve may then be non-monotone where its own data say so).

    Parameters
    ----------
    shrinkage : "auto" or float > 0, default "auto"
    loss : {"nll"}, default "nll"
    """

    name = "hier-beta"
    summary = (
        "per-class beta calibration of the top score shrunk toward the pooled fit (strength by LOO)"
    )
    _names = ("a", "b", "c")
    _identity = (1.0, 1.0, 0.0)

    @staticmethod
    def _columns(data: TopLabelData) -> list:
        s = np.clip(data.normalized_score(), BINARY_SCORE_FLOOR, 1.0 - BINARY_SCORE_FLOOR)
        return [np.log(s), -np.log1p(-s)]
