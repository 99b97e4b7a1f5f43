"""Prior estimators (EM, BBSE), bias-corrected temperature scaling and the closed-form
adapted confidence; the constants every part of :mod:`topcal.labelshift` shares."""

from __future__ import annotations

import warnings

import numpy as np

from .._numeric import one_blas_thread
from ..data import TopLabelData
from ..errors import DataError, TopcalWarning

__all__ = [
    "ADAPTED_METHOD",
    "ESTIMATORS",
    "EM_TOL",
    "EM_MAX_ITER",
    "PRIOR_SUM_TOL",
    "FP_PSEUDOCOUNT",
    "PRIOR_STRENGTH",
    "em_priors",
    "SparsePlusRankOne",
    "CellPosteriors",
    "bbse_priors",
    "adapt_confidence",
    "shrunk_fp_mix",
    "fit_bcts",
    "bcts_probs",
]

#: ``method`` field of an adapted model file.
ADAPTED_METHOD = "label-shift"
#: Prior estimators, by name (CLI ``--estimator``).
ESTIMATORS = ("em", "bbse")

#: EM stops when no prior moves by more than this (Saerens et al. 2002 iterate "until
#: convergence"; 1e-8 is far below any bootstrap interval's width).
EM_TOL = 1e-8
EM_MAX_ITER = 2000
#: User-given priors must sum to 1 within this before they are rescaled to sum to exactly 1
#: (a CSV written with 6 decimals for 1000 classes is off by <5e-4).
PRIOR_SUM_TOL = 1e-3
#: Weight, in false positives, of the test set's overall FP mix in each class's FP mix (see
#: :func:`shrunk_fp_mix`): a guard for classes with a handful of false positives (CIFAR-100
#: has ~12 per class; there 0, 10 and 30 gave adapted NLLs within 0.02 of each other). 10
#: leaves a region with >= 40 false positives mostly its own mix.
FP_PSEUDOCOUNT = 10.0
#: Default pseudo-samples per class at the source priors, per estimator. Plain
#: ML/least-squares priors drive classes with few use rows to exactly 0, and a predicted
#: class with prior 0 gets confidence 0: on the CIFAR-100 benchmark cells (2,000 use rows,
#: 100 classes) that made the adapted NLL worse than no adaptation. Chosen on that benchmark
#: (2 seeds, 2 files): EM's 0.1 undid it at a small cost in MSE; BBSE, noisier, needed 0.3.
PRIOR_STRENGTH = {"em": 0.1, "bbse": 0.3}


# ---------------------------------------------------------------- estimators
def em_priors(
    posteriors,
    source_priors,
    *,
    prior_strength: float = 0.0,
    weights=None,
    tol: float = EM_TOL,
    max_iter: int = EM_MAX_ITER,
    init=None,
) -> np.ndarray:
    """Maximum-likelihood use-set priors by EM (Saerens, Latinne and Decaestecker 2002).

    Parameters
    ----------
    posteriors : array of shape (n, K), SparsePlusRankOne or CellPosteriors
        Calibrated P_s(y | x) of the unlabelled use-set rows under the source priors
        (:class:`SparsePlusRankOne` for the safety step's cell-level posteriors at many
        classes, :class:`CellPosteriors` for the top-label posterior of the use set's rows).
    source_priors : array of shape (K,)
        pi_s, the class frequencies the posteriors were calibrated for.
    prior_strength : float, default 0
        0 gives the maximum-likelihood estimate. Otherwise the maximum a posteriori estimate
        under a Dirichlet(1 + prior_strength K pi_s) prior on pi_u: ``prior_strength K``
        pseudo-samples drawn with the source priors, which pulls classes seen in few use
        rows towards no shift (the Bayesian view of Ye et al. 2024, "MAPLS").
    weights : array of shape (n,) or (B, n), optional
        Row weights (counts of repeated rows). Two-dimensional: B sets of weights (the
        bootstrap's resamples), each estimated on its own, all in one pass of matrix
        products.
    tol, max_iter : float, int
        Stop when no prior changes by more than ``tol``, or after ``max_iter`` steps (each
        set of weights on its own).
    init : array of shape (K,), optional
        Starting priors (default ``source_priors``).

    Returns
    -------
    ndarray of shape (K,), the estimated pi_u (sums to 1); (B, K) for weights of shape (B,
    n).

    Notes
    -----
    Each step reweights every posterior by pi_u / pi_s, renormalises it, and takes the mean
    as the new pi_u: the EM iteration for the mixture likelihood prod_i sum_y pi_u(y) p(x_i
    | y). A class with pi_s = 0 keeps pi_u = 0 (no information about it).
    """
    ps = np.asarray(source_priors, dtype=np.float64)
    row_dot, col_dot, n_rows = _posterior_products(posteriors, ps)
    single = weights is None or np.ndim(weights) == 1
    w = np.ones((1, n_rows)) if weights is None else np.atleast_2d(weights).astype(np.float64)
    if isinstance(posteriors, CellPosteriors):
        w = np.stack([posteriors.weights(wb) for wb in w])  # onto its distinct rows
    w = w.T  # (n, B): one column per set of weights
    start = ps if init is None else np.asarray(init, dtype=np.float64)
    pi = np.repeat(start[:, None], w.shape[1], axis=1)
    pseudo = (float(prior_strength) * ps.size * ps / ps.sum())[:, None]
    live = np.arange(w.shape[1])  # the columns still moving
    den = None  # row_dot of the live columns' priors, carried from the last iteration
    # one BLAS thread: the products are vectors against (K, B) blocks, and a second thread
    # doubled the CPU time at 10^5 classes for no gain in wall time
    with one_blas_thread():
        for _ in range(max_iter):
            if live.size == 0:
                break
            pi[:, live], den, moved = _squarem_step(
                pi[:, live], den, w[:, live], pseudo, row_dot, col_dot
            )
            keep = moved >= tol
            live, den = live[keep], den[:, keep]
    return pi[:, 0].copy() if single else pi.T.copy()


