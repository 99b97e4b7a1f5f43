"""Pooling across classes.

``methods.py`` the pooled methods (one curve for every class), ``hierarchical.py`` the
hierarchical per-class curves pulled toward the pool, with their private solvers
``_rows.py``, ``_solve.py`` and ``_strength.py``.
"""
