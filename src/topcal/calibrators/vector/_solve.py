"""The solver of ``vs`` and ``sms`` (private module of :mod:`topcal.calibrators.vector`;
split from ``_core.py``): Newton with a subsampled Hessian, kept while it converges fast, or
L-BFGS-B where the parameters are many; the first stage on a subsample of the rows at large
n; warm starts from a nearby optimum and its Hessian, and a cross-validation fold's stop
(docs/vector.md).

It needs of its objective only ``value_grad``, ``hessian``, ``rows``, ``x``, ``layout`` and
``last_hessian`` (:class:`._core.VectorObjective`).
"""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # annotations only
    from ._core import Layout, VectorObjective

__all__ = [
    "solve",
    "NEWTON_MAX_PARAMS",
    "NEWTON_MAX_CLASSES_VS",
    "HESSIAN_ROWS",
    "HESSIAN_WORK",
    "SUBSAMPLE_ROWS",
    "WARM_TOL",
    "FOLD_TOL",
]

#: Newton (exact gradient, Hessian on at most HESSIAN_ROWS evenly spaced rows) up to this
#: many parameters (vs up to K = 127, sms up to K = 15); L-BFGS-B above it (a Hessian would
#: cost n K^2).
NEWTON_MAX_PARAMS = 256
#: ``vs`` (no off-diagonal part: 2K + 1 parameters, a Hessian of O(rows K^2) on at most
#: :data:`HESSIAN_ROWS` rows) is fitted by Newton up to this many classes: at 8 x 10^4 x
#: 1,000 a cold Newton solve took 6 passes and 11.7 s against L-BFGS-B's 13 passes and 21.4
#: s, to the same optimum, and its Hessian lets the cross-validation folds and auto's final
#: fit start warm (2-5 passes instead of 12-13; docs/vector.md).
NEWTON_MAX_CLASSES_VS = 2048
#: Rows the Newton solver's Hessian is computed on (every ceil(n / HESSIAN_ROWS)-th row):
#: the step is a subsampled Newton step (the gradient and the line search use every row),
#: which keeps a Newton iteration at a few passes over the data.
HESSIAN_ROWS = 10_000
#: ... but at most this many row x class^2 multiply-adds a Hessian (and at least 2,000 rows):
#: from K = 548 classes up the Hessian is computed on fewer rows (at K = 1,000: 3,000 rows,
#: 1.2 s instead of 4 s; the steps from it needed the same passes to the same optimum).
HESSIAN_WORK = 3 * 10**9
#: The fewest rows of a Hessian capped by :data:`HESSIAN_WORK`.
_HESSIAN_MIN_ROWS = 2_000
#: From 4 x this many rows up (at 10^5 rows it saved nothing), :func:`solve` first fits the
#: same penalised problem on this many evenly spaced rows (the penalty as for all rows),
#: then finishes with Newton (or L-BFGS) on all rows from there: the full problem is convex
#: with the same optimum, and from the subsample's optimum a few full passes reach it (at
#: 10^6 x 10, sms: 5 gradient passes over all rows instead of 12).
SUBSAMPLE_ROWS = 50_000
#: A warm-started :func:`solve` stops at this fraction of the cold solve's tolerance.
WARM_TOL = 1e-2
#: A cross-validation fold's :func:`solve` (``fold``: from the all-data optimum, with its
#: Hessian) stops at the first point whose Newton decrement is at most 2 x this x the loss,
#: without taking that last step (approximate cross-validation; docs/vector.md#fold-fits).
FOLD_TOL = 1e-10


def solve(
    obj: VectorObjective,
    x0,
    max_iter: int,
    tol: float = 1e-10,
    hessian=None,
    fold: bool = False,
):
    """Minimise ``obj`` from ``x0`` (see :func:`_solve`); from 4 x :data:`SUBSAMPLE_ROWS`
    rows up, first on :data:`SUBSAMPLE_ROWS` evenly spaced rows, then on all rows from that
    optimum (the Newton steps there with a Hessian on :data:`SUBSAMPLE_ROWS` rows). Returns
    (theta, value, n_iter, converged); n_iter counts both stages' iterations.

    A warm start (``x0`` a nearby problem's optimum, ``hessian`` that problem's Hessian of
    this objective, e.g. :meth:`VectorObjective.hessian` there, its penalty made this one's)
    takes that Hessian for its first steps (and the subsample's last one for the finish on
    all rows): from there a few passes reach the optimum, and a Hessian is computed afresh
    only where the kept one stops converging fast (:func:`_solve`). It stops at
    :data:`WARM_TOL` x ``tol``: with a kept Hessian the last steps converge linearly, so a
    stop at ``tol`` leaves the parameters further from the optimum than a cold solve's
    quadratic last step does; one more pass closes that. It stops at the first point already
    within that tolerance, without the step from it (a pass that moved the loss by less than
    1e-12 of itself: at 10^5 x 1,000 1.3-1.5 s of auto's all-data fit).

    ``fold`` (a cross-validation fold's fit from the all-data optimum and its Hessian): the
    solve runs on all rows and stops at the first point whose Newton decrement is within
    :data:`FOLD_TOL` of the loss (``tol`` is not used), without the step from it."""
    n = obj.x.shape[0]
    if fold and hessian is not None:
        return _solve(obj, x0, max_iter, FOLD_TOL, hessian=hessian, settle=True)
    warm = hessian is not None
    last = tol * WARM_TOL if warm else tol
    if n < 4 * SUBSAMPLE_ROWS:
        return _solve(obj, x0, max_iter, last, hessian=hessian, settle=warm)
    stride = n // SUBSAMPLE_ROWS
    sub = obj.rows(stride)
    if not sub.n > 0:
        return _solve(obj, x0, max_iter, last, hessian=hessian, settle=warm)
    x1, _, it1, _ = _solve(sub, x0, max_iter, tol, hessian=hessian)
    h1 = None if hessian is None else sub.last_hessian
    theta, f, it2, ok = _solve(
        obj, x1, max_iter, last, hessian_rows=SUBSAMPLE_ROWS, hessian=h1, settle=warm
    )
    return theta, f, it1 + it2, ok


