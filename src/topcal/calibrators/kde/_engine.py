"""Numerical engines behind the kernel-density-ratio calibrators.

Conf_KDE(S) = sum_TP t_i phi_b(S - s_i) / sum_P (t_i + f_i) phi_b(S - s_i) is a
Nadaraya-Watson regression of correctness on the score. Two engines evaluate
it, both for many bandwidths at once:

* :class:`ExactEngine` sums every kernel (after merging equal scores), with
  a per-point shift in the exponent so the ratio is defined even where both
  sums underflow (log-sum-exp: the shift is the squared distance to the
  nearest kernel centre, so the largest term is exactly 1).
* :class:`BinnedEngine` spreads TP and FP weights onto a fine grid once
  (linear binning, as relplot and KDEpy do) and convolves the two grid
  sequences with the sampled Gaussian by FFT, one transform per bandwidth,
  all bandwidths of a scan in one batched call.

Both evaluate on the same grids (a fine grid of ``FINE_CELLS + 1`` points
over the class's support; the scan grid is every ``SCAN_STRIDE``-th of them),
so their results can be compared point by point.

This is a private module: the public API is :mod:`topcal.calibrators.kde`.

Size: both engines and the batched bandwidth scans the rules need, which share the kernel-sum
helpers.
"""

from __future__ import annotations

import numpy as np

from ..._numeric import PROB_CLIP

#: Fine grid of the binned engine: FINE_CELLS cells (FINE_CELLS + 1 points)
#: over the class's support. 4096 cells keep linear-binning error below
#: ~1e-4 at the smallest scanned bandwidth (16 cells; the error of linear
#: binning is O((delta/b)^2), Wand & Jones 1995, "Kernel Smoothing", ch. D).
FINE_CELLS = 4096
#: The sign-change scan grid is every 8th fine point: 513 points.
SCAN_STRIDE = 8
SCAN_POINTS = FINE_CELLS // SCAN_STRIDE + 1
#: The exact engine's lockstep scan first bounds a count from below on every 8th scan
#: point (65 points; see ExactScanBatch.lower_bounds).
BOUND_STRIDE = 8
#: A grid point counts in the scan only where the positive density is at
#: least this fraction of its maximum over the grid: below it the binned
#: engine's FFT round-off (~1e-16 of the total weight) is no longer small
#: against the density, and the curve there is a tail effect in a gap of the
#: data, not a feature of it.
RESOLVED_FRACTION = 1e-6
#: Differences of Conf between neighbouring scan points up to this size count
#: as flat (no sign): they are below what either engine resolves in the
#: flat parts of a curve (exact: ~1e-15; binned: < 1e-8 where resolved).
SLOPE_TOL = 1e-7
#: Exponents below this are raised to it before ``exp``. Below ~-708 ``exp``
#: returns subnormal numbers or 0, and numpy's vectorised ``exp`` takes a slow
#: path for every such lane (measured 5-15x slower when many lanes
#: underflow, as they do for small bandwidths). A term of exp(-700) ~ 1e-304
#: instead of 0 (or a subnormal) changes no sum that matters: the shifted
#: kernel sums have their largest term equal to 1, so the change is ~1e-304
#: relative to them.
EXP_FLOOR = -700.0
#: Elements of the batched scan's work array per pass (1 MB: stays in cache).
CACHE_ELEMENTS = 131_072
#: The binned engine samples the kernel only at offsets below KERNEL_REACH bandwidths: beyond,
#: the exponent is below -KERNEL_REACH^2 / 2 = -800 and ``exp`` returns exactly 0 (it does
#: from -745.14 on: half the smallest subnormal), so the kernel is the same array as sampled
#: at every offset, at a fraction of the ``exp`` work for the small bandwidths of the fine
#: levels (an offset of 40 b is 640 fine cells at the smallest scanned b, of 4096).
KERNEL_REACH = 40.0
#: Largest chunk of the (points x kernels) matrix the exact engine builds
#: at once, in elements (32 MB of float64).
CHUNK_ELEMENTS = 4_000_000


def count_sign_changes(conf: np.ndarray, resolved: np.ndarray | None = None) -> int:
    """Number of sign changes of the slope of ``conf`` along a grid.

    Differences with absolute value <= :data:`SLOPE_TOL` are flat and are
    skipped; so are grid points not ``resolved``.
    """
    c = conf if resolved is None else conf[resolved]
    d = np.diff(c)
    s = np.sign(d)[np.abs(d) > SLOPE_TOL]
    return int(np.count_nonzero(s[1:] != s[:-1]))


def count_sign_changes_rows(conf: np.ndarray, resolved: np.ndarray) -> np.ndarray:
    """:func:`count_sign_changes` of every row of (m, G) arrays, without a Python loop.

    The same counts: the resolved points of all rows are taken in row order
    (one flat array) and differenced; a difference between two rows is
    dropped, so each row's differences are those of its compressed row, the
    same floats. Cheaper than differencing the full rows: no pass fills the
    unresolved points. Every row of a scan has a resolved point (its
    maximum) and finite values there (both engines divide by a positive
    density): the counts are those of the earlier version, which filled each
    unresolved point with the last resolved value before it, for such rows.
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
    """Per row of ``m``, the sign changes between consecutive entries of ``sign`` (row-major, rows ``row``)."""
    change = sign[1:] != sign[:-1]
    change &= row[1:] == row[:-1]
    return np.bincount(row[1:][change], minlength=m)


def _reflect_points(points, tp, fp, bounds):
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

    The same floating-point value as the minimum over all centres: fl(x - p) is monotone
    in p, so the smallest squared difference on either side of x_i is at its neighbour
    there. O((n + m) log m) instead of a pass over the n x m matrix.
    """
    ps = np.sort(p)
    j = np.searchsorted(ps, x)
    left = x - ps[np.maximum(j - 1, 0)]
    right = x - ps[np.minimum(j, ps.size - 1)]
    return np.minimum(np.square(left), np.square(right))


