"""Small numeric helpers shared by the metrics and the calibrators.

They sit at the bottom of the layers (docs/architecture.md) so that the metrics and the
calibration methods use one definition each: the probability clip, the clipped binary log
loss, the weighted quantile bin edges and the bin index of a score.
"""

from __future__ import annotations

import numpy as np

__all__ = [
    "PROB_CLIP",
    "one_blas_thread",
    "inverse_pd",
    "inverse_sym_small",
    "linspace_rows",
    "solve_sym_small",
    "binary_nll",
    "dot",
    "row_max",
    "softplus_both",
    "bin_index",
    "distinct",
    "found_in",
    "weighted_quantile_edges",
    "SortedTables",
]

#: Confidences are clipped to [PROB_CLIP, 1 - PROB_CLIP] inside the NLL, so a confident
#: mistake costs at most -log(1e-12) ~ 27.6 nats instead of inf. (scikit-learn's log_loss
#: clips at the dtype's eps, ~2.2e-16; at 1e-12 the upper clip 1 - 1e-12 is still resolved
#: by float64, to ~1e-4 relative.)
PROB_CLIP = 1e-12


#: (number of imported modules, threadpoolctl controller) of :func:`one_blas_thread`
_BLAS_CONTROLLER: list = [-1, None]


def one_blas_thread():
    """A context in which the BLAS libraries run on one thread (threadpoolctl).

    ``threadpool_limits(1, user_api="blas")`` scans the process's loaded libraries on every
    entry (0.8 ms on the 2-core box; an auto fit at 10^4 x 10 entered it 16 times); the
    controller made by that scan is kept here and made again only after a module import (a
    new extension module can bring its own BLAS, e.g. scipy.optimize's)."""
    import sys

    if _BLAS_CONTROLLER[0] != len(sys.modules):
        from threadpoolctl import ThreadpoolController

        _BLAS_CONTROLLER[1] = ThreadpoolController()
        _BLAS_CONTROLLER[0] = len(sys.modules)
    return _BLAS_CONTROLLER[1].limit(limits=1, user_api="blas")


def binary_nll(tp, fp, conf):
    """Binary NLL of weights ``tp`` (label 1) and ``fp`` (label 0) at confidence ``conf``,
    elementwise.

    -[tp log c + fp log(1 - c)] with c clipped to [PROB_CLIP, 1 - PROB_CLIP].
    """
    c = np.clip(conf, PROB_CLIP, 1.0 - PROB_CLIP)
    if np.ndim(c) == 0 or np.shape(c) != np.broadcast_shapes(
        np.shape(c), np.shape(tp), np.shape(fp)
    ):
        return -(tp * np.log(c) + fp * np.log1p(-c))
    # in place: the same operations (a product's operands commute exactly), two arrays of
    # c's size where the expression above holds four (peak memory)
    out = np.log(c)
    out *= tp
    np.negative(c, out=c)
    np.log1p(c, out=c)
    c *= fp
    out += c
    del c
    return np.negative(out, out=out)


def dot(a, b) -> float:
    """sum(a * b) of two 1-d float arrays, without BLAS.

    OpenBLAS runs its dot product on several threads above about 10^4 elements; on a busy
    machine waking them costs ~100 x the sum itself (10^5 elements on 2 loaded cores: 35 ms
    against 0.34 ms). ``einsum`` sums in one thread (its own order: a result may differ from
    BLAS's in the last bits).
    """
    return float(np.einsum("i,i->", a, b))


#: Up to this many columns :func:`row_max` runs column by column: numpy's reduction along a
#: short contiguous last axis is slow (10 columns: 4-5 x the column loop; 16: 2-3 x; 24:
#: even).
ROW_MAX_LOOP = 16


