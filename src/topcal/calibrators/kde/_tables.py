"""The prediction tables of the kde calibrators: Conf over each class's support on a regular grid,
and the linear interpolation every prediction is (private module of :mod:`topcal.calibrators.kde`);
also the interval's wide-bandwidth tables (:func:`wide_bandwidth_tables`)."""

from __future__ import annotations

import numpy as np

from ._kernels import local_linear_sums


def table_cells(lo, hi, inv, nm1, score):
    """(cell, fraction within it) of every score in its table: the cell's left point and 0..1.

    Scores outside [lo, hi] are held at the ends (the curve is constant there).
    """
    x = np.maximum(score, lo)
    np.minimum(x, hi, out=x)
    x -= lo
    x *= inv
    i = x.astype(np.int64)
    np.minimum(i, nm1 - 1, out=i)
    x -= i
    np.minimum(x, 1.0, out=x)
    return i, x


def interp_tables(tab, tab_n, off, lo, hi, inv, nm1, score):
    """Linear interpolation in tables stored end to end in ``tab`` (and counts ``tab_n``).

    ``off`` (start in ``tab``), ``lo``, ``hi``, ``inv`` ((points - 1) / (hi - lo)) and ``nm1``
    (points - 1) are per row (one class per row) or scalars (one class). Written with
    in-place operations: this is the whole cost of ``predict`` (a few passes over the rows,
    no Python loop). With ``tab_n`` also the interpolated kernel-weighted count.
    """
    i, x = table_cells(lo, hi, inv, nm1, score)
    i += off
    t0 = tab[i]
    t1 = tab[i + 1]
    t1 -= t0
    t1 *= x
    t1 += t0
    if tab_n is None:
        return t1
    n0 = tab_n[i]
    n1 = tab_n[i + 1]
    n1 -= n0
    n1 *= x
    n1 += n0
    return t1, n1


def wide_bandwidth_tables(states, count_scale, wide_sd, bounds=None):
    """The interval's terms for classes whose bandwidth spans their scores, as flat tables.

    For each class state whose bandwidth b is at least ``wide_sd`` times the weighted standard
    deviation of its kernel centres: on a grid of spacing <= b / 8 (<= 513 points) over its
    prediction table's range, the kernel's effective sample size per unit of count and
    |Nadaraya-Watson - local linear| (:func:`local_linear_sums`). Other classes (and missing
    or degenerate ones) get two-point tables of ``count_scale`` and 0. Returns (ratio table,
    bias table, offset, lo, hi, inv, nm1) for :func:`interp_tables`, one entry per class.
    """
    ratio, extra, lo, hi, inv, nm1, offs, pos = [], [], [], [], [], [], [], 0
    for st in states:
        b = np.nan if st is None else st["bandwidth"]
        g, r, x = np.array([0.0, 1.0]), np.full(2, count_scale), np.zeros(2)
        if np.isfinite(b):
            w, pts = st["tp"] + st["fp"], st["points"]
            mean = w @ pts / w.sum()
            if b >= wide_sd * np.sqrt(w @ (pts - mean) ** 2 / w.sum()):
                a, z = st["table_lo"], st["table_hi"]
                g = np.linspace(a, z, int(np.clip(np.ceil(8 * (z - a) / b), 1, 512)) + 1)
                nw, ll, r = local_linear_sums(g, pts, st["tp"], st["fp"], b, bounds)
                x = np.abs(nw - ll)
        ratio.append(r)
        extra.append(x)
        lo.append(g[0])
        hi.append(g[-1])
        nm1.append(g.size - 1)
        inv.append((g.size - 1) / (g[-1] - g[0]) if g[-1] > g[0] else 0.0)
        offs.append(pos)
        pos += g.size
    return (
        np.concatenate(ratio),
        np.concatenate(extra),
        np.array(offs, dtype=np.int64),
        np.array(lo),
        np.array(hi),
        np.array(inv),
        np.array(nm1, dtype=np.int64),
    )
