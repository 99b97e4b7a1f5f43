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

Bounded memory: :func:`iter_data` reads CSV in chunks of ``chunk_rows`` rows
and Parquet one row group at a time, sliced into chunks of at most
``chunk_rows`` rows, so memory depends on the chunk and the row group, not
the file; :func:`read_stats` folds the chunks into
mergeable statistics (:class:`topcal.stats.ScoreStats`). The class list and
the score range, which a whole-file read infers from all rows, are found
first by a pass over the class columns only (:func:`scan_layout`), so every
chunk is read with the same classes as one whole-file read would be.

Size: it reads every supported layout (per sample, top score, binned; CSV, Parquet, .npz; whole
or in chunks) through one column-role mapping; splitting by file format would repeat that mapping.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from ._fileio import atomic_write
from .data import TopLabelData, is_int_name, label_names
from .errors import DataError, first_line
from .stats import DEFAULT_CELLS, ScoreStats

__all__ = ["read_table", "read_frame", "read_data", "BINNED_COLUMNS", "COLUMN_ROLES", "KNOWN_LAYOUTS",
           "column_roles", "roles_from_options", "iter_tables", "scan_layout", "iter_data", "read_stats", "Layout", "layout_columns",
           "build_layout", "top_score_chosen", "DEFAULT_CHUNK_ROWS", "FrameWriter", "file_columns", "parquet_files", "count_rows"]

#: Rows per chunk when streaming (about 100 MB for ten probability columns).
DEFAULT_CHUNK_ROWS = 1_000_000

BINNED_COLUMNS = ("predicted_class", "bin_lo", "bin_hi", "tp", "fp")

#: Roles a column can be given with ``columns`` / ``--column ROLE=NAME``.
COLUMN_ROLES = ("label", "pred", "score") + BINNED_COLUMNS

#: Only an empty CSV field is missing: "NA", "None", "null", "nan" are class names (pandas' default
#: list would read them as missing); a number column holding such text is refused by name.
CSV_NA = {"keep_default_na": False, "na_values": [""]}

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
        raise DataError(f"{str(p)!r} is a directory; give a CSV, Parquet or .npz file "
                        "(a directory of Parquet files is read in chunks: --chunk-rows, or --engine dask)")
    suffix = p.suffix.lower()
    try:
        if suffix in (".csv", ".txt", ".tsv"):
            sep = "\t" if suffix == ".tsv" else ","
            _check_header(p, sep)
            frame = pd.read_csv(p, sep=sep, low_memory=False, **CSV_NA)  # one type per column, not one per chunk
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
        raise DataError(f"cannot read {str(p)!r}: {first_line(exc)}") from None
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
    if classes and lab is not None and lab.dtype.kind in "iu" and not any(is_int_name(c) for c in classes):
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
    used: dict[str, str] = {}
    for role, name in roles.items():  # one column in two roles (pred and label: every row "right")
        if name is not None and name in cols:
            if name in used:
                raise DataError(f"column {name!r} is given two roles, {used[name]!r} and {role!r}; each role needs "
                                "its own column")
            used[name] = role
    return roles


