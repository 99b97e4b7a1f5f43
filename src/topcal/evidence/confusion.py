"""What label-shift adaptation needs from the labelled test set: :class:`ConfusionStats`.

Under label shift (class frequencies change, p(x | y) does not), the top-label confidence of
predicted class k moves by the prior ratio of its true positives against the *mix of true
classes behind its false positives* (see ``docs/label_shift.md``). A fitted calibrator
therefore keeps, per predicted class k and per score region of k, the weighted count of rows
of each true class j: the confusion counts of the test set, split by score. The regions are
equal-FP-mass quantile bins of the class's false-positive scores, as many as the false
positives allow (at least :data:`MIN_FP_PER_REGION` per region, at most
:data:`MAX_REGIONS`), so the mix can change with the score where the data carry that
information.

The same counts give the confusion matrix BBSE-style estimators invert and the source class
priors (column sums).

Counts need the true class of every row, so binned data (TP/FP counts only, as in the PhANNs
file) have no such statistics: :meth:`ConfusionStats.from_data` returns ``None`` for them.

Counts in fixed regions add up (:meth:`ConfusionStats.merge`): ``update`` and its streamed
and Dask forms count new data in the model's regions (:meth:`ConfusionStats.count`) and add.
A *fit* in one pass over data that do not fit in memory cannot know its FP quantiles in
advance, so it counts :class:`GridConfusion` instead -- per predicted class, score cell (the
grid of :class:`~topcal.evidence.stats.ScoreStats`) and true class -- and draws the regions
after the pass by the same rule, on scores moved to their cell midpoints (what a fit from
statistics sees of them): :meth:`GridConfusion.to_confusion` equals
``ConfusionStats.from_data`` of the data with every score on its cell midpoint.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
from scipy import sparse

from ..data import TopLabelData, preview, rows_by_class
from ..errors import DataError
from .stats import DEFAULT_CELLS, cell_index, cell_midpoints

__all__ = [
    "ConfusionStats",
    "GridConfusion",
    "fp_region_edges",
    "MIN_FP_PER_REGION",
    "MAX_REGIONS",
    "SPARSE_LAYOUT",
]

#: Fewest false positives per score region: with 40 FPs a mix share of 0.25 has a standard
#: error of ~0.07, small enough to be worth a separate region.
MIN_FP_PER_REGION = 40
#: Most score regions per predicted class (a coarse, piecewise-constant mix).
MAX_REGIONS = 4
#: The ``layout`` of :meth:`ConfusionStats.to_dict`: (cell, true class, count) triples.
#: Files without a layout hold the older per-class, per-region lists of pairs (still read).
SPARSE_LAYOUT = "cells"
#: The edges of a class with one region (shared: a class without edges costs no array).
_NO_EDGES = np.empty(0)
_NO_EDGES.flags.writeable = False


@dataclass(frozen=True, eq=False)
class ConfusionStats:
    """Per predicted class and score region, weighted counts of each true class (sparse).

    The (predicted class, score region) pairs are the *cells*, numbered class by class:
    class k's regions are cells ``cell_start[k]`` to ``cell_start[k + 1] - 1``. Only the
    (cell, true class) pairs that hold rows are stored, so the memory and the model file
    follow the data, not K^2: a class never predicted costs one cell offset and one empty
    edge array (shared).

    Attributes
    ----------
    classes : tuple of str, length K
    edges : tuple of K ndarrays
        Interior region boundaries of each predicted class on the score scale (increasing,
        possibly empty = one region). A score s falls in region ``searchsorted(edges, s,
        side="left")``: regions are (e_{i-1}, e_i], half-open on the left like the histogram
        bins.
    table : scipy.sparse.csr_matrix, shape (n_cells, K)
        ``table[cell_start[k] + r, j]``: weight of rows predicted as k, in region r of k,
        whose true class is j (canonical: sorted indices, no duplicates, no explicit zeros).
    """

    classes: tuple[str, ...]
    edges: tuple[np.ndarray, ...]
    table: "sparse.csr_matrix"
    if TYPE_CHECKING:  # derived in __post_init__ (not a constructor argument)
        cell_start: np.ndarray = field(init=False)

    def __post_init__(self):
        n_edges = np.fromiter(
            (e.size for e in self.edges), dtype=np.int64, count=len(self.edges)
        )
        start = np.zeros(n_edges.size + 1, dtype=np.int64)
        np.cumsum(n_edges + 1, out=start[1:])
        if self.table.shape != (int(start[-1]), len(self.classes)):
            raise ValueError("confusion table's shape does not match its classes and regions")
        object.__setattr__(self, "cell_start", start)

    # ------------------------------------------------------------------ build
    @classmethod
    def from_data(
        cls,
        data: TopLabelData,
        *,
        min_fp_per_region: int = MIN_FP_PER_REGION,
        max_regions: int = MAX_REGIONS,
    ) -> "ConfusionStats | None":
        """Counts of labelled per-sample ``data``; None when true classes are unknown
        (binned data)."""
        if data.labels is None or data.tp is None:
            return None
        K = data.n_classes
        w = data.tp + data.fp
        # the FP scores of each class, in row order (one grouping of the FP rows only); the
        # counts in one pass over all rows (_cell_table)
        fp_rows = np.flatnonzero(data.labels != data.pred)
        edges = [_NO_EDGES] * K
        for k, idx in rows_by_class(data.pred[fp_rows], K):
            rows = fp_rows[idx]
            e = class_region_edges(data.score[rows], w[rows], min_fp_per_region, max_regions)
            edges[k] = e if e.size else _NO_EDGES
        return cls._counted(
            tuple(data.classes), tuple(edges), data.pred, data.score, data.labels, w
        )

    @classmethod
    def _counted(cls, classes, edges, pred, score, labels, weight) -> "ConfusionStats":
        start = _cell_starts(edges)
        cells = start[pred] + _regions(edges, pred, score)
        return cls(
            classes, edges, _cell_table(cells, labels, weight, int(start[-1]), len(classes))
        )

    @classmethod
    def of_counts(cls, classes, edges, counts) -> "ConfusionStats":
        """From dense per-class counts (``counts[k]`` of shape (len(edges[k]) + 1, K)), as
        older topcal kept them."""
        K = len(classes)
        rows, cols, vals, offset = [], [], [], 0
        for e, c in zip(edges, counts):
            c = np.asarray(c, dtype=np.float64)
            r, j = np.nonzero(c)
            rows.append(offset + r)
            cols.append(j)
            vals.append(c[r, j])
            offset += np.asarray(e).size + 1
        table = sparse.csr_matrix(
            (
                np.concatenate(vals or [np.empty(0)]),
                (
                    np.concatenate(rows or [np.empty(0, np.int64)]),
                    np.concatenate(cols or [np.empty(0, np.int64)]),
                ),
            ),
            shape=(offset, K),
        )
        table.sum_duplicates()
        return cls(tuple(classes), tuple(_edges_of(e) for e in edges), table)

    def count(self, data: TopLabelData) -> "ConfusionStats | None":
        """The counts of labelled per-sample ``data`` (on the same class list) in these
        regions.

        What streamed and Dask updates compute per chunk or partition; they add up with
        :meth:`merge`. None when ``data`` has no true classes (binned data).
        """
        if data.labels is None or data.tp is None:
            return None
        if tuple(data.classes) != self.classes:
            raise DataError(
                f"confusion counts of classes {preview(data.classes)} do not match "
                f"{preview(self.classes)}"
            )
        return ConfusionStats._counted(
            self.classes, self.edges, data.pred, data.score, data.labels, data.tp + data.fp
        )

    def merge(self, *others: "ConfusionStats") -> "ConfusionStats":
        """These counts plus those of ``others``, counted in the same regions (a new
        object)."""
        for o in others:
            if not isinstance(o, ConfusionStats):
                raise DataError(
                    "can only merge ConfusionStats with ConfusionStats, got "
                    f"{type(o).__name__}"
                )
            if o.classes != self.classes or any(
                a is not b and not np.array_equal(a, b) for a, b in zip(o.edges, self.edges)
            ):
                raise DataError(
                    "cannot merge confusion counts of other classes or other score regions; "
                    "count new data in the model's regions (ConfusionStats.count)"
                )
        table = self.table
        for o in others:  # cell by cell, in the order given: the sums of dense tables
            table = table + o.table
        table = sparse.csr_matrix(table)
        table.eliminate_zeros()
        table.sort_indices()
        return ConfusionStats(self.classes, self.edges, table)

    def add(self, data: TopLabelData) -> "ConfusionStats | None":
        """These counts plus those of labelled per-sample ``data`` (on the same class list),
        in these regions.

        What ``update`` keeps: the regions stay those of the first fit (their edges are
        quantiles of its FP scores), the counts in them add up, so the confusion matrix and
        source priors equal those of all the data exactly. None when ``data`` has no true
        classes (binned data).
        """
        new = self.count(data)
        return None if new is None else self.merge(new)

    # ---------------------------------------------------------------- queries
    @property
    def n_classes(self) -> int:
        return len(self.classes)

    @property
    def n_cells(self) -> int:
        return int(self.cell_start[-1])

    @property
    def cell_class(self) -> np.ndarray:
        """(n_cells,) the predicted class of each cell."""
        return np.repeat(np.arange(self.n_classes), np.diff(self.cell_start))

    def cells(self, pred: np.ndarray, score: np.ndarray) -> np.ndarray:
        """Each row's (predicted class, score region) cell."""
        pred = np.asarray(pred, dtype=np.int64)
        return self.cell_start[pred] + _regions(
            self.edges, pred, np.asarray(score, np.float64)
        )

    def class_counts(self, k: int) -> np.ndarray:
        """Dense (n_regions_k, K) counts of predicted class ``k``."""
        return self.table[int(self.cell_start[k]) : int(self.cell_start[k + 1])].toarray()

    @property
    def counts(self) -> tuple[np.ndarray, ...]:
        """Dense per-class counts, ``counts[k]`` of shape (n_regions_k, K) (K x K numbers in
        all: for a few classes only; the library itself reads :attr:`table`)."""
        return tuple(self.class_counts(k) for k in range(self.n_classes))

    def confusion_sparse(self) -> "sparse.csr_matrix":
        """(K, K) weighted counts, sparse: row = predicted class, column = true class."""
        coo = self.table.tocoo()
        out = sparse.csr_matrix(
            (coo.data, (self.cell_class[coo.row], coo.col)), shape=(self.n_classes,) * 2
        )
        out.sum_duplicates()
        return out

    def confusion(self) -> np.ndarray:
        """(K, K) weighted counts: row = predicted class, column = true class (dense: K^2
        numbers; :meth:`confusion_sparse` at many classes)."""
        return self.confusion_sparse().toarray()

    def column_sums(self) -> np.ndarray:
        """(K,) weight of each true class."""
        t = self.table
        return np.bincount(t.indices, weights=t.data, minlength=self.n_classes)

    def fp_totals(self) -> np.ndarray:
        """(K,) weight of the false positives behind any predicted class, by true class."""
        t = self.table
        row = np.repeat(self.cell_class, np.diff(t.indptr))
        fp = t.indices != row
        return np.bincount(t.indices[fp], weights=t.data[fp], minlength=self.n_classes)

    def source_priors(self) -> np.ndarray:
        """Class frequencies of the labelled data (column sums of the confusion,
        normalised)."""
        col = self.column_sums()
        return col / col.sum()

    def region(self, k: int, score: np.ndarray) -> np.ndarray:
        """Region index of each score for predicted class ``k``."""
        return np.searchsorted(self.edges[k], np.asarray(score, dtype=np.float64), side="left")

    def row_counts(self, pred: np.ndarray, score: np.ndarray) -> np.ndarray:
        """(n, K): the counts of the region each row (predicted class, score) falls in
        (dense: for a few classes)."""
        return self.table[self.cells(pred, score)].toarray()

    # ----------------------------------------------------------- persistence
    def to_dict(self) -> dict:
        """JSON-ready and sparse: the edges of the classes that have any, and the (cell,
        true class, count) triples with count > 0 (integers where every count is one)."""
        t = self.table
        edged = [k for k, e in enumerate(self.edges) if e.size]
        data = t.data
        counts = (
            data.astype(np.int64).tolist()
            if np.all(data == np.round(data)) and (data.size == 0 or data.max() < 2**53)
            else data.tolist()
        )
        return {
            "layout": SPARSE_LAYOUT,
            "edged": edged,
            "edges": [self.edges[k].tolist() for k in edged],
            "cell": np.repeat(np.arange(t.shape[0]), np.diff(t.indptr)).tolist(),
            "class": t.indices.tolist(),
            "count": counts,
        }

    @classmethod
    def from_dict(cls, d: dict, classes: tuple[str, ...]) -> "ConfusionStats":
        """Rebuild from :meth:`to_dict` output (raises ValueError when malformed). Files of
        the older dense per-class layout are read through ``topcal.persist.migrate``."""
        if d.get("layout") != SPARSE_LAYOUT:
            raise ValueError(f"confusion statistics have unknown layout {d.get('layout')!r}")
        K = len(classes)
        edged = _int_array(d["edged"], "edged")
        if edged.size and (edged[0] < 0 or edged[-1] >= K or np.any(np.diff(edged) <= 0)):
            raise ValueError("confusion statistics name edged classes out of order or range")
        if len(d["edges"]) != edged.size:
            raise ValueError("confusion statistics have the wrong number of edge lists")
        edges = [_NO_EDGES] * K
        for k, e in zip(edged.tolist(), d["edges"]):
            edges[k] = _checked_edges(e)
        start = _cell_starts(edges)
        cell, j = _int_array(d["cell"], "cell"), _int_array(d["class"], "class")
        v = np.asarray(d["count"], dtype=np.float64).reshape(-1)
        if not cell.size == j.size == v.size:
            raise ValueError(
                "confusion statistics' cell, class and count lists differ in length"
            )
        if cell.size and (cell.min() < 0 or cell.max() >= start[-1]):
            raise ValueError("confusion counts name a cell outside the classes' regions")
        if j.size and (j.min() < 0 or j.max() >= K):
            raise ValueError(f"confusion counts name class index outside 0..{K - 1}")
        if not (np.all(np.isfinite(v)) and np.all(v > 0)):
            raise ValueError("confusion counts must be finite and > 0")
        key = cell * K + j
        if np.any(np.diff(key) <= 0):
            raise ValueError("confusion counts must be in (cell, class) order, each pair once")
        indptr = np.searchsorted(cell, np.arange(int(start[-1]) + 1))
        table = sparse.csr_matrix((v, j, indptr), shape=(int(start[-1]), K))
        return cls(tuple(classes), tuple(edges), table)


