"""The prediction tables of the kde calibrators: Conf over each class's support on a regular grid,
and the linear interpolation every prediction is (private module of :mod:`topcal.calibrators.kde`)."""

from __future__ import annotations

import numpy as np


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
