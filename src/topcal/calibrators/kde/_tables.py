"""The prediction tables of the kde calibrators: Conf over each class's support on a regular
grid, and the linear interpolation every prediction is (private module of
:mod:`topcal.calibrators.kde`): :class:`GridTables` holds every class's table, full or at
knots (``_compact.py``); also the interval's wide-bandwidth tables
(:func:`wide_bandwidth_tables`)."""

from __future__ import annotations

import numpy as np

from ._kernels import CHUNK_ELEMENTS, EXP_FLOOR, FINE_CELLS, local_linear_sums, reflect_points


def table_cells(lo, hi, inv, nm1, score):
    """(cell, fraction within it) of every score in its table: the cell's left point and
    0..1.

    Scores outside [lo, hi] are held at the ends (the curve is constant there).
    """
    x = np.maximum(score, lo)
    np.minimum(x, hi, out=x)
    x -= lo
    x *= inv
    i = x.astype(np.int64)
    np.minimum(i, nm1 - 1, out=i)
    x -= i
    np.minimum(x, 1.0, out=x)
    return i, x


def interp_tables(tab, tab_n, off, lo, hi, inv, nm1, score):
    """Linear interpolation in tables stored end to end in ``tab`` (and counts ``tab_n``).

    ``off`` (start in ``tab``), ``lo``, ``hi``, ``inv`` ((points - 1) / (hi - lo)) and
    ``nm1`` (points - 1) are per row (one class per row) or scalars (one class). Written
    with in-place operations: this is the whole cost of ``predict`` (a few passes over the
    rows, no Python loop). With ``tab_n`` also the interpolated kernel-weighted count.
    """
    i, x = table_cells(lo, hi, inv, nm1, score)
    i += off
    t0 = tab[i]
    t1 = tab[i + 1]
    t1 -= t0
    t1 *= x
    t1 += t0
    if tab_n is None:
        return t1
    n0 = tab_n[i]
    n1 = tab_n[i + 1]
    n1 -= n0
    n1 *= x
    n1 += n0
    return t1, n1


def wide_of(state, count_scale, wide_sd, bounds=None):
    """The interval's wide-bandwidth terms of one class, from its kernel centres: None where
    its bandwidth is below ``wide_sd`` times the weighted standard deviation of its centres
    (or it has none), else (grid cells, ratio, bias): on a grid of spacing <= b / 8 (<= 513
    points) over its prediction table's range, the kernel's effective sample size per unit
    of count and
    |Nadaraya-Watson - local linear| (:func:`local_linear_sums`)."""
    b = np.nan if state is None else state["bandwidth"]
    if not np.isfinite(b):
        return None
    w, pts = state["tp"] + state["fp"], state["points"]
    mean = w @ pts / w.sum()
    if b < wide_sd * np.sqrt(w @ (pts - mean) ** 2 / w.sum()):
        return None
    a, z = state["table_lo"], state["table_hi"]
    cells = int(np.clip(np.ceil(8 * (z - a) / b), 1, 512))
    grid = np.linspace(a, z, cells + 1)
    nw, ll, r = local_linear_sums(grid, pts, state["tp"], state["fp"], b, bounds)
    return cells, r, np.abs(nw - ll)


def wide_bandwidth_tables(states, count_scale, wide_sd, bounds=None):
    """The interval's terms for classes whose bandwidth spans their scores, as flat tables.

    Per class state, :func:`wide_of` (its stored ``wide`` entry where the state keeps no
    kernel centres: a compact table's, ``_states.py``); other classes (and missing or
    degenerate ones) get two-point tables of ``count_scale`` and 0. Returns (ratio table,
    bias table, offset, lo, hi, inv, nm1) for :func:`interp_tables`, one entry per class.
    """
    ratio, extra, lo, hi, inv, nm1, offs, pos = [], [], [], [], [], [], [], 0
    for st in states:
        g, r, x = np.array([0.0, 1.0]), np.full(2, count_scale), np.zeros(2)
        wide = (
            st["wide"]
            if st is not None and "wide" in st
            else wide_of(st, count_scale, wide_sd, bounds)
        )
        if wide is not None:
            cells, r, x = wide
            g = np.linspace(st["table_lo"], st["table_hi"], cells + 1)
        ratio.append(r)
        extra.append(x)
        lo.append(g[0])
        hi.append(g[-1])
        nm1.append(g.size - 1)
        inv.append((g.size - 1) / (g[-1] - g[0]) if g[-1] > g[0] else 0.0)
        offs.append(pos)
        pos += g.size
    return (
        np.concatenate(ratio),
        np.concatenate(extra),
        np.array(offs, dtype=np.int64),
        np.array(lo),
        np.array(hi),
        np.array(inv),
        np.array(nm1, dtype=np.int64),
    )