def _posterior_products(posteriors, ps):
    """``(row_dot, col_dot, n_rows)`` of the likelihoods p(x_i | y) (up to a factor per row)
    behind ``posteriors``: products with a (K, B) matrix of priors and with an (n, B) one."""
    if isinstance(posteriors, (SparsePlusRankOne, CellPosteriors)):
        return posteriors.products(ps)
    P = np.asarray(posteriors, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        # p(x|y) up to a factor per row
        base = np.where(ps > 0, P / np.where(ps > 0, ps, 1.0), 0.0)

    def row_dot(p):  # (K, B) -> (n, B)
        return base @ p

    def col_dot(u):  # (n, B) -> (K, B)
        return base.T @ u

    return row_dot, col_dot, base.shape[0]


def _squarem_step(pi, den, w, pseudo, row_dot, col_dot):
    """One SQUAREM iteration (Varadhan and Roland 2008, scheme S3) of EM for the priors in
    each column of ``pi`` (K, B) with row weights ``w`` (n, B): extrapolate two EM steps,
    fall back to them where the extrapolation leaves the simplex or lowers the objective.
    Same fixed point as plain EM, in far fewer steps where some priors creep towards 0.

    ``den`` is ``row_dot(pi)`` (None: computed here). Returns the new priors, their
    ``row_dot`` and each column's largest change."""

    def step(p, d, w):
        # one EM step: sum_i w_i p_j base_ij / sum_l p_l base_il (+ the Dirichlet
        # pseudo-counts); rows no class explains (d = 0) add nothing
        new = p * col_dot(np.divide(w, d, out=np.zeros_like(d), where=d > 0)) + pseudo
        return new / new.sum(axis=0)

    def objective(p, d, w):
        # log where positive, 0 (= log 1) elsewhere: masked, the same values as
        # log(where(d > 0, d, 1)) at a third of its time on (n, 1) columns
        fit = np.einsum("ij,ij->j", w, np.log(d, out=np.zeros_like(d), where=d > 0))
        return fit + (pseudo * np.log(p, out=np.zeros_like(p), where=p > 0)).sum(axis=0)

    den = row_dot(pi) if den is None else den
    p1 = step(pi, den, w)
    p2 = step(p1, row_dot(p1), w)
    d2 = row_dot(p2)  # the objective's, and the next iteration's where p2 is kept
    r, v = p1 - pi, p2 - 2 * p1 + pi
    nr, nv = np.linalg.norm(r, axis=0), np.linalg.norm(v, axis=0)
    new, d_new = p2.copy(), d2.copy()
    with np.errstate(divide="ignore", invalid="ignore"):
        a = np.where(nv > 0, np.minimum(-nr / np.where(nv > 0, nv, 1.0), -1.0), -1.0)
    while (todo := np.flatnonzero(a < -1.0)).size:
        at = a[todo]
        cand = pi[:, todo] - 2 * at * r[:, todo] + at * at * v[:, todo]
        ok = np.all(cand >= 0, axis=0) & (cand.sum(axis=0) > 0)
        if ok.any():
            cols = todo[ok]
            cand = cand[:, ok] / cand[:, ok].sum(axis=0)
            c = step(cand, row_dot(cand), w[:, cols])
            dc = row_dot(c)
            better = objective(c, dc, w[:, cols]) >= objective(
                p2[:, cols], d2[:, cols], w[:, cols]
            )
            new[:, cols[better]], d_new[:, cols[better]] = c[:, better], dc[:, better]
            a[cols] = -1.0  # done: the extrapolation or the two plain steps
        bad = todo[~ok]
        a[bad] = np.where(a[bad] < -1.5, (a[bad] - 1.0) / 2.0, -1.0)
    return new, d_new, np.max(np.abs(new - pi), axis=0)


class SparsePlusRankOne:
    """Posteriors of shape (n, K) held as D + h v^T: ``D`` a scipy sparse matrix, ``h``
    (n,), ``v`` (K,).

    What :func:`em_priors` accepts besides a dense array when most of each row is one shared
    vector (cell-level posteriors whose false-positive mix is shrunk towards the test set's
    overall one): an EM step then costs the nonzeros of D, not n K.
    """

    def __init__(self, D, h, v):
        self.D = D.tocsr()
        self.h = np.asarray(h, dtype=np.float64)
        self.v = np.asarray(v, dtype=np.float64)

    def products(self, ps):
        """(row_dot, col_dot, n) of base = posteriors / ps (0 where ps is 0): base @ p and u
        @ base."""
        with np.errstate(divide="ignore", invalid="ignore"):
            ips = np.where(ps > 0, 1.0 / np.where(ps > 0, ps, 1.0), 0.0)
        Dt = self.D.T.tocsr()
        vi = self.v * ips

        def row_dot(p):  # (K, B) -> (n, B)
            return self.D @ (ips[:, None] * p) + self.h[:, None] * (vi @ p)

        def col_dot(u):  # (n, B) -> (K, B)
            return ips[:, None] * (Dt @ u) + vi[:, None] * (self.h @ u)

        return row_dot, col_dot, self.D.shape[0]

    def toarray(self) -> np.ndarray:
        return self.D.toarray() + self.h[:, None] * self.v


class CellPosteriors:
    """Posteriors of shape (n, K): row i is c_i at class ``cell_class[cells[i]]`` and (1 -
    c_i) times its cell's mix elsewhere, the mixes of the m cells held as S + h v^T (``S``
    scipy sparse, (m, K)).

    The top-label posterior of a use set (rows of one cell share their mix): an EM step
    costs the rows plus the nonzeros of S, not n K (the dense form took minutes at 1,500
    classes).
    """

    def __init__(self, S, h, v, cell_class, cells, c):
        self.S = S.tocsr()
        self.h = np.asarray(h, dtype=np.float64)
        self.v = np.asarray(v, dtype=np.float64)
        cells, c = np.asarray(cells, dtype=np.int64), np.asarray(c, dtype=np.float64)
        # rows of one cell and one confidence are one posterior: EM runs on the distinct
        # ones, each weighted by its rows (a histogram's rows share a few confidences per
        # class)
        order = np.lexsort((c, cells))
        new = np.r_[True, (np.diff(cells[order]) != 0) | (np.diff(c[order]) != 0)]
        self.rows = np.empty(cells.shape[0], dtype=np.int64)  # each row's distinct posterior
        self.rows[order] = np.cumsum(new) - 1
        self.cells, self.c = cells[order][new], c[order][new]
        self.k = np.asarray(cell_class, dtype=np.int64)[self.cells]

    def weights(self, w) -> np.ndarray:
        """Row weights ``w`` (n,) summed onto the distinct posteriors."""
        return np.bincount(self.rows, weights=w, minlength=self.cells.shape[0])

    def products(self, ps):
        """(row_dot, col_dot, n) of base = posteriors / ps (0 where ps is 0): base @ p, u @
        base."""
        with np.errstate(divide="ignore", invalid="ignore"):
            ips = np.where(ps > 0, 1.0 / np.where(ps > 0, ps, 1.0), 0.0)
        St = self.S.T.tocsr()
        m, K = self.S.shape
        cells, k, c = self.cells, self.k, self.c
        rest = 1.0 - c

        from scipy import sparse

        n = cells.shape[0]
        # per cell, the weight of its rows' mixes; per class, its rows' own share
        to_cell = sparse.csr_matrix((rest, (cells, np.arange(n))), shape=(m, n))
        to_class = sparse.csr_matrix((c, (k, np.arange(n))), shape=(K, n))

        def row_dot(p):  # (K, B) -> (n, B)
            x = ips[:, None] * p
            mixed = self.S @ x + self.h[:, None] * (self.v @ x)  # each cell's mix . x
            return rest[:, None] * mixed[cells] + c[:, None] * x[k]

        def col_dot(u):  # (n, B) -> (K, B)
            a = to_cell @ u
            return ips[:, None] * (St @ a + self.v[:, None] * (self.h @ a) + to_class @ u)

        return row_dot, col_dot, self.rows.shape[0]

    def toarray(self) -> np.ndarray:
        """The (n, K) posteriors of the rows."""
        out = (self.S.toarray() + self.h[:, None] * self.v)[self.cells] * (1.0 - self.c)[
            :, None
        ]
        out[np.arange(self.cells.shape[0]), self.k] = self.c
        return out[self.rows]


def bbse_priors(
    confusion, pred_counts, source_priors, *, prior_strength: float = 0.0
) -> np.ndarray:
    """Black-box shift estimation (Lipton, Wang and Smola 2018).

    Parameters
    ----------
    confusion : array of shape (m, K)
        Source counts of (discrete prediction i, true class j); rows may be predicted
        classes, or finer cells such as (predicted class, score region).
    pred_counts : array of shape (m,)
        Use-set counts of each discrete prediction.
    source_priors : array of shape (K,)
    prior_strength : float, default 0
        Pseudo-samples per class at the source priors, mixed into the estimate: pi = (n
        pi_hat + prior_strength K pi_s) / (n + prior_strength K), n the use set's size.
        Keeps a class that the least-squares solution sets to exactly 0 (often one with few
        use rows) from getting confidence 0 on its predictions.

    Returns
    -------
    ndarray of shape (K,), the estimated pi_u.

    Notes
    -----
    With C[i, j] = P_s(prediction i | y = j) and mu the use set's prediction frequencies,
    label shift gives mu = C pi_u. Lipton et al. invert C_joint w = mu for w = pi_u / pi_s
    and clip negative entries; here the system is solved for pi_u directly by non-negative
    least squares (which also handles more prediction cells than classes), then normalised.
    """
    from scipy import sparse

    mu = np.asarray(pred_counts, dtype=np.float64)
    mu = mu / mu.sum()
    if sparse.issparse(confusion) and np.prod(confusion.shape) > BBSE_DENSE_CELLS:
        pi_seen, seen = _bbse_sparse(sparse.csc_matrix(confusion, dtype=np.float64), mu)
    else:
        from scipy.optimize import nnls

        C = confusion.toarray() if sparse.issparse(confusion) else confusion
        C = np.asarray(C, dtype=np.float64)
        col = C.sum(axis=0)
        seen = col > 0
        cond = C[:, seen] / col[seen]  # P_s(i | y = j)
        pi_seen, _ = nnls(cond, mu, maxiter=50 * cond.shape[1])
    pi = np.zeros(confusion.shape[1])
    pi[seen] = pi_seen
    ps = np.asarray(source_priors, dtype=np.float64)
    if pi.sum() <= 0:  # nothing explains the use set: keep the source priors
        return ps.copy()
    n = float(np.sum(pred_counts))
    beta = float(prior_strength) * ps.size
    return (n * pi / pi.sum() + beta * ps / ps.sum()) / (n + beta)


#: Largest cells x classes table :func:`bbse_priors` solves densely (exact NNLS); beyond it,
#: the sparse bounded least squares of :func:`_bbse_sparse` (a dense table of 10^5 classes
#: would be 80 GB, and NNLS's active set costs K^3).
BBSE_DENSE_CELLS = 4_000_000


def _bbse_sparse(C, mu) -> tuple[np.ndarray, np.ndarray]:
    """min ||cond pi - mu|| over pi >= 0 with ``cond`` = P_s(cell | class), sparse (bounded
    least squares by LSMR steps: the nonzeros per iteration, not cells x classes)."""
    from scipy import sparse
    from scipy.optimize import lsq_linear

    col = np.asarray(C.sum(axis=0)).ravel()
    seen = col > 0
    cond = C[:, np.flatnonzero(seen)] @ sparse.diags(1.0 / col[seen])
    res = lsq_linear(cond.tocsr(), mu, bounds=(0.0, np.inf), lsmr_tol="auto", max_iter=200)
    return np.clip(res.x, 0.0, None), seen


def adapt_confidence(confidence, w_pos, w_fp) -> np.ndarray:
    """The top-label confidence under new priors: odds times w_pos / w_fp.

    ``confidence`` c under the source priors, ``w_pos`` the prior ratio of the predicted
    class, ``w_fp`` the mean prior ratio of the true classes behind its false positives.
    Returns w_pos c / (w_pos c + w_fp (1 - c)); rows where that is 0/0 (both ratios 0: no
    class that could be there is present in the use set) keep their confidence.
    """
    c = np.asarray(confidence, dtype=np.float64)
    a = np.asarray(w_pos, dtype=np.float64) * c
    b = np.asarray(w_fp, dtype=np.float64) * (1.0 - c)
    den = a + b
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > 0, a / np.where(den > 0, den, 1.0), c)


