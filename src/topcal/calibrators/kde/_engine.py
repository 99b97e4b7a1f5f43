"""Numerical engines behind the kernel-density-ratio calibrators.

Conf_KDE(S) = sum_TP t_i phi_b(S - s_i) / sum_P (t_i + f_i) phi_b(S - s_i) is a
Nadaraya-Watson regression of correctness on the score. Two engines evaluate it, both for
many bandwidths at once:

* :class:`ExactEngine` sums every kernel (after merging equal scores), with a per-point
  shift in the exponent so the ratio is defined even where both sums underflow (log-sum-exp:
  the shift is the squared distance to the nearest kernel centre, so the largest term is
  exactly 1).
* :class:`BinnedEngine` spreads TP and FP weights onto a fine grid once (linear binning, as
  relplot and KDEpy do) and convolves the two grid sequences with the sampled Gaussian by
  FFT, one transform per bandwidth, all bandwidths of a scan in one batched call.

Both evaluate on the same grids (a fine grid of ``FINE_CELLS + 1`` points over the class's
support; the scan grid is every ``SCAN_STRIDE``-th of them), so their results can be
compared point by point.

This is a private module: the public API is :mod:`topcal.calibrators.kde`.

The code is in three private modules: ``_kernels.py`` (grids, constants, sign counts, exact
kernel sums), ``_exact.py`` and ``_binned.py`` (the engines and their batched scans); this
module is the one name the rules and the calibrator import them by.
"""

from ._binned import (
    BinnedEngine,
    BinnedScanBatch,
    FFT_OUT,
    Workspace,
    binned_sums,
    kernel_reach,
    linear_bin,
)
from ._exact import ExactEngine, ExactLooBatch, ExactScanBatch
from ._kernels import (
    BOUND_STRIDE,
    CACHE_ELEMENTS,
    CHUNK_ELEMENTS,
    EXP_FLOOR,
    FINE_CELLS,
    KERNEL_REACH,
    RESOLVED_FRACTION,
    SCAN_POINTS,
    SCAN_STRIDE,
    SLOPE_TOL,
    count_alternations,
    count_sign_changes,
    count_sign_changes_rows,
    exact_confidence,
    exact_sums,
    local_linear_sums,
    nearest_sq_distance,
)

__all__ = [
    "BinnedEngine",
    "BinnedScanBatch",
    "ExactEngine",
    "ExactLooBatch",
    "ExactScanBatch",
    "Workspace",
    "binned_sums",
    "kernel_reach",
    "linear_bin",
    "exact_sums",
    "local_linear_sums",
    "exact_confidence",
    "nearest_sq_distance",
    "count_sign_changes",
    "count_sign_changes_rows",
    "count_alternations",
    "FINE_CELLS",
    "SCAN_STRIDE",
    "SCAN_POINTS",
    "BOUND_STRIDE",
    "RESOLVED_FRACTION",
    "SLOPE_TOL",
    "EXP_FLOOR",
    "CACHE_ELEMENTS",
    "KERNEL_REACH",
    "CHUNK_ELEMENTS",
    "FFT_OUT",
]