@dataclass(frozen=True, eq=False)
class GridConfusion:
    """Per predicted class, score cell and true class, weighted counts (sparse; mergeable).

    What a one-pass fit counts where the regions of :class:`ConfusionStats` (quantiles of
    the FP scores) cannot be known in advance. Cells are those of
    :class:`~topcal.evidence.stats.ScoreStats` (``n_cells`` equal cells of the score range).
    Only non-empty (class, cell, true class) triples are kept, in key order, so any split
    merged in any order gives the same counts bit for bit (integer counts). Size: at most
    the number of distinct triples, itself at most min(rows, K * K * n_cells); 16 bytes each
    in memory.

    Attributes
    ----------
    classes : tuple of str
    score_range : (float, float)
    n_cells : int
    key : ndarray of int64, shape (m,)
        ``(pred * n_cells + cell) * K + true class``, increasing.
    count : ndarray of float64, shape (m,)
    """

    classes: tuple[str, ...]
    score_range: tuple[float, float]
    n_cells: int
    key: np.ndarray
    count: np.ndarray

    @classmethod
    def from_data(
        cls, data: TopLabelData, *, n_cells: int = DEFAULT_CELLS
    ) -> "GridConfusion | None":
        """Counts of labelled per-sample ``data`` on its score range's grid; None for binned
        data."""
        if data.labels is None or data.tp is None:
            return None
        K = data.n_classes
        key = (
            data.pred * n_cells + cell_index(data.score, data.score_range, n_cells)
        ) * K + data.labels
        return cls._summed(
            tuple(data.classes), tuple(data.score_range), n_cells, key, data.tp + data.fp
        )

    @classmethod
    def _summed(cls, classes, score_range, n_cells, key, weight) -> "GridConfusion":
        """Add the weights of equal keys; keep the non-empty keys, in order."""
        size = len(classes) ** 2 * n_cells
        if size <= 4 * key.size:  # dense counting over every possible key: one pass, no sort
            count = np.bincount(key, weights=weight, minlength=size)
            uniq = np.flatnonzero(count > 0)
            count = count[uniq]
        else:  # many classes, few rows: count over the keys present only
            uniq, inv = np.unique(key, return_inverse=True)
            count = np.bincount(inv.reshape(-1), weights=weight, minlength=uniq.size)
        keep = count > 0
        return cls(
            classes,
            (float(score_range[0]), float(score_range[1])),
            int(n_cells),
            uniq[keep].astype(np.int64),
            count[keep],
        )

    @property
    def grid(self) -> tuple:
        """(classes, score_range, n_cells), as :attr:`ScoreStats.grid
        <topcal.evidence.stats.ScoreStats.grid>`: what counts must share to be added."""
        return (self.classes, self.score_range, self.n_cells)

    @staticmethod
    def merge_all(parts) -> "GridConfusion":
        """Counts of all ``parts`` together (same classes, score range and grid)."""
        parts = list(parts)
        if not parts:
            raise DataError("merge needs at least one GridConfusion")
        first = parts[0]
        if any(p.grid != first.grid for p in parts[1:]):
            raise DataError("cannot merge confusion counts of other classes, score range or grid")
        return GridConfusion._summed(
            first.classes,
            first.score_range,
            first.n_cells,
            np.concatenate([p.key for p in parts]),
            np.concatenate([p.count for p in parts]),
        )

    def merge(self, *others: "GridConfusion") -> "GridConfusion":
        """These counts plus those of ``others`` (a new object)."""
        return GridConfusion.merge_all([self, *others])

    def to_confusion(
        self, *, min_fp_per_region: int = MIN_FP_PER_REGION, max_regions: int = MAX_REGIONS
    ) -> ConfusionStats:
        """Regions and counts by the rule of :meth:`ConfusionStats.from_data`, every score
        at its cell midpoint.

        Equal to ``ConfusionStats.from_data`` of the per-sample data with each score
        replaced by its cell midpoint (bit for bit for integer counts): the weighted
        quantiles of the FP cells pick the same order statistics as the per-sample ones.
        """
        K = len(self.classes)
        cell_key, j = np.divmod(self.key, K)
        k_of, cell = np.divmod(cell_key, self.n_cells)
        mid = cell_midpoints(cell, self.score_range, self.n_cells)
        edges = [_NO_EDGES] * K
        wrong = j != k_of
        fk = k_of[wrong]  # keys are sorted by predicted class first: so are the FP keys
        classes, first = np.unique(fk, return_index=True)
        bounds = np.append(first, fk.size)
        s, w = mid[wrong], self.count[wrong]
        for i, k in enumerate(classes.tolist()):  # only the classes with false positives
            sl = slice(bounds[i], bounds[i + 1])
            e = class_region_edges(s[sl], w[sl], min_fp_per_region, max_regions)
            edges[k] = e if e.size else _NO_EDGES
        return ConfusionStats._counted(self.classes, tuple(edges), k_of, mid, j, self.count)