def exact_sums(x, points, tp, fp, b, bounds=None):
    """Shifted kernel sums at ``x``: returns (num, den, shift).

    num = sum_TP t_i exp(-((x - s_i)^2 - shift) / 2b^2), den the same over all
    positives, and shift = the smallest squared distance from x to a centre
    with weight. So sum_TP t_i exp(-(x - s_i)^2 / 2b^2) = num * exp(-shift / 2b^2),
    num / den is the confidence, and den >= (weight of the nearest centre) > 0.
    """
    p, t, f = _reflect_points(points, tp, fp, bounds)
    w = t + f
    p, t, w = p[w > 0], t[w > 0], w[w > 0]
    x = np.asarray(x, dtype=np.float64)
    num = np.empty(x.shape[0])
    den = np.empty(x.shape[0])
    shift = np.empty(x.shape[0])
    # chunks of at most CHUNK_ELEMENTS elements, each one matrix-vector product (the row partition of
    # a BLAS product can change its round-off, and the tables are kept bit for bit); the
    # elementwise passes go over cache-sized blocks of a chunk in one buffer (fresh arrays
    # of many MB cost more in page faults than the arithmetic)
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


def _loss_rows(c_tp, c_fp_wrong, tp, fp):
    """Weighted binary NLL of every row of (nb, n) confidence arrays (one value per bandwidth).

    ``c_fp_wrong`` is the probability that a false positive is wrong, computed
    directly (no 1 - c cancellation), so this is not ``_numeric.binary_nll(c)``;
    the clip is the same (PROB_CLIP).
    """
    a, z = tp > 0, fp > 0
    la = np.log(np.clip(c_tp[:, a], PROB_CLIP, 1.0 - PROB_CLIP))
    lz = np.log(np.clip(c_fp_wrong[:, z], PROB_CLIP, 1.0 - PROB_CLIP))
    return -(la @ tp[a]) - (lz @ fp[z])


