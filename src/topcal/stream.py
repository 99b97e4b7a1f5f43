"""Files larger than memory, with a fitted model: streamed ``apply`` and ``update``.

The library side of ``topcal apply`` and ``topcal update`` (the CLI only parses arguments
and prints): :func:`apply_file` reads a CSV/Parquet file (or a directory of Parquet files)
chunk by chunk, calibrates each chunk and writes it out (:func:`topcal.io.write_frames`, the
one output writer: atomic, no partial output); :func:`fit_file` fits a model from a file's
statistics and :func:`update_file` adds them to a model, both with the label-shift confusion
counts (:class:`~topcal.evidence.core.Evidence`). New data for a model are read with the
model's class list and, for top-score and binned layouts, its score range unless given
(:func:`model_read_options`).
"""

from __future__ import annotations

import functools
from pathlib import Path

import numpy as np

from ._fileio import check_output
from .calibrators.intervals import check_level
from .calibrators.updating import require_stats
from .errors import DataError, TopcalError
from .evidence.core import Evidence
from .io import (
    DEFAULT_CHUNK_ROWS,
    file_columns,
    iter_data,
    layout_columns,
    read_data,
    read_frame,
    read_stats,
    read_table,
    roles_from_options,
    scan_layout,
    write_frames,
)
from .evidence.stats import DEFAULT_CELLS

__all__ = [
    "apply_file",
    "calibrate",
    "check_new_columns",
    "INTERVAL_COLUMNS",
    "FULL_PREFIX",
    "VECTOR_KEY",
    "full_columns",
    "require_vectors",
    "fit_file",
    "update_file",
    "model_read_options",
    "with_confidence",
    "predicted_codes",
    "confidence_column",
    "score_role",
    "output_roles",
]


def model_read_options(
    model, path, options: dict, *, columns=None, model_classes: bool = False
) -> dict:
    """Read options for new data of ``model``: its score range unless given (not for
    probability columns).

    With ``model_classes`` (labelled new data: ``update``, ``threshold``) also the model's
    class list, where the classes are read from a column (top-score and binned layouts; a
    ``.npz`` file's are its own).
    """
    opts = dict(options)
    if opts.get("score_range") is not None and not model_classes:
        return opts
    if columns is None and Path(path).suffix.lower() != ".npz":
        columns = file_columns(path)
    vector = columns is None or layout_columns(columns, **opts)[3]  # None: a .npz file
    if (
        opts.get("score_range") is None and not vector
    ):  # probability/logit columns are on (0, 1) anyway
        opts["score_range"] = tuple(model.score_range_)
    if model_classes and not vector:
        opts["classes"] = list(model.classes_)
    return opts


#: The columns ``apply --interval`` adds after ``confidence``.
INTERVAL_COLUMNS = ("confidence_lo", "confidence_hi")


#: ``apply --full`` adds one column per class, ``calibrated_<class>``, after the others.
FULL_PREFIX = "calibrated_"
#: The key of :func:`calibrate`'s output holding the (n, K) calibrated vectors.
VECTOR_KEY = "vector"


def full_columns(classes) -> list[str]:
    """The names of ``apply --full``'s columns, one per class of ``classes`` (a model's)."""
    return [FULL_PREFIX + str(c) for c in classes]


def require_vectors(has_vectors: bool) -> None:
    """The one-line error of ``apply --full`` on an input without full score vectors."""
    if not has_vectors:
        raise DataError(
            "--full writes a calibrated probability per class, which needs the full score "
            "vectors (p_<class> or logit_<class> columns, one per class); this input has "
            "only top scores: drop --full to write the calibrated confidence alone"
        )


def check_new_columns(columns, interval, thresholds=None, full_classes=None) -> None:
    """A one-line error where the input already has a column apply would add besides the
    confidence (:func:`confidence_column` decides that one); ``full_classes``: the model's
    classes, whose :func:`full_columns` ``apply --full`` adds."""
    for c in (
        (INTERVAL_COLUMNS if interval is not None else ())
        + (("accepted",) if thresholds is not None else ())
        + tuple(full_columns(full_classes or ()))
    ):
        if c in columns:
            raise TopcalError(
                f"the input already has a {c!r} column; rename it so it is not overwritten"
            )


