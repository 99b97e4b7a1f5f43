"""The hierarchical Platt/beta fit as it was before issue 26's row buffers (main at f8da22c, 2026-11-27), kept
as the reference the buffered fit must equal bit for bit (tests/test_platt_beta_memory.py): the rows as an
(n, p) feature matrix, every intermediate a fresh array, the pooled and the per-class rows both held. An
ordinary fit only (no cross-validation fold's warm start or local search)."""

import numpy as np
from scipy.special import expit

from topcal._numeric import PROB_CLIP, dot
from topcal.calibrators.hierarchical import ALO_SLACK_PER_PARAM, LAMBDA_GRID, MERGE_GAIN, score_logit
from topcal.calibrators.temperature import BINARY_SCORE_FLOOR
from topcal.data import class_order

_NEWTON_STEPS = 50
_TOL = 1e-10


def _features(name, data):
    if name == "hier-platt":
        return np.stack([score_logit(data), np.ones(data.n_rows)], axis=1)
    s = np.clip(data.normalized_score(), BINARY_SCORE_FLOOR, 1.0 - BINARY_SCORE_FLOOR)
    return np.stack([np.log(s), -np.log1p(-s), np.ones(s.shape)], axis=1)


def _merge_equal_rows(data, X):
    """(X, tp, fp, class) of the fit's rows, rows of equal (class, score) merged into one where that pays.

    The features are a function of the score, and the NLL, its derivatives and the approximate LOO
    loss are sums over rows linear in the TP and FP weights at the row's features, so a merged row
    holding the summed weights gives the same fit (lossless; up to the order of the sums: tested).
    Merged only where it divides the rows by :data:`MERGE_GAIN` (scores rounded to a few digits,
    binned data); otherwise the rows as given.
    """
    n = data.n_rows
    if n < 2:
        return X, data.tp, data.fp, data.pred
    order = np.lexsort((data.score, data.pred))
    pred, score = data.pred[order], data.score[order]
    new = np.empty(n, dtype=bool)
    new[0] = True
    np.not_equal(pred[1:], pred[:-1], out=new[1:])
    new[1:] |= score[1:] != score[:-1]
    starts = np.flatnonzero(new)
    if starts.size * MERGE_GAIN > n:
        return X, data.tp, data.fp, data.pred
    return (X[order[starts]], np.add.reduceat(data.tp[order], starts), np.add.reduceat(data.fp[order], starts),
            pred[starts])


class _Rows:
    """Rows with weight, grouped by class: features X (n, p), tp, fp, class index.

    The rows are stored class by class (a stable sort: each class keeps its rows' order, so a
    per-class sum adds the same numbers in the same order), the features as contiguous columns,
    with their pairwise products (the Hessian's and the leverages' terms) computed once.
    """

    def __init__(self, X, tp, fp, g, k):
        keep = np.flatnonzero((tp + fp) > 0)
        # the kept rows by class: class_order is np.argsort(g, kind="stable"), faster
        idx = keep[class_order(g[keep], k)] if k > 1 else keep
        self.g, self.tp, self.fp = g.take(idx), tp.take(idx), fp.take(idx)
        self.cols = np.empty((X.shape[1], idx.size))  # (p, n), gathered column by column
        for i, c in enumerate(self.cols):
            np.take(X[:, i], idx, out=c)
        self.w = self.tp + self.fp
        self.k = k
        self.pos, self.neg = np.flatnonzero(self.tp > 0), np.flatnonzero(self.fp > 0)
        self.tp_pos, self.fp_neg = self.tp[self.pos], self.fp[self.neg]
        self.counts = np.bincount(self.g, minlength=k)
        self._buf = None
        self._has = self.counts > 0
        self._starts = (np.cumsum(self.counts) - self.counts)[self._has]
        p = self.cols.shape[0]
        self.pairs = [(i, j, self.cols[i] * self.cols[j]) for i in range(p) for j in range(i, p)]

    @property
    def X(self) -> np.ndarray:
        """The features (n, p) (a view of the columns)."""
        return self.cols.T

    def sums(self, v):
        """Per-class sums of v (K,) (``np.add.reduceat`` over the class blocks: ~20 x ``np.bincount``)."""
        out = np.zeros(self.k)
        if self._starts.size:
            out[self._has] = np.add.reduceat(v, self._starts)
        return out

    def per_row(self, v):
        """v (K,) spread to the rows (n,)."""
        return np.repeat(v, self.counts)

    def loss(self, m):
        """(per-class NLL at margins m, the rows' probabilities expit(m)).

        The NLL is tp softplus(-m) + fp softplus(m) summed per class, softplus(+-m) = max(+-m, 0) +
        log1p(e) with e = exp(-|m|) as :func:`~topcal._numeric.softplus_both` (rows of weight 0/1 get
        its numbers bit for bit), and expit(m) = (1 or e) / (1 + e) from the same e (within 4.5e-16
        relative of scipy's ``expit``, which takes one more exp: Newton needs both at every iterate).
        The work runs in three scratch buffers kept between calls (no fresh row-length arrays: their
        page faults cost as much as the arithmetic).
        """
        if self._buf is None:
            self._buf = (np.empty(m.shape), np.empty(m.shape), np.empty(m.shape))
        s, t, e = self._buf
        np.abs(m, out=e)
        np.negative(e, out=e)
        np.exp(e, out=e)
        np.log1p(e, out=s)
        np.multiply(self.w, s, out=s)
        np.maximum(m, 0.0, out=t)
        np.multiply(t, self.fp, out=t)
        s += t
        np.negative(m, out=t)
        np.maximum(t, 0.0, out=t)
        np.multiply(t, self.tp, out=t)
        s += t
        q = np.where(m >= 0.0, 1.0, e)
        np.add(e, 1.0, out=t)
        q /= t
        return self.sums(s), q

    def margin(self, theta):
        m = self.cols[0] * self.per_row(theta[:, 0])
        for i in range(1, self.cols.shape[0]):
            m += self.cols[i] * self.per_row(theta[:, i])
        return m

    def gradient(self, r):
        """Per-class sums of r x (K, p)."""
        return np.stack([self.sums(r * c) for c in self.cols], axis=1)

    def hessian(self, h):
        """Per-class sum of h x x' (K, p, p)."""
        p = self.cols.shape[0]
        H = np.empty((self.k, p, p))
        for i, j, xx in self.pairs:
            H[:, i, j] = H[:, j, i] = self.sums(h * xx)
        return H

    def leverage(self, Hinv):
        """x' Hinv_k x per row (Hinv: (K, p, p), symmetric)."""
        out = np.zeros(self.g.size)
        for i, j, xx in self.pairs:
            out += (1.0 if i == j else 2.0) * self.per_row(Hinv[:, i, j]) * xx
        return out


