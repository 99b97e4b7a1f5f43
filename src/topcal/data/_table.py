"""The one validated data object, :class:`TopLabelData` (see :mod:`topcal.data`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Iterator, Sequence

import numpy as np

from .. import _recycle
from .._numeric import row_max
from .._typing import ArrayLike
from ..errors import DataError
from ._bins import check_bins
from ._checks import (
    LOG_PROB_FLOOR,
    SUM_TOLERANCE,
    as_float_array,
    as_matrix,
    check_finite_rows,
    check_range,
    check_row_index,
    check_scores_in_range,
    row_blocks,
)
from ._labels import check_classes, encode_labels, label_names, preview, sorted_names
from ._rows import ClassView, class_order, rows_by_class


@dataclass(frozen=True, eq=False, repr=False)
class TopLabelData:
    """Validated top-label data: predicted class, top score and correctness per row.

    Build it with one of the constructors (:meth:`from_probs`, :meth:`from_logits`,
    :meth:`from_scores`, :meth:`from_binned`) or with :func:`topcal.io.read_data`; the
    fields are then trusted by every method.

    Attributes
    ----------
    classes : tuple of str, length K
        Class names; index i of every integer code refers to ``classes[i]``.
    pred : ndarray of int64, shape (n,)
        Predicted class k(X) of each row.
    score : ndarray of float64, shape (n,)
        Top score S(X) on the declared scale (bin midpoint for binned rows).
    score_range : (float, float)
        The declared scale of the scores.
    tp, fp : ndarray of float64, shape (n,), or None
        True-positive and false-positive weight of each row (counts for binned rows); None
        when the data carries no labels (``apply``).
    labels : ndarray of int64, shape (n,), or None
        True class of each sample (per-sample labelled data only).
    full : ndarray of float64, shape (n, K), or None
        The full score vector Y(X), as given.
    full_kind : {"probs", "logits"} or None
        What ``full`` holds.
    bin_edges : ndarray of float64, shape (n, 2), or None
        For binned data, each row's bin (lo, hi].
    """

    classes: tuple[str, ...]
    pred: np.ndarray
    score: np.ndarray
    score_range: tuple[float, float]
    tp: np.ndarray | None = None
    fp: np.ndarray | None = None
    labels: np.ndarray | None = None
    full: np.ndarray | None = None
    full_kind: str | None = None
    bin_edges: np.ndarray | None = None

    # ------------------------------------------------------------------ build
    @classmethod
    def from_probs(
        cls,
        probs: ArrayLike,
        labels: ArrayLike | None = None,
        classes: Sequence | None = None,
        *,
        renormalize: bool = False,
        atol: float = SUM_TOLERANCE,
    ) -> "TopLabelData":
        """Build from class probabilities Y(X), shape (n, K).

        The predicted class is the argmax (the first one on ties) and the top score its
        probability, so ``score_range`` is (0, 1).

        Parameters
        ----------
        probs : array-like of shape (n, K)
            Non-negative rows summing to 1 (within ``atol``).
        labels : array-like of shape (n,), optional
            True classes, as names in ``classes`` or integer indices. Omit for data to be
            calibrated only (``predict``/``apply``).
        classes : sequence of str, optional
            Names of the K columns. Default: the sorted distinct string labels, or
            "0".."K-1".
        renormalize : bool, default False
            Divide each row by its sum instead of rejecting rows that do not sum to 1.
        atol : float, default 1e-4
            Tolerance on |row sum - 1|.
        """
        p = as_matrix(probs, "probs")
        # one pass over the matrix, block by block: finite, non-negative, row sums
        sums = np.empty(p.shape[0])
        for a, b in row_blocks(*p.shape):
            blk = p[a:b]
            # non-finite sums are checked next
            with np.errstate(over="ignore", invalid="ignore"):
                sums[a:b] = blk.sum(axis=1)
            check_finite_rows(blk, sums[a:b], "probs", a)
            if blk.min() < 0:
                r, c = np.argwhere(blk < 0)[0]
                raise DataError(
                    f"probs has a negative value ({blk[r, c]}) at row {a + r + 1}, column "
                    f"{c + 1}; probabilities must be >= 0 (pass logits with from_logits / "
                    "--logits instead)"
                )
        if renormalize:
            zero = sums <= 0
            if zero.any():
                raise DataError(
                    f"probs row {int(np.flatnonzero(zero)[0]) + 1} sums to 0 and cannot be "
                    "renormalised"
                )
            p = p / sums[:, None]
        else:
            off = np.abs(sums - 1.0) > atol
            if off.any():
                i = int(np.flatnonzero(off)[0])
                raise DataError(
                    f"probs row {i + 1} sums to {sums[i]:.6g}, not 1 (tolerance {atol}); "
                    "pass renormalize=True (--renormalize) to divide each row by its sum, "
                    "or from_logits (--logits) if these are logits"
                )
        pred = np.argmax(p, axis=1).astype(np.int64)
        score = p[np.arange(p.shape[0]), pred]
        return cls._build_full(p, "probs", pred, np.clip(score, 0.0, 1.0), labels, classes)

    @classmethod
    def from_logits(
        cls,
        logits: ArrayLike,
        labels: ArrayLike | None = None,
        classes: Sequence | None = None,
    ) -> "TopLabelData":
        """Build from logits (unnormalised log-probabilities), shape (n, K).

        The predicted class is the argmax of the logits, the top score its softmax
        probability (``score_range`` (0, 1)). The logits are kept as the full vector so
        temperature scaling works on them directly.
        """
        z = as_matrix(logits, "logits")
        pred = np.argmax(z, axis=1).astype(np.int64)
        # the softmax's top entry, 1 / sum_j exp(z_j - max z), block by block (no n x K
        # softmax)
        score = np.empty(z.shape[0])
        for a, b in row_blocks(*z.shape):
            blk = z[a:b]
            # non-finite sums are checked next
            with np.errstate(over="ignore", invalid="ignore"):
                row_sums = blk.sum(axis=1)
            check_finite_rows(blk, row_sums, "logits", a)
            e = np.exp(blk - row_max(blk, keepdims=True))
            score[a:b] = 1.0 / e.sum(axis=1)
        return cls._build_full(z, "logits", pred, score, labels, classes)

    @classmethod
    def _build_full(cls, full, kind, pred, score, labels, classes) -> "TopLabelData":
        n, k = full.shape
        if classes is not None:
            classes = check_classes(classes)
            if len(classes) != k:
                raise DataError(
                    f"{kind} has {k} columns but {len(classes)} class names were given; "
                    "give one name per column, in column order"
                )
        if labels is None:
            classes = classes or tuple(str(i) for i in range(k))
            return cls(classes, pred, score, (0.0, 1.0), full=full, full_kind=kind)
        lab_arr = np.asarray(labels)
        if lab_arr.ndim == 1 and lab_arr.shape[0] != n:
            raise DataError(
                f"labels has {lab_arr.shape[0]} rows but {kind} has {n}; they must match "
                "row for row"
            )
        codes, classes = encode_labels(lab_arr, classes, "labels", n_hint=k)
        return cls._labelled(
            classes, pred, score, (0.0, 1.0), codes, full=full, full_kind=kind
        )

    @classmethod
    def from_scores(
        cls,
        pred: ArrayLike,
        score: ArrayLike,
        labels: ArrayLike | None = None,
        classes: Sequence | None = None,
        *,
        score_range: tuple[float, float] = (0.0, 1.0),
    ) -> "TopLabelData":
        """Build from a predicted class and a top score per sample.

        Use this when only the top score is known, or when it is on another scale
        (``score_range=(0, 10)`` for PhANNs' sum of ten softmax outputs; a random forest's
        vote fraction is on (0, 1)).

        Parameters
        ----------
        pred : array-like of shape (n,)
            Predicted class, as names or integer indices.
        score : array-like of shape (n,)
            Top score of each sample, inside ``score_range``.
        labels : array-like of shape (n,), optional
            True classes (names or indices, like ``pred``).
        classes : sequence of str, optional
            All class names. Default: the distinct values of pred and labels (sorted;
            numerically when all are integers). With names given, integer pred/labels are
            indices into them unless the names are themselves integers (then they are
            matched as names).
        score_range : (lo, hi), default (0, 1)
            The scale of the scores; travels with the data and the models.
        """
        lo, hi = check_range(score_range)
        s = as_float_array(score, "score", 1)
        p_arr = np.asarray(pred)
        if p_arr.ndim != 1 or p_arr.shape[0] != s.shape[0]:
            raise DataError(
                f"pred has shape {p_arr.shape} but score has {s.shape[0]} rows; they must "
                "match row for row"
            )
        if classes is not None:
            classes = check_classes(classes)
        # no names given: the distinct values of pred (and labels) are the classes, none
        # added
        else:
            parts = [label_names(p_arr, "pred")]
            if labels is not None:
                parts.append(label_names(np.asarray(labels), "labels"))
            classes = sorted_names(np.concatenate(parts))
        # classes is a tuple of names from here; the checker keeps the argument's declared
        # type
        pred_codes, classes = encode_labels(p_arr, classes, "pred")
        if labels is not None:
            lab_arr = np.asarray(labels)
            if lab_arr.ndim == 1 and lab_arr.shape[0] != s.shape[0]:
                raise DataError(
                    f"labels has {lab_arr.shape[0]} rows but score has {s.shape[0]}; they "
                    "must match row for row"
                )
            codes, classes2 = encode_labels(lab_arr, classes, "labels")  # type: ignore[arg-type]
            if len(classes2) > len(classes):  # integer labels widened the class list
                classes = classes2
                pred_codes, _ = encode_labels(p_arr, classes, "pred")  # type: ignore[arg-type]
        check_scores_in_range(s, lo, hi)
        s = np.clip(s, lo, hi)
        if labels is None:
            return cls(classes, pred_codes, s, (lo, hi))  # type: ignore[arg-type]
        return cls._labelled(classes, pred_codes, s, (lo, hi), codes)

    @classmethod
    def _labelled(cls, classes, pred, score, score_range, codes, **kw) -> "TopLabelData":
        correct = (codes == pred).astype(np.float64)
        return cls(
            classes, pred, score, score_range, tp=correct, fp=1.0 - correct, labels=codes, **kw
        )

    @classmethod
    def from_binned(
        cls,
        predicted_class: ArrayLike,
        bin_lo: ArrayLike,
        bin_hi: ArrayLike,
        tp: ArrayLike,
        fp: ArrayLike,
        classes: Sequence | None = None,
        *,
        score_range: tuple[float, float] | None = None,
    ) -> "TopLabelData":
        """Build from per-class, per-bin true/false-positive counts.

        Each row is one score bin (bin_lo, bin_hi] of one predicted class, with ``tp``
        samples predicted as that class and right, ``fp`` predicted as it and wrong (the
        form of ``topcal.datasets.load_phanns()``). The row's score is the bin midpoint;
        counts act as weights, so every method fits binned data with the same code as
        per-sample data.

        Parameters
        ----------
        predicted_class : array-like of shape (n,)
            Class name (or index) of each row.
        bin_lo, bin_hi : array-like of shape (n,)
            Bin edges, ``bin_lo < bin_hi``.
        tp, fp : array-like of shape (n,)
            Non-negative counts (or weights).
        classes : sequence of str, optional
            All class names, default the distinct names in order of appearance.
        score_range : (lo, hi), optional
            The scale of the scores, default (0, 1) (as for per-sample data; never guessed
            from the bins, which would change the uncalibrated baseline). Every bin must lie
            inside it.
        """
        # classes: a tuple of names (check_bins); the checker keeps the argument's declared
        # type
        classes, codes, lo_e, hi_e, tp_w, fp_w, (lo, hi) = check_bins(
            predicted_class, bin_lo, bin_hi, tp, fp, classes, score_range
        )
        mid = np.clip(0.5 * (lo_e + hi_e), lo, hi)
        return cls(
            classes,  # type: ignore[arg-type]
            codes,
            mid,
            (lo, hi),
            tp=tp_w,
            fp=fp_w,
            bin_edges=np.column_stack([lo_e, hi_e]),
        )

    @classmethod
    def concat(cls, parts: Iterable["TopLabelData"]) -> "TopLabelData":
        """Stack datasets with the same classes, scale and form (e.g. add new samples)."""
        parts = list(parts)
        if not parts:
            raise DataError("concat needs at least one dataset")
        first = parts[0]
        for i, p in enumerate(parts[1:], 1):
            if p.classes != first.classes:
                raise DataError(
                    f"dataset {i} has classes {preview(p.classes)}, dataset 0 has "
                    f"{preview(first.classes)}; they must match"
                )
            if p.score_range != first.score_range:
                raise DataError(
                    f"dataset {i} has score range {p.score_range}, dataset 0 has "
                    f"{first.score_range}; they must match"
                )
            for attr in ("tp", "labels", "full", "bin_edges"):
                if (getattr(p, attr) is None) != (getattr(first, attr) is None):
                    raise DataError(
                        f"dataset {i} and dataset 0 differ in whether they have {attr}; "
                        f"concatenate like with like"
                    )
            if p.full_kind != first.full_kind:
                raise DataError(
                    f"dataset {i} holds {p.full_kind}, dataset 0 holds {first.full_kind}; "
                    "they must match"
                )

        def cat(attr):
            if getattr(first, attr) is None:
                return None
            arrays = [getattr(p, attr) for p in parts]
            if attr != "full" or len(arrays) < 2:
                return np.concatenate(arrays)
            # the score vectors: in a recycled buffer where one is free (_recycle.py)
            shape = (sum(a.shape[0] for a in arrays), *arrays[0].shape[1:])
            return np.concatenate(arrays, out=_recycle.empty(shape, np.result_type(*arrays)))

        return cls(
            first.classes,
            cat("pred"),
            cat("score"),
            first.score_range,
            tp=cat("tp"),
            fp=cat("fp"),
            labels=cat("labels"),
            full=cat("full"),
            full_kind=first.full_kind,
            bin_edges=cat("bin_edges"),
        )

    # -------------------------------------------------------------- queries
    @property
    def n_classes(self) -> int:
        """Number of classes K."""
        return len(self.classes)

    @property
    def n_rows(self) -> int:
        """Number of rows (samples, or bins for binned data)."""
        return int(self.pred.shape[0])

    def __len__(self) -> int:
        return self.n_rows

    @property
    def is_binned(self) -> bool:
        """True for data built from per-bin counts."""
        return self.bin_edges is not None

    @property
    def has_labels(self) -> bool:
        """True when each row says how many of its samples were right (tp/fp)."""
        return self.tp is not None

    @property
    def has_full(self) -> bool:
        """True when the full score vector Y(X) is known (temperature scaling needs it)."""
        return self.full is not None

    @property
    def n_samples(self) -> float:
        """Total sample weight (number of samples; sum of counts for binned data)."""
        if self.tp is None:
            return float(self.n_rows)
        return float(self.tp.sum() + self.fp.sum())

    def normalized_score(self) -> np.ndarray:
        """Scores rescaled to [0, 1] by the declared range: (S - lo) / (hi - lo)."""
        lo, hi = self.score_range
        return (self.score - lo) / (hi - lo)

    def require_labels(self, what: str) -> None:
        """Raise a DataError naming ``what`` if the data has no labels."""
        if not self.has_labels:
            raise DataError(
                f"{what} needs labelled data (true classes, or tp/fp counts); "
                "add a label column (--label-column) or use binned tp/fp counts"
            )

    def require_full(self, what: str, hint: str | None = None) -> None:
        """Raise a DataError naming ``what`` if the full score vector is unknown; ``hint``
        says what to do."""
        if not self.has_full:
            raise DataError(
                f"{what} needs the full score vector Y(X) (probabilities or logits), but "
                "this data has only top scores; "
                + (
                    hint
                    or "use a score-based method (hist, cum, kde-mon2, ...) or the binary "
                    "temperature variant"
                )
            )

    def class_view(self, k: int) -> ClassView:
        """The positives of predicted class ``k`` (rows with pred == k)."""
        self.require_labels("splitting into TP/FP")
        idx = np.flatnonzero(self.pred == k)
        return ClassView(self.score[idx], self.tp[idx], self.fp[idx], idx)

    def class_support(
        self, k: int, view: ClassView | None = None
    ) -> tuple[float, float] | None:
        """Where class ``k``'s positives lie: (lowest, highest) score with weight, or None
        if it has none.

        For binned data the range spans the bins' edges. ``view`` (this data's
        :meth:`class_view` of ``k``) saves splitting again.
        """
        v = self.class_view(k) if view is None else view
        has = (v.tp + v.fp) > 0
        if not np.any(has):
            return None
        if self.is_binned:
            e = self.bin_edges[v.index[has]]
            return float(e[:, 0].min()), float(e[:, 1].max())
        s = v.score[has]
        return float(s.min()), float(s.max())

    def class_supports(self) -> list:
        """:meth:`class_support` of every class k = 0..K-1, from one sort of the rows with
        weight (no per-class split: the minimum and maximum of each class's block)."""
        self.require_labels("splitting into TP/FP")
        k = self.n_classes
        idx = np.flatnonzero((self.tp + self.fp) > 0)
        out: list = [None] * k
        if not idx.size:
            return out
        pred = self.pred[idx]
        counts = np.bincount(pred, minlength=k)
        order = idx[class_order(pred, k)]
        has = np.flatnonzero(counts)
        starts = (np.cumsum(counts) - counts)[has]
        if self.is_binned:
            lo, hi = self.bin_edges[order, 0], self.bin_edges[order, 1]
        else:
            lo = hi = self.score[order]
        lows, highs = np.minimum.reduceat(lo, starts), np.maximum.reduceat(hi, starts)
        for c, a, b in zip(has, lows, highs):
            out[c] = (float(a), float(b))
        return out

    def class_views(self) -> Iterator[ClassView]:
        """:meth:`class_view` of every class k = 0..K-1 in order, from one sort of the rows."""
        self.require_labels("splitting into TP/FP")
        for _, idx in rows_by_class(self.pred, self.n_classes, skip_empty=False):
            yield ClassView(self.score[idx], self.tp[idx], self.fp[idx], idx)

    def class_counts(self) -> tuple[np.ndarray, np.ndarray]:
        """(|TP_k|, |FP_k|) for every class k, as float arrays of length K."""
        self.require_labels("counting true and false positives")
        k = self.n_classes
        return (
            np.bincount(self.pred, weights=self.tp, minlength=k),
            np.bincount(self.pred, weights=self.fp, minlength=k),
        )

    def log_probs(self, rows: slice | None = None) -> np.ndarray:
        """log Y(X), shape (n, K): log-softmax of logits, or log of probabilities with exact
        zeros floored at :data:`LOG_PROB_FLOOR`. With ``rows`` (a slice), those rows only:
        the numbers of ``log_probs()[rows]`` (each row's are its own), without the (n, K)
        array (a fit that reads the scores block by block, or a strided subsample)."""
        self.require_full("log-probabilities")
        full = self.full if rows is None else self.full[rows]
        out = _recycle.empty(full.shape)  # one n x K array (at 10^5 x 1,000: 0.8 GB), recycled
        if self.full_kind == "logits":
            np.subtract(full, row_max(full, keepdims=True), out=out)
            lse = np.zeros(full.shape[0])
            for a in range(0, full.shape[0], 4096):  # the exponentials a block at a time
                lse[a : a + 4096] = np.exp(out[a : a + 4096]).sum(axis=1)
            out -= np.log(lse)[:, None]
            return out
        np.maximum(full, LOG_PROB_FLOOR, out=out)
        return np.log(out, out=out)

    def subset(
        self, index: ArrayLike, *, keep_full: bool = True, keep_labels: bool = True
    ) -> "TopLabelData":
        """Rows ``index`` (integer indices or a boolean mask) as a new dataset (without the
        full score vectors with ``keep_full=False``: a method of the top score alone need
        not copy them; without the true classes with ``keep_labels=False``: a fit from the
        TP and FP weights alone need not either)."""
        idx = check_row_index(index, self.pred.shape[0])

        def take(a):
            if a is None:
                return None
            if a.ndim == 1:
                return a[idx]
            # the score vectors: into a recycled buffer where one is free; "wrap" reads an
            # index in [-n, n) as indexing does, without the buffering of "raise" (2-3 x
            # slower)
            out = _recycle.empty((idx.size, *a.shape[1:]), a.dtype)
            return np.take(a, idx, axis=0, out=out, mode="wrap")

        return TopLabelData(
            self.classes,
            self.pred[idx],
            self.score[idx],
            self.score_range,
            tp=take(self.tp),
            fp=take(self.fp),
            labels=take(self.labels) if keep_labels else None,
            full=take(self.full) if keep_full else None,
            full_kind=self.full_kind if keep_full else None,
            bin_edges=take(self.bin_edges),
        )

    def with_classes(self, classes: Sequence, what: str = "the data") -> "TopLabelData":
        """The same rows re-expressed on the class list ``classes`` (e.g. a model's).

        ``self.classes`` may be any subset of ``classes``, in any order (a batch of new
        predictions names only the classes it predicts). Full score vectors are kept when
        their columns are exactly ``classes`` (reordered as needed) and dropped otherwise:
        only the top score then remains known.

        Raises
        ------
        DataError
            When ``self`` names a class that is not in ``classes``.
        """
        if tuple(classes) == tuple(self.classes):
            # already checked names: no pass over them per call (a report predicts class
            # by class, K calls over K names at 10^5 classes)
            return self
        classes = check_classes(classes)
        if tuple(self.classes) == classes:
            return self
        known = {c: i for i, c in enumerate(classes)}
        unknown = [c for c in self.classes if c not in known]
        if unknown:
            raise DataError(
                f"{what} names {'a class' if len(unknown) == 1 else 'classes'} "
                f"{preview(unknown)} that the model does not know (its classes: "
                f"{preview(classes, 3)}); fit on data with them, or drop their rows"
            )
        index = np.array([known[c] for c in self.classes], dtype=np.int64)
        full = None
        if self.full is not None and len(self.classes) == len(classes):
            order = np.argsort(index)  # column j of the new matrix is old column order[j]
            full = self.full[:, order]
        return self.recoded(classes, index, full)

    def recoded(
        self, classes: tuple[str, ...], mapping: np.ndarray, full: np.ndarray | None = None
    ) -> "TopLabelData":
        """The same rows on the class list ``classes``: old class j is new class
        ``mapping[j]`` (predictions and labels); full score vectors only as ``full`` (already
        in the new classes' columns), none otherwise."""
        return TopLabelData(
            classes,
            mapping[self.pred],
            self.score,
            self.score_range,
            tp=self.tp,
            fp=self.fp,
            labels=None if self.labels is None else mapping[self.labels],
            full=full,
            full_kind=None if full is None else self.full_kind,
            bin_edges=self.bin_edges,
        )

    def without_labels(self) -> "TopLabelData":
        """The same rows with labels dropped (what ``apply`` sees)."""
        return TopLabelData(
            self.classes,
            self.pred,
            self.score,
            self.score_range,
            full=self.full,
            full_kind=self.full_kind,
            bin_edges=self.bin_edges,
        )

    def __repr__(self) -> str:
        form = "binned" if self.is_binned else "per-sample"
        extra = f", full={self.full_kind}" if self.has_full else ""
        lab = f", samples={self.n_samples:g}" if self.has_labels else ", unlabelled"
        return (
            f"TopLabelData({form}, rows={self.n_rows}, classes={self.n_classes}{lab}, "
            f"score_range={self.score_range}{extra})"
        )
