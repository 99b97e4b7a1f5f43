"""Fit and apply on Dask DataFrames (optional: ``pip install topcal[dask]``).

* :func:`stats` computes :class:`~topcal.evidence.stats.ScoreStats` per partition and merges
  them in a tree (``split_every`` at a time), so the driver only ever holds a few statistics
  objects, each bounded by K x n_cells rows.
* :func:`fit` fits a method on the merged statistics on the driver: the same model as
  ``calibrator.fit(evidence)`` on the statistics and label-shift counts
  (:class:`~topcal.evidence.confusion.GridConfusion`) of all the rows in one process (both
  bit for bit; tested on a LocalCluster), so the model can be adapted.
* :func:`update` adds a Dask DataFrame's statistics, and its confusion counts in the model's
  regions, to a fitted model.
* :func:`apply` is a ``map_partitions``: every partition is read like a file chunk,
  calibrated and formatted like a local ``apply``'s chunk
  (:func:`topcal.stream.with_confidence`); the result is a lazy Dask DataFrame (input
  columns + ``pred`` + ``confidence``). :func:`apply_file` writes it through the one output
  writer (:func:`topcal.io.write_frames`).

Partitions use the column conventions of :mod:`topcal.io`; the class list is found first
from the distinct values of the class columns (as a whole-file read would infer it), so
every partition is encoded alike. The model travels to the workers as its JSON text (never
pickled), parsed once per worker.

Only methods that fit from score statistics run here (everything except the full-vector
temperature methods ``sts``, ``csts``, ``tswa``, ``cstswa``); ``apply`` works with every
method. Categorical input columns (dictionary columns in Parquet, whose categories differ by
partition) come back as text columns with the same values, so every output partition has one
schema.
"""

from __future__ import annotations

import functools
import json

import numpy as np

from . import _progress
from .calibrators.intervals import check_level
from .calibrators.updating import require_stats
from .errors import ParameterError, TopcalError, first_line
from .evidence.core import Evidence
from .io import build_layout, layout_columns, read_frame, write_frames
from .evidence.stats import DEFAULT_CELLS, ScoreStats
from .stream import (
    INTERVAL_COLUMNS,
    VECTOR_KEY,
    calibrate,
    check_new_columns,
    confidence_column,
    require_vectors,
    output_roles,
    with_confidence,
)

__all__ = [
    "stats",
    "fit",
    "update",
    "check_updatable",
    "apply",
    "apply_file",
    "read_parquet",
    "layout",
    "Session",
]


def _require_dask():
    try:
        import dask  # noqa: F401
        import dask.dataframe as dd
    except ImportError:  # pragma: no cover - the extra is installed by `make test`
        raise TopcalError(
            "the Dask engine needs the optional dependency dask; install it with: pip install "
            "'topcal[dask]'"
        ) from None
    return dd


def read_parquet(path):
    """A Dask DataFrame over a Parquet file, a directory of Parquet files or a glob."""
    dd = _require_dask()
    import glob
    from pathlib import Path

    p = str(path)
    if Path(p).suffix.lower() in (".csv", ".tsv", ".txt", ".npz"):
        raise TopcalError(
            f"the Dask engine reads Parquet data, and {p!r} is a {Path(p).suffix} file; "
            "write it as Parquet (e.g. pandas' to_parquet), or read it in chunks with "
            "--chunk-rows"
        )
    if not (Path(p).exists() or glob.glob(p)):
        raise TopcalError(
            f"no Parquet data at {p!r}; give a .parquet file, a directory of them, or a glob"
        )
    try:
        return dd.read_parquet(p)
    except Exception as exc:  # dask/pyarrow raise many types for bad files
        raise TopcalError(f"cannot read Parquet data at {p!r}: {first_line(exc)}") from None


