"""Per-class confidence thresholds with a precision guarantee.

``core.py`` the fit (Learn-then-Test) and the :class:`~topcal.thresholds.core.Thresholds`
file, ``cutoffs.py`` the per-class cut-off search, ``_ltt.py`` the exact binomial p-values,
``plots.py`` their figures.
"""
