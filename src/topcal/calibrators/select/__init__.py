"""Choosing among methods by cross-validation.

``auto.py`` the ``auto`` method, ``rules.py`` its candidates, tiers, table and rule,
``staging.py`` its staged first look, ``crossfit.py`` the cross-fitted scores, ``blend.py``
the blend of candidates.
"""