def layout(ddf, *, classes=None, **options):
    """The read layout (classes, score range) of a Dask DataFrame: distinct class values, in
    partition order."""
    import pandas as pd

    _require_dask()
    cols = [str(c) for c in ddf.columns]
    class_cols, extra, binned, vector = layout_columns(cols, **options)
    uniques, numeric, lo_hi = {}, {}, [np.inf, -np.inf]
    need = (
        bool(class_cols) and classes is None and not vector
    )  # a vector layout's classes are its columns
    if need:
        import dask

        per_part = [
            ddf[c].map_partitions(lambda s: pd.Series(pd.unique(s)), meta=ddf[c]._meta)
            for c in class_cols
        ]
        found = dask.compute(*per_part)
        for c, vals in zip(class_cols, found):
            uniques[c] = pd.unique(np.asarray(vals))
            numeric[c] = ddf[c].dtype.kind in "iuf"
    if binned and options.get("score_range") is None:
        import dask

        lo, hi = dask.compute(ddf["bin_lo"].min(), ddf["bin_hi"].max())
        lo_hi = [float(lo), float(hi)]
    return build_layout(cols, uniques, numeric, lo_hi, classes=classes, **options)


def _partition_stats(frame, options: dict, count):
    if len(frame) == 0:
        return None
    return count(read_frame(frame, **options))


def _merge(*parts):
    parts = [p for p in parts if p is not None]
    return parts[0].merge(*parts[1:]) if parts else None


def _reduce(ddf, count, split_every: int, lay):
    """``count`` of every partition (a picklable function of a TopLabelData), merged in a
    tree."""
    import dask
    from dask import delayed

    if isinstance(split_every, bool) or not isinstance(split_every, int) or split_every < 2:
        raise ParameterError(f"split_every must be an integer >= 2, got {split_every!r}")
    nodes = [delayed(_partition_stats)(part, lay.options, count) for part in ddf.to_delayed()]
    nodes = _watched(nodes)
    while len(nodes) > 1:
        nodes = [
            delayed(_merge)(*nodes[i : i + split_every])
            for i in range(0, len(nodes), split_every)
        ]
    (result,) = dask.compute(nodes[0])
    if result is None:
        raise TopcalError("the Dask DataFrame has no rows; topcal needs at least one")
    return result


def _watched(nodes):
    """The partition counts as futures, with a progress bar as they finish, where progress
    is shown and a distributed client is running; else the nodes as they are (the tree is
    the same)."""
    if not _progress.enabled() or len(nodes) < 2:
        return nodes
    try:
        from distributed import as_completed, get_client

        client = get_client()
    # no distributed, or no client: the graph runs without a bar
    except (ImportError, ValueError):
        return nodes
    futures = client.compute(nodes)
    for _ in _progress.bar(
        as_completed(futures), total=len(futures), desc="dask: partitions", unit=" partitions"
    ):
        pass
    return futures


def stats(
    ddf, *, n_cells: int = DEFAULT_CELLS, split_every: int = 8, classes=None, **options
) -> ScoreStats:
    """Mergeable statistics of a labelled Dask DataFrame, merged by a tree reduction.

    Parameters
    ----------
    ddf : dask.dataframe.DataFrame
        Columns as for :func:`topcal.io.read_frame`.
    n_cells : int, default 4096
        Grid cells over the score range.
    split_every : int >= 2, default 8
        Statistics merged per node of the reduction tree.
    classes : list of str, optional
        The class list; default: inferred as a whole-file read would.
    **options
        Column options of :func:`topcal.io.read_frame`.
    """
    _require_dask()
    lay = layout(ddf, classes=classes, **options)
    return _reduce(
        ddf, functools.partial(ScoreStats.from_data, n_cells=n_cells), split_every, lay
    )


def fit(
    ddf,
    method: str = "auto",
    *,
    params: dict | None = None,
    n_cells: int = DEFAULT_CELLS,
    split_every: int = 8,
    classes=None,
    **options,
):
    """Fit ``method`` on a labelled Dask DataFrame from merged statistics; returns the
    fitted calibrator.

    Per-sample partitions also give the label-shift counts
    (:class:`~topcal.evidence.confusion.GridConfusion`, merged alike), so the model can be
    adapted (``calibrator.fit(evidence)``).
    """
    from .calibrators import calibrator
    from .calibrators.registry import require_counts

    require_counts(
        method,
        "fit it in memory, or choose a score method (hist, kde-mon2, cum-opt, bts, btswa, "
        "auto)",
    )
    cal = calibrator(method, **(params or {}))
    _require_dask()
    lay = layout(ddf, classes=classes, **options)
    evidence = _reduce(
        ddf, functools.partial(Evidence.for_fit, n_cells=n_cells), split_every, lay
    )
    return cal.fit(evidence)


