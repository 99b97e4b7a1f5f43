"""Reading data files (CSV, Parquet, .npz) into :class:`TopLabelData`.

Column conventions (each name can be overridden):

* ``label``: the true class name (optional: data to be calibrated with
  ``apply`` needs none). Labels are always matched to class *names* (``3``
  is the class of column ``p_3``, never the fourth column); only a ``.npz``
  ``probs``/``logits`` array without a ``classes`` array has unnamed
  columns, which are then named ``0``..``K-1`` (so its labels are indices),
  and integer labels beside a ``classes`` array of non-numeric names (as
  scikit-learn's ``y`` and ``classes_``) are indices into ``classes``.
* Full score vectors: one column per class, ``p_<class>`` for probabilities
  (read as logits with ``logits=True`` / ``--logits``) or ``logit_<class>``
  for logits; class names come from the column names, in column order.
* Top score only: ``pred`` (predicted class name) and ``score``, on the scale
  ``score_range`` (default (0, 1); ``--score-range 0 10`` for PhANNs).
* Binned counts: ``predicted_class, bin_lo, bin_hi, tp, fp`` (detected by
  its columns; bins are (bin_lo, bin_hi]).

A ``.npz`` file holds the same columns as 1-d arrays, or a 2-d ``probs`` or
``logits`` array with optional ``classes`` and ``labels`` (or ``label``).

Published layouts recognised without any option (:data:`KNOWN_LAYOUTS`):

* netcal's ``.npz`` records: a 2-d ``predictions`` array (probabilities) and
  ``ground_truth`` (true class indices);
* ``true_label,pred_label,confidence`` tables (one row a sample: true class,
  predicted class, top score), as published for ImageNet networks.

Anything else: map each role to a column with ``columns={"label": "y",
"score": "conf", ...}`` (``--column ROLE=NAME`` on the command line); roles
are :data:`COLUMN_ROLES`.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from .data import TopLabelData, label_names
from .errors import DataError

__all__ = ["read_table", "read_frame", "read_data", "BINNED_COLUMNS", "COLUMN_ROLES", "KNOWN_LAYOUTS",
           "column_roles"]

BINNED_COLUMNS = ("predicted_class", "bin_lo", "bin_hi", "tp", "fp")

#: Roles a column can be given with ``columns`` / ``--column ROLE=NAME``.
COLUMN_ROLES = ("label", "pred", "score") + BINNED_COLUMNS

#: Published layouts read as they are: name -> {role: column} (tables) or
#: {standard npz key: their key} (npz).
KNOWN_LAYOUTS = {
    "true_label,pred_label,confidence": {"label": "true_label", "pred": "pred_label", "score": "confidence"},
    "netcal npz": {"probs": "predictions", "labels": "ground_truth"},
}


def read_table(path):
    """Read a CSV, Parquet or .npz file into a pandas DataFrame (no validation)."""
    import pandas as pd

    p = Path(path)
    if not p.exists():
        raise DataError(f"data file {str(p)!r} does not exist; check the path")
    if p.is_dir():
        raise DataError(f"{str(p)!r} is a directory; give a CSV, Parquet or .npz file")
    suffix = p.suffix.lower()
    try:
        if suffix in (".csv", ".txt", ".tsv"):
            sep = "\t" if suffix == ".tsv" else ","
            _check_header(p, sep)
            frame = pd.read_csv(p, sep=sep, low_memory=False)  # one type per column, not one per chunk
        elif suffix in (".parquet", ".pq"):
            frame = pd.read_parquet(p)
        elif suffix == ".npz":
            frame = _npz_frame(p)
        else:
            raise DataError(
                f"cannot tell the format of {str(p)!r} from its extension {suffix!r}; "
                "use .csv, .tsv, .parquet or .npz"
            )
    except DataError:
        raise
    except Exception as exc:  # pandas/pyarrow raise many types for bad files
        msg = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise DataError(f"cannot read {str(p)!r}: {msg}") from None
    if len(frame) == 0:
        raise DataError(f"{str(p)!r} has no rows; topcal needs at least one")
    return frame


def _check_header(p: Path, sep: str) -> None:
    """Reject duplicate column names (pandas would silently rename them 'x.1')."""
    import csv

    with open(p, newline="", encoding="utf-8", errors="replace") as fh:
        header = next(csv.reader(fh, delimiter=sep), None)
    if not header:
        raise DataError(f"{str(p)!r} is empty; it needs a header line and at least one row")
    seen = set()
    for name in header:
        if name in seen:
            raise DataError(f"{str(p)!r} has the column {name!r} twice; column (and class) names must be unique")
        seen.add(name)


def _npz_frame(p: Path):
    import pandas as pd

    with np.load(p, allow_pickle=False) as z:
        arrays = {k: z[k] for k in z.files}
    for key, arr in arrays.items():
        if arr.dtype.kind == "c":
            raise DataError(f"array {key!r} in {str(p)!r} holds complex numbers; topcal reads real numbers and names")
        if arr.dtype.kind not in "biufUS":
            raise DataError(f"array {key!r} in {str(p)!r} has the unsupported type {arr.dtype}; "
                            "use numbers or strings")
    arrays = _netcal_arrays(arrays)
    cols = {}
    classes = [str(c) for c in arrays.pop("classes")] if "classes" in arrays else None
    for key, prefix in (("probs", "p_"), ("logits", "logit_")):
        if key in arrays:
            m = arrays.pop(key)
            if m.ndim != 2:
                raise DataError(f"{key} in {str(p)!r} must be 2-d (samples x classes), got shape {m.shape}")
            names = classes or [str(i) for i in range(m.shape[1])]
            if len(names) != m.shape[1]:
                raise DataError(f"{str(p)!r} has {len(names)} classes but {key} has {m.shape[1]} columns")
            for j, c in enumerate(names):
                cols[prefix + c] = m[:, j]
    if "labels" in arrays and "label" not in arrays:
        arrays["label"] = arrays.pop("labels")
    lab = arrays.get("label")
    if classes and lab is not None and lab.dtype.kind in "iu" and not any(_is_integer_name(c) for c in classes):
        # integer labels beside non-numeric class names (scikit-learn's y and classes_): indices into
        # 'classes', the one reading that can match; with numeric names they are matched as names
        if lab.ndim == 1 and lab.size and (lab.min() < 0 or lab.max() >= len(classes)):
            i = int(np.flatnonzero((lab < 0) | (lab >= len(classes)))[0])
            raise DataError(f"labels in {str(p)!r} has index {int(lab[i])} at row {i}, outside 0..{len(classes) - 1}; "
                            "integer labels beside class names are indices into 'classes'")
        if lab.ndim == 1:
            arrays["label"] = np.asarray(classes, dtype=object)[lab]
    for key, arr in arrays.items():
        if arr.ndim != 1:
            raise DataError(f"array {key!r} in {str(p)!r} must be 1-d, got shape {arr.shape}")
        cols[key] = arr
    try:
        return pd.DataFrame(cols)
    except ValueError as exc:
        raise DataError(f"arrays in {str(p)!r} have different lengths ({exc}); give one value per sample") from None


def _is_integer_name(name: str) -> bool:
    try:
        return str(int(name)) == name
    except ValueError:
        return False


def _netcal_arrays(arrays: dict) -> dict:
    """netcal's records (``predictions``, ``ground_truth``) under the standard keys ``probs``, ``labels``."""
    layout = KNOWN_LAYOUTS["netcal npz"]
    if layout["probs"] in arrays and not {"probs", "logits"} & set(arrays):
        arrays = dict(arrays)
        for ours, theirs in layout.items():
            if theirs in arrays and ours not in arrays and "label" not in arrays:
                arrays[ours] = arrays.pop(theirs)
    return arrays


