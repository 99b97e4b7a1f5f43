"""Files larger than memory: CSV and Parquet read in chunks, all with the classes of a
whole-file read.

:func:`scan_layout` finds the class list and score range a whole-file read would infer,
reading only the class columns; :func:`iter_data` then reads every chunk with them;
:func:`read_stats` folds the chunks into mergeable statistics.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Callable

import numpy as np

from ..data import TopLabelData
from ..errors import DataError, first_line
from ..evidence.stats import DEFAULT_CELLS, ScoreStats
from .._typing import PathLike
from .._tables import csv_untext
from ._file import CSV_NA, check_header, csv_sep, data_path
from ._writer import csv_restore
from ._frame import check_unique, layout_columns, read_frame, roles_from_options

#: Rows per chunk when streaming (about 100 MB for ten probability columns).
DEFAULT_CHUNK_ROWS = 1_000_000


# ------------------------------------------------------------------ streaming
_STREAM_SUFFIXES = (".csv", ".txt", ".tsv", ".parquet", ".pq")


def _stream_path(path) -> Path:
    p = data_path(path)
    if not p.exists():
        raise DataError(f"data file {str(p)!r} does not exist; check the path")
    if p.is_dir():
        if not parquet_files(p):
            raise DataError(
                f"directory {str(p)!r} holds no .parquet files; give a CSV or Parquet file"
            )
        return p
    if p.suffix.lower() not in _STREAM_SUFFIXES:
        raise DataError(
            f"{str(p)!r} cannot be read in chunks; streaming reads .csv, .tsv or .parquet "
            "files"
        )
    return p


def parquet_files(directory) -> list[Path]:
    """The .parquet/.pq files of a directory (a partitioned data set), in name order."""
    d = Path(directory)
    return sorted(
        f for f in d.iterdir() if f.is_file() and f.suffix.lower() in (".parquet", ".pq")
    )


def parquet_parts(p: Path) -> list[Path] | None:
    """The Parquet files behind ``p`` (a file or a directory of them); None for CSV."""
    if p.is_dir():
        return parquet_files(p)
    return [p] if p.suffix.lower() in (".parquet", ".pq") else None


def file_columns(path) -> list[str]:
    """Column names of a CSV or Parquet file, read from its header or schema only."""
    p = _stream_path(path)
    try:
        parts = parquet_parts(p)
        if parts is not None:
            import pyarrow.parquet as pq

            names = [
                str(c)
                for c in pq.read_schema(parts[0]).names
                if not str(c).startswith("__index_level_")
            ]
            check_unique(names, repr(str(parts[0])))
            return names
        check_header(p)
        import csv

        with open(p, newline="", encoding="utf-8", errors="replace") as fh:
            return [csv_untext(c) for c in next(csv.reader(fh, delimiter=csv_sep(p)))]
    except DataError:
        raise
    except Exception as exc:
        raise DataError(f"cannot read {str(p)!r}: {first_line(exc)}") from None


def _raw_names(p: Path) -> dict:
    """A CSV file's column names as :func:`file_columns` gives them -> as the file spells
    them."""
    import csv

    with open(p, newline="", encoding="utf-8", errors="replace") as fh:
        header = next(csv.reader(fh, delimiter=csv_sep(p)), [])
    return {csv_untext(c): c for c in header}


def iter_tables(path, chunk_rows: int = DEFAULT_CHUNK_ROWS, *, columns=None, str_columns=()):
    """Yield the rows of a CSV or Parquet file as DataFrames of at most ``chunk_rows`` rows.

    ``columns`` limits the columns read; ``str_columns`` are read as text (CSV), so their
    type does not change from chunk to chunk.
    """
    import pandas as pd

    if (
        isinstance(chunk_rows, bool)
        or not isinstance(chunk_rows, (int, np.integer))
        or chunk_rows < 1
    ):
        raise DataError(f"chunk_rows must be an integer >= 1, got {chunk_rows!r}")
    p = _stream_path(path)
    n = 0
    try:
        parts = parquet_parts(p)
        if parts is not None:
            import pyarrow.parquet as pq

            for part in parts:
                pf = pq.ParquetFile(part)
                # one row group at a time (iter_batches buffers ahead: its memory grew with
                # the file)
                for g in range(pf.num_row_groups):
                    table = pf.read_row_group(g, columns=columns)
                    for start in range(0, table.num_rows, int(chunk_rows)):
                        frame = table.slice(start, int(chunk_rows)).to_pandas()
                        n += len(frame)
                        yield frame
                    del table
        else:
            check_header(p)
            # names as file_columns gives them (csv_untext); the file's own spelling to read
            # them
            raw = _raw_names(p)
            dtype = {raw.get(c, c): str for c in str_columns}
            with pd.read_csv(
                p,
                sep=csv_sep(p),
                chunksize=int(chunk_rows),
                usecols=None if columns is None else [raw.get(c, c) for c in columns],
                dtype=dtype or None,
                low_memory=False,
                **CSV_NA,
            ) as reader:
                for frame in reader:
                    n += len(frame)
                    yield csv_restore(frame)
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

    Attributes: ``options`` (for :func:`read_frame`, with ``classes`` and ``score_range``
    filled in where a whole-file read would infer them), ``str_columns`` (class columns read
    as text) and ``n_rows``.
    """

    def __init__(self, options: dict, str_columns: tuple, n_rows: int | None):
        self.options = options
        self.str_columns = str_columns
        self.n_rows = n_rows