def update(model, ddf, *, split_every: int = 8, **options):
    """Add a labelled Dask DataFrame to a fitted ``model`` (:meth:`Calibrator.update`);
    returns the model.

    Per partition, the statistics the model keeps (score counts) and, where the model has
    them, the confusion counts in its regions; merged in a tree and added on the driver. New
    data take the model's classes and score range unless ``options`` give one.
    """
    from .stream import model_read_options

    _require_dask()
    old = check_updatable(model)
    options = model_read_options(model, None, options, columns=[str(c) for c in ddf.columns])
    lay = layout(ddf, classes=list(model.classes_), **options)
    # only the grid and the regions travel to the workers, not the model
    count = functools.partial(
        Evidence.for_update,
        stats_of=functools.partial(ScoreStats.from_data, n_cells=old.n_cells),
        regions=model.evidence_.confusion,
        like=model.evidence_.fingerprint,  # the new rows hashed by the model's scheme
    )
    return model.update(_reduce(ddf, count, split_every, lay))


def check_updatable(model) -> ScoreStats:
    """The model's score statistics, which a Dask cluster can add to; a clear error for loss
    tables or none."""
    old = require_stats(model)
    if not isinstance(old, ScoreStats):
        raise TopcalError(
            f"a Dask cluster computes score counts, but this {model.name!r} model keeps "
            "loss tables; drop --engine dask (--chunk-rows N reads the new data in bounded "
            "memory)"
        )
    return old


@functools.lru_cache(maxsize=4)
def _model(text: str):
    from .persist import loads

    return loads(text)


def _output(frame, data, classes, cols: dict, pred_col, score_col, pred_dtype):
    """Apply's output for one partition: :func:`topcal.stream.with_confidence`, the
    formatting every engine uses, with categorical columns as text (``pred``, and Parquet
    dictionary columns, whose categories differ by partition), so every partition has one
    schema."""
    import pandas as pd

    out = with_confidence(frame, data, classes, cols, pred_col, score_col)
    for c in out.columns:
        if isinstance(out[c].dtype, pd.CategoricalDtype):
            out[c] = out[c].astype(pred_dtype)
    return out


def _no_rows(interval, thresholds=None, full_classes=None) -> dict:
    """:func:`calibrate`'s columns for no rows (``full_classes``: a model's, for ``full``)."""
    out = {
        c: np.zeros(0)
        for c in ("confidence",) + (INTERVAL_COLUMNS if interval is not None else ())
    }
    if thresholds is not None:
        out["accepted"] = np.zeros(0, dtype=bool)
    if full_classes is not None:
        out[VECTOR_KEY] = np.zeros((0, len(full_classes)))
    return out


@functools.lru_cache(maxsize=4)
def _thresholds(text: str):
    """The thresholds a partition applies, from their JSON text (read once per worker
    process)."""
    import json

    from .thresholds.core import Thresholds

    return Thresholds.from_dict(json.loads(text))


def _apply_partition(
    frame,
    text: str,
    options: dict,
    pred_dtype,
    interval=None,
    pred_col=None,
    score_col=None,
    thresholds_text=None,
    full=False,
):
    model = _model(text)
    th = None if thresholds_text is None else _thresholds(thresholds_text)
    if len(frame) == 0:
        cols = _no_rows(interval, th, model.classes_ if full else None)
        return _output(frame, None, model.classes_, cols, pred_col, score_col, pred_dtype)
    data = read_frame(frame, **options)
    return _output(
        frame,
        data,
        model.classes_,
        calibrate(model, data, interval, th, full=full),
        pred_col,
        score_col,
        pred_dtype,
    )


