"""The file reader: a whole CSV, TSV, Parquet or .npz file as :class:`TopLabelData`
(:func:`read_data`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from ..data import TopLabelData, is_int_name
from .._fileio import decoded_path
from .._typing import PathLike
from ..errors import DataError, first_line
from ._frame import KNOWN_LAYOUTS, check_unique, read_frame
from ._writer import csv_restore

#: Only an empty CSV field is missing: "NA", "None", "null", "nan" are class names (pandas'
#: default list would read them as missing); a number column holding such text is refused by
#: name.
CSV_NA = {"keep_default_na": False, "na_values": [""]}


def csv_sep(p: Path) -> str:
    """The field separator of a text table: a tab for ``.tsv``, else a comma."""
    return "\t" if p.suffix.lower() == ".tsv" else ","


def data_path(path) -> Path:
    """``path`` (str, bytes or path object) as a Path; a one-line DataError for anything
    else (an array or a DataFrame given where a file is read)."""
    decoded = decoded_path(path)
    if decoded is None:
        raise DataError(
            f"a data file is read from its path (str, bytes or pathlib.Path), got "
            f"{type(path).__name__}; arrays and DataFrames go to fit/predict directly "
            "(or topcal.io.inputs.as_data)"
        )
    return Path(decoded)


def read_table(path):
    """Read a CSV, Parquet or .npz file into a pandas DataFrame (no validation)."""
    import pandas as pd

    p = data_path(path)
    if not p.exists():
        raise DataError(f"data file {str(p)!r} does not exist; check the path")
    if p.is_dir():
        raise DataError(
            f"{str(p)!r} is a directory; give a CSV, Parquet or .npz file "
            "(a directory of Parquet files is read in chunks: --chunk-rows, or --engine dask)"
        )
    suffix = p.suffix.lower()
    try:
        if suffix in (".csv", ".txt", ".tsv"):
            sep = csv_sep(p)
            check_header(p)
            frame = pd.read_csv(
                p, sep=sep, low_memory=False, **CSV_NA
            )  # one type per column, not one per chunk
            frame = csv_restore(frame)  # text topcal wrote reads back as the text it was given
        elif suffix in (".parquet", ".pq"):
            import pyarrow.parquet as pq

            # (pyarrow's own message for a name twice is many lines)
            check_unique(pq.read_schema(p).names, repr(str(p)))
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


def check_header(p: Path) -> None:
    """Reject duplicate column names (pandas would silently rename them 'x.1')."""
    import csv

    with open(p, newline="", encoding="utf-8", errors="replace") as fh:
        header = next(csv.reader(fh, delimiter=csv_sep(p)), None)
    if not header:
        raise DataError(f"{str(p)!r} is empty; it needs a header line and at least one row")
    check_unique(header, repr(str(p)))


def _npz_frame(p: Path):
    import pandas as pd

    with np.load(p, allow_pickle=False) as z:
        arrays = {k: z[k] for k in z.files}
    for key, arr in arrays.items():
        if arr.dtype.kind == "c":
            raise DataError(
                f"array {key!r} in {str(p)!r} holds complex numbers; topcal reads real "
                "numbers and names"
            )
        if arr.dtype.kind not in "biufUS":
            raise DataError(
                f"array {key!r} in {str(p)!r} has the unsupported type {arr.dtype}; "
                "use numbers or strings"
            )
    arrays = _netcal_arrays(arrays)
    cols = {}
    classes = [str(c) for c in arrays.pop("classes")] if "classes" in arrays else None
    for key, prefix in (("probs", "p_"), ("logits", "logit_")):
        if key in arrays:
            m = arrays.pop(key)
            if m.ndim != 2:
                raise DataError(
                    f"{key} in {str(p)!r} must be 2-d (samples x classes), got shape {m.shape}"
                )
            names = classes or [str(i) for i in range(m.shape[1])]
            if len(names) != m.shape[1]:
                raise DataError(
                    f"{str(p)!r} has {len(names)} classes but {key} has {m.shape[1]} columns"
                )
            for j, c in enumerate(names):
                cols[prefix + c] = m[:, j]
    if "labels" in arrays and "label" not in arrays:
        arrays["label"] = arrays.pop("labels")
    lab = arrays.get("label")
    if (
        classes
        and lab is not None
        and lab.dtype.kind in "iu"
        and not any(is_int_name(c) for c in classes)
    ):
        # integer labels beside non-numeric class names (scikit-learn's y and classes_):
        # indices into 'classes', the one reading that can match; with numeric names they
        # are matched as names
        if lab.ndim == 1 and lab.size and (lab.min() < 0 or lab.max() >= len(classes)):
            i = int(np.flatnonzero((lab < 0) | (lab >= len(classes)))[0])
            raise DataError(
                f"labels in {str(p)!r} has index {int(lab[i])} at row {i + 1}, outside "
                f"0..{len(classes) - 1}; integer labels beside class names are indices "
                "into 'classes'"
            )
        if lab.ndim == 1:
            arrays["label"] = np.asarray(classes, dtype=object)[lab]
    for key, arr in arrays.items():
        if arr.ndim != 1:
            raise DataError(f"array {key!r} in {str(p)!r} must be 1-d, got shape {arr.shape}")
        cols[key] = arr
    try:
        return pd.DataFrame(cols)
    except ValueError as exc:
        raise DataError(
            f"arrays in {str(p)!r} have different lengths ({exc}); give one value per sample"
        ) from None


def _netcal_arrays(arrays: dict) -> dict:
    """netcal's records (``predictions``, ``ground_truth``) under the standard keys
    ``probs``, ``labels``."""
    layout = KNOWN_LAYOUTS["netcal npz"]
    if layout["probs"] in arrays and not {"probs", "logits"} & set(arrays):
        arrays = dict(arrays)
        for ours, theirs in layout.items():
            if theirs in arrays and ours not in arrays and "label" not in arrays:
                arrays[ours] = arrays.pop(theirs)
    return arrays


def read_data(path: PathLike, **options: Any) -> TopLabelData:
    """Read a data file into :class:`TopLabelData`; ``options`` as in :func:`read_frame`."""
    frame = read_table(path)
    try:
        return read_frame(frame, **options)
    except DataError as exc:
        raise DataError(f"{data_path(path).name}: {exc}") from None
