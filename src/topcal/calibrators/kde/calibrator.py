"""Kernel-density-ratio calibration, Conf_KDE (paper sections 5, 6 and 12).

For predicted class k with positives split into true positives (TP) and
false positives (FP), with weights t_i and f_i (1/0 per sample, counts for
binned data),

    Conf_KDE(S) = sum_TP t_i phi_b(S - s_i) / (sum_TP t_i phi_b(S - s_i) + sum_FP f_j phi_b(S -
    s_j)),

phi_b the Gaussian kernel with **one bandwidth b for TP and FP** (the
paper's eq. 8 sums over TP in K_FP: a typo). With one b this is the
Nadaraya-Watson regression of correctness on the score; it is computed with
a shift in the exponent (log-sum-exp), so it is defined where both sums
underflow.

Bandwidth rules (``kde``: fixed or a rule of thumb; ``kde-mon``, ``kde-mon2``,
``kde-mon4``: the smallest b with at most 0, 2, 4 slope sign changes;
``kde-opt``: leave-one-out NLL), the two engines, the prediction tables,
the held value outside the support, degenerate classes and NaN as "no
bandwidth" (null in JSON) are described in docs/kde.md.

The registered estimators (one small class per bandwidth rule) are in
``methods.py``; what they share is :class:`KDEBase` here: the batched fit of
every class (support, engine choice, lockstep scans), the prediction tables,
``densities``, persistence and ``describe``, (the bare formula
``kde_confidence`` is in ``formula.py``). The bandwidth rules and scans live in ``_rules``, the
kernel sums and FFTs in ``_engine``.
"""

from __future__ import annotations

import warnings

import numpy as np

from ..._params import NoneOr, Options
from ...data import TopLabelData, preview, rows_by_class
from ...errors import DegenerateClassWarning, ParameterError
from . import _engine as eng
from . import _rules as rules
from ._tables import interp_tables, table_cells, wide_bandwidth_tables
from ..base import finite_array, to_jsonable
from ..score import ScoreCalibrator
from ..shrinkage import ShrinkageConstraint

__all__ = [
    "KDEBase",
    "BandwidthWarning",
    "count_sign_changes",
]

count_sign_changes = eng.count_sign_changes

#: Smallest fixed bandwidth accepted, as a share of the score range width: a
#: kernel far narrower than any gap between scores only reproduces the data
#: points, and below ~1e-154 its b * b underflows to 0.
MIN_BANDWIDTH_SHARE = 1e-9
#: The prediction table's spacing is at most b / TABLE_CELLS_PER_B (a power
#: of 2 fraction of the fine grid, 257 to 4097 points). Linear interpolation
#: error is at most h^2 / 8 * max|Conf''|; on PhANNs h = b / 8 gave up to
#: 7e-4, so h = b / 16 (4x less): measured <= 2e-4, median 2e-5 per class.
TABLE_CELLS_PER_B = 16
#: Binned-engine classes scanned together in lockstep (kde-mon*), at most this many per group.
BINNED_BATCH = 64
MAX_TABLE_STRIDE = 16

_SQRT_2PI = float(np.sqrt(2.0 * np.pi))
#: "No bandwidth" (degenerate classes, classes without positives): NaN in
#: memory, null in JSON (see the module docstring).
NO_BANDWIDTH = float("nan")


def _json_bandwidth(b: float):
    """A bandwidth for JSON: NO_BANDWIDTH (NaN) becomes null."""
    return None if np.isnan(b) else b


class BandwidthWarning(DegenerateClassWarning):
    """No candidate bandwidth met a rule; the documented fallback was used."""


