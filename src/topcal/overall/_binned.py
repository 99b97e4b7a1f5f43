"""The binned calibration errors and the Poisson bootstrap over cells."""

from __future__ import annotations

import threading
from dataclasses import dataclass

import numpy as np

from .._numeric import weighted_quantile_edges
from .._parallel import available_cpus, in_threads
from .._params import check_bin_count
from ..data import TopLabelData
from ._common import (
    CHUNK,
    LEVEL,
    RESAMPLES,
    SUB_BINS,
    Estimate,
    Rows,

    check_level,
    rows_of,
)

# ------------------------------------------------------------- cells and the Poisson bootstrap


@dataclass(frozen=True)
class Cells:
    """Weighted sums over cells (a key and a label, sorted by key), and how cells add up
    into the metric's groups (bins): ``starts`` where each group begins; groups of at most
    two cells (one key, both labels) are added by ``pair`` (the second cell, or -1), larger
    ones by a sum over their contiguous cells (``pair`` None)."""

    n: np.ndarray  # weight of the cell
    t: np.ndarray  # weight of its right predictions (n or 0)
    s: np.ndarray  # weighted sum of its confidences
    d2: np.ndarray  # weighted sum of its squared residuals (label - confidence)^2
    key: np.ndarray  # the cell's key (sub-bin) without the label
    inverse: np.ndarray  # the cell of each (row, label) kept, rows' label 1 then label 0
    starts: np.ndarray
    pair: np.ndarray | None

    def add(self, x: np.ndarray) -> np.ndarray:
        """``x`` (last axis: cells) summed per group."""
        if self.pair is not None:
            out = x[..., self.starts]
            two = self.pair >= 0
            out[..., two] += x[..., self.pair[two]]
            return out
        # the cells of a group are contiguous (sorted by key): one pass over them, where the
        # 0/1 matrix product costs cells x groups
        return np.add.reduceat(x, self.starts, axis=-1)


