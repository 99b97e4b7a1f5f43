"""One registry maps method names to calibrator classes.

The same names feed :func:`topcal.calibrator`, the CLI's ``--method``
choices, error messages, the docs and the ``method`` field of saved models.
"""

from __future__ import annotations

from ..errors import ParameterError

__all__ = ["register", "get_class", "available_methods", "calibrator", "paper_calibrator"]

_REGISTRY: dict[str, type] = {}


def register(cls: type) -> type:
    """Class decorator: add ``cls`` to the registry under ``cls.name``."""
    if not cls.name or cls.name in _REGISTRY:
        raise RuntimeError(f"calibrator name {cls.name!r} is empty or already registered")
    _REGISTRY[cls.name] = cls
    return cls


def available_methods() -> list[str]:
    """Registered method names, in registration order."""
    return list(_REGISTRY)


def get_class(name: str) -> type:
    """The calibrator class registered as ``name``."""
    try:
        return _REGISTRY[name]
    except (KeyError, TypeError):
        raise ParameterError(
            f"unknown method {name!r}. Options are: {', '.join(_REGISTRY)}"
        ) from None


def calibrator(name: str, **params):
    """An unfitted calibrator of method ``name`` with ``params``.

    Unknown parameter names are rejected (never silently swallowed).

    Examples
    --------
    >>> import topcal
    >>> cal = topcal.calibrator("hist", n_bins=10)
    """
    cls = get_class(name)
    cls.check_param_names(params)
    return cls(**params)


def paper_calibrator(name: str, **params):
    """Like :func:`calibrator`, with the paper's unshrunk estimator (``shrinkage=0``) where the method has one.

    For reproducing the paper's figures and tables; the default
    ``shrinkage="auto"`` is safer on data the fit did not see.
    """
    if "shrinkage" in get_class(name)._param_names():
        params = {"shrinkage": 0, **params}
    return calibrator(name, **params)
