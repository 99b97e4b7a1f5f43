"""The per-class fits of bts and btswa solved in lockstep (private module of
:mod:`topcal.calibrators.temperature`).

bts and btswa fit each class alone (one or two parameters, m = logit(s) / T + A / T), which
one :func:`._solver.bounded_newton` per class did with a Python-level loop: about half of an
``auto`` fit's time on 1,000 classes. Here every class still iterating takes its Newton step
at once, from segment sums over the rows grouped by class (:class:`BinaryClassesObjective`,
:func:`._solver.lockstep_newton`); each class follows bounded_newton's own rules, so the
results are those of the per-class loop up to the rounding of the sums (the tests hold them
to 1e-8 relative).
"""

from __future__ import annotations

import numpy as np
from scipy.special import expit

from ._core import block_moments, loss_derivs, loss_parts, moment_scratch
from ._solver import NewtonResult, lockstep_newton

__all__ = ["BinaryClassesObjective", "solve_classes"]

#: Rows of a chunk of :class:`BinaryClassesObjective` (whole classes, so a bigger class is a
#: chunk alone): about 25 temporaries of a chunk's length are alive at once, at 8192 rows
#: 1.5 x a 10^4 x 10 input (peak memory; 2048 rows took 10% more CPU time at 10^5 x 100, 4096
#: the same as 8192).
_LOCKSTEP_ROWS = 4096


class BinaryClassesObjective:
    """The binary variants' :class:`TopLabelObjective` of many classes at once, for
    :func:`._solver.lockstep_newton`.

    ``d``, ``tp``, ``fp``: rows grouped by class; problem j is rows ``heads[j]:heads[j] +
    counts[j]``, with x = (log T, b) (``n_awards`` 0 or 1). The per-row terms are
    :class:`TopLabelObjective`'s, taken a few classes at a time (about
    :data:`_LOCKSTEP_ROWS` rows: no n-sized temporaries); the sums per class
    (``np.bincount``) equal its sums up to rounding.
    """

    def __init__(self, d, tp, fp, heads, counts, *, loss="nll", n_awards=0, others=None):
        self.d, self.tp, self.fp, self.loss, self.n_awards = d, tp, fp, loss, int(n_awards)
        self.heads, self.counts = heads, counts
        # csts/cstswa: the rows' other entries (K - 1, n), as TopLabelObjective's
        self.others = others
        self._scratch = None if others is None else moment_scratch(others)

    def _blocks(self, x, sel):
        """(row indices or slice, problem of each row within sel, d, tp, fp, beta, m,
        carried) of the classes ``sel``, a chunk at a time: whole classes, about
        :data:`_LOCKSTEP_ROWS` rows (a class is summed by one ``bincount``, so the chunks
        change no sum); a chunk of classes adjacent in the rows reads them as a slice, not a
        copy. A class of more rows (pooled-platt's one class: all the rows) comes in pieces
        of :data:`_LOCKSTEP_ROWS` rows, one at a time; ``carried`` is its problem after its
        first piece (the sum so far goes first into the piece's ``bincount``: bit for bit
        one sum over the class), else -1."""
        heads, counts = self.heads[sel], self.counts[sel]
        ends = np.cumsum(counts)
        beta_c = np.exp(-x[:, 0])
        j = 0
        while j < sel.size:
            j1 = max(
                int(np.searchsorted(ends, ends[j] - counts[j] + _LOCKSTEP_ROWS, side="right")),
                j + 1,
            )
            c = counts[j:j1]
            if (
                j1 == j + 1 and c[0] > _LOCKSTEP_ROWS
            ):  # one large class: pieces of it, made one at a time
                h, n = int(heads[j]), int(c[0])
                pieces = (
                    (
                        slice(h + a, h + min(a + _LOCKSTEP_ROWS, n)),
                        np.full(min(_LOCKSTEP_ROWS, n - a), j),
                        j if a else -1,
                    )
                    for a in range(0, n, _LOCKSTEP_ROWS)
                )
            else:
                seg = np.repeat(np.arange(j, j1), c)
                if j1 == j + 1 or np.all(
                    heads[j + 1 : j1] == heads[j : j1 - 1] + c[:-1]
                ):  # adjacent: one run of rows
                    idx = slice(int(heads[j]), int(heads[j]) + seg.size)
                else:
                    idx = np.arange(seg.size) + np.repeat(heads[j:j1] - (np.cumsum(c) - c), c)
                pieces = [(idx, seg, -1)]
            for idx, seg, carried in pieces:
                beta = beta_c[seg]
                d = self.d[idx]
                m = d * beta
                dm_db, var = d, None
                if self.others is not None:  # m = d beta - L(beta): L' = E[O], L'' = Var[O]
                    lse, mean, var = block_moments(self.others[:, idx], beta, *self._scratch)
                    m -= lse
                    dm_db = d - mean
                if self.n_awards:
                    m += x[seg, 1]
                yield idx, seg, dm_db, self.tp[idx], self.fp[idx], beta, m, carried, var
            j = j1

    def margin(self, x, sel):
        """(row indices, log-odds m) of the classes ``sel`` at their parameters x (len(sel),
        dim), by chunks."""
        for blk in self._blocks(np.asarray(x, dtype=np.float64), sel):
            yield blk[0], blk[6]

    def evaluate(self, x, sel):
        """Summed loss (len(sel),), gradient (len(sel), dim) and Hessian (len(sel), dim,
        dim) of classes ``sel`` (a class's rows added in order by ``np.bincount``; a piece's
        sum starts from the previous pieces': bit for bit one sum over the class)."""
        sums = np.zeros((6 if self.n_awards else 3, sel.size))
        for _, seg, d, tp, fp, beta, m, carried, var in self._blocks(x, sel):
            pq = (expit(m), expit(-m))
            f_tp, f_fp = loss_parts(m, self.loss, pq)
            l1, l2 = loss_derivs(m, tp, fp, self.loss, pq)
            dm_dt = -beta * d  # as in TopLabelObjective, d here dm/dbeta = d - E[O]
            d2m_dt2 = beta * d if var is None else beta * d - (beta * beta) * var
            l2_dmdt = l2 * dm_dt
            terms = [tp * f_tp + fp * f_fp, l1 * dm_dt, l2_dmdt * dm_dt + l1 * d2m_dt2]
            if self.n_awards:
                terms += [l1, l2_dmdt, l2]
            for row, t in zip(sums, terms):
                if carried >= 0:  # the class's sum so far is the first weight
                    t, seg_t, row[carried] = (
                        np.concatenate(([row[carried]], t)),
                        np.concatenate(([carried], seg)),
                        0.0,
                    )
                    row += np.bincount(seg_t, weights=t, minlength=sel.size)
                else:
                    row += np.bincount(seg, weights=t, minlength=sel.size)
        if not self.n_awards:
            return sums[0], sums[1:2].T.copy(), sums[2].reshape(-1, 1, 1)
        return sums[0], sums[[1, 3]].T.copy(), sums[[2, 4, 4, 5]].T.reshape(-1, 2, 2)


