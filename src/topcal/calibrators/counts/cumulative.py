"""Cumulative confidence and its cut-off variants (paper section 7, eqs. 11-13).

Conf_Cum(S) = Hist_k([S, inf)): the fraction of true positives among the class's positives
scoring S *or better* (PhANNs' original rule). It answers "how often is a prediction with
this score or a higher one right", not the probability at S, so it overestimates confidence
at low scores.

Conf_Cum+(S) = Conf_Cum(S) for S >= theta, and Hist_k([lo, theta]) (one big bin) below
theta. ``cum-median`` takes theta = the weighted median positive score of the class;
``cum-opt`` (the paper's CwOC, Conf_Cum*) the theta among the class's observed scores that
minimises the class's top-label NLL on the fitting data (first minimiser, i.e. the lowest
such theta, on ties). A cut-off at the class's lowest observed score is no cut-off (plain
Conf_Cum); ``theta`` is then reported as the lower end of the score range.
"""

from __future__ import annotations

from typing import cast

import numpy as np

from ...data import ClassView
from ..._numeric import SortedTables, binary_nll
from ..base import finite_array
from ..score import ScoreCalibrator
from ..registry import register
from .. import shrinkage as shr
from ..shrinkage import ShrinkageConstraint

__all__ = ["Cumulative", "CumulativeMedian", "CumulativeOptimal"]

#: A lookup layout not made yet (None is a made one: a file without counts).
_UNSET = object()


