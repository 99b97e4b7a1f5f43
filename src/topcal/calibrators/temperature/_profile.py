"""tswa's fit as a one-dimensional Newton on the profile loss (private module of
:mod:`topcal.calibrators.temperature`).

tswa minimises L(theta, b) over theta = log T and K award offsets b_g = A_g / T, where a
sample's log-odds m = c(theta) + b_g, c = d beta - log sum_j exp(beta O_j), depend on theta
and on its own class's offset only. For a fixed theta the K offsets are K separate
one-dimensional problems (an intercept per class, each on its own rows: O(n) work in all, no
pass over the (K - 1, n) others), so the fit here minimises the *profile loss*

    F(theta) = min_b L(theta, b)          (variable projection; Golub and Pereyra 1973)

by :func:`._solver.bounded_newton` in theta alone. Each evaluation of F is one pass over the
others (the exp() that dominates every fit) and an inner solve of the offsets, warm-started
from the previous evaluation's; the derivatives follow from the envelope theorem:

    F'(theta)  = dL/dtheta at b*(theta)
    F''(theta) = L_tt - sum_g L_tb[g]^2 / L_bb[g]     (the Schur complement of the arrowhead
                                                       Hessian; offsets held or at a bound
                                                       omitted)

The joint Newton (:class:`._core.TopLabelObjective` with K + 1 parameters) took one pass per
step too, but its single step length for all K + 1 parameters made it crawl where a few
classes' offsets were far from their optimum (22 steps at 10^4 rows x 1,000 classes, against
7 here). The optimum is the same stationary point: the tests hold the two fits to 1e-7
relative in the parameters.
"""

from __future__ import annotations

import numpy as np

from ._core import BLOCK, Evaluated, block_moments, loss_derivs, loss_parts, moment_scratch

__all__ = ["ProfileObjective", "JointAt"]

#: An inner (per-class offset) solve stops for a class once its Newton decrement is below
#: this fraction of its loss plus one, after that last step (taken without a line search:
#: the loss is locally convex there and its change is below the rounding of a class's loss,
#: ~1e-13, where many rows are confident mistakes, whose NLL loses digits): quadratic
#: convergence then leaves the offset correct to about 1e-11, a step beyond the outer
#: Newton's tolerance.
_INNER_RTOL = 1e-12
#: The loosest inner tolerance, far from the optimum (the first evaluation's).
_INNER_LOOSE = 1e-6
_INNER_MAX = 200
#: The largest change of an offset's first-order prediction at a new log T
#: (:meth:`_predict`), in log-odds: a long step in log T early in a fit predicts far, and
#: the clipped NLL is flat where every row of a class is confidently wrong (|m| > 27.6), a
#: region an inner solve started there would not leave.
_PREDICT_MAX = 1.0


class JointAt:
    """The joint objective's gradient, Hessian and margins at the profile fit's last point
    (for the parameters' covariance and the fitted margins, without another pass):
    ``grad_hess(x)`` and ``margin(x)`` for that x (the full (log T, b_0, ..., b_{K-1}))."""

    def __init__(self, loss, g, h, margins):
        self.loss, self._gh, self._margins = loss, (g, h), margins

    def grad_hess(self, x):
        return self._gh[0].copy(), self._gh[1].copy()

    def margin(self, x, copy: bool = True):
        """The margins (``copy=False``: in the profile objective's own buffer, which its
        next evaluation overwrites)."""
        m = self._margins()
        return m.copy() if copy else m