def build_layout(
    columns,
    uniques: dict,
    numeric: dict,
    lo_hi,
    /,
    *,
    str_columns=(),
    n_rows=None,
    classes=None,
    **options,
) -> "Layout":
    """The :class:`Layout` a whole-file read would use, from each class column's distinct
    values.

    ``uniques`` maps each class column to its distinct values in order of first appearance,
    ``numeric`` to whether it is numeric throughout; ``lo_hi`` is the lowest bin_lo and
    highest bin_hi (binned data).
    """
    import pandas as pd

    class_cols, _, binned, vector = layout_columns(columns, **options)
    opts = dict(options)
    if (
        binned
        and opts.get("score_range") is None
        and np.isfinite(lo_hi).all()
        and (lo_hi[0] < 0 or lo_hi[1] > 1)
    ):
        # as a whole-file read: the range of binned counts is declared, never guessed from
        # the bins
        raise DataError(
            f"the bins reach from {lo_hi[0]:g} to {lo_hi[1]:g}, outside the default score "
            "range [0, 1]; declare a score_range (--score-range LO HI) that covers every "
            "bin"
        )
    if classes is not None and not vector:  # a vector layout's classes are its columns
        opts["classes"] = list(classes)
    elif classes is None and class_cols and not vector:
        # a small frame with every distinct class value, read like the whole file would be
        sk = {}
        for c in class_cols:
            vals = list(uniques[c])
            sk[c] = (
                np.asarray([str(v) for v in vals], dtype=object)
                if not numeric[c]
                else np.asarray(vals)
            )
        m = max(len(v) for v in sk.values())
        frame = pd.DataFrame({c: np.resize(v, m) for c, v in sk.items()})
        roles = roles_from_options(columns, options)
        if binned:
            frame[roles["bin_lo"]], frame[roles["bin_hi"]] = float(lo_hi[0]), float(lo_hi[1])
            frame[roles["tp"]], frame[roles["fp"]] = 1.0, 0.0
        else:
            lo = 0.0 if opts.get("score_range") is None else float(opts["score_range"][0])
            frame[roles["score"]] = lo
        mapped = {
            r: n for r, n in (opts.get("columns") or {}).items() if str(n) in frame.columns
        }
        opts["classes"] = list(
            read_frame(frame, **{**opts, "columns": mapped or None}).classes
        )
    return Layout(opts, tuple(str_columns), n_rows)


