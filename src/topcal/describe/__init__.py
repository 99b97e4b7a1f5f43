"""A fitted model's description for people.

``summary.py`` the summary ``topcal describe`` prints (and its JSON), ``full.py`` every
entry of a description as text (``describe --full``).
"""