def apply(model, ddf, *, interval=None, thresholds=None, full=False, **options):
    """Calibrated confidence of every row: a lazy Dask DataFrame with ``pred`` and
    ``confidence`` added (with ``full`` also the calibrated vectors, one column per class:
    :func:`topcal.stream.full_columns`).

    ``options`` are the column options of :func:`topcal.io.read_frame` (labels are ignored).
    With ``interval`` (a level in (0, 1)) also ``confidence_lo`` and ``confidence_hi``
    (:meth:`predict_interval`; the model file each partition reads carries what they need).
    With ``thresholds`` (a :class:`topcal.thresholds.core.Thresholds` chosen for ``model``)
    also ``accepted``. The columns are those of a local ``apply``
    (:func:`topcal.stream.with_confidence`).
    """
    import pandas as pd

    _require_dask()
    from .persist import dumps

    if interval is not None:
        interval = check_level(interval)
    if thresholds is not None:
        thresholds.check_model(model)
    check_new_columns(ddf.columns, interval, thresholds, model.classes_ if full else None)
    options = {**options, "label_column": None}
    if full:
        require_vectors(_is_vector(ddf, options))
    pred_col, score_col = output_roles(ddf.columns, options)
    confidence_column(
        ddf.columns, score_col
    )  # an input column it would overwrite: refused before any work
    if options.get("score_range") is None:
        options["score_range"] = (
            tuple(model.score_range_) if not _is_vector(ddf, options) else None
        )
    lay = layout(ddf, classes=list(model.classes_), **options)
    pred_dtype = pd.StringDtype("pyarrow")
    meta = _output(
        ddf._meta,
        None,
        model.classes_,
        _no_rows(interval, thresholds, model.classes_ if full else None),
        pred_col,
        score_col,
        pred_dtype,
    )

    from dask import delayed

    text = delayed(
        dumps(model, stats=False), pure=True
    )  # one graph key shared by every partition; no statistics
    th_text = None if thresholds is None else json.dumps(thresholds.to_dict())
    return ddf.map_partitions(
        _apply_partition,
        text,
        lay.options,
        pred_dtype,
        interval,
        pred_col,
        score_col,
        th_text,
        full,
        meta=meta,
    )


def _is_vector(ddf, options) -> bool:
    return layout_columns([str(c) for c in ddf.columns], **options)[3]


def _input_files(path) -> list:
    """The files a Parquet path (file, directory or glob) names, for the output-folder
    check."""
    import glob
    from pathlib import Path

    p = Path(str(path))
    if p.is_dir():
        return [p] + [q for q in p.rglob("*")]
    return [Path(q) for q in glob.glob(str(path))] or [p]


def apply_file(
    model, path, output, *, interval=None, thresholds=None, full=False, **options
) -> None:
    """Calibrate the Parquet data at ``path`` (file, directory or glob) into ``output`` on
    the current Dask client.

    ``output`` ending in ``.csv`` is one CSV file, anything else a folder of Parquet files
    (``part.00000.parquet``, ...), which follows the report's rule
    (:func:`topcal._fileio.report_dir`): it must be new, empty or written by topcal (marker
    file ``.topcal-report``), never one holding other files or the input. Either is written
    beside the target first and moved into place only when complete (a failed run leaves no
    partial output, and an existing output stays as it was). New data take the model's score
    range unless ``options`` give one (:func:`topcal.stream.model_read_options`).

    Both go through the one output writer, :func:`topcal.io.write_frames`: for a folder,
    every worker writes its partitions' files (the output scales with the cluster, as Dask's
    own ``to_parquet``); for a CSV file, the partitions are computed on the cluster a few
    ahead and written in order by this process (one file is written in order anyway, as
    Dask's ``to_csv(single_file=True)`` does).
    """
    from pathlib import Path

    from ._fileio import check_report_dir, report_dir
    from .stream import model_read_options

    out = Path(output)
    as_csv = out.suffix.lower() == ".csv"
    inputs = _input_files(path)
    if not as_csv:  # refuse before the cluster computes anything
        check_report_dir(out, what="output folder", writes=(), inputs=inputs)
    ddf = read_parquet(path)
    options = model_read_options(
        model, path, {**options, "label_column": None}, columns=list(ddf.columns)
    )
    result = apply(model, ddf, interval=interval, thresholds=thresholds, full=full, **options)
    try:
        if as_csv:
            write_frames(_in_order(result), out)
        else:
            with report_dir(out, what="output folder", writes=(), inputs=inputs) as tmp:
                _write_parts(result, tmp)
    except TopcalError:
        raise
    except Exception as exc:  # dask/pyarrow: unreadable partitions, full disk, ...
        raise TopcalError(
            f"cannot calibrate {str(path)!r} with dask: {first_line(exc)}"
        ) from None


