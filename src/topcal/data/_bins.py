"""The checks of binned data (:meth:`~topcal.data.TopLabelData.from_binned`).

Kept apart from ``_table.py``: one value per row in every column, counts >= 0 and not all 0,
bins (lo, hi] with lo < hi inside the declared scale and disjoint within a class, the class
names and their codes.
"""

from __future__ import annotations

import numpy as np

from ..errors import DataError
from ._checks import as_float_array, check_range, check_sample_total, check_scores_in_range
from ._labels import check_classes, encode_labels, label_names

__all__ = ["check_bins"]


def check_bins(predicted_class, bin_lo, bin_hi, tp, fp, classes, score_range):
    """The checked columns of binned data: ``(classes, codes, bin_lo, bin_hi, tp, fp, (lo,
    hi))`` (float64 arrays, the class names as a tuple, the score range as checked); raises
    DataError for anything :meth:`~topcal.data.TopLabelData.from_binned` refuses."""
    lo_e = as_float_array(bin_lo, "bin_lo", 1)
    hi_e = as_float_array(bin_hi, "bin_hi", 1)
    tp_w = as_float_array(tp, "tp", 1)
    fp_w = as_float_array(fp, "fp", 1)
    pc = np.asarray(predicted_class)
    n = pc.shape[0] if pc.ndim == 1 else -1
    for name, arr in (("bin_lo", lo_e), ("bin_hi", hi_e), ("tp", tp_w), ("fp", fp_w)):
        if arr.shape[0] != n:
            raise DataError(
                f"{name} has {arr.shape[0]} rows but predicted_class has {pc.shape}; "
                "every column of binned data must have one value per row"
            )
    for name, arr in (("tp", tp_w), ("fp", fp_w)):
        if (arr < 0).any():
            i = int(np.flatnonzero(arr < 0)[0])
            raise DataError(
                f"{name} count {arr[i]} at row {i + 1} is negative; counts must be >= 0"
            )
    bad = lo_e >= hi_e
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise DataError(
            f"bin at row {i + 1} has bin_lo {lo_e[i]} >= bin_hi {hi_e[i]}; bins are (lo, "
            "hi] with lo < hi"
        )
    if tp_w.sum() + fp_w.sum() <= 0:
        raise DataError("binned data holds no samples (all tp and fp counts are 0)")
    check_sample_total(tp_w.sum() + fp_w.sum(), "the binned data")
    if classes is None:  # the names, in order of first appearance; none added
        names = label_names(pc, "predicted_class")
        _, first = np.unique(names.astype(str), return_index=True)
        classes = tuple(names[np.sort(first)].tolist())
    else:
        classes = check_classes(classes)
    codes, classes = encode_labels(pc, classes, "predicted_class")
    if score_range is None:
        score_range = (0.0, 1.0)
    lo, hi = check_range(score_range)
    check_scores_in_range(lo_e, lo, hi, "bin_lo")
    check_scores_in_range(hi_e, lo, hi, "bin_hi")
    order = np.lexsort((hi_e, lo_e, codes))
    same = codes[order][1:] == codes[order][:-1]
    # shared edges that differ by round-off (0.2 + 0.1 vs 0.3) are no overlap
    overlap = same & (lo_e[order][1:] < hi_e[order][:-1] - 1e-9 * (hi - lo))
    if overlap.any():
        j = int(np.flatnonzero(overlap)[0])
        a, b = int(order[j]), int(order[j + 1])
        raise DataError(
            f"bins at rows {a + 1} ({lo_e[a]:g}, {hi_e[a]:g}] and {b + 1} ({lo_e[b]:g}, "
            f"{hi_e[b]:g}] of class {classes[codes[a]]!r} overlap; give each class "
            "disjoint bins (add up the counts of repeated bins)"
        )
    return classes, codes, lo_e, hi_e, tp_w, fp_w, (lo, hi)
