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
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .data import TopLabelData, class_order

__all__ = ["ConfusionStats", "fp_region_edges", "MIN_FP_PER_REGION", "MAX_REGIONS"]

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
    def from_data(cls, data: TopLabelData, *, min_fp_per_region: int = MIN_FP_PER_REGION,
                  max_regions: int = MAX_REGIONS) -> "ConfusionStats | None":
        """Counts of labelled per-sample ``data``; None when true classes are unknown (binned data)."""
        if data.labels is None or data.tp is None:
            return None
        K = data.n_classes
        w = data.tp + data.fp
        order = class_order(data.pred, K)  # rows grouped by predicted class, one sort
        bounds = np.searchsorted(data.pred[order], np.arange(K + 1))
        edges, counts = [], []
        for k in range(K):
            idx = order[bounds[k]:bounds[k + 1]]
            s, lab, wk = data.score[idx], data.labels[idx], w[idx]
            wrong = lab != k
            n_fp = float(wk[wrong].sum())
            n_reg = int(min(max_regions, max(1, np.floor(n_fp / min_fp_per_region))))
            e = fp_region_edges(s[wrong], wk[wrong], n_reg)
            edges.append(e)
            counts.append(_region_counts(e, s, lab, wk, K))
        return cls(tuple(data.classes), tuple(edges), tuple(counts))

    def add(self, data: TopLabelData) -> "ConfusionStats | None":
        """These counts plus those of labelled per-sample ``data`` (on the same class list), in these regions.

        What ``update`` keeps: the regions stay those of the first fit (their
        edges are quantiles of its FP scores), the counts in them add up, so the
        confusion matrix and source priors equal those of all the data exactly.
        None when ``data`` has no true classes (binned data).
        """
        if data.labels is None or data.tp is None:
            return None
        if tuple(data.classes) != self.classes:
            raise ValueError(f"confusion counts of classes {list(data.classes)} do not match {list(self.classes)}")
        K = self.n_classes
        w = data.tp + data.fp
        counts = []
        for k in range(K):
            idx = np.flatnonzero(data.pred == k)
            counts.append(self.counts[k] + _region_counts(self.edges[k], data.score[idx], data.labels[idx], w[idx], K))
        return ConfusionStats(self.classes, self.edges, tuple(counts))

    # ---------------------------------------------------------------- queries
    @property
    def n_classes(self) -> int:
        return len(self.classes)

    def confusion(self) -> np.ndarray:
        """(K, K) weighted counts: row = predicted class, column = true class."""
        return np.vstack([c.sum(axis=0) for c in self.counts])

    def source_priors(self) -> np.ndarray:
        """Class frequencies of the labelled data (column sums of the confusion, normalised)."""
        col = self.confusion().sum(axis=0)
        return col / col.sum()

    def region(self, k: int, score: np.ndarray) -> np.ndarray:
        """Region index of each score for predicted class ``k``."""
        return np.searchsorted(self.edges[k], np.asarray(score, dtype=np.float64), side="left")

    def row_counts(self, pred: np.ndarray, score: np.ndarray) -> np.ndarray:
        """(n, K): the counts of the region each row (predicted class, score) falls in."""
        pred = np.asarray(pred)
        out = np.empty((pred.shape[0], self.n_classes))
        for k in np.unique(pred):
            idx = np.flatnonzero(pred == k)
            out[idx] = self.counts[k][self.region(k, score[idx])]
        return out

    # ----------------------------------------------------------- persistence
    def to_dict(self) -> dict:
        """JSON-ready and sparse: per class and region, the [true class, count] pairs with count > 0.

        (Dense counts would be K x K numbers, mostly zeros: 10^6 for 1,000 classes.)
        """
        return {
            "edges": [e.tolist() for e in self.edges],
            "counts": [[[[int(j), float(row[j])] for j in np.flatnonzero(row)] for row in c] for c in self.counts],
        }

    @classmethod
    def from_dict(cls, d: dict, classes: tuple[str, ...]) -> "ConfusionStats":
        """Rebuild from :meth:`to_dict` output (raises ValueError when malformed)."""
        K = len(classes)
        if len(d["edges"]) != K or len(d["counts"]) != K:
            raise ValueError("confusion statistics have the wrong number of classes")
        edges, counts = [], []
        for e, regions in zip(d["edges"], d["counts"]):
            e = np.asarray(e, dtype=np.float64).reshape(-1)
            if not np.all(np.isfinite(e)) or np.any(np.diff(e) <= 0) or len(regions) != e.size + 1:
                raise ValueError("confusion counts need one region more than there are increasing finite edges")
            c = np.zeros((e.size + 1, K))
            for r, pairs in enumerate(regions):
                for j, v in pairs:
                    if isinstance(j, bool) or not isinstance(j, int) or not 0 <= j < K:
                        raise ValueError(f"confusion counts name class index {j!r}, outside 0..{K - 1}")
                    v = float(v)
                    if not (np.isfinite(v) and v >= 0):
                        raise ValueError("confusion counts must be finite and >= 0")
                    c[r, j] = v
            edges.append(e)
            counts.append(c)
        return cls(tuple(classes), tuple(edges), tuple(counts))


def _region_counts(edges: np.ndarray, score: np.ndarray, labels: np.ndarray, weight: np.ndarray, K: int) -> np.ndarray:
    """(len(edges) + 1, K) weighted counts of the true classes per region of one predicted class."""
    r = np.searchsorted(edges, score, side="left")
    return np.bincount(r * K + labels, weights=weight, minlength=(edges.size + 1) * K).reshape(edges.size + 1, K)


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
        e, top = np.unique(s[np.minimum(np.searchsorted(cw, targets, side="left"), s.size - 1)]), s[-1]
    return e[e < top]