class KDEBase(ScoreCalibrator):
    """Shared fitting, prediction table and persistence of the KDE rules."""

    #: How each class's bandwidth is chosen: an entry of ``_rules.SELECTION_RULES``
    #: (kde-mon*, kde-opt); ``kde`` takes a fixed one instead (see :meth:`_choose_bandwidth`).
    _bandwidth_rule = None

    _parameter_constraints = {
        "engine": Options(("auto", "exact", "binned")),
        "boundary": NoneOr(Options(("reflect",))),
        "shrinkage": ShrinkageConstraint(),
    }
    shrinkable = True
    tier = 2  # per-class curves, shrunk toward the pooled one by default
    #: Search the classes' bandwidths together, in lockstep (see
    #: _rules.scan_mon_lockstep, scan_opt_lockstep); False searches them one by one (the
    #: same result up to round-off; for tests and benchmarks).
    batch_classes = True

    def __init__(self, *, engine: str = "auto", boundary: str | None = None, shrinkage="auto"):
        self.engine = engine
        self.boundary = boundary
        self.shrinkage = shrinkage

    # ----------------------------------------------------------------- fit
    def _fit_all_classes(self, data: TopLabelData) -> tuple[list, list]:
        """Fit every class (the batched-fit hook of ScoreCalibrator) in a few passes over the rows.

        One pass finds each class's support and size; the classes for the
        binned engine are linearly binned together in one more pass (no
        per-class row selection), the others are selected row by row. The
        support of binned data is its outer bin edges, as
        ``TopLabelData.class_support`` gives it.
        """
        K = data.n_classes
        keep = (data.tp + data.fp) > 0
        if keep.all():  # per-sample data: every row has weight; skip the copies
            pred, score, tp, fp = data.pred, data.score, data.tp, data.fp
        else:
            pred, score, tp, fp = data.pred[keep], data.score[keep], data.tp[keep], data.fp[keep]
        smin = np.full(K, np.inf)
        smax = np.full(K, -np.inf)
        if (
            K == 1 and score.size
        ):  # one class (the pooled reference): plain min and max, the same values
            smin[0], smax[0] = score.min(), score.max()
        else:
            np.minimum.at(smin, pred, score)
            np.maximum.at(smax, pred, score)
        if data.is_binned:  # support = outer bin edges, as in ScoreCalibrator._fit
            edges = data.bin_edges[keep]
            lo = np.full(K, np.inf)
            hi = np.full(K, -np.inf)
            np.minimum.at(lo, pred, edges[:, 0])
            np.maximum.at(hi, pred, edges[:, 1])
        else:
            lo, hi = smin, smax
        rows = np.bincount(pred, minlength=K)
        kinds = []
        rule = self._bandwidth_rule
        exact_max = rules.EXACT_MAX_ROWS if rule is None else rule.exact_max_rows
        for k in range(K):
            if self.engine == "auto":
                kinds.append("exact" if rows[k] <= exact_max else "binned")
            else:
                kinds.append(self.engine)
        grids, stacked = {}, None
        binned = [k for k in range(K) if kinds[k] == "binned" and rows[k] > 0 and hi[k] > lo[k]]
        if binned:
            code = np.full(K, -1, dtype=np.int64)
            code[binned] = np.arange(len(binned))
            if len(binned) == K:
                T, F = eng.linear_bin(pred, score, tp, fp, lo, hi, K)
            else:
                sel = code[pred] >= 0
                T, F = eng.linear_bin(
                    code[pred[sel]],
                    score[sel],
                    tp[sel],
                    fp[sel],
                    lo[binned],
                    hi[binned],
                    len(binned),
                )
            grids = {k: (T[c], F[c]) for c, k in enumerate(binned)}
            stacked = (T, F, binned)
        # rows of each exact-engine class in row order, from one stable sort (not a pred == k
        # pass per class; no sort when every class is binned)
        args = {k: ("binned", g) for k, g in grids.items()}
        if len(grids) < np.count_nonzero(rows):
            for k, idx in rows_by_class(pred, K):
                if k not in grids:
                    args[k] = ("exact", (score[idx], tp[idx], fp[idx]))
        prepared = self._prepare_scans(args, lo, hi, smin, smax, stacked)
        states, support = [], []
        for k in range(K):
            if rows[k] == 0:
                states.append(None)
                support.append(None)
                continue
            support.append((float(lo[k]), float(hi[k])))
            T_k, F_k = float(self.n_tp_[k]), float(self.n_fp_[k])
            # popped: the class's engine (and its caches: kde-opt's LOO terms, n^2) freed once
            # fitted
            states.append(
                self._fit_one(
                    k,
                    args[k],
                    float(lo[k]),
                    float(hi[k]),
                    T_k,
                    F_k,
                    smin[k] == smax[k],
                    prepared=prepared.pop(k, None),
                )
            )
        self._warn_degenerate(states)
        return states, support

    def _bounds(self):  # the reflection limits, or None
        return tuple(self.score_range_) if self.boundary == "reflect" else None

    def _make_engine(self, engine_args, lo, hi):
        bounds = self._bounds()
        kind, arrays = engine_args
        if kind == "exact":
            score, tp, fp = arrays
            u, inv = np.unique(score, return_inverse=True)
            t = np.bincount(inv, tp, minlength=u.size)
            f = np.bincount(inv, fp, minlength=u.size)
            e = eng.ExactEngine(u, t, f, lo, hi, bounds)
            rho = float(np.diff(u).min()) if u.size > 1 else (hi - lo) / eng.FINE_CELLS
            return e, rho
        e = eng.BinnedEngine(arrays[0], arrays[1], lo, hi, bounds)
        return e, e.resolution()

    def _prepare_scans(self, args, lo, hi, smin, smax, stacked=None) -> dict:
        """Bandwidth searches of the classes in lockstep (kde-mon*, kde-opt), exact- and
        binned-engine classes apart.

        Returns {k: (engine, rho, (b, admissible, sign_changes or None))} for the classes it
        searched, {k: (engine, rho, None)} for the exact-engine classes too large for the rule's
        batch (searched one by one in _fit_one with that engine); the others are built and searched
        one by one in _fit_one. The result per class is the one the rule's per-class search
        (``_rules.scan_mon``, ``scan_opt``) gives (same candidates, evaluations and decisions). The
        rule names the batches it evaluates with (``exact_batch``, ``binned_batch``; None: one by
        one).
        ``stacked``: (T, F, classes) as linearly binned (row c: class ``classes[c]``), or None.
        """
        rule = self._bandwidth_rule
        lockstep = getattr(rule, "select_lockstep", None)
        if lockstep is None or not self.batch_classes:
            return {}
        exact_batch, binned_batch = rule.exact_batch, rule.binned_batch
        scanned = [
            k
            for k, (kind, _) in sorted(args.items())
            if smin[k] < smax[k]
            and self.n_tp_[k] > 0
            and self.n_fp_[k] > 0
            and not (kind == "binned" and binned_batch is None)
        ]
        to_bin, built = (
            [k for k in scanned if args[k][0] == "binned"],
            {},
        )  # their engines built together
        if to_bin:
            T, F = (
                stacked[:2]
                if stacked is not None and stacked[2] == to_bin  # all of them: no copy
                else [np.stack([args[k][1][j] for k in to_bin]) for j in (0, 1)]
            )
            built = dict(
                zip(to_bin, eng.BinnedEngine.many(T, F, lo[to_bin], hi[to_bin], self._bounds()))
            )
        items, binned, unbatched = [], [], {}
        for k in scanned:
            kind, arrays = args[k]
            engine, rho = (
                (built[k], built[k].resolution())
                if k in built
                else self._make_engine((kind, arrays), float(lo[k]), float(hi[k]))
            )
            item = (k, engine, rho, rules.candidates(float(lo[k]), float(hi[k]), rho))
            if kind == "binned":
                binned.append(item)
            elif exact_batch.accepts(engine):
                items.append(item)
            else:  # searched on its own in _fit_one, with the engine built here
                unbatched[k] = (engine, rho, None)
        out = dict(unbatched)
        # the binned classes in groups of BINNED_BATCH (their stacked transforms take ~0.25 MB a
        # class)
        for a in range(0, len(binned), BINNED_BATCH):
            group = binned[a : a + BINNED_BATCH]
            results = lockstep(binned_batch([g[1] for g in group]), [g[3] for g in group])
            for (k, engine, rho, _), res in zip(group, results):
                out[k] = (engine, rho, res)
        # groups of similar size (padding to the group's widest class) within a memory budget
        items.sort(key=lambda it: exact_batch.size_of(it[1]))
        group = []
        for it in items + [None]:
            if it is not None:
                size = exact_batch.size_of(it[1])
                first = exact_batch.size_of(group[0][1]) if group else size
                if not group or (
                    size * (len(group) + 1) <= rules.BATCH_ELEMENTS
                    and size <= 1.25 * first + exact_batch.PAD_SLACK
                ):
                    group.append(it)
                    continue
            if group:
                engines = [g[1] for g in group]
                results = lockstep(exact_batch(engines), [g[3] for g in group])
                for (k, engine, rho, _), res in zip(group, results):
                    out[k] = (engine, rho, res)
            group = [it] if it is not None else []
        return out

    def _warn_degenerate(self, states) -> None:
        """One warning per kind of degenerate class (a thousand small classes give four lines, not
        270)."""
        kinds: dict[str, list] = {}
        for k, st in enumerate(states):
            if st is not None and st.get("degenerate"):
                kinds.setdefault(st["degenerate"], []).append(self.classes_[k])
        for kind, names in kinds.items():
            what, _, conf = kind.partition(": ")
            shrunk = self.shrinkage != 0
            warnings.warn(
                f"{self.name}: {len(names)} class{'es' if len(names) > 1 else ''} {preview(names)} "
                f"{'have' if len(names) > 1 else 'has'} {what}: no bandwidth to choose (NaN); "
                + (
                    "the class's own curve is constant and shrinkage pulls it toward the pooled "
                    "curve"
                    if shrunk
                    else f"the curve is constant ({conf})"
                ),
                DegenerateClassWarning,
                stacklevel=6,
            )

    def _fit_one(self, k, engine_args, lo, hi, T, F, one_score, prepared=None) -> dict:
        degenerate = None
        if F == 0:
            degenerate = "only true positives: Conf = 1"
        elif T == 0:
            degenerate = "only false positives: Conf = 0"
        elif one_score:
            degenerate = "all positives share one score: Conf = |TP| / |P|"
        if degenerate is not None:
            return self._state(
                bandwidth=self._degenerate_bandwidth(),
                engine=None,
                degenerate=degenerate,
                points=[0.5 * (lo + hi)],
                tp=[T],
                fp=[F],
                lo=lo,
                hi=hi,
                table=[T / (T + F)] * 2,
                table_n=[T + F] * 2,
                sign_changes=0,
                b_range=None,
                admissible=True,
            )
        if prepared is None:
            engine, rho = self._make_engine(engine_args, lo, hi)
            scanned = None
        else:
            engine, rho, scanned = prepared
        width = hi - lo
        b, b_range, admissible, changes = self._choose_bandwidth(k, engine, lo, hi, rho, scanned)
        if changes is None:
            conf, resolved = engine.scan([b])
            changes = eng.count_sign_changes(conf[0], resolved[0])
        cells_per_b = b / (TABLE_CELLS_PER_B * width / eng.FINE_CELLS)
        stride = int(np.clip(2 ** np.floor(np.log2(max(cells_per_b, 1.0))), 1, MAX_TABLE_STRIDE))
        table, table_n = self._table(engine, b, stride)
        pts, t, f = engine.kernel_points()
        return self._state(
            bandwidth=float(b),
            engine=engine.name,
            degenerate=None,
            points=pts,
            tp=t,
            fp=f,
            lo=lo,
            hi=hi,
            table=table,
            table_n=table_n,
            sign_changes=changes,
            b_range=b_range,
            admissible=admissible,
        )

    def _degenerate_bandwidth(self) -> float:
        """The bandwidth recorded for a degenerate class: none (the rules have nothing to choose
        from)."""
        return NO_BANDWIDTH

    def _choose_bandwidth(self, k, engine, lo, hi, rho, scanned):
        """Class ``k``'s bandwidth by the rule: (b, candidate range, admissible, sign changes or
        None).

        ``scanned`` is the lockstep scan's (b, admissible, sign changes), if it ran for this class.
        """
        cand = rules.candidates(lo, hi, rho)
        if scanned is None:
            b, admissible = self._bandwidth_rule.select(engine, cand)
            changes = None
        else:
            b, admissible, changes = scanned
        if not admissible:
            warnings.warn(
                f"{self.name}: class {self.classes_[k]!r}: no bandwidth in [{cand[0]:.4g}, "
                f"{cand[-1]:.4g}] gives "
                f"<= {self._bandwidth_rule.max_changes} slope sign changes; using the largest, "
                f"{cand[-1]:.4g} "
                "(smoothest curve); inspect the curve or use kde-mon4 / kde-opt",
                BandwidthWarning,
                stacklevel=7,
            )
        return b, [float(cand[0]), float(cand[-1])], admissible, changes

    @staticmethod
    def _state(**kw) -> dict:
        return {
            "bandwidth": kw["bandwidth"],
            "engine": kw["engine"],
            "degenerate": kw["degenerate"],
            "sign_changes": int(kw["sign_changes"]),
            "admissible": bool(kw["admissible"]),
            "b_range": kw["b_range"],
            "points": np.asarray(kw["points"], dtype=np.float64),
            "tp": np.asarray(kw["tp"], dtype=np.float64),
            "fp": np.asarray(kw["fp"], dtype=np.float64),
            "table_lo": float(kw["lo"]),
            "table_hi": float(kw["hi"]),
            "table": np.asarray(kw["table"], dtype=np.float64),
            "table_n": np.asarray(kw["table_n"], dtype=np.float64),
        }

    def _table(self, engine, b, stride):
        """Conf and the kernel-weighted positive count (kernel value 1 at distance 0) on the table
        grid."""
        if isinstance(engine, eng.BinnedEngine):
            return engine.confidence_on_fine(b, stride, with_count=True)
        x = engine.lo + (engine.hi - engine.lo) / eng.FINE_CELLS * np.arange(
            0, eng.FINE_CELLS + 1, stride
        )
        num, den, shift = eng.exact_sums(x, engine.points, engine.tp, engine.fp, b, engine.bounds)
        return np.clip(num / den, 0.0, 1.0), den * np.exp(-shift * (0.5 / (b * b)))

    # ------------------------------------------------------------- predict
    def _index_states(self) -> None:
        """Flatten every class's table for vectorised prediction; set bandwidth_ (after fit and
        load)."""
        K = len(self.classes_)
        offs, tables, counts = [], [], []
        lo = np.zeros(K)
        hi = np.zeros(K)
        inv = np.zeros(K)
        nm1 = np.ones(K, dtype=np.int64)
        bw = np.full(K, np.nan)
        pos = 0
        for k, st in enumerate(self.class_state_):
            if st is None:
                tab = np.array([0.0, 0.0])  # rows of these classes are overwritten
                a, z = 0.0, 1.0
                counts.append(np.zeros(2))
            else:
                tab, a, z = st["table"], st["table_lo"], st["table_hi"]
                counts.append(st.get("table_n", np.full(tab.size, np.nan)))
                bw[k] = st["bandwidth"]
            offs.append(pos)
            tables.append(tab)
            lo[k], hi[k] = a, z
            nm1[k] = tab.size - 1
            inv[k] = (tab.size - 1) / (z - a) if z > a else 0.0
            pos += tab.size
        self._tab = np.concatenate(tables)
        self._tab_n = np.concatenate(counts)
        self._tab_off = np.array(offs, dtype=np.int64)
        self._tab_lo, self._tab_hi, self._tab_inv, self._tab_nm1 = lo, hi, inv, nm1
        self.bandwidth_ = bw
        self._wide = None  # the interval's wide-bandwidth tables, built on first use (_wide_terms)

    def _interp(self, k, score, with_count: bool = False):
        """Linear interpolation in the flat class tables; ``k``, ``score`` arrays of one shape, or
        ``k`` one class."""
        return interp_tables(
            self._tab,
            self._tab_n if with_count else None,
            self._tab_off[k],
            self._tab_lo[k],
            self._tab_hi[k],
            self._tab_inv[k],
            self._tab_nm1[k],
            score,
        )

    def _local_counts(self, k: int, score: np.ndarray):
        # one class: its table's scalars, not a per-row class array and gathers (the same values)
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
    #: A bandwidth at least this multiple of the class's score standard deviation spans the class:
    #: there the interval's small-bandwidth approximations (the sqrt(2) count scale, the Taylor
    #: bias)
    #: are replaced by the exact effective sample size and the local-linear bias
    #: (:meth:`_wide_terms`).
    WIDE_BANDWIDTH_SD = 1.0

    def _wide_terms(self, pred, score):
        """(effective sample size per count unit, extra bias) of every row: sqrt(2) and 0, except in
        classes with a wide bandwidth (``WIDE_BANDWIDTH_SD``), where they are the kernel's exact
        (sum w)^2 / sum w^2 and |Nadaraya-Watson - local linear| at the class's own bandwidth (the
        smoothing bias that the flattened curve's derivatives miss; docs/intervals.md). Computed
        from the stored kernel centres once per model on a grid of spacing b / 8 (<= 513 points)
        over each such class's table, and interpolated (held outside it, as the curve is)."""
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
        """Smoothing bias of Nadaraya-Watson, (b^2 / 2) (Conf'' + 2 Conf' f' / f) (Wand & Jones
        1995,
        sec. 5.4), with Conf and the score density f (the kernel-weighted count) differentiated
        on the fitted curve and table at steps of b / 2; in classes with a wide bandwidth plus
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
        bias[ok] = (
            np.abs(np.nan_to_num(0.5 * b[ok] ** 2 * (d2 + 2 * d1 * dlogf)))
            + self._wide_terms(p, s)[1]
        )
        return bias

    def _counts_stored(self) -> bool:
        return bool(np.all(np.isfinite(self._tab_n)))

    def _count_cells(self, pred, score):
        """Cells of the flat tables (Conf and the count are linear in the score within one).

        A model of one class (the pooled reference) reads its table's scalars instead of
        gathering them per row: the same cells.
        """
        k = 0 if len(self.classes_) == 1 else pred
        i, _ = table_cells(
            self._tab_lo[k],
            self._tab_hi[k],
            self._tab_inv[k],
            self._tab_nm1[k],
            np.asarray(score, dtype=np.float64),
        )
        i += self._tab_off[k]
        return i, self._tab.size

    def _predict_rows(self, pred: np.ndarray, score: np.ndarray) -> np.ndarray:
        """Every row in one gather from the flat tables (the batched-predict hook)."""
        out = self._interp(pred, np.asarray(score, dtype=np.float64))
        none = [k for k, st in enumerate(self.class_state_) if st is None]
        if none:
            rows = np.isin(pred, none)
            if rows.any():
                out[rows] = self._uncalibrated(score[rows])
        return out

    def _predict_class(self, state: dict, score: np.ndarray) -> np.ndarray:
        """Linear interpolation in the class's own table (the same arithmetic as
        ``_predict_rows``)."""
        tab, a, z = state["table"], state["table_lo"], state["table_hi"]
        inv = (tab.size - 1) / (z - a) if z > a else 0.0
        return interp_tables(
            tab, None, 0, a, z, inv, tab.size - 1, np.asarray(score, dtype=np.float64)
        )

    # -------------------------------------------------------------- extras
    def densities(self, k, score) -> tuple[np.ndarray, np.ndarray]:
        """The smoothed weighted sums of class ``k`` at ``score`` (paper Fig. 5).

        Returns ``(sum_TP t_i phi_b(S - s_i), sum_FP f_j phi_b(S - s_j))`` with
        phi_b the normalised Gaussian density of standard deviation b, i.e.
        |TP| K_TP(S) and |FP| K_FP(S) in the paper's notation (each integrates
        to the group's weight, less what falls outside a hard limit unless
        ``boundary="reflect"``). Not held constant outside the support. For
        the binned engine the kernel centres are the fine grid points with
        their linearly binned weights.

        Raises
        ------
        TopcalError
            For an unknown class, or a class without a bandwidth (no
            positives, or a degenerate class: only TP, only FP, one score).
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
        bounds = tuple(self.score_range_) if self.boundary == "reflect" else None
        pts, t, f = st["points"], st["tp"], st["fp"]
        zt = t > 0
        zf = f > 0
        out = []
        for mask, w in ((zt, t), (zf, f)):
            if not mask.any():
                out.append(np.zeros_like(x))
                continue
            num, _, shift = eng.exact_sums(x, pts[mask], w[mask], np.zeros(mask.sum()), b, bounds)
            out.append(num * np.exp(-shift * (0.5 / (b * b))) / (_SQRT_2PI * b))
        return out[0], out[1]

    @property
    def n_params_(self) -> int:
        """One bandwidth per class that has one."""
        return int(np.count_nonzero(np.isfinite(self.bandwidth_)))

    # --------------------------------------------------------- persistence
    def _dump_class_state(self, state: dict) -> dict:
        return to_jsonable({**state, "bandwidth": _json_bandwidth(state["bandwidth"])})

    def _load_class_state(self, state: dict) -> dict:
        b = state["bandwidth"]
        if b is None:
            b = NO_BANDWIDTH
        else:
            b = float(b)
            if not (np.isfinite(b) and b > 0):
                raise ValueError("bandwidth must be a positive number or null")
        pts = finite_array(state["points"], "points")
        tp = finite_array(state["tp"], "tp", pts.size)
        fp = finite_array(state["fp"], "fp", pts.size)
        table = finite_array(state["table"], "table")
        if table.size < 2 or np.any((table < 0) | (table > 1)):
            raise ValueError("table must hold at least 2 confidences in [0, 1]")
        lo, hi = float(state["table_lo"]), float(state["table_hi"])
        if not (np.isfinite(lo) and np.isfinite(hi) and lo <= hi):
            raise ValueError("table_lo and table_hi must be finite with table_lo <= table_hi")
        if state["engine"] not in (None, "exact", "binned"):
            raise ValueError(f"unknown engine {state['engine']!r}")
        br = state["b_range"]
        extra = {}
        if "table_n" in state:  # the counts behind the table (files since shrinkage)
            extra["table_n"] = finite_array(state["table_n"], "table_n", table.size)
        return {  # the keys in a fit's order (table_n last): a reloaded model saves the same file
            "bandwidth": b,
            "engine": state["engine"],
            "degenerate": None if state["degenerate"] is None else str(state["degenerate"]),
            "sign_changes": int(state["sign_changes"]),
            "admissible": bool(state["admissible"]),
            "b_range": None if br is None else [float(v) for v in finite_array(br, "b_range", 2)],
            "points": pts,
            "tp": tp,
            "fp": fp,
            "table_lo": lo,
            "table_hi": hi,
            "table": table,
            **extra,
        }

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
                "kernel_centres": int(st["points"].size),
                "table_points": int(st["table"].size),
            }
            if st["b_range"] is not None:
                d["candidate_range"] = st["b_range"]
            if not st["admissible"]:
                d["note"] = "no candidate met the rule; largest candidate used"
            if st["degenerate"] is not None:
                d["degenerate"] = st["degenerate"]
            out.append(to_jsonable(d))
        return out