def column_roles(cols, columns=None, *, label_column="label", pred_column="pred", score_column="score") -> dict:
    """Which column plays which role: ``{role: column}`` for the roles in :data:`COLUMN_ROLES`.

    ``columns`` (role -> column name) wins; then the named ``*_column``
    options; when none of those names is a column and the columns are a known
    published layout (:data:`KNOWN_LAYOUTS`), that layout's names.
    """
    cols = [str(c) for c in cols]
    roles = {"label": label_column, "pred": pred_column, "score": score_column}
    roles.update({c: c for c in BINNED_COLUMNS})
    layout = KNOWN_LAYOUTS["true_label,pred_label,confidence"]
    if (pred_column not in cols and score_column not in cols and label_column not in cols
            and all(layout[r] in cols for r in ("pred", "score"))):
        roles.update(layout)
    for role, name in (columns or {}).items():
        if role not in COLUMN_ROLES:
            raise DataError(f"unknown column role {role!r}; roles are: {', '.join(COLUMN_ROLES)}")
        if str(name) not in cols:
            shown = ", ".join(cols[:8]) + (", ..." if len(cols) > 8 else "")
            raise DataError(f"column {name!r} (given for the role {role!r}) is not in the data; its columns are: {shown}")
        roles[role] = str(name)
    return roles


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
) -> TopLabelData:
    """Build :class:`TopLabelData` from a DataFrame by the column conventions above.

    ``columns`` maps roles (:data:`COLUMN_ROLES`) to column names.
    """
    try:
        return _read_frame(frame, columns, label_column, logits, prob_prefix, logit_prefix, pred_column,
                           score_column, score_range, renormalize, classes)
    except (TypeError, OverflowError) as exc:  # cells pandas/numpy cannot turn into numbers or names
        raise DataError(f"a column holds values topcal cannot read ({exc}); give numbers and class names") from None


