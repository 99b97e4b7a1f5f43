"""The one writer of output tables (``apply``): DataFrames to a CSV or Parquet file,
atomically.

Every engine writes its output through :func:`write_frames`: the local and streamed
``apply`` its chunks into one file; the Dask engine each partition into one file of a
Parquet folder (on the workers), or its partitions in order into one CSV file.
"""

from __future__ import annotations

from pathlib import Path

from .._fileio import atomic_write
from .._tables import FORMULA_START, csv_text, csv_untext
from ..errors import DataError, first_line


#: First characters of a cell :func:`topcal._tables.csv_text` may change (or, read back,
#: :func:`topcal._tables.csv_untext`): a formula's, and the quote it adds.
_QUOTABLE_START = FORMULA_START + ("'",)


def _map_text(frame, fix):
    """``frame`` with ``fix`` applied to every text cell, category and column name that
    starts with one of :data:`_QUOTABLE_START` (numbers unchanged). A copy only where
    something changes."""
    import numpy as np
    import pandas as pd

    new = {}
    for j in range(frame.shape[1]):
        col = frame.iloc[:, j]
        # apply's pred: its class names, once each
        if isinstance(col.dtype, pd.CategoricalDtype):
            cats = [fix(c) if isinstance(c, str) else c for c in col.cat.categories]
            if cats != list(col.cat.categories):
                new[j] = col.cat.rename_categories(cats)
        elif col.dtype == object or isinstance(col.dtype, pd.StringDtype):
            values = col.to_numpy(dtype=object)
            try:
                risky = np.flatnonzero(
                    col.str.startswith(_QUOTABLE_START, na=False).to_numpy()
                )
            except AttributeError:  # no text in the object column (numbers, booleans): no .str
                risky = [i for i, v in enumerate(values) if isinstance(v, str)]
            changed = [(i, fix(values[i])) for i in risky if isinstance(values[i], str)]
            changed = [(i, v) for i, v in changed if v != values[i]]
            if changed:
                values = values.copy()
                for i, v in changed:
                    values[i] = v
                new[j] = pd.Series(values, index=col.index, name=col.name)
    names = [fix(c) if isinstance(c, str) else c for c in frame.columns]
    if not new and names == list(frame.columns):
        return frame
    out = frame.copy()
    for j, col in new.items():
        out.isetitem(j, col)
    out.columns = names
    return out


def csv_safe(frame):
    """``frame`` with every text cell and column name a spreadsheet would run as a formula
    (a class named ``=HYPERLINK(...)``) prefixed with ``'``
    (:func:`topcal._tables.csv_text`, OWASP); numbers and other text unchanged.
    :func:`csv_restore` undoes it."""
    return _map_text(frame, csv_text)


def csv_restore(frame):
    """A frame read from CSV with the ``'`` that :func:`csv_safe` added removed again (from
    cells and column names), so that topcal reads the text it wrote as the text it was
    given."""
    return _map_text(frame, csv_untext)


class FrameWriter:
    """Write DataFrames chunk by chunk to one CSV or Parquet file, atomically.

    Chunks go to a temporary file beside ``path`` (:func:`topcal._fileio.atomic_write`, as
    every other writer), renamed onto ``path`` by :meth:`close`; :meth:`abort` (or an
    exception inside a ``with`` block) removes it, so a failed run never leaves a partial
    output. Parquet chunks keep the first chunk's schema, or ``schema`` (a pyarrow schema)
    when given (one row group per chunk).
    """

    def __init__(self, path, schema=None):
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
        self._schema = schema
        self._fh = None
        self.rows = 0

    def write(self, frame) -> None:
        try:
            if self.kind == "parquet":
                import pyarrow as pa
                import pyarrow.parquet as pq

                table = pa.Table.from_pandas(frame, schema=self._schema, preserve_index=False)
                if self._writer is None:
                    self._schema = table.schema
                    # no dictionary for floating-point columns: their values rarely repeat,
                    # and pyarrow's attempt before falling back to plain encoding was most
                    # of a write (20,000 x 1,000 float64: 6.1 s against 1.7 s without; the
                    # same values)
                    dictionary = [
                        f.name for f in self._schema if not pa.types.is_floating(f.type)
                    ]
                    self._writer = pq.ParquetWriter(
                        self.tmp, self._schema, use_dictionary=dictionary or False
                    )
                self._writer.write_table(table)
            else:
                header = self._fh is None  # once, even when the first frame has no rows
                if header:
                    self._fh = open(self.tmp, "w", newline="", encoding="utf-8")
                csv_safe(frame).to_csv(self._fh, index=False, header=header)
        except OSError as exc:
            self.abort()
            raise DataError(
                f"cannot write {str(self.path)!r}: {exc.strerror or exc}; check the path"
            ) from None
        except (ValueError, TypeError) as exc:  # pyarrow: a column changed type between chunks
            self.abort()
            raise DataError(
                f"cannot write rows {self.rows}+ of {str(self.path)!r}: "
                f"{first_line(exc)[:300]}; write a .csv instead, or make each column hold "
                "one type (a larger --chunk-rows reads more rows per type guess)"
            ) from None
        self.rows += len(frame)

    def close(self) -> None:
        try:
            if self._writer is not None:
                self._writer.close()
            if self._fh is not None:
                self._fh.close()
        except OSError as exc:
            self.abort()
            raise DataError(
                f"cannot write {str(self.path)!r}: {exc.strerror or exc}; check the path"
            ) from None
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


def write_frames(frames, path, *, schema=None, progress=None) -> int:
    """Write the DataFrames ``frames`` (any iterable) one after another to the file
    ``path``; returns the rows.

    The one output writer (:class:`FrameWriter`: atomic, refuses links, devices and folders;
    ``.csv`` or ``.parquet``). ``progress``, if given, is called with the rows written so
    far after each frame.
    """
    with FrameWriter(path, schema) as w:
        for frame in frames:
            w.write(frame)
            if progress is not None:
                progress(w.rows)
    return w.rows