def solve_classes(
    z, data, which, order, x0, lo, hi, *, loss: str, max_iter: int, m, others=None
) -> dict:
    """{class: NewtonResult} of the classes ``which`` solved together; their margins written
    into ``m``.

    ``z``: logit of every row's top score, or (``others``: the other entries, (K - 1, n), of
    the full-vector csts/cstswa) its margin ``d`` of :func:`._core.split_top`; ``order``:
    the rows grouped by class (ascending within a class; None: the rows are so already);
    ``x0`` (classes, dim): each class's start. A Brier fit starts, as ``_solve`` does, from
    the NLL optimum. A class on which a Newton solve fails (where bounded_newton raises) is
    left out: the caller solves it alone, with the L-BFGS-B fallback and its warning.
    """
    cls = np.flatnonzero(which)
    if cls.size == 0:
        return {}
    counts = np.bincount(data.pred, minlength=which.size)
    heads = (np.cumsum(counts) - counts)[cls]  # class c's rows: order[heads:heads + counts]
    ordered = order is None or np.all(
        order[1:] > order[:-1]
    )  # a fit's data is in canonical order, by class
    z, tp, fp = (
        (z, data.tp, data.fp) if ordered else (z[order], data.tp[order], data.fp[order])
    )
    if others is not None and not ordered:
        others = others[:, order]
    n_aw = len(lo) - 1
    ok, its = np.ones(cls.size, dtype=bool), np.zeros(cls.size, dtype=np.int64)

    def solve(name, start):
        obj = BinaryClassesObjective(
            z, tp, fp, heads, counts[cls], loss=name, n_awards=n_aw, others=others
        )
        return obj, lockstep_newton(obj, start, lo, hi, max_iter=max_iter)

    if (
        loss == "brier"
    ):  # a class whose NLL fit fails goes to the per-class path (which starts Brier from x0)
        _, warm = solve("nll", x0)
        ok, its, x0 = (
            warm.ok,
            np.where(warm.ok, warm.n_iter, 0),
            np.where(warm.ok[:, None], warm.x, x0),
        )
    obj, res = solve(loss, x0)
    ok &= res.ok
    for idx, mj in obj.margin(res.x[ok], np.flatnonzero(ok)):
        m[idx if ordered else order[idx]] = mj
    return {
        int(c): NewtonResult(res.x[j], float(res.fun[j]), int(res.n_iter[j] + its[j]))
        for j, c in enumerate(cls)
        if ok[j]
    }
