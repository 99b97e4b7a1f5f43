"""The contract of the per-class score methods: ``ScoreCalibrator``, Conf_k(S) a function of
the top score.

The count and kde families subclass it (``_fit_class`` / ``_predict_class``, or the batched
hooks); shrinkage toward the pooled curve (:mod:`.shrinkage`) and the Beta-posterior
intervals of the local counts (:mod:`.intervals`) are done here once for all of them.
:class:`~.base.Calibrator` is the contract of every method.
"""

from __future__ import annotations

import warnings
from typing import Any, ClassVar

import numpy as np

from ..data import ClassView, TopLabelData, rows_by_class
from .._typing import ArrayLike
from ..errors import DegenerateClassWarning, ParameterError
from . import intervals
from . import shrinkage as shr
from .base import Calibrator, Curve, finite_array, support_list, to_jsonable
from .foldmemo import memo, memo_data

__all__ = ["ScoreCalibrator"]


#: The one class of pooled rows (:func:`pooled_rows`).
POOLED_CLASS = "all classes"


def pooled_rows(data: TopLabelData) -> TopLabelData:
    """``data`` with every row assigned to one class (POOLED_CLASS); scores, weights and
    bins kept. Inside a fold's :func:`~.foldmemo.sharing` block made once per data object,
    and pooled rows pool to themselves (the same rows), so what is memoised on them is found
    again."""

    def make():
        zeros = np.zeros(data.n_rows, dtype=np.int64)
        return TopLabelData(
            (POOLED_CLASS,), zeros, data.score, data.score_range, tp=data.tp, fp=data.fp,
            bin_edges=data.bin_edges,
        )  # fmt: skip

    out = memo_data(data, "pooled", make)
    memo(out, "pooled", lambda: out)
    return out


