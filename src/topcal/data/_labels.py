"""Class names and labels: their text, their order, and their coding as indices of a class
list.

Labels are class *names* ("3" is the class named "3"); integer labels are indices only where
the class names are not integers themselves (:func:`encode_labels`).
"""

from __future__ import annotations

from typing import Sequence, cast

import numpy as np

from ..errors import DataError


#: The longest class name :func:`preview` shows whole, and about the most text it gives a
#: list (longer names are cut, later names left out), so a message naming classes stays one
#: short line.
PREVIEW_NAME_CHARS = 30
PREVIEW_CHARS = 90


def _short_name(name: str) -> str:
    if len(name) <= PREVIEW_NAME_CHARS:
        return repr(name)
    return repr(name[: PREVIEW_NAME_CHARS - 3]) + "..."


def preview(names, limit: int = 5) -> str:
    """A short text for a possibly long list of names: the first few (at most ``limit``,
    each cut to :data:`PREVIEW_NAME_CHARS`, about :data:`PREVIEW_CHARS` in all) and the
    count."""
    names = [str(n) for n in names]
    shown: list[str] = []
    for n in names[:limit]:
        if shown and sum(len(t) + 2 for t in shown) + len(_short_name(n)) > PREVIEW_CHARS:
            break
        shown.append(_short_name(n))
    if len(shown) == len(names):
        return "[" + ", ".join(shown) + "]"
    return "[" + ", ".join(shown) + f", ... ({len(names)} in all)]"


def is_int_name(name: str) -> bool:
    """Whether ``name`` is the canonical text of an integer ("3", "-1"; not "03" or "3.0")."""
    try:
        return str(int(name)) == name
    except ValueError:
        return False


def sorted_names(names) -> tuple[str, ...]:
    """Distinct class names in order: numerically when every name is an integer ("2" before
    "10")."""
    # a long array of names (a column): hash them first, name the distinct
    if _all_text(names):
        import pandas as pd

        names = pd.unique(names)
    uniq = set(str(n) for n in names)
    if uniq and all(is_int_name(n) for n in uniq):
        return tuple(sorted(uniq, key=int))
    return tuple(sorted(uniq))


def check_classes(classes: Sequence) -> tuple[str, ...]:
    names = tuple(str(c) for c in classes)
    if len(names) == 0:
        raise DataError("classes is empty; give at least one class name")
    seen: dict[str, int] = {}
    for i, c in enumerate(names):
        if not c.strip():
            raise DataError(
                f"class name at position {i} is empty ({c!r}); every class needs a name "
                "(a bare 'p_' column has none)"
            )
        if c in seen:
            raise DataError(
                f"duplicate class name {c!r} (positions {seen[c]} and {i}); class names "
                "must be unique"
            )
        seen[c] = i
    return names


_CONTAINERS = (list, tuple, dict, set, np.ndarray)


def encode_labels(
    values, classes: tuple[str, ...] | None, name: str, n_hint: int | None = None
):
    """Map class labels (names or integer indices) to integer indices.

    Labels are class *names*. Integer-typed labels are read as names too when every class
    name is an integer ("0", "7", ...); otherwise, and when there are no names at all (score
    columns without names: classes "0".."K-1"), as indices into ``classes``. Returns (codes,
    classes).
    """
    arr = np.asarray(values)
    if arr.ndim != 1:
        raise DataError(f"{name} must be 1-d (one label per row), got shape {arr.shape}")
    if arr.size == 0:
        raise DataError(f"{name} is empty; topcal needs at least one row")
    if arr.dtype.kind in "c":
        raise DataError(
            f"{name} holds complex numbers; class labels are names or integer indices"
        )
    # integer class names: integers match by name (below), not by position
    by_name = (
        arr.dtype.kind in "iu" and classes is not None and all(is_int_name(c) for c in classes)
    )
    if arr.dtype.kind in "iu" and not by_name:
        return _indices(arr, classes, name, n_hint)
    if arr.dtype.kind == "f":
        if not np.all(np.isfinite(arr)):
            i = int(np.flatnonzero(~np.isfinite(arr))[0])
            raise DataError(
                f"{name} has a missing value at row {i + 1}; every row needs a class"
            )
        if np.all(arr == np.round(arr)):
            return encode_labels(arr.astype(np.int64), classes, name, n_hint)
    first_codes, uniq = _factorized(arr, name)
    if classes is None:
        classes = sorted_names(uniq)
        if n_hint is not None and len(classes) != n_hint:
            raise DataError(
                f"{name} holds {len(classes)} distinct classes but the score vectors have "
                f"{n_hint} columns; pass classes=[...] naming all {n_hint} columns in order"
            )
    lookup = {c: i for i, c in enumerate(classes)}
    codes = np.array([lookup.get(u, -1) for u in uniq], dtype=np.int64)[first_codes]
    bad = codes < 0
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise DataError(
            f"{name} has {str(arr[i])!r} at row {i + 1}, which is not one of the classes "
            f"{preview(classes, 8)}; fix the label or add the class to the class list"
        )
    return codes, classes