class ProfileObjective(Evaluated):
    """F(theta) = min_b L(theta, b) of tswa, for :func:`._solver.bounded_newton` with x =
    (theta,).

    Parameters
    ----------
    d, others, tp, fp : as for :class:`._core.TopLabelObjective`
    groups : ndarray of int (n,)
        Each row's award group (its predicted class).
    b0 : ndarray (G,)
        Starting offsets; those of ``fixed`` groups are kept as given.
    fixed : bool ndarray (G,)
        Offsets never moved (classes not predicted, or with only TP or only FP).
    lo, hi : float
        The offsets' box.
    loss : {"nll", "brier"}
    """

    dim = 1

    def __init__(self, d, others, tp, fp, groups, b0, fixed, lo, hi, *, loss="nll"):
        self.d, self.others, self.tp, self.fp, self.groups = d, others, tp, fp, groups
        self.loss = loss
        self.n_groups = b0.size
        self.b = np.asarray(b0, dtype=np.float64).copy()
        self.fixed = np.asarray(fixed, bool)
        self.lo, self.hi = float(lo), float(hi)
        n = d.shape[0]
        self._c = np.empty(n)  # c = d beta - lse: m without the offset
        self._dt = np.empty(n)  # dm / dtheta
        self._d2t = np.empty(n)  # d2m / dtheta2
        self._scratch = moment_scratch(others)
        self._f = None  # the loss per group at the last evaluation
        self._rtol = _INNER_LOOSE  # the inner solve's tolerance (:meth:`_eval`)
        self._at = None

    # ---------------------------------------------------------------- evaluation, block by block
    def _sums(self, b, full=False, beta=None):
        """Per group, the first and second derivatives of the loss in the offset at offsets
        b; with ``full`` also the loss per group, dL/dtheta, d2L/dtheta2 and d2L/dtheta db
        (per group). With ``beta``, first the pass over the others at that inverse
        temperature: every row's c = d beta - lse, dm/dtheta and d2m/dtheta2 (kept for the
        evaluations at other offsets). Block by block, like
        :class:`._core.TopLabelObjective` (the temporaries stay in cache)."""
        n, k = self.d.shape[0], self.n_groups
        s1, s2 = np.zeros(k), np.zeros(k)
        if full:
            f, s_ta, g_t, h_tt = np.zeros(k), np.zeros(k), 0.0, 0.0
        e_o, eo_o = self._scratch
        for a in range(0, n, BLOCK):
            rows = slice(a, min(a + BLOCK, n))
            if beta is not None:
                lse, mean, var = block_moments(self.others[:, rows], beta, e_o, eo_o)
                d = self.d[rows]
                dm_db = d - mean
                np.subtract(d * beta, lse, out=self._c[rows])
                np.multiply(dm_db, -beta, out=self._dt[rows])
                np.subtract(beta * dm_db, (beta * beta) * var, out=self._d2t[rows])
            grp, tp, fp = self.groups[rows], self.tp[rows], self.fp[rows]
            m = self._c[rows] + b[grp]
            # sigmoid(m) and sigmoid(-m) from one exp(-|m|), each in its accurate form (as
            # expit)
            e = np.exp(-np.abs(m))
            r = 1.0 / (1.0 + e)
            e *= r
            pos = m >= 0.0
            pq = (np.where(pos, r, e), np.where(pos, e, r))
            l1, l2 = loss_derivs(m, tp, fp, self.loss, pq)
            s1 += np.bincount(grp, weights=l1, minlength=k)
            s2 += np.bincount(grp, weights=l2, minlength=k)
            if full:
                f_tp, f_fp = loss_parts(m, self.loss, pq)
                f += np.bincount(grp, weights=tp * f_tp + fp * f_fp, minlength=k)
                dt, d2t = self._dt[rows], self._d2t[rows]
                l2_dt = l2 * dt
                g_t += float(np.dot(l1, dt))
                h_tt += float(np.dot(l2_dt, dt) + np.dot(l1, d2t))
                s_ta += np.bincount(grp, weights=l2_dt, minlength=k)
        return (s1, s2, f, s_ta, g_t, h_tt) if full else (s1, s2)

    def _inner(self, beta):
        """Solve dL/db_g = 0 for each free group's offset at the current theta (from
        self.b), all groups together, by Newton's method on the derivative with |second
        derivative|, each group by its own steps: a step is halved until the derivative's
        magnitude falls (the steps go downhill, so this ends at a minimum), and a group
        stops once its Newton decrement is below _INNER_RTOL of its loss (that last step
        taken). Ends with one full evaluation (:meth:`_sums`) at the solution, which it
        returns."""
        b = self.b
        lo, hi = self.lo, self.hi
        if self._f is None:  # the first call: the loss per group, the stopping test's scale
            s1, s2, self._f = self._sums(b, full=True, beta=beta)[:3]
        else:
            s1, s2 = self._sums(b, beta=beta)
        scale = 2.0 * self._rtol * (np.abs(self._f) + 1.0)
        run = ~self.fixed
        for _ in range(_INNER_MAX):
            run &= ~(((b <= lo) & (s1 > 0)) | ((b >= hi) & (s1 < 0)))
            if not run.any():
                break
            step = np.where(run, -s1 / np.maximum(np.abs(s2), 1e-300), 0.0)
            small = run & (s2 > 0.0) & (-s1 * step <= scale)
            # the last steps: taken, and the full evaluation there
            if np.array_equal(small, run):
                b = np.clip(b + step, lo, hi)
                break
            t = np.ones(self.n_groups)
            searching = run.copy()
            new_b = b.copy()
            while searching.any():
                trial = np.where(searching, np.clip(b + t * step, lo, hi), new_b)
                s1t, s2t = self._sums(trial)
                ok = searching & np.isfinite(s1t) & ((np.abs(s1t) < np.abs(s1)) | small)
                new_b = np.where(ok, trial, new_b)
                s1, s2 = np.where(ok, s1t, s1), np.where(ok, s2t, s2)
                searching &= ~ok
                t = np.where(searching, 0.5 * t, t)
                searching &= t >= 1e-12  # no change representable: the group is flat here
            done = small | (np.abs(new_b - b) <= 1e-15 * (1.0 + np.abs(b)))
            b = new_b
            run &= ~done
        self.b = b
        out = self._sums(b, full=True)
        self._f = out[2]
        return out

    # ---------------------------------------------------------------- the profile loss
    def _eval(self, x):
        x = np.asarray(x, dtype=np.float64)
        if self._at is not None and np.array_equal(self._at[0], x):
            return self._at
        beta = float(np.exp(-x[0]))
        if self._at is not None:  # first-order prediction of b*(theta) from the last point
            self.b = self._predict(self._at, float(x[0]))
        s1, s2, f, s_ta, g_t, h_tt = self._inner(beta)
        b = self.b
        free = (
            ~self.fixed
            & (s2 > 0.0)
            & ~(((b <= self.lo) & (s1 > 0)) | ((b >= self.hi) & (s1 < 0)))
        )
        schur = h_tt - float(np.sum(s_ta[free] ** 2 / s2[free]))
        # the next inner solve's tolerance: a fraction of the outer Newton decrement that
        # this point predicts, so inexact offsets far from the optimum cost no steps they
        # need not (inexact Newton; Dembo, Eisenstat and Steihaug 1982); _INNER_RTOL near it
        dec = g_t * g_t / max(abs(schur), 1e-300)
        self._rtol = min(
            max(1e-4 * dec / (abs(float(f.sum())) + 1.0), _INNER_RTOL), _INNER_LOOSE
        )
        self._at = (
            x.copy(),
            float(f.sum()),
            np.array([g_t]),
            np.array([[schur]]),
            (s1, s2, s_ta, h_tt, free),
        )
        return self._at

    def _predict(self, at, theta):
        """b*(theta) to first order from the last evaluated point: db*/dtheta = -L_tb / L_bb
        for the free offsets (implicit differentiation of dL/db = 0), each change capped at
        _PREDICT_MAX (a start for the inner solve, which then converges in fewer steps)."""
        x, _, _, _, (_, s2, s_ta, _, free) = at
        slope = np.where(free, -s_ta / np.where(free, s2, 1.0), 0.0)
        move = np.clip(slope * (theta - float(x[0])), -_PREDICT_MAX, _PREDICT_MAX)
        return np.clip(self.b + move, self.lo, self.hi)

    def joint(self, x):
        """(full parameters (theta, b), :class:`JointAt`) at the profile's point ``x``."""
        _, _, g, _, (s1, s2, s_ta, h_tt, _) = self._eval(x)
        k = self.n_groups
        gj = np.concatenate([g, s1])
        h = np.zeros((k + 1, k + 1))
        h[0, 0] = h_tt
        h[0, 1:] = h[1:, 0] = s_ta
        h[1:, 1:][np.diag_indices(k)] = s2
        return np.concatenate([np.asarray(x, dtype=np.float64), self.b]), JointAt(
            self.loss, gj, h, self._margins
        )

    def _margins(self):
        """The margins m = c + b at the last evaluation, written over c block by block (no
        n-sized buffer of their own memory); the objective forgets that evaluation."""
        if self._at is not None:
            for a in range(0, self.d.shape[0], BLOCK):
                rows = slice(a, min(a + BLOCK, self.d.shape[0]))
                self._c[rows] += self.b[self.groups[rows]]
            self._at = None
        return self._c
