"""Histogram calibration, Conf_Hist (paper section 4, eqs. 5-6).

For predicted class k and a partition b_0 < b_1 < ... < b_n of the score range,
Conf_Hist,k(S) = |TP ∩ (b_i, b_{i+1}]| / |P ∩ (b_i, b_{i+1}]| for S in (b_i, b_{i+1}]. Bins
are half-open on the left, as in the paper; the lowest bin also takes S = b_0 so the union
covers the closed score range.
"""

from __future__ import annotations

import functools
import itertools

import numpy as np

from ..._numeric import SortedTables, bin_index, weighted_quantile_edges
from ..._params import MAX_BINS, Interval, Options
from ...data import ClassView
from ..base import finite_array
from ..score import ScoreCalibrator
from ..registry import register
from ..shrinkage import ShrinkageConstraint

__all__ = ["Histogram", "bin_index", "fill_empty_bins", "weighted_quantile_edges"]


def fill_empty_bins(values: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Give each empty bin the value of the nearest non-empty bin (by bin index).

    When two non-empty bins are equally near, the empty bin takes their average. This holds
    the boundary value outside the data (no extrapolation) and bridges gaps inside it. Needs
    at least one non-empty bin. Two-dimensional ``values`` and ``counts`` are many classes'
    bins, a row each, every row filled on its own.
    """
    out = np.array(values, dtype=np.float64)
    rows = np.atleast_2d(out)
    full = np.atleast_2d(np.asarray(counts) > 0)
    if full.all():
        return out
    if not full.any(axis=1).all():
        raise ValueError("a histogram needs at least one non-empty bin")
    nb = rows.shape[1]
    j = np.broadcast_to(np.arange(nb), rows.shape)
    # the nearest non-empty bin at or left of each bin (-1: none), and at or right of it (nb)
    left = np.maximum.accumulate(np.where(full, j, -1), axis=1)
    right = np.minimum.accumulate(np.where(full, j, nb)[:, ::-1], axis=1)[:, ::-1]
    dl = np.where(left >= 0, j - left, np.inf)
    dr = np.where(right < nb, right - j, np.inf)
    vl = np.take_along_axis(rows, np.maximum(left, 0), axis=1)
    vr = np.take_along_axis(rows, np.minimum(right, nb - 1), axis=1)
    filled = np.where(dl < dr, vl, np.where(dr < dl, vr, 0.5 * (vl + vr)))
    np.copyto(rows, filled, where=~full)
    return out


@functools.lru_cache(maxsize=16)
def equal_edges(lo: float, hi: float, n_bins: int) -> np.ndarray:
    """The edges of ``n_bins`` equal-width bins over [lo, hi] as a fit makes them
    (``np.linspace``), one read-only array shared by every class that has them."""
    out = np.linspace(lo, hi, n_bins + 1)
    out.flags.writeable = False
    return out


def _edges_entry(edges: np.ndarray) -> dict:
    """A state's edges as saved: ``bins`` = [low, high, count] where they are the equal-width
    ones :func:`equal_edges` makes, else ``edges`` listed."""
    nb = edges.size - 1
    lo, hi = float(edges[0]), float(edges[-1])
    if lo < hi and (
        edges is equal_edges(lo, hi, nb) or np.array_equal(edges, equal_edges(lo, hi, nb))
    ):
        return {"bins": [lo, hi, nb]}
    return {"edges": edges.tolist()}


def _load_equal_width(saved: list) -> list:
    """Saved class states that all give their bins as ``bins`` (and no ``edges``), validated
    as :meth:`Histogram._load_class_state` does, in one pass over all classes; raises on
    anything else (the caller then reads class by class)."""
    live = [s for s in saved if s is not None]
    if not live or any(type(s) is not dict or "edges" in s for s in live):
        raise ValueError("not all equal-width")
    bins = np.array([s["bins"] for s in live], dtype=np.float64)
    nb = bins[:, 2].astype(np.int64) if bins.shape[1:] == (3,) else None
    if (
        nb is None
        or not np.isfinite(bins).all()
        or not (bins[:, 0] < bins[:, 1]).all()
        or not (nb == bins[:, 2]).all()
        or not ((nb >= 1) & (nb <= MAX_BINS)).all()
    ):
        raise ValueError("bins")
    starts = np.r_[0, np.cumsum(nb)]
    arrays = []
    for key in ("values", "tp", "fp"):
        if any(len(s[key]) != n for s, n in zip(live, nb.tolist())):
            raise ValueError(key)
        flat = np.fromiter(
            itertools.chain.from_iterable(s[key] for s in live), np.float64, int(starts[-1])
        )
        if not np.isfinite(flat).all():
            raise ValueError(key)
        arrays.append(flat)
    if np.any((arrays[0] < 0) | (arrays[0] > 1)):
        raise ValueError("values")
    edges = {t: equal_edges(t[0], t[1], int(t[2])) for t in set(map(tuple, bins.tolist()))}
    if any(np.any(np.diff(e) <= 0) for e in edges.values()):
        raise ValueError("edges")
    out: list[dict | None] = []
    i = 0
    values, tp, fp = arrays
    for s in saved:
        if s is None:
            out.append(None)
            continue
        a, b = starts[i], starts[i + 1]
        e = edges[tuple(bins[i].tolist())]
        out.append({"edges": e, "values": values[a:b], "tp": tp[a:b], "fp": fp[a:b]})
        i += 1
    return out


def class_gradient(y: np.ndarray, x: np.ndarray, group: np.ndarray) -> np.ndarray:
    """``np.gradient(y[g], x[g])`` of every group g of consecutive entries (``group``
    ascending, at least two entries each), for all groups at once and with numpy's
    arithmetic: central differences inside (the evenly spaced formula where all of a group's
    steps are equal, else the unevenly spaced one), one-sided ones at the ends."""
    out = np.empty(y.size)
    if not y.size:
        return out
    i = np.arange(y.size)
    first = np.ones(y.size, dtype=bool)
    first[1:] = group[1:] != group[:-1]
    last = np.ones(y.size, dtype=bool)
    last[:-1] = first[1:]
    head = np.maximum.accumulate(np.where(first, i, 0))  # each group's first entry
    dx = np.diff(x)  # dx[j]: from entry j to j + 1 (across groups where j is a last)
    seg = np.cumsum(first) - 1  # groups numbered 0, 1, ...
    even = np.ones(int(seg[-1]) + 1, dtype=bool)  # per group, all its steps equal its first
    even[seg[:-1][~last[:-1] & (dx != dx[np.minimum(head[:-1], dx.size - 1)])]] = False
    inner = np.flatnonzero(~first & ~last)
    d1, d2 = dx[inner - 1], dx[inner]
    ev = even[seg[inner]]
    ym, y0, yp = y[inner - 1], y[inner], y[inner + 1]
    a = -d2 / (d1 * (d1 + d2))
    b = (d2 - d1) / (d1 * d2)
    c = d1 / (d2 * (d1 + d2))
    out[inner] = np.where(ev, (yp - ym) / (2.0 * dx[head[inner]]), a * ym + b * y0 + c * yp)
    f = np.flatnonzero(first)
    out[f] = (y[f + 1] - y[f]) / dx[f]
    e = np.flatnonzero(last)
    out[e] = (y[e] - y[e - 1]) / dx[e - 1]
    return out


class ClassBins:
    """Every class's bins end to end, for lookups over the rows of all classes at once.

    Bin ``j`` of class ``k`` is entry ``start[k] + j`` of ``tp``, ``fp``, ``values`` and
    ``cls``; its edges are ``edges[start[k] + rank[k] + j]`` and the next one (``rank[k]``:
    the classes with a state before ``k``, each of which holds one edge more than bins).
    Classes without a state hold no bins. Built from the states on first use after a fit or
    a load (:meth:`Histogram._index_states`).
    """

    def __init__(self, states: list):
        K = len(states)
        self.has = np.array([st is not None for st in states], dtype=bool)
        kept = [st for st in states if st is not None]
        self.size = np.zeros(K, dtype=np.int64)
        self.size[self.has] = [st["tp"].size for st in kept]
        self.start = np.cumsum(self.size) - self.size
        self.rank = np.cumsum(self.has) - self.has
        self.tp, self.fp, self.values, self.edges = (
            np.concatenate([st[key] for st in kept] + [np.zeros(0)])
            for key in ("tp", "fp", "values", "edges")
        )
        self.cls = np.repeat(np.arange(K), self.size)
        first = kept[0]["edges"] if kept else None
        # the edges every class shares (``uniform``: one search for all rows), else None
        self.shared = (
            first
            if kept
            and (self.size[self.has] == first.size - 1).all()
            and (self.edges.reshape(len(kept), first.size) == first).all()
            else None
        )
        self._tables: SortedTables | None = None
        self._sources: tuple[np.ndarray, np.ndarray] | None = None

    def local(self, pred, score: np.ndarray) -> np.ndarray:
        """Bin of each row within its own class (:func:`bin_index` of the class's edges;
        rows of classes without a state: 0)."""
        if self.shared is not None:
            out = bin_index(self.shared, score)
        else:
            if self._tables is None:
                offsets = np.concatenate([[0], np.cumsum(self.size + self.has)])
                self._tables = SortedTables(self.edges, offsets)
            out = self._tables.search(score, pred) - 1
            np.clip(out, 0, np.maximum(self.size[pred] - 1, 0), out=out)
        if not self.has.all():
            out[~self.has[pred]] = 0
        return out

    def mids(self) -> np.ndarray:
        """Every bin's midpoint."""
        left = np.arange(self.tp.size) + self.rank[self.cls]
        return 0.5 * (self.edges[left] + self.edges[left + 1])

    def sources(self) -> tuple[np.ndarray, np.ndarray]:
        """Per bin, the non-empty bins of its class whose counts stand behind its value:
        (left, right), the bin itself twice where it has positives, else its nearest
        non-empty bin (both nearest on a tie, whose values :func:`fill_empty_bins`
        averages); a class without positives: every bin itself."""
        if self._sources is None:
            n = self.tp + self.fp
            idx = np.arange(n.size)
            full = np.flatnonzero(n > 0)
            if full.size == 0:
                self._sources = (idx, idx)
                return self._sources
            pos = np.searchsorted(full, idx)
            left = full[np.clip(pos - 1, 0, full.size - 1)]
            right = full[np.clip(pos, 0, full.size - 1)]
            # a neighbour counts only within the bin's own class
            ok_l = (pos > 0) & (self.cls[left] == self.cls)
            ok_r = (pos < full.size) & (self.cls[right] == self.cls)
            dl = np.where(ok_l, idx - left, np.inf)
            dr = np.where(ok_r, right - idx, np.inf)
            none = ~ok_l & ~ok_r
            a = np.where(n > 0, idx, np.where(dl <= dr, left, right))
            b = np.where(n > 0, idx, np.where(dr <= dl, right, left))
            a[none], b[none] = idx[none], idx[none]
            self._sources = (a, b)
        return self._sources


@register
class Histogram(ScoreCalibrator):
    """Per-class histogram calibration (paper eq. 6).

    Parameters
    ----------
    n_bins : int, default 10
        Number of bins (the paper uses 10 equal-width bins).
    strategy : {"uniform", "quantile"}, default "uniform"
        "uniform": equal-width bins over the declared score range. "quantile": equal-mass
        bins (weighted quantiles of the class's positive scores), merged where ties make
        edges coincide.

    Notes
    -----
    An empty bin (no positives of the class) takes the value of the nearest non-empty bin,
    the average of the two when both neighbours are equally near (:func:`fill_empty_bins`).
    Fitted state per class: ``edges``, ``values``, and the bin counts ``tp`` and ``fp``.
    """

    name = "hist"
    tier = 2  # per-class curves, shrunk toward the pooled one by default
    summary = "per-class histogram, 10 equal-width bins (b_i, b_i+1] (paper eq. 6)"
    step_curve = True
    _parameter_constraints = {
        "n_bins": Interval(1, MAX_BINS, integer=True),
        "strategy": Options(("uniform", "quantile")),
        "shrinkage": ShrinkageConstraint(),
    }
    shrinkable = True
    #: every class's bins end to end (:attr:`_bins`), made on first use after a fit or load
    _bins_index: ClassBins | None = None
    piecewise_counts = True  # one (t, n) per bin: rows of a bin are merged when choosing m

    def __init__(self, *, n_bins: int = 10, strategy: str = "uniform", shrinkage="auto"):
        self.n_bins = n_bins
        self.strategy = strategy
        self.shrinkage = shrinkage

    @property
    def n_params_(self) -> int:
        return sum(len(s["values"]) for s in self.class_state_ if s is not None)

    def _edges(self, view: ClassView) -> np.ndarray:
        lo, hi = self.score_range_
        n = int(self.n_bins)
        if self.strategy == "uniform":
            return equal_edges(float(lo), float(hi), n)
        return weighted_quantile_edges(view.score, view.tp + view.fp, n, lo, hi)

    def _fit_all_classes(self, data) -> tuple[list, list]:
        """Equal-width bins (the same edges for every class): all classes' counts from one
        ``bincount`` over (class, bin), each bin's rows added in row order as a class's own
        fit adds them, so every state is bit for bit the one :meth:`_fit_class` makes."""
        if self.strategy != "uniform":
            return super()._fit_all_classes(data)
        support = data.class_supports()
        live = np.flatnonzero([s is not None for s in support])
        states: list = [None] * data.n_classes
        if not live.size:
            return states, support
        lo, hi = self.score_range_
        edges = equal_edges(float(lo), float(hi), int(self.n_bins))
        nb = edges.size - 1
        slot = np.full(data.n_classes, -1, dtype=np.int64)
        slot[live] = np.arange(live.size)
        at = slot[data.pred]
        keep = at >= 0  # rows of a class without weight add nothing
        cell = at[keep] * nb + bin_index(edges, data.score[keep])
        size = live.size * nb
        tp = np.bincount(cell, weights=data.tp[keep], minlength=size).reshape(-1, nb)
        fp = np.bincount(cell, weights=data.fp[keep], minlength=size).reshape(-1, nb)
        n = tp + fp
        with np.errstate(invalid="ignore", divide="ignore"):
            raw = np.where(n > 0, tp / np.where(n > 0, n, 1.0), 0.0)
        values = fill_empty_bins(raw, n)
        for i, k in enumerate(live.tolist()):
            states[k] = {"edges": edges, "values": values[i], "tp": tp[i], "fp": fp[i]}
        return states, support

    def _fit_class(self, view: ClassView, k: int) -> dict:
        edges = self._edges(view)
        nb = len(edges) - 1
        idx = bin_index(edges, view.score)
        tp = np.bincount(idx, weights=view.tp, minlength=nb)
        fp = np.bincount(idx, weights=view.fp, minlength=nb)
        n = tp + fp
        with np.errstate(invalid="ignore", divide="ignore"):
            raw = np.where(n > 0, tp / np.where(n > 0, n, 1.0), 0.0)
        return {"edges": edges, "values": fill_empty_bins(raw, n), "tp": tp, "fp": fp}

    def _dump_class_state(self, state: dict) -> dict:
        return self._dump_class_states([state])[0]

    def _dump_class_states(self, states: list) -> list:
        """Equal-width edges as their (low, high, bins), which ``np.linspace`` gives back
        bit for bit (the fit makes them so); a class's counts, if all whole numbers, as
        integers. The arrays of all classes are converted in one pass each."""
        live = [s for s in states if s is not None]
        if not live:
            return list(states)
        starts = np.cumsum([0] + [s["values"].size for s in live]).tolist()
        values = np.concatenate([s["values"] for s in live]).tolist()
        counts = {}
        for key in ("tp", "fp"):
            c = np.concatenate([s[key] for s in live])
            whole = (c == np.round(c)) & (np.abs(c) < 2.0**53)
            class_whole = np.logical_and.reduceat(whole, starts[:-1]).tolist()
            as_int = np.where(whole, c, 0.0).astype(np.int64).tolist()
            counts[key] = (class_whole, as_int, c.tolist())
        out: list[dict | None] = []
        i = 0
        for s in states:
            if s is None:
                out.append(None)
                continue
            a, b = starts[i], starts[i + 1]
            rec = {"values": values[a:b], **_edges_entry(s["edges"])}
            for key, (class_whole, as_int, as_float) in counts.items():
                rec[key] = (as_int if class_whole[i] else as_float)[a:b]
            out.append(rec)
            i += 1
        return out

    def _load_class_states(self, saved: list) -> list:
        """Every class's state; files of equal-width bins (what fits write) are read in one
        pass over all classes, anything else class by class (which names what is wrong)."""
        try:
            return _load_equal_width(saved)
        except (TypeError, ValueError, KeyError, AttributeError):
            return super()._load_class_states(saved)

    def _load_class_state(self, state: dict) -> dict:
        """One class's state from either layout: its ``edges`` listed (they win where a
        state holds both), or equal-width ones as ``bins`` = (low, high, number of bins)."""
        if "edges" not in state:
            (lo, hi, nb) = finite_array(state["bins"], "bins", 3)
            if not (lo < hi and nb == int(nb) and 1 <= nb <= MAX_BINS):
                raise ValueError("bins must be (low, high, count) with low < high, count >= 1")
            edges = equal_edges(float(lo), float(hi), int(nb))
        else:
            edges = finite_array(state["edges"], "edges")
        nb = edges.size - 1
        if nb < 1 or np.any(np.diff(edges) <= 0):
            raise ValueError("edges must be increasing with at least two entries")
        # the three lists of a class in one conversion (a file holds one state per class)
        try:
            arr = np.asarray([state["values"], state["tp"], state["fp"]], dtype=np.float64)
        except (TypeError, ValueError):
            arr = np.zeros(0)
        if arr.shape != (3, nb) or not np.isfinite(arr).all():  # the check that names it
            arr = np.array([finite_array(state[k], k, nb) for k in ("values", "tp", "fp")])
        if np.any((arr[0] < 0) | (arr[0] > 1)):
            raise ValueError("histogram values must be in [0, 1]")
        return {"edges": edges, "values": arr[0], "tp": arr[1], "fp": arr[2]}

    def _predict_class(self, state: dict, score: np.ndarray) -> np.ndarray:
        return state["values"][bin_index(state["edges"], score)]

    # ------------------------------------------------ all classes' bins at once
    def _index_states(self) -> None:
        self._bins_index = None

    @property
    def _bins(self) -> ClassBins:
        """Every class's bins end to end (:class:`ClassBins`), made on first use."""
        bins = self._bins_index
        if bins is None:
            bins = self._bins_index = ClassBins(self.class_state_)
        return bins

    def _row_bins(self, pred, score) -> tuple[np.ndarray, np.ndarray]:
        """(bin of each row among all classes' bins, whether its class has a state); a row
        of a class without one gets bin 0 (to be masked)."""
        fb = self._bins
        has = fb.has[pred]
        g = fb.start[pred] + fb.local(pred, score)
        if fb.tp.size and not has.all():
            g[~has] = 0
        return g, has

    def _predict_rows(self, pred, score):
        """Unshrunk Conf of every row's own class in one gather (rows of classes without a
        state: the uncalibrated score, as :meth:`_predict_scores` gives them)."""
        if not self._bins.tp.size:
            return self._uncalibrated(score)
        g, has = self._row_bins(pred, score)
        out = self._bins.values[g]
        if not has.all():
            out[~has] = self._uncalibrated(score[~has])
        return out

    def _local_counts_rows(self, pred, score):
        t, n = np.zeros(score.shape[0]), np.zeros(score.shape[0])
        if self._bins.tp.size:
            g, has = self._row_bins(pred, score)
            t[has] = self._bins.tp[g[has]]
            n[has] = t[has] + self._bins.fp[g[has]]
        return t, n

    def _interval_counts(self, pred, score):
        """A bin's own counts; an empty bin's those of the bin(s) whose value it holds
        (pooled on a tie)."""
        t, n = np.zeros(score.shape[0]), np.zeros(score.shape[0])
        fb = self._bins
        if not fb.tp.size:
            return t, n
        g, has = self._row_bins(pred, score)
        a, b = fb.sources()
        a, b = a[g[has]], b[g[has]]
        both = a != b
        t[has] = fb.tp[a] + np.where(both, fb.tp[b], 0.0)
        n[has] = t[has] + fb.fp[a] + np.where(both, fb.fp[b], 0.0)
        return t, n

    def _interval_bias(self, pred, score):
        """Binning bias: Conf at a score differs from its bin's rate by about slope x (score
        - bin midpoint), the slope read off the fitted curve between the neighbouring bins'
        midpoints (an empty bin: the midpoint of the bin(s) whose value it holds)."""
        bias = np.zeros(score.shape[0])
        fb = self._bins
        K = fb.has.size
        # the classes with rows here and at least two bins holding positives: the slope
        # between the midpoints of bins with rows (an empty bin's value is its neighbour's
        # copy, and a difference across it would halve the slope at the data's edge)
        use = np.zeros(K, dtype=bool)
        use[pred] = True
        use &= fb.size >= 2
        full = np.flatnonzero(((fb.tp + fb.fp) > 0) & use[fb.cls])
        use &= np.bincount(fb.cls[full], minlength=K) >= 2
        full = full[use[fb.cls[full]]]
        rows = np.flatnonzero(use[pred])
        if not rows.size:
            return bias
        mid = fb.mids()
        # every class's curve at its bin midpoints in one call (the curve is computed row by
        # row: the values of a call per class)
        slope = np.zeros(mid.size)
        slope[full] = class_gradient(
            self._curve_rows(fb.cls[full], mid[full]), mid[full], fb.cls[full]
        )
        g, _ = self._row_bins(pred[rows], score[rows])
        a, b = fb.sources()
        a, b = a[g], b[g]
        along = 0.5 * (slope[a] + slope[b])
        bias[rows] = along * (score[rows] - 0.5 * (mid[a] + mid[b]))
        return bias

    def _count_keys(self, pred, score):
        """(bin of every row numbered across classes, TP and positive count per bin, class
        per bin, None); a class without state has one bin of counts 0."""
        fb = self._bins
        size = np.maximum(fb.size, 1)
        start = np.cumsum(size) - size
        at = start[fb.cls] + (np.arange(fb.tp.size) - fb.start[fb.cls])
        t, n = np.zeros(int(size.sum())), np.zeros(int(size.sum()))
        t[at], n[at] = fb.tp, fb.tp + fb.fp
        cell_class = np.repeat(np.arange(size.size), size)
        if np.ndim(pred) == 0:  # one class for all rows
            pred = np.full(score.shape[0], int(pred), dtype=np.int64)
        cell = fb.local(pred, score)
        cell += start[pred]
        return cell, t, n, cell_class, None

    def _local_counts(self, k: int, score: np.ndarray):
        st = self.class_state_[k]
        i = bin_index(st["edges"], score)
        return st["tp"][i], st["tp"][i] + st["fp"][i]
