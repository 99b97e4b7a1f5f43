"""The binned engine: linear binning onto a fine grid and FFT convolution, for one class or
many.

Private module of :mod:`topcal.calibrators.kde` (see ``_engine.py``).
"""

from __future__ import annotations

import math

import numpy as np

from ..._numeric import PROB_CLIP
from ._kernels import (
    FINE_CELLS,
    KERNEL_REACH,
    RESOLVED_FRACTION,
    SCAN_POINTS,
    SCAN_STRIDE,
    count_sign_changes_rows,
    exact_confidence,
    exact_sums,
)


def linear_bin(group, score, tp, fp, lo, hi, n_groups):
    """Linear binning of TP and FP weights onto each group's fine grid, in one pass.

    Row r lies on the grid of ``group[r]``: FINE_CELLS + 1 points from ``lo[group]`` to
    ``hi[group]``; its weight is split between the two neighbouring points in proportion to
    proximity. Returns T, F of shape (n_groups, FINE_CELLS + 1). Weights add up, so counts
    from several chunks (or machines) can be binned separately and summed.
    """
    m = FINE_CELLS + 1
    width = hi - lo
    inv = np.where(width > 0, FINE_CELLS / np.where(width > 0, width, 1.0), 0.0)
    # one group (the pooled reference): its scalars instead of per-row gathers; the
    # temporaries are reused in place (fresh arrays of many MB cost page faults): the same
    # values either way
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
    # i never reaches a group's last point, so the right-hand shares shift by one within the
    # group
    T = np.bincount(i, np.subtract(tp, wt, out=fr), minlength=size)
    T[1:] += np.bincount(i, wt, minlength=size)[:-1]
    F = np.bincount(i, np.subtract(fp, wf, out=fr), minlength=size)
    F[1:] += np.bincount(i, wf, minlength=size)[:-1]
    return T.reshape(n_groups, m), F.reshape(n_groups, m)


