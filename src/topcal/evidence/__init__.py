"""Evidence: what a fitted model knows of its labelled data, in a form that adds up.

``core.py`` the :class:`~topcal.evidence.core.Evidence` a model holds, ``stats.py`` the
mergeable score statistics, ``confusion.py`` the label-shift confusion counts,
``fingerprint.py`` the fingerprint of a model's fitting rows.
"""
