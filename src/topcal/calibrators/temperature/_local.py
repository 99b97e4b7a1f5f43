"""sts's one temperature by steps on a local model of the rows (private module of
:mod:`topcal.calibrators.temperature`).

sts minimises F(theta) = sum_i loss(m_i), m_i = d_i beta - lse_i(beta), beta = exp(-theta),
and every exact evaluation is a pass over the (K - 1, n) other entries (an exp() each; at
10^5 x 1,000 0.7-1.5 s, against a few ms for all its O(n) work).
:func:`._solver.bounded_newton` takes one pass a step and one more to confirm the last, tiny
step: 3-4 passes for a warm-started fold, 8 cold.

Here the pass at theta_0 keeps each row's lse, E_w[O] and Var_w[O] (the log-sum-exp and its
first two derivatives in beta, :meth:`._core.TopLabelObjective._eval`), and the next point
minimises the *local model*

    F~(theta) = sum_i loss(d_i beta - lse_i - E_i delta - Var_i delta^2 / 2),  delta = beta - beta_0

(the loss exact in m; only each row's log-sum-exp replaced by its second-order Taylor
polynomial in beta, off by the third cumulant times delta^3 / 6) inside a trust region, by
bounded_newton on F~ (O(n) a step, no pass). F~ has F's value, gradient and Hessian at
theta_0, so its step is Newton's to first order, and it keeps the curvature of the loss in m
that Newton's quadratic model drops: from an all-data optimum a fold's fit lands within
~1e-8 of its own in one step (Newton: 1e-4).

The fit ends at an exactly evaluated point whose Newton decrement is below bounded_newton's
tolerance and whose Newton step is at most :data:`STEP` in log T: its loss, margins and
information are that point's own. Where the model does not get there in :data:`_PASSES`
passes, or a step fails, bounded_newton goes on from the best point (its rules and errors).
"""

from __future__ import annotations

import numpy as np
from scipy.special import expit

from ...errors import ConvergenceError
from ._core import BLOCK, Evaluated, TopLabelObjective, loss_derivs, loss_parts
from ._solver import ARMIJO, RTOL, NewtonResult, bounded_newton, newton_step

__all__ = ["LocalModel", "newton", "STEP", "FOLD_MOVE"]

#: The fit stops where the exact Newton step is at most this in log T (T within 1e-7
#: relative of the optimum the next step would reach) and the Newton decrement within
#: bounded_newton's test.
STEP = 1e-7
#: Exact passes the model's steps may take before bounded_newton goes on alone.
_PASSES = 12
#: The trust region's least first radius in log T (a warm start's Newton step can be ~1e-4).
_RADIUS = 1e-3
#: A fold's first model step is taken unconfirmed where it moves log T by at most this
#: (folds of the bench sets and simulations move it by 1e-4 to 1e-2; the model's error grows
#: as its cube).
FOLD_MOVE = 0.05


class LocalModel(Evaluated):
    """F~ of the module docstring around the objective's last evaluated point ``theta0``
    (its rows copied: the objective's next pass writes over them), for
    :func:`._solver.bounded_newton`."""

    dim = 1

    def __init__(self, obj, theta0: float):
        self.lse, self.mean, self.var = obj.rows.copy()
        self.d, self.tp, self.fp, self.loss = obj.d, obj.tp, obj.fp, obj.loss
        self.beta0 = float(np.exp(-theta0))
        self._at = None

    def _eval(self, x):
        x = np.asarray(x, dtype=np.float64)
        if self._at is None or not np.array_equal(self._at[0], x):
            beta = float(np.exp(-x[0]))
            delta = beta - self.beta0
            f = g = h = 0.0
            n = self.d.shape[0]
            # block by block, as the exact pass: temporaries in cache
            for a in range(0, n, BLOCK):
                r = slice(a, min(a + BLOCK, n))
                d, var, tp, fp = self.d[r], self.var[r], self.tp[r], self.fp[r]
                q = d - self.mean[r] - delta * var  # dm / dbeta
                m = d * beta - (self.lse[r] + delta * (self.mean[r] + (0.5 * delta) * var))
                pq = (expit(m), expit(-m))
                f_tp, f_fp = loss_parts(m, self.loss, pq)
                l1, l2 = loss_derivs(m, tp, fp, self.loss, pq)
                dm_dt = -beta * q  # as in TopLabelObjective: d beta / d theta = -beta
                d2m_dt2 = beta * q - (beta * beta) * var
                f += float(tp @ f_tp + fp @ f_fp)
                g += float(l1 @ dm_dt)
                h += float((l2 * dm_dt) @ dm_dt + l1 @ d2m_dt2)
            self._at = (x.copy(), f, np.array([g]), np.array([[h]]))
        return self._at