def kernel_reach(b, step, m) -> int:
    """Offsets 0 .. reach - 1 of a kernel sampled on ``m`` points of spacing ``step`` that
    can be nonzero.

    ``b`` and ``step`` are (rows, 1) or broadcastable; the reach covers every row: offsets j
    with j * step >= KERNEL_REACH * b have kernel value exp(-(j step / b)^2 / 2) = 0
    exactly.
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
        """An uninitialised C-contiguous array of ``shape`` under ``name`` (its contents are
        the caller's)."""
        need = math.prod(shape)  # Python ints: np.prod's call overhead was ~40 us a step
        a = self._arrays.get(name)
        if a is None or a.dtype != np.dtype(dtype) or a.size < need:
            a = self._arrays[name] = np.empty(need, dtype)
        return a[:need].reshape(shape)


#: numpy >= 2 lets the FFTs write into given arrays (``out=``); with older numpy they
#: allocate.
FFT_OUT = np.lib.NumpyVersion(np.__version__) >= "2.0.0"


def binned_sums(ft_t, ft_p, b, step, m, nfft, lo, bounds, work: Workspace | None = None):
    """Unshifted kernel sums on a level's grid of m points, one row per bandwidth: (KT, KP).

    ``ft_t``, ``ft_p``: rfft of the TP and positive weights, one row per bandwidth or one
    row for all; ``step`` and ``lo`` (grid spacing, support start) scalars or one per row.
    The kernel is sampled at every offset the grid needs and transformed per row (see
    :class:`BinnedEngine`), so a row's arithmetic does not depend on the other rows. With
    ``work`` the transforms are written into its arrays (the same values) and KT, KP are
    views of them, valid until the next call with the same ``work``.
    """
    b = b[:, None]
    step = np.reshape(step, (-1, 1))
    rows, nft = b.shape[0], nfft // 2 + 1
    # offsets of KERNEL_REACH b or more have exponent <= -KERNEL_REACH^2 / 2 and exp exactly
    # 0: only the offsets below are evaluated (the same values; the rest stay 0)
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
    else:  # four work arrays, not six: spec_p in place of the kernel's transform (a complex
        # product is the same float either way round), kt below in place of the kernel
        spec_t = np.multiply(ft_t, ft, out=work.get("spec_t", (rows, nft), np.complex128))
        spec_p = np.multiply(ft_p, ft, out=ft)
    if bounds is not None:
        # correlation kernel at index q = g + h: phi(2(lo - L) + q step) + phi(2(lo - H) + q
        # step)
        q = step * np.arange(2 * m - 1)[None, :]
        lo = np.reshape(lo, (-1, 1))
        kr = np.zeros((b.shape[0], nfft))
        kr[:, : 2 * m - 1] = np.exp(-0.5 * ((2.0 * (lo - bounds[0]) + q) / b) ** 2) + np.exp(
            -0.5 * ((2.0 * (lo - bounds[1]) + q) / b) ** 2
        )
        ftr = np.fft.rfft(kr, axis=1)
        spec_t = spec_t + np.conj(ft_t) * ftr
        spec_p = spec_p + np.conj(ft_p) * ftr
    kt = np.fft.irfft(spec_t, nfft, axis=1, **out("kernel", (rows, nfft), np.float64))[:, :m]
    kp = np.fft.irfft(spec_p, nfft, axis=1, **out("kp", (rows, nfft), np.float64))[:, :m]
    return kt, kp


class BinnedScanBatch:
    """The binned engine's scan for many classes at once, the counterpart of
    :class:`ExactScanBatch`.

    Each step evaluates one bandwidth for every class still searching: the classes are
    grouped by the level their bandwidth is convolved on, and each group is one batched FFT
    call (the per-class scan makes one call per class and batch of bandwidths, and many
    classes made that Python overhead). The arithmetic per (class, bandwidth) is that of
    :meth:`BinnedEngine.scan` (:func:`binned_sums` row by row).
    """

    #: Work arrays of one FFT call, at most (unless one row needs more): rows go WORK_BYTES
    #: // (nfft x BYTES_PER_POINT) per call. Once every row of a level went in one call, 6
    #: arrays of 64 KB a row on the finest level (10 classes: 3.9 MB, ~5x a 10^4 x 10
    #: input); a call of a few rows costs the same per row (the FFTs dominate).
    WORK_BYTES = 1 << 20
    #: Bytes of work arrays per FFT point and row: the kernel (then KT) and KP (8 each), the
    #: kernel's transform (then the positives' spectrum) and the TP spectrum, and the
    #: gathered ft_t, ft_p (nfft / 2 + 1 complex points each: ~8 bytes per FFT point each).
    BYTES_PER_POINT = 48

    def __init__(self, engines):
        self.engines = engines
        self.lo = np.array([e.lo for e in engines])
        self.unit = np.array([e.CELLS_PER_B * e.delta for e in engines])  # level_of's divisor
        self.work = Workspace()  # the steps' transforms, reused (see Workspace)
        self.bounds = engines[0].bounds
        # engines built together by BinnedEngine.many, in order: views of their stacked
        # transforms
        first = engines[0].stack
        rows = (
            [
                e.stack[1] if e.stack is not None and e.stack[0] is first[0] else -1
                for e in engines
            ]
            if first is not None
            else [-1]
        )
        shared = rows[0] >= 0 and rows == list(range(rows[0], rows[0] + len(engines)))
        self.levels = []
        for level in range(BinnedEngine.MAX_LEVEL + 1):
            lvs = [e._levels[level] for e in engines]
            if shared:
                stacked = first[0][level]
                ft_t, ft_p = (
                    stacked[k][rows[0] : rows[0] + len(engines)] for k in ("ft_t", "ft_p")
                )
            else:
                ft_t, ft_p = (
                    np.stack([lv["ft_t"] for lv in lvs]),
                    np.stack([lv["ft_p"] for lv in lvs]),
                )
            self.levels.append(
                {
                    "ft_t": ft_t,
                    "ft_p": ft_p,
                    "step": np.array([lv["step"] for lv in lvs]),
                    "cells": lvs[0]["cells"],
                    "nfft": lvs[0]["nfft"],
                }
            )

    def levels_of(self, rows, b) -> np.ndarray:
        """:meth:`BinnedEngine.level_of` of class ``rows[i]`` at bandwidth ``b[i]``, for all
        i in one pass.

        floor(log2(b / unit)) vectorised; where the log2 lies within 1e-6 of an integer (a
        level boundary: the candidates b_lo * 2^(i/4) fall on one at every 4th i) the
        engine's own level_of decides, so the levels are level_of's whatever the vectorised
        log2 rounds to there (elsewhere any log2 within 1e-6 has the same floor).
        """
        r = b / self.unit[rows]
        lg = np.log2(np.where(r > 0, r, 1.0))
        level = np.clip(np.floor(lg), 0, BinnedEngine.MAX_LEVEL).astype(np.int64)
        for i in np.flatnonzero(np.abs(lg - np.round(lg)) < 1e-6):
            level[i] = self.engines[rows[i]].level_of(b[i])
        return level

    def sign_changes(self, rows, bandwidths, at_most=None) -> np.ndarray:
        """Slope sign changes on the scan grid of class ``rows[i]`` at ``bandwidths[i]``
        (always exact: ``at_most`` is accepted for the interface of
        :meth:`ExactScanBatch.sign_changes`)."""
        rows = np.asarray(rows, dtype=np.int64)
        b = np.asarray(bandwidths, dtype=np.float64)
        level = self.levels_of(rows, b)
        out = np.empty(rows.size, dtype=np.int64)
        for lvl in np.unique(level):
            sel = np.flatnonzero(level == lvl)
            r = rows[sel]
            lv = self.levels[lvl]
            # a few rows per call, so the work arrays stay within WORK_BYTES (each row is
            # transformed on its own: the same values in any blocks)
            block = max(1, self.WORK_BYTES // (lv["nfft"] * self.BYTES_PER_POINT))
            for a in range(0, sel.size, block):
                s_, r_ = sel[a : a + block], r[a : a + block]
                # consecutive classes (the lockstep passes them in order): views of the
                # stacked transforms; others gathered into the workspace (valid rows: mode
                # "clip" writes straight into it, "raise" would buffer)
                if np.array_equal(r_, np.arange(r_[0], r_[0] + r_.size)):
                    ft_t, ft_p = (
                        lv["ft_t"][r_[0] : r_[0] + r_.size],
                        lv["ft_p"][r_[0] : r_[0] + r_.size],
                    )
                else:
                    shape = (r_.size, lv["ft_t"].shape[1])
                    ft_t, ft_p = (
                        np.take(
                            lv[name],
                            r_,
                            axis=0,
                            out=self.work.get(name, shape, np.complex128),
                            mode="clip",
                        )
                        for name in ("ft_t", "ft_p")
                    )
                kt, kp = binned_sums(
                    ft_t,
                    ft_p,
                    b[s_],
                    lv["step"][r_],
                    lv["cells"] + 1,
                    lv["nfft"],
                    self.lo[r_],
                    self.bounds,
                    self.work,
                )
                stride = SCAN_STRIDE >> lvl
                conf, resolved = BinnedEngine._conf(kt[:, ::stride], kp[:, ::stride])
                out[s_] = count_sign_changes_rows(conf, resolved)
        return out


class _Level(dict):
    """One level of a :class:`BinnedEngine`: its transforms, step, cells and FFT size, and,
    built on first use and kept, its grid ``"x"`` and coarsened weights ``"T"``, ``"F"``
    (used by the tables and ``loo_nll``, not by the scans: for many classes they were ~1/4
    of a lockstep batch's memory). The same values as built up front: the same operations on
    the same floats."""

    def __init__(self, lo, T, F, level, **arrays):
        super().__init__(**arrays)
        # the engine's support start and fine weights, not the engine (no reference cycle:
        # an engine is freed as soon as it is dropped)
        self._lo, self._T, self._F, self._level = lo, T, F, level

    def __missing__(self, key):
        if key == "x":
            value = self._lo + self["step"] * np.arange(self["cells"] + 1)
        elif key in ("T", "F"):
            value = self._T if key == "T" else self._F
            for _ in range(self._level):
                value = BinnedEngine._coarsen(value)
        else:
            raise KeyError(key)
        self[key] = value
        return value


class BinnedEngine:
    """Linear binning onto a fine grid, then FFT convolution per bandwidth.

    The grid has FINE_CELLS + 1 points x_g = lo + g * delta over the support. Each weight is
    split between its two neighbouring grid points in proportion to proximity (linear
    binning), once. For a bandwidth b the kernel is sampled at every offset the grid needs
    (|j| <= cells, no truncation) and convolved with both weight sequences by FFT; the
    kernel is symmetric, so an FFT of 2 * cells points is exact (offsets +-cells share one
    slot and one value). Reflection adds a correlation with the kernel at 2 (x_g - limit) +
    offset, evaluated in the same inverse transform.

    Coarser levels: linear binning is hierarchical on dyadic grids (moving the weight of
    every odd point half to each even neighbour gives exactly the linear binning onto the
    grid of spacing 2 delta), so the grids of spacing 2^L delta, L = 0..3, cost nothing
    extra. A bandwidth b is convolved on the coarsest level with b >= 16 * 2^L delta, which
    keeps the linear-binning error bound of the finest level at b = 16 delta while a large b
    costs an FFT of 1/8 the size.
    """

    name = "binned"
    #: Coarsest level: spacing 8 delta, which is the scan grid itself.
    MAX_LEVEL = 3
    #: A bandwidth uses a level only if it spans at least this many of its cells.
    CELLS_PER_B = 16

    def __init__(self, T, F, lo, hi, bounds=None, *, _stack=None):
        self.lo, self.hi, self.bounds = lo, hi, bounds
        self.delta = (hi - lo) / FINE_CELLS
        self.T, self.F = T, F
        #: (the levels' stacked arrays, this engine's row) when built by :meth:`many`
        self.stack = _stack
        if _stack is not None:
            levels, row = _stack
            self._levels = [
                _Level(
                    lo,
                    T,
                    F,
                    level,
                    cells=lv["cells"],
                    nfft=lv["nfft"],
                    ft_t=lv["ft_t"][row],
                    ft_p=lv["ft_p"][row],
                    step=self.delta * (1 << level),
                )
                for level, lv in enumerate(levels)
            ]
            return
        self._levels = [
            _Level(lo, T, F, level, **lv, step=self.delta * (1 << level))
            for level, lv in enumerate(self._level_arrays(T, F, bounds))
        ]

    @property
    def x(self) -> np.ndarray:
        """The fine grid (built when asked for: the scans do not need it)."""
        return self._levels[0]["x"]

    @property
    def scan_x(self) -> np.ndarray:
        return self.x[::SCAN_STRIDE]

    @classmethod
    def _level_arrays(cls, T, F, bounds):
        """Per level: the transforms of the coarsened weights (rows of 2-D T, F transformed
        together, each row as on its own). The coarsened weights themselves are not kept (a
        level's "T", "F" are rebuilt from the fine ones when asked for: the same values, see
        :class:`_Level`)."""
        out = []
        t, f = T, F
        for level in range(cls.MAX_LEVEL + 1):
            if level:
                t, f = cls._coarsen(t), cls._coarsen(f)
            cells = FINE_CELLS >> level
            # 2 * cells suffices without reflection (see class docstring); with it the
            # correlation reaches offset 2 * cells, so 4 * cells.
            nfft = 2 * cells if bounds is None else 4 * cells
            out.append(
                {
                    "cells": cells,
                    "nfft": nfft,
                    "ft_t": np.fft.rfft(t, nfft, axis=-1),
                    "ft_p": np.fft.rfft(t + f, nfft, axis=-1),
                }
            )
        return out

    @classmethod
    def many(cls, T, F, lo, hi, bounds=None) -> list:
        """One engine per row of the 2-D ``T``, ``F`` (supports ``lo[i]``, ``hi[i]``), their
        levels coarsened and transformed for all rows at once (the same values as one by
        one); a :class:`BinnedScanBatch` of them reads the stacked transforms without
        copying."""
        levels = cls._level_arrays(np.asarray(T), np.asarray(F), bounds)
        return [
            cls(T[i], F[i], float(lo[i]), float(hi[i]), bounds, _stack=(levels, i))
            for i in range(len(T))
        ]

    @staticmethod
    def _coarsen(w):
        c = w[..., 0::2].copy()
        c[..., :-1] += 0.5 * w[..., 1::2]
        c[..., 1:] += 0.5 * w[..., 1::2]
        return c

    def level_of(self, b) -> int:
        """The level a bandwidth is convolved on."""
        r = b / (self.CELLS_PER_B * self.delta)
        return int(np.clip(np.floor(np.log2(r)) if r > 0 else 0, 0, self.MAX_LEVEL))

    def _sums_level(self, level, bandwidths):
        """Unshifted kernel sums on the level's grid: (KT, KP), each (nb, cells + 1)."""
        lv = self._levels[level]
        return binned_sums(
            lv["ft_t"][None, :],
            lv["ft_p"][None, :],
            np.asarray(bandwidths, dtype=np.float64),
            lv["step"],
            lv["cells"] + 1,
            lv["nfft"],
            self.lo,
            self.bounds,
        )

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
            conf = np.where(
                resolved, np.clip(kt / np.where(resolved, kp, 1.0), 0.0, 1.0), np.nan
            )
        return conf, resolved

    def scan(self, bandwidths):
        """Conf on the scan grid for each bandwidth: (conf, resolved), each (nb,
        SCAN_POINTS)."""
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

        With ``with_count`` also the kernel-weighted positive count there (sum of w_i
        exp(-(x - s_i)^2 / 2b^2); exact where unresolved).
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

        A sample at grid point x_g loses one unit of weight (its own kernel, value 1 at
        distance 0, plus its mirror images) from its group. Where what is left of the
        positive density is below RESOLVED_FRACTION of its maximum (an isolated sample: FFT
        round-off dominates there) the sample is charged the largest loss, -log(PROB_CLIP).
        """
        out = np.empty(np.atleast_1d(bandwidths).shape[0])
        for level, idx, bs in self._by_level(bandwidths):
            lv = self._levels[level]
            kt, kp = self._sums_level(level, bs)
            b = bs[:, None]
            selfk = np.ones_like(kt)
            if self.bounds is not None:
                selfk = (
                    selfk
                    + np.exp(-2.0 * ((lv["x"] - self.bounds[0])[None, :] / b) ** 2)
                    + np.exp(-2.0 * ((lv["x"] - self.bounds[1])[None, :] / b) ** 2)
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

        Runs of adjacent occupied grid points are one distinct score when no run is longer
        than 2 points (a score between two grid points fills both); the resolution is then
        the smallest distance between the weighted centres of neighbouring runs.
        """
        occ = np.flatnonzero((self.T + self.F) > 0)
        if occ.size < 2:
            return self.delta
        starts = np.concatenate([[0], np.flatnonzero(np.diff(occ) > 1) + 1])
        if starts.size < 2 or np.diff(np.append(starts, occ.size)).max() > 2:
            return self.delta
        # weighted centre of each run (one or two points), summed in the order np.average
        # sums
        w = (self.T + self.F)[occ]
        centres = np.add.reduceat(self.x[occ] * w, starts) / np.add.reduceat(w, starts)
        return float(np.diff(centres).min())