def _newton(rows, theta, center, prior, lam):
    """Per-class penalised Newton (vectorised over classes, step halving per class).

    theta, center: (K, p); prior: (p, p) (I_0); lam: float. Returns theta (K, p) and the rows'
    probabilities there (n,).
    """
    theta = theta.copy()
    p = theta.shape[1]

    def objective(th):
        """(per-class penalised loss, the rows' probabilities expit(margin)) at th."""
        d = th - center
        loss, q = rows.loss(rows.margin(th))
        return loss + 0.5 * lam * np.einsum("ki,ij,kj->k", d, prior, d), q

    f, q = objective(theta)
    for _ in range(_NEWTON_STEPS):
        # q: the probabilities at theta, kept from its objective (a row's margin is its class's)
        r = rows.w * q - rows.tp  # dNLL/dm
        grad = rows.gradient(r) + lam * (theta - center) @ prior
        H = rows.hessian(rows.w * q * (1.0 - q)) + lam * prior + 1e-12 * np.eye(p)
        step = np.linalg.solve(H, grad[:, :, None])[:, :, 0]
        t = np.ones(rows.k)
        new = theta - step
        fn, qn = objective(new)
        for _ in range(30):  # halve the step of the classes whose objective went up
            bad = ~(fn <= f + 1e-12 * np.abs(f))
            if not bad.any():
                break
            t[bad] *= 0.5
            new = theta - t[:, None] * step
            fn, qn = objective(new)
        bad = ~(fn <= f + 1e-12 * np.abs(f))
        new[bad], fn[bad] = theta[bad], f[bad]
        if bad.any():
            qn = np.where(bad[rows.g], q, qn)
        done = np.abs(f - fn) <= _TOL * (1.0 + np.abs(f))
        theta, f, q = new, fn, qn
        if done.all():
            break
    return theta, q


def _alo_loss(rows, theta, prior, lam, q) -> float:
    """Approximate leave-one-out NLL (summed over units of weight) of the penalised per-class fit
    theta (q: its rows' probabilities, from :func:`_newton`)."""
    m = rows.margin(theta)
    w1 = q * (1.0 - q)
    p = theta.shape[1]
    Hinv = np.linalg.inv(rows.hessian(rows.w * w1) + lam * prior + 1e-12 * np.eye(p))
    lev = rows.leverage(Hinv)  # x' H^-1 x
    a = lev / np.maximum(1.0 - w1 * lev, 1e-6)
    # the left-out margin m + l' h / (1 - l'' h) of a unit of positive (l' = q - 1) and negative (l' = q) weight
    c = np.clip(expit((m + (q - 1.0) * a).take(rows.pos)), PROB_CLIP, 1.0 - PROB_CLIP)
    out = -dot(rows.tp_pos, np.log(c))
    c = np.clip(expit((m + q * a).take(rows.neg)), PROB_CLIP, 1.0 - PROB_CLIP)
    return out - dot(rows.fp_neg, np.log(1.0 - c))  # 1 - c: exact for c >= 1/2, 1e-16 off log1p(-c) below


