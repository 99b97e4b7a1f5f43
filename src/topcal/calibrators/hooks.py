"""Conveniences on a fitted calibrator whose code lives in higher layers (docs/architecture.md).

``Calibrator.save`` (:mod:`topcal.persist`), ``Calibrator.adapt`` (:mod:`topcal.labelshift`) and
the Jupyter view (:mod:`topcal.api`): each of those modules registers its function here when
imported, so calibrators never import upward.
"""

from __future__ import annotations

from ..errors import ParameterError, TopcalError

__all__ = ["HOOKS", "hook", "register_hook", "set_html_renderer"]

#: Conveniences on a fitted calibrator whose code lives in higher layers
#: (docs/architecture.md): "save" (topcal.persist), "adapt"
#: (topcal.labelshift) and "html" (the Jupyter view, topcal.api). Each of
#: those modules registers its function here when imported; ``import topcal``
#: imports all three, so calibrators never import upward.
HOOKS: dict = {"save": None, "adapt": None, "html": None}


def register_hook(name: str, func) -> None:
    """Register ``func`` for the calibrator convenience ``name`` ("save", "adapt" or "html")."""
    if name not in HOOKS:
        raise ParameterError(f"unknown calibrator hook {name!r}; options are {', '.join(HOOKS)}")
    HOOKS[name] = func


def hook(name: str):
    func = HOOKS[name]
    if func is None:  # only when a module was imported without the topcal package around it
        raise TopcalError(f"Calibrator.{name} needs 'import topcal' first")
    return func


def set_html_renderer(func) -> None:
    """Register ``func(calibrator) -> str``, the HTML Jupyter shows for a fitted calibrator."""
    register_hook("html", func)
