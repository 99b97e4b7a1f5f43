"""The exact engine: every kernel summed (after merging equal scores), for one class or many
in lockstep.

Private module of :mod:`topcal.calibrators.kde` (see ``_engine.py``).
"""

from __future__ import annotations

import numpy as np

from ..._numeric import PROB_CLIP
from ._kernels import (
    BOUND_STRIDE,
    CACHE_ELEMENTS,
    CHUNK_ELEMENTS,
    EXP_FLOOR,
    RESOLVED_FRACTION,
    SCAN_POINTS,
    SLOPE_TOL,
    count_alternations,
    count_sign_changes_rows,
    exact_confidence,
    exact_sums,
    loo_confidences,
    loss_rows,
    reflect_points,
)


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
        """Shifted squared distances (scan point x centre) and the shifts: they do not
        depend on b.

        exact_sums recomputes them per bandwidth; a scan evaluates dozens of bandwidths, and
        for small classes these passes were most of the cost.
        """
        if self._scan_d2 is None:
            self._scan_d2 = self.scan_terms()
        return self._scan_d2

    def scan_terms(self):
        """(shifted squared distances scan point x centre, shifts, TP weights, weights), not
        cached."""
        p, t, f = reflect_points(self.points, self.tp, self.fp, self.bounds)
        w = t + f
        p, t, w = p[w > 0], t[w > 0], w[w > 0]
        d2 = np.subtract(self.scan_x[:, None], p[None, :])
        np.square(d2, out=d2)
        m = d2.min(axis=1)
        d2 -= m[:, None]  # in place: the same values as a fresh array
        return d2, m, t, w

    def cacheable(self) -> bool:
        """Whether the scan keeps the distance matrix (else it goes one bandwidth at a
        time)."""
        return self.points.size * SCAN_POINTS <= CHUNK_ELEMENTS

    def scan(self, bandwidths):
        """Conf on the scan grid for each bandwidth: (conf, resolved), each (nb,
        SCAN_POINTS)."""
        bs = np.atleast_1d(np.asarray(bandwidths, dtype=np.float64))
        # too big to cache, or one bandwidth and no cache yet (kde's fixed b, a rule's final
        # count): one bandwidth at a time, in exact_sums' cache-sized blocks. The same
        # values as from the cache: the same operations on the same floats (the shift is the
        # same float, see nearest_sq_distance; the floor only where it changes an exponent),
        # and one product over all 513 points either way
        one_chunk = (
            SCAN_POINTS * (1 if self.bounds is None else 3) * self.points.size
            <= CHUNK_ELEMENTS
        )
        if not self.cacheable() or (bs.size == 1 and self._scan_d2 is None and one_chunk):
            confs, res = [], []
            for b in bs:
                num, den, shift = exact_sums(
                    self.scan_x, self.points, self.tp, self.fp, b, self.bounds
                )
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
        """The bandwidth-free terms of :meth:`loo_nll` (also stacked by
        :class:`ExactLooBatch`).

        ``dd``: squared distances sample x centre (mirror images included) minus the
        sample's smallest one to another centre (``m``), inf at the sample's own centres
        (``self_i``, ``self_j``); ``weights``: TP, FP and positive weight per centre;
        ``log_*_rest``: log of what the left-out sample's own place keeps; ``q_lo``,
        ``q_hi``: -4 (s - limit)^2 for the mirror images of the own kernel (None without
        reflection); ``dd_max``: the largest finite ``dd``.
        """
        p, t, f = self.points, self.tp, self.fp
        n = p.size
        pa, ta, fa = reflect_points(p, t, f, self.bounds)
        copies = 1 if self.bounds is None else 3
        # one (samples x centres) array, transformed in place (the same values as fresh
        # arrays)
        dd = np.subtract(p[:, None], pa[None, :])
        np.square(dd, out=dd)
        self_i = np.tile(np.arange(n), copies)
        self_j = np.arange(copies * n)
        order = np.lexsort(
            (self_j, self_i)
        )  # row-major order, as np.nonzero of the self mask gives
        self_i, self_j = self_i[order], self_j[order]
        dd[self_i, self_j] = np.inf
        m = dd.min(axis=1)  # finite: a class here has >= 2 distinct scores
        dd -= m[:, None]
        u_t, u_f = np.minimum(t, 1.0), np.minimum(f, 1.0)
        with np.errstate(divide="ignore"):
            rest = {
                # TP left out: TP keeps t - u_t at its own place
                "log_t_rest": np.log(t - u_t),
                "log_p_rest_t": np.log(t + f - u_t),
                "log_f_rest": np.log(f - u_f),  # FP left out: probability it is wrong = FP / P
                "log_p_rest_f": np.log(t + f - u_f),
            }
        dd[self_i, self_j] = 0.0  # the largest finite entry (every other one is >= 0)
        dd_max = float(dd.max())
        dd[self_i, self_j] = np.inf
        q_lo = q_hi = None
        if self.bounds is not None:
            q_lo = -4.0 * (p - self.bounds[0]) ** 2
            q_hi = -4.0 * (p - self.bounds[1]) ** 2
        return {
            "dd": dd,
            "m": m,
            "self_i": self_i,
            "self_j": self_j,
            "weights": np.stack([ta, fa, ta + fa], axis=1),  # (centres, 3)
            "dd_max": dd_max,
            "q_lo": q_lo,
            "q_hi": q_hi,
            **rest,
        }

    def loo_nll(self, bandwidths) -> np.ndarray:
        """Leave-one-out top-label NLL (summed over the class) per bandwidth.

        Each sample's own kernel (and its mirror images) is removed from its own group's
        sum: one unit of weight, or the whole weight when it is below 1. All bandwidths are
        evaluated together, as (bandwidth x sample x centre) arrays in chunks of bandwidths
        that stay below the engine's memory chunk (the same arithmetic per bandwidth as one
        at a time; small classes are many cheap evaluations, so the number of calls, not the
        arithmetic, was their cost).
        """
        t, f = self.tp, self.fp
        if self._loo is None:
            self._loo = self.loo_terms()
        lt = self._loo
        dd, m = lt["dd"], lt["m"]
        bs = np.atleast_1d(np.asarray(bandwidths, dtype=np.float64))
        out = np.empty(bs.size)
        # chunks of bandwidths as large as CHUNK_ELEMENTS allows (the per-sample passes and
        # the sum over samples, one product each: see exact_sums); the kernel terms a few
        # bandwidths at a time in one cache-sized buffer (or one bandwidth's), each block's
        # weighted sums one batched product: a batched product is one product per bandwidth,
        # so the sums are those of the whole chunk at once, bit for bit (and the buffer is
        # not 32 MB)
        step = max(1, CHUNK_ELEMENTS // max(dd.size, 1))
        sub = max(1, CACHE_ELEMENTS // max(dd.size, 1))
        buf = np.empty((min(sub, bs.size),) + dd.shape)
        for a in range(0, bs.size, step):
            b = bs[a : a + step]
            inv = 0.5 / (b * b)
            sums = _loo_sums(lt, inv, buf, sub)
            out[a : a + b.size] = loss_rows(
                *loo_confidences(sums, m[None, :], inv[:, None], lt), t, f
            )
        return out

    def kernel_points(self):
        return self.points, self.tp, self.fp


def _loo_sums(lt, inv, buf, sub) -> np.ndarray:
    """The leave-one-out kernel sums (nb, n, 3) at bandwidths with 1 / 2b^2 = ``inv``: other
    centres only, shifted; ``sub`` bandwidths at a time in ``buf``."""
    dd, weights = lt["dd"], lt["weights"]
    # the exponent floor changes only exponents below it: skipped for bandwidths where the
    # largest finite one stays above (the left-out entries are -inf, exp 0, zeroed below)
    dd_max = lt["dd_max"]
    self_i, self_j = lt["self_i"], lt["self_j"]
    sums = np.empty((inv.size, dd.shape[0], 3))
    for c in range(0, inv.size, sub):
        part = buf[: min(sub, inv.size - c)]
        # dd x (-1 / 2b^2): the same product as (-dd) x (1 / 2b^2), negation being exact
        np.multiply(dd[None, :, :], -inv[c : c + sub, None, None], out=part)
        if dd_max * inv[c : c + sub].max() > -EXP_FLOOR:
            np.maximum(part, EXP_FLOOR, out=part)
        np.exp(part, out=part)
        part[:, self_i, self_j] = 0.0  # the sample's own kernel (and mirrors) left out
        np.matmul(part, weights, out=sums[c : c + part.shape[0]])
    return sums


class ExactScanBatch:
    """The exact engine's scan for many classes at once: one array program per step.

    Small classes make the scan a long series of small evaluations whose cost was mostly
    Python overhead. Here the bandwidth-free terms of every class (shifted squared distances
    from the 513 scan points to its kernel centres, as :meth:`ExactEngine.scan` caches them)
    are padded to one width and stacked, so one call evaluates one bandwidth for each of any
    subset of the classes. The arithmetic per (class, bandwidth) is that of
    :meth:`ExactEngine.scan` (the padded centres have weight 0 and kernel value exactly 0);
    only the order of the two weighted sums may differ (a batched matrix product), by
    round-off (~1e-16 relative).
    """

    def __init__(self, engines):
        # the width (centres with weight, mirrors included) before the terms, so each
        # class's terms are built straight into the stacked array, one class at a time (not
        # all classes' terms and then their stacked copy: twice the memory)
        copies = 1 if engines[0].bounds is None else 3
        width = max(copies * int(np.count_nonzero(e.tp + e.fp > 0)) for e in engines)
        c = len(engines)
        # padded centres: distance 0 and weight 0, so their terms are exactly 0 in both sums
        self.dd = np.zeros((c, SCAN_POINTS, width))
        self.shift = np.empty((c, SCAN_POINTS))
        self.tw = np.zeros((c, width, 2))
        #: largest shifted squared distance per class: the exponent floor is needed only
        #: where it times 1 / 2b^2 exceeds -EXP_FLOOR (elsewhere max(e, EXP_FLOOR) is e)
        self.dd_max = np.zeros(c)
        for i, e in enumerate(engines):
            dd, m, t, w = e.scan_terms()
            p = dd.shape[1]
            self.dd[i, :, :p] = dd
            self.shift[i] = m
            self.tw[i, :p, 0] = t
            self.tw[i, :p, 1] = w
            self.dd_max[i] = dd.max()
        # the coarse scan grid of the lower bound (every BOUND_STRIDE-th scan point)
        self.dd_coarse = np.ascontiguousarray(self.dd[:, ::BOUND_STRIDE])
        self.shift_coarse = np.ascontiguousarray(self.shift[:, ::BOUND_STRIDE])
        # log of the total weight: no kernel sum exceeds it, so log_kp >= log_total +
        # log(RESOLVED_FRACTION) makes a point resolved whatever the maximum over the grid
        # is
        self.log_total = np.log(self.tw[:, :, 1].sum(axis=1))

    #: Grouping slack (elements): classes up to 4 centres wider than a group's first join
    #: it.
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
        """A lower bound of each row's sign-change count from every BOUND_STRIDE-th scan
        point.

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
        # last sure point at or before each point
        idx = np.where(idx >= 0, idx, first[:, None])
        d = np.diff(np.take_along_axis(conf, idx, axis=1), axis=1)
        gap = (
            cols[1:][None, :] - idx[:, :-1]
        ) * BOUND_STRIDE  # scan steps back to the previous sure point
        s = np.sign(d)
        s[np.abs(d) <= gap * SLOPE_TOL * (1.0 + 1e-6) + 1e-12] = (
            0.0  # not certain (or not a sure point: d = 0)
        )
        s[~sure.any(axis=1)] = 0.0
        return count_alternations(s)

    def _sums(self, rows, b, dd_all, shift_all):
        """Shifted kernel sums (num, den) and log kernel sum of the positives on the given
        points."""
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
    """The exact engine's leave-one-out NLL for many classes at once, bit for bit that of
    each class.

    The counterpart of :class:`ExactScanBatch` for b_opt: one call evaluates any list of
    (class, bandwidth) pairs, so a lockstep search makes a few calls in all instead of a few
    per class (for small classes the per-call overhead of :meth:`ExactEngine.loo_nll`, ~0.1
    ms, was most of their cost). The kernel terms of the pairs are laid out one after
    another in one flat buffer (no padding: each class's block has its own shape) and the
    elementwise passes (scale, exponent floor, exp) run over cache-sized stretches of it,
    spanning many small classes; the per-sample passes run over one (pairs x samples) array
    padded to the widest class. The arithmetic per pair is that of
    :meth:`ExactEngine.loo_nll`, in the same order: the exponent floor is applied to a
    stretch where some pair in it needs it (it changes no exponent of a pair that
    ``loo_nll`` leaves unfloored), and the two reductions whose round-off depends on how
    they are called (the weighted sums over centres, the sum over samples) are called per
    class with the shapes ``loo_nll`` gives them. Bit for bit matters: b_opt's refinement
    re-evaluates the best point so far (the middle of its new bracket, up to round-off), so
    its decisions hang on the last bit of the loss.
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
        names = ("log_t_rest", "log_p_rest_t", "log_f_rest", "log_p_rest_f") + (
            ("q_lo", "q_hi") if reflect else ()
        )
        # padded samples: finite logs (kernel sums set to 1 below, rests 0); they are never
        # summed
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
        return copies * engine.points.size**2

    #: Largest kernel block (elements) of a class the batch takes: beyond it (~256 distinct
    #: scores) a class's own loo_nll is all arithmetic, which batching does not change
    #: (measured: no gain), and keeping its terms would only raise the peak memory.
    MAX_BLOCK = 65_536

    #: Elements of the flat buffer of kernel terms (1 MB; 8 MB once, ~10x a 10^4 x 10 input:
    #: more buys nothing, exp runs over cache-sized stretches of it).
    LOO_FLAT_ELEMENTS = CACHE_ELEMENTS

    @staticmethod
    def accepts(engine) -> bool:
        """Whether a class joins a batch: a small one (see MAX_BLOCK); the others go one by
        one."""
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
        # log P(correct) of each TP left out, log P(wrong) of each FP
        la = np.empty((rows.size, n_max))
        lz = np.empty((rows.size, n_max))
        need = sum(
            self.shape[int(rows[g0])][0] * self.shape[int(rows[g0])][1] * (g1 - g0)
            for g0, g1 in runs
        )
        # LOO_FLAT_ELEMENTS (or less if less is needed), but room for any one piece below
        # (at most CACHE_ELEMENTS or one class's block); the values do not depend on its
        # size (each pair's arithmetic is its own)
        flat = np.empty(
            max(
                min(self.LOO_FLAT_ELEMENTS, need),
                min(CACHE_ELEMENTS, need),
                max(n * w for n, w in self.shape),
            )
        )
        buf = _LooBuffer(self, flat, rows, inv, la, lz)
        for g0, g1 in runs:
            i = int(rows[g0])
            n, w = self.shape[i]
            sub = max(1, CACHE_ELEMENTS // (n * w))  # loo_nll's elementwise blocks
            for a in range(g0, g1, sub):
                buf.push(i, a, min(a + sub, g1))
        buf.finish()
        out = np.empty(rows.size)
        for g0, g1 in runs:
            i = int(rows[g0])
            n, w = self.shape[i]
            a, z = self.t[i] > 0, self.f[i] > 0
            ta, fz = self.t[i][a], self.f[i][z]
            # loo_nll's chunks: one sum over samples each
            chunk = max(1, CHUNK_ELEMENTS // (n * w))
            for s in range(g0, g1, chunk):
                e = min(s + chunk, g1)
                out[s:e] = -(la[s:e, :n][:, a] @ ta) - (lz[s:e, :n][:, z] @ fz)
        return out


class _LooBuffer:
    """The kernel terms of :meth:`ExactLooBatch.loo_nll`'s (class, bandwidth) pairs in one
    flat buffer: scaled as pushed, through exp a cache-sized stretch at a time, and through
    the weighted sums and the per-sample passes when the buffer is full (:meth:`finish`),
    the logs of the left-out confidences written into ``la`` and ``lz``."""

    def __init__(self, batch, flat, rows, inv, la, lz):
        self.batch, self.flat, self.rows, self.inv, self.la, self.lz = (
            batch,
            flat,
            rows,
            inv,
            la,
            lz,
        )
        # (first pair, end pair, class, view) scaled, not yet through exp and the product
        self.pending = []
        self.pos = self.done = 0  # end of the filled buffer; end of the part through exp
        self.floor = False  # whether some exponent not yet through exp is below EXP_FLOOR

    def push(self, i, a, z):
        """Scale class ``i``'s terms at the bandwidths of pairs a..z-1 into the buffer."""
        b = self.batch
        n, w = b.shape[i]
        size = (z - a) * n * w
        if self.pos + size > self.flat.size:
            self.finish()
            self.pos = self.done = 0
            self.floor = False
        elif self.pos > self.done and self.pos - self.done + size > CACHE_ELEMENTS:
            self._to_exp()  # keep the stretch in cache
            self.done, self.floor = self.pos, False
        view = self.flat[self.pos : self.pos + size].reshape(z - a, n, w)
        np.multiply(b.neg[i][None, :, :], self.inv[a:z, None, None], out=view)
        self.pending.append((a, z, i, view))
        self.pos += size
        self.floor = self.floor or b.dd_max[i] * self.inv[a:z].max() > -EXP_FLOOR

    def _to_exp(self):
        # as loo_nll: the floor only where some exponent needs it (elsewhere it is the
        # identity)
        part = self.flat[self.done : self.pos]
        if self.floor:
            np.maximum(part, EXP_FLOOR, out=part)
        np.exp(part, out=part)

    def finish(self):
        b, pending = self.batch, self.pending
        self._to_exp()
        p0, p1 = pending[0][0], pending[-1][1]
        n_max = b.m.shape[1]
        sums = np.ones((p1 - p0, n_max, 3))  # padded samples: finite logs, never summed
        for g0, g1, i, view in pending:
            si, sj = b.self_ij[i]
            view[:, si, sj] = 0.0  # the sample's own kernel (and mirrors) left out
            sums[g0 - p0 : g1 - p0, : view.shape[1]] = np.matmul(view, b.weights[i])
        pending.clear()
        # the per-sample passes for the pairs of this buffer (arrays of a few MB at most)
        r = self.rows[p0:p1]
        lt = {name: v[r] for name, v in b.rest.items()}
        lt.setdefault("q_lo", None)
        c_t, c_f = loo_confidences(sums, b.m[r], self.inv[p0:p1, None], lt)
        # loss_rows: the clip and log elementwise, the sums over samples per class below
        np.log(np.clip(c_t, PROB_CLIP, 1.0 - PROB_CLIP), out=self.la[p0:p1])
        np.log(np.clip(c_f, PROB_CLIP, 1.0 - PROB_CLIP), out=self.lz[p0:p1])
