"""Shrinkage of per-class curves toward a pooled reference (pseudo-counts).

Every per-class score method estimates Conf_k(S) as a ratio of *local counts*: t_k(S) true
positives among n_k(S) positives "near" S (the bin of S for ``hist``; the scores >= S, or
the one bin below theta, for the ``cum`` family; the kernel-weighted counts sum_i w_i
exp(-(S - s_i)^2 / 2b^2) for the ``kde`` family, in units where a sample at S counts 1).
Shrinkage adds m pseudo-positives whose correctness follows a reference curve r(S):

    Conf~_k(S) = (t_k(S) + m r(S)) / (n_k(S) + m).

* m = 0 is the paper's estimator, exactly (that code path is kept as is).
* The weight of the reference, m / (n_k(S) + m), is large where the class has little data
  near S and vanishes where it has much: a class borrows strength in proportion to how
  little data it has.
* The reference r is the same method fitted on all classes pooled into one (a top-label
  curve of the classifier as a whole), itself shrunk toward the constant r0 = (sum TP + 1/2)
  / (sum P + 1) (the mean of the Jeffreys Beta(1/2, 1/2) posterior of the overall accuracy)
  with its own m0.
* m is chosen by leave-one-out NLL (no sample judges a curve it helped to fit): a true
  positive at s_i sees (t - 1 + m r) / (n - 1 + m), a false positive (t + m r) / (n - 1 +
  m), on a log-spaced grid of m from M_MIN up. For a histogram this is the Beta-binomial
  leave-one-out predictive; for a kernel it removes the sample's own kernel (weight 1 at
  distance 0).
* No certainty from finite counts: with m >= M_MIN > 0 and 0 < r < 1, Conf~ lies strictly
  inside (0, 1); at most t_k / n_k is pulled in by M_MIN min(r, 1 - r) / (n_k + M_MIN). The
  bound comes from the prior (one pseudo-sample of the reference at every score), not from a
  clip.

This module holds the numerics only; :class:`topcal.calibrators.base.ScoreCalibrator`
applies them.
"""

from __future__ import annotations

import numpy as np
from scipy.special import stdtrit

from .._numeric import PROB_CLIP
from ..data import class_order

__all__ = [
    "M_MIN",
    "M_GRID",
    "jeffreys_rate",
    "shrink",
    "loo_nll_grid",
    "loo_nll_by_group",
    "merge_equal_rows",
    "merge_rows_by_cell",
    "CELL_MERGE_GAIN",
    "choose_m",
    "interval_m",
    "INTERVAL_SLACK",
    "INTERVAL_LEVEL",
    "interval_slack",
    "ShrinkageConstraint",
    "COUNT_RUN_WIDTH",
    "count_runs",
    "merge_rows_by_run",
]

#: Smallest pseudo-count under ``shrinkage="auto"``: one pseudo-sample of the reference
#: curve at every score (the stated prior that keeps every confidence strictly inside (0,
#: 1)).
M_MIN = 1.0
#: Candidate pseudo-counts: M_MIN * 2^(j/2), j = 0..48 (1 to 1.7e7). At the top the class's
#: own data hardly matter: the curve is the reference.
M_GRID = M_MIN * 2.0 ** (np.arange(49) / 2.0)


def jeffreys_rate(tp_total: float, p_total: float) -> float:
    """(TP + 1/2) / (P + 1): the Jeffreys posterior mean of an accuracy, in (0, 1)."""
    return (float(tp_total) + 0.5) / (float(p_total) + 1.0)


def shrink(t, n, r, m):
    """(t + m r) / (n + m), the shrunk confidence; ``m`` > 0 (arrays broadcast)."""
    t = np.maximum(np.asarray(t, dtype=np.float64), 0.0)
    n = np.maximum(np.asarray(n, dtype=np.float64), t)
    full = np.broadcast_shapes(np.shape(t), np.shape(n), np.shape(r), np.shape(m))
    if np.ndim(t) == 0 or np.shape(t) != full or np.shape(n) != full:
        return np.clip(np.add(t, np.multiply(m, r)) / np.add(n, m), 0.0, 1.0)
    # in place, in the fresh t and n: the same operations as (t + m r) / (n + m), with two
    # arrays of the rows' size where four were (peak memory; a third for m r where r or m is
    # one)
    n += m
    t += np.multiply(m, r)
    t /= n
    del n
    return np.clip(t, 0.0, 1.0, out=t)


