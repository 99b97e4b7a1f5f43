"""Evidence: everything a fitted model knows of its labelled data, in a form that adds up.

A calibrator is a function of its evidence. For the score methods that is,
per predicted class and score cell, the TP and FP counts
(:class:`~topcal.stats.ScoreStats`); for ``sts``/``csts`` fitted with
``keep_stats=True``, additive loss tables. Beside them, for label-shift
adaptation, the true classes behind each class's predictions per score
region (:class:`~topcal.confusion.GridConfusion` on the score cells while a
fit gathers it, :class:`~topcal.confusion.ConfusionStats` in a fitted
model's regions). Both parts are sums over rows, so evidence gathered from
chunks of a file, partitions of a Dask DataFrame or batches arriving over
time merges into the evidence of all of it, in any grouping:

* a fit from data in memory, a streamed fit and a Dask fit all gather
  :meth:`Evidence.for_fit` per part, :func:`merge_all` them and call
  ``calibrator.fit_evidence(evidence)``;
* an update gathers :meth:`Evidence.for_update` (the model's kind of
  statistics, the counts in the model's own regions) and calls
  ``model.update(evidence)``: merge with the model's evidence, refit.

An engine (in memory, streamed, Dask, a future Spark) only has to produce
Evidence; what a method does with it is the calibrator's business.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Iterable

from .confusion import ConfusionStats, GridConfusion
from .errors import DataError
from .fingerprint import Fingerprint
from .stats import DEFAULT_CELLS, ScoreStats

__all__ = ["Evidence", "merge_all"]


@dataclass(frozen=True)
class Evidence:
    """Mergeable statistics of labelled data and, where known, the label-shift counts.

    Attributes
    ----------
    stats : ScoreStats or the temperature family's loss tables
        The statistics a method refits from (anything with ``merge``).
    confusion : GridConfusion, ConfusionStats or None
        The true classes behind the predictions: on the score cells
        (GridConfusion: a fit in progress, regions drawn afterwards), in a
        model's regions (ConfusionStats), or None (binned data, statistics
        alone: the model cannot be adapted).
    fingerprint : Fingerprint or None
        What is remembered of the rows themselves (:mod:`topcal.fingerprint`),
        so that a guarantee is never computed on them; None where no rows
        were seen (statistics alone).
    """

    stats: Any
    confusion: GridConfusion | ConfusionStats | None = None
    fingerprint: Fingerprint | None = None

    @classmethod
    def for_fit(cls, data, *, n_cells: int = DEFAULT_CELLS) -> "Evidence":
        """The evidence of labelled ``data`` for a fit: score counts and label-shift counts on ``n_cells`` cells.

        No fingerprint: a model fitted from statistics (streamed, Dask) is the
        model ``fit_stats`` gives on them, bit for bit, and that keeps none.
        """
        return cls(ScoreStats.from_data(data, n_cells=n_cells), GridConfusion.from_data(data, n_cells=n_cells))

    @classmethod
    def for_update(cls, data, *, stats_of: Callable, regions: ConfusionStats | None) -> "Evidence":
        """The evidence of labelled ``data`` for an update of a model.

        ``stats_of`` computes the model's kind of statistics (its
        ``stats_of`` method, or ``ScoreStats.from_data`` on its grid);
        ``regions`` is the model's :class:`ConfusionStats`, whose regions the
        new rows are counted in (None: the model keeps no such counts).
        """
        return cls(stats_of(data), None if regions is None else regions.count(data), Fingerprint.of(data))

    def merge(self, *others: "Evidence") -> "Evidence":
        """The evidence of all the parts; label-shift counts and fingerprint only where every part has them."""
        stats = self.stats.merge(*(o.stats for o in others))
        prints = [self.fingerprint, *(o.fingerprint for o in others)]
        fingerprint = None
        if all(p is not None for p in prints):
            fingerprint = prints[0]
            for p in prints[1:]:
                fingerprint = fingerprint.merge(p)
        parts = [self.confusion, *(o.confusion for o in others)]
        if any(p is None for p in parts):
            return Evidence(stats, None, fingerprint)
        kinds = {type(p) for p in parts}
        if len(kinds) > 1:
            raise DataError("evidence to merge holds label-shift counts of two kinds (score cells and a model's "
                            "regions); count every part the same way")
        return Evidence(stats, parts[0].merge(*parts[1:]), fingerprint)


def merge_all(parts: Iterable[Evidence]) -> Evidence:
    """Merge an iterable of :class:`Evidence` (at least one)."""
    it = iter(parts)
    try:
        first = next(it)
    except StopIteration:
        raise DataError("no evidence to merge: the data had no rows") from None
    rest = list(it)
    return first.merge(*rest) if rest else first
