"""``blend``: a fixed convex mixture of a few fitted score methods (what ``auto`` returns
when a blend of its candidates clearly beats its single choice out of fold).

Conf(S) = sum_j w_j Conf_j(S), weights w_j >= 0 summing to 1, each component a registered
score method fitted on the same data. The weights are not fitted here: ``auto`` chooses them
from its candidates' out-of-fold confidences (:func:`blend_weights`) and fits the blend with
them; ``Blend`` then refits its components (``fit``, ``update``) and keeps the weights.

Mixing in probability space keeps every property a user reads off a curve: the blend of
monotone curves is monotone, and the blend of per-class curves is a per-class curve, sampled
on the same score grid. Its interval is the same weighted sum of the components' intervals:
by linearity it contains the blend's true value whenever every component's interval contains
its own (so it is at least as wide as needed; it is no joint interval at the stated level
when the components' errors move apart).

Registered unlisted: model files of it load through the registry, but it is no ``--method``.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any, cast

import numpy as np

from ..._numeric import PROB_CLIP
from ...data import TopLabelData
from ...errors import DegenerateClassWarning, ParameterError
from ..base import Calibrator, Curve, finite_array
from ..registry import fits_from_counts, get_class, is_registered, register

__all__ = ["Blend", "blend_weights", "MIN_WEIGHT"]

#: Components whose optimal weight is below this are dropped (the rest renormalised).
MIN_WEIGHT = 1e-3


def blend_weights(tp, fp, confidences) -> np.ndarray:
    """The convex weights (>= 0, sum 1) minimising the NLL of the mixture sum_j w_j c_j.

    ``confidences``: one array per component, of the same rows as ``tp``/``fp`` (weights of
    the rows' correct and wrong predictions). The loss is convex in w (the NLL of a linear
    mixture), so the optimum is global; components under :data:`MIN_WEIGHT` are dropped and
    the rest renormalised.
    """
    c = np.stack([np.asarray(v, dtype=np.float64) for v in confidences])  # (J, n)
    tp, fp = np.asarray(tp, dtype=np.float64), np.asarray(fp, dtype=np.float64)
    n = float(tp.sum() + fp.sum())
    k = c.shape[0]

    def f(w):
        p = np.clip(w @ c, PROB_CLIP, 1.0 - PROB_CLIP)
        loss = -(tp @ np.log(p) + fp @ np.log1p(-p)) / n
        grad = -(c @ (tp / p) - c @ (fp / (1.0 - p))) / n
        return loss, grad

    from scipy.optimize import minimize  # here: import topcal stays without scipy.optimize

    res = minimize(
        f,
        np.full(k, 1.0 / k),
        jac=True,
        method="SLSQP",
        bounds=[(0.0, 1.0)] * k,
        constraints=[
            {"type": "eq", "fun": lambda w: w.sum() - 1.0, "jac": lambda w: np.ones(k)}
        ],
        options={"ftol": 1e-12, "maxiter": 200},
    )
    w = np.clip(res.x, 0.0, None)
    if (
        not np.isfinite(w).all() or w.sum() <= 0
    ):  # pragma: no cover - SLSQP on a convex problem
        w = np.eye(k)[0]
    w[w < MIN_WEIGHT] = 0.0
    return w / w.sum()


class _Methods:
    """A tuple of 2+ distinct registered score-method names (no full-vector method, no
    wrapper)."""

    def ok(self, v) -> bool:
        if (
            isinstance(v, str)
            or not isinstance(v, (list, tuple))
            or len(v) < 2
            or len(set(v)) != len(v)
        ):
            return False
        return all(
            isinstance(m, str)
            and is_registered(m)
            and m not in ("auto", "blend")
            and fits_from_counts(m)
            for m in v
        )

    def __str__(self) -> str:
        return (
            "a list of 2 or more distinct score methods (no full-vector method), e.g. "
            "['hier-platt', 'hist']"
        )


class _Weights:
    """Non-negative finite numbers summing to 1."""

    def ok(self, v) -> bool:
        if isinstance(v, str) or not isinstance(v, (list, tuple)) or not v:
            return False
        try:
            w = np.asarray(v, dtype=np.float64)
        except (TypeError, ValueError):
            return False
        return (
            w.ndim == 1
            and bool(np.isfinite(w).all())
            and bool((w >= 0).all())
            and abs(w.sum() - 1.0) < 1e-9
        )

    def __str__(self) -> str:
        return "a list of non-negative numbers summing to 1, one per method"


@register(listed=False)
class Blend(Calibrator):
    """A convex mixture of score methods' curves: Conf(S) = sum_j w_j Conf_j(S) (see the
    module docstring).

    Parameters
    ----------
    methods : list of str
        Registered score methods (2 or more, distinct; no full-vector method).
    weights : list of float
        One per method, >= 0, summing to 1.

    Fitted attributes
    -----------------
    models_ : list of Calibrator
        The components, fitted on the same data (saved inside the blend's file).
    """

    in_paper = False
    name = "blend"
    models_: Sequence[Any] = ()  # the fitted components (none until fitted)
    summary = "a fixed convex mixture of score methods' curves (auto's blend)"
    _parameter_constraints = {"methods": _Methods(), "weights": _Weights()}

    def __init__(self, *, methods=("hier-platt", "hist"), weights=(0.5, 0.5)):
        self.methods = methods
        self.weights = weights

    def _validate_params(self) -> None:
        super()._validate_params()
        if len(self.weights) != len(self.methods):
            raise ParameterError(
                f"blend: {len(self.methods)} methods but {len(self.weights)} weights; "
                "give one weight per method"
            )

    tier = 2  # curves of several methods; never a candidate of auto itself

    def _fit(self, data: TopLabelData) -> None:
        models = []
        for m in self.methods:
            model = get_class(m)()
            with warnings.catch_warnings():
                warnings.simplefilter(
                    "ignore", DegenerateClassWarning
                )  # the blend's own fit warns once
                models.append(
                    model.fit(data, keep=self._part_keep())
                )  # the blend holds the evidence
        self.models_ = models

    def _mix(self, arrays) -> np.ndarray:
        mixed = sum(
            float(w) * np.asarray(a, dtype=np.float64) for w, a in zip(self.weights, arrays)
        )  # an array (0 only for no components)
        return cast(np.ndarray, mixed)

    def _predict(self, data: TopLabelData) -> np.ndarray:
        return np.clip(self._mix(m.predict(data) for m in self.models_), 0.0, 1.0)

    def _interval(self, data: TopLabelData, level: float):
        """The weighted sum of the components' intervals (see the module docstring)."""
        parts = [m._interval_of_rows(data, level) for m in self.models_]
        lo = np.clip(self._mix(p[0] for p in parts), 0.0, 1.0)
        hi = np.clip(self._mix(p[1] for p in parts), 0.0, 1.0)
        return lo, hi

    @property
    def has_curve(self) -> bool:
        return all(m.has_curve for m in self.models_)

    @property
    def support_(self):
        """Each class's score range in the fitting data (the first component's that records
        it)."""
        for m in self.models_:
            if hasattr(m, "support_"):
                return m.support_
        raise AttributeError("support_")

    def curve(self, k, score=None, *, n_points: int = 401) -> Curve:
        """The mixture of the components' curves on one score grid, with class ``k``'s
        support."""
        self._check_fitted()
        if not self.has_curve:
            raise ParameterError(
                "this blend has a component without a curve of the score alone"
            )
        curves = [m.curve(k, score, n_points=n_points) for m in self.models_]
        first = curves[0]
        return Curve(
            first.class_name,
            first.score,
            np.clip(self._mix(c.confidence for c in curves), 0.0, 1.0),
            first.support,
        )

    @property
    def n_params_(self) -> int:
        return int(sum(m.n_params_ for m in self.models_)) + len(self.methods) - 1

    def describe(self) -> dict:
        d = super().describe()
        d["blend"] = {
            "methods": list(self.methods),
            "weights": [float(w) for w in self.weights],
        }
        # the components' own descriptions, in the order of ``methods`` (a list: ``--json``
        # shows them in full, the text form only the blend line above)
        d["components"] = [model.describe() for model in self.models_]
        return d

    def _describe_classes(self) -> list[dict]:
        sup = self.support_ if hasattr(self, "support_") else [None] * len(self.classes_)
        return [{"support": None if s is None else list(s)} for s in sup]

    def _get_state(self) -> dict:
        return {"models": [m.to_dict() for m in self.models_]}

    def _set_state(self, state: dict) -> None:
        raw = state["models"]
        if not isinstance(raw, list) or len(raw) != len(self.methods):
            raise ValueError(f"models must be a list of {len(self.methods)} fitted components")
        models = [get_class(m).from_dict(r) for m, r in zip(self.methods, raw)]
        for m, model in zip(self.methods, models):
            if (
                model.name != m
                or tuple(model.classes_) != tuple(self.classes_)
                or tuple(model.score_range_) != tuple(self.score_range_)
            ):
                raise ValueError(
                    f"component {m!r} does not match the blend's method, classes or score "
                    "range"
                )
        finite_array(list(self.weights), "weights", len(self.methods))
        self.models_ = models
