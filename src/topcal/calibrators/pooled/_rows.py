"""The rows of a ``hier-platt`` / ``hier-beta`` fit (:mod:`.hierarchical`): rows of equal
(class, score) merged where that pays, the rows grouped by class with the solver's buffers
(:class:`Rows`), and the binned rows of the strength scan (:func:`binned_rows`;
:mod:`._solve`)."""

from __future__ import annotations

from typing import Any

import numpy as np

from ...data import TopLabelData, canonical_order, class_order
from ..foldmemo import memo, shared

__all__ = [
    "BINS",
    "BIN_GAIN",
    "ROWS_PER_BIN",
    "MERGE_GAIN",
    "Rows",
    "binned_rows",
    "may_merge",
    "merge_equal_rows",
]

#: Rows with equal (class, score) are merged into one (:func:`merge_equal_rows`) where that
#: divides their number by at least this factor (rounded or binned scores); below it the
#: merge's sort costs more than it saves
MERGE_GAIN = 1.25
#: The strength scan's binned rows (:func:`binned_rows`): per class, equal bins of logit(s)
#: over the rows' range, about one per ``ROWS_PER_BIN`` rows of a class of average size (a
#: power of two, ``BINS`` at most), used where they divide the rows by at least ``BIN_GAIN``
BINS = 2048
ROWS_PER_BIN = 8
BIN_GAIN = 8
#: ... and where there are at least this many rows: below, a fit's time is numpy's per-call
#: overhead, and the binned scan's 13 fits would cost more than the 10 fits on the rows they
#: save
BIN_MIN_ROWS = 16_384


def may_merge(score: np.ndarray) -> bool:
    """False where the scores alone show that :func:`merge_equal_rows` would not merge (its
    sort skipped).

    A lower bound on the number of distinct scores, which bounds the distinct (class, score)
    pairs from below: the number of occupied slots when each score's bits are hashed into a
    table of >= 8 x n slots, less one (two equal scores share a slot but 0.0 and -0.0, so
    occupied slots - 1 <= distinct scores; each NaN counts as distinct in the merge, and
    shares one slot here). Where that bound times :data:`MERGE_GAIN` exceeds n, the merge
    would not pay (the same decision as counting the pairs); otherwise (ties, or an unlucky
    hash) the exact count decides. One pass and a table of 8-16 n bytes, against a two-key
    sort (~20 x longer at 10^5 rows).
    """
    n = score.size
    slots = 1 << max(int(8 * n - 1).bit_length(), 4)
    h = np.ascontiguousarray(score, dtype=np.float64).view(np.uint64) * np.uint64(
        0x9E3779B97F4A7C15
    )
    h >>= np.uint64(64 - slots.bit_length() + 1)
    seen = np.zeros(slots, dtype=bool)
    seen[h] = True
    return not (np.count_nonzero(seen) - 1) * MERGE_GAIN > n


def merge_equal_rows(data: TopLabelData, cols):
    """(cols, tp, fp, class) of the fit's rows, rows of equal (class, score) merged into one
    where that pays.

    ``cols``: the feature columns (a list of (n,) arrays). The features are a function of
    the score, and the NLL, its derivatives and the approximate LOO loss are sums over rows
    linear in the TP and FP weights at the row's features, so a merged row holding the
    summed weights gives the same fit (lossless; up to the order of the sums: tested).
    Merged only where it divides the rows by :data:`MERGE_GAIN` (scores rounded to a few
    digits, binned data); otherwise the rows as given.
    """
    n = data.n_rows
    if n < 2 or not may_merge(data.score):
        return cols, data.tp, data.fp, data.pred
    # any order by (class, score) serves; a fold's canonical one is there already
    order = (
        memo(data, "canonical_order", lambda: canonical_order(data))
        if shared(data)
        else np.lexsort((data.score, data.pred))
    )
    pred, score = data.pred[order], data.score[order]
    new = np.empty(n, dtype=bool)
    new[0] = True
    np.not_equal(pred[1:], pred[:-1], out=new[1:])
    new[1:] |= score[1:] != score[:-1]
    starts = np.flatnonzero(new)
    if starts.size * MERGE_GAIN > n:
        return cols, data.tp, data.fp, data.pred
    first = order[starts]
    return (
        [c[first] for c in cols],
        np.add.reduceat(data.tp[order], starts),
        np.add.reduceat(data.fp[order], starts),
        pred[starts],
    )