def _newton(layout: Layout) -> bool:
    """Whether :func:`_solve` uses Newton for ``layout`` (else L-BFGS-B)."""
    if not layout.off:
        return layout.k <= NEWTON_MAX_CLASSES_VS or layout.size <= NEWTON_MAX_PARAMS
    return layout.size <= NEWTON_MAX_PARAMS


def _solve(
    obj: VectorObjective,
    x0,
    max_iter: int,
    tol: float = 1e-10,
    hessian_rows=None,
    hessian=None,
    settle: bool = False,
):
    """Minimise ``obj`` from ``x0``: Newton with a subsampled Hessian and Armijo
    backtracking where the parameters are few (:data:`NEWTON_MAX_PARAMS`; ``vs`` up to
    :data:`NEWTON_MAX_CLASSES_VS` classes), else L-BFGS-B. Returns (theta, value, n_iter,
    converged); ``obj.last_hessian`` is then the last Hessian the steps used (None for
    L-BFGS-B).

    The Hessian is kept from one iteration to the next while full steps are accepted and
    each shrinks the Newton decrement at least a hundredfold (near the optimum it barely
    changes; a fresh one costs about a gradient's pass for ``sms``); otherwise it is
    computed again. The first steps use ``hessian`` where given (a warm start's), under the
    same test. ``settle``: stop at a point whose Newton decrement is already within ``tol``
    (its step is not taken)."""
    x = np.array(x0, dtype=np.float64)
    obj.last_hessian = None
    if not _newton(obj.layout):
        from scipy.optimize import minimize  # here: import topcal stays without scipy.optimize

        r = minimize(
            obj.value_grad,
            x,
            jac=True,
            method="L-BFGS-B",
            options={"maxiter": int(max_iter), "ftol": 1e-13, "gtol": 1e-9, "maxcor": 20},
        )
        return r.x, float(r.fun), int(r.nit), bool(r.success)
    k2 = obj.layout.k**2
    rows = min(hessian_rows or HESSIAN_ROWS, max(_HESSIAN_MIN_ROWS, HESSIAN_WORK // max(k2, 1)))
    stride = max(1, -(-obj.x.shape[0] // rows))
    f, g = obj.value_grad(x)
    stalls = 0
    h, last = (None if hessian is None else np.array(hessian, dtype=np.float64)), None
    # h's LU factors, made once per Hessian: a kept Hessian's later steps cost O(size^2)
    lu = None if h is None else _factor(h)
    for it in range(1, int(max_iter) + 1):
        if h is None:
            h = obj.hessian(x, stride)
            h[np.diag_indices_from(h)] += 1e-12 * max(1.0, float(np.abs(np.diag(h)).max()))
            lu = _factor(h)
        obj.last_hessian = h
        step = -g if lu is None else -_lu_solve(lu, g)
        dec = -float(g @ step)
        if settle and lu is not None and 0 <= dec / 2 <= tol * max(1.0, abs(f)):
            return x, f, it - 1, True
        # (a kept Hessian's step that already meets the tolerance is taken: a fresh Hessian
        # for the last step cost 3 s at 10^5 x 1,000 and changed nothing)
        if last is not None and not dec <= 0.01 * last and not dec / 2 <= tol * max(1.0, abs(f)):
            h = None  # a kept Hessian that no longer converges fast: a fresh one
            last = None
            continue
        if not dec > 0:
            step, dec = -g, float(g @ g)
        t = 1.0
        while True:
            fn, gn = obj.value_grad(x + t * step)
            if np.isfinite(fn) and fn <= f - 1e-4 * t * dec:
                break
            t *= 0.5
            if t < 1e-10:
                return x, f, it, dec / 2 <= 1e3 * tol * max(1.0, abs(f))
        gain = f - fn
        x, f, g = x + t * step, fn, gn
        last = dec if t == 1.0 else None
        if t < 1.0:
            h = None
        if dec / 2 <= tol * max(1.0, abs(f)):
            return x, f, it, True
        stalls = stalls + 1 if gain <= 1e-14 * max(1.0, abs(f)) else 0
        if stalls >= 5:
            return x, f, it, True
    return x, f, int(max_iter), False


def _factor(h: np.ndarray):
    """LU factors of ``h`` (:func:`scipy.linalg.lu_factor`, what ``np.linalg.solve``
    computes and drops), or None where ``h`` is singular (the step is then the negative
    gradient)."""
    from scipy.linalg import lu_factor  # here: a Newton fit's import, not topcal's

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # LinAlgWarning on an ill-conditioned h: checked below
        try:
            lu = lu_factor(h, check_finite=False)
        except (np.linalg.LinAlgError, ValueError):
            return None
    return lu if np.all(np.isfinite(lu[0])) and np.all(np.diag(lu[0]) != 0) else None


def _lu_solve(lu, g: np.ndarray) -> np.ndarray:
    from scipy.linalg import lu_solve

    return lu_solve(lu, g, check_finite=False)