class GridTables:
    """Every class's prediction table as its values at knots of its grid, end to end.

    A class's grid has ``cells`` cells over [table_lo, table_hi]. A full table (older files,
    degenerate classes) has a knot at every grid point; a compact one (``_states.py``) at
    some; a class that keeps its kernel centres has none here (its grid values are computed
    where needed, :meth:`centre_values`), nor has a class without state (two zero knots: its
    rows are overwritten). ``cells`` and ``values`` give every row's grid cell and the
    linear interpolation between its class's knots.
    """

    def __init__(self, states, bounds=None):
        K = len(states)
        self.lo, self.hi = np.zeros(K), np.ones(K)
        self.nm1 = np.ones(K, dtype=np.int64)
        self.kind = []
        pos, conf, count = [], [], []
        for k, st in enumerate(states):
            kind = "none" if st is None else layout(st)
            self.kind.append(kind)
            if st is not None:
                self.lo[k], self.hi[k] = st["table_lo"], st["table_hi"]
            if kind == "table":
                self.nm1[k] = st["table"].size - 1
                pos.append(np.arange(st["table"].size, dtype=np.float64))
                conf.append(st["table"])
                count.append(st.get("table_n", np.full(st["table"].size, np.nan)))
            elif kind == "knots":
                self.nm1[k] = st["table_cells"]
                pos.append(st["knots"].astype(np.float64))
                conf.append(st["conf"])
                count.append(st["count"])
            else:  # kernel centres (their grid's cells), or no state
                self.nm1[k] = FINE_CELLS // st["table_stride"] if kind == "centres" else 1
                pos.append(np.array([0.0, float(self.nm1[k])]))
                conf.append(np.zeros(2))
                count.append(np.zeros(2))
        width = self.hi - self.lo
        self.inv = np.divide(self.nm1, width, out=np.zeros(K), where=width > 0)
        sizes = np.array([p.size for p in pos], dtype=np.int64)
        self.knot_off = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
        #: first grid point of each class in one numbering of all classes' grid points
        self.grid_off = np.concatenate([[0], np.cumsum(self.nm1 + 1)[:-1]]).astype(np.int64)
        self.n_grid = int((self.nm1 + 1).sum())
        self.pos = np.concatenate(pos)
        self.conf = np.concatenate(conf)
        self.count = np.concatenate(count)
        self.dense = "knots" not in self.kind  # a knot at every grid point (or placeholders)
        #: where not dense, the knot starting the segment that holds each grid cell (all
        #: classes' cells end to end: cell_off[k] + i), int32: one gather a row instead of a
        #: search
        self.cell_off = np.concatenate([[0], np.cumsum(self.nm1)[:-1]]).astype(np.int64)
        if not self.dense:
            ends = np.cumsum(sizes)
            steps = np.diff(self.pos)
            steps[ends[:-1] - 1] = 0  # from a class's last knot to the next class's first
            self.segment = np.repeat(
                np.arange(self.pos.size, dtype=np.int32), np.append(steps, 0).astype(np.int64)
            )
        self.has_counts = bool(np.all(np.isfinite(self.count)))
        self._centres(states, bounds)

    def _centres(self, states, bounds) -> None:
        """The kernel centres of the classes that keep them (with their mirror images where
        reflecting, without those of weight 0, as :func:`exact_sums` takes them), as rows of
        matrices: one per width, a power of 2, each class's row padded to the smallest width
        that holds it (a centre at infinity of weight 0: its kernel term is 0 and no nearest
        centre)."""
        K = len(states)
        self.stride = np.ones(K, dtype=np.int64)
        self.inv_2b2 = np.zeros(K)
        self.width = np.zeros(K, dtype=np.int64)
        self.row = np.zeros(K, dtype=np.int64)
        kept = {}
        for k, st in enumerate(states):
            if self.kind[k] != "centres":
                continue
            p, t, f = reflect_points(st["points"], st["tp"], st["fp"], bounds)
            w = t + f
            if not np.all(w > 0):
                p, t, w = p[w > 0], t[w > 0], w[w > 0]
            kept[k] = (p, t, w)
            self.width[k] = 1 << max(int(p.size - 1).bit_length(), 0)
            self.stride[k] = st["table_stride"]
            self.inv_2b2[k] = 0.5 / (st["bandwidth"] * st["bandwidth"])
        self.centre_rows = {}
        for width in np.unique(self.width[list(kept)]).tolist():
            ks = [k for k in kept if self.width[k] == width]
            pts = np.full((len(ks), width), np.inf)
            tp, wt = np.zeros((len(ks), width)), np.zeros((len(ks), width))
            for r, k in enumerate(ks):
                p, t, w = kept[k]
                pts[r, : p.size], tp[r, : p.size], wt[r, : p.size] = p, t, w
                self.row[k] = r
            self.centre_rows[width] = (pts, tp, wt)

    def centre_values(self, k, i, frac, with_count: bool = False):
        """:meth:`values` for rows of classes that keep their kernel centres (``k``, ``i``,
        ``frac`` arrays): their tables' values at the grid points ``i`` and ``i + 1`` of
        every row, computed as the fit computed the full table (:meth:`grid_sums`),
        interpolated as a stored table is."""
        span = FINE_CELLS + 2
        key = k.astype(np.int64) * span + i
        size = len(self.kind) * span
        if size <= 1 << 25:  # the points needed, marked on every class's grid: no sort
            mark = np.zeros(size, dtype=bool)
            mark[key] = True
            mark[key + 1] = True
            need = np.flatnonzero(mark)
        else:
            need = np.unique(np.concatenate([key, key + 1]))
        conf, count = self.grid_sums(need // span, need % span)
        q = np.searchsorted(need, key)
        return _between(conf, count if with_count else None, q, frac)

    def grid_sums(self, cls, j):
        """(Conf, count) at grid point ``j`` of class ``cls`` (arrays; classes that keep
        their centres): the shifted kernel sums of :func:`exact_sums` at the point the fit's
        table had there, over the class's row of centres, points of one width together in
        blocks of at most CHUNK_ELEMENTS terms. Each point's sums are those of its own row,
        of a width fixed by its class: a point's value does not depend on which other points
        are asked for (nor, then, a prediction on the other rows); it equals the fit's
        table's up to the round-off of the summation order."""
        lo, hi = self.lo[cls], self.hi[cls]
        x = lo + (hi - lo) / FINE_CELLS * (j * self.stride[cls])
        inv = self.inv_2b2[cls]
        conf, count = np.empty(x.size), np.empty(x.size)
        width = self.width[cls]
        for w, (pts, tp, wt) in self.centre_rows.items():
            sel = np.flatnonzero(width == w)
            for a in range(0, sel.size, max(1, CHUNK_ELEMENTS // w)):
                part = sel[a : a + max(1, CHUNK_ELEMENTS // w)]
                r = self.row[cls[part]]
                d = pts[r]
                np.subtract(x[part, None], d, out=d)
                np.square(d, out=d)
                shift = d.min(axis=1)
                d -= shift[:, None]
                d *= -inv[part, None]
                np.maximum(d, EXP_FLOOR, out=d)
                np.exp(d, out=d)
                num = np.einsum("ij,ij->i", d, tp[r])  # row by row: the same for any rows
                den = np.einsum("ij,ij->i", d, wt[r])
                conf[part] = np.clip(num / den, 0.0, 1.0)
                count[part] = den * np.exp(-shift * inv[part])
        return conf, count

    def cells(self, k, score):
        """(grid cell, fraction within it) of every score in its class ``k`` (an array like
        ``score``, or one class)."""
        return table_cells(self.lo[k], self.hi[k], self.inv[k], self.nm1[k], score)

    def values(self, k, i, frac, with_count: bool = False):
        """Conf (and the count) at cell ``i``, fraction ``frac`` of class ``k``'s table:
        linear between its knots (on a full table, the arithmetic of :func:`interp_tables`)."""
        if self.dense:
            q = self.knot_off[k] + i
            x = frac
        else:
            q = self.segment[self.cell_off[k] + i]
            p0 = self.pos[q]
            x = (frac + (i - p0)) / (self.pos[q + 1] - p0)
        return _between(self.conf, self.count if with_count else None, q, x)


def _between(conf, count, q, x):
    """Conf (and, with ``count`` given, the count) a fraction ``x`` of the way from entry
    ``q`` to ``q + 1`` of the tables, linearly (in place on the gathered copies)."""
    out = []
    for tab in (conf,) if count is None else (conf, count):
        t0 = tab[q]
        t1 = tab[q + 1]
        t1 -= t0
        t1 *= x
        t1 += t0
        out.append(t1)
    return out[0] if count is None else tuple(out)


def layout(state) -> str:
    """How a class state stores its table: "table" (every grid point), "knots" (a compact
    table) or "centres" (the kernel centres it is computed from)."""
    return "table" if "table" in state else "knots" if "knots" in state else "centres"
