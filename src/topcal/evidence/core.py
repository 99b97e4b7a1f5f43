"""Evidence: everything a fitted model knows of its labelled data, in a form that adds up.

A calibrator is a function of its evidence. For the score methods that is, per predicted
class and score cell, the TP and FP counts (:class:`~topcal.evidence.stats.ScoreStats`); for
``sts``/``csts`` fitted with ``keep_stats=True``, additive loss tables. Beside them, for
label-shift adaptation, the true classes behind each class's predictions per score region
(:class:`~topcal.evidence.confusion.GridConfusion` on the score cells while a fit gathers
it, :class:`~topcal.evidence.confusion.ConfusionStats` in a fitted model's regions). Both
parts are sums over rows, so evidence gathered from chunks of a file, partitions of a Dask
DataFrame or batches arriving over time merges into the evidence of all of it, in any
grouping:

* a fit from data in memory, a streamed fit and a Dask fit all gather
  :meth:`Evidence.for_fit` per part, :func:`merge_all` them and call
  ``calibrator.fit(evidence)``;
* an update gathers :meth:`Evidence.for_update` (the model's kind of statistics, the counts
  in the model's own regions) and calls ``model.update(evidence)``: merge with the model's
  evidence, refit.

An engine (in memory, streamed, Dask, a future Spark) only has to produce Evidence; what a
method does with it is the calibrator's business.

A fitted model holds one Evidence (``model.evidence_``): the statistics, the label-shift
counts, the fingerprint of its fitting rows and one mark per data part behind the statistics
(the fit, each update; ``update`` warns on a repeated part). A fit keeps it only where its
caller said so (``fit(..., keep="evidence")``, the default); a model fitted as a part of
another (a shrinkage reference, a pooled curve, a blend's component, auto's choice) or
scored and dropped (a cross-validation fold's) holds an empty one. The counts, which cost
about as much as a ``hist`` fit and which most fits never read, are made from a compact copy
of the rows when first read (:meth:`Evidence.kept`): the same functions on the same numbers,
bit for bit the counts an eager count gives.
"""

from __future__ import annotations

import hashlib
import json
import warnings
from typing import Any, Callable, ClassVar, Iterable

import numpy as np

from .confusion import ConfusionStats, GridConfusion
from ..data import TopLabelData
from ..errors import DataError, TopcalWarning
from .fingerprint import SCHEME, Fingerprint
from .stats import DEFAULT_CELLS, ScoreStats

__all__ = ["Evidence", "merge_all", "stats_mark"]


def stats_mark(stats) -> str:
    """A short hash of a data part's mergeable statistics: equal rows give equal statistics,
    hence equal marks, whichever path (in memory, chunks, Dask) counted them; ``update``
    warns on a repeat."""
    return hashlib.sha256(json.dumps(stats.to_dict(), sort_keys=True).encode()).hexdigest()[
        :16
    ]


def _codes(values: np.ndarray, n_classes: int) -> np.ndarray:
    """Class codes in the smallest integer type that holds them (a copy)."""
    for t in (np.int8, np.int16, np.int32):
        if n_classes <= np.iinfo(t).max:
            return values.astype(t)
    return values.astype(np.int64)


class _Rows:
    """A compact copy of labelled per-sample data's predicted class, top score and true
    class: 8 bytes (score) plus two small integer codes per row, a fraction of the score
    matrix. Copies, not references: the caller may change its arrays after the fit."""

    __slots__ = ("classes", "score_range", "pred", "score", "labels")

    def __init__(self, data: TopLabelData):
        K = data.n_classes
        self.classes, self.score_range = data.classes, data.score_range
        self.pred, self.labels = _codes(data.pred, K), _codes(data.labels, K)
        self.score = np.array(data.score, dtype=np.float64)

    @classmethod
    def of(cls, data: TopLabelData) -> "_Rows | None":
        """The copy, or None where it would not give back the same counts (binned or
        weighted rows, no true classes): count those at once."""
        if data.is_binned or data.labels is None or data.tp is None:
            return None
        right = data.labels == data.pred
        if not (np.array_equal(data.tp, right) and np.array_equal(data.fp, ~right)):
            return None  # weighted rows
        return cls(data)

    def data(self) -> TopLabelData:
        """The labelled per-sample data the counts are made from (codes as int64, weights
        0/1)."""
        pred, labels = self.pred.astype(np.int64), self.labels.astype(np.int64)
        right = labels == pred
        return TopLabelData(
            self.classes,
            pred,
            self.score,
            self.score_range,
            tp=right.astype(np.float64),
            fp=(~right).astype(np.float64),
            labels=labels,
        )