def shrunk_fp_mix(counts, pred, confusion, pseudocount: float) -> np.ndarray:
    """Per row, the mix of true classes behind the predicted class's false positives, shape
    (n, K).

    ``counts`` (n, K): each row's source counts of its (predicted class, score region) by
    true class; ``pred`` (n,): the predicted class; ``confusion`` (K, K): all the source
    counts, predicted x true. The row's false-positive counts are shrunk towards the mix of
    true classes behind *all* false positives of the test set (any predicted class, the
    row's own class left out) with weight ``pseudocount``: a class with 12 false positives
    would otherwise claim that classes absent from them never hide behind its predictions. A
    row with no false positives gets that overall mix; with none anywhere, the source priors
    of the other classes. The mix is 0 at the predicted class and sums to 1.
    """
    q = np.array(counts, dtype=np.float64)
    conf = np.asarray(confusion, dtype=np.float64)
    K = conf.shape[0]
    rows = np.arange(q.shape[0])
    overall = conf.sum(axis=0) - np.diag(conf)  # FPs of any predicted class, by true class
    if overall.sum() <= 0:
        overall = conf.sum(axis=0)
    g = np.broadcast_to(overall, (q.shape[0], K)).copy()
    g[rows, pred] = 0.0
    gs = g.sum(axis=1)
    if np.any(gs <= 0):  # a single class: nothing else can hide behind it
        g[gs <= 0] = 1.0
        g[rows[gs <= 0], pred[gs <= 0]] = 0.0
        gs = g.sum(axis=1)
    g /= np.where(gs > 0, gs, 1.0)[:, None]
    q[rows, pred] = 0.0
    tot = q.sum(axis=1)
    a = np.where(tot > 0, float(pseudocount), 1.0)
    return (q + a[:, None] * g) / (tot + a)[:, None]