def _cell_starts(edges) -> np.ndarray:
    """(K + 1,) the first cell of each class (its regions are numbered from there)."""
    n = np.fromiter((e.size + 1 for e in edges), dtype=np.int64, count=len(edges))
    return np.concatenate([[0], np.cumsum(n)]).astype(np.int64)


def _regions(edges, pred: np.ndarray, score: np.ndarray) -> np.ndarray:
    """Each row's region within its class: the number of its class's edges below its score
    (``searchsorted(edges[k], s, side="left")``), read from one padded table of the classes
    that have edges (a class without any is region 0)."""
    edged = np.fromiter((k for k, e in enumerate(edges) if e.size), dtype=np.int64)
    region = np.zeros(pred.shape[0], dtype=np.int64)
    if edged.size == 0:
        return region
    width = max(edges[k].size for k in edged.tolist())
    table = np.full((edged.size + 1, width), np.inf)  # the last row: classes without edges
    for i, k in enumerate(edged.tolist()):
        table[i, : edges[k].size] = edges[k]
    slot = np.full(len(edges), edged.size, dtype=np.int64)
    slot[edged] = np.arange(edged.size)
    row = slot[pred]
    for c in range(width):
        region += table[row, c] < score
    return region


def _cell_table(cells, labels, weight, n_cells: int, K: int) -> "sparse.csr_matrix":
    """The (n_cells, K) sparse weighted counts of (cell, true class) pairs.

    ``bincount`` adds each pair's weights in row order (as the dense per-class counting
    did), so the counts are the same bit for bit; only the pairs present are kept (dense
    counting where every pair fits in a few times the rows)."""
    key = cells.astype(np.int64) * K + labels
    size = n_cells * K
    if size <= 4 * key.size:
        count = np.bincount(key, weights=weight, minlength=size)
        uniq = np.flatnonzero(count > 0)
        count = count[uniq]
    else:
        uniq, inv = np.unique(key, return_inverse=True)
        count = np.bincount(inv.reshape(-1), weights=weight, minlength=uniq.size)
        keep = count > 0
        uniq, count = uniq[keep], count[keep]
    row, col = np.divmod(uniq, K)
    indptr = np.searchsorted(row, np.arange(n_cells + 1))
    return sparse.csr_matrix((count, col, indptr), shape=(n_cells, K))