class _CumulativeBase(ScoreCalibrator):
    """Shared machinery: suffix sums over the class's distinct scores.

    ``shrinkage`` ("auto", "class" or a number >= 0, default "auto") adds pseudo-counts of
    the pooled reference curve to the counts behind each value (the positives scoring >= S,
    or those <= theta below theta); 0 is the paper's estimator exactly. See
    :mod:`topcal.calibrators.shrinkage`.
    """

    step_curve = True
    tier = 2  # per-class curves, shrunk toward the pooled one by default

    _parameter_constraints = {"shrinkage": ShrinkageConstraint()}
    shrinkable = True
    #: True on a shrunk model's pooled reference (:meth:`_fit_as_reference`): its owner
    #: prepares its lookups, which keep positions only (searched by shrunk applies alone)
    _as_reference = False
    # a fit's scratch: the class fits' counts per distinct score, each class entry's pooled
    # index (_pooled_seed), the pooled counts a reference is seeded with; the lookups (made
    # on first use)
    _fit_counts = _ref_rank = _pooled_counts = None
    _tables_index = _conf_layout = _counts_layout = _UNSET
    _reference_slots = None

    def __init__(self, *, shrinkage="auto"):
        self.shrinkage = shrinkage

    def _theta_index(self, u, tp, fp, cum) -> int:  # pragma: no cover - abstract
        raise NotImplementedError

    @property
    def n_params_(self) -> int:
        return 0

    def _fit_class(self, view: ClassView, k: int) -> dict:
        w = view.tp + view.fp
        keep = w > 0
        u, inv = np.unique(view.score[keep], return_inverse=True)
        tp = np.bincount(inv, weights=view.tp[keep], minlength=u.size)
        fp = np.bincount(inv, weights=view.fp[keep], minlength=u.size)
        kept = self._fit_counts
        # a shrunk fit: its reference and cells come from these (_pooled_seed)
        if kept is not None:
            kept[k] = (tp, fp)
        return self._state_of_counts(u, tp, fp)

    def _state_of_counts(self, u, tp, fp) -> dict:
        """The state of a class from its distinct scores ``u`` (ascending) and their TP and
        FP weights."""
        # suffix sums: samples with score >= u[i]
        stp = np.cumsum(tp[::-1])[::-1]
        sp = np.cumsum((tp + fp)[::-1])[::-1]
        cum = stp / sp
        del stp  # (peak memory)
        j = self._theta_index(u, tp, fp, cum)
        if j == 0:
            # A cut-off at the lowest observed score changes nothing on the data; we read it
            # as "no cut-off" so scores below the data get Conf_Cum there, i.e. the class's
            # Conf1, rather than the lowest bin alone.
            return {
                "scores": u,
                "values": cum,
                "theta": float(self.score_range_[0]),
                "below": float(cum[0]),
                "n_above": sp,
                "n_below": float(sp[0]),
            }
        # prefix sums up to j only (the same sequential sums as the full cumsum's entry j)
        ptp = np.cumsum(tp[: j + 1])[-1]
        pp = np.cumsum(tp[: j + 1] + fp[: j + 1])[-1]
        below = float(ptp / pp)  # Hist_k([lo, theta]): scores <= theta
        return {
            "scores": u,
            "values": cum,
            "theta": float(u[j]),
            "below": below,
            "n_above": sp,
            "n_below": float(pp),
        }

    # ------------------------------------------------ shrinkage from the classes' tables
    def _fit_all_classes(self, data):
        """The default class-by-class fit; a shrunk fit keeps each class's TP and FP weights
        per distinct score until its reference is made (:meth:`_pooled_seed`), and a
        reference seeded with the pooled counts takes its one state from them (no pass over
        the rows)."""
        pooled, self._pooled_counts = self._pooled_counts, None
        if pooled is not None:
            u, tp, fp, support = pooled
            return [self._state_of_counts(u, tp, fp)], [support]
        if self._shrunk() and not self._as_reference:
            self._fit_counts = [None] * len(data.classes)
        return super()._fit_all_classes(data)

    def _fit(self, data) -> None:
        super()._fit(data)
        if (
            self._as_reference
        ):  # its owner's fit prepares its lookups once it has chosen the pseudo-counts
            return
        if (
            self._shrunk()
        ):  # the reference's shrunk value per slot (its counts layout is then dropped)
            self._reference_slots_values()
            self.reference_._tables.build()
        # the bucket grid of the class tables: built now that the fit's scratch is freed
        # (peak memory), not by the first lookup (apply time)
        self._tables.build()

    def _fit_shrinkage(self, data) -> None:
        try:
            super()._fit_shrinkage(data)
        finally:  # the fit's own scratch: never kept by the model
            self._fit_counts = self._ref_rank = None

    def _fit_reference(self, pooled, data):
        """The pooled reference (:meth:`ScoreCalibrator._fit_reference`), its one state
        taken from the class fits' counts where :meth:`_pooled_seed` can make them."""
        ref = type(self)(**{**self.get_params(), "shrinkage": 0})
        ref._fit_as_reference(pooled, self._pooled_seed(data))
        return ref

    def _fit_as_reference(self, pooled, seed) -> None:
        """Fit as a shrunk model's pooled reference on the ``pooled`` rows
        (``keep="model"``), from the pooled counts ``seed`` (or the rows, where None); its
        owner prepares its lookups."""
        self._as_reference, self._pooled_counts = True, seed
        try:
            self.fit(pooled, keep="model")
        finally:
            self._pooled_counts = None

    def _pooled_seed(self, data):
        """The pooled counts from the classes' own (a merge of K sorted runs, not a sort of
        all rows).

        The pooled curve's distinct scores are the union of the classes', and its TP and FP
        weight at a score the sum of the classes' there. Where no score is shared by two
        classes every pooled weight is one class's, summed over the same rows in the same
        order as a fit on the pooled rows sums them; where scores are shared the sums are
        exact when every weight is a whole number (counts: exact below 2^53, which the
        data's sample total check guarantees), so the pooled state is the one
        :meth:`_fit_class` makes from the pooled rows, bit for bit. Rows with fractional
        weights and shared scores keep the pooled fit over the rows. Each class entry's
        index among the pooled scores is kept for :meth:`_cell_sums`.
        """
        kept = self._fit_counts
        states = self.class_state_
        if kept is None or not any(st is not None for st in states):
            return None
        has = [k for k, st in enumerate(states) if st is not None]
        cat = np.concatenate([states[k]["scores"] for k in has])
        order = np.argsort(cat, kind="stable")  # K sorted runs: timsort merges them
        srt = cat[order]
        del cat
        new = np.empty(srt.size, dtype=bool)
        new[:1] = True
        np.not_equal(srt[1:], srt[:-1], out=new[1:])
        shared = not new.all()
        tps = np.concatenate([kept[k][0] for k in has])
        fps = np.concatenate([kept[k][1] for k in has])
        if shared:
            w = (data.tp, data.fp)
            if not all(np.array_equal(np.floor(a), a) for a in w):
                return None  # fractional weights summed across classes: the fit sums the rows
            idx = np.cumsum(new) - 1
            u0 = srt[new]
            tp0 = np.bincount(idx, weights=tps[order], minlength=u0.size)
            fp0 = np.bincount(idx, weights=fps[order], minlength=u0.size)
            rank = np.empty(order.size, dtype=_index_dtype(order.size))
            rank[order] = idx
            del idx
        else:
            u0, tp0, fp0 = srt, tps[order], fps[order]
            rank = np.empty(order.size, dtype=_index_dtype(order.size))
            rank[order] = np.arange(order.size)
        sup = [self.support_[k] for k in has]
        support = (min(s[0] for s in sup), max(s[1] for s in sup))
        self._ref_rank = rank
        return u0, tp0, fp0, support

    def _cell_sums(self, ref, pred, score, tp, fp):
        """:meth:`ScoreCalibrator._cell_sums` from the class fits' own weights per distinct
        score and each class entry's pooled index (:meth:`_pooled_seed`): no lookup of the
        rows in the class tables nor of the cells in the reference's. The same sums: a row's
        cell is its score's key, whose weights the class fit summed over the same rows in
        the same order."""
        kept, rank = self._fit_counts, self._ref_rank
        self._fit_counts = self._ref_rank = None
        if kept is None or rank is None:
            return super()._cell_sums(ref, pred, score, tp, fp)
        counts, counts0 = self._counts, ref._counts
        st0 = ref.class_state_[0]
        p0, ins0 = _cut_slot(st0)
        u0, cut0 = st0["scores"], np.nextafter(st0["theta"], -np.inf)
        end0 = u0.size + ins0  # the reference's slot after its last key (+inf)
        K = len(self.classes_)
        w_tp, w_fp = np.zeros(counts.shape[0]), np.zeros(counts.shape[0])
        key0 = np.full(
            counts.shape[0], end0, dtype=_index_dtype(end0 + 1)
        )  # int32 below 2^31 slots (memory)
        cells = np.ones(K, dtype=np.int64)
        a = b = 0  # a: this class's first slot; b: its first entry in rank
        for k, st in enumerate(self.class_state_):
            if st is None:
                a += 1
                continue
            u = st["scores"]
            p, ins = _cut_slot(st)
            r = rank[b : b + u.size]
            b += u.size
            # the key of u[i] among the reference's keys
            slot0 = r + ((r >= p0) if ins0 else 0)
            for w, src in ((w_tp, kept[k][0]), (w_fp, kept[k][1])):
                w[a : a + p] = src[:p]
                w[a + p + ins : a + u.size + ins] = src[p:]
            key0[a : a + p] = slot0[:p]
            key0[a + p + ins : a + u.size + ins] = slot0[p:]
            if ins:  # the class's own key below theta, no score of its data
                cut = np.nextafter(st["theta"], -np.inf)
                key0[a + p] = int(np.searchsorted(u0, cut, side="left")) + int(
                    bool(ins0) and cut0 < cut
                )
            cells[k] = u.size + ins + 1
            a += u.size + ins + 1
        cell_class = np.repeat(np.arange(K, dtype=_index_dtype(K)), cells)
        return (
            w_tp,
            w_fp,
            counts[:, 0],
            counts[:, 1],
            cell_class,
            key0,
            counts0[:, 0],
            counts0[:, 1],
        )

    def _load_class_state(self, state: dict) -> dict:
        u = finite_array(state["scores"], "scores")
        v = finite_array(state["values"], "values", u.size)
        (theta, below) = finite_array([state["theta"], state["below"]], "theta/below")
        if (
            u.size == 0
            or np.any(np.diff(u) <= 0)
            or np.any((v < 0) | (v > 1))
            or not 0 <= below <= 1
        ):
            raise ValueError("cumulative state is inconsistent")
        out = {"scores": u, "values": v, "theta": float(theta), "below": float(below)}
        if "n_above" in state:  # the counts behind the values (files since shrinkage)
            out["n_above"] = finite_array(state["n_above"], "n_above", u.size)
            (out["n_below"],) = finite_array([state["n_below"]], "n_below")
        return out

    def _index_states(self) -> None:
        """Every class's lookup keys end to end, with a bucket grid (:class:`SortedTables`)
        to search them.

        A lookup is then one bucket computation and a gather or two per row, for all rows of
        all classes together: no sort of the rows and no binary search in a long table (the
        reference's table holds every distinct score of the fitting data). A class's keys
        are its scores and the float just below theta (:func:`_lookup_keys`), so the key
        interval of a score tells both its entry and whether it lies below theta: each slot
        holds the value the score takes there, Conf (:attr:`_conf`) and the (TP count,
        count) pair of its local counts (:attr:`_counts`), the products the per-row code
        forms. Those two layouts are built on first use (memory: a shrunk model needs only
        the counts, its reference only its shrunk values, an unshrunk fit only Conf), and so
        are the tables (:attr:`_tables`; a fit makes them at its end, :meth:`_fit`). Classes
        without a state get an empty table (zeros); their rows are handled by the callers.
        """
        states = self.class_state_
        self._has_state = np.array([s is not None for s in states], dtype=bool)
        self._tables_index = self._conf_layout = self._counts_layout = _UNSET

    @property
    def _tables(self) -> SortedTables:
        """The lookup tables (:meth:`_index_states`), made on first use: a fit lays out its
        counts (:meth:`_layout`, from the tables' sizes alone) and makes them at its end,
        when its scratch is freed (peak memory)."""
        if self._tables_index is _UNSET:
            size = self._table_sizes()
            offsets = np.concatenate([[0], np.cumsum(size)])
            keys = np.empty(int(offsets[-1]))
            for st, a in zip(
                self.class_state_, offsets.tolist()
            ):  # _lookup_keys' keys, written in place
                if st is not None:
                    u = st["scores"]
                    p, ins = _cut_slot(st)
                    keys[a : a + p] = u[:p]
                    keys[a + p] = np.nextafter(st["theta"], -np.inf)
                    keys[a + p + ins : a + u.size + ins] = u[p:]
            # the class tables keep a (position, entry) pair per bucket (one gather per
            # lookup); the pooled reference's, searched by shrunk applies only, the position
            # (a quarter of the memory)
            self._tables_index = SortedTables(keys, offsets, paired=not self._as_reference)
        return cast(SortedTables, self._tables_index)  # (no longer _UNSET)

    def _table_sizes(self) -> np.ndarray:
        """Every class's number of lookup keys (:func:`_lookup_keys`; 0 without a state)."""
        return np.array(
            [
                0 if st is None else st["scores"].size + _cut_slot(st)[1]
                for st in self.class_state_
            ],
            dtype=np.int64,
        )

    def _layout(self, counts: bool):
        """Conf per lookup slot, or its (TP count, count) pair (``counts``), laid out for
        the tables.

        Written class by class into the layout (:meth:`SortedTables.slot_starts`) with
        slices: a class's keys up to and including its key below theta
        (:func:`_lookup_keys`) lie below theta and take the one bin's value, the rest are
        its scores from the first above theta on, each with its own entry, and the slot
        after the last repeats the last entry (no per-key index arrays and no second copy of
        the layout, peak memory)."""
        size = self._table_sizes()
        start = SortedTables.slot_starts(size).tolist()
        total = int(size.sum()) + size.size
        out = np.zeros((total, 2) if counts else total)
        for k, st in enumerate(self.class_state_):
            if st is None:
                continue
            p, ins = _cut_slot(st)
            a, m, b = (
                start[k],
                start[k] + p + 1,
                start[k] + int(size[k]),
            )  # below: [a, m), above: [m, b)
            e0 = p + 1 - ins  # the first entry above theta
            v = st["values"]
            if counts:
                n = st["n_above"]
                out[a:m, 1] = st["n_below"]
                out[a:m, 0] = st["below"] * st["n_below"]
                out[m:b, 1] = n[e0:]
                np.multiply(v[e0:], n[e0:], out=out[m:b, 0])
                out[b] = (v[-1] * n[-1], n[-1])
            else:
                out[a:m] = st["below"]
                out[m:b] = v[e0:]
                out[b] = v[-1]
        return out

    @property
    def _conf(self) -> np.ndarray:
        if self._conf_layout is _UNSET:
            self._conf_layout = self._layout(counts=False)
        return cast(np.ndarray, self._conf_layout)  # (no longer _UNSET)

    @property
    def _counts(self):
        """The (TP count, count) layout, or None for files before shrinkage (no counts
        stored)."""
        if self._counts_layout is _UNSET:
            ok = all("n_above" in s for s in self.class_state_ if s is not None)
            self._counts_layout = self._layout(counts=True) if ok else None
        return self._counts_layout

    def _drop_counts_layout(self) -> None:
        """Forget the (TP count, count) layout (rebuilt if asked for again)."""
        self._counts_layout = _UNSET

    def _predict_class(self, state: dict, score: np.ndarray) -> np.ndarray:
        u = state["scores"]
        i = np.minimum(np.searchsorted(u, score, side="left"), u.size - 1)
        cum = state["values"][i]
        return np.where(score >= state["theta"], cum, state["below"])

    def _predict_rows(self, pred, score):
        """Unshrunk Conf of every row's own class in one lookup (rows of classes without a
        state: the uncalibrated score, as :meth:`_predict_scores` gives them)."""
        score = np.asarray(score, dtype=np.float64)
        out = self._conf[self._tables.positions(score, pred)]
        if not self._has_state.all():
            none = ~self._has_state[pred]
            out[none] = self._uncalibrated(score[none])
        return out

    def _local_counts(self, k: int, score: np.ndarray):
        return self._local_counts_rows(k, score)

    def _counts_stored(self) -> bool:
        return self._counts is not None

    def _local_counts_rows(self, pred, score):
        """:meth:`_local_counts` of every row's own class (``pred`` an int array, or one
        class for all rows), all classes in one lookup and one gather (rows of classes
        without a state: 0, 0)."""
        tn = np.take(self._counts, self._tables.positions(score, pred), axis=0)
        return tn[:, 0], tn[:, 1]

    #: The suffix counts change at every distinct score: choose the pseudo-count on runs of
    #: cells with counts within 1% (exact below 100; docs/shrinkage.md).
    count_run_width = shr.COUNT_RUN_WIDTH

    def _count_keys(self, pred, score):
        """(slot of every row in the tables laid end to end, TP count and count per slot,
        class per slot, score per slot; None, None for one class ``pred``). A slot is a
        class's lookup key (a distinct score of its fitting data, or the float below theta)
        or the slot after its last: a fitting row's slot is the key equal to its score; the
        slot after the last gets +inf."""
        counts = (
            self._counts
        )  # built first: the rows' positions are not held meanwhile (peak memory)
        cell = self._tables.positions(np.asarray(score, dtype=np.float64), pred)
        # one class for all rows (the reference): no per-slot class or score
        if np.ndim(pred) == 0:
            return cell, counts[:, 0], counts[:, 1], None, None
        keys = [np.zeros(0) if st is None else _lookup_keys(st)[0] for st in self.class_state_]
        per_class = np.array([k.size + 1 for k in keys])
        slot_score = np.concatenate([np.append(k, np.inf) for k in keys])
        return (
            cell,
            counts[:, 0],
            counts[:, 1],
            np.repeat(np.arange(per_class.size), per_class),
            slot_score,
        )

    def _reference(self, score: np.ndarray) -> np.ndarray:
        """The reference curve at every score: its shrunk value per table slot, worked out
        once (the same operations on the same counts as per row) and gathered."""
        slots = self._reference_slots_values()
        return slots[self.reference_._tables.positions(np.asarray(score, dtype=np.float64), 0)]

    def _reference_slots_values(self) -> np.ndarray:
        """The reference's shrunk value per slot of its table (made at the end of a fit, or
        by the first lookup after a load); the reference then drops its counts layout
        (rebuilt if asked for)."""
        ref = self.reference_
        key = (ref._tables, self.reference_m_, self.reference_rate_)
        cache = self._reference_slots
        if (
            cache is None or cache[0] is not key[0] or cache[1:3] != key[1:]
        ):  # a new fit or load: new tables
            counts = ref._counts
            ref._drop_counts_layout()  # kept as its shrunk values only (rebuilt if asked for)
            slots = shr.shrink(
                counts[:, 0], counts[:, 1], self.reference_rate_, self.reference_m_
            )
            del counts
            cache = self._reference_slots = (*key, slots)
        return cache[-1]

    def _describe_classes(self) -> list[dict]:
        out: list[dict] = []
        for st, sup in zip(self.class_state_, self.support_):
            if st is None:
                out.append(
                    {"fallback": "uncalibrated (class never predicted in fitting data)"}
                )
                continue
            out.append(
                {
                    "theta": st["theta"],
                    "below_theta": st["below"],
                    "n_distinct_scores": int(st["scores"].size),
                    "conf_at_min_score": float(st["values"][0]),
                    "conf_at_max_score": float(st["values"][-1]),
                    "support": list(sup),
                }
            )
        return out


