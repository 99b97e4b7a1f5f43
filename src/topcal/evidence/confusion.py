"""What label-shift adaptation needs from the labelled test set: :class:`ConfusionStats`.

Under label shift (class frequencies change, p(x | y) does not), the top-label
confidence of predicted class k moves by the prior ratio of its true
positives against the *mix of true classes behind its false positives*
(see ``docs/label_shift.md``). A fitted calibrator therefore keeps, per
predicted class k and per score region of k, the weighted count of rows of
each true class j: the confusion counts of the test set, split by score.
The regions are equal-FP-mass quantile bins of the class's false-positive
scores, as many as the false positives allow (at least
:data:`MIN_FP_PER_REGION` per region, at most :data:`MAX_REGIONS`), so the
mix can change with the score where the data carry that information.

The same counts give the confusion matrix BBSE-style estimators invert and
the source class priors (column sums).

Counts need the true class of every row, so binned data (TP/FP counts only,
as in the PhANNs file) have no such statistics: :meth:`ConfusionStats.from_data`
returns ``None`` for them.

Counts in fixed regions add up (:meth:`ConfusionStats.merge`): ``update`` and
its streamed and Dask forms count new data in the model's regions
(:meth:`ConfusionStats.count`) and add. A *fit* in one pass over data that do
not fit in memory cannot know its FP quantiles in advance, so it counts
:class:`GridConfusion` instead -- per predicted class, score cell (the grid of
:class:`~topcal.evidence.stats.ScoreStats`) and true class -- and draws the regions
after the pass by the same rule, on scores moved to their cell midpoints (what
a fit from statistics sees of them): :meth:`GridConfusion.to_confusion` equals
``ConfusionStats.from_data`` of the data with every score on its cell midpoint.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..data import TopLabelData, preview, rows_by_class
from ..errors import DataError
from .stats import DEFAULT_CELLS, cell_index, cell_midpoints

__all__ = [
    "ConfusionStats",
    "GridConfusion",
    "fp_region_edges",
    "MIN_FP_PER_REGION",
    "MAX_REGIONS",
    "zero_counts",
]

#: Fewest false positives per score region: with 40 FPs a mix share of 0.25
#: has a standard error of ~0.07, small enough to be worth a separate region.
MIN_FP_PER_REGION = 40
#: Most score regions per predicted class (a coarse, piecewise-constant mix).
MAX_REGIONS = 4


@dataclass(frozen=True, eq=False)
class ConfusionStats:
    """Per predicted class and score region, weighted counts of each true class.

    Attributes
    ----------
    classes : tuple of str, length K
    edges : tuple of K ndarrays
        Interior region boundaries of each predicted class on the score scale
        (increasing, possibly empty = one region). A score s falls in region
        ``searchsorted(edges, s, side="left")``: regions are (e_{i-1}, e_i],
        half-open on the left like the histogram bins.
    counts : tuple of K ndarrays, shape (n_regions_k, K)
        ``counts[k][r, j]``: weight of rows predicted as k, in region r of k,
        whose true class is j. ``counts[k][:, k]`` are the true positives.
    """

    classes: tuple[str, ...]
    edges: tuple[np.ndarray, ...]
    counts: tuple[np.ndarray, ...]

    # ------------------------------------------------------------------ build
    @classmethod
    def from_data(
        cls,
        data: TopLabelData,
        *,
        min_fp_per_region: int = MIN_FP_PER_REGION,
        max_regions: int = MAX_REGIONS,
    ) -> "ConfusionStats | None":
        """Counts of labelled per-sample ``data``; None when true classes are unknown (binned
        data)."""
        if data.labels is None or data.tp is None:
            return None
        K = data.n_classes
        w = data.tp + data.fp
        # the FP scores of each class, in row order (one grouping of the FP rows only); the
        # counts in one pass over all rows (_counts_in_regions)
        fp_rows = np.flatnonzero(data.labels != data.pred)
        edges = [np.empty(0)] * K
        for k, idx in rows_by_class(data.pred[fp_rows], K):
            rows = fp_rows[idx]
            edges[k] = class_region_edges(data.score[rows], w[rows], min_fp_per_region, max_regions)
        counts = _counts_in_regions(edges, data.pred, data.score, data.labels, w, K)
        return cls(tuple(data.classes), tuple(edges), counts)

    def count(self, data: TopLabelData) -> "ConfusionStats | None":
        """The counts of labelled per-sample ``data`` (on the same class list) in these regions.

        What streamed and Dask updates compute per chunk or partition; they add
        up with :meth:`merge`. None when ``data`` has no true classes (binned data).
        """
        if data.labels is None or data.tp is None:
            return None
        if tuple(data.classes) != self.classes:
            raise DataError(
                f"confusion counts of classes {preview(data.classes)} do not match "
                f"{preview(self.classes)}"
            )
        K = self.n_classes
        w = data.tp + data.fp
        counts = _counts_in_regions(self.edges, data.pred, data.score, data.labels, w, K)
        return ConfusionStats(self.classes, self.edges, counts)

    def merge(self, *others: "ConfusionStats") -> "ConfusionStats":
        """These counts plus those of ``others``, counted in the same regions (a new object)."""
        for o in others:
            if not isinstance(o, ConfusionStats):
                raise DataError(
                    f"can only merge ConfusionStats with ConfusionStats, got {type(o).__name__}"
                )
            if o.classes != self.classes or any(
                not np.array_equal(a, b) for a, b in zip(o.edges, self.edges)
            ):
                raise DataError(
                    "cannot merge confusion counts of other classes or other score regions; "
                    "count new data in the model's regions (ConfusionStats.count)"
                )
        counts = tuple(
            sum((o.counts[k] for o in others), start=c) for k, c in enumerate(self.counts)
        )
        return ConfusionStats(self.classes, self.edges, counts)

    def add(self, data: TopLabelData) -> "ConfusionStats | None":
        """These counts plus those of labelled per-sample ``data`` (on the same class list), in
        these regions.

        What ``update`` keeps: the regions stay those of the first fit (their
        edges are quantiles of its FP scores), the counts in them add up, so the
        confusion matrix and source priors equal those of all the data exactly.
        None when ``data`` has no true classes (binned data).
        """
        new = self.count(data)
        return None if new is None else self.merge(new)

    # ---------------------------------------------------------------- queries
    @property
    def n_classes(self) -> int:
        return len(self.classes)

    def confusion(self) -> np.ndarray:
        """(K, K) weighted counts: row = predicted class, column = true class."""
        return np.vstack([c.sum(axis=0) for c in self.counts])

    def source_priors(self) -> np.ndarray:
        """Class frequencies of the labelled data (column sums of the confusion, normalised)."""
        col = np.zeros(self.n_classes)  # confusion()'s column sums, in its order, without K x K
        for c in self.counts:
            col += c.sum(axis=0)
        return col / col.sum()

    def region(self, k: int, score: np.ndarray) -> np.ndarray:
        """Region index of each score for predicted class ``k``."""
        return np.searchsorted(self.edges[k], np.asarray(score, dtype=np.float64), side="left")

    def row_counts(self, pred: np.ndarray, score: np.ndarray) -> np.ndarray:
        """(n, K): the counts of the region each row (predicted class, score) falls in."""
        pred = np.asarray(pred)
        out = np.empty((pred.shape[0], self.n_classes))
        for k, idx in rows_by_class(pred, self.n_classes):  # one sort, not a pass per class
            out[idx] = self.counts[k][self.region(k, score[idx])]
        return out

    # ----------------------------------------------------------- persistence
    def to_dict(self) -> dict:
        """JSON-ready and sparse: per class and region, the [true class, count] pairs with count >
        0.

        (Dense counts would be K x K numbers, mostly zeros: 10^6 for 1,000 classes.)
        """
        return {
            "edges": [e.tolist() for e in self.edges],
            "counts": [
                [[[int(j), float(row[j])] for j in np.flatnonzero(row)] for row in c]
                for c in self.counts
            ],
        }

    @classmethod
    def from_dict(cls, d: dict, classes: tuple[str, ...]) -> "ConfusionStats":
        """Rebuild from :meth:`to_dict` output (raises ValueError when malformed)."""
        K = len(classes)
        if len(d["edges"]) != K or len(d["counts"]) != K:
            raise ValueError("confusion statistics have the wrong number of classes")
        edges, counts, zero = [], [], np.zeros(K)
        for e, regions in zip(d["edges"], d["counts"]):
            e = np.asarray(e, dtype=np.float64).reshape(-1)
            if not np.all(np.isfinite(e)) or np.any(np.diff(e) <= 0) or len(regions) != e.size + 1:
                raise ValueError(
                    "confusion counts need one region more than there are increasing finite edges"
                )
            if all(isinstance(r, list) and not r for r in regions):  # no counts: shared zeros
                edges.append(e)
                counts.append(zero_counts(e.size + 1, zero))
                continue
            c = np.zeros((e.size + 1, K))
            for r, pairs in enumerate(regions):
                for j, v in pairs:
                    if isinstance(j, bool) or not isinstance(j, int) or not 0 <= j < K:
                        raise ValueError(
                            f"confusion counts name class index {j!r}, outside 0..{K - 1}"
                        )
                    v = float(v)
                    if not (np.isfinite(v) and v >= 0):
                        raise ValueError("confusion counts must be finite and >= 0")
                    c[r, j] = v
            edges.append(e)
            counts.append(c)
        return cls(tuple(classes), tuple(edges), tuple(counts))


@dataclass(frozen=True, eq=False)
class GridConfusion:
    """Per predicted class, score cell and true class, weighted counts (sparse; mergeable).

    What a one-pass fit counts where the regions of :class:`ConfusionStats`
    (quantiles of the FP scores) cannot be known in advance. Cells are those of
    :class:`~topcal.evidence.stats.ScoreStats` (``n_cells`` equal cells of the score
    range). Only non-empty (class, cell, true class) triples are kept, in key
    order, so any split merged in any order gives the same counts bit for bit
    (integer counts). Size: at most the number of distinct triples, itself at
    most min(rows, K * K * n_cells); 16 bytes each in memory.

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

    @staticmethod
    def merge_all(parts) -> "GridConfusion":
        """Counts of all ``parts`` together (same classes, score range and grid)."""
        parts = list(parts)
        if not parts:
            raise DataError("merge needs at least one GridConfusion")
        first = parts[0]
        for p in parts[1:]:
            if (p.classes, p.score_range, p.n_cells) != (
                first.classes,
                first.score_range,
                first.n_cells,
            ):
                raise DataError(
                    "cannot merge confusion counts of other classes, score range or grid"
                )
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
        """Regions and counts by the rule of :meth:`ConfusionStats.from_data`, every score at its
        cell midpoint.

        Equal to ``ConfusionStats.from_data`` of the per-sample data with each
        score replaced by its cell midpoint (bit for bit for integer counts):
        the weighted quantiles of the FP cells pick the same order statistics
        as the per-sample ones.
        """
        K = len(self.classes)
        cell_key, j = np.divmod(self.key, K)
        k_of, cell = np.divmod(cell_key, self.n_cells)
        mid = cell_midpoints(cell, self.score_range, self.n_cells)
        bounds = np.searchsorted(k_of, np.arange(K + 1))  # keys are sorted by predicted class first
        edges = []
        for k in range(K):
            sl = slice(bounds[k], bounds[k + 1])
            s, lab, w = mid[sl], j[sl], self.count[sl]
            wrong = lab != k
            edges.append(class_region_edges(s[wrong], w[wrong], min_fp_per_region, max_regions))
        return ConfusionStats(
            self.classes, tuple(edges), _counts_in_regions(edges, k_of, mid, j, self.count, K)
        )


