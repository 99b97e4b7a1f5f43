"""Whole-vector maps with a top-label curve on their confidence: ``vs-hier-platt``,
``sms-pooled-beta``.

the whole-vector map decides how the probability mass moves between classes; a top-label
curve then recalibrates the one number topcal scores, the map's confidence in the original
top label: ``hier-platt`` (per-class Platt curves shrunk toward the pooled one) on ``vs``'s,
one ``pooled-beta`` curve (3 parameters) on ``sms``'s. The curve is fitted on the map's
confidences of its own fitting rows (docs/vector.md says what this gained held out).
"""

from __future__ import annotations

import warnings
from typing import Any, ClassVar

import numpy as np

from ...data import TopLabelData
from ...errors import DegenerateClassWarning
from .. import intervals
from ..base import Calibrator
from ..foldmemo import sharing
from ..pooled.hierarchical import HierarchicalPlatt
from ..pooled.methods import PooledBeta
from ..registry import register
from .calibrator import StructuredMatrixScaling, VectorScaling

__all__ = ["VectorScalingHierPlatt", "StructuredMatrixScalingBeta"]


def _as_scores(data: TopLabelData, conf: np.ndarray) -> TopLabelData:
    """``data``'s rows with ``conf`` as their top score (on [0, 1]), the full vectors
    dropped."""
    return TopLabelData(
        data.classes,
        data.pred,
        np.asarray(conf, np.float64),
        (0.0, 1.0),
        tp=data.tp,
        fp=data.fp,
    )


class _Corrected(Calibrator):
    """A whole-vector map (``_map``) followed by a top-label curve (``_curve``) of its
    confidence.

    Parameters
    ----------
    reg : float >= 0, default 1.0
        Multiplier of the map's ridge penalties.
    max_iter : int, default 500
        Iterations of the map's optimiser.

    Fitted attributes
    -----------------
    map_ : the map (``vs`` or ``sms``)
    curve_ : the curve, fitted on (predicted class, the map's confidence c) of the fitting rows
    """

    needs_full = True
    in_paper = False
    _full_alternative = "bts"
    _parameter_constraints = VectorScaling._parameter_constraints
    _map: ClassVar[type[Any]] = VectorScaling
    _curve: ClassVar[type[Any]] = HierarchicalPlatt
    # the map's fit starts from the warm model's map (its parameters, first stage and
    # Hessian), as ``vs``/``sms`` do: the cross-validation folds from the all-data fit,
    # auto's final fit from the folds' all-data fit or the first look's; the curve starts
    # cold
    _warm_starts = True
    _warm_refit: ClassVar[bool] = True

    def __init__(self, *, reg: float = 1.0, max_iter: int = 500):
        self.reg = reg
        self.max_iter = max_iter

    def _fit(self, data: TopLabelData) -> None:
        keep = self._part_keep()
        # the map's solve and first stage are memoised per fold (calibrator.py): shared with
        # the fold's vs / sms candidate
        self.map_ = self._map(reg=self.reg, max_iter=self.max_iter)
        warm = self._warm
        warm = warm.map_ if isinstance(warm, type(self)) and warm.reg == self.reg else None
        # the map's confidence on its fitting rows from the fit's own input x (its first
        # stage, kept while the block lasts), not from the features computed again: at 10^5
        # x 1,000 auto's final fit recomputed them (a log and a rescale of the n x K scores,
        # ~4 s)
        with sharing(data):
            self.map_.fit(data, keep=keep, warm=warm, context=self._context)
            conf = self.map_._fit_confidence(data)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DegenerateClassWarning)
            self.curve_ = self._curve().fit(_as_scores(data, conf), keep=keep)

    def _predict(self, data: TopLabelData) -> np.ndarray:
        return self.curve_.predict(_as_scores(data, self.map_.predict(data)))

    def _vector_map(self) -> Calibrator:
        """The whole-vector map under the curve: the calibrated vector's other entries are
        its."""
        return self.map_

    def _interval(self, data: TopLabelData, level: float):
        """The curve's interval at the ends of the map's: both estimation errors, added."""
        lo_c, hi_c = self.map_._interval(data, level)
        ends = [self.curve_._interval(_as_scores(data, c), level) for c in (lo_c, hi_c)]
        lo = np.minimum.reduce([e for pair in ends for e in pair])
        hi = np.maximum.reduce([e for pair in ends for e in pair])
        return intervals.include_point(lo, hi, self._predict(data))

    @property
    def n_params_(self) -> int:
        return int(self.map_.n_params_) + int(self.curve_.n_params_)

    def describe(self) -> dict:
        """The map's description, with the curve's under ``curve``."""
        d = super().describe()
        d["fit"] = self.map_.describe()["fit"]
        curve = self.curve_.describe()
        d["curve"] = {
            **curve.get("pooled", curve.get("hierarchical")),
            "method": self.curve_.name,
        }
        return d

    def _describe_classes(self) -> list[dict]:
        return self.map_._describe_classes()

    def _get_state(self) -> dict:
        return {"map": self.map_.to_dict(), "curve": self.curve_.to_dict()}

    def _set_state(self, state: dict) -> None:
        m = self._map.from_dict(state["map"])
        c = self._curve.from_dict(state["curve"])
        if tuple(m.classes_) != tuple(self.classes_) or tuple(c.classes_) != tuple(
            self.classes_
        ):
            raise ValueError("the map and the curve must have the model's classes")
        self.map_, self.curve_ = m, c


@register
class VectorScalingHierPlatt(_Corrected):
    """``vs`` followed by ``hier-platt`` on its top-label confidence c: per predicted class
    k, sigmoid(a_k logit(c) + b_k), the curves shrunk toward the pooled one (strength by
    LOO)."""

    name = "vs-hier-platt"
    tier = 2.25  # vs plus per-class curves shrunk toward a pooled one
    #: auto runs it by default only above ``sms``'s class limit: up to it, ``sms`` was
    #: better held out on all four 10-class bench sets (docs/vector.md), and at 10^5 x 10
    #: its hier-platt fit costs about 1.6 s a fold
    auto_min_classes: ClassVar[int] = StructuredMatrixScaling.auto_max_classes + 1
    summary = (
        "vs, then per-class Platt curves of its top-label confidence shrunk toward the pooled"
    )


@register
class StructuredMatrixScalingBeta(_Corrected):
    """``sms`` followed by one beta calibration curve of its top-label confidence c:
    sigmoid(a ln c - b ln(1 - c) + d), the ``pooled-beta`` fit of correctness on c."""

    name = "sms-pooled-beta"
    tier = 2.75  # sms plus one pooled curve
    # not among auto's default candidates: added, it changed auto's held-out NLL on none of
    # the four 10-class bench sets (the one-SE rule kept a simpler choice) and cost fit time
    # (docs/vector.md); named in ``candidates=`` it runs
    summary = "sms, then one beta calibration curve of its top-label confidence"
    _map = StructuredMatrixScaling
    _curve = PooledBeta