def row_max(x: np.ndarray, keepdims: bool = False) -> np.ndarray:
    """``x.max(axis=1, keepdims=keepdims)`` of a 2-d array, the same values (NaN
    propagated), taken column by column where the rows are short (:data:`ROW_MAX_LOOP`)."""
    if not 0 < x.shape[1] <= ROW_MAX_LOOP:
        return x.max(axis=1, keepdims=keepdims)
    m = x[:, 0].copy()
    for j in range(1, x.shape[1]):
        np.maximum(m, x[:, j], out=m)
    return m[:, None] if keepdims else m


def softplus_both(m: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(softplus(-m), softplus(m)), softplus(x) = log(1 + e^x), with one exp and one log1p
    for both.

    softplus(+-m) = max(+-m, 0) + log1p(exp(-|m|)): what ``np.logaddexp(0, +-m)`` computes,
    within 2 ulp (bit for bit on AVX2 processors, up to 1 ulp apart where numpy takes its
    AVX-512 paths; tested), at about half the cost of the two calls.
    """
    s = np.log1p(np.exp(-np.abs(m)))
    return np.maximum(-m, 0.0) + s, np.maximum(m, 0.0) + s


def distinct(a: np.ndarray) -> np.ndarray:
    """``np.unique(a)`` of a 1-d array by one sort: numpy 2.3-2.4's hash table for plain
    ``np.unique`` of integers takes ~80 x a sort's time where most values are distinct
    (10^6 64-bit hashes: 2.5 s against 0.03 s)."""
    s = np.sort(np.asarray(a).ravel())
    if s.size < 2:
        return s
    keep = np.empty(s.size, dtype=bool)
    keep[0] = True
    np.not_equal(s[1:], s[:-1], out=keep[1:])
    return s[keep]


def found_in(needles: np.ndarray, haystack: np.ndarray) -> np.ndarray:
    """``np.isin(needles, haystack)`` for a few needles among many values, without the
    unique of the haystack that ``np.isin`` takes (:func:`distinct`): each haystack value
    looked up among the sorted needles."""
    needles = np.asarray(needles)
    found = np.zeros(needles.size, dtype=bool)
    if not needles.size or not np.size(haystack):
        return found
    order = np.argsort(needles, kind="stable")
    ranked = needles[order]
    pos = np.searchsorted(ranked, np.asarray(haystack).ravel())
    np.minimum(pos, ranked.size - 1, out=pos)
    hit = ranked[pos] == np.asarray(haystack).ravel()
    # every needle equal to a found value (repeated needles share their value)
    values = distinct(ranked[pos[hit]])
    found[order] = np.isin(ranked, values)
    return found


def bin_index(edges: np.ndarray, score: np.ndarray) -> np.ndarray:
    """Index i of the bin (edges[i], edges[i+1]] holding each score.

    Scores at or below edges[0] go to bin 0, above edges[-1] to the last bin.
    """
    return np.clip(np.searchsorted(edges, score, side="left") - 1, 0, len(edges) - 2)


def weighted_quantile_edges(
    score: np.ndarray, weight: np.ndarray, n_bins: int, lo: float, hi: float
) -> np.ndarray:
    """Edges of ``n_bins`` bins holding (as near as ties allow) equal weight.

    Interior edges are the weighted quantiles j / n_bins of the scores; equal edges (heavy
    ties) are merged, so fewer bins may result. The outer edges are the declared score
    range.
    """
    order = np.argsort(score, kind="stable")
    s, w = score[order], weight[order]
    keep = w > 0
    s, w = s[keep], w[keep]
    cw = np.cumsum(w)
    targets = cw[-1] * np.arange(1, n_bins) / n_bins
    inner = s[np.minimum(np.searchsorted(cw, targets, side="left"), s.size - 1)]
    edges = np.unique(np.concatenate([[lo], inner, [hi]]))
    return edges[(edges >= lo) & (edges <= hi)]


class SortedTables:
    """``np.searchsorted(table, x, side="left")`` into one of several sorted tables, without
    sorting ``x``.

    The tables (each ascending; stored end to end in ``values``, table g at
    ``values[offsets[g]:offsets[g + 1]]``) get a uniform grid of ``BUCKETS_PER_ENTRY``
    buckets per entry over their own range, and each bucket the position of its first entry.
    A query finds its bucket by arithmetic, gathers its position and the entry there (two
    random accesses, where a binary search into a long table makes ~log2 of its length) and
    steps over the few entries of its bucket that lie below it; rows still stepping after
    ``LINEAR_STEPS`` finish by bisection within their bucket, so crowded buckets (scores
    piled up in a narrow range) cost O(log) and never a long scan.

    Exact: the bucket of a value, ``floor((value - first) * scale)`` clipped, is monotone in
    the value under floating-point rounding too (a subtraction and a multiplication by the
    same positive number, rounded, never reverse an order), and the entries are bucketed by
    the same expression as the queries, so every entry in an earlier bucket is below the
    query and every one in a later bucket of its table is above it. The indices are those of
    ``np.searchsorted`` (tested against it).
    """

    #: Buckets per table entry. On the top scores of softmax outputs (crowded towards 1) 2
    #: leaves a quarter of the queries a step or more past their bucket's first entry; 4
    #: halves that but measured no faster, at twice the memory. ``paired`` tables keep, per
    #: bucket, its first position and the entry there as a float64 pair (one gather per
    #: query; 32 bytes per entry); the others the position only (int32 below 2^31 entries; 8
    #: bytes per entry) and gather the entry from the values, a second random access per
    #: query (at 10^6 rows ~10-30% slower lookups, for a quarter of the memory).
    BUCKETS_PER_ENTRY = 2
    #: Single steps before the rows still below their bucket's entries bisect instead.
    LINEAR_STEPS = 2

    def __init__(self, values: np.ndarray, offsets: np.ndarray, *, paired: bool = False):
        self._paired = bool(paired)
        values = np.asarray(values, dtype=np.float64)
        offsets = np.asarray(offsets, dtype=np.int64)
        G = offsets.size - 1
        size = np.diff(offsets)
        nb = np.maximum(1, self.BUCKETS_PER_ENTRY * size)
        first = np.zeros(G)
        span = np.zeros(G)
        has = size > 0
        first[has] = values[offsets[:-1][has]]
        span[has] = values[offsets[1:][has] - 1] - first[has]
        # span 0 (one entry, or equal ones): scale 0 puts every query in bucket 0
        self._first = first
        self._scale = np.divide(nb, span, out=np.zeros(G), where=span > 0)
        self._top = (nb - 1).astype(np.float64)
        self._bucket0 = np.concatenate([[0], np.cumsum(nb)])
        # entries with a +inf after each table (the stop of a scan that passes the table's
        # last entry); built with few full-length temporaries (at most ~2 arrays of 8 bytes
        # per entry beside what is kept)
        small = np.int32 if G < np.iinfo(np.int32).max else np.intp
        self._values = np.full(values.size + G, np.inf)
        if G > 1:
            pos = np.arange(values.size)
            pos += np.repeat(np.arange(G, dtype=small), size)  # each entry's table
            self._values[pos] = values
            del pos
        else:
            self._values[: values.size] = values
        self._offsets = offsets[:-1] + np.arange(G)
        self._ends = self._offsets + size  # the +inf after each table
        # the bucket grid: built by the first search (:meth:`build`)
        self._head: np.ndarray | None = None

    def build(self) -> "SortedTables":
        """Build the bucket grid now (else the first :meth:`positions` does): each bucket's
        first position (and entry, ``paired``), with temporaries of :data:`_CHUNK` entries
        (a fit builds it when its own scratch is freed, not while it is held)."""
        if self._head is not None:
            return self
        n_buckets = int(self._bucket0[-1])
        total = self._values.size
        if self._paired:
            head: np.ndarray = np.zeros((n_buckets + 1, 2))
            start = head[:, 0]
        else:
            head = np.zeros(
                n_buckets + 1, dtype=np.int32 if total < np.iinfo(np.int32).max else np.intp
            )
            start = head
        # every padded entry's bucket: a table's +inf falls in its last bucket (its first
        # where the scale is 0, as every query there), so the count of padded entries in the
        # buckets before one is the padded position of its first entry (the bucket after a
        # table's last is the next table's first). The buckets of the padded entries never
        # decrease: counted by chunks.
        for a in range(0, total, self._CHUNK):
            idx = np.arange(a, min(a + self._CHUNK, total))
            table = (
                np.searchsorted(self._offsets, idx, side="right") - 1
            )  # each padded entry's table
            with np.errstate(invalid="ignore"):  # +inf times scale 0
                q = self._bucket(self._values[idx], table)
            lo = int(q[0])
            count = np.bincount(q - lo)
            start[lo + 1 : lo + 1 + count.size] += count
        # the last row, past the last bucket, only bounds the bisection
        np.cumsum(start, out=start)
        if self._paired:
            for a in range(0, n_buckets, self._CHUNK):
                b = min(a + self._CHUNK, n_buckets)
                # (a one-entry table's later buckets start past its +inf, and are never
                # searched)
                head[a:b, 1] = self._values[
                    np.minimum(head[a:b, 0].astype(np.intp), total - 1)
                ]
            head[-1, 1] = np.inf
        self._head = head
        return self

    #: Entries (or buckets) per pass when the grid is built (bounds its temporaries: 64 KB
    #: arrays).
    _CHUNK = 1 << 13

    #: Up to this many tables :meth:`layout` copies table by table (else one scatter through
    #: an index).
    _COPY_TABLES = 10_000

    def _bucket(self, x: np.ndarray, group) -> np.ndarray:
        """Global bucket of each ``x`` in its table: floor of (x - first) * scale clipped to
        the table's buckets, plus its first bucket."""
        b = x - np.take(self._first, group)
        b *= np.take(self._scale, group)
        # fmax/fmin: an infinite query times scale 0 (NaN) goes to bucket 0
        np.fmax(b, 0.0, out=b)
        np.fmin(b, np.take(self._top, group), out=b)
        q = b.astype(np.intp)
        q += np.take(self._bucket0, group)
        return q

    def positions(self, x: np.ndarray, group=0) -> np.ndarray:
        """Where each ``x`` falls in the tables laid out end to end (:meth:`layout`).

        :meth:`search`'s index plus the table's start, in a layout with one slot after each
        table (so the index ``size``, past the last entry, is a slot of its own table).
        """
        x = np.asarray(x, dtype=np.float64)
        group = np.asarray(group, dtype=np.intp)
        v = self._values
        # inf * 0 for an infinite query into a one-value table
        with np.errstate(invalid="ignore"):
            q = self._bucket(x, group)
        if self.build()._paired:
            head = np.take(self._head, q, axis=0)  # (position, its entry): one gather for both
            j = head[:, 0].astype(np.intp)
            act = np.flatnonzero(head[:, 1] < x)
            del head
        else:
            # the bucket's first position, as intp (an int32 index would be converted by
            # every gather through it)
            j = np.take(self._head, q).astype(np.intp, copy=False)
            act = np.flatnonzero(v[j] < x)
        for _ in range(self.LINEAR_STEPS):
            if not act.size:
                break
            j[act] += 1
            act = act[v[j[act]] < x[act]]
        if (
            act.size
        ):  # a crowded bucket: bisect (lo, hi] where v[hi] >= x (a later bucket or the +inf)
            lo = j[act] + 1
            nxt = (
                self._head[q[act] + 1, 0].astype(np.intp)
                if self._paired
                else self._head[q[act] + 1]
            )
            hi = np.minimum(
                nxt, self._ends[group] if group.ndim == 0 else self._ends[group[act]]
            )
            xa = x[act]
            while True:
                more = lo < hi
                if not more.any():
                    break
                mid = (lo + hi) >> 1
                below = v[mid] < xa
                lo = np.where(more & below, mid + 1, lo)
                hi = np.where(more & ~below, mid, hi)
            j[act] = lo
        return j

    def search(self, x: np.ndarray, group=0) -> np.ndarray:
        """Index of each ``x`` in its table as ``searchsorted(side="left")`` gives it.

        ``group`` is the table of each query (an int array like ``x``) or of all of them (an
        int). ``x`` must not hold NaN (the rows of a :class:`TopLabelData` never do).
        """
        group = np.asarray(group, dtype=np.intp)
        j = self.positions(x, group)
        j -= self._offsets[group]
        return j

    def layout(self, per_entry: np.ndarray, after: np.ndarray | None = None) -> np.ndarray:
        """Values per table entry (first axis, in ``values``' order) laid out for
        :meth:`positions`.

        The slot after each table, where queries above its last entry land, holds ``after``
        (one row per table) or, by default, a copy of the table's last entry (zeros for an
        empty table): a gather at :meth:`positions` then gives
        ``per_entry[min(searchsorted(...), size - 1)]`` of the query's table.
        """
        return self.layout_of(self._ends - self._offsets, per_entry, after)

    @staticmethod
    def slot_starts(size) -> np.ndarray:
        """Where each table's slots start in the layout of tables of ``size`` entries (one
        slot after each table, which :meth:`layout` fills): the tables' starts in
        :meth:`positions`."""
        size = np.asarray(size, dtype=np.int64)
        return np.cumsum(size + 1) - (size + 1)

    @classmethod
    def layout_of(
        cls, size, per_entry: np.ndarray, after: np.ndarray | None = None
    ) -> np.ndarray:
        """:meth:`layout` for tables of ``size`` entries each, without the tables (their
        values are not needed: a caller may lay out values before it builds the tables, for
        peak memory)."""
        per_entry = np.asarray(per_entry)
        size = np.asarray(size, dtype=np.int64)
        starts = cls.slot_starts(size)
        ends = starts + size
        out = np.zeros(
            (int(size.sum()) + size.size,) + per_entry.shape[1:], dtype=per_entry.dtype
        )
        if (
            size.size <= cls._COPY_TABLES
        ):  # a slice copy per table: no entry-length index arrays (memory)
            a = 0
            for start, n in zip(starts.tolist(), size.tolist()):
                out[start : start + n] = per_entry[a : a + n]
                a += n
        else:
            out[np.arange(per_entry.shape[0]) + np.repeat(np.arange(size.size), size)] = (
                per_entry
            )
        if after is not None:
            out[ends] = after
        else:
            full = ends > starts
            out[ends[full]] = out[ends[full] - 1]
        return out


def inverse_pd(h: np.ndarray):
    """Inverse of a symmetric positive definite matrix, None where it is not (Cholesky
    fails)."""
    if h.size == 0 or not np.all(np.isfinite(h)):
        return None
    try:
        c = np.linalg.cholesky(h)
    except np.linalg.LinAlgError:
        return None
    ci = np.linalg.inv(c)
    return ci.T @ ci


def _adjugate_sym(h: np.ndarray):
    """(adjugate entries by (i, j), determinant) of each symmetric (p, p) matrix of h (K, p,
    p), p <= 3, from the lower triangle, each entry a contiguous (K,) array."""
    p = h.shape[-1]
    cols = np.ascontiguousarray(h.reshape(h.shape[0], p * p).T)  # entry (i, j) at i p + j
    if p == 1:
        return {(0, 0): np.ones_like(cols[0])}, cols[0]
    if p == 2:
        a, b, d = cols[0], cols[2], cols[3]
        return {(0, 0): d, (1, 1): a, (0, 1): -b}, a * d - b * b
    a, b, c, d, e, f = cols[0], cols[3], cols[6], cols[4], cols[7], cols[8]
    A, B, C = d * f - e * e, c * e - b * f, b * e - c * d
    adj = {(0, 0): A, (0, 1): B, (0, 2): C, (1, 1): a * f - c * c, (1, 2): b * c - a * e}
    adj[(2, 2)] = a * d - b * b
    return adj, a * A + b * B + c * C


def inverse_sym_small(h: np.ndarray) -> np.ndarray:
    """Inverses of a stack of symmetric matrices, (K, p, p), by their adjugates for p <= 3.

    ``np.linalg.inv`` calls LAPACK once a matrix: 38 ms for 71,507 matrices of 3 x 3 (the
    hierarchical fits' Newton systems at 10^5 classes), several times that of the adjugate. The
    lower triangle is read (the matrices are symmetric); a matrix whose determinant is not
    positive and finite (not positive definite, or overflowing) goes to ``np.linalg.inv``, as
    does p > 3.
    """
    h = np.asarray(h, dtype=np.float64)
    p = h.shape[-1]
    if p > 3 or h.ndim != 3:
        return np.linalg.inv(h)
    adj, det = _adjugate_sym(h)
    ok = np.isfinite(det) & (det > 0)
    inv_det = 1.0 / np.where(ok, det, 1.0)
    out = np.empty((p, p, h.shape[0]))
    for (i, j), v in adj.items():
        out[i, j] = out[j, i] = v * inv_det
    out = np.ascontiguousarray(out.transpose(2, 0, 1))
    if not ok.all():
        out[~ok] = np.linalg.inv(h[~ok])
    return out


def solve_sym_small(h: np.ndarray, g: np.ndarray) -> np.ndarray:
    """x with h x = g for a stack of symmetric matrices h (K, p, p) and vectors g (K, p), by
    :func:`inverse_sym_small`'s adjugates for p <= 3 (``np.linalg.solve`` for p > 3 and where
    a determinant is not positive and finite)."""
    h = np.asarray(h, dtype=np.float64)
    p = h.shape[-1]
    if p > 3 or h.ndim != 3:
        return np.linalg.solve(h, g[..., None])[..., 0]
    adj, det = _adjugate_sym(h)
    ok = np.isfinite(det) & (det > 0)
    inv_det = 1.0 / np.where(ok, det, 1.0)
    gc = np.ascontiguousarray(np.asarray(g, dtype=np.float64).T)
    x = np.empty((p, h.shape[0]))
    for i in range(p):
        acc = adj[(min(i, 0), max(i, 0))] * gc[0]
        for j in range(1, p):
            acc += adj[(min(i, j), max(i, j))] * gc[j]
        x[i] = acc * inv_det
    x = np.ascontiguousarray(x.T)
    if not ok.all():
        x[~ok] = np.linalg.solve(h[~ok], np.asarray(g)[~ok][..., None])[..., 0]
    return x


def linspace_rows(lo, hi, num: int) -> np.ndarray:
    """Row i is ``np.linspace(lo[i], hi[i], num)`` bit for bit, shape (len(lo), num).

    ``np.linspace`` of arrays is not the rows' scalar calls in the last bit where any row's
    step is 0 (it then divides every row's grid first), and one scalar call a row cost 8 s
    of the report at 10^5 classes; this follows the scalar arithmetic row by row."""
    lo = np.asarray(lo, dtype=np.float64)
    hi = np.asarray(hi, dtype=np.float64)
    if num < 2:
        return np.array([np.linspace(a, b, num) for a, b in zip(lo, hi)]).reshape(lo.size, num)
    div = num - 1
    delta = hi - lo
    step = delta / div
    i = np.arange(num, dtype=np.float64)
    y = i[None, :] * step[:, None]
    zero = step == 0  # the scalar call's subnormal branch: (i / div) * delta
    if zero.any():
        y[zero] = (i / div)[None, :] * delta[zero][:, None]
    y += lo[:, None]
    y[:, -1] = hi
    return y

