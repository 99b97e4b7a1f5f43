"""The wrapper contract: a fitted model around an inner fitted model.

``auto`` wraps the method it chose; an adapted model (``topcal adapt``) wraps the model it
moved to new priors; threshold and interval models can wrap theirs. Code above the
calibrators never asks which wrapper it holds: it asks ``isinstance(model, Wrapper)`` and
uses this contract:

* ``inner_`` -- the wrapped fitted model (what predictions, curves and the per-class
  description come from unless the wrapper says otherwise);
* ``summary_line()`` -- one line saying what the wrapper did ("chose kde-mon2 by 5-fold
  cross-validated NLL");
* ``innermost()`` -- the plain model at the bottom of a chain of wrappers;
* persistence through the registry like any method: a wrapper is registered under its name
  (with ``listed=False`` when it cannot be fitted from data, so it is no ``--method``
  choice) and saves its inner model inside its state, which ``from_dict`` rebuilds through
  the registry again.
"""

from __future__ import annotations

from typing import Any, cast

from .base import Calibrator, Curve

__all__ = ["Wrapper"]


class Wrapper(Calibrator):
    """A fitted model around an inner fitted model (see the module docstring).

    Subclasses set ``inner_`` when fitted (or loaded) and may override :meth:`summary_line`;
    prediction, curves and the parameter count are delegated to ``inner_`` unless
    overridden.
    """

    #: the wrapped fitted model (None until fitted or loaded); subclasses may make it a
    #: property
    inner_: Calibrator | None = None

    #: whether the wrapper was fitted on data itself and holds its own evidence (statistics,
    #: label-shift counts: ``auto``) or its evidence is its inner model's (an adapted model)
    owns_evidence: bool = True
    #: whether its predictions and curves are its inner model's (``auto``) or its own (an
    #: adapted model)
    predicts_as_inner: bool = True

    @property
    def evidence_(self):
        """Its own evidence where it holds one (:attr:`owns_evidence`), else its inner
        model's (an adapted model: its source's statistics, label-shift counts and
        fingerprint)."""
        self._check_fitted()
        return self._evidence if self.owns_evidence else self.inner_.evidence_

    def choice(self) -> dict | None:
        """What the wrapper chose among candidates, for tables and reports: ``{"chosen",
        "best", "rule", "blend", "table"}`` (``auto``: :meth:`~.auto.Auto.cv_table`), or
        None (the default: a wrapper that chose nothing)."""
        return None

    def summary_line(self) -> str:
        """One line on what this wrapper did to its inner model."""
        return f"{self.name} around {self.inner_.name}"

    def innermost(self) -> Calibrator:
        """The plain (non-wrapper) model at the bottom of this chain of wrappers."""
        model: Calibrator = self.inner_
        while isinstance(model, Wrapper):
            model = model.inner_
        return model

    def _check_fitted(self) -> None:
        super()._check_fitted()
        if self.inner_ is None:
            from ..errors import NotFittedError

            raise NotFittedError(f"this {self.name!r} model has no inner model; fit it first")

    @property
    def has_curve(self) -> bool:
        return self.inner_.has_curve

    def curve(self, k, score=None, *, n_points: int = 401) -> Curve:
        self._check_fitted()
        return cast(Any, self.inner_).curve(k, score, n_points=n_points)  # has_curve models

    @property
    def n_params_(self) -> int:
        return self.inner_.n_params_

    def _predict(self, data):
        return self.inner_.predict(data)

    def _vector_map(self):
        """The inner model's vector map (its own, or the one fitted beside it)."""
        return self.inner_.vector_map_

    def _interval(self, data, level: float):
        """The inner model's interval (the wrapper's own choice taken as fixed, e.g.
        auto's)."""
        return self.inner_._interval_of_rows(data, level)