def top_score_chosen(columns=None, pred_column: str = "pred", score_column: str = "score") -> bool:
    """Whether the options name a top-score column (``columns`` with a pred or score role, or a
    ``*_column`` name other than the default): then the pred/score columns are read even where
    probability columns exist (e.g. ``apply``'s output: its calibrated ``confidence``)."""
    return bool({"pred", "score"} & set(columns or {})) or pred_column != "pred" or score_column != "score"


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

    ``columns`` maps roles (:data:`COLUMN_ROLES`) to column names. ``y``
    (one true class per row) gives the labels beside the frame instead of in
    its label column.
    """
    if y is not None:
        if label_column in frame.columns:
            raise DataError(f"y was given but the DataFrame also has a {label_column!r} column; pass one or the other")
        y = np.asarray(y)
        if y.ndim != 1 or y.shape[0] != len(frame):
            raise DataError(f"y has shape {y.shape} but the DataFrame has {len(frame)} rows; give one label per row")
        frame = frame.assign(**{_LABEL_SLOT: y})
        label_column = _LABEL_SLOT
    try:
        return _read_frame(frame, columns, label_column, logits, prob_prefix, logit_prefix, pred_column,
                           score_column, score_range, renormalize, classes)
    except (TypeError, OverflowError) as exc:  # cells pandas/numpy cannot turn into numbers or names
        raise DataError(f"a column holds values topcal cannot read ({exc}); give numbers and class names") from None


def _read_frame(frame, columns, label_column, logits, prob_prefix, logit_prefix, pred_column, score_column,
                score_range, renormalize, classes):
    cols = [str(c) for c in frame.columns]
    top_score = top_score_chosen(columns, pred_column=pred_column, score_column=score_column)
    roles = column_roles(cols, columns, label_column=label_column, pred_column=pred_column,
                         score_column=score_column)
    label_column, pred_column, score_column = roles["label"], roles["pred"], roles["score"]
    binned = {roles[c]: c for c in BINNED_COLUMNS if roles[c] != c}
    if binned:
        frame = frame.rename(columns=binned)
        cols = [str(c) for c in frame.columns]
    labels = None
    if label_column in cols:
        labels = _class_values(frame[label_column], classes, f"label column {label_column!r}")
    if all(c in cols for c in BINNED_COLUMNS):
        return TopLabelData.from_binned(
            label_names(frame["predicted_class"].to_numpy(), "predicted_class"),
            *(_numeric(frame, [c])[:, 0] for c in BINNED_COLUMNS[1:]), classes=classes, score_range=score_range,
        )
    if top_score:
        logit_cols = prob_cols = []  # the named top score, not the probability columns beside it
    else:
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
        if label_column in cols:
            labels = _class_values(frame[label_column], names, f"label column {label_column!r}")
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
        pred = _class_values(frame[pred_column], classes, f"column {pred_column!r}")
        if labels is not None and classes is None and not set(labels).intersection(pred):
            raise DataError(
                f"no label in {label_column!r} names a predicted class in {pred_column!r} (labels like "
                f"{sorted(set(labels))[:3]}, predictions like {sorted(set(pred))[:3]}); both columns must use "
                "the same class names"
            )
        return TopLabelData.from_scores(
            pred, _numeric(frame, [score_column])[:, 0], labels,
            classes=classes, score_range=(0.0, 1.0) if score_range is None else score_range,
        )
    raise DataError(
        f"cannot find score columns in {cols[:8]}{'...' if len(cols) > 8 else ''}: expected "
        f"{prob_prefix}<class> probability columns, {logit_prefix}<class> logits, "
        f"'{pred_column}' + '{score_column}', or binned {','.join(BINNED_COLUMNS)}"
    )


def _class_values(column, classes, name: str):
    """A class column as an array; a categorical of names with a known class list as indices.

    The fast path (one lookup per category instead of per row; Parquet
    dictionary columns arrive as categoricals) gives the indices that
    name-matching would give; anything else (missing or unknown names,
    numeric categories) takes the general path (:func:`topcal.data.label_names`)
    and its messages.
    """
    import pandas as pd

    if classes is not None and isinstance(column.dtype, pd.CategoricalDtype) \
            and column.cat.categories.dtype.kind not in "iufb":
        lookup = {str(c): i for i, c in enumerate(classes)}
        index = np.array([lookup.get(str(c), -1) for c in column.cat.categories] + [-1], dtype=np.int64)
        codes = index[column.cat.codes.to_numpy()]  # code -1 (missing) picks the trailing -1
        if codes.size and codes.min() >= 0:
            return codes
    return label_names(column.to_numpy(), name)


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


# ------------------------------------------------------------------ streaming
_STREAM_SUFFIXES = (".csv", ".txt", ".tsv", ".parquet", ".pq")


def _stream_path(path) -> Path:
    p = Path(path)
    if not p.exists():
        raise DataError(f"data file {str(p)!r} does not exist; check the path")
    if p.is_dir():
        if not parquet_files(p):
            raise DataError(f"directory {str(p)!r} holds no .parquet files; give a CSV or Parquet file")
        return p
    if p.suffix.lower() not in _STREAM_SUFFIXES:
        raise DataError(f"{str(p)!r} cannot be read in chunks; streaming reads .csv, .tsv or .parquet files")
    return p


def parquet_files(directory) -> list[Path]:
    """The .parquet/.pq files of a directory (a partitioned data set), in name order."""
    d = Path(directory)
    return sorted(f for f in d.iterdir() if f.is_file() and f.suffix.lower() in (".parquet", ".pq"))


def _parquet_parts(p: Path) -> list[Path] | None:
    """The Parquet files behind ``p`` (a file or a directory of them); None for CSV."""
    if p.is_dir():
        return parquet_files(p)
    return [p] if p.suffix.lower() in (".parquet", ".pq") else None


def file_columns(path) -> list[str]:
    """Column names of a CSV or Parquet file, read from its header or schema only."""
    p = _stream_path(path)
    suffix = p.suffix.lower()
    try:
        parts = _parquet_parts(p)
        if parts is not None:
            import pyarrow.parquet as pq

            return [str(c) for c in pq.read_schema(parts[0]).names if not str(c).startswith("__index_level_")]
        _check_header(p, "\t" if suffix == ".tsv" else ",")
        import csv

        with open(p, newline="", encoding="utf-8", errors="replace") as fh:
            return next(csv.reader(fh, delimiter="\t" if suffix == ".tsv" else ","))
    except DataError:
        raise
    except Exception as exc:
        raise DataError(f"cannot read {str(p)!r}: {first_line(exc)}") from None


def iter_tables(path, chunk_rows: int = DEFAULT_CHUNK_ROWS, *, columns=None, str_columns=()):
    """Yield the rows of a CSV or Parquet file as DataFrames of at most ``chunk_rows`` rows.

    ``columns`` limits the columns read; ``str_columns`` are read as text
    (CSV), so their type does not change from chunk to chunk.
    """
    import pandas as pd

    if isinstance(chunk_rows, bool) or not isinstance(chunk_rows, (int, np.integer)) or chunk_rows < 1:
        raise DataError(f"chunk_rows must be an integer >= 1, got {chunk_rows!r}")
    p = _stream_path(path)
    suffix = p.suffix.lower()
    n = 0
    try:
        parts = _parquet_parts(p)
        if parts is not None:
            import pyarrow.parquet as pq

            for part in parts:
                pf = pq.ParquetFile(part)
                # one row group at a time (iter_batches buffers ahead: its memory grew with the file)
                for g in range(pf.num_row_groups):
                    table = pf.read_row_group(g, columns=columns)
                    for start in range(0, table.num_rows, int(chunk_rows)):
                        frame = table.slice(start, int(chunk_rows)).to_pandas()
                        n += len(frame)
                        yield frame
                    del table
        else:
            _check_header(p, "\t" if suffix == ".tsv" else ",")
            dtype = {c: str for c in str_columns}
            with pd.read_csv(p, sep="\t" if suffix == ".tsv" else ",", chunksize=int(chunk_rows),
                             usecols=columns, dtype=dtype or None, low_memory=False, **CSV_NA) as reader:
                for frame in reader:
                    n += len(frame)
                    yield frame
    except DataError:
        raise
    except GeneratorExit:
        raise
    except Exception as exc:  # pandas/pyarrow raise many types for bad files
        raise DataError(f"cannot read {str(p)!r} after row {n}: {first_line(exc)}") from None
    if n == 0:
        raise DataError(f"{str(p)!r} has no rows; topcal needs at least one")


class Layout:
    """What a streamed file holds: its read options, fixed for every chunk.

    Attributes: ``options`` (for :func:`read_frame`, with ``classes`` and
    ``score_range`` filled in where a whole-file read would infer them),
    ``str_columns`` (class columns read as text) and ``n_rows``.
    """

    def __init__(self, options: dict, str_columns: tuple, n_rows: int | None):
        self.options = options
        self.str_columns = str_columns
        self.n_rows = n_rows


def roles_from_options(cols, options: dict) -> dict:
    """:func:`column_roles` from read options (``columns`` and the ``*_column`` names)."""
    return column_roles(cols, options.get("columns"), label_column=options.get("label_column", "label"),
                        pred_column=options.get("pred_column", "pred"),
                        score_column=options.get("score_column", "score"))


def layout_columns(columns, /, **options) -> tuple[list[str], list[str], bool, bool]:
    """(class columns, extra columns, binned?, vector?) of a file with ``columns``.

    The class columns are those whose distinct values decide the class list
    (and, with the extra columns, the binned score range) of a whole-file read.
    """
    cols = [str(c) for c in columns]
    roles = roles_from_options(cols, options)
    label = roles["label"] if options.get("label_column", "label") is not None else None
    pred = roles["pred"]
    binned = all(roles[c] in cols for c in BINNED_COLUMNS)
    prob_prefix, logit_prefix = options.get("prob_prefix", "p_"), options.get("logit_prefix", "logit_")
    vector = not binned and any(c.startswith(prob_prefix) or c.startswith(logit_prefix) for c in cols) \
        and not top_score_chosen(options.get("columns"), pred_column=options.get("pred_column", "pred"),
                                 score_column=options.get("score_column", "score"))
    if binned:
        class_cols = [roles["predicted_class"]]
    elif vector:
        class_cols = []
    else:
        class_cols = [pred] if pred in cols else []
    if label and label in cols and not binned:
        class_cols.append(label)
    return class_cols, ([roles["bin_lo"], roles["bin_hi"]] if binned else []), binned, vector


def build_layout(columns, uniques: dict, numeric: dict, lo_hi, /, *, str_columns=(), n_rows=None, classes=None,
                 **options) -> "Layout":
    """The :class:`Layout` a whole-file read would use, from each class column's distinct values.

    ``uniques`` maps each class column to its distinct values in order of
    first appearance, ``numeric`` to whether it is numeric throughout;
    ``lo_hi`` is the lowest bin_lo and highest bin_hi (binned data).
    """
    import pandas as pd

    class_cols, _, binned, vector = layout_columns(columns, **options)
    opts = dict(options)
    if binned and opts.get("score_range") is None and np.isfinite(lo_hi).all() and (lo_hi[0] < 0 or lo_hi[1] > 1):
        # as a whole-file read: the range of binned counts is declared, never guessed from the bins
        raise DataError(f"the bins reach from {lo_hi[0]:g} to {lo_hi[1]:g}, outside the default score range "
                        "[0, 1]; declare a score_range (--score-range LO HI) that covers every bin")
    if classes is not None and not vector:  # a vector layout's classes are its columns
        opts["classes"] = list(classes)
    elif classes is None and class_cols and not vector:
        # a small frame with every distinct class value, read like the whole file would be
        sk = {}
        for c in class_cols:
            vals = list(uniques[c])
            sk[c] = np.asarray([str(v) for v in vals], dtype=object) if not numeric[c] else np.asarray(vals)
        m = max(len(v) for v in sk.values())
        frame = pd.DataFrame({c: np.resize(v, m) for c, v in sk.items()})
        roles = roles_from_options(columns, options)
        if binned:
            frame[roles["bin_lo"]], frame[roles["bin_hi"]] = float(lo_hi[0]), float(lo_hi[1])
            frame[roles["tp"]], frame[roles["fp"]] = 1.0, 0.0
        else:
            lo = 0.0 if opts.get("score_range") is None else float(opts["score_range"][0])
            frame[roles["score"]] = lo
        mapped = {r: n for r, n in (opts.get("columns") or {}).items() if str(n) in frame.columns}
        opts["classes"] = list(read_frame(frame, **{**opts, "columns": mapped or None}).classes)
    return Layout(opts, tuple(str_columns), n_rows)


def scan_layout(path, chunk_rows: int = DEFAULT_CHUNK_ROWS, *, classes=None, **options) -> Layout:
    """Find the classes and score range a whole-file read would infer, reading only the class columns.

    With ``classes`` given (e.g. a model's, for ``apply``) no class is
    inferred, but the class columns' types are still checked for CSV.
    """
    import pandas as pd

    p = _stream_path(path)
    cols = file_columns(p)
    class_cols, extra, binned, vector = layout_columns(cols, **options)
    is_csv = _parquet_parts(p) is None
    uniques = {c: [] for c in class_cols}
    numeric = {c: True for c in class_cols}
    lo_hi = [np.inf, -np.inf]
    n = 0
    # Parquet columns have one type throughout: a scan is needed only to infer classes or the range
    need_scan = bool(class_cols) and (is_csv or (classes is None and not vector)) \
        or (binned and options.get("score_range") is None)
    if need_scan:
        for frame in iter_tables(p, chunk_rows, columns=class_cols + extra):
            n += len(frame)
            for c in class_cols:
                uniques[c].append(pd.unique(frame[c]))
                numeric[c] &= frame[c].dtype.kind in "iuf"
            if binned:
                lo_hi[0] = min(lo_hi[0], float(pd.to_numeric(frame[extra[0]], errors="coerce").min()))
                lo_hi[1] = max(lo_hi[1], float(pd.to_numeric(frame[extra[1]], errors="coerce").max()))
    for c in class_cols:
        parts = [np.asarray(u) if numeric[c] else np.asarray(u, dtype=object) for u in uniques[c]]
        uniques[c] = pd.unique(np.concatenate(parts)) if parts else np.zeros(0, dtype=object)
    str_columns = tuple(c for c in class_cols if is_csv and not numeric[c])
    try:
        return build_layout(cols, uniques, numeric, lo_hi, str_columns=str_columns, n_rows=n if need_scan else None,
                            classes=classes, **options)
    except DataError as exc:
        raise DataError(f"{p.name}: {exc}") from None


def iter_data(path, chunk_rows: int = DEFAULT_CHUNK_ROWS, *, layout: Layout | None = None, **options):
    """Yield ``(frame, TopLabelData)`` per chunk of a CSV or Parquet file, all with one class list."""
    layout = layout or scan_layout(path, chunk_rows, **options)
    start = 0
    for frame in iter_tables(path, chunk_rows, str_columns=layout.str_columns):
        try:
            data = read_frame(frame, **layout.options)
        except DataError as exc:
            # the chunk's row numbers as the file's (those of a whole-file read)
            msg = re.sub(r"\b(rows?) (\d+)", lambda m: f"{m.group(1)} {int(m.group(2)) + start}", str(exc))
            raise DataError(f"{Path(path).name}: {msg}") from None
        start += len(frame)
        yield frame, data


def read_stats(path, chunk_rows: int = DEFAULT_CHUNK_ROWS, *, n_cells: int = DEFAULT_CELLS, progress=None,
               stats_of=None, **options) -> ScoreStats:
    """The mergeable statistics of a labelled CSV or Parquet file, read in chunks (bounded memory).

    ``progress``, if given, is called with the number of rows read so far
    after each chunk. ``stats_of``, if given, computes a chunk's statistics
    instead of ``ScoreStats.from_data(chunk, n_cells=n_cells)`` (a model's
    ``stats_of``: the loss tables of ``sts``/``csts``; or
    :class:`topcal.evidence.Evidence`, statistics with confusion counts); they
    must have ``merge``, and the merged value is returned.
    """
    layout = scan_layout(path, chunk_rows, **options)
    stats = None
    rows = 0
    for frame, data in iter_data(path, chunk_rows, layout=layout):
        part = ScoreStats.from_data(data, n_cells=n_cells) if stats_of is None else stats_of(data)
        stats = part if stats is None else stats.merge(part)
        rows += len(frame)
        if progress is not None:
            progress(rows)
    return stats


class FrameWriter:
    """Write DataFrames chunk by chunk to one CSV or Parquet file, atomically.

    Chunks go to a temporary file beside ``path`` (:func:`topcal._fileio.atomic_write`,
    as every other writer), renamed onto ``path`` by :meth:`close`; :meth:`abort`
    (or an exception inside a ``with`` block) removes it, so a failed run never
    leaves a partial output. Parquet chunks keep the first chunk's schema (one
    row group per chunk).
    """

    def __init__(self, path):
        self.path = Path(path)
        suffix = self.path.suffix.lower()
        if suffix in (".parquet", ".pq"):
            self.kind = "parquet"
        elif suffix in (".csv", ".txt", ""):
            self.kind = "csv"
        else:
            raise DataError(f"cannot write {suffix!r} files; name the output .csv or .parquet")
        self._target = atomic_write(self.path)
        self.tmp = self._target.__enter__()  # left by close() (replace) or abort() (remove)
        self._done = False
        self._writer = None
        self._schema = None
        self._fh = None
        self.rows = 0

    def write(self, frame) -> None:
        try:
            if self.kind == "parquet":
                import pyarrow as pa
                import pyarrow.parquet as pq

                if self._writer is None:
                    table = pa.Table.from_pandas(frame, preserve_index=False)
                    self._schema = table.schema
                    self._writer = pq.ParquetWriter(self.tmp, self._schema)
                else:
                    table = pa.Table.from_pandas(frame, schema=self._schema, preserve_index=False)
                self._writer.write_table(table)
            else:
                if self._fh is None:
                    self._fh = open(self.tmp, "w", newline="", encoding="utf-8")
                frame.to_csv(self._fh, index=False, header=self.rows == 0)
        except OSError as exc:
            self.abort()
            raise DataError(f"cannot write {str(self.path)!r}: {exc.strerror or exc}; check the path") from None
        except (ValueError, TypeError) as exc:  # pyarrow: a column changed type between chunks
            self.abort()
            raise DataError(f"cannot write rows {self.rows}+ of {str(self.path)!r}: {first_line(exc)[:300]}; write a .csv "
                            "instead, or make each column hold one type (a larger --chunk-rows reads more rows "
                            "per type guess)") from None
        self.rows += len(frame)

    def close(self) -> None:
        try:
            if self._writer is not None:
                self._writer.close()
            if self._fh is not None:
                self._fh.close()
        except OSError as exc:
            self.abort()
            raise DataError(f"cannot write {str(self.path)!r}: {exc.strerror or exc}; check the path") from None
        self._writer = self._fh = None
        if not self._done:
            self._done = True
            self._target.__exit__(None, None, None)  # the temporary file replaces the target

    def abort(self) -> None:
        for h in (self._writer, self._fh):
            try:
                if h is not None:
                    h.close()
            except Exception:  # noqa: BLE001 - cleaning up after an error already raised
                pass
        self._writer = self._fh = None
        if not self._done:
            self._done = True
            stop = DataError("write aborted")
            self._target.__exit__(DataError, stop, None)  # removes the temporary file

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is None:
            self.close()
        else:
            self.abort()
        return False


def count_rows(path) -> int | None:
    """Rows of a Parquet file from its metadata (None for other formats: unknown without reading)."""
    p = Path(path)
    try:
        parts = _parquet_parts(p) if p.exists() else None
        if parts:
            import pyarrow.parquet as pq

            return sum(int(pq.ParquetFile(f).metadata.num_rows) for f in parts)
    except Exception:  # noqa: BLE001 - only a progress hint; reading reports real errors
        return None
    return None
