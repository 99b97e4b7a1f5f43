"""The DataFrame reader: which column plays which role, and the frame as
:class:`TopLabelData`.

The column conventions are those of :mod:`topcal.io`; every reader (a whole file, a chunk of
one, a Dask partition, a DataFrame a user passes) ends here.
"""

from __future__ import annotations

import numpy as np

from ..data import TopLabelData, is_int_name, label_names, preview, sorted_names
from ..errors import DataError

BINNED_COLUMNS = ("predicted_class", "bin_lo", "bin_hi", "tp", "fp")


#: Roles a column can be given with ``columns`` / ``--column ROLE=NAME``.
COLUMN_ROLES = ("label", "pred", "score") + BINNED_COLUMNS


#: Published layouts read as they are: name -> {role: column} (tables) or {standard npz key:
#: their key} (npz).
KNOWN_LAYOUTS = {
    "true_label,pred_label,confidence": {
        "label": "true_label",
        "pred": "pred_label",
        "score": "confidence",
    },
    "netcal npz": {"probs": "predictions", "labels": "ground_truth"},
}


def check_unique(names, where: str) -> None:
    """Raise DataError when two of ``names`` (as text) are equal; ``where`` (e.g. "'a.csv'")
    names the source."""
    seen = set()
    for name in map(str, names):
        if name in seen:
            raise DataError(
                f"{where} has the column {name!r} twice; column (and class) names must be "
                "unique"
            )
        seen.add(name)


def column_roles(
    cols, columns=None, *, label_column="label", pred_column="pred", score_column="score"
) -> dict:
    """Which column plays which role: ``{role: column}`` for the roles in
    :data:`COLUMN_ROLES`.

    ``columns`` (role -> column name) wins; then the named ``*_column`` options; when none
    of those names is a column and the columns are a known published layout
    (:data:`KNOWN_LAYOUTS`), that layout's names.
    """
    cols = [str(c) for c in cols]
    roles = {"label": label_column, "pred": pred_column, "score": score_column}
    roles.update({c: c for c in BINNED_COLUMNS})
    layout = KNOWN_LAYOUTS["true_label,pred_label,confidence"]
    if (
        pred_column not in cols
        and score_column not in cols
        and label_column not in cols
        and all(layout[r] in cols for r in ("pred", "score"))
    ):
        roles.update(layout)
    for role, name in (columns or {}).items():
        if role not in COLUMN_ROLES:
            raise DataError(
                f"unknown column role {role!r}; roles are: {', '.join(COLUMN_ROLES)}"
            )
        if str(name) not in cols:
            shown = ", ".join(cols[:8]) + (", ..." if len(cols) > 8 else "")
            raise DataError(
                f"column {name!r} (given for the role {role!r}) is not in the data; its "
                f"columns are: {shown}"
            )
        roles[role] = str(name)
    used: dict[str, str] = {}
    # one column in two roles (pred and label: every row "right")
    for role, name in roles.items():
        if name is not None and name in cols:
            if name in used:
                raise DataError(
                    f"column {name!r} is given two roles, {used[name]!r} and {role!r}; "
                    "each role needs its own column"
                )
            used[name] = role
    return roles


def top_score_chosen(
    columns=None, pred_column: str = "pred", score_column: str = "score"
) -> bool:
    """Whether the options name a top-score column (``columns`` with a pred or score role,
    or a ``*_column`` name other than the default): then the pred/score columns are read
    even where probability columns exist (e.g. ``apply``'s output: its calibrated
    ``confidence``)."""
    return (
        bool({"pred", "score"} & set(columns or {}))
        or pred_column != "pred"
        or score_column != "score"
    )


def roles_from_options(cols, options: dict) -> dict:
    """:func:`column_roles` from read options (``columns`` and the ``*_column`` names)."""
    return column_roles(
        cols,
        options.get("columns"),
        label_column=options.get("label_column", "label"),
        pred_column=options.get("pred_column", "pred"),
        score_column=options.get("score_column", "score"),
    )