def _index_dtype(size: int):
    """int32 for indices below ``size`` where it is below 2^31 (half the memory of int64),
    else int64."""
    return np.int32 if size < np.iinfo(np.int32).max else np.int64


def _cut_slot(state: dict) -> tuple[int, int]:
    """Where a class's key below theta goes among its scores: (p, 1) if it is inserted at p,
    (p, 0) if it is already the score at p (:func:`_lookup_keys`)."""
    u = state["scores"]
    cut = np.nextafter(state["theta"], -np.inf)
    p = int(np.searchsorted(u, cut, side="left"))
    return p, int(not (p < u.size and u[p] == cut))


def _lookup_keys(state: dict):
    """A class's lookup keys and, per key, its table entry and whether it lies at or above
    theta.

    The keys are the class's scores and ``cut``, the largest float below theta. A score s
    falls in one key interval (keys[e - 1], keys[e]] (``searchsorted(keys, s, side="left")
    == e``); no score of the class lies strictly inside one, so ``searchsorted(scores, s,
    side="left")`` is the same for the whole interval (``entry``), and since ``cut`` is a
    key, s >= theta (s > cut) holds for all of it or for none (``above``). Above the last
    key, s is above theta at the last entry.
    """
    u = state["scores"]
    cut = np.nextafter(state["theta"], -np.inf)
    p, ins = _cut_slot(state)
    if not ins:  # already a score
        keys, entry = u, np.arange(u.size)
    else:  # inserted at p, where searchsorted(u, cut) == p (clipped to the last entry)
        keys = np.insert(u, p, cut)
        entry = np.concatenate([np.arange(p), [min(p, u.size - 1)], np.arange(p, u.size)])
    return keys, entry, keys > cut


