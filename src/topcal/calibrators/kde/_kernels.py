"""Shared pieces of the two kernel-density engines: grids and constants, sign counts, exact
kernel sums.

Private module of :mod:`topcal.calibrators.kde` (the engines are in ``_exact.py`` and
``_binned.py``; ``_engine.py`` is the one name the rules and the calibrator import).
"""

from __future__ import annotations

import numpy as np

from ..._numeric import PROB_CLIP

#: Fine grid of the binned engine: FINE_CELLS cells (FINE_CELLS + 1 points) over the class's
#: support. 4096 cells keep linear-binning error below ~1e-4 at the smallest scanned
#: bandwidth (16 cells; the error of linear binning is O((delta/b)^2), Wand & Jones 1995,
#: "Kernel Smoothing", ch. D).
FINE_CELLS = 4096
#: The sign-change scan grid is every 8th fine point: 513 points.
SCAN_STRIDE = 8
SCAN_POINTS = FINE_CELLS // SCAN_STRIDE + 1
#: The exact engine's lockstep scan first bounds a count from below on every 8th scan point
#: (65 points; see ExactScanBatch.lower_bounds).
BOUND_STRIDE = 8
#: A grid point counts in the scan only where the positive density is at least this fraction
#: of its maximum over the grid: below it the binned engine's FFT round-off (~1e-16 of the
#: total weight) is no longer small against the density, and the curve there is a tail
#: effect in a gap of the data, not a feature of it.
RESOLVED_FRACTION = 1e-6
#: Differences of Conf between neighbouring scan points up to this size count as flat (no
#: sign): they are below what either engine resolves in the flat parts of a curve (exact:
#: ~1e-15; binned: < 1e-8 where resolved).
SLOPE_TOL = 1e-7
#: Exponents below this are raised to it before ``exp``. Below ~-708 ``exp`` returns
#: subnormal numbers or 0, and numpy's vectorised ``exp`` takes a slow path for every such
#: lane (measured 5-15x slower when many lanes underflow, as they do for small bandwidths).
#: A term of exp(-700) ~ 1e-304 instead of 0 (or a subnormal) changes no sum that matters:
#: the shifted kernel sums have their largest term equal to 1, so the change is ~1e-304
#: relative to them.
EXP_FLOOR = -700.0
#: Elements of the batched scan's work array per pass (1 MB: stays in cache).
CACHE_ELEMENTS = 131_072
#: The binned engine samples the kernel only at offsets below KERNEL_REACH bandwidths:
#: beyond, the exponent is below -KERNEL_REACH^2 / 2 = -800 and ``exp`` returns exactly 0
#: (it does from -745.14 on: half the smallest subnormal), so the kernel is the same array
#: as sampled at every offset, at a fraction of the ``exp`` work for the small bandwidths of
#: the fine levels (an offset of 40 b is 640 fine cells at the smallest scanned b, of 4096).
KERNEL_REACH = 40.0
#: Largest chunk of the (points x kernels) matrix the exact engine builds at once, in
#: elements (32 MB of float64).
CHUNK_ELEMENTS = 4_000_000


def count_sign_changes(conf: np.ndarray, resolved: np.ndarray | None = None) -> int:
    """Number of sign changes of the slope of ``conf`` along a grid.

    Differences with absolute value <= :data:`SLOPE_TOL` are flat and are skipped; so are
    grid points not ``resolved``.
    """
    c = conf if resolved is None else conf[resolved]
    d = np.diff(c)
    s = np.sign(d)[np.abs(d) > SLOPE_TOL]
    return int(np.count_nonzero(s[1:] != s[:-1]))


def count_sign_changes_rows(conf: np.ndarray, resolved: np.ndarray) -> np.ndarray:
    """:func:`count_sign_changes` of every row of (m, G) arrays, without a Python loop.

    The same counts: the resolved points of all rows are taken in row order (one flat array)
    and differenced; a difference between two rows is dropped, so each row's differences are
    those of its compressed row, the same floats. Cheaper than differencing the full rows:
    no pass fills the unresolved points. Every row of a scan has a resolved point (its
    maximum) and finite values there (both engines divide by a positive density): the counts
    are those of the earlier version, which filled each unresolved point with the last
    resolved value before it, for such rows.
    """
    conf = np.asarray(conf, dtype=np.float64)
    m, g = conf.shape
    if g < 2:
        return np.zeros(m, dtype=np.int64)
    row = np.nonzero(resolved)[0]
    d = np.diff(conf[resolved])
    keep = row[1:] == row[:-1]
    keep &= ~(np.abs(d) <= SLOPE_TOL)  # NaN differences are not flat, as in count_sign_changes
    return _alternations(row[1:][keep], np.sign(d[keep]), m)


