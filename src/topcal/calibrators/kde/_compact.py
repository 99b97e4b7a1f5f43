"""Compact prediction tables of the kde calibrators (private module of
:mod:`topcal.calibrators.kde`; docs/kde.md, "Persistence").

A class's prediction table holds Conf and the kernel-weighted count on a regular grid of 257
to 4097 points over its support. A model file stores, per class, what is smaller:

* the kernel centres and weights (exact-engine classes of at most :data:`CENTRES_MAX`
  centres: ImageNet's 1,000 classes of 6-46 rows), from which the table's values at the grid
  points a prediction needs are computed again, by the same formula on the same points (no
  tolerance: round-off only);
* or the table itself at *knots* (binned-engine classes, and exact ones with more centres):
  a subset of its grid points between which the table is linear within
  :data:`COMPACT_TOLERANCE` (Conf absolutely, the count relative to count + 1), chosen by
  :func:`select_knots`; the values at the knots are rounded (:func:`round_values`) and the
  check is made with the rounded values.

Because both the full table and its knots are interpolated linearly, their difference is
linear between the full table's grid points: the largest difference anywhere is the largest
at a grid point, which :func:`select_knots` bounds.
"""

from __future__ import annotations

import numpy as np

__all__ = [
    "TABLE_TOLERANCE",
    "COMPACT_TOLERANCE",
    "CENTRES_MAX",
    "VALUE_DIGITS",
    "round_values",
    "select_knots",
]

#: The prediction table's stated accuracy: within this of the exact formula (docs/kde.md,
#: "Engines and accuracy"; measured at most 1.8e-4 on PhANNs), as the two engines' curves
#: are of each other.
TABLE_TOLERANCE = 1e-3
#: A table stored at knots reproduces the full table within this at every grid point (Conf
#: absolutely; the count within this times count + 1), so a compact curve stays within the
#: stated TABLE_TOLERANCE of the exact formula, and a shrunk one (pseudo-count m >= 1, as
#: every rule but a fixed m < 1 chooses) moves by at most three times this: its own table's,
#: its count's weight against the pseudo-count's and the pooled reference's share
#: (docs/kde.md, "Persistence").
COMPACT_TOLERANCE = TABLE_TOLERANCE / 4
#: Exact-engine classes with at most this many kernel centres store them (3 numbers each)
#: instead of knots: the largest class the default engine choice keeps exact (``kde``,
#: ``kde-opt``; 128 for ``kde-mon*``). Their tables' grid values are computed again where a
#: prediction needs them.
CENTRES_MAX = 512
#: Significant digits of the values stored at knots from 1 up, and decimals below 1:
#: rounding moves a value by at most 5e-7 of it (5e-8 below 1), within COMPACT_TOLERANCE,
#: and keeps a file short.
VALUE_DIGITS = 7


def round_values(values) -> np.ndarray:
    """``values`` (>= 0) rounded to :data:`VALUE_DIGITS` significant digits from 1 up and as
    many decimals below 1: each one the double nearest to a short decimal (its JSON text is
    short)."""
    v = np.asarray(values, dtype=np.float64)
    mag = np.floor(np.log10(np.maximum(v, 1.0)))
    d = np.where(v < 1.0, VALUE_DIGITS, VALUE_DIGITS - 1 - mag).astype(np.int64)
    out = np.empty_like(v)
    up = d >= 0
    scale = 10.0 ** np.abs(d)  # exact for |d| <= 22
    out[up] = np.rint(v[up] * scale[up]) / scale[up]
    out[~up] = np.rint(v[~up] / scale[~up]) * scale[~up]
    return out


def select_knots(conf, count, offsets, tol: float = COMPACT_TOLERANCE):
    """Knots of many tables at once: (knot mask over the flat points, rounded conf, rounded
    count).

    ``conf`` and ``count`` are the tables end to end, table k at ``offsets[k]:offsets[k +
    1]`` (at least 2 points each). A table's first and last points are knots; then, as in
    Douglas-Peucker, every segment between consecutive knots whose linear interpolation of
    the rounded knot values misses a point by more than ``tol`` (Conf absolutely, the count
    relatively to count + 1) is split at its worst point, all segments of all tables
    together, until none misses. Each round adds a knot to every segment that misses, so it
    ends; the rounds are about log2 of the largest table's knots.
    """
    c = np.asarray(conf, dtype=np.float64)
    n = np.asarray(count, dtype=np.float64)
    off = np.asarray(offsets, dtype=np.int64)
    cr, nr = round_values(c), round_values(n)
    knot = np.zeros(c.size, dtype=bool)
    knot[off[:-1]] = True
    knot[off[1:] - 1] = True
    a, e = off[:-1], off[1:] - 1
    a, e = a[e - a > 1], e[e - a > 1]
    scale = 1.0 / (tol * (n + 1.0))
    while a.size:
        inner = e - a - 1
        start = np.cumsum(inner) - inner
        seg = np.repeat(np.arange(a.size), inner)
        j = np.arange(start[-1] + inner[-1]) - start[seg] + a[seg] + 1
        aa, ee = a[seg], e[seg]
        w = (j - aa) / (ee - aa)
        miss = np.abs(c[j] - (cr[aa] + (cr[ee] - cr[aa]) * w)) * (1.0 / tol)
        np.maximum(miss, np.abs(n[j] - (nr[aa] + (nr[ee] - nr[aa]) * w)) * scale[j], out=miss)
        worst = np.maximum.reduceat(miss, start)
        bad = np.flatnonzero(worst > 1.0)
        if not bad.size:
            break
        hit = np.flatnonzero(miss == worst[seg])
        split = j[hit[np.searchsorted(seg[hit], bad)]]  # the first worst point of each
        knot[split] = True
        a, e = np.concatenate([a[bad], split]), np.concatenate([split, e[bad]])
        a, e = a[e - a > 1], e[e - a > 1]
    return knot, cr, nr
