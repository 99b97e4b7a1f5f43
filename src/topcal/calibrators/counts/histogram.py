"""Histogram calibration, Conf_Hist (paper section 4, eqs. 5-6).

For predicted class k and a partition b_0 < b_1 < ... < b_n of the score range,
Conf_Hist,k(S) = |TP ∩ (b_i, b_{i+1}]| / |P ∩ (b_i, b_{i+1}]| for S in (b_i, b_{i+1}]. Bins
are half-open on the left, as in the paper; the lowest bin also takes S = b_0 so the union
covers the closed score range.
"""

from __future__ import annotations

import numpy as np

from ..._numeric import bin_index, weighted_quantile_edges
from ..._params import MAX_BINS, Interval, Options
from ...data import ClassView, rows_by_class
from ..base import finite_array
from ..score import ScoreCalibrator
from ..registry import register
from ..shrinkage import ShrinkageConstraint

__all__ = ["Histogram", "bin_index", "fill_empty_bins", "weighted_quantile_edges"]


def fill_empty_bins(values: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Give each empty bin the value of the nearest non-empty bin (by bin index).

    When two non-empty bins are equally near, the empty bin takes their average. This holds
    the boundary value outside the data (no extrapolation) and bridges gaps inside it. Needs
    at least one non-empty bin.
    """
    full = np.flatnonzero(counts > 0)
    out = values.copy()
    empty = np.flatnonzero(counts <= 0)
    if empty.size == 0:
        return out
    pos = np.searchsorted(full, empty)
    left = full[np.clip(pos - 1, 0, full.size - 1)]
    right = full[np.clip(pos, 0, full.size - 1)]
    dl = np.where(pos > 0, empty - left, np.inf)
    dr = np.where(pos < full.size, right - empty, np.inf)
    out[empty] = np.where(
        dl < dr,
        values[left],
        np.where(dr < dl, values[right], 0.5 * (values[left] + values[right])),
    )
    return out


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
            return np.linspace(lo, hi, n + 1)
        return weighted_quantile_edges(view.score, view.tp + view.fp, n, lo, hi)

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

    def _load_class_state(self, state: dict) -> dict:
        edges = finite_array(state["edges"], "edges")
        nb = edges.size - 1
        if nb < 1 or np.any(np.diff(edges) <= 0):
            raise ValueError("edges must be increasing with at least two entries")
        values = finite_array(state["values"], "values", nb)
        if np.any((values < 0) | (values > 1)):
            raise ValueError("histogram values must be in [0, 1]")
        return {
            "edges": edges,
            "values": values,
            "tp": finite_array(state["tp"], "tp", nb),
            "fp": finite_array(state["fp"], "fp", nb),
        }

    def _predict_class(self, state: dict, score: np.ndarray) -> np.ndarray:
        return state["values"][bin_index(state["edges"], score)]

    @staticmethod
    def _source_bins(st: dict) -> tuple[np.ndarray, np.ndarray]:
        """Per bin, the non-empty bins whose counts stand behind its value: (left, right),
        the bin itself twice where it has positives, else its nearest non-empty bin (both
        nearest on a tie, whose values :func:`fill_empty_bins` averages)."""
        n = st["tp"] + st["fp"]
        idx = np.arange(n.size)
        full = np.flatnonzero(n > 0)
        if full.size == 0:
            return idx, idx
        pos = np.searchsorted(full, idx)
        left = full[np.clip(pos - 1, 0, full.size - 1)]
        right = full[np.clip(pos, 0, full.size - 1)]
        dl = np.where(pos > 0, idx - left, np.inf)
        dr = np.where(pos < full.size, right - idx, np.inf)
        a = np.where(n > 0, idx, np.where(dl <= dr, left, right))
        b = np.where(n > 0, idx, np.where(dr <= dl, right, left))
        return a, b

    def _interval_counts(self, pred, score):
        """A bin's own counts; an empty bin's those of the bin(s) whose value it holds
        (pooled on a tie)."""
        t = np.zeros(score.shape[0])
        n = np.zeros(score.shape[0])
        # one sort, not a pass per class (K passes: describe at 1,500 classes took minutes)
        for k, rows in rows_by_class(pred, len(self.class_state_)):
            st = self.class_state_[k]
            if st is None:
                continue
            a, b = self._source_bins(st)
            i = bin_index(st["edges"], score[rows])
            both = a[i] != b[i]
            t[rows] = st["tp"][a[i]] + np.where(both, st["tp"][b[i]], 0.0)
            n[rows] = t[rows] + st["fp"][a[i]] + np.where(both, st["fp"][b[i]], 0.0)
        return t, n

    def _interval_bias(self, pred, score):
        """Binning bias: Conf at a score differs from its bin's rate by about slope x (score
        - bin midpoint), the slope read off the fitted curve between the neighbouring bins'
        midpoints (an empty bin: the midpoint of the bin(s) whose value it holds)."""
        bias = np.zeros(score.shape[0])
        todo = [
            (k, rows)
            for k, rows in rows_by_class(pred, len(self.class_state_))
            if self.class_state_[k] is not None and self.class_state_[k]["edges"].size > 2
        ]
        if not todo:
            return bias
        # every class's bin midpoints in one call of the curve (a call per class costs K
        # each: K^2 at 10^5 classes); the curve is computed row by row, so the values are
        # the same
        mids = [
            0.5 * (e[:-1] + e[1:]) for e in (self.class_state_[k]["edges"] for k, _ in todo)
        ]
        sizes = [m.size for m in mids]
        curves = np.split(
            self._curve_rows(np.repeat([k for k, _ in todo], sizes), np.concatenate(mids)),
            np.cumsum(sizes)[:-1],
        )
        for (k, rows), mid, c in zip(todo, mids, curves):
            st = self.class_state_[k]
            e = st["edges"]
            # the slope between the midpoints of bins with rows: an empty bin's value is its
            # neighbour's copy, and a difference across it would halve the slope at the
            # data's edge
            full = np.flatnonzero(st["tp"] + st["fp"] > 0)
            if full.size < 2:
                continue
            slope = np.zeros(mid.size)
            slope[full] = np.gradient(c[full], mid[full])
            a, b = self._source_bins(st)
            i = bin_index(e, score[rows])
            along = 0.5 * (slope[a[i]] + slope[b[i]])
            bias[rows] = along * (score[rows] - 0.5 * (mid[a[i]] + mid[b[i]]))
        return bias

    def _count_keys(self, pred, score):
        """(bin of every row numbered across classes, TP and positive count per bin, class
        per bin, None); a class without state has one bin of counts 0. Classes sharing their
        edges (``uniform``) are binned in one search."""
        states = self.class_state_
        size = np.array([1 if st is None else st["tp"].size for st in states], dtype=np.int64)
        start = np.concatenate([[0], np.cumsum(size)[:-1]])
        t = np.concatenate([np.zeros(1) if st is None else st["tp"] for st in states])
        n = np.concatenate(
            [np.zeros(1) if st is None else st["tp"] + st["fp"] for st in states]
        )
        cell_class = np.repeat(np.arange(len(states)), size)
        edges = [st["edges"] for st in states if st is not None]
        if np.ndim(pred) == 0:  # one class for all rows
            st = states[int(pred)]
            cell = np.full(score.shape[0], start[int(pred)], dtype=np.int64)
            if st is not None:
                cell += bin_index(st["edges"], score)
        elif len(edges) == len(states) and all(np.array_equal(e, edges[0]) for e in edges):
            cell = bin_index(edges[0], score)
            cell += start[pred]
        else:
            cell = np.empty(score.shape[0], dtype=np.int64)
            for k, idx in rows_by_class(pred, len(states)):
                st = states[k]
                cell[idx] = start[k] + (
                    0 if st is None else bin_index(st["edges"], score[idx])
                )
        return cell, t, n, cell_class, None

    def _local_counts(self, k: int, score: np.ndarray):
        st = self.class_state_[k]
        i = bin_index(st["edges"], score)
        return st["tp"][i], st["tp"][i] + st["fp"][i]
