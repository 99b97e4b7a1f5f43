"""The fit of ``hier-platt`` and ``hier-beta`` on their rows (:class:`~.hierarchical`'s
``Rows``): per-class penalised Newton, the approximate leave-one-out loss of a fit, the
search over the prior strength, the posterior covariance (the model in
:mod:`topcal.calibrators.pooled.hierarchical`'s docstring).

Every row-length intermediate goes into the rows' buffers (S, T, E scratch, M margins, Q the
two probability vectors, for memory), in the former allocating code's order of operations:
the same fits (bit for bit under the same numpy; tested to 1e-12 relative, since another
numpy release moves last bits: tests/unit/calibrators/pooled/test_platt_beta_memory.py
against that code's numbers, stored in a JSON fixture in tests/data).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from scipy.special import expit

from ..._numeric import PROB_CLIP, dot, inverse_sym_small, solve_sym_small

__all__ = [
    "LAMBDA_GRID",
    "NEWTON_STEPS",
    "TOL",
    "BINNED_TOL",
    "curvature",
    "Solve",
    "newton",
    "alo_loss",
    "fit_strength",
    "grid_search",
    "local_search",
    "binned_search",
    "posterior_cov",
]

#: Candidate prior strengths (pseudo-samples): 2^j, j = 0..24.
LAMBDA_GRID = 2.0 ** np.arange(25)
NEWTON_STEPS = 50
TOL = 1e-10
#: A strength whose binned loss, shifted by the binning's error at the binned scan's best
#: (where the search on the rows starts), is worse than the best loss on the rows by more
#: than this many times that error is not fitted on the rows (:func:`binned_search`): the
#: error of a difference of binned losses between neighbouring strengths was at most 0.043 x
#: the error (38 fits: the bench cells' simulated outputs at 5-100 classes, 3 seeds, and the
#: tests' simulations)
ESTIMATE_MARGIN = 0.3
#: Newton's stop on binned rows (:func:`binned_search`): their fits are starts, off the
#: rows' by ~1e-5 relative, and the step that meets it leaves ~tol^2 of the loss (quadratic
#: convergence)
BINNED_TOL = 1e-6


def curvature(rows, q):
    """w q (1 - q) per row, into S (T: scratch)."""
    np.multiply(rows.w, q, out=rows.S)
    return np.multiply(rows.S, np.subtract(1.0, q, out=rows.T), out=rows.S)


class Solve(NamedTuple):
    """What :func:`newton` returns: the fit, its rows' probabilities (one of the rows'
    buffers, valid until the next solve) and each class's penalised loss near the fit (at
    it, or at the last iterate where it was evaluated, or the ``scale`` given: within the
    step's tolerance or the binning's, ~1e-4 relative; what the next solve's stop is
    measured against)."""

    theta: np.ndarray
    q: np.ndarray
    scale: np.ndarray
    #: whether the rows' margin buffer M holds the fit's margins (valid until the next
    #: solve)
    margins: bool = False


def newton(rows, theta, center, prior, lam, tol=TOL, scale=None) -> Solve:
    """Per-class penalised Newton (vectorised over classes, step halving per class).

    theta, center: (K, p); prior: (p, p) (I_0); lam: float. It stops after a step that
    lowers every class's loss by at most ``tol`` relative: measured where the step was
    judged (a step halved or kept on its loss), else predicted before it is taken (half the
    Newton decrement g' H^-1 g, the decrease of the quadratic model, against ``tol`` x the
    class's loss: that last step is taken without evaluating the loss, one exp per row
    instead of an exp and a log1p; on the logistic loss the step's third-order term is at
    most max |margin change| / 3 of its decrease). ``scale`` (K,): the classes' losses near
    ``theta`` (another solve's :attr:`Solve.scale`), so a start within the tolerance costs
    no loss evaluation at all; None: evaluated at ``theta``.
    """
    theta = theta.copy()
    p = theta.shape[1]
    S, T = rows.S, rows.T
    q, qn = rows.Q

    def objective(th, out):
        """Per-class penalised loss at th; the rows' probabilities expit(margin) into
        ``out``."""
        d = th - center
        loss = rows.loss(rows.margin(th, rows.M), out)
        return loss + 0.5 * lam * np.einsum("ki,ij,kj->k", d, prior, d)

    if scale is None:
        f = scale = objective(theta, q)
    else:
        f = None  # evaluated only where a step is judged on it
        rows.probs(rows.margin(theta, rows.M), q)
    for _ in range(NEWTON_STEPS):
        # q: the probabilities at theta, kept from its objective (a row's margin is its
        # class's)
        np.multiply(rows.w, q, out=S)
        r = np.subtract(S, rows.tp, out=S)  # dNLL/dm
        grad = rows.gradient(r, T) + lam * (theta - center) @ prior
        H = rows.hessian(curvature(rows, q), T) + lam * prior + 1e-12 * np.eye(p)
        step = solve_sym_small(H, grad)
        if np.all(0.5 * np.einsum("kp,kp->k", step, grad) <= tol * (1.0 + np.abs(scale))):
            theta = theta - step  # the last step, predicted within the tolerance
            return Solve(theta, rows.probs(rows.margin(theta, rows.M), qn), scale, True)
        if f is None:
            f = objective(theta, q)  # (q: the same numbers again)
        t = np.ones(rows.k)
        new = theta - step
        fn = objective(new, qn)
        for _ in range(30):  # halve the step of the classes whose objective went up
            bad = ~(fn <= f + 1e-12 * np.abs(f))
            if not bad.any():
                break
            t[bad] *= 0.5
            new = theta - t[:, None] * step
            fn = objective(new, qn)
        bad = ~(fn <= f + 1e-12 * np.abs(f))
        new[bad], fn[bad] = theta[bad], f[bad]
        if bad.any():  # (M: the margins of their last trial step)
            np.copyto(qn, q, where=rows.per_row(bad))
        done = np.abs(f - fn) <= tol * (1.0 + np.abs(f))
        theta, f, q, qn = new, fn, qn, q
        scale = f
        if done.all():
            break
    return Solve(theta, q, scale, not bad.any())


def alo_loss(rows, theta, prior, lam, q, margins=False) -> float:
    """Approximate leave-one-out NLL (summed over units of weight) of the penalised
    per-class fit theta (q: its rows' probabilities, from :func:`newton`; ``margins``: its
    :attr:`Solve.margins`, whether the rows' M holds theta's margins)."""
    S, T, E = rows.S, rows.T, rows.E
    lev = rows.Q[1] if q is rows.Q[0] else rows.Q[0]  # the buffer q is not in
    m = rows.M if margins else rows.margin(theta, rows.M)
    w1 = np.multiply(q, np.subtract(1.0, q, out=S), out=S)
    p = theta.shape[1]
    Hinv = inverse_sym_small(
        rows.hessian(np.multiply(rows.w, w1, out=E), T) + lam * prior + 1e-12 * np.eye(p)
    )
    rows.leverage(Hinv, lev, T)  # x' H^-1 x
    a = np.multiply(w1, lev, out=T)
    np.subtract(1.0, a, out=a)
    np.maximum(a, 1e-6, out=a)
    np.divide(lev, a, out=a)  # lev / max(1 - w1 lev, 1e-6)
    # the left-out margin m + l' h / (1 - l'' h) of a unit of positive (l' = q - 1) and
    # negative (l' = q) weight
    x = np.multiply(np.subtract(q, 1.0, out=S), a, out=S)
    c = np.compress(rows.is_pos, np.add(m, x, out=x), out=E[: rows.tp_pos.size])
    np.clip(expit(c, out=c), PROB_CLIP, 1.0 - PROB_CLIP, out=c)
    out = -dot(rows.tp_pos, np.log(c, out=c))
    x = np.multiply(q, a, out=S)
    c = np.compress(rows.is_neg, np.add(m, x, out=x), out=E[: rows.fp_neg.size])
    np.clip(expit(c, out=c), PROB_CLIP, 1.0 - PROB_CLIP, out=c)
    np.subtract(1.0, c, out=c)  # 1 - c: exact for c >= 1/2, 1e-16 off log1p(-c) below
    return out - dot(rows.fp_neg, np.log(c, out=c))


def fit_strength(
    rows, center, prior, fits, losses, j, start, tol=TOL, scale=None, scales=None
):
    """Fit strength LAMBDA_GRID[j] from ``start``; its fit and approximate LOO loss into
    fits[j], losses[j] (``tol``, ``scale``: :func:`newton`'s), its :attr:`Solve.scale` into
    scales[j] where ``scales`` (a dict) is given."""
    solve = newton(rows, start, center, prior, float(LAMBDA_GRID[j]), tol, scale)
    fits[j] = solve.theta
    losses[j] = alo_loss(rows, fits[j], prior, float(LAMBDA_GRID[j]), solve.q, solve.margins)
    if scales is not None:
        scales[j] = solve.scale


def grid_search(rows, center, prior, warm_fits):
    """(fits, losses) of the strength scan: every other grid point from the pooled end (each
    fit starts at the last one), then the two neighbours of the best of those: 15 fits
    instead of 25, the same choice where the loss is unimodal in log strength. Unfitted
    strengths have loss inf."""
    losses = np.full(LAMBDA_GRID.size, np.inf)
    fits = {}
    theta = center.copy()
    for j in range(LAMBDA_GRID.size - 1, -1, -2):
        fit_strength(rows, center, prior, fits, losses, j, warm_fits.get(j, theta))
        theta = fits[j]
    b = int(np.argmin(losses))
    for j in (b - 1, b + 1):
        if 0 <= j < LAMBDA_GRID.size and j not in fits:
            fit_strength(rows, center, prior, fits, losses, j, warm_fits.get(j, fits[b]))
    return fits, losses


def local_search(rows, center, prior, warm_fits, j0, start=None, q_center=None, estimate=None):
    """(fits, losses, exact) of a descent on the grid from index j0 (a cross-validation
    fold: the all-data fit's choice): j0 and its neighbours; where the best of them is at
    their edge, steps of two grid points that way while the loss falls; then the two
    neighbours of the best. 3-5 fits where the fold's choice is the all-data one's; on a
    loss unimodal in log strength the same choice as :func:`grid_search` (tested:
    test_crossfit.py). Each fit starts at ``warm_fits[j]``, else at its neighbour's fit;
    ``start(j, near, fits)``, where given, chooses instead: (start, the classes' losses near
    it or None: :func:`newton`'s ``scale``). ``q_center`` (one class, its own pool: its
    penalised fit at every strength is the centre, the pooled fit, to ~1e-16 relative): the
    rows' probabilities at the centre; no Newton solve then, each strength's fit is the
    centre and its loss the approximate LOO loss there. ``estimate(j, near, fits, losses,
    exact)``, where given: a strength's (fit, loss) without a fit on the rows, or None (then
    fitted), for every strength but j0; ``exact``: (n_grid,) bool, the strengths fitted on
    the rows."""
    losses = np.full(LAMBDA_GRID.size, np.inf)
    exact = np.zeros(LAMBDA_GRID.size, dtype=bool)
    fits = {}
    last = LAMBDA_GRID.size - 1

    def fit(j, near):
        if 0 <= j <= last and j not in fits:
            guess = (
                None if estimate is None or near is None else estimate(j, near, fits, *found)
            )
            if guess is not None:
                fits[j], losses[j] = guess
                return
            exact[j] = True
            begin, scale = (
                (warm_fits.get(j, fits.get(near, center)), None)
                if start is None
                else start(j, near, fits)
            )
            if q_center is None:
                fit_strength(rows, center, prior, fits, losses, j, begin, scale=scale)
            else:
                fits[j] = center.copy()
                losses[j] = alo_loss(rows, fits[j], prior, float(LAMBDA_GRID[j]), q_center)

    found = (losses, exact)
    fit(j0, None)
    fit(j0 - 1, j0)
    fit(j0 + 1, j0)
    b = int(np.argmin(losses))  # the smallest strength on ties, as the grid search
    step = -2 if b == min(fits) else 2 if b == max(fits) else 0
    while step and 0 <= b + step <= last:
        fit(b + step, b)
        if not losses[b + step] < losses[b]:
            break
        b += step
    fit(b - 1, b)
    fit(b + 1, b)
    return fits, losses, exact


def binned_search(rows, brows, center, prior, warm_fits, q_center=None):
    """(fits, losses, exact, scales) of the strength scan on the binned rows ``brows``
    (:func:`._rows.binned_rows`), finished on the rows.

    On the binned rows, every other grid point from the pooled end (each fit starting at the
    last), then the best one's two neighbours; then :func:`local_search` on the rows from
    the best of those: the choice of :func:`grid_search` where the loss is unimodal in log
    strength and the binned scan's best is the rows' best or its neighbour (the binned loss
    is within ~1e-6 relative of the rows'), in 1-5 fits on the rows instead of 15 (1-3 where
    the binned best is the rows' best). A fit on the rows starts at ``warm_fits[j]`` or else
    at its strength's binned fit plus the difference between the fit on the rows and the
    binned one at the neighbour it is reached from (the binning's error in the fit changes
    little between neighbouring strengths: Newton's first step then ends within its
    tolerance), its stop measured against the binned fit's losses (``scales``, by strength:
    :func:`newton`'s ``scale``; within ~1e-4 relative of the rows', so a start within the
    tolerance costs one exp per row and no loss evaluation). A strength the search on the
    rows reaches is not fitted on them where its binned loss, shifted by the binning's error
    at the scan's best, is worse than the best loss on the rows by more than
    :data:`ESTIMATE_MARGIN` x that error (its fit: its start; on the bench cells one or both
    neighbours of the chosen strength; the same strength as the fit on the rows alone in 38
    of 38 seeded fits). ``losses``: the rows' where fitted on them (``exact``); at the other
    scanned strengths the binned ones shifted by the rows' loss less the binned one at the
    scan's best (the binned loss's error is mostly a level, the same at every strength); inf
    elsewhere. ``fits``: the rows' where fitted on them, elsewhere the binned ones shifted
    as the starts, from the nearest fit on the rows. ``q_center``: as
    :func:`local_search`'s.
    """
    bfits, scales = {}, {}
    blosses = np.full(LAMBDA_GRID.size, np.inf)
    theta = center.copy()
    for j in range(LAMBDA_GRID.size - 1, -1, -2):
        fit_strength(brows, center, prior, bfits, blosses, j, theta, BINNED_TOL, scales=scales)
        theta = bfits[j]

    def start(j, near, fits):
        if j in warm_fits:
            return warm_fits[j], None
        if j not in bfits:  # an odd strength: its binned fit, from the neighbour's
            lam = float(LAMBDA_GRID[j])
            bfits[j], _, scales[j], _ = newton(
                brows, bfits[near], center, prior, lam, BINNED_TOL
            )
        shift = 0.0 if near is None else fits[near] - bfits[near]
        return bfits[j] + shift, scales[j]

    b = int(np.argmin(blosses))
    # the best's binned neighbours: the search on the rows starts at the
    for j in (b - 1, b + 1):
        # best of the three (3 fits on the rows where it is theirs)
        if 0 <= j < LAMBDA_GRID.size:
            fit_strength(
                brows, center, prior, bfits, blosses, j, bfits[b], BINNED_TOL, scales=scales
            )
    b = int(np.argmin(blosses))

    def estimate(j, near, fits, losses, exact):
        """j's binned loss shifted by the binning's error at b, where that is clearly worse
        than the best loss on the rows (by ESTIMATE_MARGIN x the error); its fit: its start."""
        if not np.isfinite(blosses[j]):
            return None
        # the binned loss's error at b (b: fitted on the rows first)
        level = losses[b] - blosses[b]
        loss = blosses[j] + level
        best = losses[exact].min()
        if not loss - best > ESTIMATE_MARGIN * max(abs(level), 1e-9 * abs(best)):
            return None
        return start(j, near, fits)[0], loss

    fits, rows_losses, exact = local_search(
        rows, center, prior, warm_fits, b, start, q_center, estimate
    )
    done = np.flatnonzero(exact)
    for j in set(bfits) - set(fits):
        c = int(done[np.argmin(np.abs(done - j))])
        fits[j] = bfits[j] + (fits[c] - bfits[c])
    losses = np.where(exact, rows_losses, blosses + (rows_losses[b] - blosses[b]))
    return fits, losses, exact, scales


def posterior_cov(rows, theta, prior, lam, q=None) -> np.ndarray:
    """(K, p, p) approximate posterior covariance of each class's parameters (module
    docstring); ``q``: the rows' probabilities at theta where known (its solve's)."""
    p = theta.shape[1]
    if q is None:
        q = expit(rows.margin(theta, rows.M), out=rows.Q[0])
    D = rows.hessian(curvature(rows, q), rows.T)
    P = lam * prior
    eye = np.eye(p)
    Hinv = inverse_sym_small(D + P + 1e-12 * eye)
    # the centre's posterior precision: sum_j (P^-1 + D_j^-1)^-1 = sum_j D_j (I + P^-1
    # D_j)^-1 (a class without rows adds nothing)
    Pinv = np.linalg.inv(P)
    M = np.linalg.solve(np.transpose(eye + Pinv @ D, (0, 2, 1)), np.transpose(D, (0, 2, 1)))
    M = np.transpose(M, (0, 2, 1)).sum(axis=0)
    M = 0.5 * (M + M.T)
    vals, vecs = np.linalg.eigh(M)
    V0 = (vecs / np.maximum(vals, 1e-12 * max(vals.max(), 1e-300))) @ vecs.T
    G = Hinv @ P
    C = Hinv + G @ V0 @ np.transpose(G, (0, 2, 1))
    return 0.5 * (C + np.transpose(C, (0, 2, 1)))
