"""Mergeable sufficient statistics: :class:`ScoreStats`.

Every per-class score method (``hist``, the ``cum`` and ``kde`` families, ``conf1``, the
binary temperature variants ``bts``/``btswa``, and ``auto`` over them) needs, per predicted
class, only how many true and false positives fall at each score. :class:`ScoreStats` holds
exactly that, as sparse counts on a fixed grid, and counts add up: across chunks of a file,
partitions of a Dask DataFrame, and time
(:meth:`topcal.calibrators.base.Calibrator.update`).

The grid
--------
Per-sample scores are counted on ``n_cells`` equal cells of the declared score range, (lo +
j h, lo + (j + 1) h] with h = (hi - lo) / n_cells, left open like the histogram's bins (a
score equal to lo goes to cell 0). Binned input (e.g. the PhANNs counts) keeps its own bins:
their counts are already the statistics. A statistic is a row (class, bin lo, bin hi, TP,
FP); rows with the same class and bin merge by adding their counts; rows are kept in one
canonical order (class, bin), so any split of the same data, merged in any order, gives the
same statistics bit for bit (integer counts below 2^53 add exactly in float64).

Exact scores
------------
A class with few distinct per-sample scores (at most :data:`EXACT_SCORES`: random forests,
k-NN, rounded outputs) keeps them exactly: one row per distinct score s, with lo = hi = s (a
*point* row), instead of cells. A merge keeps a class's point rows while the union of its
distinct scores stays within the limit and no part holds the class on the grid; otherwise
every point row of the class moves to its cell (the row ``from_data`` would have given), so
the result still depends only on the union of the data, not on the split or the order.
Statistics made only of point rows describe the samples themselves
(:meth:`ScoreStats.to_data` gives per-sample rows weighted by their counts), so a fit from
them, and an ``update``, is the fit on the raw scores: bit for bit for the methods whose fit
sums integer counts (``hist``, ``cum``, ``conf1``, ...; tested), to the last bits of a sum
for the others.

Fitting from statistics is fitting the binned data they describe
(:meth:`ScoreStats.to_data`): a score on the grid is represented by its cell (midpoint for
the score, edges for the support), so against a fit on the raw scores a score moves by at
most h / 2 (1.2e-4 of the range with the default 4096 cells); this approximation remains for
classes with many distinct scores. Only empty cells are left out, so the size is bounded by
``K * max(n_cells, EXACT_SCORES)`` rows (5 numbers each), whatever the number of samples.

What is not here: the full score vector Y(X) that ``sts``, ``csts``, ``tswa`` and ``cstswa``
recalibrate has no finite summary on a score grid; those methods are fitted in memory.
"""

from __future__ import annotations

from typing import Iterable, Sequence

import numpy as np

from .._typing import ArrayLike
from ..data import TopLabelData, preview
from ..errors import DataError

__all__ = ["ScoreStats", "DEFAULT_CELLS", "EXACT_SCORES"]

#: Cells of the default grid over the declared score range (2^12: a score moves by at most
#: 1.2e-4 of the range; the kde binned engine uses 4097 points over each class's support,
#: the same order of resolution).
DEFAULT_CELLS = 4096

#: A class with at most this many distinct per-sample scores keeps them exactly (point rows,
#: lo == hi): a random forest of 100 trees gives 101 values, k-NN k + 1, scores rounded to
#: 0.01 101.
EXACT_SCORES = 256

#: Largest grid accepted (keeps a model's statistics below ~K * 1M rows).
MAX_CELLS = 2**20


def _check_cells(n_cells) -> int:
    if (
        isinstance(n_cells, bool)
        or not isinstance(n_cells, (int, np.integer))
        or not 1 <= n_cells <= MAX_CELLS
    ):
        raise DataError(f"n_cells must be an integer in [1, {MAX_CELLS}], got {n_cells!r}")
    return int(n_cells)


