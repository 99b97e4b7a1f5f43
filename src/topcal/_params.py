"""Declarative parameter checks (scikit-learn's ``_parameter_constraints`` idea).

Each calibrator declares, once, what each of its parameters may be; the check runs in
``fit`` and its message names the parameter, what is allowed and what was received.
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass
from typing import Any, cast

import numpy as np

from .errors import ParameterError

__all__ = [
    "Interval",
    "Options",
    "Boolean",
    "NoneOr",
    "validate_params",
    "MAX_BINS",
    "check_bin_count",
    "MAX_ITER",
]

#: Upper bound of every bin-count parameter (histogram bins, ECE bins): more bins than this
#: hold almost no samples each, and the tables would need memory in proportion (a request
#: for 10^12 bins used to end in MemoryError).
MAX_BINS = 100_000
#: Upper bound of iteration-count parameters (optimiser steps).
MAX_ITER = 1_000_000


def check_bin_count(n_bins, name: str = "n_bins", owner: str = "") -> None:
    """Refuse a bin count ``n_bins`` that is no integer in [1, :data:`MAX_BINS`]; the
    message names the parameter ``name`` (after ``owner``, the function, where given)."""
    if (
        isinstance(n_bins, bool)
        or not isinstance(n_bins, (int, np.integer))
        or not 1 <= n_bins <= MAX_BINS
    ):
        where = f"{owner}: " if owner else ""
        raise ParameterError(
            f"{where}parameter {name!r} must be an integer in [1, {MAX_BINS}], got {n_bins!r}"
        )


@dataclass(frozen=True)
class Interval:
    """A real (or integer, ``integer=True``) number in an interval."""

    lo: float | None = None
    hi: float | None = None
    closed: str = "both"  # "both", "left", "right", "neither"
    integer: bool = False

    def ok(self, v: Any) -> bool:
        if isinstance(v, bool) or not isinstance(v, numbers.Real):
            return False
        if self.integer and not isinstance(v, numbers.Integral) and not float(v).is_integer():
            # (an int is compared as an int: float() of one above 1.8e308 overflows)
            return False
        if v != v:  # NaN
            return False
        if self.lo is not None:
            if v < self.lo or (v == self.lo and self.closed in ("right", "neither")):
                return False
        if self.hi is not None:
            if cast(float, v) > self.hi or (
                v == self.hi and self.closed in ("left", "neither")
            ):
                return False
        return True

    def __str__(self) -> str:
        kind = "an integer" if self.integer else "a number"
        lb = "[" if self.closed in ("both", "left") else "("
        rb = "]" if self.closed in ("both", "right") else ")"
        lo = "-inf" if self.lo is None else f"{self.lo:g}"
        hi = "inf" if self.hi is None else f"{self.hi:g}"
        return f"{kind} in {lb}{lo}, {hi}{rb}"


@dataclass(frozen=True)
class Options:
    """One of a fixed set of values."""

    values: tuple

    def ok(self, v: Any) -> bool:
        return any(v == o and type(v) is type(o) for o in self.values)

    def __str__(self) -> str:
        return "one of " + ", ".join(repr(o) for o in self.values)


@dataclass(frozen=True)
class Boolean:
    """True or False."""

    def ok(self, v: Any) -> bool:
        return isinstance(v, bool)

    def __str__(self) -> str:
        return "True or False"


@dataclass(frozen=True)
class NoneOr:
    """None, or whatever ``inner`` allows."""

    inner: Any

    def ok(self, v: Any) -> bool:
        return v is None or self.inner.ok(v)

    def __str__(self) -> str:
        return f"None (null in --param NAME=null) or {self.inner}"


def validate_params(owner: str, constraints: dict, params: dict) -> None:
    """Raise ParameterError for the first parameter that breaks its constraint."""
    for name, rule in constraints.items():
        v = params[name]
        if not rule.ok(v):
            raise ParameterError(
                f"{owner}: parameter {name!r} must be {rule}, got {_short(v)}"
            )


def _short(v) -> str:
    """``repr(v)``, shortened in the middle when long (an integer of 400 digits)."""
    text = repr(v)
    return text if len(text) <= 60 else f"{text[:25]}...{text[-10:]} ({len(text)} characters)"