class ScoreCalibrator(Calibrator):
    """Calibrators whose confidence for class k is a function Conf_k(S) of the score.

    Subclasses implement ``_fit_class(view, k) -> dict`` (JSON-ready per-class state) and
    ``_predict_class(state, score) -> ndarray``. Classes with no positives in the fitting
    data get ``None`` state and the uncalibrated score (S - lo) / (hi - lo) as their
    confidence (a warning is raised at fit).

    Methods that fit or predict many classes faster together override the batched hooks,
    whose defaults go class by class through the two above: ``_fit_all_classes(data) ->
    (states, support)`` and ``_predict_rows(pred, score) -> ndarray``; ``_index_states()``
    runs whenever ``class_state_`` is set (fit or load), for methods that predict from
    tables built out of the states. The batched hooks must give what the per-class ones give
    (``kde`` fits every class in a few passes over the rows and predicts all rows in one
    gather).
    """

    #: Whether the method takes the ``shrinkage`` parameter: it estimates Conf_k(S) from
    #: local counts and implements :meth:`_local_counts`.
    shrinkable: ClassVar[bool] = False
    #: Per class, the pseudo-count the interval takes (:func:`.shrinkage.interval_m`); None:
    #: unshrunk, or an older model file (the interval of the own counts alone).
    interval_m_: np.ndarray | None = None
    #: Whether the local counts (and the reference) are piecewise constant in the score (a
    #: histogram): rows sharing them are merged before the pseudo-count's loss is evaluated.
    piecewise_counts: ClassVar[bool] = False
    #: Choose the pseudo-count on rows merged by cell where the method gives cells
    #: (:meth:`_count_cells`); False evaluates the loss on every row (for tests and
    #: benchmarks).
    merge_cells: ClassVar[bool] = True
    #: Choose the pseudo-count of piecewise-constant counts from per-cell sums where the
    #: method gives cells (:meth:`_count_keys`; the same result); False looks every row up
    #: (for tests and benchmarks).
    cell_sums: ClassVar[bool] = True
    #: With :meth:`_count_keys`: 0 merges rows of equal cells only (exact); a relative width
    #: > 0 also merges runs of cells with counts equal within it
    #: (:func:`shrinkage.count_runs`).
    count_run_width: ClassVar[float] = 0.0
    #: The shrinkage parameter: each subclass's ``__init__`` takes it (declared for the
    #: checker).
    shrinkage: float | str

    def _shrunk(self) -> bool:
        return self.shrinkable and not (
            not isinstance(self.shrinkage, str) and float(self.shrinkage) == 0.0
        )

    def _fit(self, data: TopLabelData) -> None:
        self._fit_classes(data)
        if self._shrunk():
            self._fit_shrinkage(data)

    def _fit_classes(self, data: TopLabelData) -> None:
        """Fit every class with the paper's estimator (sets class_state_, support_)."""
        self.class_state_, self.support_ = self._fit_all_classes(data)
        self._index_states()

    def _fit_all_classes(self, data: TopLabelData) -> tuple[list, list]:
        """Per-class states and supports (None for classes without positives): the
        batched-fit hook.

        The default fits class by class with :meth:`_fit_class`.
        """
        # the supports from one sort (a class_support per class costs ~50 us: seconds at
        # 10^5 classes, in every fold of auto's cross-validation)
        support = data.class_supports()
        states = [
            None if sup is None else self._fit_class(view, k)
            for k, (view, sup) in enumerate(zip(data.class_views(), support))
        ]
        return states, support

    def _index_states(self) -> None:
        """Called whenever ``class_state_`` is set (fit, load); nothing to do by default."""

    def _fit_class(self, view: ClassView, k: int) -> dict:  # pragma: no cover - abstract
        raise NotImplementedError

    def _predict_class(self, state: dict, score: np.ndarray) -> np.ndarray:  # pragma: no cover
        raise NotImplementedError

    def _uncalibrated(self, score: np.ndarray) -> np.ndarray:
        lo, hi = self.score_range_
        return np.clip((score - lo) / (hi - lo), 0.0, 1.0)

    def _predict_scores(self, k: int, score: np.ndarray) -> np.ndarray:
        state = self.class_state_[k]
        if self._shrunk():
            return self._shrunk_scores(k, score)
        if state is None:
            return self._uncalibrated(score)
        return self._predict_class(state, score)

    # ------------------------------------------------------------ shrinkage
    def _local_counts(self, k: int, score: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Local TP and positive counts (t, n) behind Conf_k at ``score`` (paper estimator).

        Conf_k = t / n where n > 0. Implemented by shrinkable methods.
        """
        raise NotImplementedError  # pragma: no cover - abstract

    def _local_counts_rows(
        self, pred: np.ndarray, score: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`_local_counts` of every row's own class (rows of classes without state: 0,
        0).

        One pass per class present, over rows grouped once; methods with flat per-class
        tables override it with a single gather.
        """
        t = np.zeros(score.shape[0])
        n = np.zeros(score.shape[0])
        for k, idx in rows_by_class(pred, len(self.classes_)):
            if self.class_state_[k] is not None:
                t[idx], n[idx] = self._local_counts(k, score[idx])
        return t, n

    def _fit_shrinkage(self, data: TopLabelData) -> None:
        """Fit the pooled reference curve and choose the pseudo-counts (see
        calibrators.shrinkage). In a fold (foldmemo), one reference per method and
        parameters: kde-mon2's is pooled-kde-mon2's inner model's."""
        pooled = pooled_rows(data)
        params = sorted({**self.get_params(), "shrinkage": 0}.items())
        key = f"reference {type(self).__name__} {params!r} {getattr(self, 'compact', None)}"
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DegenerateClassWarning)
            ref = memo(pooled, key, lambda p=pooled: self._fit_reference(p, data))
        del (
            pooled
        )  # its rows' class (zeros): not held while the pseudo-counts are chosen (peak memory)
        keep = (data.tp + data.fp) > 0
        if (
            keep.all()
        ):  # per-sample data: every row has weight; no copies (contiguous, as the copies are)
            s, tp, fp, pred = (
                np.ascontiguousarray(a) for a in (data.score, data.tp, data.fp, data.pred)
            )
        else:
            s, tp, fp, pred = data.score[keep], data.tp[keep], data.fp[keep], data.pred[keep]
        del keep
        self.reference_ = ref
        self.reference_rate_ = shr.jeffreys_rate(tp.sum(), tp.sum() + fp.sum())
        K = len(self.classes_)
        if self.cell_sums and type(self)._count_keys is not ScoreCalibrator._count_keys:
            self._choose_m_by_cells(
                ref, pred, s, tp, fp
            )  # counts constant within cells: sum the rows by cell
            return
        one = np.zeros(s.shape[0], dtype=np.int64)
        s0, tp0, fp0, _ = ref._merged_rows(one, s, tp, fp)
        t0, n0 = ref._local_counts(0, s0)
        zero = np.zeros(s0.shape[0], dtype=np.int64)
        rows: tuple = (t0, n0, tp0, fp0, self.reference_rate_, zero)
        if self.piecewise_counts:
            rows = shr.merge_equal_rows(*rows)
        self.reference_m_ = shr.choose_m(shr.loo_nll_by_group(*rows, 1)[0])  # type: ignore[call-arg]
        del (
            one,
            s0,
            tp0,
            fp0,
            t0,
            n0,
            rows,
        )  # row-length arrays of the reference's loss (peak memory)
        s, tp, fp, pred = self._merged_rows(pred, s, tp, fp)
        r = self._reference(s)
        t, n = self._local_counts_rows(pred, s)
        rows = (t, n, tp, fp, r, pred)
        del t, n, r
        if self.piecewise_counts:
            rows = shr.merge_equal_rows(*rows)
        self._set_shrinkage(shr.loo_nll_by_group(*rows, K))  # type: ignore[call-arg]

    def _fit_reference(self, pooled: TopLabelData, data: TopLabelData):
        """The pooled reference: this method unshrunk, fitted on the ``pooled`` rows as a
        part of this model (``keep="model"``). The ``cum`` family seeds it with what its
        class fits already know of the pooled rows (their counts, from the classes' sorted
        tables)."""
        return type(self)(**{**self.get_params(), "shrinkage": 0}).fit(pooled, keep="model")

    def _cell_sums(self, ref, pred, score, tp, fp):
        """For :meth:`_choose_m_by_cells` with count runs: (TP and FP weight per cell, t and
        n per cell, class per cell, the reference's cell of each cell, t and n per reference
        cell), the rows summed per cell (:meth:`_count_keys`) and each cell looked up in the
        reference's cells."""
        key, tc, nc, cell_class, cell_score = self._count_keys(pred, score)
        w_tp, w_fp = (np.bincount(key, w, minlength=tc.size) for w in (tp, fp))
        del key
        key0, t0c, n0c, _, _ = ref._count_keys(0, cell_score)  # the one class of the reference
        return w_tp, w_fp, tc, nc, cell_class, key0, t0c, n0c

    def _set_shrinkage(self, losses: np.ndarray) -> None:
        """The pseudo-counts from the per-class losses over the grid, by the ``shrinkage``
        rule."""
        K = len(self.classes_)
        if self.shrinkage == "auto":
            m = np.full(K, shr.choose_m(losses.sum(axis=0)))
        elif self.shrinkage == "class":
            m = np.array([shr.choose_m(losses[k]) for k in range(K)])
        else:
            m = np.full(K, float(self.shrinkage))
        self.shrinkage_ = m
        self.shrinkage_loss_ = losses
        self.interval_m_ = np.minimum(m, shr.interval_m(losses, rule=self.shrinkage, m=m))

    def _choose_m_by_cells(self, ref, pred, s, tp, fp) -> None:
        """:meth:`_fit_shrinkage`'s choice of the pseudo-counts for piecewise-constant
        counts, from cells.

        Every row's local counts are those of its cell (:meth:`_count_keys`), and its
        reference value that of its reference cell. With ``count_run_width`` 0 (``hist``)
        the rows are summed per (cell, reference cell) in one pass (bincount) and the few
        merged rows go to :func:`shrinkage.merge_equal_rows` as the rows themselves did: the
        same merged rows, weights summed in another order (exact for 0/1 weights), hence the
        same losses and pseudo-counts. Otherwise (the ``cum`` family: a cell per distinct
        score, whose rows all have that score, so it lies in one reference cell) the rows
        are summed per cell, and consecutive cells with nearly equal counts and reference
        form runs (:func:`shrinkage.count_runs`) merged at their weighted mean counts
        (:func:`shrinkage.merge_rows_by_run`; tolerance in docs/shrinkage.md).
        """
        K = len(self.classes_)
        width = self.count_run_width
        if width:
            w_tp, w_fp, tc, nc, cell_class, key0, t0c, n0c = self._cell_sums(ref, pred, s, tp, fp)
            w_tp0, w_fp0 = (np.bincount(key0, w, minlength=t0c.size) for w in (w_tp, w_fp))
        else:
            key, tc, nc, cell_class, cell_score = self._count_keys(pred, s)
            key0, t0c, n0c, _, _ = ref._count_keys(0, s)
            w_tp0, w_fp0 = (np.bincount(key0, w, minlength=t0c.size) for w in (tp, fp))
        c0 = t0c.size
        if width:
            run0 = shr.count_runs(
                t0c, n0c, np.broadcast_to(np.int64(0), (c0,)), width
            )  # one group: no array
            rows: tuple = shr.merge_rows_by_run(
                run0, int(run0[-1]) + 1, t0c, n0c, self.reference_rate_, w_tp0, w_fp0
            )
            rows = (*rows[:5], np.zeros(rows[5].size, dtype=np.int64))
        else:
            occ0 = np.flatnonzero(np.bincount(key0, minlength=c0))
            rows = shr.merge_equal_rows(
                t0c[occ0],
                n0c[occ0],
                w_tp0[occ0],
                w_fp0[occ0],
                self.reference_rate_,
                np.zeros(occ0.size, dtype=np.int64),
            )
        del w_tp0, w_fp0
        self.reference_m_ = shr.choose_m(shr.loo_nll_by_group(*rows, 1)[0])  # type: ignore[call-arg]
        r0c = shr.shrink(
            t0c, n0c, self.reference_rate_, self.reference_m_
        )  # the reference per its cell
        if width:
            # a new run where the class, the reference's run or the class's counts change
            joint = np.multiply(
                cell_class, int(run0[-1]) + 1, dtype=np.int64
            )  # (class, reference run) of every cell
            joint += run0[key0]
            r_cell = r0c[key0]
            del key0, r0c, run0, t0c, n0c  # (peak memory: cell-length arrays no longer needed)
            run = shr.count_runs(tc, nc, joint, width)
            del joint
            n_runs = int(run[-1]) + 1
            group = np.zeros(n_runs, dtype=np.int64)
            group[run] = cell_class
            del cell_class
            t, n, w_tp, w_fp, r, g = shr.merge_rows_by_run(run, n_runs, tc, nc, r_cell, w_tp, w_fp)
            self._set_shrinkage(shr.loo_nll_by_group(t, n, w_tp, w_fp, r, group[g], K))
            return
        joint = np.multiply(
            key, c0, dtype=np.int64
        )  # (cell, reference cell) of every row (int64: keys may be int32)
        joint += key0
        del key
        if tc.size * c0 <= 4 * joint.size + 1024:
            occ = np.flatnonzero(np.bincount(joint, minlength=tc.size * c0))
            w_tp, w_fp = (np.bincount(joint, w, minlength=tc.size * c0)[occ] for w in (tp, fp))
        else:  # many cells: only the occupied pairs
            occ, inv = np.unique(joint, return_inverse=True)
            w_tp, w_fp = (np.bincount(inv, w, minlength=occ.size) for w in (tp, fp))
        ck, rk = occ // c0, occ % c0
        rows = shr.merge_equal_rows(tc[ck], nc[ck], w_tp, w_fp, r0c[rk], cell_class[ck])
        self._set_shrinkage(shr.loo_nll_by_group(*rows, K))  # type: ignore[call-arg]

    def _count_keys(self, pred: np.ndarray, score: np.ndarray):
        """Where the local counts are constant within cells: (cell of every row, t per cell,
        n per cell, class of every cell, the score of every row of each cell or None); else
        None. ``pred`` is an int array like ``score``, or one class (an int) for all rows
        (then the class and score per cell may be None).

        Cells number 0 .. n_cells - 1 across all classes; a class without state has one cell
        of counts 0. Used to choose the pseudo-count from per-cell sums rather than per-row
        lookups.
        """
        return None

    def _count_cells(self, pred: np.ndarray, score: np.ndarray):
        """(cell of every row, number of cells) where the local counts are smooth within
        cells, else None.

        Cells number 0 .. n_cells - 1 across all classes (a cell lies in one class). Methods
        whose counts are smooth in the score (``kde``: linear within a cell of the class's
        table) return them, so that choosing the pseudo-count can merge the rows of a cell
        (:meth:`_merged_rows`).
        """
        return None

    def _merged_rows(self, pred, score, tp, fp):
        """The rows the pseudo-count's loss is evaluated on: (score, tp, fp, pred).

        The rows themselves, or, where :meth:`_count_cells` gives cells, ``merge_cells`` is
        on and merging divides the rows by at least ``shrinkage.CELL_MERGE_GAIN``, one TP
        and one FP row per occupied cell at the weighted mean score
        (:func:`shrinkage.merge_rows_by_cell`; documented tolerance in docs/shrinkage.md).
        """
        cells = self._count_cells(pred, score) if self.merge_cells else None
        if cells is None or score.shape[0] < shr.CELL_MERGE_GAIN * 2:
            return score, tp, fp, pred
        cell, n_cells = cells
        occupied = np.count_nonzero(np.bincount(cell, minlength=n_cells))
        if 2 * occupied * shr.CELL_MERGE_GAIN > score.shape[0]:
            return score, tp, fp, pred
        cell_class = np.zeros(n_cells, dtype=np.int64)
        cell_class[cell] = pred
        s, t, f, c = shr.merge_rows_by_cell(cell, score, tp, fp, n_cells)
        return s, t, f, cell_class[c]

    def _shrink_terms(self, pred: np.ndarray, score: np.ndarray):
        """(t, n, r) of every row: its class's local counts and the reference curve at its
        score.

        The reference once for all rows, the class counts in one grouped pass; methods whose
        lookups want the rows sorted by score override it to sort once for both.
        """
        r = self._reference(score)
        t, n = self._local_counts_rows(pred, score)
        return t, n, r

    def _reference(self, score: np.ndarray) -> np.ndarray:
        """The reference curve r(S): the pooled curve shrunk toward the overall rate."""
        t0, n0 = self.reference_._local_counts(0, score)
        return shr.shrink(t0, n0, self.reference_rate_, self.reference_m_)

    def _shrunk_scores(self, k: int, score: np.ndarray) -> np.ndarray:
        r = self._reference(score)
        if self.class_state_[k] is None:
            return r  # no data of its own: the reference curve
        t, n = self._local_counts(k, score)
        return shr.shrink(t, n, r, self.shrinkage_[k])

    def _predict(self, data: TopLabelData) -> np.ndarray:
        if self._shrunk():
            t, n, r = self._shrink_terms(data.pred, data.score)
            m = self.shrinkage_
            # one pseudo-count for all classes ("auto", a number): the same value, without a
            # gather per row
            out = shr.shrink(t, n, r, m[0] if (m == m[0]).all() else m[data.pred])
            none = [k for k, st in enumerate(self.class_state_) if st is None]
            if none:  # no data of their own: the reference curve
                rows = np.isin(data.pred, none)
                out[rows] = r[rows]
            return out
        return self._predict_rows(data.pred, data.score)

    def _predict_rows(self, pred: np.ndarray, score: np.ndarray) -> np.ndarray:
        """Unshrunk Conf of every row's own class: the batched-predict hook.

        The default goes class by class through :meth:`_predict_scores`.
        """
        out = np.empty(score.shape[0], dtype=np.float64)
        for k, idx in rows_by_class(pred, len(self.classes_)):
            out[idx] = self._predict_scores(k, score[idx])
        return out

    # ------------------------------------------------------------ intervals
    #: Effective sample size per unit of the local count n (1 for plain counts; the kernel
    #: methods' kernel-weighted counts count more, docs/intervals.md).
    _count_scale: ClassVar[float] = 1.0

    def _counts_stored(self) -> bool:
        """Whether the fitted state holds the local counts the intervals need (old files may
        not)."""
        return True

    def _interval_scale(self, pred: np.ndarray, score: np.ndarray) -> np.ndarray | float:
        """Effective sample size per unit of each row's local count n: ``_count_scale``
        unless the method knows better row by row (the kernel methods at wide bandwidths)."""
        return self._count_scale

    def _interval_bias(self, pred: np.ndarray, score: np.ndarray) -> np.ndarray | float:
        """Estimated bias of each row's confidence as an estimate of Conf_k at its own score
        (0: none; the histogram's binning and the kernel's smoothing bias); the interval is
        widened for it."""
        return 0.0

    def _curve_rows(self, pred: np.ndarray, score: np.ndarray) -> np.ndarray:
        """The fitted confidence (shrunk where the model is) of each row's class at
        ``score``."""
        return self._predict(
            TopLabelData(tuple(self.classes_), pred, score, tuple(self.score_range_))
        )

    def _interval_counts(
        self, pred: np.ndarray, score: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """The class's own local counts (t, n) behind each row's unshrunk confidence: what
        the interval is computed from (the histogram takes an empty bin's from the bin whose
        value it holds)."""
        return self._local_counts_rows(pred, score)

    def _interval(self, data: TopLabelData, level: float):
        """Jeffreys posterior of the class's own local counts, widened for the estimate's
        bias and to hold the (possibly shrunk) confidence (module
        :mod:`topcal.calibrators.intervals`)."""
        if not self.shrinkable:
            raise ParameterError(f"method {self.name!r} has no confidence interval")
        if not self._counts_stored():
            raise self._no_interval_stats("local counts")
        pred, score = data.pred, data.score
        conf = self._predict(data)
        none = np.array([st is None for st in self.class_state_], dtype=bool)[pred]
        t, n = self._interval_counts(pred, score)
        if (
            none.any()
        ):  # no data of their own: the prior alone (shrunk: the curve is the reference's)
            t, n = np.where(none, 0.0, t), np.where(none, 0.0, n)
        m_i = self.interval_m_
        if self._shrunk() and m_i is not None:
            # the class's own counts under the prior the shrinkage fitted, at the weakest
            # pseudo-count the leave-one-out loss does not rule out
            # (intervals.shrunk_interval)
            r = self._reference(score)
            lo, hi = intervals.shrunk_interval(
                t, n, r, m_i[pred], level, scale=self._interval_scale(pred, score)
            )
        else:  # unshrunk, or an older file: the class's own counts alone
            lo, hi = intervals.count_interval(t, n, level, scale=self._interval_scale(pred, score))
        if not self._shrunk():
            # the uncalibrated score: nothing estimated
            lo[none], hi[none] = conf[none], conf[none]
        bias = self._interval_bias(pred, score)
        step = None
        if m_i is not None and self._shrunk():
            # the shrunk value is n / (n + m) the class's own estimate and m / (n + m) the
            # reference's: its binning or smoothing bias is theirs in those shares (where
            # the class has no rows near the score, the reference's alone, not the own
            # estimate's unbounded)
            own = n / np.maximum(n + self.shrinkage_[pred], 1e-300)
            zero = np.zeros(score.shape[0], np.int64)
            ref = (1.0 - own) * self.reference_._interval_bias(zero, score)
            if self.piecewise_counts:  # a step: the reference's share below, on its side only
                bias, step = own * bias, np.where(none, 0.0, ref)
            else:
                bias = own * bias + ref
        if np.any(bias):
            lo, hi = intervals.widen(lo, hi, conf, np.where(none, 0.0, bias), level)
        if step is not None and np.any(step):
            # the reference's step has the class's bins, and its bias at a score a known
            # sign (the truth moves along the slope from the bin's rate): the interval grows
            # on that side; left out, a smooth truth was covered 0.68 (0.51 at 3,000 rows a
            # class)
            lo, hi = intervals.widen_toward(lo, hi, conf, step, level)
        return intervals.include_point(lo, hi, conf)

    def curve(self, k: int | str, score: ArrayLike | None = None, *, n_points: int = 401) -> Curve:
        """Conf_k sampled on ``score`` (default: ``n_points`` evenly spaced over the score
        range).

        Parameters
        ----------
        k : int or str
            Class index or name.
        score : array-like, optional
            Scores (declared scale) to evaluate at.
        n_points : int, default 401
            Grid size when ``score`` is not given.
        """
        self._check_fitted()
        i, s = self._curve_scores(k, score, n_points)
        return Curve(self.classes_[i], s, self._predict_scores(i, s), self.support_[i])

    # per-class state persistence: shared by every score calibrator
    def _get_state(self) -> dict:
        out: dict[str, Any] = {
            "class_state": self._dump_class_states(self.class_state_),
            "support": [None if s is None else list(s) for s in self.support_],
        }
        if self._shrunk():
            out["shrinkage"] = {
                "m": [float(v) for v in self.shrinkage_],
                "reference": self.reference_.to_dict(),
                "reference_m": float(self.reference_m_),
                "reference_rate": float(self.reference_rate_),
            }
            if self.interval_m_ is not None:
                out["shrinkage"]["interval_m"] = [float(v) for v in self.interval_m_]
        return out

    def _set_state(self, state: dict) -> None:
        cs = state["class_state"]
        sup = state["support"]
        if not isinstance(cs, list) or len(cs) != len(self.classes_):
            raise ValueError("per-class state has the wrong number of classes")
        self.class_state_ = self._load_class_states(cs)
        self.support_ = support_list(sup, len(self.classes_))
        self._index_states()
        if self._shrunk():
            sh = state["shrinkage"]
            m = finite_array(sh["m"], "shrinkage m", len(self.classes_))
            (m0, r0) = finite_array([sh["reference_m"], sh["reference_rate"]], "reference m/rate")
            if np.any(m <= 0) or not m0 > 0 or not 0 < r0 < 1:
                raise ValueError("shrinkage needs pseudo-counts > 0 and a reference rate in (0, 1)")
            ref = type(self).from_dict(sh["reference"])
            if ref._shrunk() or len(ref.classes_) != 1:
                raise ValueError("the shrinkage reference must be one unshrunk pooled curve")
            self.shrinkage_, self.reference_m_, self.reference_rate_, self.reference_ = (
                m,
                float(m0),
                float(r0),
                ref,
            )
            # older files hold none: their intervals are the class's own counts'
            mi = sh.get("interval_m")
            if mi is not None:
                mi = finite_array(mi, "shrinkage interval_m", len(self.classes_))
                if np.any(mi <= 0) or np.any(mi > m):
                    raise ValueError("interval pseudo-counts must lie in (0, m]")
            self.interval_m_ = mi

    def _dump_class_states(self, states: list) -> list:
        """Every class's state as JSON (None for a class without one); a family whose
        states share a layout may write them all in one pass."""
        return [None if s is None else self._dump_class_state(s) for s in states]

    def _load_class_states(self, saved: list) -> list:
        """Every class's saved state, validated (the inverse of :meth:`_dump_class_states`)."""
        return [None if s is None else self._load_class_state(s) for s in saved]

    def _dump_class_state(self, state: dict) -> dict:
        """One class's state as JSON (the inverse of :meth:`_load_class_state`)."""
        return to_jsonable(state)

    def _load_class_state(self, state: dict) -> dict:
        """Validate one class's saved state (raise ValueError if malformed)."""
        return state

    def _describe_classes(self) -> list[dict]:
        out: list[dict] = []
        for st, sup in zip(self.class_state_, self.support_):
            if st is None:
                out.append({"fallback": "uncalibrated (class never predicted in fitting data)"})
            else:
                out.append({**to_jsonable(st), "support": list(sup)})
        return out

    def describe(self) -> dict[str, Any]:
        """Fitted parameters; with shrinkage also the pseudo-counts and the reference."""
        d = super().describe()
        if self._shrunk():
            d["shrinkage"] = {
                "rule": self.shrinkage if isinstance(self.shrinkage, str) else "fixed",
                "reference": "same method on all classes pooled, shrunk toward the overall rate",
                "reference_rate": self.reference_rate_,
                "reference_pseudo_count": self.reference_m_,
            }
            for i, c in enumerate(self.classes_):
                d["classes"][c]["pseudo_count"] = float(self.shrinkage_[i])
        return d