def cells_of(r: Rows, key: np.ndarray, group_of_key) -> Cells:
    both = np.concatenate([key * 2 + 1, key * 2])
    w = np.concatenate([r.tp, r.fp])
    keep = w > 0
    both, w = both[keep], w[keep]
    cw = np.concatenate([r.tp * r.c, r.fp * r.c])[keep]
    sq = np.concatenate([r.tp * (1 - r.c) ** 2, r.fp * r.c**2])[keep]
    cells, inv = np.unique(both, return_inverse=True)
    inv = inv.ravel()
    n = np.bincount(inv, weights=w, minlength=cells.size)
    s = np.bincount(inv, weights=cw, minlength=cells.size)
    d2 = np.bincount(inv, weights=sq, minlength=cells.size)
    t = np.where(cells % 2 == 1, n, 0.0)
    group = group_of_key(cells // 2)
    starts = np.flatnonzero(np.r_[True, group[1:] != group[:-1]])
    size = np.diff(np.r_[starts, cells.size])
    pair = np.where(size == 2, starts + 1, -1) if size.max() <= 2 else None
    return Cells(n, t, s, d2, cells // 2, inv, starts, pair)


def sums(cells: Cells, factor=None):
    """(W, T, S, D2) summed per group, for the data (``factor`` None) or per resample
    (rows)."""
    parts = (cells.n, cells.t, cells.s, cells.d2)
    if factor is None:
        return tuple(cells.add(x) for x in parts)
    if cells.pair is None:
        return tuple(cells.add(factor * x) for x in parts)
    # groups of one or two cells: the factors gathered once, each product then taken on the
    # group's cells only (the same products and sums as add(factor * x), bit for bit,
    # without four resamples x cells temporaries: 600,000 cells at 10^5 classes)
    two = np.flatnonzero(cells.pair >= 0)
    second = cells.pair[two]
    f1, f2 = factor[..., cells.starts], factor[..., second]
    out = []
    for x in parts:
        o = f1 * x[cells.starts]
        o[..., two] += f2 * x[second]
        out.append(o)
    return tuple(out)


# Cells holding at least this much weight draw their Poisson count from its normal
# approximation (mean = variance = the weight; error in the tails below 1%, Poisson's
# skewness 1/sqrt(weight) < 0.18); lighter cells draw it exactly. Normal draws cost a tenth
# of Poisson's.
NORMAL_FROM = 30.0


def poisson_factors(rng, n: np.ndarray, b: int, out=None) -> np.ndarray:
    """Each cell's resampled weight over its weight, for ``b`` Poisson resamples, shape (b,
    n); into ``out`` where given (a buffer of that shape, reused across chunks: fresh pages
    for every chunk cost a fifth of ``metrics``' time at 10^5 classes)."""
    out = np.empty((b, n.size)) if out is None else out
    big = n >= NORMAL_FROM
    if big.any():
        m = n[big]
        z = rng.standard_normal((b, m.size), dtype=np.float32)
        out[:, big] = np.maximum(1.0 + z / np.sqrt(m), 0.0)
    if not big.any():  # every cell light (many classes): the draws divided in place
        np.divide(rng.poisson(n, size=(b, n.size)), n, out=out)
    elif (~big).any():
        m = n[~big]
        out[:, ~big] = rng.poisson(m, size=(b, m.size)) / m
    return out


def bootstrap(cells: Cells, stat, resamples: int, seed: int, tag: int) -> np.ndarray:
    """``stat(W, T, S, D2)`` over ``resamples`` Poisson resamples of the samples (seeded by
    ``seed`` and the metric's ``tag``, so one metric's draws do not depend on which others
    run)."""
    rng = np.random.default_rng([seed, tag])
    chunk = CHUNK
    big = cells.n >= NORMAL_FROM
    if big.all() or not big.any():
        # one kind of draw: its stream in C order is the same in chunks of any size, so
        # the chunks stay under glibc's reuse limit (fresh pages for 100 x 600,000 cells
        # cost a third of metrics' time at 10^5 classes)
        chunk = int(np.clip(CHUNK_CELLS // max(cells.n.size, 1), 1, CHUNK))
    sizes = [min(chunk, resamples - start) for start in range(0, resamples, chunk)]
    left = iter(sizes)
    mine = threading.local()  # each thread's factor buffer: its last chunk is summed

    def draw():
        if not hasattr(mine, "buffer"):
            mine.buffer = np.empty((sizes[0], cells.n.size))
        b = next(left)
        return poisson_factors(rng, cells.n, b, mine.buffer[:b])

    # several chunks: one thread draws a chunk (in turn, one stream) while another sums
    # the last; the draws were half the time at 10^5 classes. Each thread holds a buffer.
    two = len(sizes) > 1 and sizes[0] * cells.n.size <= THREADED_CELLS
    threads = min(BOOTSTRAP_THREADS, available_cpus()) if two else 1
    return np.concatenate(in_threads(lambda f: stat(*sums(cells, f)), draw, len(sizes), threads))


#: Threads of the bootstrap where it runs in chunks: one draws while the other sums.
BOOTSTRAP_THREADS = 2
#: Most resamples x cells a chunk may hold for the bootstrap to run on threads (each holds
#: its chunk's factors: 512 MB more at most; 100 resamples of 600,000 cells, 10^5 classes,
#: draws of both kinds, hold 480 MB).
THREADED_CELLS = 1 << 26
#: Most resamples x cells one chunk of the bootstrap holds where its draws are of one kind
#: (16 MB of factors: under glibc's largest mmap threshold, 32 MB, so freed blocks are
#: reused instead of mapped afresh).
CHUNK_CELLS = 1 << 21


def basic_interval(
    value: float, draws: np.ndarray, level: float, transform=None, world: float | None = None
) -> Estimate:
    """The basic bootstrap interval [v - (q_hi - w), v - (q_lo - w)] (Davison and Hinkley
    1997, 5.2), floored at 0: the resamples' spread about ``world`` w, the value the
    resamples estimate (their population is the data), mirrored about the estimate v. For a
    plug-in calibration error w = v: its estimate is biased upward and its resamples again
    by about as much, so the mirror removes the bias to first order. A debiased estimator
    estimates the plug-in value of the data in the resamples, so w is that plug-in value.
    ``transform`` (monotone) maps the value and the ends last."""
    draws = draws[np.isfinite(draws)]
    q_lo, q_hi = np.quantile(draws, [0.5 - level / 2, 0.5 + level / 2])
    w = value if world is None else world
    lo, hi = max(value - (q_hi - w), 0.0), max(value - (q_lo - w), 0.0)
    if transform is not None:
        value, lo, hi = transform(value), transform(lo), transform(hi)
    return Estimate(float(value), float(lo), float(hi))


def l1_gap(w, t, s, d2):
    with np.errstate(invalid="ignore", divide="ignore"):  # an empty resample: NaN, dropped
        return np.abs(t - s).sum(axis=-1) / w.sum(axis=-1)


def binned(
    r: Rows, key, group_of_key, stat, level, resamples, seed, tag, transform=None, world=None
):
    """``stat`` on cells of ``key`` with its basic bootstrap interval; ``world``: the
    statistic whose value on the data the resamples estimate (default ``stat`` itself)."""
    cells = cells_of(r, key, group_of_key)
    value = float(stat(*sums(cells)))
    if r.total < 2:
        v = transform(value) if transform else value
        return Estimate(v, reason="one sample: no interval")
    draws = bootstrap(cells, stat, resamples, seed, tag)
    w = None if world is None else float(world(*sums(cells)))
    return basic_interval(value, draws, level, transform, w)


def uniform_key(c: np.ndarray, n_bins: int) -> np.ndarray:
    """Sub-bin of each confidence: ``SUB_BINS`` per bin of ``n_bins`` equal-width bins [lo,
    hi), 1.0 in the last bin (TorchMetrics' bins; its extra bin for exactly 1.0 merged into
    the last)."""
    m = n_bins * SUB_BINS
    edges = np.linspace(0.0, 1.0, n_bins + 1)
    b = np.clip(np.searchsorted(edges, c, side="right") - 1, 0, n_bins - 1)
    # the sub-bin inside bin b, clipped to it so that the bin of every row is exactly
    # TorchMetrics'
    sub = np.clip((c * m).astype(np.int64) - b * SUB_BINS, 0, SUB_BINS - 1)
    return b * SUB_BINS + sub


def ece15(
    data: TopLabelData,
    confidence,
    *,
    n_bins: int = 15,
    level: float = LEVEL,
    resamples: int = RESAMPLES,
    seed: int = 0,
) -> Estimate:
    """Pooled equal-width binned ECE of Guo et al. (2017): sum_b (n_b / n) |acc_b - conf_b|
    over ``n_bins`` bins [i/n_bins, (i+1)/n_bins) of the top-label confidence, pooled over
    classes, 1.0 in the last bin: the ECE of published tables and of TorchMetrics'
    ``MulticlassCalibrationError(n_bins=15, norm="l1")``. Bootstrap interval."""
    check_bin_count(n_bins)
    check_level(level, resamples, seed)
    return ece15_of(rows_of(data, confidence), n_bins, level, resamples, seed)


def ece15_of(r: Rows, n_bins, level, resamples, seed) -> Estimate:
    key = uniform_key(r.c, n_bins)
    return binned(r, key, lambda k: k // SUB_BINS, l1_gap, level, resamples, seed, 1)


def ece_top_label(
    data: TopLabelData,
    confidence,
    *,
    n_bins: int = 10,
    level: float = LEVEL,
    resamples: int = RESAMPLES,
    seed: int = 0,
) -> Estimate:
    """Top-label ECE (Gupta and Ramdas 2022): the binned L1 calibration error of each
    predicted class on ``n_bins`` equal-width bins (a, b], weighted by the class's share of
    the samples; :func:`topcal.metrics.ece1`'s overall value. Bootstrap interval."""
    check_bin_count(n_bins)
    check_level(level, resamples, seed)
    return ece_top_label_of(rows_of(data, confidence), n_bins, level, resamples, seed)


def ece_top_label_of(r: Rows, n_bins, level, resamples, seed) -> Estimate:
    edges = np.linspace(0.0, 1.0, n_bins + 1)
    b = np.clip(np.searchsorted(edges, r.c, side="left") - 1, 0, n_bins - 1)  # (a, b] bins
    key = r.pred.astype(np.int64) * n_bins + b
    return binned(r, key, lambda k: k, l1_gap, level, resamples, seed, 2)


def plugin_sq(w, t, s, d2):
    """The plug-in squared L2 error sum_b (n_b/n) m_b^2 (what :func:`debiased_sq` corrects)."""
    with np.errstate(invalid="ignore", divide="ignore"):
        return (np.where(w > 0, (t - s) ** 2 / w, 0.0)).sum(axis=-1) / w.sum(axis=-1)


def debiased_sq(w, t, s, d2):
    """The debiased squared L2 error: sum_b (n_b/n) [m_b^2 - v_b / n_b], m_b the bin's mean
    residual (label - confidence) and v_b its sample variance: m_b^2 is biased up by
    Var(m_b) = v / n_b, which v_b / n_b estimates without bias. Where the confidence is
    constant in a bin this is Kumar et al.'s acc_b (1 - acc_b) / (n_b - 1); a bin of one
    sample keeps its plug-in term."""
    with np.errstate(invalid="ignore", divide="ignore"):
        m = np.where(w > 0, (t - s) / w, 0.0)
        var = np.where(w > 1, (d2 - w * m**2) / (w - 1), 0.0)
        return (w * m**2 - np.where(w > 1, var, 0.0)).sum(axis=-1) / w.sum(axis=-1)


def ece_debiased(
    data: TopLabelData,
    confidence,
    *,
    n_bins: int = 15,
    level: float = LEVEL,
    resamples: int = RESAMPLES,
    seed: int = 0,
) -> Estimate:
    """Debiased L2 calibration error on equal-mass bins (Kumar, Liang and Ma 2019;
    equal-mass bins as Roelofs et al. 2022): the root of sum_b (n_b/n) [(acc_b - conf_b)^2 -
    acc_b (1 - acc_b) / (n_b - 1)], which removes the plug-in's upward bias; a negative
    square (no detectable error) is reported as 0. Pooled over classes. Bootstrap interval
    (of the square, then rooted)."""
    check_bin_count(n_bins)
    check_level(level, resamples, seed)
    return ece_debiased_of(rows_of(data, confidence), n_bins, level, resamples, seed)


def ece_debiased_of(r: Rows, n_bins, level, resamples, seed) -> Estimate:
    edges = weighted_quantile_edges(r.c, r.tp + r.fp, n_bins, 0.0, 1.0)
    nb = edges.size - 1
    b = np.clip(np.searchsorted(edges, r.c, side="left") - 1, 0, nb - 1)
    key = b * SUB_BINS + np.clip(
        ((r.c - edges[b]) / np.maximum(edges[b + 1] - edges[b], 1e-300) * SUB_BINS).astype(
            np.int64
        ),
        0,
        SUB_BINS - 1,
    )
    root = lambda x: float(np.sqrt(max(x, 0.0)))
    group = lambda k: k // SUB_BINS
    return binned(r, key, group, debiased_sq, level, resamples, seed, 3, root, world=plugin_sq)
