"""The bounded Newton solver of the temperature family (private module of
:mod:`topcal.calibrators.temperature`; see ``_core.py`` for the objectives it minimises)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...errors import ConvergenceError
from ._arrow import arrowhead_step

#: Newton stops when half the Newton decrement (the model's predicted loss reduction) falls
#: below this fraction of the loss, after taking that last step when it does not raise the
#: loss: parameters are then correct to about 1e-10 relative (quadratic convergence squares
#: the ~1e-5 error before it). A looser test would stop early; a tighter one is below the
#: rounding of a loss summed over 1e6 samples, and where the parameters are not identified
#: (a ridge, e.g. every top score clipped to the same value) the decrement shrinks only
#: linearly and would take hundreds of steps to get there.
RTOL = 1e-10
#: Stall test: stop when _STALL successive Newton steps lowered the loss by less than
#: _STALL_RTOL of it in total (see :func:`bounded_newton`).
_STALL = 10
_STALL_RTOL = 1e-9
#: :func:`lockstep_newton` keeps a problem's result only where one more Newton step would
#: move no parameter by more than this (relative): the optimum is then determined far beyond
#: the rounding in which the lockstep and the per-problem sums differ. Elsewhere (a ridge
#: along which Newton crawls until a stopping test fires, at a point that depends on that
#: rounding) the caller solves it alone.
_SETTLED = 1e-7
#: Armijo sufficient-decrease constant (Nocedal and Wright, Numerical Optimization, 2nd ed.,
#: section 3.1 recommend c1 = 1e-4).
ARMIJO = 1e-4


@dataclass(frozen=True)
class NewtonResult:
    """Outcome of :func:`bounded_newton`."""

    x: np.ndarray
    fun: float
    n_iter: int


def bounded_newton(
    obj, x0, lo, hi, *, fixed=None, max_iter: int = 100, what: str = "fit"
) -> NewtonResult:
    """Minimise ``obj`` over the box [lo, hi] by projected Newton with backtracking.

    Coordinates at a bound whose gradient points outwards are held there (active set); the
    Newton system on the free ones uses |eigenvalues| of the Hessian (floored), so a
    non-convex region still gives a descent direction. The step is projected onto the box
    and halved until the Armijo condition holds.

    Parameters
    ----------
    obj : object with ``value(x)`` and ``grad_hess(x)``
    x0, lo, hi : array-like (dim,)
    fixed : bool array (dim,), optional
        Coordinates never moved (held at their clipped x0).
    max_iter : int
    what : str
        Names the fit in a :class:`~topcal.errors.ConvergenceError`.

    Raises
    ------
    ConvergenceError
        If the loss or its derivatives become non-finite, the line search cannot decrease
        the loss away from a stationary point, or ``max_iter`` Newton steps do not converge.
    """
    lo = np.asarray(lo, dtype=np.float64)
    hi = np.asarray(hi, dtype=np.float64)
    x = np.clip(np.asarray(x0, dtype=np.float64), lo, hi)
    fixed = np.zeros(x.shape, bool) if fixed is None else np.asarray(fixed, bool)
    f = obj.value(x)
    dec = np.inf
    history = [f]
    for it in range(max_iter + 1):
        g, h = obj.grad_hess(x)
        _check_finite(f, g, h, x, what)
        active = fixed | ((x <= lo) & (g > 0)) | ((x >= hi) & (g < 0))
        free = np.flatnonzero(~active)
        if free.size == 0 or f <= 0.0:
            # all losses here are >= 0: a loss of 0 (every term below the smallest float,
            # perfectly separated data) is the global minimum
            return NewtonResult(x, f, it)
        gf = g[free]
        step = newton_step(gf, h[np.ix_(free, free)])
        dec = float(-gf @ step)
        dx = np.zeros_like(x)
        dx[free] = step
        if dec <= 2.0 * RTOL * (abs(f) + 1.0):
            xn = np.clip(x + dx, lo, hi)
            fn = obj.value(xn)
            # the step is tiny: accept it unless the loss rises beyond its rounding
            if np.isfinite(fn) and fn <= f + 1e-13 * (abs(f) + 1.0):
                return NewtonResult(xn, fn, it + 1)
            obj.value(x)
            return NewtonResult(x, f, it)
        if it == max_iter:
            break
        xn, fn = _line_search(obj, x, f, g, dx, lo, hi, dec, what)
        if xn is None:
            return NewtonResult(x, f, it)
        moved = float(np.max(np.abs(xn - x)))
        x, f = xn, fn
        history.append(f)
        if moved <= 1e-14 * (1.0 + float(np.max(np.abs(x)))):
            return NewtonResult(x, f, it + 1)
        if len(history) > _STALL and history[-1 - _STALL] - f <= _STALL_RTOL * (abs(f) + 1.0):
            # The loss is flat to 1e-9 over the last steps although the quadratic model
            # still predicts a decrease: the parameters are (nearly) not identified, a ridge
            # along which any point is as good.
            return NewtonResult(x, f, it + 1)
    raise ConvergenceError(
        f"{what}: Newton did not converge in max_iter={max_iter} iterations (loss {f:.10g}, "
        f"predicted decrease {dec:.3g}); raise max_iter"
    )


def _check_finite(f, g, h, x, what):
    if not (np.isfinite(f) and np.all(np.isfinite(g)) and np.all(np.isfinite(h))):
        raise ConvergenceError(
            f"{what}: the loss became non-finite at log T = {x[0]:.6g}; check the scores for "
            "extreme values (|logit| > 1e6) or refit with max_iter larger"
        )


def _line_search(obj, x, f, g, dx, lo, hi, dec, what):
    """Halve the projected step ``dx`` until the Armijo condition holds: ``(xn, obj(xn))``,
    or ``(None, None)`` where x is stationary to float precision (``obj`` evaluated at x
    again)."""
    t = 1.0
    while True:
        xn = np.clip(x + t * dx, lo, hi)
        fn = obj.value(xn)
        if np.isfinite(fn) and fn <= f + ARMIJO * float(g @ (xn - x)):
            return xn, fn
        t *= 0.5
        if t < 1e-12:
            # No decrease is representable: x is stationary to float precision when the
            # predicted decrease is below the rounding of f.
            obj.value(x)
            if dec <= 1e-9 * (abs(f) + 1.0):
                return None, None
            raise ConvergenceError(
                f"{what}: the line search failed at log T = {x[0]:.6g} (loss {f:.10g}, "
                f"predicted decrease {dec:.3g}); the loss surface is flat or noisy there: "
                "try loss='nll'"
            )


def newton_step(g, h):
    """-|h|^{-1} g with |h| the |eigenvalues| of ``h``, floored at 1e-12 of the largest: in
    O(K) for arrowhead Hessians where that applies (:func:`._arrow.arrowhead_step`), else by
    ``eigh``."""
    if g.size == 1:  # what eigh gives for 1 x 1, bit for bit, without its call
        return -(
            g
            / max(abs(float(h[0, 0])), 1e-12 * max(abs(float(h[0, 0])), np.finfo(float).tiny))
        )
    step = arrowhead_step(g, h) if g.size > 2 else None
    if step is not None:
        return step
    ev, vec = np.linalg.eigh(h)
    scale = max(float(np.max(np.abs(ev))), np.finfo(float).tiny)
    ev = np.maximum(np.abs(ev), 1e-12 * scale)
    return -(vec @ ((vec.T @ g) / ev))


def degenerate_corner(obj, tp_only: bool, lo, hi):
    """The bound a one-sided class runs to, if the loss is minimal there (KKT), else None.

    Only TP: T -> T_MIN (and A / T -> +OFFSET_MAX, i.e. A = +1e3): yhat_k -> 1 for a strict
    top. Only FP: with an award, A / T -> -OFFSET_MAX and T -> T_MIN (A = -1e3, yhat_k ->
    0); without one, T -> T_MAX (yhat_k -> about 1/K, the lowest reachable). For the
    full-vector methods the loss is monotone towards that corner (dm/dbeta = d - E[O] >= 0
    and dm/db = 1; at the FP corner with an award, m ~ -1e6 and the loss is flat to float
    precision), so the check passes; for the binary variant a class with scores on both
    sides of s = 1/2 may have an interior optimum, which Newton then finds.
    """
    if len(lo) == 1:
        x = lo.copy() if tp_only else hi.copy()
    else:
        x = np.array([lo[0], hi[1] if tp_only else lo[1]])
    f = obj.value(x)
    g, _ = obj.grad_hess(x)
    kkt = ((x <= lo) & (g >= 0)) | ((x >= hi) & (g <= 0))
    if np.all(kkt) and np.isfinite(f):
        return NewtonResult(x, f, 0)
    return None


@dataclass(frozen=True)
class LockstepResult:
    """Outcome of :func:`lockstep_newton`, one row per problem; ``ok`` False where
    :func:`bounded_newton` would have raised (that problem's ``x``, ``fun`` and ``n_iter``
    are then unset)."""

    x: np.ndarray
    fun: np.ndarray
    n_iter: np.ndarray
    ok: np.ndarray


def _newton_steps(g, h, free):
    """The steps and Newton decrements of :func:`bounded_newton` for many problems of
    dimension 1 or 2.

    ``g`` (n, dim), ``h`` (n, dim, dim), ``free`` (n, dim). The |eigenvalues| of the free
    block, floored at 1e-12 of the largest, as there; the 2 x 2 eigen-decomposition in
    closed form by one Jacobi rotation (Golub and Van Loan, Matrix Computations, 4th ed.,
    algorithm 8.5.1), whose eigenvalues a - t b and c + t b keep the small one's relative
    accuracy.
    """
    n, dim = g.shape
    tiny = np.finfo(float).tiny

    def floored(ev, scale):
        return np.maximum(np.abs(ev), 1e-12 * np.maximum(scale, tiny))

    step = np.zeros_like(g)
    for i in range(dim):  # a single free coordinate: 1 x 1
        one = free[:, i] & (free.sum(axis=1) == 1)
        e = h[one, i, i]
        step[one, i] = -(g[one, i] / floored(e, np.abs(e)))
    if dim == 2:
        two = free.all(axis=1)
        a, b, c = h[two, 0, 0], h[two, 0, 1], h[two, 1, 1]
        g0, g1 = g[two, 0], g[two, 1]
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            tau = (c - a) / (2.0 * b)
            t = np.where(tau >= 0, 1.0, -1.0) / (np.abs(tau) + np.hypot(1.0, tau))
        t = np.where(b == 0.0, 0.0, t)
        cs = 1.0 / np.sqrt(1.0 + t * t)
        sn = t * cs
        e1, e2 = a - t * b, c + t * b  # eigenvectors (cs, -sn) and (sn, cs)
        scale = np.maximum(np.abs(e1), np.abs(e2))
        y1 = (cs * g0 - sn * g1) / floored(e1, scale)
        y2 = (sn * g0 + cs * g1) / floored(e2, scale)
        step[two, 0] = -(cs * y1 + sn * y2)
        step[two, 1] = -(cs * y2 - sn * y1)
    return step, -np.einsum("ij,ij->i", g, step)


def _settled(x, g, h, lo, hi):
    """Where one more Newton step from x would move no parameter by more than _SETTLED
    (relative)."""
    with np.errstate(invalid="ignore", over="ignore"):
        ok = np.isfinite(g).all(axis=1) & np.isfinite(h).all(axis=(1, 2))
        g, h = np.where(ok[:, None], g, 0.0), np.where(ok[:, None, None], h, 1.0)
        active = ((x <= lo) & (g > 0)) | ((x >= hi) & (g < 0))
        step, _ = _newton_steps(g, h, ~active)
        step = np.clip(x + step, lo, hi) - x
        return ok & np.all(np.abs(step) <= _SETTLED * (1.0 + np.abs(x)), axis=1)


def lockstep_newton(obj, x0, lo, hi, *, max_iter: int = 100) -> LockstepResult:
    """:func:`bounded_newton` on many independent problems at once, each by its own rules.

    Every problem takes the same steps as :func:`bounded_newton` would alone (the same
    active set,
    |eigenvalue| floor, Armijo backtracking, and stopping tests), but the problems still running are
    evaluated together, so that many small problems cost a few vectorised passes instead of
    a Python loop each. Results match :func:`bounded_newton` up to the rounding of the sums
    (the two add the rows in different orders), so only the problems that stop on a
    well-defined test are solved here: those whose Newton decrement fell below ``RTOL`` of
    the loss (parameters then correct to about 1e-10), or with no free coordinate or a zero
    loss. A problem on which :func:`bounded_newton` would raise :class:`ConvergenceError`,
    or stop on one of its flat-loss tests (a failed line search at a stationary point, a
    move below 1e-14, the stall test: where the loss is flat to rounding, where it stops
    depends on that rounding), comes back with ``ok`` False, for the caller to solve alone.

    Parameters
    ----------
    obj : object with ``evaluate(x, sel)``
        Returns the losses (len(sel),), gradients (len(sel), dim) and Hessians (len(sel),
        dim, dim) of problems ``sel`` (ascending indices) at their parameters ``x``
        (len(sel), dim).
    x0 : array (n, dim)
    lo, hi : array (dim,)
    max_iter : int
    """
    lo = np.asarray(lo, dtype=np.float64)
    hi = np.asarray(hi, dtype=np.float64)
    x = np.clip(np.asarray(x0, dtype=np.float64), lo, hi)
    n = x.shape[0]
    f, g, h = obj.evaluate(x, np.arange(n))
    n_iter = np.zeros(n, dtype=np.int64)
    ok = np.zeros(n, dtype=bool)
    history = np.empty((n, max_iter + 2))
    history[:, 0] = f
    run = np.arange(n)  # problems still iterating

    def finish(sel, it):
        ok[sel] = True
        n_iter[sel] = it

    for it in range(max_iter + 1):
        if run.size == 0:
            break
        fr, gr, hr, xr = f[run], g[run], h[run], x[run]
        finite = (
            np.isfinite(fr) & np.isfinite(gr).all(axis=1) & np.isfinite(hr).all(axis=(1, 2))
        )
        run, fr, gr, hr, xr = _take(finite, run, fr, gr, hr, xr)
        active = ((xr <= lo) & (gr > 0)) | ((xr >= hi) & (gr < 0))
        stop = active.all(axis=1) | (fr <= 0.0)
        finish(run[stop], it)
        run, fr, gr, hr, xr, active = _take(~stop, run, fr, gr, hr, xr, active)
        dx, dec = _newton_steps(gr, hr, ~active)
        scale = np.abs(fr) + 1.0
        tiny = dec <= 2.0 * RTOL * scale
        if tiny.any():  # the step is tiny: accept it unless the loss rises beyond its rounding
            sel = run[tiny]
            tried = _take(tiny, xr, dx, fr, gr, hr, scale)
            take, settled = _tiny_steps(obj, sel, *tried, lo, hi, x, f)  # type: ignore[call-arg]
            finish(sel[take & settled], it + 1)
            finish(sel[~take & settled], it)
        keep = ~tiny
        if it == max_iter:
            break
        run, fr, gr, xr, dx, dec, scale = _take(keep, run, fr, gr, xr, dx, dec, scale)
        accepted = _lockstep_line_search(obj, run, xr, fr, gr, dx, lo, hi, (x, f, g, h))
        run, xr = run[accepted], xr[accepted]
        history[run, it + 1] = f[run]
        moved = np.max(np.abs(x[run] - xr), axis=1)
        still = moved > 1e-14 * (1.0 + np.max(np.abs(x[run]), axis=1))
        if it + 2 > _STALL:  # the loss flat to 1e-9 over the last _STALL steps
            still &= history[run, it + 1 - _STALL] - f[run] > _STALL_RTOL * (
                np.abs(f[run]) + 1.0
            )
        run = run[still]
    return LockstepResult(x, f, n_iter, ok)


def _take(mask, *arrays) -> tuple:
    """Each of ``arrays`` at ``mask``."""
    return tuple(a[mask] for a in arrays)


def _tiny_steps(obj, sel, xr, dx, fr, gr, hr, scale, lo, hi, x, f):
    """Take the tiny Newton steps of problems ``sel`` where the loss does not rise beyond
    its rounding (``x``, ``f`` updated in place): which were taken, and which problems are
    settled."""
    xn = np.clip(xr + dx, lo, hi)
    fn, gn, hn = obj.evaluate(xn, sel)
    take = np.isfinite(fn) & (fn <= fr + 1e-13 * scale)
    x[sel[take]], f[sel[take]] = xn[take], fn[take]
    settled = _settled(
        x[sel],
        np.where(take[:, None], gn, gr),
        np.where(take[:, None, None], hn, hr),
        lo,
        hi,
    )
    return take, settled


def _lockstep_line_search(obj, run, xr, fr, gr, dx, lo, hi, state):
    """Armijo backtracking, each problem with its own step length, the problems still
    searching evaluated together; the accepted points are written into ``state`` = (x, f, g,
    h). Returns which of ``run`` found a decrease (the others: none representable, a flat
    stop or a failure)."""
    x, f, g, h = state
    t = np.ones(run.size)
    searching = np.arange(run.size)
    accepted = np.zeros(run.size, dtype=bool)
    while searching.size:
        sel = run[searching]
        xn = np.clip(xr[searching] + t[searching, None] * dx[searching], lo, hi)
        fn, gn, hn = obj.evaluate(xn, sel)
        slope = np.einsum("ij,ij->i", gr[searching], xn - xr[searching])
        good = np.isfinite(fn) & (fn <= fr[searching] + ARMIJO * slope)
        done = sel[good]
        x[done], f[done], g[done], h[done] = xn[good], fn[good], gn[good], hn[good]
        accepted[searching[good]] = True
        searching = searching[~good]
        t[searching] *= 0.5
        searching = searching[t[searching] >= 1e-12]
    return accepted
