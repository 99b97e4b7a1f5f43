"""Whole-vector peers of ``bench_heldout.py`` (issue 35), scored like every method on the calibrated
probability of the original top label.

* ``pm-sms``, ``pm-svs``, ``pm-ts``: probmetrics' structured matrix scaling, structured vector
  scaling and temperature scaling (``probmetrics.calibrators.get_calibrator("sms" | "svs" |
  "temp-scaling")``, their defaults; Berta, Holzmüller, Jordan & Bach 2025). Needs probmetrics
  (and numba, which its package imports) from the bench extra.
* ``vector-scaling``, ``matrix-scaling``: Guo et al.'s (2017) vector and matrix scaling, written
  here
  from the paper: softmax(a * x + b), softmax(W x + b) on x = log p (floored at the smallest normal
  float32, as probmetrics), unregularised, multinomial NLL by L-BFGS-B with analytic gradients from
  the identity (a = 1, W = I, b = 0). ``matrix-scaling`` runs only up to 10 classes (with 100 it
  has 10,100 parameters and, unregularised, collapses; issue 35).

* ``dirichlet-odir``: Dirichlet calibration with off-diagonal and intercept regularisation (Kull
  et al., NeurIPS 2019), written here from the paper (``dirichletcal``'s sdist does not build with
  today's setuptools, invalid ``install_requires``, and probmetrics' Dirichlet wraps that package):
  softmax(W x + b) on x = log p (floored as above), W a full K x K matrix, minimising the mean
  multinomial NLL + lam / (K (K - 1)) * sum of W's off-diagonal entries squared + mu / K * |b|^2
  (the diagonal is free), from the identity with analytic derivatives: Newton up to
  :data:`ODIR_NEWTON_MAX_CLASSES` classes, L-BFGS-B above. lam and mu: up to
  :data:`ODIR_CV_MAX_CLASSES` classes chosen by 5-fold stratified inner cross-validation (mean
  held-out multinomial NLL) over :data:`ODIR_GRID` x :data:`ODIR_GRID` (1e-5 .. 1e6: the decades
  of the 10-class grid in a public reproduction of the authors' deep-network experiments; its 0.25
  and 0.5 multiples of lam left out for time); above it fixed at :data:`ODIR_FIXED` (with 100
  classes one fit has 10,100 parameters and takes 2-8 minutes here, so a grid by inner CV would
  take hours): the values that reproduction attributes to the authors for a CIFAR-100 wide ResNet.
"""

from __future__ import annotations

import numpy as np
from scipy.optimize import minimize
from scipy.special import log_softmax, softmax

VECTOR_PEERS = ["pm-ts", "pm-svs", "pm-sms", "vector-scaling", "matrix-scaling", "dirichlet-odir"]
_PM = {"pm-ts": "temp-scaling", "pm-svs": "svs", "pm-sms": "sms"}
_FLOOR = float(np.finfo(np.float32).tiny)
MATRIX_MAX_CLASSES = 10
#: lam and mu of ``dirichlet-odir`` are chosen by inner cross-validation up to this many classes
ODIR_CV_MAX_CLASSES = 10
ODIR_GRID = tuple(10.0**i for i in range(-5, 7))
#: (lam, mu) above ODIR_CV_MAX_CLASSES classes
ODIR_FIXED = (2.5, 0.01)
#: Newton for ``dirichlet-odir`` up to this many classes (K (K + 1) parameters), L-BFGS-B above
ODIR_NEWTON_MAX_CLASSES = 20


def _top(p, test):
    return p[np.arange(test.n_rows), test.pred]


def _probmetrics(name, train, test):
    import logging

    import torch
    from probmetrics.calibrators import get_calibrator

    logging.getLogger("probmetrics").setLevel(logging.WARNING)
    torch.set_num_threads(1)
    cal = get_calibrator(_PM[name])
    cal.fit(np.exp(train.log_probs()).astype(np.float32), train.labels)
    p = cal.predict_proba(np.exp(test.log_probs()).astype(np.float32))
    return np.asarray(p, dtype=np.float64)


def _guo(train, test, matrix: bool):
    x = _logp(train)
    n, k = x.shape
    y = train.labels
    onehot = np.zeros((n, k))
    onehot[np.arange(n), y] = 1.0

    def unpack(t):
        return (t[: k * k].reshape(k, k), t[k * k :]) if matrix else (t[:k], t[k:])

    def scores(xx, t):
        a, b = unpack(t)
        return (xx @ a.T if matrix else xx * a) + b

    def loss(t):
        u = scores(x, t)
        lp = log_softmax(u, axis=1)
        r = (np.exp(lp) - onehot) / n
        ga = r.T @ x if matrix else (r * x).sum(axis=0)
        return -lp[np.arange(n), y].mean(), np.concatenate([ga.ravel(), r.sum(axis=0)])

    t0 = np.concatenate([np.eye(k).ravel() if matrix else np.ones(k), np.zeros(k)])
    t = minimize(loss, t0, jac=True, method="L-BFGS-B", options={"maxiter": 2000}).x
    xt = _logp(test)
    return softmax(scores(xt, t), axis=1)


def _logp(data):
    return np.maximum(data.log_probs(), np.log(_FLOOR))