def layout_columns(columns, /, **options) -> tuple[list[str], list[str], bool, bool]:
    """(class columns, extra columns, binned?, vector?) of a file with ``columns``.

    The class columns are those whose distinct values decide the class list (and, with the
    extra columns, the binned score range) of a whole-file read.
    """
    cols = [str(c) for c in columns]
    roles = roles_from_options(cols, options)
    label = roles["label"] if options.get("label_column", "label") is not None else None
    pred = roles["pred"]
    binned = all(roles[c] in cols for c in BINNED_COLUMNS)
    prob_prefix, logit_prefix = (
        options.get("prob_prefix", "p_"),
        options.get("logit_prefix", "logit_"),
    )
    vector = (
        not binned
        and any(c.startswith(prob_prefix) or c.startswith(logit_prefix) for c in cols)
        and not top_score_chosen(
            options.get("columns"),
            pred_column=options.get("pred_column", "pred"),
            score_column=options.get("score_column", "score"),
        )
    )
    if binned:
        class_cols = [roles["predicted_class"]]
    elif vector:
        class_cols = []
    else:
        class_cols = [pred] if pred in cols else []
    if label and label in cols and not binned:
        class_cols.append(label)
    return class_cols, ([roles["bin_lo"], roles["bin_hi"]] if binned else []), binned, vector


#: Column holding ``y`` when labels are given beside a DataFrame (never a class name).
_LABEL_SLOT = "__topcal_label__"


def read_frame(
    frame,
    *,
    columns: dict | None = None,
    label_column: str = "label",
    logits: bool = False,
    prob_prefix: str = "p_",
    logit_prefix: str = "logit_",
    pred_column: str = "pred",
    score_column: str = "score",
    score_range=None,
    renormalize: bool = False,
    classes=None,
    y=None,
) -> TopLabelData:
    """Build :class:`TopLabelData` from a DataFrame by the column conventions above.

    ``columns`` maps roles (:data:`COLUMN_ROLES`) to column names. ``y`` (one true class per
    row) gives the labels beside the frame instead of in its label column.
    """
    if y is not None:
        if label_column in frame.columns:
            raise DataError(
                f"y was given but the DataFrame also has a {label_column!r} column; pass "
                "one or the other"
            )
        y = np.asarray(y)
        if y.ndim != 1 or y.shape[0] != len(frame):
            raise DataError(
                f"y has shape {y.shape} but the DataFrame has {len(frame)} rows; give one "
                "label per row"
            )
        frame = frame.assign(**{_LABEL_SLOT: y})
        label_column = _LABEL_SLOT
    try:
        return _read_frame(
            frame,
            columns,
            label_column,
            logits,
            prob_prefix,
            logit_prefix,
            pred_column,
            score_column,
            score_range,
            renormalize,
            classes,
        )
    except (
        TypeError,
        OverflowError,
    ) as exc:  # cells pandas/numpy cannot turn into numbers or names
        raise DataError(
            f"a column holds values topcal cannot read ({exc}); give numbers and class names"
        ) from None


def _read_frame(
    frame,
    columns,
    label_column,
    logits,
    prob_prefix,
    logit_prefix,
    pred_column,
    score_column,
    score_range,
    renormalize,
    classes,
):
    cols = [str(c) for c in frame.columns]
    check_unique(cols, "the data")  # a chunk of a Parquet file, a DataFrame of the caller
    top_score = top_score_chosen(columns, pred_column=pred_column, score_column=score_column)
    roles = column_roles(
        cols,
        columns,
        label_column=label_column,
        pred_column=pred_column,
        score_column=score_column,
    )
    label_column, pred_column, score_column = roles["label"], roles["pred"], roles["score"]
    binned = {roles[c]: c for c in BINNED_COLUMNS if roles[c] != c}
    if binned:
        frame = frame.rename(columns=binned)
        cols = [str(c) for c in frame.columns]
    is_binned = all(c in cols for c in BINNED_COLUMNS)
    if top_score or is_binned:
        # the named top score, not the probability columns beside it
        logit_cols = prob_cols = []
    else:
        logit_cols = [c for c in cols if c.startswith(logit_prefix)]
        prob_cols = [c for c in cols if c.startswith(prob_prefix)]
    vec_cols, prefix = (logit_cols, logit_prefix) if logit_cols else (prob_cols, prob_prefix)
    names = [c[len(prefix) :] for c in vec_cols] if not (logit_cols and prob_cols) else []
    labels = None
    # top scores without a class list: the class columns are read coded (_top_score_coded),
    # the labels only where that cannot be done
    coded_top = (
        not vec_cols
        and not is_binned
        and classes is None
        and {pred_column, score_column} <= set(cols)
    )
    if label_column in cols and not coded_top:
        # read once, on the class list it is coded on: the score columns' names, if any
        labels = _class_values(
            frame[label_column], names or classes, f"label column {label_column!r}"
        )
    if is_binned:
        return TopLabelData.from_binned(
            label_names(frame["predicted_class"].to_numpy(), "predicted_class"),
            *(_numeric(frame, [c])[:, 0] for c in BINNED_COLUMNS[1:]),
            classes=classes,
            score_range=score_range,
        )
    if logit_cols and prob_cols:
        raise DataError(
            f"data has both {prob_prefix}* and {logit_prefix}* columns; keep one set of score "
            f"columns"
        )
    if vec_cols:
        logit = bool(logit_cols or logits)
        return _vector_frame(
            frame, vec_cols, prefix, names, labels, classes, score_range, logit, renormalize
        )
    if pred_column in cols and score_column in cols:
        return _top_score_frame(
            frame, (label_column, pred_column, score_column), label_column in cols, labels,
            classes, coded_top, score_range,
        )
    raise DataError(
        f"cannot find score columns in {cols[:8]}{'...' if len(cols) > 8 else ''}: expected "
        f"{prob_prefix}<class> probability columns, {logit_prefix}<class> logits, "
        f"'{pred_column}' + '{score_column}', or binned {','.join(BINNED_COLUMNS)}"
    )


