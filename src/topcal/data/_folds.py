"""Labelled data dealt into K stratified folds (:func:`kfold_split`)."""

from __future__ import annotations

import numpy as np

from ..errors import DataError, ParameterError
from ._table import TopLabelData

#: Largest bin count K-fold deals across folds (numpy's multinomial draws int64 counts).
MAX_DEAL_COUNT = 2.0**53


def kfold_split(
    data: TopLabelData, n_folds: int, *, seed: int = 0, groups=None
) -> list[TopLabelData]:
    """Split labelled ``data`` into ``n_folds`` disjoint folds.

    Per-sample data is stratified by predicted class: within each class the rows are
    shuffled (seeded) and dealt round-robin to the folds, so every fold holds about 1/K of
    every class. Binned data has no individual samples to shuffle, so each bin's integer TP
    and FP counts are split across the K folds by a seeded multinomial draw with equal
    probabilities (a random deal of the bin's samples); each fold is again a binned dataset
    on the same bins. Non-integer counts (weights) cannot be dealt and are rejected.

    Parameters
    ----------
    data : TopLabelData (labelled)
    n_folds : int >= 2
    seed : int, default 0
        Seed of the shuffle (per-sample) or of the multinomial deal (binned).
    groups : sequence of sequences of distinct fold indices, optional
        Return one dataset per group instead: its folds' rows one fold after the other, what
        ``TopLabelData.concat`` of those folds holds, without copying the folds first
        (auto's first look: one fold and the next eight, at 10^5 x 1,000 1.4 GB of copies
        instead of 0.8). Groups may share folds.

    Returns
    -------
    list of TopLabelData
        The folds, which together hold every sample exactly once (or one dataset per group).
        For binned data every fold has all the bins (some with zero counts).
    """
    if isinstance(n_folds, bool) or not isinstance(n_folds, (int, np.integer)) or n_folds < 2:
        raise ParameterError(f"folds must be an integer >= 2, got {n_folds!r}")
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ParameterError(f"seed must be an integer >= 0, got {seed!r}")
    if not isinstance(data, TopLabelData):
        raise DataError(f"kfold_split needs a TopLabelData, got {type(data).__name__}")
    data.require_labels("K-fold cross-fitting")
    groups = _checked_groups(groups, n_folds)
    rng = np.random.default_rng(seed)
    if data.is_binned:
        return _binned_folds(data, n_folds, rng, groups)
    return _sample_folds(data, n_folds, rng, groups)


def _checked_groups(groups, n_folds: int):
    """:func:`kfold_split`'s ``groups`` as lists of fold indices (None stays None)."""
    if groups is None:
        return None
    try:
        groups = [list(g) for g in groups]
    except TypeError:
        raise ParameterError(
            f"groups must be a list of lists of fold indices 0..{n_folds - 1}, got "
            f"{groups!r:.60}"
        ) from None
    if not all(
        g
        and len(set(g)) == len(g)
        and all(isinstance(f, (int, np.integer)) and not isinstance(f, bool) for f in g)
        and all(0 <= f < n_folds for f in g)
        for g in groups
    ):
        raise ParameterError(
            "groups must be non-empty lists of distinct fold indices "
            f"0..{n_folds - 1}, got {groups!r:.60}"
        )
    return groups


def _binned_folds(data: TopLabelData, n_folds: int, rng, groups) -> list[TopLabelData]:
    """Binned data's folds: each bin's integer counts dealt by a multinomial draw."""
    for name, arr in (("tp", data.tp), ("fp", data.fp)):
        if not np.all(arr == np.round(arr)):
            raise DataError(
                f"K-fold on binned data deals each bin's {name} count across folds and "
                "needs integer counts, but some are fractional; use --eval with a "
                "second test set instead"
            )
        if arr.max() > MAX_DEAL_COUNT:
            raise DataError(
                f"K-fold on binned data deals each bin's {name} count across folds, "
                f"but a count is {arr.max():g} (more than {MAX_DEAL_COUNT:g} samples "
                "in one bin cannot be dealt); use --eval with a second test set instead"
            )
    total = data.tp.sum() + data.fp.sum()
    if n_folds > total:
        raise DataError(
            f"{n_folds} folds exceed the {total:g} samples in the data; use at most "
            f"{total:g} folds"
        )
    p = np.full(n_folds, 1.0 / n_folds)
    tp = rng.multinomial(data.tp.astype(np.int64), p).astype(np.float64)  # (rows, folds)
    fp = rng.multinomial(data.fp.astype(np.int64), p).astype(np.float64)
    folds = [
        TopLabelData(
            data.classes,
            data.pred,
            data.score,
            data.score_range,
            tp=tp[:, f],
            fp=fp[:, f],
            bin_edges=data.bin_edges,
        )
        for f in range(n_folds)
    ]
    if groups is None:
        return folds
    return [TopLabelData.concat([folds[f] for f in g]) for g in groups]