class ScoreStats:
    """Per predicted class, per score bin, the true- and false-positive counts.

    Build with :meth:`from_data`; add with :meth:`merge` (or ``+``); fit with
    ``calibrator.fit(stats.to_data())`` (``Calibrator.update`` does it).

    Attributes
    ----------
    classes : tuple of str
    score_range : (float, float)
    n_cells : int
        Grid cells over the score range for per-sample scores.
    cls : ndarray of int64, shape (m,)
        Predicted class of each statistic row.
    lo, hi : ndarray of float64, shape (m,)
        The row's bin (lo, hi].
    tp, fp : ndarray of float64, shape (m,)
        Counts (weights) of true and false positives in the bin.
    """

    __slots__ = ("classes", "score_range", "n_cells", "cls", "lo", "hi", "tp", "fp")

    def __init__(
        self,
        classes: Sequence[str],
        score_range: tuple[float, float],
        n_cells: int,
        cls: ArrayLike,
        lo: ArrayLike,
        hi: ArrayLike,
        tp: ArrayLike,
        fp: ArrayLike,
        *,
        canonical: bool = False,
    ) -> None:
        self.classes = tuple(str(c) for c in classes)
        self.score_range = (float(score_range[0]), float(score_range[1]))
        self.n_cells = _check_cells(n_cells)
        arrays = [
            np.asarray(cls, dtype=np.int64),
            *(np.asarray(a, dtype=np.float64) for a in (lo, hi, tp, fp)),
        ]
        if not canonical:
            arrays = _canonical(*arrays)
        self.cls, self.lo, self.hi, self.tp, self.fp = arrays

    # ---------------------------------------------------------------- build
    @classmethod
    def from_data(cls, data: TopLabelData, *, n_cells: int = DEFAULT_CELLS) -> "ScoreStats":
        """The statistics of labelled ``data`` (per-sample scores on the grid; bins kept)."""
        if not isinstance(data, TopLabelData):
            raise DataError(
                f"ScoreStats.from_data expects a TopLabelData, got {type(data).__name__}"
            )
        data.require_labels("counting statistics")
        n_cells = _check_cells(n_cells)
        if data.is_binned:
            keep = (data.tp + data.fp) > 0
            lo, hi = data.bin_edges[keep, 0], data.bin_edges[keep, 1]
            return cls(
                data.classes,
                data.score_range,
                n_cells,
                data.pred[keep],
                lo,
                hi,
                data.tp[keep],
                data.fp[keep],
            )
        grid = cls._grid_counts(data, n_cells)
        exact = _exact_classes(data, grid)
        if not exact.any():
            return grid
        # classes with few distinct scores: those scores themselves (point rows) instead of
        # their cells
        keep = exact[data.pred]
        point = cls(
            data.classes,
            data.score_range,
            n_cells,
            data.pred[keep],
            data.score[keep],
            data.score[keep],
            data.tp[keep],
            data.fp[keep],
        )
        on_grid = ~exact[grid.cls]
        return ScoreStats.merge_all([grid._rows(on_grid), point])

    def _rows(self, keep) -> "ScoreStats":
        """The rows ``keep`` (a mask) as statistics of their own (still canonical)."""
        return ScoreStats(
            self.classes,
            self.score_range,
            self.n_cells,
            self.cls[keep],
            self.lo[keep],
            self.hi[keep],
            self.tp[keep],
            self.fp[keep],
            canonical=True,
        )

    @classmethod
    def _grid_counts(cls, data: TopLabelData, n_cells: int) -> "ScoreStats":
        """Per-sample rows counted on the grid: one counting pass over (class, cell) keys,
        in canonical order."""
        K = data.n_classes
        key = data.pred * n_cells + cell_index(data.score, data.score_range, n_cells)
        if K * n_cells <= 4 * key.size:  # dense counting: one pass, no sort
            tp = np.bincount(key, weights=data.tp, minlength=K * n_cells)
            fp = np.bincount(key, weights=data.fp, minlength=K * n_cells)
            nz = np.flatnonzero((tp + fp) > 0)
            tp, fp = tp[nz], fp[nz]
        else:  # many classes, few rows: count over the keys present only
            nz, inv = np.unique(key, return_inverse=True)
            tp = np.bincount(inv, weights=data.tp, minlength=nz.size)
            fp = np.bincount(inv, weights=data.fp, minlength=nz.size)
            keep = (tp + fp) > 0
            nz, tp, fp = nz[keep], tp[keep], fp[keep]
        c, j = np.divmod(nz, n_cells)
        lo, hi = cell_edges(j, data.score_range, n_cells)
        return cls(data.classes, data.score_range, n_cells, c, lo, hi, tp, fp, canonical=True)

    @classmethod
    def empty(
        cls,
        classes: Sequence[str],
        score_range: tuple[float, float],
        n_cells: int = DEFAULT_CELLS,
    ) -> "ScoreStats":
        """Statistics of no data (the start of an accumulation)."""
        z = np.zeros(0)
        return cls(
            classes,
            score_range,
            n_cells,
            np.zeros(0, dtype=np.int64),
            z,
            z,
            z,
            z,
            canonical=True,
        )

    # ---------------------------------------------------------------- merge
    def _check_mergeable(self, other: "ScoreStats") -> None:
        if not isinstance(other, ScoreStats):
            raise DataError(
                f"can only merge ScoreStats with ScoreStats, got {type(other).__name__}"
            )
        if other.classes != self.classes:
            raise DataError(
                f"cannot merge statistics of classes {preview(other.classes)} into "
                f"{preview(self.classes)}; read the new data with the same classes (same "
                "probability columns, or classes=[...])"
            )
        if other.score_range != self.score_range:
            raise DataError(
                f"cannot merge statistics on score range {other.score_range} into "
                f"{self.score_range}; declare the same score range"
            )
        if other.n_cells != self.n_cells:
            raise DataError(
                f"cannot merge statistics on {other.n_cells} cells into {self.n_cells} cells"
            )

    def merge(self, *others: "ScoreStats") -> "ScoreStats":
        """The statistics of this data and ``others`` together (a new object)."""
        return ScoreStats.merge_all([self, *others])

    __add__ = merge

    @staticmethod
    def merge_all(parts: Iterable["ScoreStats"]) -> "ScoreStats":
        """Merge any number of statistics in one pass (the same result in any order)."""
        parts = list(parts)
        if not parts:
            raise DataError("merge needs at least one ScoreStats")
        first = parts[0]
        for p in parts[1:]:
            first._check_mergeable(p)
        cat = [
            np.concatenate([getattr(p, a) for p in parts])
            for a in ("cls", "lo", "hi", "tp", "fp")
        ]
        merged = ScoreStats(first.classes, first.score_range, first.n_cells, *cat)
        return merged._point_rows_to_grid()

    def _point_rows_to_grid(self) -> "ScoreStats":
        """Move the point rows of every class that has a bin, or too many distinct scores,
        to their cells."""
        point = self.lo == self.hi
        if not point.any():
            return self
        K = len(self.classes)
        n_points = np.bincount(self.cls[point], minlength=K)
        n_bins = np.bincount(self.cls[~point], minlength=K)
        gridded = (n_bins > 0) | (n_points > EXACT_SCORES)
        move = point & gridded[self.cls]
        if not move.any():
            return self
        j = cell_index(self.lo[move], self.score_range, self.n_cells)
        lo, hi = self.lo.copy(), self.hi.copy()
        lo[move], hi[move] = cell_edges(j, self.score_range, self.n_cells)
        return ScoreStats(
            self.classes, self.score_range, self.n_cells, self.cls, lo, hi, self.tp, self.fp
        )

    @property
    def exact(self) -> bool:
        """True when every row is a point row: the statistics are the samples' own scores,
        not cells."""
        return bool(self.cls.size) and bool(np.all(self.lo == self.hi))

    # ---------------------------------------------------------------- query
    @property
    def grid(self) -> tuple:
        """(classes, score_range, n_cells): what counts must share to be added together."""
        return (self.classes, self.score_range, self.n_cells)

    @property
    def n_rows(self) -> int:
        """Number of non-empty (class, bin) rows."""
        return int(self.cls.size)

    @property
    def n_samples(self) -> float:
        """Total count (sample weight) behind the statistics."""
        return float(self.tp.sum() + self.fp.sum())

    def class_counts(self) -> tuple[np.ndarray, np.ndarray]:
        """(|TP_k|, |FP_k|) per class."""
        K = len(self.classes)
        return np.bincount(self.cls, self.tp, K), np.bincount(self.cls, self.fp, K)

    def equals(self, other: "ScoreStats") -> bool:
        """True when both hold the same statistics bit for bit."""
        return (
            isinstance(other, ScoreStats)
            and self.classes == other.classes
            and self.score_range == other.score_range
            and self.n_cells == other.n_cells
            and all(
                np.array_equal(getattr(self, a), getattr(other, a))
                for a in ("cls", "lo", "hi", "tp", "fp")
            )
        )

    def to_data(self) -> TopLabelData:
        """The binned :class:`TopLabelData` these statistics describe (what a fit sees)."""
        if self.n_rows == 0:
            raise DataError("the statistics hold no samples; add labelled data first")
        mid = bin_midpoints(self.lo, self.hi, self.score_range)  # a point row's own score
        return TopLabelData(
            self.classes,
            self.cls.copy(),
            mid,
            self.score_range,
            tp=self.tp.copy(),
            fp=self.fp.copy(),
            bin_edges=None if self.exact else np.column_stack([self.lo, self.hi]),
        )

    def __repr__(self) -> str:
        return (
            f"ScoreStats(classes={len(self.classes)}, rows={self.n_rows}, "
            f"samples={self.n_samples:g}, score_range={self.score_range}, "
            f"n_cells={self.n_cells})"
        )

    # ---------------------------------------------------------------- JSON
    def to_dict(self) -> dict:
        """JSON-ready dict (classes and score range are the model's).

        Rows on the grid are stored by cell index (``cell``); other rows (bins of binned
        input, and point rows: exact scores, lo == hi) have ``cell`` -1 and their edges in
        ``lo`` and ``hi``, in order. Integral counts are written as integers.
        """
        j = cell_index(0.5 * (self.lo + self.hi), self.score_range, self.n_cells)
        a, b = cell_edges(j, self.score_range, self.n_cells)
        on_grid = (a == self.lo) & (b == self.hi)
        return {
            "n_cells": self.n_cells,
            "class": self.cls.tolist(),
            "cell": np.where(on_grid, j, -1).tolist(),
            "lo": self.lo[~on_grid].tolist(),
            "hi": self.hi[~on_grid].tolist(),
            "tp": _counts_json(self.tp),
            "fp": _counts_json(self.fp),
        }

    @classmethod
    def from_dict(
        cls, d: dict, classes: Sequence[str], score_range: tuple[float, float]
    ) -> "ScoreStats":
        """Rebuild from :meth:`to_dict` output (raises ValueError when malformed)."""
        n_cells = (
            _check_cells(d["n_cells"]) if isinstance(d["n_cells"], int) else _check_cells(-1)
        )
        c = np.asarray(d["class"], dtype=np.int64)
        j = np.asarray(d["cell"], dtype=np.int64)
        tp, fp = (np.asarray(d[k], dtype=np.float64) for k in ("tp", "fp"))
        lo_x, hi_x = (np.asarray(d[k], dtype=np.float64) for k in ("lo", "hi"))
        m = c.shape[0] if c.ndim == 1 else -1
        if any(a.ndim != 1 or a.shape[0] != m for a in (j, tp, fp)) or not (
            np.isfinite(tp).all() and np.isfinite(fp).all()
        ):
            raise ValueError("statistics columns must be finite lists of one length")
        off = j < 0
        if (
            lo_x.ndim != 1
            or lo_x.shape != hi_x.shape
            or lo_x.shape[0] != int(off.sum())
            or not (np.isfinite(lo_x).all() and np.isfinite(hi_x).all())
        ):
            raise ValueError("statistics bins (lo, hi) do not match the rows off the grid")
        if m and (
            c.min() < 0
            or c.max() >= len(classes)
            or j.max() >= n_cells
            or np.any(tp < 0)
            or np.any(fp < 0)
        ):
            raise ValueError("statistics rows are inconsistent (class index, cell or counts)")
        lo, hi = cell_edges(np.maximum(j, 0), score_range, n_cells)
        lo[off], hi[off] = lo_x, hi_x
        if np.any(lo > hi):
            raise ValueError("statistics bins must have lo <= hi (lo == hi: an exact score)")
        out = cls(classes, score_range, n_cells, c, lo, hi, tp, fp)
        if out.n_rows != m or not out._point_rows_to_grid().equals(out):
            raise ValueError("statistics rows are not unique (class, bin) pairs")
        return out


