"""Conveniences on a fitted calibrator whose code lives in higher layers
(docs/architecture.md).

``Calibrator.save`` (:mod:`topcal.persist`), ``Calibrator.adapt``
(:mod:`topcal.labelshift`), the Jupyter view (:mod:`topcal.api`) and the Jupyter view of
``describe()``'s dict (:mod:`topcal.describe.summary`): each of those modules registers its
function here when imported, so calibrators never import upward.
"""

from __future__ import annotations

from ..errors import ParameterError, TopcalError

__all__ = ["HOOKS", "hook", "register_hook", "set_html_renderer", "Description"]

#: Conveniences on a fitted calibrator whose code lives in higher layers
#: (docs/architecture.md): "save" (topcal.persist), "adapt" (topcal.labelshift), "html" (the
#: Jupyter view, topcal.api) and "describe" (the summary text of a description,
#: topcal.describe.summary). Each of those modules registers its function here when
#: imported; ``import topcal`` imports all four, so calibrators never import upward.
HOOKS: dict = {"save": None, "adapt": None, "html": None, "describe": None}


def register_hook(name: str, func) -> None:
    """Register ``func`` for the calibrator convenience ``name`` ("save", "adapt", "html" or
    "describe")."""
    if name not in HOOKS:
        raise ParameterError(
            f"unknown calibrator hook {name!r}; options are {', '.join(HOOKS)}"
        )
    HOOKS[name] = func


def hook(name: str):
    func = HOOKS[name]
    if func is None:  # only when a module was imported without the topcal package around it
        raise TopcalError(f"Calibrator.{name} needs 'import topcal' first")
    return func


def set_html_renderer(func) -> None:
    """Register ``func(calibrator) -> str``, the HTML Jupyter shows for a fitted calibrator."""
    register_hook("html", func)


class Description(dict):
    """What ``Calibrator.describe()`` returns: a plain dict (JSON-ready, every key as
    before) that IPython and Jupyter show as the summary ``topcal describe`` prints
    (:func:`topcal.describe.summary.summary_text`) instead of thousands of nested entries;
    ``print(d)``, ``repr(d)`` and ``json.dumps(d)`` are a dict's."""

    __slots__ = ()

    def _repr_pretty_(self, p, cycle) -> None:
        if cycle or HOOKS["describe"] is None or "classes" not in self:
            p.text(dict.__repr__(self))
            return
        p.text(
            HOOKS["describe"](self)
            + "\n(this is a dict: "
            + ", ".join(map(str, self))
            + ";\n print(dict(d)) shows every entry)"
        )