class Rows:
    """Rows with weight, grouped by class: feature columns, tp, fp, class sizes.

    The rows are stored class by class (a stable sort: each class keeps its rows' order, so
    a per-class sum adds the same numbers in the same order). The features are the columns
    ``cols`` and a last, constant one (the intercept), which is never stored: a product with
    it is the other factor itself, bit for bit, so it is skipped. The pairwise products of
    the columns (the Hessian's and the leverages' terms, x_i x_j) are made where used, into
    a scratch buffer.

    Memory: every row-length intermediate of the Newton and LOO passes is written into a few
    buffers kept with the rows (``out=``; no fresh row-length arrays, whose page faults cost
    as much as the arithmetic): S, T, E (scratch), M (margins) and two probability buffers
    (the Newton iterate's and the trial step's). The arithmetic is the former allocating
    code's, operation for operation, so the fits are bit for bit those of before (tested:
    test_platt_beta_memory.py).
    """

    def __init__(self, cols, tp, fp, g, k):
        keep = np.flatnonzero((tp + fp) > 0)
        if k == 1:
            self.counts = np.array([keep.size])
            idx = None if keep.size == tp.size else keep  # None: all rows, in their order
        else:
            g = g.take(keep)
            self.counts = np.bincount(g, minlength=k)
            # the kept rows by class: class_order is np.argsort(g, kind="stable"), faster
            idx = keep.take(class_order(g, k))
        del keep, g
        if idx is None:  # the caller's arrays (only read)
            self.tp, self.fp, self.cols = tp, fp, list(cols)
        else:
            self.tp, self.fp = tp.take(idx), fp.take(idx)
            self.cols = [c.take(idx) for c in cols]
        del idx
        self.w = self.tp + self.fp
        self.k = k
        self.p = len(self.cols) + 1  # the constant column last
        self.is_pos, self.is_neg = self.tp > 0, self.fp > 0
        self.tp_pos, self.fp_neg = self.tp[self.is_pos], self.fp[self.is_neg]
        self._has = self.counts > 0
        self._starts = (np.cumsum(self.counts) - self.counts)[self._has]
        self.pairs = [(i, j) for i in range(self.p) for j in range(i, self.p)]

    def __getattr__(self, name):
        """The buffers, made on first use (after the caller has dropped what the rows were
        made from)."""
        if name not in ("S", "T", "E", "M", "Q", "_sign"):
            raise AttributeError(name)
        n = self.tp.size
        self.S, self.T, self.E, self.M = (np.empty(n) for _ in range(4))
        self.Q = (
            np.empty(n),
            np.empty(n),
        )  # the Newton iterate's probabilities and the trial step's
        self._sign = np.empty(n, dtype=bool)
        return getattr(self, name)

    def pair(self, i, j, scratch):
        """x_i x_j per row: into ``scratch`` for two stored columns (computed where used: no
        stored products), the column itself where j is the constant one, None (ones) for
        both constant."""
        last = self.p - 1
        if i == last:
            return None
        if j == last:
            return self.cols[i]
        return np.multiply(self.cols[i], self.cols[j], out=scratch)

    def row_classes(self) -> np.ndarray:
        """The class of every stored row (n,): the rows are stored class by class."""
        return np.repeat(np.arange(self.k), self.counts)

    def sums(self, v):
        """Per-class sums of v (K,) (``np.add.reduceat`` over the class blocks: ~20 x
        ``np.bincount``)."""
        out = np.zeros(self.k)
        if self._starts.size:
            out[self._has] = np.add.reduceat(v, self._starts)
        return out

    def per_row(self, v):
        """v (K,) spread to the rows (n,)."""
        return np.repeat(v, self.counts)

    def loss(self, m, q):
        """Per-class NLL at margins m; the rows' probabilities expit(m) into q (a buffer,
        not S, T, E, m).

        The NLL is tp softplus(-m) + fp softplus(m) summed per class, softplus(+-m) =
        max(+-m, 0) + log1p(e) with e = exp(-|m|) as :func:`~topcal._numeric.softplus_both`
        (rows of weight 0/1 get its numbers bit for bit), and expit(m) = (1 or e) / (1 + e)
        from the same e (within 4.5e-16 relative of scipy's ``expit``, which takes one more
        exp: Newton needs both at every iterate); "1 or e" is max(e, [m >= 0]) (e <= 1), the
        value of np.where(m >= 0, 1, e) at a tenth of its cost.
        """
        s, t, e = self.S, self.T, self._exp_neg_abs(m)
        np.log1p(e, out=s)
        np.multiply(self.w, s, out=s)
        np.maximum(m, 0.0, out=t)
        np.multiply(t, self.fp, out=t)
        s += t
        np.minimum(m, 0.0, out=t)  # -max(-m, 0) (up to the sign of a zero)
        np.multiply(t, self.tp, out=t)
        s -= t  # s + max(-m, 0) tp: s - x is s + (-x), bit for bit
        self._expit(m, e, q)
        return self.sums(s)

    def probs(self, m, q):
        """The rows' probabilities expit(m) into q, as :meth:`loss` makes them (bit for bit;
        no loss: one exp per row, not an exp and a log1p)."""
        self._expit(m, self._exp_neg_abs(m), q)
        return q

    def _exp_neg_abs(self, m):
        """exp(-|m|) into E."""
        e = self.E
        np.abs(m, out=e)
        # (np.copysign(m, -1): the same in one pass, 4 x the time of two)
        np.negative(e, out=e)
        return np.exp(e, out=e)

    def _expit(self, m, e, q):
        """expit(m) = (1 or e) / (1 + e) into q, from e = exp(-|m|) (T: scratch)."""
        np.greater_equal(m, 0.0, out=self._sign)
        np.maximum(e, self._sign, out=q)
        q /= np.add(e, 1.0, out=self.T)

    def margin(self, theta, out):
        """x' theta_k per row, into ``out`` (T: scratch)."""
        np.multiply(self.cols[0], self.per_row(theta[:, 0]), out=out)
        for i in range(1, self.p - 1):
            out += np.multiply(self.cols[i], self.per_row(theta[:, i]), out=self.T)
        out += self.per_row(theta[:, self.p - 1])
        return out

    def gradient(self, r, scratch):
        """Per-class sums of r x (K, p)."""
        return np.stack(
            [self.sums(np.multiply(r, c, out=scratch)) for c in self.cols] + [self.sums(r)],
            axis=1,
        )

    def hessian(self, h, scratch):
        """Per-class sum of h x x' (K, p, p)."""
        p = self.p
        H = np.empty((self.k, p, p))
        for i, j in self.pairs:
            xx = self.pair(i, j, scratch)
            H[:, i, j] = H[:, j, i] = self.sums(
                h if xx is None else np.multiply(h, xx, out=scratch)
            )
        return H

    def leverage(self, Hinv, out, scratch):
        """x' Hinv_k x per row (Hinv: (K, p, p), symmetric), into ``out``."""
        out.fill(0.0)
        for i, j in self.pairs:
            # (1 or 2) x per_row(Hinv_ij): exact either way, so the factor goes in before
            # the spread
            v = self.per_row((1.0 if i == j else 2.0) * Hinv[:, i, j])
            xx = self.pair(i, j, scratch)
            out += v if xx is None else np.multiply(v, xx, out=scratch)
        return out