def _counts_in_regions(
    edges, pred: np.ndarray, score: np.ndarray, labels: np.ndarray, weight: np.ndarray, K: int
) -> tuple[np.ndarray, ...]:
    """Per predicted class k, the (len(edges[k]) + 1, K) weighted counts of the true classes per
    region.

    All rows in one pass: a row's region is the number of its class's edges below its score
    (``searchsorted(edges[k], s, side="left")``), read from one padded edge table. ``bincount``
    adds each cell's weights in row order, as counting class by class did, so the counts are
    the same bit for bit.
    """
    n_edges = np.array([e.size for e in edges], dtype=np.int64)
    width = int(n_edges.max()) if K else 0
    table = np.full((K, max(width, 1)), np.inf)
    for k, e in enumerate(edges):
        table[k, : e.size] = e
    region = np.zeros(pred.shape[0], dtype=np.int64)
    for j in range(width):
        region += table[pred, j] < score
    # only classes with rows get their own counts: at 10^4 classes a K x K table of zeros was 5 x a
    # 2,000-row input; the others share one read-only block of zeros
    present = np.bincount(pred, minlength=K) > 0
    first = np.concatenate([[0], np.cumsum(np.where(present, n_edges + 1, 0))])  # first regions
    key = (first[pred] + region) * K + labels
    flat = np.bincount(key, weights=weight, minlength=int(first[-1]) * K)
    zero = np.zeros(K)
    return tuple(
        flat[first[k] * K : first[k + 1] * K].reshape(-1, K)
        if present[k]
        else zero_counts(int(n_edges[k]) + 1, zero)
        for k in range(K)
    )


def zero_counts(regions: int, zero: np.ndarray) -> np.ndarray:
    """(regions, K) zeros as a read-only view of ``zero`` (K zeros shared by every class without
    rows: no memory of its own)."""
    return np.broadcast_to(zero, (regions, zero.shape[0]))


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

    Ties that make edges coincide merge regions; an edge at the largest FP
    score is dropped (it would leave an FP-free top region).
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