def calibrate(
    model, data, interval=None, thresholds=None, tally: dict | None = None, full: bool = False
) -> dict:
    """The columns apply adds for ``data``: ``confidence``; with ``interval`` (a level) its
    limits; with ``thresholds`` (a :class:`topcal.thresholds.core.Thresholds` chosen for
    ``model``) ``accepted``, whether the row's confidence reaches its class's cut-off; with
    ``full`` the calibrated vectors
    (:meth:`~topcal.calibrators.base.Calibrator.predict_proba`, whose predicted entry is the
    confidence, bit for bit), written as :func:`full_columns`, and ``tally`` gets the count
    of rows whose vector's argmax is another class than ``pred`` under ``"moved"``."""
    if full:
        require_vectors(data.has_full)
        vectors = model.predict_proba(data)
        codes = predicted_codes(data, model.classes_)
        out = {"confidence": vectors[np.arange(data.n_rows), codes]}
        if tally is not None:  # rows whose calibrated vector ranks another class above pred
            moved = int(np.count_nonzero(vectors.max(axis=1) > out["confidence"]))
            tally["moved"] = tally.get("moved", 0) + moved
    else:
        out = {"confidence": model.predict(data)}
    if interval is not None:
        out["confidence_lo"], out["confidence_hi"] = model.predict_interval(data, interval)
    if thresholds is not None:
        out["accepted"] = thresholds.accept(
            predicted_codes(data, model.classes_), out["confidence"], data.score
        )
        if tally is not None:  # the rows accepted so far (apply prints the count)
            tally["accepted"] = tally.get("accepted", 0) + int(
                np.count_nonzero(out["accepted"])
            )
    if full:
        out[VECTOR_KEY] = vectors
    return out


def predicted_codes(data, classes) -> np.ndarray:
    """Each row's predicted class as an index into ``classes`` (a model's class list).

    ``data.pred`` indexes ``data.classes``, which for probability columns are the file's
    columns in the file's order (maybe reordered, maybe a subset of the model's classes):
    the one translation every ``apply`` path (whole file, chunks, .npz, Dask partitions)
    uses to name its ``pred``.
    """
    return data.with_classes(classes, "the data to calibrate").pred


def confidence_column(columns, score_column: str | None = None) -> str:
    """The output column of the calibrated confidence: ``confidence``, or
    ``calibrated_confidence`` when the input's own ``confidence`` column is the top score
    read (the ``true_label,pred_label,confidence`` layout).

    Any other input column of that name would be overwritten: a one-line error.
    """
    cols = [str(c) for c in columns]
    if "confidence" not in cols:
        return "confidence"
    if score_column == "confidence" and "calibrated_confidence" not in cols:
        return "calibrated_confidence"
    name = "calibrated_confidence" if score_column == "confidence" else "confidence"
    raise TopcalError(
        f"the input already has a {name!r} column; rename it so it is not overwritten"
    )


def score_role(columns, options: dict) -> str | None:
    """The column read as the top score (None for probability/logit columns and binned
    data)."""
    cols = [str(c) for c in columns]
    _, _, binned, vector = layout_columns(cols, **options)
    if binned or vector:
        return None
    return roles_from_options(cols, options)["score"]


def output_roles(columns, options: dict) -> tuple[str | None, str | None]:
    """(the column the predicted classes are read from, the column read as the top score) of
    an input with ``columns`` read with ``options``: what :func:`with_confidence` needs to
    know. Both None for probability/logit columns, whose classes are the columns themselves."""
    cols = [str(c) for c in columns]
    pred = (
        None
        if layout_columns(cols, **options)[3]
        else roles_from_options(cols, options)["pred"]
    )
    return pred, score_role(cols, options)


def with_confidence(
    frame, data, classes, conf, pred_column: str | None = None, score_column: str | None = None
):
    """``frame`` + ``pred`` (class names, categorical) + ``confidence`` (an array, or the
    dict of columns from :func:`calibrate`: confidence and its interval limits).

    The one formatting of apply's output, for every engine. An input column ``pred`` that is
    not the column the predicted classes were read from (``pred_column``, see
    :func:`output_roles`) must agree with them (else it would be overwritten). ``data``
    None: ``frame`` has no rows (an empty Dask partition, or the schema of one).
    """
    import pandas as pd

    cols = dict(conf) if isinstance(conf, dict) else {"confidence": conf}
    vectors = cols.pop(VECTOR_KEY, None)
    check_new_columns(
        frame.columns,
        0.5 if "confidence_lo" in cols else None,
        True if "accepted" in cols else None,
        None if vectors is None else classes,
    )
    conf_name = confidence_column(frame.columns, score_column)
    cols = {(conf_name if k == "confidence" else k): v for k, v in cols.items()}
    codes = np.zeros(0, dtype=np.int64) if data is None else predicted_codes(data, classes)
    pred = pd.Categorical.from_codes(codes, categories=list(classes))
    # a shallow copy: columns are set on it, never written into, so the input stays as it was
    out = frame.copy(deep=False)
    if "pred" in out.columns and pred_column != "pred":
        if not np.array_equal(
            out["pred"].astype(str).to_numpy(), np.asarray(pred).astype(str)
        ):
            raise TopcalError(
                "the input's 'pred' column disagrees with the predicted classes; rename it"
            )
    out["pred"] = pred
    for name, values in cols.items():
        out[name] = values
    if vectors is not None:  # one block of K columns (K inserts one by one fragment the frame)
        block = pd.DataFrame(
            vectors, columns=full_columns(classes), index=out.index, copy=False
        )
        out = pd.concat([out, block], axis=1)
    return out


