"""The kernel density ratio (the paper's Conf_KDE) and its bandwidth rules.

``calibrator.py`` holds the estimators (``kde``, ``kde-mon``, ``kde-mon2``,
``kde-mon4``, ``kde-opt``) and the bare formula ``kde_confidence``;
``_rules.py`` the bandwidth rules (candidates, scans, one registry);
``_engine.py`` the two numerical engines (exact kernel sums for small
classes, binned FFT convolution for large ones). docs/kde.md explains them.
"""

from .calibrator import KDE, BandwidthWarning, KDEMon, KDEMon2, KDEMon4, KDEOpt, count_sign_changes, kde_confidence

__all__ = ["KDE", "KDEMon", "KDEMon2", "KDEMon4", "KDEOpt", "BandwidthWarning", "count_sign_changes", "kde_confidence"]
