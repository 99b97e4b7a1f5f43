"""The kernel density ratio (the paper's Conf_KDE) and its bandwidth rules.

``methods.py`` holds the five registered estimators (``kde``, ``kde-mon``, ``kde-mon2``,
``kde-mon4``, ``kde-opt``), ``calibrator.py`` what they share (``KDEBase``; the functions
of its batched fit in ``fitting.py``), ``formula.py`` the bare formula ``kde_confidence``;
``_rules.py`` the bandwidth rules (candidates, scans, one registry); ``_engine.py`` the two
numerical engines (exact kernel sums for small classes, binned FFT convolution for large
ones). docs/kde.md explains them.
"""

from .calibrator import BandwidthWarning, count_sign_changes
from .formula import kde_confidence
from .methods import KDE, KDEMon, KDEMon2, KDEMon4, KDEOpt

__all__ = [
    "KDE",
    "KDEMon",
    "KDEMon2",
    "KDEMon4",
    "KDEOpt",
    "BandwidthWarning",
    "count_sign_changes",
    "kde_confidence",
]
