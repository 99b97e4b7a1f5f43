"""One registry maps method names to calibrator classes.

The same names feed :func:`topcal.calibrator`, the CLI's ``--method`` choices, error
messages, the docs and the ``method`` field of saved models.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..errors import ParameterError

if TYPE_CHECKING:
    from .base import Calibrator

__all__ = [
    "register",
    "get_class",
    "lookup",
    "available_methods",
    "is_registered",
    "calibrator",
    "paper_calibrator",
    "BASELINE",
    "fits_from_counts",
    "require_counts",
]

#: Name of the baseline method (the top score rescaled, ``counts.Uncalibrated``): the one
#: entry every comparison of the report holds. Code above the calibrators names it through
#: this constant only.
BASELINE = "uncalibrated"

_REGISTRY: dict[str, type[Calibrator]] = {}
#: registered names that are no method to fit (wrappers built from a fitted model, e.g. an
#: adapted model)
_UNLISTED: set[str] = set()


def register(cls: type[Calibrator] | None = None, *, listed: bool = True) -> Any:
    """Class decorator: add ``cls`` to the registry under ``cls.name``.

    ``listed=False`` registers a model kind that is built from a fitted model rather than
    fitted from data (the adapted model): model files of it load through the registry, but
    it is no method of :func:`available_methods`, ``--method`` or :func:`calibrator`.
    """

    def add(c: type[Calibrator]) -> type[Calibrator]:
        if not c.name or c.name in _REGISTRY:
            raise RuntimeError(f"calibrator name {c.name!r} is empty or already registered")
        _REGISTRY[c.name] = c
        if not listed:
            _UNLISTED.add(c.name)
        return c

    return add if cls is None else add(cls)


def available_methods() -> list[str]:
    """Registered method names (the ones that can be fitted), in registration order."""
    return [n for n in _REGISTRY if n not in _UNLISTED]


def is_registered(name) -> bool:
    """Whether a saved model of kind ``name`` can be loaded (a method, or a registered
    wrapper)."""
    return isinstance(name, str) and name in _REGISTRY


def get_class(name: str, *, unlisted: bool = False) -> type[Calibrator]:
    """The calibrator class registered as ``name`` (``unlisted``: wrappers too, for loading
    models)."""
    if isinstance(name, str) and name in _REGISTRY and (unlisted or name not in _UNLISTED):
        return _REGISTRY[name]
    raise ParameterError(
        f"unknown method {name!r}. Options are: {', '.join(available_methods())}"
    )


def lookup(name: object) -> type[Calibrator] | None:
    """The class registered as ``name`` (wrappers included), or None when ``name`` is no
    registered kind.

    For code that holds only a method's name (a comparison keyed by name) and asks about the
    method's declared properties (``is_baseline``, ``step_curve``, ``unranked_on``):
    ``getattr(lookup(name), "is_baseline", False)`` is False for a name that is no method.
    """
    return _REGISTRY.get(name) if isinstance(name, str) else None


def fits_from_counts(method) -> bool:
    """Whether ``method`` (a registered name, a calibrator class or a calibrator) can be
    fitted and updated from score counts (streamed, Dask, ``update``, a blend's component):
    every method but those that recalibrate the full score vector (``needs_full``). The one
    place that says so."""
    cls: Any = (
        get_class(method, unlisted=True)
        if isinstance(method, str)
        else method
        if isinstance(method, type)
        else type(method)
    )
    return not cls.needs_full


def require_counts(method, advice: str) -> None:
    """Raise ParameterError where ``method`` cannot be fitted from counts
    (:func:`fits_from_counts`), with ``advice``."""
    if not fits_from_counts(method):
        name = method if isinstance(method, str) else method.name
        raise ParameterError(
            f"method {name!r} recalibrates the full score vector, which has no "
            f"mergeable statistics and cannot be fitted from counts; {advice}"
        )


def calibrator(name: str, **params: Any) -> Calibrator:
    """An unfitted calibrator of method ``name`` with ``params``.

    Unknown parameter names are rejected (never silently swallowed).

    Examples
    --------
    >>> import topcal
    >>> cal = topcal.calibrator("hist", n_bins=10)
    """
    cls = get_class(name)
    cls._check_param_names(params)
    return cls(**params)


def paper_calibrator(name: str, **params: Any) -> Calibrator:
    """Like :func:`calibrator`, with the paper's unshrunk estimator (``shrinkage=0``) where
    the method has one.

    For reproducing the paper's figures and tables; the default ``shrinkage="auto"`` is
    safer on data the fit did not see.
    """
    if "shrinkage" in get_class(name)._param_names():
        params = {"shrinkage": 0, **params}
    return calibrator(name, **params)