def loo_nll_grid(t, n, tp, fp, r, grid=M_GRID) -> np.ndarray:
    """Summed leave-one-out NLL of the shrunk curve for each m in ``grid``.

    Parameters
    ----------
    t, n : ndarray (rows,)
        Local TP and positive counts at each row's score, *including* the row.
    tp, fp : ndarray (rows,)
        The row's TP and FP weights (1/0 per sample, counts for bins); each unit of weight
        is left out in turn.
    r : ndarray (rows,) or float
        Reference confidence at each row's score.
    grid : ndarray (G,)
        Candidate pseudo-counts (> 0).

    Returns
    -------
    ndarray (G,)
        Loss per candidate, with confidences clipped as in topcal.metrics.
    """
    t = np.asarray(t, dtype=np.float64)[:, None]
    n = np.asarray(n, dtype=np.float64)[:, None]
    r = np.broadcast_to(np.asarray(r, dtype=np.float64), (t.shape[0],))[:, None]
    tp = np.asarray(tp, dtype=np.float64)
    fp = np.asarray(fp, dtype=np.float64)
    m = np.asarray(grid, dtype=np.float64)[None, :]
    den = np.maximum(n - 1.0, 0.0) + m
    out = np.zeros(m.shape[1])
    a = tp > 0
    if a.any():
        c = np.clip(
            (np.maximum(t[a] - 1.0, 0.0) + m * r[a]) / den[a], PROB_CLIP, 1.0 - PROB_CLIP
        )
        out -= tp[a] @ np.log(c)
    z = fp > 0
    if z.any():
        c = np.clip(
            (np.minimum(t[z], np.maximum(n[z] - 1.0, 0.0)) + m * r[z]) / den[z],
            PROB_CLIP,
            1.0 - PROB_CLIP,
        )
        out -= fp[z] @ np.log1p(-c)
    return out


#: Rows per block in :func:`loo_nll_by_group`: a block x grid matrix of 0.8 MB, within a
#: core's cache (larger blocks measured no faster and were the largest fixed cost of a
#: shrunk fit's memory).
_BLOCK_ROWS = 2_048
#: Rows of weight 1 in one group whose confidences :func:`loo_nll_by_group` multiplies
#: before taking one logarithm (a logarithm costs ~30 multiplications here). Every factor is
#: >= PROB_CLIP = 1e-12, so a product of 16 is >= 1e-192: no underflow, and the log of the
#: product equals the sum of the logs to a few units in the last place of the product.
_PRODUCT_ROWS = 16


def _subtract_log_sums(out, c, w, g):
    """``out[g] -= sum over the rows of group g of w * log(c)`` (rows sorted by ``g``; ``c``
    is overwritten). Rows of weight 1 are multiplied in runs of :data:`_PRODUCT_ROWS` within
    a group and the logarithm is taken of the products."""
    starts = np.flatnonzero(np.concatenate([[True], g[1:] != g[:-1]]))
    if np.all(w == 1.0):
        pos = np.arange(g.size)
        first = np.repeat(starts, np.diff(np.append(starts, g.size)))  # each row's group start
        runs = np.flatnonzero((pos - first) % _PRODUCT_ROWS == 0)
        prod = np.multiply.reduceat(c, runs, axis=0)
        np.log(prod, out=prod)
        out[g[starts]] -= np.add.reduceat(prod, np.searchsorted(runs, starts), axis=0)
        return
    np.log(c, out=c)
    c *= w[:, None]
    out[g[starts]] -= np.add.reduceat(c, starts, axis=0)


def merge_equal_rows(t, n, tp, fp, r, group):
    """Rows with equal (group, t, n, r) merged into one with their TP and FP weights summed.

    The leave-one-out loss is linear in the weights, so :func:`loo_nll_by_group` of the
    merged rows equals that of the rows (up to summation order). Worth it where local counts
    are piecewise constant (a histogram: one (t, n, r) per bin and reference bin), not for
    continuous ones.
    """
    t, n, r = (
        np.asarray(v, dtype=np.float64) for v in (t, n, np.broadcast_to(r, np.shape(t)))
    )
    group = np.asarray(group, dtype=np.int64)
    order = np.lexsort((r, n, t, group))
    keys = [a[order] for a in (group, t, n, r)]
    new = np.zeros(order.size, dtype=bool)
    new[:1] = True
    for a in keys:
        new[1:] |= a[1:] != a[:-1]
    starts = np.flatnonzero(new)
    w_tp = np.add.reduceat(np.asarray(tp, dtype=np.float64)[order], starts)
    w_fp = np.add.reduceat(np.asarray(fp, dtype=np.float64)[order], starts)
    g, tt, nn, rr = (a[starts] for a in keys)
    return tt, nn, w_tp, w_fp, rr, g