def _exact_classes(data: TopLabelData, grid: ScoreStats) -> np.ndarray:
    """Per class: whether its per-sample scores are few enough (:data:`EXACT_SCORES`) to
    keep exactly.

    A class on more than EXACT_SCORES cells has more distinct scores than that: only the
    others are counted (one sort of their rows, none at all for continuous scores on many
    cells).
    """
    K = data.n_classes
    cand = np.bincount(grid.cls, minlength=K) <= EXACT_SCORES
    cand &= np.bincount(data.pred, weights=data.tp + data.fp, minlength=K) > 0
    if not cand.any():
        return cand
    rows = cand[data.pred] & ((data.tp + data.fp) > 0)
    pairs = np.unique(
        np.column_stack([data.pred[rows].astype(np.float64), data.score[rows]]), axis=0
    )
    n_distinct = np.bincount(pairs[:, 0].astype(np.int64), minlength=K)
    return cand & (n_distinct <= EXACT_SCORES)


def _counts_json(v: np.ndarray) -> list:
    """Counts as JSON numbers: integers where every count is integral (shorter files)."""
    if v.size and np.all(v == np.round(v)) and v.max() < 2.0**53:
        return v.astype(np.int64).tolist()
    return v.tolist()


def cell_index(score: np.ndarray, score_range, n_cells: int) -> np.ndarray:
    """Cell j of each score: (lo + j h, lo + (j + 1) h], lo itself in cell 0."""
    lo, hi = score_range
    x = (np.asarray(score, dtype=np.float64) - lo) * (n_cells / (hi - lo))
    return np.clip(np.ceil(x).astype(np.int64) - 1, 0, n_cells - 1)