def scan_layout(
    path, chunk_rows: int = DEFAULT_CHUNK_ROWS, *, classes=None, **options
) -> Layout:
    """Find the classes and score range a whole-file read would infer, reading only the
    class columns.

    With ``classes`` given (e.g. a model's, for ``apply``) no class is inferred, but the
    class columns' types are still checked for CSV.
    """
    import pandas as pd

    p = _stream_path(path)
    cols = file_columns(p)
    class_cols, extra, binned, vector = layout_columns(cols, **options)
    is_csv = parquet_parts(p) is None
    uniques: dict[str, Any] = {c: [] for c in class_cols}
    numeric = {c: True for c in class_cols}
    lo_hi = [np.inf, -np.inf]
    n = 0
    # Parquet columns have one type throughout: a scan is needed only to infer classes or
    # the range
    need_scan = (
        bool(class_cols)
        and (is_csv or (classes is None and not vector))
        or (binned and options.get("score_range") is None)
    )
    if need_scan:
        for frame in iter_tables(p, chunk_rows, columns=class_cols + extra):
            n += len(frame)
            for c in class_cols:
                uniques[c].append(pd.unique(frame[c]))
                numeric[c] &= frame[c].dtype.kind in "iuf"
            if binned:
                lo_hi[0] = min(
                    lo_hi[0], float(pd.to_numeric(frame[extra[0]], errors="coerce").min())
                )
                lo_hi[1] = max(
                    lo_hi[1], float(pd.to_numeric(frame[extra[1]], errors="coerce").max())
                )
    for c in class_cols:
        parts = [
            np.asarray(u) if numeric[c] else np.asarray(u, dtype=object) for u in uniques[c]
        ]
        uniques[c] = pd.unique(np.concatenate(parts)) if parts else np.zeros(0, dtype=object)
    str_columns = tuple(c for c in class_cols if is_csv and not numeric[c])
    try:
        return build_layout(
            cols,
            uniques,
            numeric,
            lo_hi,
            str_columns=str_columns,
            n_rows=n if need_scan else None,
            classes=classes,
            **options,
        )
    except DataError as exc:
        raise DataError(f"{p.name}: {exc}") from None


def iter_data(
    path, chunk_rows: int = DEFAULT_CHUNK_ROWS, *, layout: Layout | None = None, **options
):
    """Yield ``(frame, TopLabelData)`` per chunk of a CSV or Parquet file, all with one
    class list."""
    layout = layout or scan_layout(path, chunk_rows, **options)
    start = 0
    for frame in iter_tables(path, chunk_rows, str_columns=layout.str_columns):
        try:
            data = read_frame(frame, **layout.options)
        except DataError as exc:
            # the chunk's row numbers as the file's (those of a whole-file read)
            msg = re.sub(
                r"\b(rows?) (\d+)",
                lambda m: f"{m.group(1)} {int(m.group(2)) + start}",
                str(exc),
            )
            raise DataError(f"{Path(path).name}: {msg}") from None
        start += len(frame)
        yield frame, data


def read_stats(
    path: PathLike,
    chunk_rows: int = DEFAULT_CHUNK_ROWS,
    *,
    n_cells: int = DEFAULT_CELLS,
    progress: Callable[[int], object] | None = None,
    stats_of: Callable[[TopLabelData], Any] | None = None,
    **options: Any,
) -> ScoreStats:
    """The mergeable statistics of a labelled CSV or Parquet file, read in chunks (bounded
    memory).

    ``progress``, if given, is called with the number of rows read so far after each chunk.
    ``stats_of``, if given, computes a chunk's statistics instead of
    ``ScoreStats.from_data(chunk, n_cells=n_cells)`` (a model's ``stats_of``: the loss
    tables of ``sts``/``csts``; or :class:`topcal.evidence.core.Evidence`, statistics with
    confusion counts); they must have ``merge``, and the merged value is returned.
    """
    layout = scan_layout(path, chunk_rows, **options)
    stats = None
    rows = 0
    for frame, data in iter_data(path, chunk_rows, layout=layout):
        part = (
            ScoreStats.from_data(data, n_cells=n_cells) if stats_of is None else stats_of(data)
        )
        stats = part if stats is None else stats.merge(part)
        rows += len(frame)
        if progress is not None:
            progress(rows)
    return stats


def count_rows(path) -> int | None:
    """Rows of a Parquet file from its metadata (None for other formats: unknown without
    reading)."""
    p = Path(path)
    try:
        parts = parquet_parts(p) if p.exists() else None
        if parts:
            import pyarrow.parquet as pq

            return sum(int(pq.ParquetFile(f).metadata.num_rows) for f in parts)
    except Exception:  # noqa: BLE001 - only a progress hint; reading reports real errors
        return None
    return None
