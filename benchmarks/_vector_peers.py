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

Dirichlet calibration with ODIR (``dirichletcal``) is not here: its sdist does not build with
today's setuptools (invalid ``install_requires``), and probmetrics' Dirichlet wraps that package.
"""

from __future__ import annotations

import numpy as np
from scipy.optimize import minimize
from scipy.special import log_softmax, softmax

VECTOR_PEERS = ["pm-ts", "pm-svs", "pm-sms", "vector-scaling", "matrix-scaling"]
_PM = {"pm-ts": "temp-scaling", "pm-svs": "svs", "pm-sms": "sms"}
_FLOOR = float(np.finfo(np.float32).tiny)
MATRIX_MAX_CLASSES = 10


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
    return _top(np.asarray(p, dtype=np.float64), test)


def _guo(train, test, matrix: bool):
    x = np.maximum(train.log_probs(), np.log(_FLOOR))
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
    xt = np.maximum(test.log_probs(), np.log(_FLOOR))
    return _top(softmax(scores(xt, t), axis=1), test)


def runs_on(name, data) -> bool:
    """Whether peer ``name`` runs on ``data`` (full vectors; matrix scaling up to 10 classes)."""
    return data.has_full and (name != "matrix-scaling" or data.n_classes <= MATRIX_MAX_CLASSES)


def vector_peer_predict(name, train, test):
    if name in _PM:
        return _probmetrics(name, train, test)
    if name in ("vector-scaling", "matrix-scaling"):
        return _guo(train, test, matrix=name == "matrix-scaling")
    raise KeyError(name)
