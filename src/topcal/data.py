"""The one data object every method reads: :class:`TopLabelData`.

Top-label calibration needs, for every sample X, the predicted class k(X), the
top score S(X) and whether the prediction was right. :class:`TopLabelData`
holds exactly that, validated once when it is built, in one of two forms that
flow through the same code:

* **per sample** (``from_probs``, ``from_logits``, ``from_scores``): one row a
  sample, with its true class when known, and optionally the full score vector
  Y(X) (probabilities or logits) that temperature scaling needs;
* **binned** (``from_binned``): one row a (predicted class, score bin) pair,
  with the bin's true-positive and false-positive *counts*. A bin's score is
  its midpoint; the bin edges travel with the data.

In both forms a row carries a true-positive weight ``tp`` and a
false-positive weight ``fp`` (a labelled sample has ``tp, fp = 1, 0`` or
``0, 1``), so the per-class sufficient statistics of every score-based method
are weighted sums, and counts from chunks or machines simply add up.

Scores live on a declared scale ``score_range = (lo, hi)``: (0, 1) for
probabilities, (0, 10) for PhANNs (a sum of ten softmax outputs). Scores
outside the declared range are an error, never silently clipped.

Size: one module for one class, :class:`TopLabelData`, with its constructors and the validation
they share; kept together so that data are checked in one place.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, NamedTuple, Sequence

import numpy as np

from .errors import DataError, ParameterError

__all__ = ["TopLabelData", "ClassView", "LOG_PROB_FLOOR", "kfold_split", "label_names", "sorted_names", "is_int_name",
           "preview", "rows_by_class", "class_order", "MAX_SAMPLES", "check_sample_total", "canonical_order"]

#: Floor used when logs of probabilities are needed (temperature scaling) and a
#: probability is exactly 0: log(1e-300) keeps the entry finite and far below
#: any real score, without overflowing when divided by a temperature >= 1e-3.
LOG_PROB_FLOOR = 1e-300

#: Default tolerance on |sum of a probability row - 1|. float32 softmax outputs
#: of 1000 classes sum to 1 within ~1e-5; 1e-4 accepts them and still catches
#: a missing column or unnormalised scores.
SUM_TOLERANCE = 1e-4

#: Most samples (total weight) one data set or model may hold: 2^53, the largest count float64
#: adds exactly; beyond it rates such as TP / (TP + FP) round to 0 or 1 and a model is not valid.
MAX_SAMPLES = 2.0**53


def check_sample_total(total: float, what: str = "the data") -> None:
    """Raise a DataError when ``total`` samples exceed :data:`MAX_SAMPLES`."""
    if not total <= MAX_SAMPLES:
        raise _fail(f"{what} holds {total:.3g} samples, more than 2^53 ({MAX_SAMPLES:.3g}), the largest count "
                    "float64 adds exactly; scale the tp/fp counts down by a common factor")

#: Largest bin count K-fold deals across folds (numpy's multinomial draws int64 counts).
MAX_DEAL_COUNT = 2.0**53

#: Narrowest accepted score range, relative to max(1, |lo|, |hi|): below it
#: the rescaled scores (S - lo) / (hi - lo) lose their precision, and
#: (0, 1e-300) made widths like (hi - lo) / 4096 underflow to 0.
MIN_RANGE_WIDTH = 1e-9


class ClassView(NamedTuple):
    """The positives of one predicted class k: rows with k(X) = k.

    ``score`` are their scores (declared scale), ``tp`` and ``fp`` their
    true-positive and false-positive weights, ``index`` their row numbers in
    the data. ``tp.sum()`` is |TP_k| and ``fp.sum()`` is |FP_k|.
    """

    score: np.ndarray
    tp: np.ndarray
    fp: np.ndarray
    index: np.ndarray


def class_order(pred: np.ndarray, n_classes: int) -> np.ndarray:
    """Row indices grouped by class, ascending within a class: ``np.argsort(pred, kind="stable")``.

    The same permutation, faster: with fewer than 2^16 classes the codes are sorted as
    uint16, for which numpy's stable sort is a radix sort (measured ~13x faster than on
    int64 at 10^6 rows).
    """
    pred = np.asarray(pred)
    if n_classes <= np.iinfo(np.uint16).max + 1 and pred.size:
        pred = pred.astype(np.uint16)
    return np.argsort(pred, kind="stable")


def rows_by_class(pred: np.ndarray, n_classes: int, *, skip_empty: bool = True):
    """Yield (k, row indices with pred == k, ascending) per class, from one stable sort.

    O(n log n) once instead of a ``pred == k`` pass per class (O(n K)).
    With ``skip_empty`` classes without rows are left out.
    """
    pred = np.asarray(pred)
    counts = np.bincount(pred, minlength=n_classes)
    if pred.size and counts.max() == pred.size:  # one class holds every row: no sort
        order = np.arange(pred.size)
        ends = np.where(np.arange(counts.size) >= int(pred[0]), pred.size, 0)
    else:
        order = class_order(pred, n_classes)
        ends = np.cumsum(counts)
    for k in range(n_classes):
        if counts[k] or not skip_empty:
            yield k, order[ends[k] - counts[k] : ends[k]]


def canonical_order(data: "TopLabelData") -> np.ndarray:
    """A row order that depends only on the rows' contents, not on their order in ``data``.

    Sorted by predicted class, top score, true class, weights and a fingerprint of the full
    score vector (a fixed random projection: rows it ties are, but for a measure-zero set,
    equal). A fit that runs over the rows in this order sums them in the same order whatever
    the input's order, so shuffled rows give the same fit bit for bit.
    """
    order = np.lexsort((data.score, data.pred))
    pred, score = data.pred[order], data.score[order]
    if not np.any((pred[1:] == pred[:-1]) & (score[1:] == score[:-1])):
        return order  # no two rows tie on (class, score): the later keys cannot reorder anything
    keys = [data.pred, data.score]
    for a in (data.labels, data.tp, data.fp):
        if a is not None:
            keys.append(a)
    if data.full is not None:
        w = np.random.default_rng(0).random(data.full.shape[1]) + 0.5
        keys.append(np.nan_to_num(data.full) @ w)
    return np.lexsort(keys[::-1])


def _fail(msg: str) -> DataError:
    return DataError(msg)


def _as_float_array(x, name: str, ndim: int) -> np.ndarray:
    try:
        arr = np.asarray(x, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise _fail(f"{name} must be numeric: {exc}; convert the column to numbers") from None
    if arr.ndim != ndim:
        shape = "a 1-d array (one value per row)" if ndim == 1 else "a 2-d array (rows x classes)"
        raise _fail(f"{name} must be {shape}, got shape {arr.shape}")
    if arr.size == 0:
        raise _fail(f"{name} is empty; topcal needs at least one row")
    bad = ~np.isfinite(arr)
    if bad.any():
        where = np.argwhere(bad)[0]
        if ndim == 1:
            loc = f"row {where[0]}"
        else:
            loc = f"row {where[0]}, column {where[1]}"
        raise _fail(
            f"{name} has a non-finite value ({arr[tuple(where)]}) at {loc}; "
            "remove or impute NaN/inf before calibrating"
        )
    return arr


def preview(names, limit: int = 5) -> str:
    """A short text for a possibly long list of names: count and the first few."""
    names = [str(n) for n in names]
    if len(names) <= limit:
        return repr(names)
    return "[" + ", ".join(repr(n) for n in names[:limit]) + f", ... ({len(names)} in all)]"


def is_int_name(name: str) -> bool:
    """Whether ``name`` is the canonical text of an integer ("3", "-1"; not "03" or "3.0")."""
    try:
        return str(int(name)) == name
    except ValueError:
        return False


def sorted_names(names) -> tuple[str, ...]:
    """Distinct class names in order: numerically when every name is an integer ("2" before "10")."""
    uniq = set(str(n) for n in names)
    if uniq and all(is_int_name(n) for n in uniq):
        return tuple(sorted(uniq, key=int))
    return tuple(sorted(uniq))


#: Elements per block in the one-pass validation of an (n, K) matrix (2 MB:
#: the block's temporaries stay in cache and no n x K temporary is made).
_BLOCK_ELEMENTS = 1 << 18


def _as_matrix(x, name: str) -> np.ndarray:
    """An (n, K) float64 array, without copying one that already is; finiteness is checked by the caller."""
    try:
        arr = np.asarray(x, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise _fail(f"{name} must be numeric: {exc}; convert the column to numbers") from None
    if arr.ndim != 2:
        raise _fail(f"{name} must be a 2-d array (rows x classes), got shape {arr.shape}")
    if arr.size == 0:
        raise _fail(f"{name} is empty; topcal needs at least one row")
    return arr


def _row_blocks(n: int, k: int):
    step = max(1, _BLOCK_ELEMENTS // max(k, 1))
    for a in range(0, n, step):
        yield a, min(a + step, n)


def _check_finite_rows(block: np.ndarray, row_sums: np.ndarray, name: str, first_row: int) -> None:
    """Raise for the first non-finite value of ``block``; ``row_sums`` finite proves there is none."""
    if np.isfinite(row_sums).all():  # NaN or +-inf anywhere in a row makes its sum non-finite
        return
    bad = ~np.isfinite(block)
    if bad.any():  # else the sum overflowed from finite values
        r, c = np.argwhere(bad)[0]
        raise _fail(
            f"{name} has a non-finite value ({block[r, c]}) at row {first_row + r}, column {c}; "
            "remove or impute NaN/inf before calibrating"
        )


def _check_classes(classes: Sequence) -> tuple[str, ...]:
    names = tuple(str(c) for c in classes)
    if len(names) == 0:
        raise _fail("classes is empty; give at least one class name")
    seen: dict[str, int] = {}
    for i, c in enumerate(names):
        if not c.strip():
            raise _fail(
                f"class name at position {i} is empty ({c!r}); every class needs a name "
                "(a bare 'p_' column has none)"
            )
        if c in seen:
            raise _fail(
                f"duplicate class name {c!r} (positions {seen[c]} and {i}); class names must be unique"
            )
        seen[c] = i
    return names


_CONTAINERS = (list, tuple, dict, set, np.ndarray)


def _encode(values, classes: tuple[str, ...] | None, name: str, n_hint: int | None = None):
    """Map class labels (names or integer indices) to integer indices.

    Labels are class *names*. Integer-typed labels are read as names too when
    every class name is an integer ("0", "7", ...); otherwise, and when there
    are no names at all (score columns without names: classes "0".."K-1"),
    as indices into ``classes``. Returns (codes, classes).
    """
    arr = np.asarray(values)
    if arr.ndim != 1:
        raise _fail(f"{name} must be 1-d (one label per row), got shape {arr.shape}")
    if arr.size == 0:
        raise _fail(f"{name} is empty; topcal needs at least one row")
    if arr.dtype.kind in "c":
        raise _fail(f"{name} holds complex numbers; class labels are names or integer indices")
    # integer class names: integers match by name (below), not by position
    by_name = arr.dtype.kind in "iu" and classes is not None and all(is_int_name(c) for c in classes)
    if arr.dtype.kind in "iu" and not by_name:
        if classes is None:
            k = int(arr.max()) + 1 if n_hint is None else n_hint
            classes = tuple(str(i) for i in range(k))
        bad = (arr < 0) | (arr >= len(classes))
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise _fail(
                f"{name} has index {arr[i]} at row {i}, outside 0..{len(classes) - 1}; "
                "labels given as integers must index the class list"
            )
        return arr.astype(np.int64), classes
    if arr.dtype.kind == "f":
        if not np.all(np.isfinite(arr)):
            i = int(np.flatnonzero(~np.isfinite(arr))[0])
            raise _fail(f"{name} has a missing value at row {i}; every row needs a class")
        if np.all(arr == np.round(arr)):
            return _encode(arr.astype(np.int64), classes, name, n_hint)
    import pandas as pd  # factorize hashes the labels once: ~10x faster than a Python loop

    if arr.dtype == object:
        missing = pd.isna(arr)  # None or NaN, one vectorised pass
        if missing.any():
            raise _fail(f"{name} has a missing value at row {int(np.flatnonzero(missing)[0])}; every row needs a class")
        # hash the objects first and turn only the distinct values into text
        try:
            obj_codes, obj_uniq = pd.factorize(arr)
        except TypeError:  # an unhashable cell (list, dict, set, array)
            obj_codes, obj_uniq = None, [v for v in arr if isinstance(v, _CONTAINERS)][:1]
        nested = [j for j, v in enumerate(obj_uniq) if isinstance(v, _CONTAINERS)]
        if nested:
            v = obj_uniq[nested[0]]
            i = int(np.flatnonzero(obj_codes == nested[0])[0]) if obj_codes is not None else next(
                j for j, u in enumerate(arr) if u is v)
            raise _fail(f"{name} holds a {type(v).__name__} at row {i}; each row needs one class name")
        first_codes, uniq = pd.factorize(np.asarray([str(u) for u in obj_uniq], dtype=object))
        first_codes = first_codes[obj_codes]
    elif arr.dtype.kind in "iu":  # integers: hash the numbers, name only the distinct ones
        first_codes, uniq = pd.factorize(arr)
        uniq = uniq.astype(str)
    else:
        first_codes, uniq = pd.factorize(arr.astype(str))
    uniq = [str(u) for u in uniq]
    if classes is None:
        classes = sorted_names(uniq)
        if n_hint is not None and len(classes) != n_hint:
            raise _fail(
                f"{name} holds {len(classes)} distinct classes but the score vectors have "
                f"{n_hint} columns; pass classes=[...] naming all {n_hint} columns in order"
            )
    lookup = {c: i for i, c in enumerate(classes)}
    codes = np.array([lookup.get(u, -1) for u in uniq], dtype=np.int64)[first_codes]
    bad = codes < 0
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise _fail(
            f"{name} has {str(arr[i])!r} at row {i}, which is not one of the classes "
            f"{preview(classes, 8)}; fix the label or add the class to the class list"
        )
    return codes, classes


def _named(arr: np.ndarray) -> np.ndarray:
    """``arr.astype(str).astype(object)`` for integers or booleans, naming each distinct value once
    (the same strings; one object per distinct value instead of one per row)."""
    import pandas as pd

    codes, uniq = pd.factorize(arr)
    return np.asarray(uniq).astype(str).astype(object)[codes]


def label_names(values, name: str = "labels") -> np.ndarray:
    """Class labels as names (an object array of str): integers and integral floats as "3", text as is.

    Raises DataError for missing values, complex numbers and cells holding
    lists or other containers.
    """
    arr = np.asarray(values)
    if arr.ndim != 1:
        raise _fail(f"{name} must be 1-d (one label per row), got shape {arr.shape}")
    kind = arr.dtype.kind
    if kind == "c":
        raise _fail(f"{name} holds complex numbers; class labels are names or integer indices")
    if kind in "iub":
        return _named(arr)
    if kind == "f":
        if not np.all(np.isfinite(arr)):
            i = int(np.flatnonzero(~np.isfinite(arr))[0])
            raise _fail(f"{name} has a missing value at row {i}; every row needs a class")
        if np.all(arr == np.round(arr)) and np.all(np.abs(arr) < 2**53):
            return _named(arr.astype(np.int64))
        return arr.astype(str).astype(object)
    if kind in "US":
        return arr.astype(str).astype(object)
    out = np.empty(arr.shape[0], dtype=object)
    for i, v in enumerate(arr):
        if v is None or (isinstance(v, float) and v != v):
            raise _fail(f"{name} has a missing value at row {i}; every row needs a class")
        if isinstance(v, (list, tuple, dict, set, np.ndarray)):
            raise _fail(f"{name} holds a {type(v).__name__} at row {i}; each row needs one class name")
        if isinstance(v, (complex, np.complexfloating)):
            raise _fail(f"{name} holds a complex number at row {i}; class labels are names or integer indices")
        if isinstance(v, (float, np.floating)) and float(v).is_integer() and abs(v) < 2**53:
            v = int(v)
        elif isinstance(v, bytes):
            v = v.decode("utf-8", errors="replace")
        out[i] = str(v)
    return out


def _check_range(score_range) -> tuple[float, float]:
    try:
        lo, hi = (float(v) for v in score_range)
    except (TypeError, ValueError):
        raise _fail(f"score_range must be two numbers (lo, hi), got {score_range!r}") from None
    if not (np.isfinite(lo) and np.isfinite(hi) and lo < hi):
        raise _fail(f"score_range must be finite with lo < hi, got ({lo:g}, {hi:g})")
    if hi - lo < MIN_RANGE_WIDTH * max(1.0, abs(lo), abs(hi)):
        raise _fail(
            f"score_range ({lo:g}, {hi:g}) is too narrow: its width must be at least {MIN_RANGE_WIDTH:g} "
            "of its largest bound (or of 1); rescale the scores"
        )
    return lo, hi


def _check_scores_in_range(score: np.ndarray, lo: float, hi: float, name: str = "score") -> None:
    # A relative slack of 1e-9 of the range absorbs round-off (e.g. a sum of
    # ten softmax outputs that comes to 10.000000000000002).
    slack = 1e-9 * (hi - lo)
    bad = (score < lo - slack) | (score > hi + slack)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise _fail(
            f"{name} {float(score[i]):g} at row {i} is outside the declared score range [{lo:g}, {hi:g}]; "
            "declare a score_range (--score-range LO HI) that covers every score"
        )


@dataclass(frozen=True, eq=False, repr=False)
class TopLabelData:
    """Validated top-label data: predicted class, top score and correctness per row.

    Build it with one of the constructors (:meth:`from_probs`,
    :meth:`from_logits`, :meth:`from_scores`, :meth:`from_binned`) or with
    :func:`topcal.io.read_data`; the fields are then trusted by every method.

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
        True-positive and false-positive weight of each row (counts for
        binned rows); None when the data carries no labels (``apply``).
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
        probs,
        labels=None,
        classes: Sequence | None = None,
        *,
        renormalize: bool = False,
        atol: float = SUM_TOLERANCE,
    ) -> "TopLabelData":
        """Build from class probabilities Y(X), shape (n, K).

        The predicted class is the argmax (the first one on ties) and the top
        score its probability, so ``score_range`` is (0, 1).

        Parameters
        ----------
        probs : array-like of shape (n, K)
            Non-negative rows summing to 1 (within ``atol``).
        labels : array-like of shape (n,), optional
            True classes, as names in ``classes`` or integer indices. Omit
            for data to be calibrated only (``predict``/``apply``).
        classes : sequence of str, optional
            Names of the K columns. Default: the sorted distinct string
            labels, or "0".."K-1".
        renormalize : bool, default False
            Divide each row by its sum instead of rejecting rows that do not
            sum to 1.
        atol : float, default 1e-4
            Tolerance on |row sum - 1|.
        """
        p = _as_matrix(probs, "probs")
        # one pass over the matrix, block by block: finite, non-negative, row sums
        sums = np.empty(p.shape[0])
        for a, b in _row_blocks(*p.shape):
            blk = p[a:b]
            with np.errstate(over="ignore", invalid="ignore"):  # non-finite sums are checked next
                sums[a:b] = blk.sum(axis=1)
            _check_finite_rows(blk, sums[a:b], "probs", a)
            if blk.min() < 0:
                r, c = np.argwhere(blk < 0)[0]
                raise _fail(
                    f"probs has a negative value ({blk[r, c]}) at row {a + r}, column {c}; "
                    "probabilities must be >= 0 (pass logits with from_logits / --logits instead)"
                )
        if renormalize:
            zero = sums <= 0
            if zero.any():
                raise _fail(f"probs row {int(np.flatnonzero(zero)[0])} sums to 0 and cannot be renormalised")
            p = p / sums[:, None]
        else:
            off = np.abs(sums - 1.0) > atol
            if off.any():
                i = int(np.flatnonzero(off)[0])
                raise _fail(
                    f"probs row {i} sums to {sums[i]:.6g}, not 1 (tolerance {atol}); "
                    "pass renormalize=True (--renormalize) to divide each row by its sum, "
                    "or from_logits (--logits) if these are logits"
                )
        pred = np.argmax(p, axis=1).astype(np.int64)
        score = p[np.arange(p.shape[0]), pred]
        return cls._build_full(p, "probs", pred, np.clip(score, 0.0, 1.0), labels, classes)

    @classmethod
    def from_logits(cls, logits, labels=None, classes: Sequence | None = None) -> "TopLabelData":
        """Build from logits (unnormalised log-probabilities), shape (n, K).

        The predicted class is the argmax of the logits, the top score its
        softmax probability (``score_range`` (0, 1)). The logits are kept as
        the full vector so temperature scaling works on them directly.
        """
        z = _as_matrix(logits, "logits")
        pred = np.argmax(z, axis=1).astype(np.int64)
        # the top entry of the softmax, 1 / sum_j exp(z_j - max z), block by block (no n x K softmax)
        score = np.empty(z.shape[0])
        for a, b in _row_blocks(*z.shape):
            blk = z[a:b]
            with np.errstate(over="ignore", invalid="ignore"):  # non-finite sums are checked next
                row_sums = blk.sum(axis=1)
            _check_finite_rows(blk, row_sums, "logits", a)
            e = np.exp(blk - blk.max(axis=1, keepdims=True))
            score[a:b] = 1.0 / e.sum(axis=1)
        return cls._build_full(z, "logits", pred, score, labels, classes)

    @classmethod
    def _build_full(cls, full, kind, pred, score, labels, classes) -> "TopLabelData":
        n, k = full.shape
        if classes is not None:
            classes = _check_classes(classes)
            if len(classes) != k:
                raise _fail(
                    f"{kind} has {k} columns but {len(classes)} class names were given; "
                    "give one name per column, in column order"
                )
        if labels is None:
            classes = classes or tuple(str(i) for i in range(k))
            return cls(classes, pred, score, (0.0, 1.0), full=full, full_kind=kind)
        lab_arr = np.asarray(labels)
        if lab_arr.ndim == 1 and lab_arr.shape[0] != n:
            raise _fail(f"labels has {lab_arr.shape[0]} rows but {kind} has {n}; they must match row for row")
        codes, classes = _encode(lab_arr, classes, "labels", n_hint=k)
        return cls._labelled(classes, pred, score, (0.0, 1.0), codes, full=full, full_kind=kind)

    @classmethod
    def from_scores(
        cls,
        pred,
        score,
        labels=None,
        classes: Sequence | None = None,
        *,
        score_range: tuple[float, float] = (0.0, 1.0),
    ) -> "TopLabelData":
        """Build from a predicted class and a top score per sample.

        Use this when only the top score is known, or when it is on another
        scale (``score_range=(0, 10)`` for PhANNs' sum of ten softmax outputs;
        a random forest's vote fraction is on (0, 1)).

        Parameters
        ----------
        pred : array-like of shape (n,)
            Predicted class, as names or integer indices.
        score : array-like of shape (n,)
            Top score of each sample, inside ``score_range``.
        labels : array-like of shape (n,), optional
            True classes (names or indices, like ``pred``).
        classes : sequence of str, optional
            All class names. Default: the distinct values of pred and labels
            (sorted; numerically when all are integers). With names given,
            integer pred/labels are indices into them unless the names are
            themselves integers (then they are matched as names).
        score_range : (lo, hi), default (0, 1)
            The scale of the scores; travels with the data and the models.
        """
        lo, hi = _check_range(score_range)
        s = _as_float_array(score, "score", 1)
        p_arr = np.asarray(pred)
        if p_arr.ndim != 1 or p_arr.shape[0] != s.shape[0]:
            raise _fail(f"pred has shape {p_arr.shape} but score has {s.shape[0]} rows; they must match row for row")
        if classes is not None:
            classes = _check_classes(classes)
        else:  # no names given: the distinct values of pred (and labels) are the classes, none added
            parts = [label_names(p_arr, "pred")]
            if labels is not None:
                parts.append(label_names(np.asarray(labels), "labels"))
            classes = sorted_names(np.concatenate(parts))
        pred_codes, classes = _encode(p_arr, classes, "pred")
        if labels is not None:
            lab_arr = np.asarray(labels)
            if lab_arr.ndim == 1 and lab_arr.shape[0] != s.shape[0]:
                raise _fail(f"labels has {lab_arr.shape[0]} rows but score has {s.shape[0]}; they must match row for row")
            codes, classes2 = _encode(lab_arr, classes, "labels")
            if len(classes2) > len(classes):  # integer labels widened the class list
                classes = classes2
                pred_codes, _ = _encode(p_arr, classes, "pred")
        _check_scores_in_range(s, lo, hi)
        s = np.clip(s, lo, hi)
        if labels is None:
            return cls(classes, pred_codes, s, (lo, hi))
        return cls._labelled(classes, pred_codes, s, (lo, hi), codes)

    @classmethod
    def _labelled(cls, classes, pred, score, score_range, codes, **kw) -> "TopLabelData":
        correct = (codes == pred).astype(np.float64)
        return cls(classes, pred, score, score_range, tp=correct, fp=1.0 - correct, labels=codes, **kw)

    @classmethod
    def from_binned(
        cls,
        predicted_class,
        bin_lo,
        bin_hi,
        tp,
        fp,
        classes: Sequence | None = None,
        *,
        score_range: tuple[float, float] | None = None,
    ) -> "TopLabelData":
        """Build from per-class, per-bin true/false-positive counts.

        Each row is one score bin (bin_lo, bin_hi] of one predicted class,
        with ``tp`` samples predicted as that class and right, ``fp`` predicted
        as it and wrong (the form of ``topcal.datasets.load_phanns()``). The
        row's score is the bin midpoint; counts act as weights, so every
        method fits binned data with the same code as per-sample data.

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
            The scale of the scores, default (0, 1) (as for per-sample data;
            never guessed from the bins, which would change the
            uncalibrated baseline). Every bin must lie inside it.
        """
        lo_e = _as_float_array(bin_lo, "bin_lo", 1)
        hi_e = _as_float_array(bin_hi, "bin_hi", 1)
        tp_w = _as_float_array(tp, "tp", 1)
        fp_w = _as_float_array(fp, "fp", 1)
        pc = np.asarray(predicted_class)
        n = pc.shape[0] if pc.ndim == 1 else -1
        for name, arr in (("bin_lo", lo_e), ("bin_hi", hi_e), ("tp", tp_w), ("fp", fp_w)):
            if arr.shape[0] != n:
                raise _fail(
                    f"{name} has {arr.shape[0]} rows but predicted_class has {pc.shape}; "
                    "every column of binned data must have one value per row"
                )
        for name, arr in (("tp", tp_w), ("fp", fp_w)):
            if (arr < 0).any():
                i = int(np.flatnonzero(arr < 0)[0])
                raise _fail(f"{name} count {arr[i]} at row {i} is negative; counts must be >= 0")
        bad = lo_e >= hi_e
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise _fail(f"bin at row {i} has bin_lo {lo_e[i]} >= bin_hi {hi_e[i]}; bins are (lo, hi] with lo < hi")
        if tp_w.sum() + fp_w.sum() <= 0:
            raise _fail("binned data holds no samples (all tp and fp counts are 0)")
        check_sample_total(tp_w.sum() + fp_w.sum(), "the binned data")
        if classes is None:  # the names, in order of first appearance; none added
            names = label_names(pc, "predicted_class")
            _, first = np.unique(names.astype(str), return_index=True)
            classes = tuple(names[np.sort(first)].tolist())
        else:
            classes = _check_classes(classes)
        codes, classes = _encode(pc, classes, "predicted_class")
        if score_range is None:
            score_range = (0.0, 1.0)
        lo, hi = _check_range(score_range)
        _check_scores_in_range(lo_e, lo, hi, "bin_lo")
        _check_scores_in_range(hi_e, lo, hi, "bin_hi")
        order = np.lexsort((hi_e, lo_e, codes))
        same = codes[order][1:] == codes[order][:-1]
        # shared edges that differ by round-off (0.2 + 0.1 vs 0.3) are no overlap
        overlap = same & (lo_e[order][1:] < hi_e[order][:-1] - 1e-9 * (hi - lo))
        if overlap.any():
            j = int(np.flatnonzero(overlap)[0])
            a, b = int(order[j]), int(order[j + 1])
            raise _fail(
                f"bins at rows {a} ({lo_e[a]:g}, {hi_e[a]:g}] and {b} ({lo_e[b]:g}, {hi_e[b]:g}] of class "
                f"{classes[codes[a]]!r} overlap; give each class disjoint bins (add up the counts of repeated bins)"
            )
        mid = np.clip(0.5 * (lo_e + hi_e), lo, hi)
        return cls(
            classes, codes, mid, (lo, hi), tp=tp_w, fp=fp_w,
            bin_edges=np.column_stack([lo_e, hi_e]),
        )

    @classmethod
    def concat(cls, parts: Iterable["TopLabelData"]) -> "TopLabelData":
        """Stack datasets with the same classes, scale and form (e.g. add new samples)."""
        parts = list(parts)
        if not parts:
            raise _fail("concat needs at least one dataset")
        first = parts[0]
        for i, p in enumerate(parts[1:], 1):
            if p.classes != first.classes:
                raise _fail(f"dataset {i} has classes {preview(p.classes)}, dataset 0 has {preview(first.classes)}; they must match")
            if p.score_range != first.score_range:
                raise _fail(f"dataset {i} has score range {p.score_range}, dataset 0 has {first.score_range}; they must match")
            for attr in ("tp", "labels", "full", "bin_edges"):
                if (getattr(p, attr) is None) != (getattr(first, attr) is None):
                    raise _fail(f"dataset {i} and dataset 0 differ in whether they have {attr}; concatenate like with like")
            if p.full_kind != first.full_kind:
                raise _fail(f"dataset {i} holds {p.full_kind}, dataset 0 holds {first.full_kind}; they must match")

        def cat(attr):
            if getattr(first, attr) is None:
                return None
            return np.concatenate([getattr(p, attr) for p in parts])

        return cls(
            first.classes, cat("pred"), cat("score"), first.score_range, tp=cat("tp"), fp=cat("fp"),
            labels=cat("labels"), full=cat("full"), full_kind=first.full_kind, bin_edges=cat("bin_edges"),
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
        """Raise a DataError naming ``what`` if the full score vector is unknown; ``hint`` says what to do."""
        if not self.has_full:
            raise DataError(
                f"{what} needs the full score vector Y(X) (probabilities or logits), but this data has only "
                "top scores; " + (hint or "use a score-based method (hist, cum, kde-mon2, ...) or the binary "
                                  "temperature variant")
            )

    def class_view(self, k: int) -> ClassView:
        """The positives of predicted class ``k`` (rows with pred == k)."""
        self.require_labels("splitting into TP/FP")
        idx = np.flatnonzero(self.pred == k)
        return ClassView(self.score[idx], self.tp[idx], self.fp[idx], idx)

    def class_support(self, k: int, view: ClassView | None = None) -> tuple[float, float] | None:
        """Where class ``k``'s positives lie: (lowest, highest) score with weight, or None if it has none.

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

    def class_views(self):
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

    def log_probs(self) -> np.ndarray:
        """log Y(X), shape (n, K): log-softmax of logits, or log of probabilities
        with exact zeros floored at :data:`LOG_PROB_FLOOR`."""
        self.require_full("log-probabilities")
        if self.full_kind == "logits":
            z = self.full - self.full.max(axis=1, keepdims=True)
            return z - np.log(np.exp(z).sum(axis=1, keepdims=True))
        return np.log(np.maximum(self.full, LOG_PROB_FLOOR))

    def subset(self, index, *, keep_full: bool = True) -> "TopLabelData":
        """Rows ``index`` (integer indices or a boolean mask) as a new dataset (without the full score
        vectors with ``keep_full=False``: a method of the top score alone need not copy them)."""
        idx = np.asarray(index)
        if idx.dtype == bool:
            idx = np.flatnonzero(idx)
        if idx.size == 0:
            raise DataError("subset is empty; select at least one row")

        def take(a):
            return None if a is None else a[idx]

        return TopLabelData(
            self.classes, self.pred[idx], self.score[idx], self.score_range, tp=take(self.tp),
            fp=take(self.fp), labels=take(self.labels), full=take(self.full) if keep_full else None,
            full_kind=self.full_kind if keep_full else None,
            bin_edges=take(self.bin_edges),
        )

    def with_classes(self, classes: Sequence, what: str = "the data") -> "TopLabelData":
        """The same rows re-expressed on the class list ``classes`` (e.g. a model's).

        ``self.classes`` may be any subset of ``classes``, in any order (a
        batch of new predictions names only the classes it predicts). Full
        score vectors are kept when their columns are exactly ``classes``
        (reordered as needed) and dropped otherwise: only the top score then
        remains known.

        Raises
        ------
        DataError
            When ``self`` names a class that is not in ``classes``.
        """
        classes = _check_classes(classes)
        if tuple(self.classes) == classes:
            return self
        known = {c: i for i, c in enumerate(classes)}
        unknown = [c for c in self.classes if c not in known]
        if unknown:
            raise DataError(
                f"{what} names {'a class' if len(unknown) == 1 else 'classes'} {preview(unknown)} that the "
                f"model does not know (its classes: {preview(classes, 8)}); fit the model on data with "
                "these classes, or drop their rows"
            )
        index = np.array([known[c] for c in self.classes], dtype=np.int64)
        full = None
        if self.full is not None and len(self.classes) == len(classes):
            order = np.argsort(index)  # column j of the new matrix is old column order[j]
            full = self.full[:, order]
        return TopLabelData(
            classes, index[self.pred], self.score, self.score_range, tp=self.tp, fp=self.fp,
            labels=None if self.labels is None else index[self.labels], full=full,
            full_kind=None if full is None else self.full_kind, bin_edges=self.bin_edges,
        )

    def without_labels(self) -> "TopLabelData":
        """The same rows with labels dropped (what ``apply`` sees)."""
        return TopLabelData(
            self.classes, self.pred, self.score, self.score_range, full=self.full,
            full_kind=self.full_kind, bin_edges=self.bin_edges,
        )

    def __repr__(self) -> str:
        form = "binned" if self.is_binned else "per-sample"
        extra = f", full={self.full_kind}" if self.has_full else ""
        lab = f", samples={self.n_samples:g}" if self.has_labels else ", unlabelled"
        return (
            f"TopLabelData({form}, rows={self.n_rows}, classes={self.n_classes}{lab}, "
            f"score_range={self.score_range}{extra})"
        )


def kfold_split(data: TopLabelData, n_folds: int, *, seed: int = 0) -> list[TopLabelData]:
    """Split labelled ``data`` into ``n_folds`` disjoint folds.

    Per-sample data is stratified by predicted
    class: within each class the rows are shuffled (seeded) and dealt round-robin
    to the folds, so every fold holds about 1/K of every class. Binned data has
    no individual samples to shuffle, so each bin's integer TP and FP counts are
    split across the K folds by a seeded multinomial draw with equal
    probabilities (a random deal of the bin's samples); each fold is again a
    binned dataset on the same bins. Non-integer counts (weights) cannot be
    dealt and are rejected.

    Parameters
    ----------
    data : TopLabelData (labelled)
    n_folds : int >= 2
    seed : int, default 0
        Seed of the shuffle (per-sample) or of the multinomial deal (binned).

    Returns
    -------
    list of TopLabelData
        The folds; together they hold every sample exactly once. For binned
        data every fold has all the bins (some with zero counts).
    """
    if isinstance(n_folds, bool) or not isinstance(n_folds, (int, np.integer)) or n_folds < 2:
        raise ParameterError(f"folds must be an integer >= 2, got {n_folds!r}")
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ParameterError(f"seed must be an integer >= 0, got {seed!r}")
    data.require_labels("K-fold cross-fitting")
    rng = np.random.default_rng(seed)
    if data.is_binned:
        for name, arr in (("tp", data.tp), ("fp", data.fp)):
            if not np.all(arr == np.round(arr)):
                raise DataError(
                    f"K-fold on binned data deals each bin's {name} count across folds and needs integer "
                    "counts, but some are fractional; use --eval with a second test set instead"
                )
            if arr.max() > MAX_DEAL_COUNT:
                raise DataError(
                    f"K-fold on binned data deals each bin's {name} count across folds, but a count is "
                    f"{arr.max():g} (more than {MAX_DEAL_COUNT:g} samples in one bin cannot be dealt); "
                    "use --eval with a second test set instead"
                )
        total = data.tp.sum() + data.fp.sum()
        if n_folds > total:
            raise DataError(f"{n_folds} folds exceed the {total:g} samples in the data; use at most {total:g} folds")
        p = np.full(n_folds, 1.0 / n_folds)
        tp = rng.multinomial(data.tp.astype(np.int64), p).astype(np.float64)  # (rows, folds)
        fp = rng.multinomial(data.fp.astype(np.int64), p).astype(np.float64)
        return [
            TopLabelData(data.classes, data.pred, data.score, data.score_range, tp=tp[:, f], fp=fp[:, f],
                         bin_edges=data.bin_edges)
            for f in range(n_folds)
        ]
    if data.n_rows < n_folds:
        raise DataError(f"{n_folds} folds exceed the {data.n_rows} rows of the data; use at most {data.n_rows} folds")
    fold_of = np.empty(data.n_rows, dtype=np.int64)
    start = int(rng.integers(n_folds))
    for k in range(data.n_classes):
        idx = np.flatnonzero(data.pred == k)
        idx = idx[rng.permutation(idx.size)]
        # each class continues the deal where the previous one stopped (the first starts at a random
        # fold): every fold gets floor(n / K) or more rows, and small classes do not all land in fold 0
        fold_of[idx] = (np.arange(idx.size) + start) % n_folds
        start = (start + idx.size) % n_folds
    return [data.subset(fold_of == f) for f in range(n_folds)]