def _sample_folds(data: TopLabelData, n_folds: int, rng, groups) -> list[TopLabelData]:
    """Per-sample data's folds: each class's rows shuffled and dealt round-robin."""
    if data.n_rows < n_folds:
        raise DataError(
            f"{n_folds} folds exceed the {data.n_rows} rows of the data; use at most "
            f"{data.n_rows} folds"
        )
    fold_of = np.empty(data.n_rows, dtype=np.int64)
    start = int(rng.integers(n_folds))
    # each class's rows in ascending order, all classes from one stable sort (a scan of the
    # rows per class costs rows x classes); a class without rows draws nothing from rng
    by_class = np.argsort(data.pred, kind="stable")
    ends = np.cumsum(np.bincount(data.pred, minlength=data.n_classes))
    for k in np.flatnonzero(ends - np.r_[0, ends[:-1]]):
        idx = by_class[(ends[k - 1] if k else 0) : ends[k]]
        idx = idx[rng.permutation(idx.size)]
        # each class continues the deal where the previous one stopped (the first starts at
        # a random fold): every fold gets floor(n / K) or more rows, and small classes do
        # not all land in fold 0
        fold_of[idx] = (np.arange(idx.size) + start) % n_folds
        start = (start + idx.size) % n_folds
    if groups is None:
        return [data.subset(fold_of == f) for f in range(n_folds)]
    return [
        data.subset(np.concatenate([np.flatnonzero(fold_of == f) for f in g])) for g in groups
    ]


def stratified_subsample(data: TopLabelData, rows: int, *, seed: int = 0) -> TopLabelData:
    """``rows`` of the per-sample ``data``'s rows, drawn without replacement, stratified by
    predicted class.

    Each class keeps its share of the rows: n_k x rows / n, rounded down, with the rows left
    over going to the classes with the largest remainders (ties: the lower class index), so
    the result holds exactly ``rows`` rows and every class's fraction differs from the
    data's by less than one row. Which rows: a seeded permutation within each class. The
    rows keep their order in ``data``. ``rows`` at or above the data's row count returns
    ``data`` itself. Binned data has no samples to draw (its cost is its bins, not its
    counts) and is rejected.
    """
    if isinstance(rows, bool) or not isinstance(rows, (int, np.integer)) or rows < 1:
        raise ParameterError(f"rows must be an integer >= 1, got {rows!r}")
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ParameterError(f"seed must be an integer >= 0, got {seed!r}")
    if data.is_binned:
        raise DataError(
            "a subsample draws samples, but binned data has counts per bin; use all the bins"
        )
    n = data.n_rows
    if rows >= n:
        return data
    counts = np.bincount(data.pred, minlength=data.n_classes)
    exact = counts * (rows / n)
    take = np.floor(exact).astype(np.int64)
    left = rows - int(take.sum())
    if left > 0:  # largest remainders first; a stable sort keeps the lower class first on ties
        take[np.argsort(-(exact - take), kind="stable")[:left]] += 1
    rng = np.random.default_rng(seed)
    # rows grouped by class, in data order within each
    order = np.argsort(data.pred, kind="stable")
    starts = np.concatenate([[0], np.cumsum(counts)])
    keep = [
        order[starts[k] + rng.permutation(counts[k])[: take[k]]]
        for k in range(data.n_classes)
        if take[k]
    ]
    return data.subset(np.sort(np.concatenate(keep)))