def _edges_of(e) -> np.ndarray:
    e = np.asarray(e, dtype=np.float64).reshape(-1)
    return e if e.size else _NO_EDGES


def _checked_edges(e) -> np.ndarray:
    e = np.asarray(e, dtype=np.float64).reshape(-1)
    if not np.all(np.isfinite(e)) or np.any(np.diff(e) <= 0):
        raise ValueError(
            "confusion counts need one region more than there are increasing finite edges"
        )
    return e if e.size else _NO_EDGES


def _int_array(values, what: str) -> np.ndarray:
    a = np.asarray(values)
    if a.size == 0:
        return np.empty(0, dtype=np.int64)
    if a.ndim != 1 or a.dtype.kind not in "iu":
        raise ValueError(f"confusion statistics' {what} must be a list of integers")
    return a.astype(np.int64)


def _names(classes) -> str:
    return preview(classes)


def class_region_edges(
    fp_score: np.ndarray,
    fp_weight: np.ndarray,
    min_fp_per_region: int = MIN_FP_PER_REGION,
    max_regions: int = MAX_REGIONS,
) -> np.ndarray:
    """The region edges of one predicted class from its FP scores: one region per
    ``min_fp_per_region`` false positives (by weight), at least 1, at most ``max_regions``."""
    n_fp = float(fp_weight.sum())
    n_reg = int(min(max_regions, max(1, np.floor(n_fp / min_fp_per_region))))
    return fp_region_edges(fp_score, fp_weight, n_reg)


def fp_region_edges(score: np.ndarray, weight: np.ndarray, n_regions: int) -> np.ndarray:
    """Interior edges splitting the FP scores into ``n_regions`` of (about) equal weight.

    Ties that make edges coincide merge regions; an edge at the largest FP score is dropped
    (it would leave an FP-free top region).
    """
    if n_regions <= 1 or score.size == 0:
        return np.empty(0)
    if np.all(weight == 1.0):  # per-sample rows: order statistics by partition, no full sort
        pos = np.ceil(score.size * np.arange(1, n_regions) / n_regions).astype(np.int64) - 1
        pos = np.clip(pos, 0, score.size - 1)
        part = np.partition(score, np.unique(np.append(pos, score.size - 1)))
        e, top = np.unique(part[pos]), part[-1]
    else:
        order = np.argsort(score, kind="stable")
        s, cw = score[order], np.cumsum(weight[order])
        targets = cw[-1] * np.arange(1, n_regions) / n_regions
        e, top = (
            np.unique(s[np.minimum(np.searchsorted(cw, targets, side="left"), s.size - 1)]),
            s[-1],
        )
    return e[e < top]