def fit_bcts(data: TopLabelData) -> tuple[float, np.ndarray]:
    """Bias-corrected temperature scaling of full score vectors (Alexandari et al. 2020).

    Fits softmax(log y / T + b) to the true classes of labelled ``data`` by minimising the
    multinomial NLL over (log T, b) with L-BFGS-B and the analytic gradient. A ridge of 1e-6
    (per sample) on b keeps the bias of a class absent from the labels finite and fixes b's
    free additive constant.

    Returns
    -------
    (T, b) : float, ndarray of shape (K,)
    """
    from scipy.optimize import minimize

    data.require_full("bias-corrected temperature scaling")
    if data.labels is None:
        raise DataError("bias-corrected temperature scaling needs per-sample true classes")
    z = data.log_probs()
    y = data.labels
    n, K = z.shape
    rows = np.arange(n)
    ridge = 1e-6

    def fun(theta):
        tau = np.exp(-theta[0])
        u = z * tau + theta[1:]
        m = u.max(axis=1, keepdims=True)
        e = np.exp(u - m)
        se = e.sum(axis=1, keepdims=True)
        loss = float(np.mean(np.log(se[:, 0]) + m[:, 0] - u[rows, y])) + ridge * float(
            theta[1:] @ theta[1:]
        )
        p = e / se
        g_b = p.mean(axis=0) - np.bincount(y, minlength=K) / n + 2 * ridge * theta[1:]
        g_tau = float(np.mean((p * z).sum(axis=1) - z[rows, y]))
        return loss, np.concatenate([[-tau * g_tau], g_b])

    # the temperature bounds of topcal's temperature methods
    lo, hi = np.log(1e-3), np.log(1e3)
    res = minimize(
        fun,
        np.zeros(K + 1),
        jac=True,
        method="L-BFGS-B",
        bounds=[(lo, hi)] + [(None, None)] * K,
        options={"maxiter": 1000},
    )
    if not res.success:
        warnings.warn(
            f"bias-corrected temperature scaling stopped before converging ({res.message}); "
            "EM's prior estimate on its vectors may be off",
            TopcalWarning,
            stacklevel=3,
        )
    return float(np.exp(res.x[0])), res.x[1:].copy()


def bcts_probs(data: TopLabelData, temperature: float, bias: np.ndarray) -> np.ndarray:
    """softmax(log y / T + b) of each row, shape (n, K)."""
    u = data.log_probs() / temperature + bias
    u -= u.max(axis=1, keepdims=True)
    p = np.exp(u)
    return p / p.sum(axis=1, keepdims=True)