def count_alternations(s: np.ndarray) -> np.ndarray:
    """Sign changes along each row of (m, G) signs (-1, 0, +1), zeros skipped."""
    row, col = np.nonzero(s != 0)
    return _alternations(row, s[row, col], s.shape[0])


def _alternations(row, sign, m) -> np.ndarray:
    """Per row of ``m``, the sign changes between consecutive entries of ``sign``
    (row-major, rows ``row``)."""
    change = sign[1:] != sign[:-1]
    change &= row[1:] == row[:-1]
    return np.bincount(row[1:][change], minlength=m)


def reflect_points(points, tp, fp, bounds):
    """Kernel centres with mirror images at both hard limits (reflection)."""
    if bounds is None:
        return points, tp, fp
    lo, hi = bounds
    return (
        np.concatenate([points, 2.0 * lo - points, 2.0 * hi - points]),
        np.tile(tp, 3),
        np.tile(fp, 3),
    )


def nearest_sq_distance(x, p) -> np.ndarray:
    """min_j (x_i - p_j)^2 for every x_i, from the two centres around it (p in any order).

    The same floating-point value as the minimum over all centres: fl(x - p) is monotone in
    p, so the smallest squared difference on either side of x_i is at its neighbour there.
    O((n + m) log m) instead of a pass over the n x m matrix.
    """
    ps = np.sort(p)
    j = np.searchsorted(ps, x)
    left = x - ps[np.maximum(j - 1, 0)]
    right = x - ps[np.minimum(j, ps.size - 1)]
    return np.minimum(np.square(left), np.square(right))


