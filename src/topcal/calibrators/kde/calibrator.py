"""Kernel-density-ratio calibration, Conf_KDE (paper sections 5, 6 and 12).

For predicted class k with positives split into true positives (TP) and false positives
(FP), with weights t_i and f_i (1/0 per sample, counts for binned data),

    Conf_KDE(S) = sum_TP t_i phi_b(S - s_i) / (sum_TP t_i phi_b(S - s_i) + sum_FP f_j
    phi_b(S - s_j)),

phi_b the Gaussian kernel with **one bandwidth b for TP and FP** (the paper's eq. 8 sums
over TP in K_FP: a typo). With one b this is the Nadaraya-Watson regression of correctness
on the score; it is computed with a shift in the exponent (log-sum-exp), so it is defined
where both sums underflow.

Bandwidth rules (``kde``: fixed or a rule of thumb; ``kde-mon``, ``kde-mon2``, ``kde-mon4``:
the smallest b with at most 0, 2, 4 slope sign changes; ``kde-opt``: leave-one-out NLL), the
two engines, the prediction tables, the held value outside the support, degenerate classes
and NaN as "no bandwidth" (null in JSON) are described in docs/kde.md.

The registered estimators (one small class per bandwidth rule) are in ``methods.py``; what
they share is :class:`KDEBase` here: the batched fit of every class (support, engine choice,
lockstep scans: :func:`~.fitting.fit_all_classes`, in ``fitting.py``), the prediction
tables, ``densities``, persistence and ``describe``, (the bare formula ``kde_confidence`` is
in ``formula.py``). The bandwidth rules and scans live in ``_rules``, the kernel sums and
FFTs in ``_engine``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..._params import NoneOr, Options
from ...errors import ParameterError
from . import _engine as eng
from ._compact import CENTRES_MAX, COMPACT_TOLERANCE, TABLE_TOLERANCE
from ._kernels import FINE_CELLS
from ._states import compact_states, drop_tables, dump_state, load_state
from ._tables import GridTables, interp_tables, layout, wide_bandwidth_tables
from ..base import to_jsonable
from ..score import ScoreCalibrator
from ..shrinkage import ShrinkageConstraint
from .fitting import Bandwidth, BandwidthWarning, fit_all_classes, warn_fit

__all__ = [
    "KDEBase",
    "BandwidthWarning",
    "count_sign_changes",
    "TABLE_TOLERANCE",
    "COMPACT_TOLERANCE",
    "CENTRES_MAX",
]

count_sign_changes = eng.count_sign_changes

#: Smallest fixed bandwidth accepted, as a share of the score range width: a kernel far
#: narrower than any gap between scores only reproduces the data points, and below ~1e-154
#: its b * b underflows to 0.
MIN_BANDWIDTH_SHARE = 1e-9

_SQRT_2PI = float(np.sqrt(2.0 * np.pi))


def _json_bandwidth(b: float):
    """A bandwidth for JSON: NO_BANDWIDTH (NaN) becomes null."""
    return None if np.isnan(b) else b


class KDEBase(ScoreCalibrator):
    """Shared fitting, prediction table and persistence of the KDE rules (the fit:
    :func:`~.fitting.fit_all_classes`)."""

    #: How each class's bandwidth is chosen: an entry of ``_rules.SELECTION_RULES``
    #: (kde-mon*, kde-opt); ``kde`` takes a fixed one instead (see :meth:`_bandwidth`).
    _bandwidth_rule: Any = None

    _parameter_constraints = {
        "engine": Options(("auto", "exact", "binned")),
        "boundary": NoneOr(Options(("reflect",))),
        "shrinkage": ShrinkageConstraint(),
    }
    shrinkable = True
    tier = 2  # per-class curves, shrunk toward the pooled one by default
    #: Search the classes' bandwidths together, in lockstep (see _rules.scan_mon_lockstep,
    #: scan_opt_lockstep); False searches them one by one (the same result up to round-off;
    #: for tests and benchmarks).
    batch_classes = True

    def __init__(self, *, engine: str = "auto", boundary: str | None = None, shrinkage="auto"):
        self.engine = engine
        self.boundary = boundary
        self.shrinkage = shrinkage

    #: Store each class's table compactly once fitted (``_compact.py``, docs/kde.md,
    #: "Persistence"): binned-engine classes at knots, exact-engine ones as their kernel
    #: centres. False keeps the full tables and centres of every class (the layout of older
    #: files; for tests and benchmarks).
    compact = True

    # ----------------------------------------------------------------- fit
    def _fit_all_classes(self, data):
        """The classes' fits (:func:`~.fitting.fit_all_classes`; warned of by
        :func:`~.fitting.warn_fit` where a rule chose the bandwidths), binned-engine classes'
        tables at knots (before the pseudo-counts are chosen, so they are chosen on the
        curves kept)."""
        bandwidth = self._bandwidth()
        states, support = fit_all_classes(
            data,
            self.n_tp_,
            self.n_fp_,
            bandwidth=bandwidth,
            engine=self.engine,
            bounds=self._bounds(),
            batch=self.batch_classes,
        )
        if bandwidth.rule is not None:  # a fixed bandwidth has nothing to choose
            warn_fit(states, self.name, self.classes_, bandwidth.rule, self.shrinkage != 0)
        if self.compact:
            states = compact_states(
                states, self._count_scale, self.WIDE_BANDWIDTH_SD, self._bounds()
            )
        return states, support

    def _bandwidth(self) -> Bandwidth:
        """How this model chooses each class's bandwidth: by its rule (``kde`` overrides
        this with its fixed bandwidth)."""
        return Bandwidth(self._bandwidth_rule)

    def _bounds(self):  # the reflection limits, or None
        return tuple(self.score_range_) if self.boundary == "reflect" else None

    def _fit_reference(self, pooled, data):
        """The pooled reference (ScoreCalibrator's), its tables stored as this model's are."""
        ref = type(self)(**{**self.get_params(), "shrinkage": 0})
        ref.compact = self.compact
        return ref.fit(pooled, keep="model")

    def _fit(self, data) -> None:
        """ScoreCalibrator's fit; then the exact-engine classes' full tables are dropped
        (their values are computed again where needed, the same up to round-off), unless
        this fit is a scratch one (a fold's: predicted once, then dropped)."""
        super()._fit(data)
        if self.compact and not self._scratch:
            self.class_state_ = drop_tables(self.class_state_)
            self._index_states()

    # ------------------------------------------------------------- predict
    def _index_states(self) -> None:
        """Index every class's table for vectorised prediction
        (:class:`~._tables.GridTables`); set bandwidth_ (after fit and load)."""
        self._grid = GridTables(self.class_state_, self._bounds())
        self._centres = np.array([kind == "centres" for kind in self._grid.kind], dtype=bool)
        self.bandwidth_ = np.array(
            [np.nan if st is None else st["bandwidth"] for st in self.class_state_]
        )
        # the interval's wide-bandwidth tables, built on first use (_wide_terms)
        self._wide = None

    def _interp(self, k, score, with_count: bool = False):
        """Each score's value in its class's table (and the count with ``with_count``):
        linear between the table's grid points, whose values are stored (full or at knots)
        or computed from the class's kernel centres
        (:meth:`~._tables.GridTables.centre_values`). ``k``, ``score`` arrays of one shape,
        or ``k`` one class."""
        g = self._grid
        s = np.asarray(score, dtype=np.float64)
        i, frac = g.cells(k, s)
        if np.ndim(k) == 0:
            if self._centres[k]:
                return self._grid.centre_values(np.full(s.shape, k), i, frac, with_count)
            return g.values(k, i, frac, with_count)
        cen = self._centres[k]
        if not cen.any():
            return g.values(k, i, frac, with_count)
        if cen.all():
            return self._grid.centre_values(k, i, frac, with_count)
        rest = ~cen
        parts = (
            self._grid.centre_values(k[cen], i[cen], frac[cen], with_count),
            g.values(k[rest], i[rest], frac[rest], with_count),
        )
        out = []
        for a, b in zip(*(p if with_count else (p,) for p in parts)):
            v = np.empty(s.shape)
            v[cen], v[rest] = a, b
            out.append(v)
        return tuple(out) if with_count else out[0]

    def _local_counts(self, k: int, score: np.ndarray):
        # one class: its table's scalars, not a per-row class array and gathers (the same
        # values)
        s = np.asarray(score, dtype=np.float64)
        c, n = self._interp(int(k), s, with_count=True)
        return c * n, n

    def _local_counts_rows(self, pred, score):
        s = np.asarray(score, dtype=np.float64)
        c, n = self._interp(pred, s, with_count=True)
        none = [k for k, st in enumerate(self.class_state_) if st is None]
        if none:  # no state: no counts (their rows are not scored by _fit_shrinkage)
            empty = np.isin(pred, none)
            c[empty], n[empty] = 0.0, 0.0
        return c * n, n

    #: Effective sample size per unit of the kernel-weighted count: (sum w)^2 / sum w^2 for
    #: Gaussian weights w over locally even scores is sqrt(2) sum w (docs/intervals.md).
    _count_scale = float(np.sqrt(2.0))
    #: A bandwidth at least this multiple of the class's score standard deviation spans the
    #: class: there the interval's small-bandwidth approximations (the sqrt(2) count scale,
    #: the Taylor bias) are replaced by the exact effective sample size and the local-linear
    #: bias (:meth:`_wide_terms`).
    WIDE_BANDWIDTH_SD = 1.0

    def _wide_terms(self, pred, score):
        """(effective sample size per count unit, extra bias) of every row: sqrt(2) and 0,
        except in classes with a wide bandwidth (``WIDE_BANDWIDTH_SD``), where they are the
        kernel's exact (sum w)^2 / sum w^2 and |Nadaraya-Watson - local linear| at the
        class's own bandwidth (the smoothing bias that the flattened curve's derivatives
        miss; docs/intervals.md). Computed from the stored kernel centres once per model on
        a grid of spacing b / 8 (<= 513 points) over each such class's table, and
        interpolated (held outside it, as the curve is)."""
        if getattr(self, "_wide", None) is None:
            bounds = tuple(self.score_range_) if self.boundary == "reflect" else None
            self._wide = wide_bandwidth_tables(
                self.class_state_, self._count_scale, self.WIDE_BANDWIDTH_SD, bounds
            )
        r, x, off, lo, hi, inv, nm1 = self._wide
        return interp_tables(
            r,
            x,
            off[pred],
            lo[pred],
            hi[pred],
            inv[pred],
            nm1[pred],
            np.asarray(score, dtype=np.float64),
        )

    def _interval_scale(self, pred, score):
        return self._wide_terms(pred, score)[0]

    def _interval_bias(self, pred, score):
        """Smoothing bias of Nadaraya-Watson, (b^2 / 2) (Conf'' + 2 Conf' f' / f) (Wand &
        Jones 1995, sec. 5.4), with Conf and the score density f (the kernel-weighted count)
        differentiated on the fitted curve and table at steps of b / 2; in classes with a
        wide bandwidth plus
        |Nadaraya-Watson - local linear| (:meth:`_wide_terms`)."""
        b = self.bandwidth_[pred]
        ok = np.isfinite(b)
        bias = np.zeros(score.shape[0])
        if not ok.any():
            return bias
        p, s, h = pred[ok], score[ok], 0.5 * b[ok]
        c0, c_up, c_dn = (self._curve_rows(p, s + d) for d in (0.0, h, -h))
        n_up = self._interp(p, s + h, with_count=True)[1]
        n_dn = self._interp(p, s - h, with_count=True)[1]
        n0 = self._interp(p, s, with_count=True)[1]
        d1 = (c_up - c_dn) / (2 * h)
        d2 = (c_up - 2 * c0 + c_dn) / (h * h)
        with np.errstate(divide="ignore", invalid="ignore"):
            dlogf = np.where(n0 > 0, (n_up - n_dn) / (2 * h * n0), 0.0)
        # 0 x inf where f vanishes: nan_to_num
        with np.errstate(over="ignore", invalid="ignore"):
            taylor = np.abs(np.nan_to_num(0.5 * b[ok] ** 2 * (d2 + 2 * d1 * dlogf)))
        bias[ok] = taylor + self._wide_terms(p, s)[1]
        return bias

    def _counts_stored(self) -> bool:
        return self._grid.has_counts

    def _count_cells(self, pred, score):
        """Cells of the classes' table grids (Conf and the count are linear in the score
        within one), numbered across all classes."""
        i, _ = self._grid.cells(0 if len(self.classes_) == 1 else pred, score)
        i += self._grid.grid_off[0 if len(self.classes_) == 1 else pred]
        return i, self._grid.n_grid

    def _predict_rows(self, pred: np.ndarray, score: np.ndarray) -> np.ndarray:
        """Every row in one pass over the tables (the batched-predict hook)."""
        out = self._interp(pred, np.asarray(score, dtype=np.float64))
        none = [k for k, st in enumerate(self.class_state_) if st is None]
        if none:
            rows = np.isin(pred, none)
            if rows.any():
                out[rows] = self._uncalibrated(score[rows])
        return out

    def _predict_scores(self, k: int, score: np.ndarray) -> np.ndarray:
        """Conf_k at ``score`` (``curve``): the class's table, as :meth:`_predict_rows`
        reads it."""
        if self._shrunk() or self.class_state_[k] is None:
            return super()._predict_scores(k, score)
        return self._interp(int(k), np.asarray(score, dtype=np.float64))

    # -------------------------------------------------------------- extras
    def densities(self, k, score) -> tuple[np.ndarray, np.ndarray]:
        """The smoothed weighted sums of class ``k`` at ``score`` (paper Fig. 5).

        Returns ``(sum_TP t_i phi_b(S - s_i), sum_FP f_j phi_b(S - s_j))`` with phi_b the
        normalised Gaussian density of standard deviation b, i.e.
        |TP| K_TP(S) and |FP| K_FP(S) in the paper's notation (each integrates
        to the group's weight, less what falls outside a hard limit unless
        ``boundary="reflect"``). Not held constant outside the support. For the binned
        engine the kernel centres are the fine grid points with their linearly binned
        weights.

        Raises
        ------
        TopcalError
            For an unknown class, or a class without a bandwidth (no positives, or a
            degenerate class: only TP, only FP, one score).
        """
        self._check_fitted()
        i = self._class_index(k)
        st = self.class_state_[i]
        if st is None or np.isnan(st["bandwidth"]) or st["degenerate"] is not None:
            raise ParameterError(
                f"{self.name}: class {self.classes_[i]!r} has no fitted bandwidth "
                "(no positives, or a degenerate class); its densities are not defined"
            )
        b = st["bandwidth"]
        x = np.atleast_1d(np.asarray(score, dtype=np.float64))
        if layout(st) == "knots":  # from the table: outside it, a kernel at its end
            inside = np.clip(x, st["table_lo"], st["table_hi"])
            c, n = self._interp(i, inside, with_count=True)
            n = n * np.exp(-0.5 * ((x - inside) / b) ** 2) / (_SQRT_2PI * b)
            return c * n, (1.0 - c) * n
        bounds = tuple(self.score_range_) if self.boundary == "reflect" else None
        pts, t, f = st["points"], st["tp"], st["fp"]
        zt = t > 0
        zf = f > 0
        out = []
        for mask, w in ((zt, t), (zf, f)):
            if not mask.any():
                out.append(np.zeros_like(x))
                continue
            num, _, shift = eng.exact_sums(
                x, pts[mask], w[mask], np.zeros(mask.sum()), b, bounds
            )
            out.append(num * np.exp(-shift * (0.5 / (b * b))) / (_SQRT_2PI * b))
        return out[0], out[1]

    @property
    def n_params_(self) -> int:
        """One bandwidth per class that has one."""
        return int(np.count_nonzero(np.isfinite(self.bandwidth_)))

    # --------------------------------------------------------- persistence
    def _dump_class_state(self, state: dict) -> dict:
        return dump_state(state)

    def _load_class_state(self, state: dict) -> dict:
        return load_state(state)

    def _describe_classes(self) -> list[dict]:
        out = []
        for st, sup in zip(self.class_state_, self.support_):
            if st is None:
                out.append(
                    {
                        "fallback": "uncalibrated (class never predicted in fitting data)",
                        "bandwidth": None,
                    }
                )
                continue
            d = {
                "bandwidth": _json_bandwidth(st["bandwidth"]),
                "engine": st["engine"],
                "slope_sign_changes": st["sign_changes"],
                "support": list(sup),
                "kernel_centres": int(st["points"].size if "points" in st else st["centres"]),
                "table_points": int(
                    st["table"].size
                    if "table" in st
                    else st["knots"].size
                    if "knots" in st
                    else FINE_CELLS // st["table_stride"] + 1
                ),
            }
            if st["b_range"] is not None:
                d["candidate_range"] = st["b_range"]
            if not st["admissible"]:
                d["note"] = "no candidate met the rule; largest candidate used"
            if st["degenerate"] is not None:
                d["degenerate"] = st["degenerate"]
            out.append(to_jsonable(d))
        return out
