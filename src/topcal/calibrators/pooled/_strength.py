"""The strength behind a ``hier-platt`` / ``hier-beta`` interval where classes are small:
the leave-one-out loss computed exactly (:mod:`.hierarchical`, docs/intervals.md).

The interval's strength lam_I is the weakest fitted strength whose leave-one-out loss is
within a slack of the best (the strength is not known). The fit's strength scan uses the
approximate leave-one-out loss (one Newton step from the full fit, Rad & Maleki 2020),
accurate where a row's leverage is small. In a class of a few rows (mean leverage p / n near
1/2 at 5 rows and 2 parameters), a row far out in logit(s) (ImageNet: a fifth of the top
scores above 0.999) is not left out by one step: the approximate loss is too low at weak
strengths, and lam_I was 2^3-2^4 where the exact loss puts it at 2^5-2^7. The intervals then
covered 0.95-0.97 (ImageNet's cells; 200 simulated classes of 5 rows with ImageNet-like
scores, where the truth is known). Here every class of at most
:data:`EXACT_LOO_ROWS_PER_PARAM` x p units of weight gets its exact loss: each unit left out
in turn and the class refitted (the small classes refitted together, one round per unit: a
round leaves out one unit of every small class); larger classes keep the approximation. The
slack on that loss is :data:`EXACT_SLACK_PER_PARAM` x p nats (the approximate loss's is 0.6
x p). Both constants were chosen on ``bench_intervals.py``'s many-class simulations (200
classes of 5 and 10 rows, Beta(4, 2) and ImageNet-like scores: 0.87-0.91 with them; with the
slack at 0.6, 0.82-0.89), not derived.
"""

from __future__ import annotations

import numpy as np
from scipy.special import log_expit

from ._solve import LAMBDA_GRID, alo_loss, newton

__all__ = [
    "EXACT_LOO_ROWS_PER_PARAM",
    "EXACT_SLACK_PER_PARAM",
    "exact_loo",
    "interval_strength",
]

#: Classes of at most this much weight (rows) a parameter (mean leverage p / n >= 1/4) get
#: the exact leave-one-out loss in the interval's strength
EXACT_LOO_ROWS_PER_PARAM = 4
#: The interval's strength: the weakest whose loss, exact for the small classes, is within
#: this many nats a parameter of the best (1.0; the approximate loss's slack is 0.6: the
#: exact loss rises faster toward weak strengths). Chosen on bench_intervals.py's many-class
#: simulations.
EXACT_SLACK_PER_PARAM = 1.0


def _subset(rows, keep_class):
    """The rows of the classes ``keep_class`` (K,) bool, as Rows of all K classes (others
    empty)."""
    g = rows.row_classes()
    keep = keep_class[g]
    return type(rows)(
        [c[keep] for c in rows.cols], rows.tp[keep], rows.fp[keep], g[keep], rows.k
    )


def exact_loo(rows, theta, center, prior, lam: float) -> float:
    """Leave-one-out NLL (summed over units of weight, as :func:`._solve.alo_loss`) of the
    penalised per-class fit ``theta`` at ``lam``, each unit left out and its class refitted."""
    k = rows.k
    g = rows.row_classes()
    X = np.column_stack(rows.cols + [np.ones(g.size)])
    units = []  # (row, is_tp) of every unit, ranked within its class
    for is_tp, w in ((True, rows.tp), (False, rows.fp)):
        idx = np.flatnonzero(w > 0)
        units.append((idx, np.full(idx.size, is_tp)))
    row = np.concatenate([u[0] for u in units])
    pos = np.concatenate([u[1] for u in units])
    order = np.lexsort((row, g[row]))
    row, pos = row[order], pos[order]
    cls = g[row]
    start = np.searchsorted(cls, np.arange(k))
    rank = np.arange(row.size) - start[cls]
    loss = 0.0
    for r in range(int(rank.max(initial=-1)) + 1):
        sel = rank == r
        i, t = row[sel], pos[sel]
        tp, fp = rows.tp.copy(), rows.fp.copy()
        w_tp, w_fp = tp[i[t]], fp[i[~t]]
        tp[i[t]] -= np.minimum(w_tp, 1.0)
        fp[i[~t]] -= np.minimum(w_fp, 1.0)
        fit = newton(type(rows)(rows.cols, tp, fp, g, k), theta, center, prior, lam)[0]
        m = np.einsum("np,np->n", X[i], fit[g[i]])
        loss -= float(np.sum(w_tp * log_expit(m[t])) + np.sum(w_fp * log_expit(-m[~t])))
    return loss


def interval_strength(rows, fits: dict, exact, center, prior, start: int):
    """Grid index of the interval's strength (module docstring), or None where no class has
    at most :data:`EXACT_LOO_ROWS_PER_PARAM` units of weight a parameter (the caller keeps
    the scan's approximate losses and their slack).

    A descent on the grid from ``start`` (the fit's strength) to the best exact loss, then
    steps toward weaker strengths while the loss stays within the slack (the loss taken as
    unimodal in log strength, as the scan takes its own). ``fits``: the scan's fits by grid
    index, completed here (a binned one refitted on the rows, ``exact`` set; a missing one
    fitted from its neighbour's)."""
    has = rows.counts > 0
    small = has & (rows.sums(rows.w) <= EXACT_LOO_ROWS_PER_PARAM * rows.p)  # weight, not rows
    if not small.any():
        return None
    slack = EXACT_SLACK_PER_PARAM * rows.p
    rs = _subset(rows, small)
    rl = _subset(rows, has & ~small) if (has & ~small).any() else None
    last = LAMBDA_GRID.size - 1
    loss: dict[int, float] = {}

    def at(j, near):
        """The loss at grid index j (fitted from ``near``'s fit where not fitted yet)."""
        if j in loss:
            return loss[j]
        lam = float(LAMBDA_GRID[j])
        if j not in fits:
            fits[j] = newton(rows, fits[near], center, prior, lam)[0]
            exact[j] = True
        elif not exact[j]:
            fits[j] = newton(rows, fits[j], center, prior, lam)[0]
            exact[j] = True
        out = exact_loo(rs, fits[j], center, prior, lam)
        if rl is not None:
            q = rl.Q[0]
            rl.loss(rl.margin(fits[j], rl.M), q)
            out += alo_loss(rl, fits[j], prior, lam, q)
        loss[j] = out
        return out

    best = start
    at(best, best)
    for step in (-1, 1):  # descend from the fit's strength, one grid step at a time
        while 0 <= best + step <= last and at(best + step, best) < loss[best]:
            best += step
    ji = best
    while ji > 0 and at(ji - 1, ji) <= loss[best] + slack:
        ji -= 1
    return ji