def _fit_strength(rows, center, prior, fits, losses, j, start) -> None:
    """Fit strength LAMBDA_GRID[j] from ``start``; its fit and approximate LOO loss into fits[j], losses[j]."""
    fits[j], q = _newton(rows, start, center, prior, float(LAMBDA_GRID[j]))
    losses[j] = _alo_loss(rows, fits[j], prior, float(LAMBDA_GRID[j]), q)


def _grid_search(rows, center, prior, warm_fits):
    """(fits, losses) of the strength scan: every other grid point from the pooled end (each fit starts at
    the last one), then the two neighbours of the best of those: 15 fits instead of 25, the same choice
    where the loss is unimodal in log strength. Unfitted strengths have loss inf."""
    losses = np.full(LAMBDA_GRID.size, np.inf)
    fits = {}
    theta = center.copy()
    for j in range(LAMBDA_GRID.size - 1, -1, -2):
        _fit_strength(rows, center, prior, fits, losses, j, warm_fits.get(j, theta))
        theta = fits[j]
    b = int(np.argmin(losses))
    for j in (b - 1, b + 1):
        if 0 <= j < LAMBDA_GRID.size and j not in fits:
            _fit_strength(rows, center, prior, fits, losses, j, warm_fits.get(j, fits[b]))
    return fits, losses


def _posterior_cov(rows, theta, prior, lam) -> np.ndarray:
    """(K, p, p) approximate posterior covariance of each class's parameters (module docstring)."""
    p = theta.shape[1]
    q = expit(rows.margin(theta))
    D = rows.hessian(rows.w * q * (1.0 - q))
    P = lam * prior
    eye = np.eye(p)
    Hinv = np.linalg.inv(D + P + 1e-12 * eye)
    # the centre's posterior precision: sum_j (P^-1 + D_j^-1)^-1 = sum_j D_j (I + P^-1 D_j)^-1
    # (a class without rows adds nothing)
    Pinv = np.linalg.inv(P)
    M = np.linalg.solve(np.transpose(eye + Pinv @ D, (0, 2, 1)), np.transpose(D, (0, 2, 1)))
    M = np.transpose(M, (0, 2, 1)).sum(axis=0)
    M = 0.5 * (M + M.T)
    vals, vecs = np.linalg.eigh(M)
    V0 = (vecs / np.maximum(vals, 1e-12 * max(vals.max(), 1e-300))) @ vecs.T
    G = Hinv @ P
    C = Hinv + G @ V0 @ np.transpose(G, (0, 2, 1))
    return 0.5 * (C + np.transpose(C, (0, 2, 1)))


def fit(name, data, shrinkage="auto"):
    """(theta, strength, strength losses, cov) of an ordinary fit of ``name`` (hier-platt, hier-beta; pooled-beta's
    inner fit is hier-beta on the pooled data) as main fitted them before issue 26's buffers."""
    k = data.n_classes
    X = _features(name, data)
    p = X.shape[1]
    X, tp, fp, g = _merge_equal_rows(data, X)
    rows = _Rows(X, tp, fp, g, k)
    one = _Rows(X, tp, fp, np.zeros(g.size, dtype=np.int64), 1)
    start = np.array([(1.0, 0.0) if name == "hier-platt" else (1.0, 1.0, 0.0)], dtype=np.float64)
    n = float(one.w.sum())
    theta0, q = _newton(one, start, start, np.eye(p) / max(n, 1.0), 1e-6)
    theta0 = theta0[0]
    prior = one.hessian(one.w * q * (1.0 - q))[0] / max(n, 1.0)
    vals, vecs = np.linalg.eigh(prior)
    prior = (vecs * np.maximum(vals, 1e-6 * max(vals.max(), 1e-12))) @ vecs.T
    center = np.broadcast_to(theta0, (k, p))
    losses = None
    if shrinkage == "auto":
        fits, losses = _grid_search(rows, center, prior, {})
        j = int(np.argmin(losses))
        lam, theta = float(LAMBDA_GRID[j]), fits[j]
        ji = int(np.flatnonzero(losses <= losses[j] + ALO_SLACK_PER_PARAM * p).min())
        interval_fit = (float(LAMBDA_GRID[ji]), fits[ji])
    else:
        lam = float(shrinkage)
        theta = _newton(rows, center.copy(), center, prior, lam)[0]
        interval_fit = (lam, theta)
    has = np.bincount(rows.g, minlength=k) > 0
    theta = np.where(has[:, None], theta, theta0[None, :])
    lam_i, theta_i = interval_fit
    theta_i = np.where(has[:, None], theta_i, theta0[None, :])
    d = theta - theta_i
    return theta, lam, losses, _posterior_cov(rows, theta_i, prior, lam_i) + d[:, :, None] * d[:, None, :]
