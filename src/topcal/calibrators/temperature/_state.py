"""The model-file state of the temperature family: temperatures, awards, fitted classes,
losses, the parameters' covariances and (bts/btswa) the curves' supports, written
(:func:`file_state`) and checked on load (:func:`read_state`); called by
:class:`~topcal.calibrators.temperature.calibrator.TemperatureBase` with its fitted values
(private module)."""

from __future__ import annotations

from typing import Any

import numpy as np

from ._core import OFFSET_MAX, T_MAX, T_MIN
from ..base import finite_array, support_list, to_jsonable

__all__ = ["file_state", "read_state"]


def file_state(
    fitted: dict[str, Any], param_cov: np.ndarray | None, support: list | None
) -> dict:
    """The ``state`` of a model file from the ``fitted`` values (``temperature``,
    ``awards``, ``fitted``, ``loss``, ``nll``, ``class_nll``, ``n_iter``), the parameters'
    covariances (None: none written) and the curves' supports (bts/btswa; None: the other
    methods)."""
    extra = (
        {}
        if param_cov is None
        else {
            "param_cov": [
                None if not np.all(np.isfinite(c)) else c.reshape(-1) for c in param_cov
            ]
        }
    )
    state = to_jsonable(
        {
            **extra,
            "temperature": fitted["temperature"],
            "awards": fitted["awards"],
            "fitted": [bool(v) for v in fitted["fitted"]],
            "loss": fitted["loss"],
            "nll": fitted["nll"],
            "class_nll": fitted["class_nll"],
            "n_iter": fitted["n_iter"],
        }
    )
    if support is None:
        return state
    return {**state, "support": [None if v is None else list(v) for v in support]}


def read_state(state: dict, k: int, binary: bool) -> dict[str, Any]:
    """The fitted values of a model file's ``state`` for ``k`` classes (the keys of
    :func:`file_state`'s ``fitted``, ``param_cov`` and, ``binary``, ``support``); raises
    ValueError on anything a fit cannot give."""
    temps = finite_array(state["temperature"], "temperature", k)
    # a fit keeps T in [T_MIN, T_MAX] and |A / T| <= OFFSET_MAX; outside them (a
    # hand-edited file: T = 1e-320) log y / T overflows and every confidence is NaN
    if np.any(temps < T_MIN * (1 - 1e-9)) or np.any(temps > T_MAX * (1 + 1e-9)):
        raise ValueError(
            f"temperatures must lie in [{T_MIN:g}, {T_MAX:g}], the range a fit searches"
        )
    awards = finite_array(state["awards"], "awards", k)
    if np.any(np.abs(awards / temps) > OFFSET_MAX * (1 + 1e-9)):
        raise ValueError(f"awards must satisfy |A / T| <= {OFFSET_MAX:g}, as a fit keeps them")
    fitted = state["fitted"]
    if (
        not isinstance(fitted, list)
        or len(fitted) != k
        or not all(isinstance(v, bool) for v in fitted)
    ):
        raise ValueError(f"fitted must be a list of {k} booleans")
    loss, nll = (float(v) for v in finite_array([state["loss"], state["nll"]], "loss"))
    out: dict[str, Any] = {
        "temperature": temps,
        "awards": awards,
        "fitted": np.array(fitted, dtype=bool),
        "loss": loss,
        "nll": nll,
        "class_nll": finite_array(state["class_nll"], "class_nll", k),
        "n_iter": int(state["n_iter"]),
        "param_cov": _param_cov(state.get("param_cov"), k),
    }
    if binary:
        sup = state.get("support", [None] * k)  # files before the binary curves had none
        out["support"] = support_list(sup, k)
    return out


def _param_cov(cov, k: int) -> np.ndarray | None:
    """The (k, 2, 2) covariances of a state's ``param_cov`` (None where the file has none:
    ``predict_interval`` asks for a refit)."""
    if cov is None:
        return None
    if not isinstance(cov, list) or len(cov) != k:
        raise ValueError(f"param_cov must be a list of {k} entries")
    return np.array(
        [
            np.full((2, 2), np.nan) if c is None else finite_array(c, "param_cov", 4).reshape(2, 2)
            for c in cov
        ]
    ).reshape(k, 2, 2)