def exact_sums(x, points, tp, fp, b, bounds=None):
    """Shifted kernel sums at ``x``: returns (num, den, shift).

    num = sum_TP t_i exp(-((x - s_i)^2 - shift) / 2b^2), den the same over all positives,
    and shift = the smallest squared distance from x to a centre with weight. So sum_TP t_i
    exp(-(x - s_i)^2 / 2b^2) = num * exp(-shift / 2b^2), num / den is the confidence, and
    den >= (weight of the nearest centre) > 0.
    """
    p, t, f = reflect_points(points, tp, fp, bounds)
    w = t + f
    p, t, w = p[w > 0], t[w > 0], w[w > 0]
    x = np.asarray(x, dtype=np.float64)
    num = np.empty(x.shape[0])
    den = np.empty(x.shape[0])
    shift = np.empty(x.shape[0])
    # chunks of at most CHUNK_ELEMENTS elements, each one matrix-vector product (the row
    # partition of a BLAS product can change its round-off, and the tables are kept bit for
    # bit); the elementwise passes go over cache-sized blocks of a chunk in one buffer
    # (fresh arrays of many MB cost more in page faults than the arithmetic)
    step = max(1, CHUNK_ELEMENTS // max(p.size, 1))
    sub = max(1, CACHE_ELEMENTS // max(p.size, 1))
    inv = 0.5 / (b * b)
    floor = True
    if x.size and p.size:
        shift[:] = nearest_sq_distance(x, p)
        # no exponent can fall below the floor when the farthest pair is close enough (then
        # max(e, EXP_FLOOR) is e, and the pass is skipped: the same bits)
        span = max(abs(float(x.max()) - float(p.min())), abs(float(p.max()) - float(x.min())))
        floor = span * span * inv * (1.0 + 1e-9) >= -EXP_FLOOR
    buf = np.empty((min(step, x.shape[0]), p.size))
    for a in range(0, x.shape[0], step):
        xa = x[a : a + step]
        e = buf[: xa.size]
        m = shift[a : a + step]
        for c in range(0, xa.size, sub):
            d2 = e[c : c + sub]
            np.subtract(xa[c : c + sub, None], p[None, :], out=d2)
            np.square(d2, out=d2)
            d2 -= m[c : c + sub, None]
            d2 *= -inv  # -(d2 * inv) in one pass: negation is exact
            if floor:
                np.maximum(d2, EXP_FLOOR, out=d2)
            np.exp(d2, out=d2)
        num[a : a + step] = e @ t
        den[a : a + step] = e @ w
    return num, den, shift


def exact_confidence(x, points, tp, fp, b, bounds=None) -> np.ndarray:
    """Conf_KDE at ``x`` by direct summation in the shifted (log) domain."""
    num, den, _ = exact_sums(x, points, tp, fp, b, bounds)
    return np.clip(num / den, 0.0, 1.0)


def loss_rows(c_tp, c_fp_wrong, tp, fp):
    """Weighted binary NLL of every row of (nb, n) confidence arrays (one value per
    bandwidth).

    ``c_fp_wrong`` is the probability that a false positive is wrong, computed directly (no
    1 - c cancellation), so this is not ``_numeric.binary_nll(c)``; the clip is the same
    (PROB_CLIP).
    """
    a, z = tp > 0, fp > 0
    la = np.log(np.clip(c_tp[:, a], PROB_CLIP, 1.0 - PROB_CLIP))
    lz = np.log(np.clip(c_fp_wrong[:, z], PROB_CLIP, 1.0 - PROB_CLIP))
    return -(la @ tp[a]) - (lz @ fp[z])


def loo_confidences(sums, m, inv, lt) -> tuple[np.ndarray, np.ndarray]:
    """Leave-one-out (P(correct) of each TP, P(wrong) of each FP) from the shifted
    other-centre sums.

    ``sums``: (rows, samples, 3); ``m`` and the ``log_*_rest`` and ``q_*`` terms of ``lt``
    broadcast against (rows, samples), ``inv`` = 1 / 2b^2 as a column. Shared by
    :meth:`ExactEngine.loo_nll` and :class:`ExactLooBatch`, so both do the same arithmetic.
    """
    with np.errstate(divide="ignore"):
        logs = np.log(sums) - (m * inv)[:, :, None]
    log_ot, log_of, log_op = logs[..., 0], logs[..., 1], logs[..., 2]
    # the own centre (with mirrors) at distance 0 (and 2(s - limit))
    selfk = np.ones(log_ot.shape)
    if lt["q_lo"] is not None:
        selfk = selfk + np.exp(lt["q_lo"] * inv) + np.exp(lt["q_hi"] * inv)
    with np.errstate(divide="ignore"):
        ls = np.log(selfk)
        num_t = np.logaddexp(log_ot, lt["log_t_rest"] + ls)
        den_t = np.logaddexp(log_op, lt["log_p_rest_t"] + ls)
        num_f = np.logaddexp(log_of, lt["log_f_rest"] + ls)
        den_f = np.logaddexp(log_op, lt["log_p_rest_f"] + ls)
    return np.exp(num_t - den_t), np.exp(num_f - den_f)


def local_linear_sums(x, points, tp, fp, b, bounds=None):
    """At each ``x``: (Nadaraya-Watson value, local-linear value, effective sample size per
    unit of kernel-weighted count) of the Gaussian kernel of bandwidth ``b`` on the weighted
    centres.

    The local-linear value is the kernel-weighted least-squares line's value at x (Fan &
    Gijbels 1996, ch. 3), clipped to [0, 1]; where the weighted design is singular (one
    centre in reach) it is the Nadaraya-Watson value. The effective sample size is (sum_i
    n_i w_i)^2 / sum_i n_i w_i^2 (n_i = t_i + f_i rows at centre i, w_i the kernel value),
    returned divided by sum_i n_i w_i, the count the calibrator stores (kernel value 1 at
    distance 0). The kernel values are shifted as in :func:`exact_sums` (the nearest centre
    has value 1), which every ratio here undoes.
    """
    p, t, f = reflect_points(points, tp, fp, bounds)
    n = t + f
    p, t, n = p[n > 0], t[n > 0], n[n > 0]
    x = np.asarray(x, dtype=np.float64)
    nw, ll, ratio = np.empty(x.size), np.empty(x.size), np.empty(x.size)
    inv = 0.5 / (b * b)
    step = max(1, CHUNK_ELEMENTS // (4 * max(p.size, 1)))
    for a in range(0, x.size, step):
        xa = x[a : a + step]
        d = p[None, :] - xa[:, None]
        shift = nearest_sq_distance(xa, p)
        w = np.exp(np.maximum(-(d * d - shift[:, None]) * inv, EXP_FLOOR))
        wd = w * d
        s0, s1, s2 = w @ n, wd @ n, (wd * d) @ n
        t0, t1 = w @ t, wd @ t
        q0 = (w * w) @ n
        det = s0 * s2 - s1 * s1
        ok = det > 1e-9 * s0 * s2
        nw[a : a + step] = t0 / s0
        with np.errstate(divide="ignore", invalid="ignore"):
            ll[a : a + step] = np.where(
                ok, (s2 * t0 - s1 * t1) / np.where(ok, det, 1.0), t0 / s0
            )
        # ESS / (sum n w e^{-shift inv}) = s0^2 / q0 / (s0 e^{-shift inv})
        ratio[a : a + step] = s0 / q0 * np.exp(np.minimum(shift * inv, 700.0))
    return nw, np.clip(ll, 0.0, 1.0), ratio