@register
class Cumulative(_CumulativeBase):
    """Conf_Cum(S) = Hist_k([S, inf)) (paper eq. 11): accuracy of scores >= S.

    Above the highest observed score the value at that score is held; below the lowest, it
    is the class's Conf1. Fitted state per class: the distinct scores and Conf_Cum at each
    (theta is the lowest score: no cut-off).
    """

    name = "cum"
    summary = "cumulative confidence Hist_k([S, inf)) (PhANNs' original rule, paper eq. 11)"

    def _theta_index(self, u, tp, fp, cum) -> int:
        return 0


@register
class CumulativeMedian(_CumulativeBase):
    """Conf_Cum+ with theta = weighted median positive score of the class (paper eq. 12).

    theta is the lowest observed score at which the cumulative weight of the class's
    positives reaches half of their total.
    """

    name = "cum-median"
    summary = "Conf_Cum above the class's median score, one bin below it (paper eq. 12)"

    def _theta_index(self, u, tp, fp, cum) -> int:
        cw = np.cumsum(tp + fp)
        return int(np.searchsorted(cw, 0.5 * cw[-1], side="left"))


@register
class CumulativeOptimal(_CumulativeBase):
    """CwOC, Conf_Cum* (paper eq. 13): theta minimising the class's top-label NLL.

    Candidates are the class's distinct observed scores (theta = lowest score is plain
    Conf_Cum). For theta = u_j the loss is the NLL of Conf_Cum on the samples with S >= u_j
    plus that of the constant Hist_k([lo, u_j]) on those with S < u_j; all candidates cost
    one pass (prefix/suffix sums). Confidences are clipped to [1e-12, 1 - 1e-12] in the
    loss, as in :func:`topcal.metrics.nll`.
    """

    name = "cum-opt"
    summary = "cumulative confidence with the NLL-optimal cut-off theta (CwOC, paper eq. 13)"

    @property
    def n_params_(self) -> int:
        return sum(s is not None for s in self.class_state_)

    def _theta_index(self, u, tp, fp, cum) -> int:
        above = np.cumsum(binary_nll(tp, fp, cum)[::-1])[::-1]  # loss of rows with index >= j
        ptp = np.cumsum(tp)
        pp = np.cumsum(tp + fp)
        below_val = ptp / pp  # Hist over scores <= u_j
        # the weight strictly below u_j, shifted in place (peak memory: no copies)
        pp -= ptp
        for lt in (ptp, pp):
            lt[1:] = lt[:-1]
            lt[:1] = 0.0
        loss = binary_nll(ptp, pp, below_val)
        loss += above  # above + loss: a sum's operands commute exactly
        return int(np.argmin(loss))
