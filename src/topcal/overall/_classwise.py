"""The class-wise ECE of full probability vectors (Kull et al. 2019), with its interval."""

from __future__ import annotations

import numpy as np

from .._params import check_bin_count
from ..data import TopLabelData
from ..metrics import check_vectors
from ._binned import Cells, basic_interval, bootstrap, l1_gap, sums
from ._common import LEVEL, RESAMPLES, Estimate, check_level

# (row, class) entries binned at a time: bounds the work arrays at ~30 MB whatever n x K is.
CHUNK_ENTRIES = 1 << 22


def classwise_ece(
    data: TopLabelData,
    proba,
    *,
    n_bins: int = 15,
    level: float = LEVEL,
    resamples: int = RESAMPLES,
    seed: int = 0,
) -> Estimate:
    """Class-wise ECE of Kull et al. (2019, "Beyond temperature scaling"), for full vectors:
    (1/K) sum_j sum_b (n_jb / n) |freq_jb - conf_jb|, where for every class j the
    probability ``proba[:, j]`` of every row is binned into ``n_bins`` equal-width bins (1.0
    in the last, as :func:`ece15`), freq_jb is the share of rows in the bin whose true class
    is j and conf_jb their mean probability of j. It judges the whole vector, not only its
    top entry.

    The interval is the basic bootstrap interval over Poisson resamples of the (class, bin,
    label) cells, as the other calibration errors' (the module docstring of
    :mod:`topcal.overall`); nothing is refitted.
    """
    check_bin_count(n_bins)
    check_level(level, resamples, seed)
    p = check_vectors(data, proba)
    cells = _cells(data, p, n_bins)
    value = float(l1_gap(*sums(cells)))
    if float(cells.n.sum()) < 2 * p.shape[1]:
        return Estimate(value, reason="one sample: no interval")
    draws = bootstrap(cells, l1_gap, resamples, seed, 7)
    return basic_interval(value, draws, level)


def _cells(data: TopLabelData, p: np.ndarray, n_bins: int) -> Cells:
    """Weighted sums per (class j, bin of p_j, whether the true class is j), over every row."""
    n, k = p.shape
    w = (data.tp + data.fp).astype(np.float64)
    size = 2 * k * n_bins
    tot = np.zeros(size)
    conf = np.zeros(size)
    sq = np.zeros(size)
    edges = np.linspace(0.0, 1.0, n_bins + 1)
    step = max(1, CHUNK_ENTRIES // k)
    for a in range(0, n, step):
        pa = p[a : a + step]
        b = np.clip(np.searchsorted(edges, pa, side="right") - 1, 0, n_bins - 1)
        right = data.labels[a : a + step, None] == np.arange(k)[None, :]
        idx = ((np.arange(k)[None, :] * n_bins + b) * 2 + right).ravel()
        wa = np.broadcast_to(w[a : a + step, None], pa.shape).ravel()
        tot += np.bincount(idx, weights=wa, minlength=size)
        conf += np.bincount(idx, weights=wa * pa.ravel(), minlength=size)
        sq += np.bincount(idx, weights=wa * ((right - pa) ** 2).ravel(), minlength=size)
    kept = np.flatnonzero(tot > 0)
    key = kept // 2
    starts = np.flatnonzero(np.r_[True, key[1:] != key[:-1]])
    size2 = np.diff(np.r_[starts, kept.size])
    pair = np.where(size2 == 2, starts + 1, -1)
    t = np.where(kept % 2 == 1, tot[kept], 0.0)
    return Cells(tot[kept], t, conf[kept], sq[kept], key, np.empty(0, np.int64), starts, pair)