def cell_edges(j: np.ndarray, score_range, n_cells: int) -> tuple[np.ndarray, np.ndarray]:
    """Edges (lo, hi] of cells ``j``; the outer edges are the range's own."""
    lo, hi = score_range
    h = (hi - lo) / n_cells
    a = np.where(j == 0, lo, lo + j * h)
    b = np.where(j == n_cells - 1, hi, lo + (j + 1) * h)
    return a, b


def bin_midpoints(lo: np.ndarray, hi: np.ndarray, score_range) -> np.ndarray:
    """The score a fit from statistics gives the rows of bins (lo, hi]: their midpoint,
    inside the range."""
    return np.clip(0.5 * (lo + hi), score_range[0], score_range[1])


def cell_midpoints(j: np.ndarray, score_range, n_cells: int) -> np.ndarray:
    """:func:`bin_midpoints` of cells ``j``: where a per-sample score in cell j sits in a
    fit from statistics."""
    return bin_midpoints(*cell_edges(j, score_range, n_cells), score_range)


def _canonical(c, lo, hi, tp, fp):
    """Sort rows by (class, lo, hi), add rows with equal keys, drop empty rows."""
    if c.size == 0:
        return [c, lo, hi, tp, fp]
    order = np.lexsort((hi, lo, c))
    c, lo, hi, tp, fp = c[order], lo[order], hi[order], tp[order], fp[order]
    new = np.ones(c.size, dtype=bool)
    new[1:] = (c[1:] != c[:-1]) | (lo[1:] != lo[:-1]) | (hi[1:] != hi[:-1])
    starts = np.flatnonzero(new)
    tp = np.add.reduceat(tp, starts)
    fp = np.add.reduceat(fp, starts)
    c, lo, hi = c[starts], lo[starts], hi[starts]
    keep = (tp + fp) > 0
    return [c[keep], lo[keep], hi[keep], tp[keep], fp[keep]]
