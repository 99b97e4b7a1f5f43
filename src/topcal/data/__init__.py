"""The one data object every method reads: :class:`TopLabelData`.

Top-label calibration needs, for every sample X, the predicted class k(X), the top score
S(X) and whether the prediction was right. :class:`TopLabelData` holds exactly that,
validated once when it is built, in one of two forms that flow through the same code:

* **per sample** (``from_probs``, ``from_logits``, ``from_scores``): one row a sample, with
  its true class when known, and optionally the full score vector Y(X) (probabilities or
  logits) that temperature scaling needs;
* **binned** (``from_binned``): one row a (predicted class, score bin) pair, with the bin's
  true-positive and false-positive *counts*. A bin's score is its midpoint; the bin edges
  travel with the data.

In both forms a row carries a true-positive weight ``tp`` and a false-positive weight ``fp``
(a labelled sample has ``tp, fp = 1, 0`` or ``0, 1``), so the per-class sufficient
statistics of every score-based method are weighted sums, and counts from chunks or machines
simply add up.

Scores live on a declared scale ``score_range = (lo, hi)``: (0, 1) for probabilities, (0,
10) for PhANNs (a sum of ten softmax outputs). Scores outside the declared range are an
error, never silently clipped.

Where: :class:`TopLabelData` and its constructors in ``_table.py``; the checks they share
(finite values, shapes, the score range) in ``_checks.py``, those of binned data in
``_bins.py``; class names and the coding of labels in ``_labels.py``; rows grouped by class
in ``_rows.py``; K-fold splits and stratified subsamples in ``_folds.py``. Everything public
is imported from here.
"""

from ._checks import (
    LOG_PROB_FLOOR,
    MAX_SAMPLES,
    MIN_RANGE_WIDTH,
    SUM_TOLERANCE,
    check_sample_total,
)
from ._folds import MAX_DEAL_COUNT, kfold_split, stratified_subsample
from ._labels import is_int_name, label_names, preview, sorted_names
from ._rows import ClassView, canonical_order, class_order, rows_by_class
from ._table import TopLabelData

__all__ = [
    "TopLabelData",
    "ClassView",
    "LOG_PROB_FLOOR",
    "kfold_split",
    "stratified_subsample",
    "label_names",
    "sorted_names",
    "is_int_name",
    "preview",
    "rows_by_class",
    "class_order",
    "MAX_SAMPLES",
    "check_sample_total",
    "canonical_order",
]