def _read_frame(frame, columns, label_column, logits, prob_prefix, logit_prefix, pred_column, score_column,
                score_range, renormalize, classes):
    cols = [str(c) for c in frame.columns]
    roles = column_roles(cols, columns, label_column=label_column, pred_column=pred_column,
                         score_column=score_column)
    label_column, pred_column, score_column = roles["label"], roles["pred"], roles["score"]
    binned = {roles[c]: c for c in BINNED_COLUMNS if roles[c] != c}
    if binned:
        frame = frame.rename(columns=binned)
        cols = [str(c) for c in frame.columns]
    labels = None
    if label_column in cols:
        labels = label_names(frame[label_column].to_numpy(), f"label column {label_column!r}")
    if all(c in cols for c in BINNED_COLUMNS):
        return TopLabelData.from_binned(
            label_names(frame["predicted_class"].to_numpy(), "predicted_class"),
            *(_numeric(frame, [c])[:, 0] for c in BINNED_COLUMNS[1:]), classes=classes, score_range=score_range,
        )
    logit_cols = [c for c in cols if c.startswith(logit_prefix)]
    prob_cols = [c for c in cols if c.startswith(prob_prefix)]
    if logit_cols and prob_cols:
        raise DataError(
            f"data has both {prob_prefix}* and {logit_prefix}* columns; keep one set of score columns"
        )
    vec_cols, prefix = (logit_cols, logit_prefix) if logit_cols else (prob_cols, prob_prefix)
    if vec_cols:
        names = [c[len(prefix):] for c in vec_cols]
        if classes is not None and [str(c) for c in classes] != names:
            raise DataError(f"classes {list(classes)} do not match the score columns {vec_cols}")
        matrix = _numeric(frame, vec_cols)
        if score_range is not None and tuple(float(v) for v in score_range) != (0.0, 1.0):
            raise DataError("--score-range applies to pred/score columns; probability columns are on (0, 1)")
        try:
            if logit_cols or logits:
                return TopLabelData.from_logits(matrix, labels, classes=names)
            return TopLabelData.from_probs(matrix, labels, classes=names, renormalize=renormalize)
        except DataError as exc:
            if labels is None or "labels" not in str(exc):
                raise
            raise DataError(f"{exc} (labels are matched to the class names in the {prefix}<class> column "
                            "names, not to column positions)") from None
    if pred_column in cols and score_column in cols:
        pred = label_names(frame[pred_column].to_numpy(), f"column {pred_column!r}")
        if labels is not None and classes is None and not set(labels).intersection(pred):
            raise DataError(
                f"no label in {label_column!r} names a predicted class in {pred_column!r} (labels like "
                f"{sorted(set(labels))[:3]}, predictions like {sorted(set(pred))[:3]}); both columns must use "
                "the same class names"
            )
        return TopLabelData.from_scores(
            pred,
            _numeric(frame, [score_column])[:, 0], labels,
            classes=classes, score_range=(0.0, 1.0) if score_range is None else score_range,
        )
    raise DataError(
        f"cannot find score columns in {cols[:8]}{'...' if len(cols) > 8 else ''}: expected "
        f"{prob_prefix}<class> probability columns, {logit_prefix}<class> logits, "
        f"'{pred_column}' + '{score_column}', or binned {','.join(BINNED_COLUMNS)}"
    )


def _numeric(frame, columns) -> np.ndarray:
    import pandas as pd

    out = np.empty((len(frame), len(columns)), dtype=np.float64)
    for j, c in enumerate(columns):
        col = pd.to_numeric(frame[c], errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)
        bad = np.isnan(col) & ~pd.isna(frame[c]).to_numpy()
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise DataError(f"column {c!r} has a non-numeric value {frame[c].iloc[i]!r} at row {i}; fix or remove it")
        if np.isnan(col).any():
            i = int(np.flatnonzero(np.isnan(col))[0])
            raise DataError(f"column {c!r} is empty (NaN) at row {i}; remove or impute missing scores")
        out[:, j] = col
    return out


def read_data(path, **options) -> TopLabelData:
    """Read a data file into :class:`TopLabelData`; ``options`` as in :func:`read_frame`."""
    frame = read_table(path)
    try:
        return read_frame(frame, **options)
    except DataError as exc:
        raise DataError(f"{Path(path).name}: {exc}") from None
