"""The model-file state of the temperature family: temperatures, awards, fitted classes,
losses, the parameters' covariances and (bts/btswa) the curves' supports, written and
checked on load. A base of
:class:`~topcal.calibrators.temperature.calibrator.TemperatureBase` (private module), kept
apart from ``calibrator.py``."""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from ._core import OFFSET_MAX, T_MAX, T_MIN
from ..base import finite_array, support_list, to_jsonable

__all__ = ["TemperatureState"]


class TemperatureState:
    """``_get_state`` / ``_set_state`` of :class:`TemperatureBase` (the model file's
    ``state``)."""

    # from the calibrator it is mixed into
    _binary: ClassVar[bool]
    classes_: tuple[str, ...]

    def _get_state(self) -> dict:
        if self._binary:  # the curve's support (bts/btswa)
            return {
                **self._state_core(),
                "support": [None if v is None else list(v) for v in self.support_],
            }
        return self._state_core()

    def _state_core(self) -> dict:
        cov = self.param_cov_
        extra = (
            {}
            if cov is None
            else {
                "param_cov": [
                    None if not np.all(np.isfinite(c)) else c.reshape(-1) for c in cov
                ]
            }
        )
        return to_jsonable(
            {
                **extra,
                "temperature": self.temperature_,
                "awards": self.awards_,
                "fitted": [bool(v) for v in self.fitted_classes_],
                "loss": self.loss_,
                "nll": self.nll_,
                "class_nll": self.class_nll_,
                "n_iter": self.n_iter_,
            }
        )

    def _set_state(self, state: dict) -> None:
        k = len(self.classes_)
        temps = finite_array(state["temperature"], "temperature", k)
        # a fit keeps T in [T_MIN, T_MAX] and |A / T| <= OFFSET_MAX; outside them (a
        # hand-edited file: T = 1e-320) log y / T overflows and every confidence is NaN
        if np.any(temps < T_MIN * (1 - 1e-9)) or np.any(temps > T_MAX * (1 + 1e-9)):
            raise ValueError(
                f"temperatures must lie in [{T_MIN:g}, {T_MAX:g}], the range a fit searches"
            )
        awards = finite_array(state["awards"], "awards", k)
        if np.any(np.abs(awards / temps) > OFFSET_MAX * (1 + 1e-9)):
            raise ValueError(
                f"awards must satisfy |A / T| <= {OFFSET_MAX:g}, as a fit keeps them"
            )
        fitted = state["fitted"]
        if (
            not isinstance(fitted, list)
            or len(fitted) != k
            or not all(isinstance(v, bool) for v in fitted)
        ):
            raise ValueError(f"fitted must be a list of {k} booleans")
        self.temperature_ = temps
        self.awards_ = awards
        self.fitted_classes_ = np.array(fitted, dtype=bool)
        (self.loss_, self.nll_) = (
            float(v) for v in finite_array([state["loss"], state["nll"]], "loss")
        )
        self.class_nll_ = finite_array(state["class_nll"], "class_nll", k)
        self.n_iter_ = int(state["n_iter"])
        cov = state.get(
            "param_cov"
        )  # files before intervals have none: predict_interval asks for a refit
        if cov is None:
            self.param_cov_ = None
        else:
            if not isinstance(cov, list) or len(cov) != k:
                raise ValueError(f"param_cov must be a list of {k} entries")
            self.param_cov_ = np.array(
                [
                    np.full((2, 2), np.nan)
                    if c is None
                    else finite_array(c, "param_cov", 4).reshape(2, 2)
                    for c in cov
                ]
            ).reshape(k, 2, 2)
        if self._binary:
            sup = state.get("support", [None] * k)  # files before the binary curves had none
            self.support_ = support_list(sup, k)
