"""Reading data files (CSV, Parquet, .npz) into :class:`TopLabelData`.

Column conventions (each name can be overridden):

* ``label``: the true class name (optional: data to be calibrated with ``apply`` needs
  none). Labels are always matched to class *names* (``3`` is the class of column ``p_3``,
  never the fourth column); only a ``.npz`` ``probs``/``logits`` array without a ``classes``
  array has unnamed columns, which are then named ``0``..``K-1`` (so its labels are
  indices), and integer labels beside a ``classes`` array of non-numeric names (as
  scikit-learn's ``y`` and ``classes_``) are indices into ``classes``.
* Full score vectors: one column per class, ``p_<class>`` for probabilities (read as logits
  with ``logits=True`` / ``--logits``) or ``logit_<class>`` for logits; class names come
  from the column names, in column order.
* Top score only: ``pred`` (predicted class name) and ``score``, on the scale
  ``score_range`` (default (0, 1); ``--score-range 0 10`` for PhANNs).
* Binned counts: ``predicted_class, bin_lo, bin_hi, tp, fp`` (detected by its columns; bins
  are (bin_lo, bin_hi]).

A ``.npz`` file holds the same columns as 1-d arrays, or a 2-d ``probs`` or ``logits`` array
with optional ``classes`` and ``labels`` (or ``label``).

Published layouts recognised without any option (:data:`KNOWN_LAYOUTS`):

* netcal's ``.npz`` records: a 2-d ``predictions`` array (probabilities) and
  ``ground_truth`` (true class indices);
* ``true_label,pred_label,confidence`` tables (one row a sample: true class, predicted
  class, top score), as published for ImageNet networks.

Anything else: map each role to a column with ``columns={"label": "y", "score": "conf",
...}`` (``--column ROLE=NAME`` on the command line); roles are :data:`COLUMN_ROLES`.

Bounded memory: :func:`iter_data` reads CSV in chunks of ``chunk_rows`` rows and Parquet one
row group at a time, sliced into chunks of at most ``chunk_rows`` rows, so memory depends on
the chunk and the row group, not the file; :func:`read_stats` folds the chunks into
mergeable statistics (:class:`topcal.evidence.stats.ScoreStats`). The class list and the
score range, which a whole-file read infers from all rows, are found first by a pass over
the class columns only (:func:`scan_layout`), so every chunk is read with the same classes
as one whole-file read would be.

One reader per input form, each from the input to validated data in one step, all through
one column-role mapping: :func:`read_frame` (a DataFrame; ``_frame.py``), :func:`read_data`
(a whole file; ``_file.py``), :func:`iter_data` / :func:`read_stats` (a file in chunks;
``_chunks.py``); arrays are read by :func:`topcal.io.inputs.read_arrays`.
:func:`write_frames` (``_writer.py``, :class:`FrameWriter`) writes every output table,
whatever the engine.
"""

from ._chunks import (
    DEFAULT_CHUNK_ROWS,
    Layout,
    build_layout,
    count_rows,
    file_columns,
    iter_data,
    iter_tables,
    parquet_files,
    read_stats,
    scan_layout,
)
from ._file import read_data, read_table
from ._frame import (
    BINNED_COLUMNS,
    COLUMN_ROLES,
    KNOWN_LAYOUTS,
    column_roles,
    layout_columns,
    read_frame,
    roles_from_options,
    top_score_chosen,
)
from ._writer import FrameWriter, write_frames

__all__ = [
    "read_table",
    "read_frame",
    "read_data",
    "BINNED_COLUMNS",
    "COLUMN_ROLES",
    "KNOWN_LAYOUTS",
    "column_roles",
    "roles_from_options",
    "iter_tables",
    "scan_layout",
    "iter_data",
    "read_stats",
    "Layout",
    "layout_columns",
    "build_layout",
    "top_score_chosen",
    "DEFAULT_CHUNK_ROWS",
    "FrameWriter",
    "file_columns",
    "parquet_files",
    "count_rows",
    "write_frames",
]