def newton(obj, x0, lo, hi, *, fixed=None, max_iter: int = 100, what: str = "fit", fold=False):
    """:func:`._solver.bounded_newton`'s minimum of ``obj``, by the local model's steps
    where ``obj`` keeps its rows (one parameter: sts), else by bounded_newton itself.

    ``fold`` (a cross-validation fold's fit from the all-data optimum): the model's first
    step, where it moves log T by at most :data:`FOLD_MOVE`, is the result, without the
    exact pass that would confirm it (the model lands within ~1e-8 of the fold's optimum
    from there: module docstring); its ``fun`` is then the model's value."""
    keeps = isinstance(obj, TopLabelObjective) and obj.rows is not None and obj.dim == 1
    if not keeps or (fixed is not None and np.any(fixed)):
        return bounded_newton(obj, x0, lo, hi, fixed=fixed, max_iter=max_iter, what=what)
    lo = np.asarray(lo, dtype=np.float64)
    hi = np.asarray(hi, dtype=np.float64)
    x = np.clip(np.asarray(x0, dtype=np.float64), lo, hi)
    f = obj.value(x)
    radius, n_iter, passes, model = None, 0, 1, None
    while passes < _PASSES:  # every trial below is one exact pass, accepted or not
        if model is None:  # at a new point: its exact test, then a model around it
            g, h = obj.grad_hess(x)
            if (
                not (np.isfinite(f) and np.isfinite(g).all() and np.isfinite(h).all())
                or f <= 0
            ):
                break
            if (x[0] <= lo[0] and g[0] > 0) or (x[0] >= hi[0] and g[0] < 0):
                break  # held at a bound: bounded_newton's first test returns it as it is
            step = float(np.clip(x + newton_step(g, h), lo, hi)[0] - x[0])
            tiny = -float(g[0]) * step <= 2.0 * RTOL * (abs(f) + 1.0)
            if tiny and abs(step) <= STEP:
                return NewtonResult(x, f, n_iter)
            model = LocalModel(obj, float(x[0]))
            radius = max(4.0 * abs(step), _RADIUS) if radius is None else radius
        # the model's minimum in the trust region; kept where the exact loss falls by
        # Armijo's rule
        try:
            trial = bounded_newton(
                model,
                x,
                np.maximum(lo, x - radius),
                np.minimum(hi, x + radius),
                max_iter=max_iter,
                what=what,
            )
        except ConvergenceError:
            break
        move = float(trial.x[0] - x[0])
        if move == 0.0:
            break
        if fold and n_iter == 0 and abs(move) <= FOLD_MOVE and np.isfinite(trial.fun):
            return NewtonResult(trial.x, float(trial.fun), 1)
        ft = obj.value(trial.x)
        passes += 1
        # (a flat loss, the decrement tiny but the step not: kept unless the loss rises
        # beyond its rounding, as bounded_newton's last step)
        fall = f + (1e-13 * (abs(f) + 1.0) if tiny else ARMIJO * float(g[0]) * move)
        if not (np.isfinite(ft) and ft <= fall):
            radius = 0.25 * abs(move)  # the model did not hold so far: the same model, nearer
            continue
        pred = model.value(x) - trial.fun
        if abs(move) >= 0.5 * radius and (f - ft) >= 0.75 * pred:
            radius *= 4.0  # the model holds to the boundary: reach further
        elif (f - ft) < 0.25 * pred:
            radius = 0.5 * abs(move)
        x, f, n_iter, model = trial.x, ft, n_iter + 1, None
    # not settled by the model (a flat or bounded loss, or a failed step): bounded_newton
    # goes on
    res = bounded_newton(obj, x, lo, hi, max_iter=max_iter, what=what)
    return NewtonResult(res.x, res.fun, res.n_iter + n_iter)