def binned_rows(cols, tp, fp, g, k, u) -> tuple[Any, Any, Any, Any] | None:
    """(cols, tp, fp, class) of approximate rows for the strength scan; None where they do
    not pay.

    The rows of each class are put in equal bins of ``u`` (logit(s): the features are
    functions of it) over the rows' range; each bin gives one row of its TP weight at the
    TP-weighted mean of its rows' features and one of its FP weight at the FP-weighted mean.
    The NLL of a bin is then its rows' up to the second-order term (1/2) l''(m) sum_i w_i
    (m_i - m)^2 (the first-order term vanishes at the mean): about h^2 / 24 x l'' x slope^2
    per unit of weight for bins h wide in u. Used to find where the fits on the rows start
    (:func:`._solve.binned_search`), never as the fit. None where the binned rows would not
    divide the rows by :data:`BIN_GAIN`, or below :data:`BIN_MIN_ROWS` rows.
    """
    n = tp.size
    if n < BIN_MIN_ROWS:
        return None
    bins = min(BINS, 1 << max(int(n // (ROWS_PER_BIN * k)).bit_length() - 1, 0))
    if bins < 16:
        return None
    lo, hi = float(u.min()), float(u.max())
    if not hi > lo:
        return None
    key = np.subtract(u, lo)
    key *= bins / (hi - lo)
    key = key.astype(np.int64)
    np.minimum(key, bins - 1, out=key)
    key += g * bins
    size = k * bins
    parts = []
    for wt in (tp, fp):
        total = np.bincount(key, wt, minlength=size)
        cell = np.flatnonzero(total > 0)
        parts.append((wt, total, cell))
    if (parts[0][2].size + parts[1][2].size) * BIN_GAIN > n:
        return None
    out_cols: list[list[Any]] = [[] for _ in cols]
    weights, classes = [], []
    for wt, total, cell in parts:
        w = total[cell]
        for c, out in zip(cols, out_cols):
            out.append(np.bincount(key, wt * c, minlength=size)[cell] / w)
        weights.append(w)
        classes.append(cell // bins)
    ntp = weights[0].size
    w = np.concatenate(weights)
    return (
        [np.concatenate(o) for o in out_cols],
        np.concatenate([w[:ntp], np.zeros(w.size - ntp)]),
        np.concatenate([np.zeros(ntp), w[ntp:]]),
        np.concatenate(classes),
    )