def _indices(arr, classes, name, n_hint):
    """Integer labels read as indices into ``classes`` (``"0".."K-1"`` where there are
    none)."""
    if classes is None:
        k = int(arr.max()) + 1 if n_hint is None else n_hint
        classes = tuple(str(i) for i in range(k))
    bad = (arr < 0) | (arr >= len(classes))
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise DataError(
            f"{name} has index {arr[i]} at row {i + 1}, outside 0..{len(classes) - 1}; "
            "labels given as integers must index the class list"
        )
    return arr.astype(np.int64), classes


def _factorized(arr, name):
    """Each row's code among the distinct labels, and those labels as text (in order of
    first appearance)."""
    import pandas as pd  # factorize hashes the labels once: ~10x faster than a Python loop

    if arr.dtype == object:
        return _factorized_objects(arr, name)
    if arr.dtype.kind in "iu":  # integers: hash the numbers, name only the distinct ones
        first_codes, uniq = pd.factorize(arr)
        return first_codes, [str(u) for u in uniq.astype(str)]
    first_codes, uniq = pd.factorize(arr.astype(str))
    return first_codes, [str(u) for u in uniq]


def _factorized_objects(arr, name):
    """:func:`_factorized` of an object array: missing and nested cells refused in one line."""
    import pandas as pd

    missing = pd.isna(arr)  # None or NaN, one vectorised pass
    if missing.any():
        raise DataError(
            f"{name} has a missing value at row {int(np.flatnonzero(missing)[0]) + 1}; "
            "every row needs a class"
        )
    # hash the objects first and turn only the distinct values into text
    try:
        obj_codes, obj_uniq = pd.factorize(arr)
    except TypeError:  # an unhashable cell (list, dict, set, array)
        obj_codes, obj_uniq = None, [v for v in arr if isinstance(v, _CONTAINERS)][:1]
    nested = [j for j, v in enumerate(obj_uniq) if isinstance(v, _CONTAINERS)]
    if nested:
        v = obj_uniq[nested[0]]
        i = (
            int(np.flatnonzero(obj_codes == nested[0])[0])
            if obj_codes is not None
            else next(j for j, u in enumerate(arr) if u is v)
        )
        raise DataError(
            f"{name} holds a {type(v).__name__} at row {i + 1}; each row needs one class name"
        )
    first_codes, uniq = pd.factorize(np.asarray([str(u) for u in obj_uniq], dtype=object))
    return first_codes[obj_codes], [str(u) for u in uniq]


def _named(arr: np.ndarray) -> np.ndarray:
    """``arr.astype(str).astype(object)`` for integers or booleans, naming each distinct
    value once (the same strings; one object per distinct value instead of one per row)."""
    import pandas as pd

    codes, uniq = pd.factorize(arr)
    return np.asarray(uniq).astype(str).astype(object)[codes]


def _all_text(arr) -> bool:
    """Whether ``arr`` is an object array (of more than a few entries) holding only str.

    Then hashing it (``pd.factorize``, ``pd.unique``) groups exactly the equal names; for
    other objects it would also group 1, 1.0 and True, which are named "1", "1" and "True"."""
    if not (isinstance(arr, np.ndarray) and arr.dtype == object and arr.ndim == 1):
        return False
    if arr.size < 64:
        return False
    import pandas as pd

    return pd.api.types.infer_dtype(arr, skipna=False) == "string"


def label_names(values, name: str = "labels") -> np.ndarray:
    """Class labels as names (an object array of str): integers and integral floats as "3",
    text as is.

    Raises DataError for missing values, complex numbers and cells holding lists or other
    containers.
    """
    arr = np.asarray(values)
    if arr.ndim != 1:
        raise DataError(f"{name} must be 1-d (one label per row), got shape {arr.shape}")
    kind = arr.dtype.kind
    if kind == "c":
        raise DataError(
            f"{name} holds complex numbers; class labels are names or integer indices"
        )
    if kind in "iub":
        return _named(arr)
    if kind == "f":
        if not np.all(np.isfinite(arr)):
            i = int(np.flatnonzero(~np.isfinite(arr))[0])
            raise DataError(
                f"{name} has a missing value at row {i + 1}; every row needs a class"
            )
        if np.all(arr == np.round(arr)) and np.all(np.abs(arr) < 2**53):
            return _named(arr.astype(np.int64))
        return arr.astype(str).astype(object)
    if kind in "US":
        return arr.astype(str).astype(object)
    if _all_text(arr):  # text read from a file: every name is itself (one pass in C, no loop)
        import pandas as pd

        codes, uniq = pd.factorize(arr)
        return np.asarray([str(u) for u in uniq], dtype=object)[codes]
    out = np.empty(arr.shape[0], dtype=object)
    for i, v in enumerate(arr):
        if v is None or (isinstance(v, float) and v != v):
            raise DataError(
                f"{name} has a missing value at row {i + 1}; every row needs a class"
            )
        if isinstance(v, (list, tuple, dict, set, np.ndarray)):
            raise DataError(
                f"{name} holds a {type(v).__name__} at row {i + 1}; each row needs one "
                "class name"
            )
        if isinstance(v, (complex, np.complexfloating)):
            raise DataError(
                f"{name} holds a complex number at row {i + 1}; class labels are names or "
                "integer indices"
            )
        if (
            isinstance(v, (float, np.floating))
            and float(v).is_integer()
            and abs(cast(float, v)) < 2**53
        ):
            v = int(v)
        elif isinstance(v, bytes):
            v = v.decode("utf-8", errors="replace")
        out[i] = str(v)
    return out