class Evidence:
    """Mergeable statistics of labelled data and, where known, the label-shift counts.

    Read-only: merging and updating make new objects.

    Attributes
    ----------
    stats : ScoreStats, the temperature family's loss tables, or None
        The statistics a method refits from (anything with ``merge``); None where the model
        keeps none (full-vector methods, a part of another model).
    confusion : GridConfusion, ConfusionStats or None
        The true classes behind the predictions: on the score cells (GridConfusion: a fit in
        progress, regions drawn afterwards), in a model's regions (ConfusionStats), or None
        (binned data, statistics alone: the model cannot be adapted).
    fingerprint : Fingerprint or None
        What is remembered of the rows themselves (:mod:`topcal.evidence.fingerprint`), so
        that a guarantee is never computed on them; None where no rows were seen (statistics
        alone).
    marks : tuple of str
        One :func:`stats_mark` per data part behind the statistics (the fit, each update).
    """

    #: What a model that keeps nothing holds (set below the class).
    EMPTY: ClassVar["Evidence"]

    __slots__ = ("_stats", "_confusion", "_fingerprint", "_marks", "_rows", "_pending")

    def __init__(
        self,
        stats: Any = None,
        confusion: GridConfusion | ConfusionStats | None = None,
        fingerprint: Fingerprint | None = None,
        *,
        marks: Iterable[str] | None = None,
    ):
        self._stats, self._confusion, self._fingerprint = stats, confusion, fingerprint
        self._marks = None if marks is None else tuple(marks)  # None: the statistics' own mark
        self._rows: _Rows | None = None
        self._pending: frozenset = frozenset()  # the parts still to be counted from _rows

    def __repr__(self) -> str:
        return (
            f"Evidence(stats={type(self._stats).__name__}, "
            f"confusion={type(self._confusion).__name__}, "
            f"fingerprint={self._fingerprint is not None})"
        )

    @classmethod
    def kept(
        cls,
        data: TopLabelData,
        *,
        stats: Any = None,
        count_stats: bool = False,
        fingerprint: Fingerprint | None = None,
    ) -> "Evidence":
        """What a fit keeps of labelled ``data``: the given ``stats`` (or, with
        ``count_stats``, :class:`~topcal.evidence.stats.ScoreStats` on the default grid),
        the label-shift counts and the rows' ``fingerprint``. Counts of per-sample rows are
        made when first read, from a compact copy of the rows; those of binned or weighted
        rows at once."""
        rows = _Rows.of(data)
        if rows is None:  # binned or weighted rows: counted now
            stats = ScoreStats.from_data(data) if count_stats else stats
            return cls(stats, ConfusionStats.from_data(data), fingerprint)
        out = cls(stats, None, fingerprint)
        out._count_later(rows, ("confusion", "stats") if count_stats else ("confusion",))
        return out

    def _count_later(self, rows: _Rows, parts: tuple) -> None:
        """Keep ``rows`` to count ``parts`` from when first read."""
        self._rows, self._pending = rows, frozenset(parts)

    def _count(self, part: str) -> None:
        """Count ``part`` from the kept rows (dropped once every part is counted)."""
        if part not in self._pending:
            return
        data = self._rows.data()
        if part == "stats":
            self._stats = ScoreStats.from_data(data)
        else:
            self._confusion = ConfusionStats.from_data(data)
        self._pending = self._pending - {part}
        if not self._pending:
            self._rows = None

    @property
    def stats(self) -> Any:
        self._count("stats")
        return self._stats

    @property
    def confusion(self) -> GridConfusion | ConfusionStats | None:
        self._count("confusion")
        return self._confusion

    @property
    def fingerprint(self) -> Fingerprint | None:
        return self._fingerprint

    @property
    def marks(self) -> tuple:
        if self._marks is None:
            stats = self.stats
            self._marks = () if stats is None else (stats_mark(stats),)
        return self._marks

    @property
    def is_empty(self) -> bool:
        """Whether nothing is kept (a model fitted as a part of another, or a fold's)."""
        return (
            self._stats is None
            and self._confusion is None
            and self._fingerprint is None
            and not self._pending
        )

    @classmethod
    def for_fit(cls, data: TopLabelData, *, n_cells: int = DEFAULT_CELLS) -> "Evidence":
        """The evidence of labelled ``data`` for a fit: score counts and label-shift counts
        on ``n_cells`` cells, and the rows' fingerprint.

        A model fitted from the merged evidence of parts (streamed, Dask) is the model
        ``fit`` gives on an Evidence of them, bit for bit, and keeps the fingerprint of all
        the rows (it merges exactly: :mod:`topcal.evidence.fingerprint`), as a fit on the
        rows in memory does.
        """
        return cls(
            ScoreStats.from_data(data, n_cells=n_cells),
            GridConfusion.from_data(data, n_cells=n_cells),
            Fingerprint.of(data),
        )

    @classmethod
    def for_update(
        cls,
        data: TopLabelData,
        *,
        stats_of: Callable,
        regions: ConfusionStats | None,
        like: Fingerprint | None = None,
    ) -> "Evidence":
        """The evidence of labelled ``data`` for an update of a model.

        ``stats_of`` computes the model's kind of statistics (a model's ``evidence_of`` uses
        its own, ``ScoreStats.from_data`` on its grid for the score methods); ``regions`` is
        the model's :class:`ConfusionStats`, whose regions the new rows are counted in
        (None: the model keeps no such counts); ``like``, the model's fingerprint, whose
        hash scheme the new rows are hashed by (so that the two merge; None: the current
        scheme).
        """
        scheme = SCHEME if like is None else like.scheme
        return cls(
            stats_of(data),
            None if regions is None else regions.count(data),
            Fingerprint.of(data, scheme),
        )

    def merge(self, *others: "Evidence") -> "Evidence":
        """The evidence of all the parts; label-shift counts and fingerprint only where
        every part has them (a fingerprint: hashed by one scheme,
        :mod:`topcal.evidence.fingerprint`)."""
        stats = self.stats.merge(*(o.stats for o in others))
        prints = [self.fingerprint, *(o.fingerprint for o in others)]
        fingerprint = None
        schemes = sorted({p.scheme for p in prints if p is not None})
        if len(schemes) > 1:
            warnings.warn(
                f"these evidence parts' fingerprints were hashed by schemes {schemes[0]} "
                f"and {schemes[-1]} and do not merge, so the merged evidence keeps none "
                "(threshold cannot then refuse the fitting rows); build a model's new "
                "part with model.evidence_of(data), which hashes by the model's scheme",
                TopcalWarning,
                stacklevel=2,
            )
        elif all(p is not None for p in prints):
            fingerprint = prints[0]
            for p in prints[1:]:
                fingerprint = fingerprint.merge(p)
        parts = [self.confusion, *(o.confusion for o in others)]
        if any(p is None for p in parts):
            return Evidence(stats, None, fingerprint)
        kinds = {type(p) for p in parts}
        if len(kinds) > 1:
            raise DataError(
                "evidence to merge holds label-shift counts of two kinds (score cells "
                "and a model's regions); count every part the same way"
            )
        # one kind (checked above): each merges with its own kind
        return Evidence(stats, parts[0].merge(*parts[1:]), fingerprint)  # type: ignore[arg-type]

    # -------------------------------------------------------- a model file's pieces
    def to_dict(self) -> dict:
        """The pieces a model file stores (each only where kept): ``confusion``, ``stats``
        with their ``fingerprints`` (the parts' marks) and ``fingerprint``."""
        d: dict = {}
        if self.confusion is not None:
            # a model's evidence: GridConfusion is a fit in progress, which no file stores
            d["confusion"] = self.confusion.to_dict()  # type: ignore[union-attr]
        if self.stats is not None:
            d["stats"] = self.stats.to_dict()
            if self.marks:
                d["fingerprints"] = list(self.marks)
        if self.fingerprint is not None:
            d["fingerprint"] = self.fingerprint.to_dict()
        return d

    @classmethod
    def from_dict(cls, d: dict, classes: tuple, stats_from_dict: Callable) -> "Evidence":
        """The pieces of a model file (:meth:`to_dict`; files without some of them: None);
        raises ValueError or KeyError on a malformed piece. ``stats_from_dict(d)`` reads the
        model's kind of statistics."""
        conf = d.get("confusion")
        stats = None if d.get("stats") is None else stats_from_dict(d["stats"])
        fp = d.get("fingerprint")
        marks = d.get("fingerprints", [])  # files before fingerprints: none
        if not isinstance(marks, list) or not all(isinstance(m, str) for m in marks):
            raise ValueError("fingerprints must be a list of strings")
        return cls(
            stats,
            None if conf is None else ConfusionStats.from_dict(conf, classes),
            None if fp is None else Fingerprint.from_dict(fp),
            marks=marks,
        )


#: What a model that keeps nothing holds (a part of another model, a fold's model, an
#: unfitted one).
Evidence.EMPTY = Evidence()


def merge_all(parts: Iterable[Evidence]) -> Evidence:
    """Merge an iterable of :class:`Evidence` (at least one)."""
    it = iter(parts)
    try:
        first = next(it)
    except StopIteration:
        raise DataError("no evidence to merge: the data had no rows") from None
    rest = list(it)
    return first.merge(*rest) if rest else first
