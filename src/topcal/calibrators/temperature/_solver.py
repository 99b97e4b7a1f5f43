"""The bounded Newton solver of the temperature family (private module of
:mod:`topcal.calibrators.temperature`; see ``_core.py`` for the objectives it minimises)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...errors import ConvergenceError

#: Newton stops when half the Newton decrement (the model's predicted loss
#: reduction) falls below this fraction of the loss, after taking that last
#: step when it does not raise the loss: parameters are then correct to about
#: 1e-10 relative (quadratic convergence squares the ~1e-5 error before it).
#: A looser test would stop early; a tighter one is below the rounding of a
#: loss summed over 1e6 samples, and where the parameters are not identified
#: (a ridge, e.g. every top score clipped to the same value) the decrement
#: shrinks only linearly and would take hundreds of steps to get there.
_RTOL = 1e-10
#: Stall test: stop when _STALL successive Newton steps lowered the loss by
#: less than _STALL_RTOL of it in total (see :func:`bounded_newton`).
_STALL = 10
_STALL_RTOL = 1e-9
#: Armijo sufficient-decrease constant (Nocedal and Wright, Numerical
#: Optimization, 2nd ed., section 3.1 recommend c1 = 1e-4).
_ARMIJO = 1e-4


@dataclass(frozen=True)
class NewtonResult:
    """Outcome of :func:`bounded_newton`."""

    x: np.ndarray
    fun: float
    n_iter: int


def bounded_newton(obj, x0, lo, hi, *, fixed=None, max_iter: int = 100, what: str = "fit") -> NewtonResult:
    """Minimise ``obj`` over the box [lo, hi] by projected Newton with backtracking.

    Coordinates at a bound whose gradient points outwards are held there
    (active set); the Newton system on the free ones uses |eigenvalues| of
    the Hessian (floored), so a non-convex region still gives a descent
    direction. The step is projected onto the box and halved until the
    Armijo condition holds.

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
        If the loss or its derivatives become non-finite, the line search
        cannot decrease the loss away from a stationary point, or
        ``max_iter`` Newton steps do not converge.
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
        if not (np.isfinite(f) and np.all(np.isfinite(g)) and np.all(np.isfinite(h))):
            raise ConvergenceError(
                f"{what}: the loss became non-finite at log T = {x[0]:.6g}; check the scores for "
                "extreme values (|logit| > 1e6) or refit with max_iter larger"
            )
        active = fixed | ((x <= lo) & (g > 0)) | ((x >= hi) & (g < 0))
        free = np.flatnonzero(~active)
        if free.size == 0 or f <= 0.0:
            # all losses here are >= 0: a loss of 0 (every term below the
            # smallest float, perfectly separated data) is the global minimum
            return NewtonResult(x, f, it)
        gf = g[free]
        ev, vec = np.linalg.eigh(h[np.ix_(free, free)])
        scale = max(float(np.max(np.abs(ev))), np.finfo(float).tiny)
        ev = np.maximum(np.abs(ev), 1e-12 * scale)
        step = -(vec @ ((vec.T @ gf) / ev))
        dec = float(-gf @ step)
        dx = np.zeros_like(x)
        dx[free] = step
        if dec <= 2.0 * _RTOL * (abs(f) + 1.0):
            xn = np.clip(x + dx, lo, hi)
            fn = obj.value(xn)
            # the step is tiny: accept it unless the loss rises beyond its rounding
            if np.isfinite(fn) and fn <= f + 1e-13 * (abs(f) + 1.0):
                return NewtonResult(xn, fn, it + 1)
            obj.value(x)
            return NewtonResult(x, f, it)
        if it == max_iter:
            break
        t = 1.0
        while True:
            xn = np.clip(x + t * dx, lo, hi)
            fn = obj.value(xn)
            if np.isfinite(fn) and fn <= f + _ARMIJO * float(g @ (xn - x)):
                break
            t *= 0.5
            if t < 1e-12:
                # No decrease is representable: x is stationary to float precision
                # when the predicted decrease is below the rounding of f.
                obj.value(x)
                if dec <= 1e-9 * (abs(f) + 1.0):
                    return NewtonResult(x, f, it)
                raise ConvergenceError(
                    f"{what}: the line search failed at log T = {x[0]:.6g} (loss {f:.10g}, predicted "
                    f"decrease {dec:.3g}); the loss surface is flat or noisy there: try loss='nll'"
                )
        moved = float(np.max(np.abs(xn - x)))
        x, f = xn, fn
        history.append(f)
        if moved <= 1e-14 * (1.0 + float(np.max(np.abs(x)))):
            return NewtonResult(x, f, it + 1)
        if len(history) > _STALL and history[-1 - _STALL] - f <= _STALL_RTOL * (abs(f) + 1.0):
            # The loss is flat to 1e-9 over the last steps although the quadratic
            # model still predicts a decrease: the parameters are (nearly) not
            # identified, a ridge along which any point is as good.
            return NewtonResult(x, f, it + 1)
    raise ConvergenceError(
        f"{what}: Newton did not converge in max_iter={max_iter} iterations (loss {f:.10g}, "
        f"predicted decrease {dec:.3g}); raise max_iter"
    )
