"""The numeric core of Learn-then-Test and of SGR (:mod:`topcal.thresholds.core` builds on
it).

Binomial tail p-values, the fewest testable predictions, accepted counts per candidate
cut-off, fixed-sequence testing (one sequence, several starts), and Selection with
Guaranteed Risk (Geifman and El-Yaniv 2017) for comparison. Pure functions of arrays.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = [
    "binomial_tail",
    "n_min",
    "accepted_counts",
    "ordered_counts",
    "fixed_sequence",
    "sequences",
    "sgr_threshold",
]


def binomial_tail(correct, n, p: float) -> np.ndarray:
    """P(Bin(n, p) >= correct), elementwise; 1 where ``correct`` <= 0.

    The regularised incomplete beta I_p(c, n - c + 1), equal to ``scipy.stats.binom.sf(c -
    1, n, p)`` for integer counts and continuous in them (binned data's counts are weights).
    """
    from scipy.special import betainc

    c = np.asarray(correct, dtype=np.float64)
    n = np.asarray(n, dtype=np.float64)
    out = np.ones(np.broadcast(c, n).shape)
    pos = np.broadcast_to(c > 0, out.shape)
    cc, nn = np.broadcast_to(c, out.shape)[pos], np.broadcast_to(n, out.shape)[pos]
    out[pos] = betainc(cc, np.maximum(nn - cc, 0.0) + 1.0, p)
    return out


def n_min(precision: float, delta: float) -> int:
    """The fewest accepted predictions whose precision can be shown >= ``precision`` at
    level ``delta``."""
    return int(math.ceil(math.log(delta) / math.log(precision) - 1e-12))


def accepted_counts(conf, tp, fp, cutoffs):
    """Weights accepted and right at each cut-off (conf >= cutoff)."""
    order = np.argsort(conf, kind="stable")
    s = conf[order]
    ctp = np.concatenate([[0.0], np.cumsum(tp[order])])
    cfp = np.concatenate([[0.0], np.cumsum(fp[order])])
    i = np.searchsorted(s, cutoffs, side="left")  # rows at i.. have conf >= cutoff
    right = ctp[-1] - ctp[i]
    return right + (cfp[-1] - cfp[i]), right


def fixed_sequence(p_values, level: float) -> int:
    """Index of the last hypothesis rejected when testing ``p_values`` in order at ``level``
    (stop at the first p-value above it); -1 when the first is not rejected."""
    above = np.flatnonzero(np.asarray(p_values) > level)
    return (len(p_values) if above.size == 0 else int(above[0])) - 1


def sequences(p_values, starts, level: float) -> int:
    """Index of the loosest hypothesis any fixed sequence rejects (sequence j runs from
    ``starts[j]`` to the end at ``level``, stopping at its first non-rejection); -1 when
    none rejects."""
    p = np.asarray(p_values)
    best = -1
    for a in starts:
        k = fixed_sequence(p[a:], level)
        if k >= 0:
            best = max(best, a + k)
    return best


def ordered_counts(conf, score, tp, fp):
    """The candidate cut-offs of rows ordered by confidence, then raw score (strictest
    first): the (confidence, score) pair at the end of each tie group, with the weights
    accepted and right."""
    order = np.lexsort((-score, -conf))
    sc, ss = conf[order], score[order]
    cn, ct = np.cumsum(tp[order] + fp[order]), np.cumsum(tp[order])
    last = np.flatnonzero(np.r_[(sc[1:] != sc[:-1]) | (ss[1:] != ss[:-1]), True])
    return sc[last], ss[last], cn[last], ct[last]


def sgr_threshold(conf, tp, fp, precision: float, delta: float) -> float | None:
    """Selection with Guaranteed Risk (Geifman and El-Yaniv 2017, Algorithm 1), for
    comparison.

    Binary search over the sorted confidences for the loosest cut-off whose risk bound
    b*(m_t, errors, delta / ceil(log2 m)) - the exact binomial (Clopper-Pearson) upper bound
    on the error rate of the accepted rows - is below 1 - ``precision``; returns the
    cut-off, or None where none is found. Weights are counts (rows of binned data expand to
    their TP and FP).
    """
    from scipy.special import betaincinv

    order = np.argsort(-conf, kind="stable")
    s = conf[order]
    ctp, cfp = np.cumsum(tp[order]), np.cumsum(fp[order])
    m = float(ctp[-1] + cfp[-1])
    steps = max(1, math.ceil(math.log2(max(m, 2.0))))
    level = delta / steps
    target = 1.0 - precision

    def bound(i):  # accepting rows 0..i (the i+1 most confident)
        n, err = ctp[i] + cfp[i], cfp[i]
        return 1.0 if err >= n else float(betaincinv(err + 1.0, n - err, 1.0 - level))

    lo, hi = 0, len(s) - 1
    best = None
    for _ in range(steps):
        mid = (lo + hi + 1) // 2
        # a cut-off accepts every row with the same confidence: the last row of s[mid]'s tie
        # group
        i = int(np.searchsorted(-s, -s[mid], side="right")) - 1
        if bound(i) < target:
            best, lo = float(s[mid]), mid
        else:
            hi = mid
        if lo >= hi:
            break
    return best