def _odir_parts(t, x, y, lam, mu, hessian=False):
    """(value, gradient[, Hessian]) of the ODIR objective at t = (W | b) row by row, K x (K + 1),
    on features x (n, K) and labels y."""
    n, k = x.shape
    m = t.reshape(k, k + 1)
    lp = log_softmax(x @ m[:, :k].T + m[:, k], axis=1)
    p = np.exp(lp)
    r = p.copy()
    r[np.arange(n), y] -= 1.0
    pen = np.zeros((k, k + 1))
    pen[:, :k] = lam / (k * (k - 1))
    pen[np.arange(k), np.arange(k)] = 0.0  # the diagonal is free
    pen[:, k] = mu / k
    xt = np.column_stack([x, np.ones(n)])
    val = -lp[np.arange(n), y].mean() + float((pen * m * m).sum())
    grad = (r.T @ xt / n + 2.0 * pen * m).ravel()
    if not hessian:
        return val, grad
    d = k + 1
    blocks = (p.T @ (xt[:, :, None] * xt[:, None, :]).reshape(n, d * d)).reshape(k, d, d)
    z = (p[:, :, None] * xt[:, None, :]).reshape(n, k * d)
    h = -(z.T @ z)
    for j in range(k):
        h[j * d : (j + 1) * d, j * d : (j + 1) * d] += blocks[j]
    h /= n
    h[np.diag_indices_from(h)] += 2.0 * pen.ravel()
    return val, grad, h


def odir_loss(t, x, y, lam, mu):
    """(value, gradient) of the ODIR objective (:func:`_odir_parts`)."""
    return _odir_parts(t, x, y, lam, mu)


def odir_fit(x, y, lam, mu, t0=None):
    """ODIR parameters (W | b, row by row) on features x (n, K), labels y; from t0 (the identity).

    Newton with Armijo backtracking up to :data:`ODIR_NEWTON_MAX_CLASSES` classes (L-BFGS-B took
    thousands of iterations at the grid's weak penalties), L-BFGS-B above."""
    k = x.shape[1]
    t = np.hstack([np.eye(k), np.zeros((k, 1))]).ravel() if t0 is None else np.array(t0)
    if k > ODIR_NEWTON_MAX_CLASSES:
        return minimize(
            odir_loss, t, args=(x, y, lam, mu), jac=True, method="L-BFGS-B",
            options={"maxiter": 5000, "ftol": 1e-12, "gtol": 1e-8},
        ).x  # fmt: skip
    f, g, h = _odir_parts(t, x, y, lam, mu, hessian=True)
    for _ in range(200):
        h[np.diag_indices_from(h)] += 1e-10
        step = -np.linalg.solve(h, g)
        dec = -float(g @ step)
        if not dec > 0:
            step, dec = -g, float(g @ g)
        s = 1.0
        while s > 1e-10:
            fn = _odir_parts(t + s * step, x, y, lam, mu)[0]
            if fn <= f - 1e-4 * s * dec:
                break
            s *= 0.5
        else:
            break
        t = t + s * step
        f, g, h = _odir_parts(t, x, y, lam, mu, hessian=True)
        if dec / 2 <= 1e-10 * max(1.0, abs(f)):
            break
    return t


def odir_choose(x, y, folds=5, seed=0):
    """(lam, mu) minimising the mean held-out multinomial NLL over ODIR_GRID x ODIR_GRID (inner
    stratified ``folds``-fold CV; each fold's path warm-started from the stronger penalty)."""
    from sklearn.model_selection import StratifiedKFold

    k = x.shape[1]
    grid = [(lam, mu) for lam in ODIR_GRID[::-1] for mu in ODIR_GRID[::-1]]
    loss = np.zeros(len(grid))
    cv = StratifiedKFold(folds, shuffle=True, random_state=seed)
    for tr, te in cv.split(x, y):
        t = None
        for i, (lam, mu) in enumerate(grid):
            t = odir_fit(x[tr], y[tr], lam, mu, t)
            m = t.reshape(k, k + 1)
            lp = log_softmax(x[te] @ m[:, :k].T + m[:, k], axis=1)
            loss[i] -= lp[np.arange(te.size), y[te]].sum()
    return grid[int(np.argmin(loss))]


def _odir(train, test):
    from threadpoolctl import threadpool_limits

    # single-threaded BLAS: on the loaded 2-core machine OpenBLAS's threads made one fit 25 x slower
    with threadpool_limits(1, user_api="blas"):
        return _odir_single(train, test)


def _odir_single(train, test):
    x, y = _logp(train), np.asarray(train.labels)
    k = x.shape[1]
    lam, mu = odir_choose(x, y) if k <= ODIR_CV_MAX_CLASSES else ODIR_FIXED
    t = odir_fit(x, y, lam, mu)
    m = t.reshape(k, k + 1)
    u = _logp(test) @ m[:, :k].T + m[:, k]
    return softmax(u, axis=1)


def runs_on(name, data) -> bool:
    """Whether peer ``name`` runs on ``data`` (full vectors; matrix scaling up to 10 classes)."""
    return data.has_full and (name != "matrix-scaling" or data.n_classes <= MATRIX_MAX_CLASSES)


def vector_peer_predict(name, train, test, full: bool = False):
    """The peer's calibrated probability of ``test``'s original top labels (``full``: its whole
    calibrated vectors, (n, K))."""
    if name in _PM:
        p = _probmetrics(name, train, test)
    elif name in ("vector-scaling", "matrix-scaling"):
        p = _guo(train, test, matrix=name == "matrix-scaling")
    elif name == "dirichlet-odir":
        p = _odir(train, test)
    else:
        raise KeyError(name)
    return p if full else _top(p, test)