def _in_order(ddf, ahead: int | None = None):
    """The partitions of ``ddf`` as pandas DataFrames, in order, computed on the cluster
    ``ahead`` at a time (default: two per worker), so memory here holds a few partitions,
    never the data."""
    import collections
    import itertools

    parts = iter(ddf.to_delayed())
    try:
        from distributed import get_client

        client = get_client()
    except (
        ImportError,
        ValueError,
    ):  # no distributed client: Dask's own scheduler, one partition at a time
        for part in parts:
            yield part.compute()
        return
    ahead = ahead or max(2, 2 * len(client.scheduler_info().get("workers", {})))
    running = collections.deque(client.compute(p) for p in itertools.islice(parts, ahead))
    while running:
        frame = running.popleft().result()
        nxt = next(parts, None)
        if nxt is not None:
            running.append(client.compute(nxt))
        yield frame


def _write_part(frame, path: str, schema) -> int:
    return write_frames([frame], path, schema=schema)


def _write_parts(ddf, folder) -> None:
    """Every partition of ``ddf`` written by the worker that computed it, as one Parquet
    file of ``folder`` (:func:`topcal.io.write_frames`), all with the schema of ``ddf``'s
    columns."""
    import dask
    import pyarrow as pa
    from dask import delayed

    schema = pa.Schema.from_pandas(ddf._meta, preserve_index=False)
    if any(
        pa.types.is_null(f.type) for f in schema
    ):  # object columns of unknown type: each file infers its own
        schema = None
    parts = ddf.to_delayed()
    width = max(5, len(str(len(parts) - 1)))  # names that sort as the partitions do
    dask.compute(
        *(
            delayed(_write_part)(p, str(folder / f"part.{i:0{width}d}.parquet"), schema)
            for i, p in enumerate(parts)
        )
    )


def _one_line(exc) -> str:
    return " ".join(str(exc).split("\n")).strip() or type(exc).__name__


class Session:
    """A Dask client for a ``with`` block: at ``address`` (a scheduler) or on a LocalCluster
    started and closed here.

    Dask's own log lines (a worker's "Compute Failed" with its remote traceback, cancelled
    tasks at shutdown) are silenced: the error a task raised reaches the command, which
    prints it as its one ``error:`` line.
    """

    def __init__(self, address: str | None):
        self.address = address

    def __enter__(self):
        import logging

        try:
            from distributed import Client, LocalCluster
        except ImportError:
            raise TopcalError(
                "--engine dask needs dask; install it with: pip install 'topcal[dask]'"
            ) from None
        self.cluster = None
        self.client = None
        self._log = logging.getLogger("distributed")
        self._level = self._log.level
        self._log.setLevel(logging.CRITICAL)
        try:
            if self.address:
                self.client = Client(self.address, timeout="20s")
            else:
                import warnings

                with (
                    warnings.catch_warnings()
                ):  # dask's own start-up notes ("Port 8787 is already in use")
                    warnings.simplefilter("ignore")
                    self.cluster = LocalCluster(
                        dashboard_address=None, silence_logs=logging.CRITICAL
                    )
                    self.client = Client(self.cluster)
        except Exception as exc:  # noqa: BLE001 - a bad address raises ValueError, TypeError, OSError, TimeoutError
            self._close()
            where = (
                f"the Dask scheduler {self.address!r}"
                if self.address
                else "a local Dask cluster"
            )
            hint = "; give an address like tcp://HOST:8786" if self.address else ""
            raise TopcalError(
                f"cannot connect to {where}: {_one_line(exc)[:300]}{hint}"
            ) from None
        return self.client

    def _close(self):
        for thing in (self.client, self.cluster):
            if thing is not None:
                try:
                    thing.close()
                except Exception:  # noqa: BLE001 - closing after an error already reported
                    pass
        self._log.setLevel(self._level)

    def __exit__(self, *exc):
        self._close()
        return False