_RUN_BLOCK = 1 << 16

#: Relative width of the count runs of :func:`count_runs`: counts at or above ``1 /
#: COUNT_RUN_WIDTH`` that differ by at most this share share a run.
COUNT_RUN_WIDTH = 1e-2


def count_runs(t, n, group, width=COUNT_RUN_WIDTH) -> np.ndarray:
    """Runs of consecutive cells (a table's cells in score order, ``group`` its class) with
    nearly equal counts.

    The local counts behind a step curve (the ``cum`` family's suffix counts) change at
    every distinct score; the leave-one-out loss, a smooth function of (t, n - t), hardly
    changes while both stay within a relative ``width``. A new run starts where the group
    changes or where the TP count t or the FP count n - t leaves its key: the count itself
    below ``1 / width`` (exact: small counts, where the loss is most sensitive, are never
    merged), else its bucket floor(log(count / L) / log1p(width)) on a log scale of relative
    ``width``. Returns the run number (0 ..) of every cell (int32 below 2^31 cells).
    """
    t = np.asarray(t, dtype=np.float64)
    n = np.asarray(n, dtype=np.float64)
    group = np.asarray(group)
    low = 1.0 / width
    step = np.log1p(width)
    new = np.ones(t.size, dtype=bool)
    if t.size > 1:
        np.not_equal(group[1:], group[:-1], out=new[1:])
    for a in range(
        0, max(t.size - 1, 0), _RUN_BLOCK
    ):  # blocks of cells: small temporaries (peak memory)
        b = min(a + _RUN_BLOCK + 1, t.size)  # cells a..b-1: the changes at a+1..b-1
        for x in (t[a:b], n[a:b] - t[a:b]):
            key = np.maximum(x, low)
            key /= low
            np.log(key, out=key)
            key /= step
            np.floor(key, out=key)
            key += low
            np.copyto(key, x, where=x < low)
            new[a + 1 : b] |= key[1:] != key[:-1]
    run: np.ndarray = np.cumsum(
        new, dtype=np.int32 if t.size < np.iinfo(np.int32).max else np.int64
    )  # (peak memory)
    run -= 1
    return run


def merge_rows_by_run(run, n_runs, t, n, r, tp, fp):
    """Rows of one run merged into one TP row and one FP row at their weighted mean counts
    and reference.

    The leave-one-out loss is linear in the weights and smooth in (t, n, r), so the merged
    loss differs from the per-row loss by second-order terms in the spread of the counts
    within a run (:func:`count_runs`: none for exact runs, relative ``COUNT_RUN_WIDTH`` at
    most). ``run`` is each row's run (0 .. n_runs - 1); non-decreasing runs (as
    :func:`count_runs` numbers a table's cells) are summed by ``reduceat``, others by
    ``bincount``. Returns (t, n, tp, fp, r, run) of the merged rows (one or two per occupied
    run).
    """
    out = []
    run = np.asarray(run)
    ordered = run.size > 0 and bool(
        np.all(run[1:] >= run[:-1])
    )  # count_runs' runs: sums by reduceat
    if ordered:
        starts = np.flatnonzero(np.concatenate([[True], run[1:] != run[:-1]]))
        ids = run[starts]

        def total(x):
            return np.add.reduceat(x, starts)
    else:
        ids = np.arange(n_runs)

        def total(x):
            return np.bincount(run, x, minlength=n_runs)

    for w, is_tp in (
        (np.asarray(tp, dtype=np.float64), True),
        (np.asarray(fp, dtype=np.float64), False),
    ):
        wsum = total(w)
        keep = np.flatnonzero(wsum > 0)
        ws = wsum[keep]
        c = ids[keep]
        mean = [total(w * np.broadcast_to(v, w.shape))[keep] / ws for v in (t, n, r)]
        zero = np.zeros(c.size)
        out.append(
            (mean[0], mean[1], ws if is_tp else zero, zero if is_tp else ws, mean[2], c)
        )
    return tuple(np.concatenate([a, b]) for a, b in zip(*out))