def _loo_confidences(sums, m, inv, lt):
    """Leave-one-out (P(correct) of each TP, P(wrong) of each FP) from the shifted other-centre sums.

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


class ExactEngine:
    """Direct summation over the class's distinct scores (small classes).

    Parameters
    ----------
    points, tp, fp : ndarray
        Distinct scores (sorted) and their summed TP/FP weights.
    lo, hi : float
        The class's support (the grids span it).
    bounds : (float, float) or None
        Hard score limits for reflection, or None.
    """

    name = "exact"

    def __init__(self, points, tp, fp, lo, hi, bounds=None):
        self.points, self.tp, self.fp = points, tp, fp
        self.lo, self.hi, self.bounds = lo, hi, bounds
        self.scan_x = np.linspace(lo, hi, SCAN_POINTS)
        self._scan_d2 = None
        self._loo = None  # loo_terms, kept: b_opt's search calls loo_nll OPT_ROUNDS + 1 times

    def _scan_cache(self):
        """Shifted squared distances (scan point x centre) and the shifts: they do not depend on b.

        exact_sums recomputes them per bandwidth; a scan evaluates dozens of
        bandwidths, and for small classes these passes were most of the cost.
        """
        if self._scan_d2 is None:
            self._scan_d2 = self.scan_terms()
        return self._scan_d2

    def scan_terms(self):
        """(shifted squared distances scan point x centre, shifts, TP weights, weights), not cached."""
        p, t, f = _reflect_points(self.points, self.tp, self.fp, self.bounds)
        w = t + f
        p, t, w = p[w > 0], t[w > 0], w[w > 0]
        d2 = (self.scan_x[:, None] - p[None, :]) ** 2
        m = d2.min(axis=1)
        return d2 - m[:, None], m, t, w

    def cacheable(self) -> bool:
        """Whether the scan keeps the distance matrix (else it goes one bandwidth at a time)."""
        return self.points.size * SCAN_POINTS <= CHUNK_ELEMENTS

    def scan(self, bandwidths):
        """Conf on the scan grid for each bandwidth: (conf, resolved), each (nb, SCAN_POINTS)."""
        bs = np.atleast_1d(np.asarray(bandwidths, dtype=np.float64))
        if not self.cacheable():  # too big to cache: one bandwidth at a time
            confs, res = [], []
            for b in bs:
                num, den, shift = exact_sums(self.scan_x, self.points, self.tp, self.fp, b, self.bounds)
                log_kp = np.log(den) - shift * (0.5 / (b * b))
                confs.append(np.clip(num / den, 0.0, 1.0))
                res.append(log_kp >= log_kp.max() + np.log(RESOLVED_FRACTION))
            return np.array(confs), np.array(res)
        dd, shift, t, w = self._scan_cache()
        inv = 0.5 / (bs * bs)
        conf = np.empty((bs.size, SCAN_POINTS))
        res = np.empty((bs.size, SCAN_POINTS), dtype=bool)
        for i in range(bs.size):
            e = dd * -inv[i]
            np.maximum(e, EXP_FLOOR, out=e)
            np.exp(e, out=e)
            num = e @ t
            den = e @ w
            log_kp = np.log(den) - shift * inv[i]
            conf[i] = np.clip(num / den, 0.0, 1.0)
            res[i] = log_kp >= log_kp.max() + np.log(RESOLVED_FRACTION)
        return conf, res

    def confidence(self, x, b):
        return exact_confidence(x, self.points, self.tp, self.fp, b, self.bounds)

    def loo_terms(self) -> dict:
        """The bandwidth-free terms of :meth:`loo_nll` (also stacked by :class:`ExactLooBatch`).

        ``dd``: squared distances sample x centre (mirror images included) minus the
        sample's smallest one to another centre (``m``), inf at the sample's own centres
        (``self_i``, ``self_j``); ``weights``: TP, FP and positive weight per centre;
        ``log_*_rest``: log of what the left-out sample's own place keeps; ``q_lo``,
        ``q_hi``: -4 (s - limit)^2 for the mirror images of the own kernel (None without
        reflection); ``dd_max``: the largest finite ``dd``.
        """
        p, t, f = self.points, self.tp, self.fp
        n = p.size
        pa, ta, fa = _reflect_points(p, t, f, self.bounds)
        copies = 1 if self.bounds is None else 3
        d2 = (p[:, None] - pa[None, :]) ** 2
        self_cols = np.zeros(d2.shape, dtype=bool)
        for c in range(copies):
            self_cols[np.arange(n), c * n + np.arange(n)] = True
        d2_other = np.where(self_cols, np.inf, d2)
        m = d2_other.min(axis=1)  # finite: a class here has >= 2 distinct scores
        dd = d2_other - m[:, None]
        u_t, u_f = np.minimum(t, 1.0), np.minimum(f, 1.0)
        with np.errstate(divide="ignore"):
            rest = {
                "log_t_rest": np.log(t - u_t),  # TP left out: TP keeps t - u_t at its own place
                "log_p_rest_t": np.log(t + f - u_t),
                "log_f_rest": np.log(f - u_f),  # FP left out: probability it is wrong = FP / P
                "log_p_rest_f": np.log(t + f - u_f),
            }
        self_i, self_j = np.nonzero(self_cols)
        q_lo = q_hi = None
        if self.bounds is not None:
            q_lo = -4.0 * (p - self.bounds[0]) ** 2
            q_hi = -4.0 * (p - self.bounds[1]) ** 2
        return {
            "dd": dd, "m": m, "self_i": self_i, "self_j": self_j,
            "weights": np.stack([ta, fa, ta + fa], axis=1),  # (centres, 3)
            "dd_max": float(np.where(self_cols, 0.0, dd).max()), "q_lo": q_lo, "q_hi": q_hi, **rest,
        }

    def loo_nll(self, bandwidths) -> np.ndarray:
        """Leave-one-out top-label NLL (summed over the class) per bandwidth.

        Each sample's own kernel (and its mirror images) is removed from its
        own group's sum: one unit of weight, or the whole weight when it is
        below 1. All bandwidths are evaluated together, as (bandwidth x
        sample x centre) arrays in chunks of bandwidths that stay below the
        engine's memory chunk (the same arithmetic per bandwidth as one at a
        time; small classes are many cheap evaluations, so the number of
        calls, not the arithmetic, was their cost).
        """
        t, f = self.tp, self.fp
        if self._loo is None:
            self._loo = self.loo_terms()
        lt = self._loo
        dd, m, weights = lt["dd"], lt["m"], lt["weights"]
        bs = np.atleast_1d(np.asarray(bandwidths, dtype=np.float64))
        out = np.empty(bs.size)
        # chunks of bandwidths as large as CHUNK_ELEMENTS allows, each one batched product (see
        # exact_sums); the elementwise passes a few bandwidths at a time in one buffer
        step = max(1, CHUNK_ELEMENTS // max(dd.size, 1))
        sub = max(1, CACHE_ELEMENTS // max(dd.size, 1))
        neg = -dd
        # the exponent floor changes only exponents below it: skipped for bandwidths where the
        # largest finite one stays above (the left-out entries are -inf, exp 0, zeroed below)
        dd_max = lt["dd_max"]
        self_i, self_j = lt["self_i"], lt["self_j"]
        buf = np.empty((min(step, bs.size),) + dd.shape)
        for a in range(0, bs.size, step):
            b = bs[a : a + step]
            inv = 0.5 / (b * b)
            e = buf[: b.size]
            for c in range(0, b.size, sub):
                part = e[c : c + sub]
                np.multiply(neg[None, :, :], inv[c : c + sub, None, None], out=part)
                if dd_max * inv[c : c + sub].max() > -EXP_FLOOR:
                    np.maximum(part, EXP_FLOOR, out=part)
                np.exp(part, out=part)
            e[:, self_i, self_j] = 0.0  # the sample's own kernel (and mirrors) left out
            sums = np.matmul(e, weights)  # (nb, n, 3): other centres only, shifted
            out[a : a + b.size] = _loss_rows(*_loo_confidences(sums, m[None, :], inv[:, None], lt), t, f)
        return out

    def kernel_points(self):
        return self.points, self.tp, self.fp


class ExactScanBatch:
    """The exact engine's scan for many classes at once: one array program per step.

    Small classes make the scan a long series of small evaluations whose cost
    was mostly Python overhead. Here the bandwidth-free terms of every class
    (shifted squared distances from the 513 scan points to its kernel
    centres, as :meth:`ExactEngine.scan` caches them) are padded to one
    width and stacked, so one call evaluates one bandwidth for each of any
    subset of the classes. The arithmetic per (class, bandwidth) is that of
    :meth:`ExactEngine.scan` (the padded centres have weight 0 and kernel
    value exactly 0); only the order of the two weighted sums may differ
    (a batched matrix product), by round-off (~1e-16 relative).
    """

    def __init__(self, engines):
        terms = [e.scan_terms() for e in engines]
        width = max(t[0].shape[1] for t in terms)
        c = len(terms)
        # padded centres: distance 0 and weight 0, so their terms are exactly 0 in both sums
        self.dd = np.zeros((c, SCAN_POINTS, width))
        self.shift = np.empty((c, SCAN_POINTS))
        self.tw = np.zeros((c, width, 2))
        #: largest shifted squared distance per class: the exponent floor is needed only
        #: where it times 1 / 2b^2 exceeds -EXP_FLOOR (elsewhere max(e, EXP_FLOOR) is e)
        self.dd_max = np.zeros(c)
        for i, (dd, m, t, w) in enumerate(terms):
            p = dd.shape[1]
            self.dd[i, :, :p] = dd
            self.shift[i] = m
            self.tw[i, :p, 0] = t
            self.tw[i, :p, 1] = w
            self.dd_max[i] = dd.max()
        # the coarse scan grid of the lower bound (every BOUND_STRIDE-th scan point)
        self.dd_coarse = np.ascontiguousarray(self.dd[:, ::BOUND_STRIDE])
        self.shift_coarse = np.ascontiguousarray(self.shift[:, ::BOUND_STRIDE])
        # log of the total weight: no kernel sum exceeds it, so log_kp >= log_total + log(RESOLVED_FRACTION)
        # makes a point resolved whatever the maximum over the grid is
        self.log_total = np.log(self.tw[:, :, 1].sum(axis=1))

    #: Grouping slack (elements): classes up to 4 centres wider than a group's first join it.
    PAD_SLACK = 4 * SCAN_POINTS

    @staticmethod
    def size_of(engine) -> int:
        """Elements of the stacked distance matrix one class takes (before padding)."""
        copies = 1 if engine.bounds is None else 3
        return SCAN_POINTS * copies * engine.points.size

    @staticmethod
    def accepts(engine) -> bool:
        """Whether a class can join a batch (its scan terms are small enough to keep)."""
        return engine.cacheable()

    def sign_changes(self, rows, bandwidths, at_most=None) -> np.ndarray:
        """Slope sign changes on the scan grid of class ``rows[i]`` at ``bandwidths[i]``.

        With ``at_most`` (one bound per row; inf: exact count wanted) a row whose count
        provably exceeds its bound gets a lower bound of its count (still above the bound)
        instead: :meth:`lower_bounds` on every BOUND_STRIDE-th scan point, an eighth of the
        terms, settles most inadmissible bandwidths of a scan (measured: ~3/4 of all scan
        evaluations on simulated data) and only the rest are evaluated on the full grid.
        """
        rows = np.asarray(rows, dtype=np.int64)
        b = np.asarray(bandwidths, dtype=np.float64)
        if at_most is None:
            return self._counts(rows, b, self.dd, self.shift)
        out = self.lower_bounds(rows, b)
        full = out <= np.asarray(at_most)
        if full.any():
            out[full] = self._counts(rows[full], b[full], self.dd, self.shift)
        return out

    def lower_bounds(self, rows, bandwidths) -> np.ndarray:
        """A lower bound of each row's sign-change count from every BOUND_STRIDE-th scan point.

        Only points resolved whatever the rest of the grid holds are used (kernel sum at
        least RESOLVED_FRACTION of the total weight, which bounds its maximum). Between two
        consecutive such points, g scan steps apart, a change of Conf by more than g x
        SLOPE_TOL means the full grid has a step of more than SLOPE_TOL in that direction
        there (g steps cannot add up to more than g x SLOPE_TOL otherwise); such intervals
        are disjoint, so the sign changes between them are sign changes of the full grid's
        non-flat steps. Other intervals count as flat. A margin of 1e-12 (and 1e-6 relative)
        covers the round-off between this evaluation and the full one (~1e-15).
        """
        rows = np.asarray(rows, dtype=np.int64)
        b = np.asarray(bandwidths, dtype=np.float64)
        num, den, log_kp = self._sums(rows, b, self.dd_coarse, self.shift_coarse)
        conf = np.clip(num / den, 0.0, 1.0)
        sure = log_kp >= (self.log_total[rows] + np.log(RESOLVED_FRACTION) + 1e-9)[:, None]
        m, g = conf.shape
        cols = np.arange(g)
        idx = np.where(sure, cols, -1)
        np.maximum.accumulate(idx, axis=1, out=idx)
        first = np.argmax(sure, axis=1)
        idx = np.where(idx >= 0, idx, first[:, None])  # last sure point at or before each point
        d = np.diff(np.take_along_axis(conf, idx, axis=1), axis=1)
        gap = (cols[1:][None, :] - idx[:, :-1]) * BOUND_STRIDE  # scan steps back to the previous sure point
        s = np.sign(d)
        s[np.abs(d) <= gap * SLOPE_TOL * (1.0 + 1e-6) + 1e-12] = 0.0  # not certain (or not a sure point: d = 0)
        s[~sure.any(axis=1)] = 0.0
        return count_alternations(s)

    def _sums(self, rows, b, dd_all, shift_all):
        """Shifted kernel sums (num, den) and log kernel sum of the positives on the given points."""
        inv = 0.5 / (b * b)
        floor = self.dd_max[rows] * inv > -EXP_FLOOR
        npts = dd_all.shape[1]
        kk = np.empty((rows.size, npts, 2))
        # a few classes at a time, so the passes over the terms stay in cache (one buffer;
        # each class's terms scaled straight into it, no separate gather pass)
        step = max(1, CACHE_ELEMENTS // (npts * dd_all.shape[2]))
        buf = np.empty((min(step, rows.size),) + dd_all.shape[1:])
        for a in range(0, rows.size, step):
            r = rows[a : a + step]
            e = buf[: r.size]
            for j, i in enumerate(r):
                np.multiply(dd_all[i], -inv[a + j], out=e[j])
            if floor[a : a + step].any():
                np.maximum(e, EXP_FLOOR, out=e)
            np.exp(e, out=e)
            np.matmul(e, self.tw[r], out=kk[a : a + step])
        num, den = kk[..., 0], kk[..., 1]
        log_kp = np.log(den) - shift_all[rows] * inv[:, None]
        return num, den, log_kp

    def _counts(self, rows, b, dd_all, shift_all) -> np.ndarray:
        """Exact sign-change counts on the full scan grid."""
        num, den, log_kp = self._sums(rows, b, dd_all, shift_all)
        resolved = log_kp >= log_kp.max(axis=1, keepdims=True) + np.log(RESOLVED_FRACTION)
        conf = np.clip(num / den, 0.0, 1.0)
        return count_sign_changes_rows(conf, resolved)


class ExactLooBatch:
    """The exact engine's leave-one-out NLL for many classes at once, bit for bit that of each class.

    The counterpart of :class:`ExactScanBatch` for b_opt: one call evaluates any list of
    (class, bandwidth) pairs, so a lockstep search makes a few calls in all instead of a
    few per class (for small classes the per-call overhead of
    :meth:`ExactEngine.loo_nll`, ~0.1 ms, was most of their cost). The kernel terms of
    the pairs are laid out one after another in one flat buffer (no padding: each
    class's block has its own shape) and the elementwise passes (scale, exponent floor,
    exp) run over cache-sized stretches of it, spanning many small classes; the
    per-sample passes run over one (pairs x samples) array padded to the widest class.
    The arithmetic per pair is that of :meth:`ExactEngine.loo_nll`, in the same order: the
    exponent floor is applied to a stretch where some pair in it needs it (it changes no
    exponent of a pair that ``loo_nll`` leaves unfloored), and the two reductions whose round-off depends on how
    they are called (the weighted sums over centres, the sum over samples) are called
    per class with the shapes ``loo_nll`` gives them. Bit for bit matters: b_opt's
    refinement re-evaluates the best point so far (the middle of its new bracket, up to
    round-off), so its decisions hang on the last bit of the loss.
    """

    #: Grouping slack (elements): tiny classes (up to 16 distinct scores) share one group.
    PAD_SLACK = 256

    def __init__(self, engines):
        terms = [e.loo_terms() for e in engines]
        c = len(terms)
        self.shape = [lt["dd"].shape for lt in terms]
        n_max = max(sh[0] for sh in self.shape)
        self.neg, self.weights, self.self_ij, self.dd_max = [], [], [], []
        self.m = np.zeros((c, n_max))
        self.t = [e.tp for e in engines]
        self.f = [e.fp for e in engines]
        reflect = terms[0]["q_lo"] is not None
        names = ("log_t_rest", "log_p_rest_t", "log_f_rest", "log_p_rest_f") + (("q_lo", "q_hi") if reflect else ())
        # padded samples: finite logs (kernel sums set to 1 below, rests 0); they are never summed
        self.rest = {name: np.zeros((c, n_max)) for name in names}
        for i, lt in enumerate(terms):
            n = self.shape[i][0]
            neg = -lt["dd"]
            neg[lt["self_i"], lt["self_j"]] = 0.0  # not -inf: zeroed after exp, as in loo_nll
            self.neg.append(neg)
            self.weights.append(lt["weights"])
            self.dd_max.append(lt["dd_max"])
            self.self_ij.append((lt["self_i"], lt["self_j"]))
            self.m[i, :n] = lt["m"]
            for name in names:
                self.rest[name][i, :n] = lt[name]
        self.pad = np.arange(n_max)[None, :] >= np.array([sh[0] for sh in self.shape])[:, None]

    @staticmethod
    def size_of(engine) -> int:
        """Elements of the kernel block (samples x centres) of one class and bandwidth."""
        copies = 1 if engine.bounds is None else 3
        return copies * engine.points.size ** 2

    #: Largest kernel block (elements) of a class the batch takes: beyond it (~256 distinct
    #: scores) a class's own loo_nll is all arithmetic, which batching does not change
    #: (measured: no gain), and keeping its terms would only raise the peak memory.
    MAX_BLOCK = 65_536

    @staticmethod
    def accepts(engine) -> bool:
        """Whether a class joins a batch: a small one (see MAX_BLOCK); the others go one by one."""
        return ExactLooBatch.size_of(engine) <= ExactLooBatch.MAX_BLOCK

    def loo_nll(self, rows, bandwidths) -> np.ndarray:
        """Leave-one-out NLL of class ``rows[i]`` at ``bandwidths[i]``, for every i.

        The pairs of one class form runs (consecutive i with the same class); a run gives
        what one call ``ExactEngine.loo_nll(its bandwidths)`` gives, bit for bit.
        """
        rows = np.asarray(rows, dtype=np.int64)
        bs = np.asarray(bandwidths, dtype=np.float64)
        inv = 0.5 / (bs * bs)
        starts = np.flatnonzero(np.diff(rows, prepend=-1) != 0)
        runs = list(zip(starts.tolist(), np.append(starts[1:], rows.size).tolist()))
        n_max = self.m.shape[1]
        la = np.empty((rows.size, n_max))  # log P(correct) of each TP left out, log P(wrong) of each FP
        lz = np.empty((rows.size, n_max))
        need = sum(self.shape[int(rows[g0])][0] * self.shape[int(rows[g0])][1] * (g1 - g0) for g0, g1 in runs)
        # a quarter memory chunk (8 MB; more buys nothing: exp runs over cache-sized stretches
        # of it), or less if less is needed, but room for any one piece below
        flat = np.empty(max(min(CHUNK_ELEMENTS // 4, need), CACHE_ELEMENTS, max(n * w for n, w in self.shape)))
        pending = []  # (first pair, end pair, class, view) scaled, not yet through exp and the product
        pos = done = 0  # end of the filled buffer; end of the part through exp
        floor = False  # whether some exponent in the part not yet through exp is below EXP_FLOOR

        def to_exp():
            # as loo_nll: the floor only where some exponent needs it (elsewhere it is the identity)
            if floor:
                np.maximum(flat[done:pos], EXP_FLOOR, out=flat[done:pos])
            np.exp(flat[done:pos], out=flat[done:pos])

        def finish():
            to_exp()
            p0, p1 = pending[0][0], pending[-1][1]
            sums = np.ones((p1 - p0, n_max, 3))  # padded samples: finite logs, never summed
            for g0, g1, i, view in pending:
                si, sj = self.self_ij[i]
                view[:, si, sj] = 0.0  # the sample's own kernel (and mirrors) left out
                sums[g0 - p0 : g1 - p0, : view.shape[1]] = np.matmul(view, self.weights[i])
            pending.clear()
            # the per-sample passes for the pairs of this buffer (arrays of a few MB at most)
            r = rows[p0:p1]
            lt = {name: v[r] for name, v in self.rest.items()}
            lt.setdefault("q_lo", None)
            c_t, c_f = _loo_confidences(sums, self.m[r], inv[p0:p1, None], lt)
            # _loss_rows: the clip and log elementwise, the sums over samples per class below
            np.log(np.clip(c_t, PROB_CLIP, 1.0 - PROB_CLIP), out=la[p0:p1])
            np.log(np.clip(c_f, PROB_CLIP, 1.0 - PROB_CLIP), out=lz[p0:p1])

        for g0, g1 in runs:
            i = int(rows[g0])
            n, w = self.shape[i]
            sub = max(1, CACHE_ELEMENTS // (n * w))  # loo_nll's elementwise blocks
            for a in range(g0, g1, sub):
                z = min(a + sub, g1)
                size = (z - a) * n * w
                if pos + size > flat.size:
                    finish()
                    pos = done = 0
                    floor = False
                elif pos > done and pos - done + size > CACHE_ELEMENTS:  # keep the stretch in cache
                    to_exp()
                    done, floor = pos, False
                view = flat[pos : pos + size].reshape(z - a, n, w)
                np.multiply(self.neg[i][None, :, :], inv[a:z, None, None], out=view)
                pending.append((a, z, i, view))
                pos += size
                floor = floor or self.dd_max[i] * inv[a:z].max() > -EXP_FLOOR
        finish()
        out = np.empty(rows.size)
        for g0, g1 in runs:
            i = int(rows[g0])
            n, w = self.shape[i]
            a, z = self.t[i] > 0, self.f[i] > 0
            ta, fz = self.t[i][a], self.f[i][z]
            chunk = max(1, CHUNK_ELEMENTS // (n * w))  # loo_nll's chunks: one sum over samples each
            for s in range(g0, g1, chunk):
                e = min(s + chunk, g1)
                out[s:e] = -(la[s:e, :n][:, a] @ ta) - (lz[s:e, :n][:, z] @ fz)
        return out


def linear_bin(group, score, tp, fp, lo, hi, n_groups):
    """Linear binning of TP and FP weights onto each group's fine grid, in one pass.

    Row r lies on the grid of ``group[r]``: FINE_CELLS + 1 points from
    ``lo[group]`` to ``hi[group]``; its weight is split between the two
    neighbouring points in proportion to proximity. Returns T, F of shape
    (n_groups, FINE_CELLS + 1). Weights add up, so counts from several chunks
    (or machines) can be binned separately and summed.
    """
    m = FINE_CELLS + 1
    width = hi - lo
    inv = np.where(width > 0, FINE_CELLS / np.where(width > 0, width, 1.0), 0.0)
    # one group (the pooled reference): its scalars instead of per-row gathers; the temporaries
    # are reused in place (fresh arrays of many MB cost page faults): the same values either way
    one = n_groups == 1
    pos = score - (lo[0] if one else lo[group])
    pos *= inv[0] if one else inv[group]
    i = pos.astype(np.int64)
    np.minimum(i, FINE_CELLS - 1, out=i)  # pos >= 0: truncation is floor
    fr = np.subtract(pos, i, out=pos)
    np.clip(fr, 0.0, 1.0, out=fr)
    if not one:
        i += group * m
    size = n_groups * m
    wt = tp * fr
    wf = fp * fr
    # i never reaches a group's last point, so the right-hand shares shift by one within the group
    T = np.bincount(i, np.subtract(tp, wt, out=fr), minlength=size)
    T[1:] += np.bincount(i, wt, minlength=size)[:-1]
    F = np.bincount(i, np.subtract(fp, wf, out=fr), minlength=size)
    F[1:] += np.bincount(i, wf, minlength=size)[:-1]
    return T.reshape(n_groups, m), F.reshape(n_groups, m)


def kernel_reach(b, step, m) -> int:
    """Offsets 0 .. reach - 1 of a kernel sampled on ``m`` points of spacing ``step`` that can be nonzero.

    ``b`` and ``step`` are (rows, 1) or broadcastable; the reach covers every row: offsets j
    with j * step >= KERNEL_REACH * b have kernel value exp(-(j step / b)^2 / 2) = 0 exactly.
    """
    return int(min(m, np.ceil(KERNEL_REACH * np.max(b / step)) + 1))


class Workspace:
    """Work arrays kept between calls, by name, grown as needed.

    A batched scan step transforms tens of MB (64 classes x 8192 points, six arrays); fresh
    arrays of that size are new pages for the allocator each time (it hands them back to the
    system when freed), and faulting them in cost more than the FFTs (measured ~5,900 page
    faults, ~10 of 17 ms, per 60-row step on the finest level). Writing into the same arrays
    changes no value.
    """

    def __init__(self):
        self._arrays = {}

    def get(self, name, shape, dtype=np.float64) -> np.ndarray:
        """An uninitialised C-contiguous array of ``shape`` under ``name`` (its contents are the caller's)."""
        need = int(np.prod(shape))
        a = self._arrays.get(name)
        if a is None or a.dtype != np.dtype(dtype) or a.size < need:
            a = self._arrays[name] = np.empty(need, dtype)
        return a[:need].reshape(shape)


#: numpy >= 2 lets the FFTs write into given arrays (``out=``); with older numpy they allocate.
FFT_OUT = np.lib.NumpyVersion(np.__version__) >= "2.0.0"


def binned_sums(ft_t, ft_p, b, step, m, nfft, lo, bounds, work: Workspace | None = None):
    """Unshifted kernel sums on a level's grid of m points, one row per bandwidth: (KT, KP).

    ``ft_t``, ``ft_p``: rfft of the TP and positive weights, one row per bandwidth or one row
    for all; ``step`` and ``lo`` (grid spacing, support start) scalars or one per row. The
    kernel is sampled at every offset the grid needs and transformed per row (see
    :class:`BinnedEngine`), so a row's arithmetic does not depend on the other rows. With
    ``work`` the transforms are written into its arrays (the same values) and KT, KP are
    views of them, valid until the next call with the same ``work``.
    """
    b = b[:, None]
    step = np.reshape(step, (-1, 1))
    rows, nft = b.shape[0], nfft // 2 + 1
    # offsets of KERNEL_REACH b or more have exponent <= -KERNEL_REACH^2 / 2 and exp exactly 0:
    # only the offsets below are evaluated (the same values; the rest stay 0)
    reach = kernel_reach(b, step, m)
    half = np.exp(-0.5 * ((step * np.arange(reach)[None, :]) / b) ** 2)
    if work is None:
        k = np.zeros((rows, nfft))
    else:
        k = work.get("kernel", (rows, nfft))
        k[:, reach : nfft - reach + 1] = 0.0
    k[:, :reach] = half
    k[:, nfft - reach + 1 :] = half[:, :0:-1]

    def out(name, shape, dtype):
        return {} if work is None or not FFT_OUT else {"out": work.get(name, shape, dtype)}

    ft = np.fft.rfft(k, axis=1, **out("kernel_ft", (rows, nft), np.complex128))
    if work is None:
        spec_t = ft_t * ft
        spec_p = ft_p * ft
    else:
        spec_t = np.multiply(ft_t, ft, out=work.get("spec_t", (rows, nft), np.complex128))
        spec_p = np.multiply(ft_p, ft, out=work.get("spec_p", (rows, nft), np.complex128))
    if bounds is not None:
        # correlation kernel at index q = g + h: phi(2(lo - L) + q step) + phi(2(lo - H) + q step)
        q = step * np.arange(2 * m - 1)[None, :]
        lo = np.reshape(lo, (-1, 1))
        kr = np.zeros((b.shape[0], nfft))
        kr[:, : 2 * m - 1] = np.exp(-0.5 * ((2.0 * (lo - bounds[0]) + q) / b) ** 2) + np.exp(
            -0.5 * ((2.0 * (lo - bounds[1]) + q) / b) ** 2
        )
        ftr = np.fft.rfft(kr, axis=1)
        spec_t = spec_t + np.conj(ft_t) * ftr
        spec_p = spec_p + np.conj(ft_p) * ftr
    kt = np.fft.irfft(spec_t, nfft, axis=1, **out("kt", (rows, nfft), np.float64))[:, :m]
    kp = np.fft.irfft(spec_p, nfft, axis=1, **out("kp", (rows, nfft), np.float64))[:, :m]
    return kt, kp


class BinnedScanBatch:
    """The binned engine's scan for many classes at once, the counterpart of :class:`ExactScanBatch`.

    Each step evaluates one bandwidth for every class still searching: the classes are
    grouped by the level their bandwidth is convolved on, and each group is one batched FFT
    call (the per-class scan makes one call per class and batch of bandwidths, and many
    classes made that Python overhead). The arithmetic per (class, bandwidth) is that of
    :meth:`BinnedEngine.scan` (:func:`binned_sums` row by row).
    """

    def __init__(self, engines):
        self.engines = engines
        self.lo = np.array([e.lo for e in engines])
        self.unit = np.array([e.CELLS_PER_B * e.delta for e in engines])  # level_of's divisor
        self.work = Workspace()  # the steps' transforms, reused (see Workspace)
        self.bounds = engines[0].bounds
        self.levels = []
        for level in range(BinnedEngine.MAX_LEVEL + 1):
            lvs = [e._levels[level] for e in engines]
            self.levels.append({
                "ft_t": np.stack([lv["ft_t"] for lv in lvs]), "ft_p": np.stack([lv["ft_p"] for lv in lvs]),
                "step": np.array([lv["step"] for lv in lvs]), "cells": lvs[0]["cells"], "nfft": lvs[0]["nfft"],
            })

    def levels_of(self, rows, b) -> np.ndarray:
        """:meth:`BinnedEngine.level_of` of class ``rows[i]`` at bandwidth ``b[i]``, for all i in one pass.

        floor(log2(b / unit)) vectorised; where the log2 lies within 1e-6 of an integer (a level
        boundary: the candidates b_lo * 2^(i/4) fall on one at every 4th i) the engine's own
        level_of decides, so the levels are level_of's whatever the vectorised log2 rounds to
        there (elsewhere any log2 within 1e-6 has the same floor).
        """
        r = b / self.unit[rows]
        lg = np.log2(np.where(r > 0, r, 1.0))
        level = np.clip(np.floor(lg), 0, BinnedEngine.MAX_LEVEL).astype(np.int64)
        for i in np.flatnonzero(np.abs(lg - np.round(lg)) < 1e-6):
            level[i] = self.engines[rows[i]].level_of(b[i])
        return level

    def sign_changes(self, rows, bandwidths, at_most=None) -> np.ndarray:
        """Slope sign changes on the scan grid of class ``rows[i]`` at ``bandwidths[i]`` (always exact:
        ``at_most`` is accepted for the interface of :meth:`ExactScanBatch.sign_changes`)."""
        rows = np.asarray(rows, dtype=np.int64)
        b = np.asarray(bandwidths, dtype=np.float64)
        level = self.levels_of(rows, b)
        out = np.empty(rows.size, dtype=np.int64)
        for lvl in np.unique(level):
            sel = np.flatnonzero(level == lvl)
            r = rows[sel]
            lv = self.levels[lvl]
            # consecutive classes (the lockstep passes them in order): views of the stacked
            # transforms; others gathered into the workspace (valid rows: mode "clip" writes
            # straight into it, "raise" would buffer)
            if np.array_equal(r, np.arange(r[0], r[0] + r.size)):
                ft_t, ft_p = lv["ft_t"][r[0] : r[0] + r.size], lv["ft_p"][r[0] : r[0] + r.size]
            else:
                shape = (r.size, lv["ft_t"].shape[1])
                ft_t, ft_p = (np.take(lv[name], r, axis=0, out=self.work.get(name, shape, np.complex128), mode="clip")
                              for name in ("ft_t", "ft_p"))
            kt, kp = binned_sums(ft_t, ft_p, b[sel], lv["step"][r], lv["cells"] + 1, lv["nfft"], self.lo[r],
                                 self.bounds, self.work)
            stride = SCAN_STRIDE >> lvl
            conf, resolved = BinnedEngine._conf(kt[:, ::stride], kp[:, ::stride])
            out[sel] = count_sign_changes_rows(conf, resolved)
        return out


class BinnedEngine:
    """Linear binning onto a fine grid, then FFT convolution per bandwidth.

    The grid has FINE_CELLS + 1 points x_g = lo + g * delta over the
    support. Each weight is split between its two neighbouring grid points
    in proportion to proximity (linear binning), once. For a bandwidth b the
    kernel is sampled at every offset the grid needs (|j| <= cells, no
    truncation) and convolved with both weight sequences by FFT; the kernel
    is symmetric, so an FFT of 2 * cells points is exact (offsets +-cells
    share one slot and one value). Reflection adds a correlation with the
    kernel at 2 (x_g - limit) + offset, evaluated in the same inverse
    transform.

    Coarser levels: linear binning is hierarchical on dyadic grids (moving
    the weight of every odd point half to each even neighbour gives exactly
    the linear binning onto the grid of spacing 2 delta), so the grids of
    spacing 2^L delta, L = 0..3, cost nothing extra. A bandwidth b is
    convolved on the coarsest level with b >= 16 * 2^L delta, which keeps
    the linear-binning error bound of the finest level at b = 16 delta while
    a large b costs an FFT of 1/8 the size.
    """

    name = "binned"
    #: Coarsest level: spacing 8 delta, which is the scan grid itself.
    MAX_LEVEL = 3
    #: A bandwidth uses a level only if it spans at least this many of its cells.
    CELLS_PER_B = 16

    def __init__(self, T, F, lo, hi, bounds=None):
        self.lo, self.hi, self.bounds = lo, hi, bounds
        self.delta = (hi - lo) / FINE_CELLS
        self.x = lo + self.delta * np.arange(FINE_CELLS + 1)
        self.T, self.F = T, F
        self.scan_x = self.x[::SCAN_STRIDE]
        self._levels = []
        t, f = self.T, self.F
        for level in range(self.MAX_LEVEL + 1):
            if level:
                t, f = self._coarsen(t), self._coarsen(f)
            cells = FINE_CELLS >> level
            # 2 * cells suffices without reflection (see class docstring); with
            # it the correlation reaches offset 2 * cells, so 4 * cells.
            nfft = 2 * cells if bounds is None else 4 * cells
            step = self.delta * (1 << level)
            self._levels.append({
                "T": t, "F": f, "cells": cells, "nfft": nfft, "step": step,
                "x": lo + step * np.arange(cells + 1),
                "ft_t": np.fft.rfft(t, nfft), "ft_p": np.fft.rfft(t + f, nfft),
            })

    @staticmethod
    def _coarsen(w):
        c = w[0::2].copy()
        c[:-1] += 0.5 * w[1::2]
        c[1:] += 0.5 * w[1::2]
        return c

    def level_of(self, b) -> int:
        """The level a bandwidth is convolved on."""
        r = b / (self.CELLS_PER_B * self.delta)
        return int(np.clip(np.floor(np.log2(r)) if r > 0 else 0, 0, self.MAX_LEVEL))

    def _sums_level(self, level, bandwidths):
        """Unshifted kernel sums on the level's grid: (KT, KP), each (nb, cells + 1)."""
        lv = self._levels[level]
        return binned_sums(lv["ft_t"][None, :], lv["ft_p"][None, :], np.asarray(bandwidths, dtype=np.float64),
                           lv["step"], lv["cells"] + 1, lv["nfft"], self.lo, self.bounds)

    def _by_level(self, bandwidths):
        bs = np.atleast_1d(np.asarray(bandwidths, dtype=np.float64))
        levels = np.array([self.level_of(b) for b in bs])
        for level in np.unique(levels):
            idx = np.flatnonzero(levels == level)
            yield int(level), idx, bs[idx]

    @staticmethod
    def _conf(kt, kp):
        resolved = kp >= RESOLVED_FRACTION * kp.max(axis=1, keepdims=True)
        with np.errstate(divide="ignore", invalid="ignore"):
            conf = np.where(resolved, np.clip(kt / np.where(resolved, kp, 1.0), 0.0, 1.0), np.nan)
        return conf, resolved

    def scan(self, bandwidths):
        """Conf on the scan grid for each bandwidth: (conf, resolved), each (nb, SCAN_POINTS)."""
        nb = np.atleast_1d(bandwidths).shape[0]
        conf = np.empty((nb, SCAN_POINTS))
        res = np.empty((nb, SCAN_POINTS), dtype=bool)
        for level, idx, bs in self._by_level(bandwidths):
            kt, kp = self._sums_level(level, bs)
            stride = SCAN_STRIDE >> level
            conf[idx], res[idx] = self._conf(kt[:, ::stride], kp[:, ::stride])
        return conf, res

    def confidence_on_fine(self, b, stride: int, with_count: bool = False):
        """Conf at every ``stride``-th fine grid point; unresolved points exactly.

        With ``with_count`` also the kernel-weighted positive count there
        (sum of w_i exp(-(x - s_i)^2 / 2b^2); exact where unresolved).
        """
        level = self.level_of(b)
        kt, kp = self._sums_level(level, [b])
        st = max(stride >> level, 1)
        conf, resolved = self._conf(kt[:, ::st], kp[:, ::st])
        conf, resolved = conf[0], resolved[0]
        count = np.maximum(kp[0, ::st], 0.0)
        if not resolved.all():
            pts, t, f = self.kernel_points()
            x = self._levels[level]["x"][::st]
            num, den, shift = exact_sums(x[~resolved], pts, t, f, b, self.bounds)
            conf[~resolved] = np.clip(num / den, 0.0, 1.0)
            count[~resolved] = den * np.exp(-shift * (0.5 / (b * b)))
        return (conf, count) if with_count else conf

    def confidence(self, x, b):
        pts, t, f = self.kernel_points()
        return exact_confidence(x, pts, t, f, b, self.bounds)

    def loo_nll(self, bandwidths) -> np.ndarray:
        """Leave-one-out NLL with samples placed at grid points (linear binning).

        A sample at grid point x_g loses one unit of weight (its own kernel,
        value 1 at distance 0, plus its mirror images) from its group. Where
        what is left of the positive density is below RESOLVED_FRACTION of
        its maximum (an isolated sample: FFT round-off dominates there) the
        sample is charged the largest loss, -log(PROB_CLIP).
        """
        out = np.empty(np.atleast_1d(bandwidths).shape[0])
        for level, idx, bs in self._by_level(bandwidths):
            lv = self._levels[level]
            kt, kp = self._sums_level(level, bs)
            b = bs[:, None]
            selfk = np.ones_like(kt)
            if self.bounds is not None:
                selfk = selfk + np.exp(-2.0 * ((lv["x"] - self.bounds[0])[None, :] / b) ** 2) + np.exp(
                    -2.0 * ((lv["x"] - self.bounds[1])[None, :] / b) ** 2
                )
            floor = RESOLVED_FRACTION * kp.max(axis=1, keepdims=True)
            den = kp - selfk
            ok = den > floor
            safe = np.where(ok, den, 1.0)
            c_t = np.where(ok, (kt - selfk) / safe, 0.0)  # TP left out
            z_f = np.where(ok, (kp - kt - selfk) / safe, 0.0)  # FP left out: P(wrong)
            a = np.log(np.clip(c_t, PROB_CLIP, 1.0 - PROB_CLIP))
            z = np.log(np.clip(z_f, PROB_CLIP, 1.0 - PROB_CLIP))
            out[idx] = -(lv["T"][None, :] * a).sum(axis=1) - (lv["F"][None, :] * z).sum(axis=1)
        return out

    def kernel_points(self):
        keep = (self.T + self.F) > 0
        return self.x[keep], self.T[keep], self.F[keep]

    def resolution(self) -> float:
        """Score resolution seen on the grid: the spacing of discrete scores, else delta.

        Runs of adjacent occupied grid points are one distinct score when no
        run is longer than 2 points (a score between two grid points fills
        both); the resolution is then the smallest distance between the
        weighted centres of neighbouring runs.
        """
        occ = np.flatnonzero((self.T + self.F) > 0)
        if occ.size < 2:
            return self.delta
        starts = np.concatenate([[0], np.flatnonzero(np.diff(occ) > 1) + 1])
        if starts.size < 2 or np.diff(np.append(starts, occ.size)).max() > 2:
            return self.delta
        # weighted centre of each run (one or two points), summed in the order np.average sums
        w = (self.T + self.F)[occ]
        centres = np.add.reduceat(self.x[occ] * w, starts) / np.add.reduceat(w, starts)
        return float(np.diff(centres).min())
