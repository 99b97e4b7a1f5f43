"""Exception and warning types of topcal.

Every error a user can cause is a :class:`TopcalError`, which subclasses :class:`ValueError`
so that code written against scikit-learn-style libraries (``except ValueError``) keeps
working. Messages are one line: what was wrong, where (column, row, parameter), and how to
fix it.
"""

from __future__ import annotations

__all__ = [
    "TopcalError",
    "DataError",
    "ParameterError",
    "NotFittedError",
    "ModelFileError",
    "ConvergenceError",
    "TopcalWarning",
    "DegenerateClassWarning",
    "first_line",
]


class TopcalError(ValueError):
    """Base class of every error topcal raises for a user mistake."""


class DataError(TopcalError):
    """Input data is malformed: NaN, wrong shape, unknown labels, bad ranges."""


class ParameterError(TopcalError):
    """A method name or a parameter value is not allowed."""


class NotFittedError(TopcalError):
    """A calibrator was used before ``fit`` was called."""


class ModelFileError(TopcalError):
    """A saved model file is unreadable, of another version, or was modified."""


class ConvergenceError(TopcalError):
    """A numerical fit did not converge."""


class TopcalWarning(UserWarning):
    """Base class of topcal's warnings."""


class DegenerateClassWarning(TopcalWarning):
    """A class has too little data for its fit to mean much (documented fallback used)."""


def first_line(exc: BaseException) -> str:
    """The first line of ``exc``'s message, or its type's name when it has none (for
    one-line errors that quote a library's exception: pandas, pyarrow and Dask messages run
    over several lines)."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