#: Rows are merged by cell (:func:`merge_rows_by_cell`) only where that divides their number
#: by at least this factor; below it the per-row loss is cheap enough and stays exact.
CELL_MERGE_GAIN = 4


def merge_rows_by_cell(cell, score, tp, fp, n_cells):
    """Rows of one cell merged into one TP and one FP row at their weighted mean score.

    For methods whose local counts are *smooth* in the score (the ``kde`` family: t and n
    are linear in the score within a cell of the class's table): the rows of a cell (cells
    numbered 0 .. n_cells - 1 across all classes, so a cell belongs to one class) become one
    row holding their summed TP weight at the TP-weighted mean score, and one holding their
    summed FP weight at the FP-weighted mean score. The leave-one-out loss is linear in the
    weights and smooth in the score, so the merged loss differs from the per-row loss only
    by the loss's curvature within a cell (second order in the cell width: its first-order
    term cancels at the weighted mean). Returns (score, tp, fp, cell) of the merged rows.
    """
    cell = np.asarray(cell, dtype=np.int64)
    score = np.asarray(score, dtype=np.float64)
    out = []
    for w, is_tp in (
        (np.asarray(tp, dtype=np.float64), True),
        (np.asarray(fp, dtype=np.float64), False),
    ):
        wsum = np.bincount(cell, w, minlength=n_cells)
        ssum = np.bincount(cell, w * score, minlength=n_cells)
        c = np.flatnonzero(wsum > 0)
        s = ssum[c] / wsum[c]
        out.append(
            (
                s,
                wsum[c] if is_tp else np.zeros(c.size),
                np.zeros(c.size) if is_tp else wsum[c],
                c,
            )
        )
    return tuple(np.concatenate([a, b]) for a, b in zip(*out))


def loo_nll_by_group(t, n, tp, fp, r, group, n_groups, grid=M_GRID) -> np.ndarray:
    """:func:`loo_nll_grid` of every group at once: shape (n_groups, G).

    Row ``i`` belongs to group ``group[i]``; groups without rows get 0. The rows are sorted
    by group once and their per-row losses summed per group block by block, so the cost is
    linear in the rows and does not grow with the number of groups (no per-group pass over
    the rows), in blocks of :data:`_BLOCK_ROWS` rows (memory: two block x grid matrices).
    Rows of weight 1 (per-sample data) take one logarithm per :data:`_PRODUCT_ROWS` rows (of
    their confidences' product) and a false positive's log(1 - c) is taken as the log of 1 -
    c, not log1p(-c): equal to :func:`loo_nll_grid` per group within 1e-12 relative (tested;
    the grid's losses differ by far more than that, so the chosen pseudo-count is the same).
    """
    t = np.asarray(t, dtype=np.float64)
    n = np.asarray(n, dtype=np.float64)
    tp = np.asarray(tp, dtype=np.float64)
    fp = np.asarray(fp, dtype=np.float64)
    r = np.broadcast_to(np.asarray(r, dtype=np.float64), t.shape)
    group = np.asarray(group, dtype=np.int64)
    m = np.asarray(grid, dtype=np.float64)[None, :]
    G = m.shape[1]
    out = np.zeros((n_groups, G))
    order = class_order(group, n_groups)
    buf = np.empty((min(_BLOCK_ROWS, order.size), G))
    den = np.empty_like(buf)
    for a in range(0, order.size, _BLOCK_ROWS):
        rows = order[a : a + _BLOCK_ROWS]
        g = group[rows]
        tt, nn, rr = t[rows], n[rows], r[rows]
        nm1 = np.maximum(nn - 1.0, 0.0)
        # TP left out: (max(t - 1, 0) + m r) / (n - 1 + m); FP left out: 1 - (min(t, n - 1)
        # + m r) / (n - 1 + m)
        for w, head, is_tp in (
            (tp[rows], np.maximum(tt - 1.0, 0.0), True),
            (fp[rows], np.minimum(tt, nm1), False),
        ):
            sel = np.flatnonzero(w > 0)
            if not sel.size:
                continue
            c = np.multiply(
                m, rr[sel, None], out=buf[: sel.size]
            )  # (rows, G), transformed in place
            c += head[sel, None]
            c /= np.add(nm1[sel, None], m, out=den[: sel.size])
            np.clip(c, PROB_CLIP, 1.0 - PROB_CLIP, out=c)
            if not is_tp:
                np.subtract(1.0, c, out=c)
            _subtract_log_sums(out, c, w[sel], g[sel])
    return out