def apply_file(
    model,
    path,
    output,
    *,
    chunk_rows: int = DEFAULT_CHUNK_ROWS,
    progress=None,
    interval=None,
    thresholds=None,
    tally: dict | None = None,
    full: bool = False,
    **options,
) -> int:
    """Calibrate every row of ``path`` into ``output`` (input columns + pred + confidence);
    returns the rows.

    With ``full`` also one calibrated probability per class (:func:`full_columns`, in the
    model's class order; rows sum to 1, the predicted class's entry is the confidence): the
    input needs full score vectors (a one-line DataError before anything is read otherwise).

    With ``interval`` (a level in (0, 1)) also ``confidence_lo`` and ``confidence_hi``, the
    limits of :meth:`~topcal.calibrators.base.Calibrator.predict_interval`. With
    ``thresholds`` (a :class:`topcal.thresholds.core.Thresholds` chosen for ``model``) an
    ``accepted`` column says whether each row's confidence reaches its class's cut-off, and
    ``tally`` (a dict, if given) gets the count of accepted rows under ``"accepted"``, and
    the calibrated confidence's column name under ``"column"`` (:func:`confidence_column`).

    CSV and Parquet are streamed in chunks of ``chunk_rows`` (memory does not grow with the
    file); ``.npz`` is read whole. ``options`` are the column options of
    :func:`topcal.io.read_frame` (labels are ignored). ``progress``, if given, is called
    with the rows written so far.
    """
    if interval is not None:
        interval = check_level(interval)
    check_output(output, [path])
    opts = {**options, "label_column": None}  # a label column may hold anything
    if Path(path).suffix.lower() == ".npz":  # no chunked reader for .npz
        frame = read_table(path)
        data = read_frame(frame, **opts)
        if full:
            require_vectors(data.has_full)
        if tally is not None:
            tally["column"] = confidence_column(frame.columns, score_role(frame.columns, opts))
        out = with_confidence(
            frame,
            data,
            model.classes_,
            calibrate(model, data, interval, thresholds, tally, full),
            score_column=score_role(frame.columns, opts),
        )
        return write_frames([out], output)
    opts = model_read_options(model, path, opts)
    if full:  # refused before the file is scanned
        require_vectors(layout_columns(file_columns(path), **opts)[3])
    layout = scan_layout(path, chunk_rows, classes=list(model.classes_), **opts)
    pred_col, score_col = output_roles(file_columns(path), opts)
    if tally is not None:
        tally["column"] = confidence_column(file_columns(path), score_col)
    chunks = (
        with_confidence(
            frame,
            data,
            model.classes_,
            calibrate(model, data, interval, thresholds, tally, full),
            pred_col,
            score_col,
        )
        for frame, data in iter_data(path, chunk_rows, layout=layout)
    )
    return write_frames(chunks, output, progress=progress)


def update_file(model, path, *, chunk_rows: int | None = None, progress=None, **options):
    """Add the labelled rows of ``path`` to ``model`` (:meth:`Calibrator.update`); returns
    the model.

    With ``chunk_rows`` the file is counted in chunks (bounded memory), else read whole;
    either way the same statistics.
    """
    require_stats(model)  # before reading the file
    opts = model_read_options(model, path, options, model_classes=True)
    if chunk_rows is None:
        return model.update(read_data(path, **opts))
    new = read_stats(path, chunk_rows, progress=progress, stats_of=model.evidence_of, **opts)
    return model.update(new)


def fit_file(
    model,
    path,
    *,
    chunk_rows: int = DEFAULT_CHUNK_ROWS,
    n_cells: int = DEFAULT_CELLS,
    progress=None,
    **options,
):
    """Fit ``model`` (an unfitted calibrator of a score method) on ``path`` read in chunks;
    returns it.

    ``model.fit(evidence)`` on the file's :class:`~topcal.evidence.core.Evidence`
    (statistics and label-shift counts), counted in one pass (memory bounded by the
    statistics: K x n_cells rows, and at most min(rows, K^2 x n_cells) confusion triples).
    ``options`` are the column options of :func:`topcal.io.read_frame`.
    """
    new = read_stats(
        path,
        chunk_rows,
        progress=progress,
        stats_of=functools.partial(Evidence.for_fit, n_cells=n_cells),
        **options,
    )
    return model.fit(new)
