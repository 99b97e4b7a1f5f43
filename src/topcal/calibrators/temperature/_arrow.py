"""Newton steps and covariances for arrowhead Hessians (private module of
:mod:`topcal.calibrators.temperature`).

tswa's parameters are one log-temperature and K award offsets b_g; a sample's log-odds
depend on log T and on its own class's offset only, so the (K + 1) x (K + 1) Hessian is an
*arrowhead*:

    H = [[a, u^T],
         [u, diag(dvec)]]

(the first row and column full, the rest diagonal). :func:`bounded_newton` takes the step
-|H|^{-1} g, with |H| the matrix of the |eigenvalues| floored at 1e-12 of the largest; done
by a dense ``eigh`` that costs O(K^3) a step (at K = 1,000 it took a third of a fit). Here
the same step costs O(K):

* H - t I is positive definite exactly when every d_i > t and its Schur complement f(t) = a
  - t - sum_i u_i^2 / (d_i - t) is positive (f is the *secular function* of the arrowhead,
  decreasing below min(dvec); O'Leary and Stewart 1990); with every d_i > t, Cauchy
  interlacing with the trailing block diag(dvec) puts all eigenvalues but the smallest above
  t, and Haynsworth's inertia additivity makes the smallest one negative (below -t) exactly
  when f(-t) < 0;
* every |eigenvalue| is at most the matrix's infinity norm (the largest absolute row sum),
  so no eigenvalue is floored when all of them exceed t = 1e-12 of that norm: then |H| = H
  and the step is -H^{-1} g by the Schur complement s = a - u^T D^{-1} u (block
  elimination);
* if instead f(-t) < 0 (exactly one eigenvalue l0 < -t, the others above t), |H| = H - 2 l0
  v v^T with v the unit eigenvector of l0, v ~ (1, u_i / (l0 - d_i)), and |H|^{-1} g =
  H^{-1} g - 2 v (v . g) / l0 (l0 by bisection on the secular function);
* otherwise (a d_i <= t: a Brier fit's flat class, or an eigenvalue within t of 0) the
  caller uses the dense decomposition as before.

Each case is the dense step to rounding: the tests compare them on random arrowheads.
"""

from __future__ import annotations

import numpy as np

__all__ = ["arrow_parts", "arrowhead_step", "arrowhead_inverse"]

#: The |eigenvalue| floor of :func:`._solver.bounded_newton`, relative to the largest.
_FLOOR = 1e-12


def arrow_parts(h: np.ndarray):
    """(a, u, dvec) of a symmetric matrix of size >= 2 that is an arrowhead with finite
    entries, else None (O(K^2) check)."""
    if h.ndim != 2 or h.shape[0] < 2:
        return None
    tail = h[1:, 1:]
    dvec = np.diagonal(tail).copy()
    # off-diagonal entries of the trailing block: all zero for an arrowhead
    if np.count_nonzero(tail) != np.count_nonzero(dvec):
        return None
    a, u = float(h[0, 0]), h[1:, 0].copy()
    if not (np.isfinite(a) and np.all(np.isfinite(u)) and np.all(np.isfinite(dvec))):
        return None
    return a, u, dvec


def _secular(a, u2, dvec, lam):
    return a - lam - float(np.sum(u2 / (dvec - lam)))


def _solve(a, u, dvec, g):
    """H^{-1} g for a nonsingular arrowhead with dvec != 0 (block elimination on the Schur
    complement)."""
    dinv_u = u / dvec
    dinv_g = g[1:] / dvec
    s = a - float(u @ dinv_u)
    x0 = (g[0] - float(u @ dinv_g)) / s
    return np.concatenate(([x0], dinv_g - dinv_u * x0))


def arrowhead_step(g: np.ndarray, h: np.ndarray):
    """-|H|^{-1} g as :func:`._solver.bounded_newton` defines it (|eigenvalues|, floored),
    in O(K), for an arrowhead ``h`` of size >= 2 where no eigenvalue is floored and at most
    one is negative; None otherwise (the caller then decomposes ``h``)."""
    parts = arrow_parts(h)
    if parts is None:
        return None
    a, u, dvec = parts
    norm = max(abs(a) + float(np.sum(np.abs(u))), float(np.max(np.abs(dvec) + np.abs(u))))
    t = _FLOOR * norm
    if norm == 0.0 or float(np.min(dvec)) <= t:
        return None
    u2 = u * u
    if _secular(a, u2, dvec, t) > 0.0:  # positive definite, every eigenvalue above the floor
        return -_solve(a, u, dvec, g)
    if _secular(a, u2, dvec, -t) >= 0.0:  # an eigenvalue in [-t, t]: floored
        return None
    # one eigenvalue l0 < -t, in [-norm, -t]: bisection on the decreasing secular function
    lo, hi = -norm, -t
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if mid in (lo, hi):
            break
        if _secular(a, u2, dvec, mid) > 0.0:
            lo = mid
        else:
            hi = mid
    l0 = 0.5 * (lo + hi)
    v = np.concatenate(([1.0], u / (l0 - dvec)))
    v /= np.sqrt(float(v @ v))
    return -(_solve(a, u, dvec, g) - (2.0 * float(v @ g) / l0) * v)


def arrowhead_inverse(h: np.ndarray):
    """(H^{-1}[0, 0], H^{-1}[0, 1:], diag(H^{-1})[1:]) of a positive definite arrowhead, in
    O(K); None where ``h`` is no arrowhead or not positive definite (every d_i > 0 and the
    Schur complement s = a - u^T D^{-1} u > 0: the conditions of a Cholesky factorisation)."""
    parts = arrow_parts(h)
    if parts is None:
        return None
    a, u, dvec = parts
    if np.any(dvec <= 0.0):
        return None
    dinv_u = u / dvec
    s = a - float(u @ dinv_u)
    if not s > 0.0:
        return None
    return 1.0 / s, -dinv_u / s, 1.0 / dvec + dinv_u * dinv_u / s