def choose_m(losses: np.ndarray, grid=M_GRID) -> float:
    """The pseudo-count with the smallest loss (the smallest one on ties)."""
    return float(np.asarray(grid)[int(np.argmin(losses))])


#: Nats of leave-one-out loss within which a weaker pseudo-count is not ruled out under
#: ``shrinkage="class"`` (each class's own loss curve; :func:`interval_m`).
INTERVAL_SLACK = 5.0
#: Two-sided level of the likelihood-ratio range of the one pseudo-count under
#: ``shrinkage="auto"`` (:func:`interval_slack`).
INTERVAL_LEVEL = 0.95


def interval_slack(n_classes: int) -> float:
    """Nats of summed leave-one-out loss within which a weaker pseudo-count is not ruled out
    under ``shrinkage="auto"``, from ``n_classes`` classes with rows: q^2 / 2, q the
    two-sided :data:`INTERVAL_LEVEL` quantile of Student's t with ``n_classes - 1`` degrees
    of freedom.

    The pseudo-count is one parameter, a concentration of the classes around the reference:
    the classes are its sampling units. A likelihood-ratio range of one parameter keeps the
    values within z^2 / 2 nats of the best (1.92 at 95%); with the loss's scale known only
    from K classes, z becomes Student's t with K - 1 degrees of freedom (the small-sample
    correction of a t-interval): 5.06 nats at 4 classes, 1.96 at 100, 1.92 at 1,000. Fewer
    than 2 classes: inf (nothing rules out the weakest pseudo-count).
    """
    if n_classes < 2:
        return float("inf")
    return 0.5 * float(stdtrit(n_classes - 1, 0.5 * (1.0 + INTERVAL_LEVEL))) ** 2


def interval_m(losses: np.ndarray, *, rule, m: np.ndarray, grid=M_GRID) -> np.ndarray:
    """Per class, the pseudo-count of the interval: the smallest one on the grid whose
    leave-one-out loss is within a slack of the smallest.

    The chosen pseudo-count is the concentration of the classes' curves around the reference
    that the data fit best; an interval that took it as known would trust a prior pinned
    down by few rows (a few classes, a few dozen rows each: its shrunk-Beta posterior
    covered 0.51 of four crossing curves at nominal 0.90). The weakest pseudo-count the data
    do not rule out (the same idea as ``hier-*``'s strength range, docs/intervals.md) widens
    the interval exactly where the loss cannot tell the strengths apart, and leaves it near
    the chosen one where many classes can. ``rule``: "auto" (one loss curve summed over
    classes, slack :func:`interval_slack` of the classes with rows: 5.06 nats at four
    classes, 1.92 at a thousand), "class" (each class its own, slack :data:`INTERVAL_SLACK`)
    or a fixed number (the interval takes ``m`` as given). ``losses``: (K, grid) per-class
    losses (a class without rows: all 0).
    """
    m = np.asarray(m, dtype=np.float64)
    g = np.asarray(grid, dtype=np.float64)
    if not isinstance(rule, str):
        return m.copy()
    if rule == "auto":
        tot = losses.sum(axis=0)
        slack = interval_slack(int(np.count_nonzero(np.any(losses != 0.0, axis=1))))
        return np.full(m.shape, g[int(np.argmax(tot <= tot.min() + slack))])
    ok = losses <= losses.min(axis=1, keepdims=True) + INTERVAL_SLACK
    return g[np.argmax(ok, axis=1)]


class ShrinkageConstraint:
    """The ``shrinkage`` parameter: "auto", "class", or a pseudo-count >= 0."""

    rules = ("auto", "class")

    def ok(self, v) -> bool:
        if isinstance(v, str):
            return v in self.rules
        if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)):
            return False
        return bool(
            0 <= v <= 1e12
        )  # also false for NaN; no float(): an int above 1.8e308 would overflow

    def __str__(self) -> str:
        return (
            "'auto' (one pseudo-count for all classes, by leave-one-out NLL), 'class' (one "
            "per class), or a number in [0, 1e12] (0: the paper's unshrunk estimator)"
        )
