"""The per-class fits of bts and btswa solved in lockstep (private module of
:mod:`topcal.calibrators.temperature`; issue 26).

bts and btswa fit each class alone (one or two parameters, m = logit(s) / T + A / T), which one
:func:`._solver.bounded_newton` per class did with a Python-level loop: about half of an ``auto``
fit's time on 1,000 classes. Here every class still iterating takes its Newton step at once, from
segment sums over the rows grouped by class (:class:`._core.BinaryClassesObjective`,
:func:`._solver.lockstep_newton`); each class follows bounded_newton's own rules, so the results are
those of the per-class loop up to the rounding of the sums (the tests hold them to 1e-8 relative).
"""

from __future__ import annotations

import numpy as np

from ._core import BinaryClassesObjective
from ._solver import NewtonResult, lockstep_newton

__all__ = ["solve_classes"]


def solve_classes(z, data, which, order, x0, lo, hi, *, loss: str, max_iter: int, m) -> dict:
    """{class: NewtonResult} of the classes ``which`` solved together; their margins written into ``m``.

    ``z``: logit of every row's top score; ``order``: the rows grouped by class (ascending within a
    class); ``x0`` (classes, dim): each class's start. A Brier fit starts, as ``_solve`` does, from
    the NLL optimum. A class on which a Newton solve fails (where bounded_newton raises) is left out:
    the caller solves it alone, with the L-BFGS-B fallback and its warning.
    """
    cls = np.flatnonzero(which)
    if cls.size == 0:
        return {}
    counts = np.bincount(data.pred, minlength=which.size)
    heads = (np.cumsum(counts) - counts)[cls]  # class c's rows: order[heads:heads + counts]
    ordered = np.all(order[1:] > order[:-1])  # a fit's data is in its canonical order, sorted by class
    z, tp, fp = (z, data.tp, data.fp) if ordered else (z[order], data.tp[order], data.fp[order])
    n_aw = len(lo) - 1
    ok, its = np.ones(cls.size, dtype=bool), np.zeros(cls.size, dtype=np.int64)

    def solve(name, start):
        obj = BinaryClassesObjective(z, tp, fp, heads, counts[cls], loss=name, n_awards=n_aw)
        return obj, lockstep_newton(obj, start, lo, hi, max_iter=max_iter)

    if loss == "brier":  # a class whose NLL fit fails goes to the per-class path (which starts Brier from x0)
        _, warm = solve("nll", x0)
        ok, its, x0 = warm.ok, np.where(warm.ok, warm.n_iter, 0), np.where(warm.ok[:, None], warm.x, x0)
    obj, res = solve(loss, x0)
    ok &= res.ok
    for idx, mj in obj.margin(res.x[ok], np.flatnonzero(ok)):
        m[idx if ordered else order[idx]] = mj
    return {int(c): NewtonResult(res.x[j], float(res.fun[j]), int(res.n_iter[j] + its[j]))
            for j, c in enumerate(cls) if ok[j]}
