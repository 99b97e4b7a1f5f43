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
Bayes by predictive fit), on the grid 2^j, j = 0..24, by the approximate
leave-one-out NLL of the fit (Rad & Maleki 2020): leaving one unit of weight
at x_i out of its class's penalised fit moves its margin to

    m_(-i) = m_i + l'_i h_i / (1 - l''_i h_i),   h_i = x_i' H_k^-1 x_i,

with l' = p - y, l'' = p (1 - p) and H_k the class's penalised Hessian (one
Newton step from the full fit, exact up to third-order terms). A class with
no positives uses theta_0.
"""

from __future__ import annotations

import numpy as np
from scipy.special import expit

from .._numeric import PROB_CLIP
from .._params import Interval, Options
from ..data import TopLabelData
from ._ts_core import BINARY_SCORE_FLOOR
from .base import Calibrator, Curve, finite_array, to_jsonable
from .registry import register

__all__ = ["HierarchicalPlatt", "LAMBDA_GRID", "score_logit"]

#: Candidate prior strengths (pseudo-samples): 2^j, j = 0..24.
LAMBDA_GRID = 2.0 ** np.arange(25)
_NEWTON_STEPS = 50
_TOL = 1e-10


def score_logit(data: TopLabelData) -> np.ndarray:
    """logit of the normalised top score, clipped to [1e-12, 1 - 1e-12] first (as ``bts``)."""
    s = np.clip(data.normalized_score(), BINARY_SCORE_FLOOR, 1.0 - BINARY_SCORE_FLOOR)
    return np.log(s) - np.log1p(-s)


def _softplus(x):
    return np.logaddexp(0.0, x)


class _Rows:
    """Rows with weight, grouped by class: z, tp, fp, class index."""

    def __init__(self, z, tp, fp, g, k):
        keep = (tp + fp) > 0
        self.z, self.tp, self.fp, self.g = z[keep], tp[keep], fp[keep], g[keep]
        self.w = self.tp + self.fp
        self.k = k

    def sums(self, v):
        """Per-class sums of v (K,)."""
        return np.bincount(self.g, weights=v, minlength=self.k)

    def loss(self, m):
        """Per-class NLL at margins m."""
        return self.sums(self.tp * _softplus(-m) + self.fp * _softplus(m))


def _newton(rows: _Rows, theta, center, prior, lam):
    """Per-class penalised Newton (vectorised over classes, step halving per class).

    theta, center: (K, 2); prior: (2, 2) (I_0); lam: float (0 allowed only with rows in every
    class, used for the pooled fit with K = 1). Returns theta (K, 2).
    """
    z, g = rows.z, rows.g
    theta = theta.copy()

    def objective(th):
        m = th[g, 0] * z + th[g, 1]
        d = th - center
        return rows.loss(m) + 0.5 * lam * np.einsum("ki,ij,kj->k", d, prior, d)

    f = objective(theta)
    for _ in range(_NEWTON_STEPS):
        m = theta[g, 0] * z + theta[g, 1]
        p = expit(m)
        r = rows.w * p - rows.tp  # dNLL/dm
        h = rows.w * p * (1.0 - p)
        d = theta - center
        grad = np.stack([rows.sums(r * z), rows.sums(r)], axis=1) + lam * d @ prior
        haa, hab, hbb = rows.sums(h * z * z), rows.sums(h * z), rows.sums(h)
        H = np.empty((rows.k, 2, 2))
        H[:, 0, 0], H[:, 0, 1], H[:, 1, 0], H[:, 1, 1] = haa, hab, hab, hbb
        H += lam * prior
        H[:, 0, 0] += 1e-12
        H[:, 1, 1] += 1e-12
        step = np.linalg.solve(H, grad[:, :, None])[:, :, 0]
        t = np.ones(rows.k)
        new = theta - step
        fn = objective(new)
        for _ in range(30):  # halve the step of the classes whose objective went up
            bad = ~(fn <= f + 1e-12 * np.abs(f))
            if not bad.any():
                break
            t[bad] *= 0.5
            new = theta - t[:, None] * step
            fn = objective(new)
        bad = ~(fn <= f + 1e-12 * np.abs(f))
        new[bad], fn[bad] = theta[bad], f[bad]
        done = np.abs(f - fn) <= _TOL * (1.0 + np.abs(f))
        theta, f = new, fn
        if done.all():
            break
    return theta


def _alo_loss(rows: _Rows, theta, prior, lam) -> float:
    """Approximate leave-one-out NLL (summed over units of weight) of the penalised per-class fit."""
    z, g = rows.z, rows.g
    m = theta[g, 0] * z + theta[g, 1]
    p = expit(m)
    h = rows.w * p * (1.0 - p)
    haa, hab, hbb = rows.sums(h * z * z) + lam * prior[0, 0], rows.sums(h * z) + lam * prior[0, 1], \
        rows.sums(h) + lam * prior[1, 1]
    det = np.maximum(haa * hbb - hab * hab, 1e-300)
    # x' H^-1 x with x = (z, 1)
    lev = (hbb[g] * z * z - 2.0 * hab[g] * z + haa[g]) / det[g]
    w1 = p * (1.0 - p)
    den = np.maximum(1.0 - w1 * lev, 1e-6)
    out = 0.0
    for wt, deriv, sign in ((rows.tp, p - 1.0, -1.0), (rows.fp, p, 1.0)):
        sel = wt > 0
        mi = m[sel] + deriv[sel] * lev[sel] / den[sel]
        c = np.clip(expit(mi), PROB_CLIP, 1.0 - PROB_CLIP)
        out += float(-(wt[sel] @ (np.log(c) if sign < 0 else np.log1p(-c))))
    return out


class _StrengthConstraint:
    """The ``shrinkage`` parameter of hier-platt: "auto" or a prior strength > 0."""

    def ok(self, v) -> bool:
        if isinstance(v, str):
            return v == "auto"
        return Interval(1e-6, 1e12).ok(v)

    def __str__(self) -> str:
        return "'auto' (chosen by approximate leave-one-out NLL) or a number in [1e-06, 1e+12] " \
               "(the prior's weight in pseudo-samples)"


@register
class HierarchicalPlatt(Calibrator):
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
    pooled_ : ndarray (2,)
        The pooled (a_0, b_0).
    strength_ : float
        The prior's weight lam.
    """

    name = "hier-platt"
    summary = "per-class Platt scaling of logit(top score) shrunk toward the pooled fit (strength by LOO)"
    _parameter_constraints = {"shrinkage": _StrengthConstraint(), "loss": Options(("nll",))}

    def __init__(self, *, shrinkage="auto", loss: str = "nll"):
        self.shrinkage = shrinkage
        self.loss = loss

    def _fit(self, data: TopLabelData) -> None:
        k = data.n_classes
        z = score_logit(data)
        self.support_ = [data.class_support(i, v) for i, v in enumerate(data.class_views())]
        rows = _Rows(z, data.tp, data.fp, data.pred, k)
        one = _Rows(z, data.tp, data.fp, np.zeros(data.n_rows, dtype=np.int64), 1)
        start = np.array([[1.0, 0.0]])
        # pooled fit: a tiny ridge toward the identity keeps a one-outcome pool finite
        n = float(one.w.sum())
        eye = np.eye(2) / max(n, 1.0)
        theta0 = _newton(one, start, start, eye, 1e-6)[0]
        p = expit(theta0[0] * one.z + theta0[1])
        h = one.w * p * (1.0 - p)
        prior = np.array([[h @ (one.z * one.z), h @ one.z], [h @ one.z, h.sum()]]) / max(n, 1.0)
        # keep the prior proper where the pool is (nearly) separated: floor its eigenvalues
        vals, vecs = np.linalg.eigh(prior)
        prior = (vecs * np.maximum(vals, 1e-6 * max(vals.max(), 1e-12))) @ vecs.T
        center = np.broadcast_to(theta0, (k, 2))
        if self.shrinkage == "auto":
            grid = LAMBDA_GRID[::-1]  # from the pooled end: each fit starts at the last one
            theta = center.copy()
            losses = np.empty(grid.size)
            fits = []
            for j, lam in enumerate(grid):
                theta = _newton(rows, theta, center, prior, float(lam))
                losses[j] = _alo_loss(rows, theta, prior, float(lam))
                fits.append(theta)
            best = int(np.argmin(losses[::-1]))  # the smallest strength on ties
            j = grid.size - 1 - best
            lam, theta = float(grid[j]), fits[j]
            self.strength_loss_ = losses[::-1].copy()
        else:
            lam = float(self.shrinkage)
            theta = _newton(rows, center.copy(), center, prior, lam)
            self.strength_loss_ = None
        has = np.bincount(rows.g, minlength=k) > 0
        theta = np.where(has[:, None], theta, theta0[None, :])
        self.slope_, self.intercept_ = theta[:, 0].copy(), theta[:, 1].copy()
        self.pooled_ = theta0.copy()
        self.prior_ = prior
        self.strength_ = lam

    def _margin(self, data: TopLabelData) -> np.ndarray:
        return self.slope_[data.pred] * score_logit(data) + self.intercept_[data.pred]

    def _predict(self, data: TopLabelData) -> np.ndarray:
        return expit(self._margin(data))

    @property
    def n_params_(self) -> int:
        return 2 * int(np.sum((self.n_tp_ + self.n_fp_) > 0)) + 2

    def curve(self, k, score=None, *, n_points: int = 401) -> Curve:
        """Conf_k sampled on ``score`` (default: ``n_points`` evenly spaced over the score range)."""
        self._check_fitted()
        i = self._class_index(k)
        lo, hi = self.score_range_
        s = np.linspace(lo, hi, n_points) if score is None else np.asarray(score, dtype=np.float64)
        grid = TopLabelData(tuple(self.classes_), np.full(s.shape, i, dtype=np.int64), s, (lo, hi))
        return Curve(self.classes_[i], s, self.predict(grid), self.support_[i])

    def describe(self) -> dict:
        d = super().describe()
        d["hierarchical"] = {"pooled_slope": float(self.pooled_[0]), "pooled_intercept": float(self.pooled_[1]),
                             "strength": float(self.strength_),
                             "rule": "auto" if self.shrinkage == "auto" else "fixed"}
        return d

    def _describe_classes(self) -> list[dict]:
        return [{"slope": float(a), "intercept": float(b), "support": None if s is None else list(s)}
                for a, b, s in zip(self.slope_, self.intercept_, self.support_)]

    def _get_state(self) -> dict:
        return to_jsonable({"slope": self.slope_, "intercept": self.intercept_, "pooled": self.pooled_,
                            "prior": self.prior_, "strength": self.strength_,
                            "support": [None if s is None else list(s) for s in self.support_]})

    def _set_state(self, state: dict) -> None:
        k = len(self.classes_)
        self.slope_ = finite_array(state["slope"], "slope", k)
        self.intercept_ = finite_array(state["intercept"], "intercept", k)
        self.pooled_ = finite_array(state["pooled"], "pooled", 2)
        prior = np.asarray(state["prior"], dtype=np.float64)
        if prior.shape != (2, 2) or not np.all(np.isfinite(prior)):
            raise ValueError("prior must be a finite 2 x 2 matrix")
        self.prior_ = prior
        (self.strength_,) = (float(v) for v in finite_array([state["strength"]], "strength"))
        if not self.strength_ > 0:
            raise ValueError("strength must be > 0")
        sup = state["support"]
        if not isinstance(sup, list) or len(sup) != k:
            raise ValueError(f"support must be a list of {k} entries")
        self.support_ = [None if v is None else tuple(finite_array(v, "support", 2)) for v in sup]
        self.strength_loss_ = None