def _vector_frame(
    frame, vec_cols, prefix, names, labels, classes, score_range, logit: bool, renormalize
) -> TopLabelData:
    """A frame of score-vector columns (``prefix<class>``; logits where ``logit``)."""
    if classes is not None and [str(c) for c in classes] != names:
        raise DataError(
            f"classes {preview(classes)} do not match the score columns "
            f"{preview(vec_cols)}"
        )
    matrix = _numeric(frame, vec_cols)
    if score_range is not None and tuple(float(v) for v in score_range) != (0.0, 1.0):
        raise DataError(
            "--score-range applies to pred/score columns; probability columns are on "
            "(0, 1)"
        )
    try:
        if logit:
            return TopLabelData.from_logits(matrix, labels, classes=names)
        return TopLabelData.from_probs(
            matrix, labels, classes=names, renormalize=renormalize
        )
    except DataError as exc:
        if labels is None or "labels" not in str(exc):
            raise
        raise DataError(
            f"{exc} (labels are matched to the class names in the {prefix}<class> column "
            "names, not to column positions)"
        ) from None


def _top_score_frame(
    frame, role_columns, has_labels: bool, labels, classes, coded_top: bool, score_range
) -> TopLabelData:
    """A frame of top scores: the (label, pred, score) columns of ``role_columns`` (a label
    column where ``has_labels``), the labels read already (None: not yet), the class columns
    coded where ``coded_top``."""
    label_column, pred_column, score_column = role_columns
    coded = coded_top and _top_score_coded(
        frame[pred_column], frame[label_column] if has_labels else None
    )
    if coded:
        pred, labels, classes = coded
    elif coded_top and has_labels:
        labels = _class_values(frame[label_column], None, f"label column {label_column!r}")
    if not coded:
        pred = _class_values(frame[pred_column], classes, f"column {pred_column!r}")
    if coded == ():  # the coded reading found no label among the predicted classes
        labels, pred = (
            _class_values(frame[c], None, c) for c in (label_column, pred_column)
        )
    if (
        labels is not None
        and (classes is None or coded == ())
        and not set(_distinct(labels)).intersection(_distinct(pred))
    ):
        raise DataError(
            f"no label in {label_column!r} names a predicted class in {pred_column!r} "
            f"(labels like {sorted(set(labels))[:3]}, predictions like "
            f"{sorted(set(pred))[:3]}); both columns must use the same class names"
        )
    return TopLabelData.from_scores(
        pred,
        _numeric(frame, [score_column])[:, 0],
        labels,
        classes=classes,
        score_range=(0.0, 1.0) if score_range is None else score_range,
    )


def _class_values(column, classes, name: str):
    """A class column as an array; a categorical of names with a known class list as
    indices.

    The fast path (one lookup per category instead of per row; Parquet dictionary columns
    arrive as categoricals) gives the indices that name-matching would give; anything else
    (missing or unknown names, numeric categories) takes the general path
    (:func:`topcal.data.label_names`) and its messages.
    """
    import pandas as pd

    # indices are read as names where the names are integers ("3", "5"): then only names are
    # safe
    if (
        classes is not None
        and isinstance(column.dtype, pd.CategoricalDtype)
        and column.cat.categories.dtype.kind not in "iufb"
        and not all(is_int_name(str(c)) for c in classes)
    ):
        lookup = {str(c): i for i, c in enumerate(classes)}
        index = np.array(
            [lookup.get(str(c), -1) for c in column.cat.categories] + [-1], dtype=np.int64
        )
        codes = index[column.cat.codes.to_numpy()]  # code -1 (missing) picks the trailing -1
        if codes.size and codes.min() >= 0:
            return codes
    if (
        classes is not None
        and isinstance(column.dtype, np.dtype)
        and column.dtype.kind in "iu"
        and all(is_int_name(str(c)) for c in classes)
    ):
        # integers beside integer class names: matched by name by the builder
        # (encode_labels), the same as naming every row first
        return column.to_numpy()
    if isinstance(column.dtype, pd.CategoricalDtype):
        # no class list: each category named once (a name is a function of the value alone),
        # the rows by their codes; a missing row or an unnamable category takes the general
        # path
        codes = column.cat.codes.to_numpy()
        if codes.size and codes.min() >= 0:
            try:
                names = label_names(np.asarray(column.cat.categories, dtype=object), name)
            except DataError:
                pass
            else:
                return names[codes]
    return label_names(column.to_numpy(), name)


def _coded(column):
    """(codes, names) of a class column: a categorical's codes and its categories' names, or
    a text column hashed once (``pd.factorize``); None where a row is missing, or the values
    are neither categories nor text (numbers, mixed objects: the general path names them)."""
    import pandas as pd

    if isinstance(column.dtype, pd.CategoricalDtype):
        codes = column.cat.codes.to_numpy()
        values = np.asarray(column.cat.categories, dtype=object)
    else:
        values = column.to_numpy()
        if (
            values.dtype != object
            or pd.api.types.infer_dtype(values, skipna=False) != "string"
        ):
            return None
        codes, values = pd.factorize(values)
        values = np.asarray(values, dtype=object)
    if not codes.size or codes.min() < 0:
        return None
    try:
        return codes, label_names(values, "class")
    except DataError:
        return None


def _top_score_coded(pred_column, label_column):
    """(pred, labels, classes) of top-score columns without a class list, read coded: each
    distinct value named once, the classes the sorted names of the values that occur (those
    of :meth:`TopLabelData.from_scores`), pred and labels as indices into them (as the
    integers themselves where every name is an integer: from_scores matches those by name).
    None where a column is not coded (:func:`_coded`); () where no label names a predicted
    class (the general path then says so)."""
    parts = [_coded(c) for c in (pred_column, label_column) if c is not None]
    if any(p is None for p in parts):
        return None
    used = [names[np.bincount(codes, minlength=names.size) > 0] for codes, names in parts]
    if len(used) == 2 and not set(used[0]).intersection(used[1]):
        return ()
    classes = sorted_names(np.concatenate(used))
    if all(is_int_name(c) for c in classes):  # integers are matched to integer names by name
        index = {c: int(c) for c in classes}
    else:
        index = {c: i for i, c in enumerate(classes)}
    coded = [
        np.array([index.get(n, -1) for n in names], dtype=np.int64)[codes]
        for codes, names in parts
    ]
    return coded[0], coded[1] if len(coded) == 2 else None, classes


def _distinct(values) -> np.ndarray:
    """The distinct values of a class column read by :func:`_class_values` (names or
    indices)."""
    import pandas as pd

    return pd.unique(np.asarray(values))


def _numeric(frame, columns) -> np.ndarray:
    import pandas as pd

    if all(isinstance(t, np.dtype) and t.kind in "fiu" for t in frame[columns].dtypes):
        # numbers already (the common case): nothing to coerce, NaN the only missing value;
        # the frame's block in one copy (pandas holds it column-major: one transpose, no
        # strided column writes)
        out = np.ascontiguousarray(frame[columns].to_numpy(dtype=np.float64))
        nan = np.isnan(out)
        if nan.any():
            j = int(np.flatnonzero(nan.any(axis=0))[0])
            raise DataError(
                f"column {columns[j]!r} is empty (NaN) at row "
                f"{int(np.flatnonzero(nan[:, j])[0]) + 1}; remove or impute missing scores"
            )
        return out
    out = np.empty((len(frame), len(columns)), dtype=np.float64)
    for j, c in enumerate(columns):
        col = pd.to_numeric(frame[c], errors="coerce").to_numpy(
            dtype=np.float64, na_value=np.nan
        )
        bad = np.isnan(col) & ~pd.isna(frame[c]).to_numpy()
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise DataError(
                f"column {c!r} has a non-numeric value {frame[c].iloc[i]!r} at row "
                f"{i + 1}; fix or remove it"
            )
        if np.isnan(col).any():
            i = int(np.flatnonzero(np.isnan(col))[0])
            raise DataError(
                f"column {c!r} is empty (NaN) at row {i + 1}; remove or impute missing scores"
            )
        out[:, j] = col
    return out
