"""Pooled calibrators: one curve Conf(S) for every predicted class.

With a few dozen samples per class, one curve fitted on all classes together is often the
strongest thing to do: it spends every sample on one function of the top score, at the price
of ignoring how classes differ. Each pooled method fits a registered score method on the
data with every row assigned to one class ("all classes") and predicts that curve for every
row:

* ``pooled-platt``: Platt scaling (Platt 1999) of logit(s) on the normalised top score s,
  sigmoid(a logit(s) + b): ``btswa`` pooled (a = 1/T, b = A/T), 2 parameters.
* ``pooled-hist``: a histogram of the pooled scores (15 equal-mass bins by default), shrunk
  toward the overall accuracy as ``hist``'s reference is.
* ``pooled-kde-mon2``: the kernel density ratio with the b_mon2 bandwidth on the pooled
  scores, shrunk as ``kde-mon2``'s reference is.

The interval (``predict_interval``) is the inner model's on the pooled data (the pooled
curve's estimation error: the delta method for ``pooled-platt`` and ``pooled-beta``, the
local counts' Jeffreys interval for ``pooled-hist`` and ``pooled-kde-mon2``) joined with the
row's class's posterior around the curve: the classes' spread measured at the fit as prior,
the class's own fitting rows as likelihood (:mod:`.spread`).

A pooled model keeps the per-class counts and score statistics every model keeps (``update``
refits the pooled curve on old + new data), and each class's own support, so plots shade
where a class has no data even though its curve is the common one.
"""

from __future__ import annotations

import warnings
from typing import Any, ClassVar

import numpy as np

from ...data import TopLabelData
from ...errors import DegenerateClassWarning, ModelFileError
from ..base import Calibrator, Curve, finite_array
from ..counts import Histogram
from .hierarchical import HierarchicalBeta
from ..kde import KDEMon2
from ..registry import get_class, register
from ..score import POOLED_CLASS, pooled_rows
from ..temperature import BinaryTemperatureScalingWithAwards

__all__ = [
    "PooledPlatt",
    "PooledBeta",
    "PooledHistogram",
    "PooledKDEMon2",
    "POOLED_CLASS",
    "pool",
]


def pool(data: TopLabelData) -> TopLabelData:
    """``data`` with every row assigned to one class (POOLED_CLASS); scores, weights and
    bins kept (:func:`.score.pooled_rows`: in a fold, the rows kde-mon2's reference is
    fitted on)."""
    return pooled_rows(data)


class _Pooled(Calibrator):
    """One inner model of method ``_inner`` fitted on the pooled data; its curve serves
    every class.

    Fitted attributes
    -----------------
    model_ : Calibrator
        The inner model (one class, POOLED_CLASS).
    support_ : list of (float, float) or None
        Each class's own score range in the fitting data.
    """

    in_paper = (
        # not one of the paper's methods (the paper-reproducing experiments leave it out)
        False
    )
    # one parametric curve for all classes (non-parametric ones: 1.5)
    tier: ClassVar[float] = 1
    _pools_classes = True  # the interval holds the classes' spread around the curve (.spread)
    #: the registered method fitted on the pooled data
    _inner: ClassVar[str] = ""
    #: the fitted inner model (an instance of the registered ``_inner`` method)
    model_: Any
    #: during fit, the all-data fit of this method a fold starts from (crossfit.py), or None
    _warm: _Pooled | None

    def _inner_params(self) -> dict:
        return self.get_params()

    def _fit(self, data: TopLabelData) -> None:
        self.support_ = data.class_supports()
        inner = get_class(self._inner)(**self._inner_params())
        # a part of this model (its evidence is this model's); a cross-validation fold's
        # pooled model is a scratch fit (crossfit.py), and so is its curve, started from the
        # all-data pooled curve's optimum where the inner method starts warm (pooled-beta)
        warm = self._warm.model_ if self._warm is not None and inner._warm_starts else None
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DegenerateClassWarning)
            inner.fit(pool(data), keep=self._part_keep(), warm=warm)
        self.model_ = inner

    def _predict(self, data: TopLabelData) -> np.ndarray:
        return self.model_.predict(pool(data))

    def _interval(self, data: TopLabelData, level: float):
        """The inner model's interval on the pooled data (the pooled curve's estimation
        error)."""
        try:
            return self.model_._interval(pool(data), level)
        except ModelFileError:  # an inner model saved before intervals: say it of this model
            raise self._no_interval_stats("interval statistics of its pooled curve") from None

    @property
    def n_params_(self) -> int:
        return int(self.model_.n_params_)

    def curve(self, k, score=None, *, n_points: int = 401) -> Curve:
        """The pooled curve, with class ``k``'s own support (see ScoreCalibrator.curve)."""
        self._check_fitted()
        i, s = self._curve_scores(k, score, n_points)
        return Curve(self.classes_[i], s, self.model_.curve(0, s).confidence, self.support_[i])

    def _pooled_summary(self) -> dict:
        """Scalars describing the pooled curve (``describe``'s "pooled" entry)."""
        d = self.model_.describe()
        out = {
            "method": self._inner,
            "samples": float(self.model_.n_tp_[0] + self.model_.n_fp_[0]),
        }
        info = d["classes"][POOLED_CLASS]
        out.update(
            {
                k: v
                for k, v in info.items()
                if isinstance(v, (int, float, str)) and k not in ("n_tp", "n_fp")
            }
        )
        for key in ("shrinkage", "fit"):
            for k, v in d.get(key, {}).items():
                if isinstance(v, (int, float)) and not isinstance(v, bool):
                    out[k] = v
        return out

    def describe(self) -> dict:
        d = super().describe()
        d["pooled"] = self._pooled_summary()
        return d

    def _describe_classes(self) -> list[dict]:
        return [
            {"support": list(s)} if s is not None else {"support": None} for s in self.support_
        ]

    def _get_state(self) -> dict:
        return {
            "model": self.model_.to_dict(),
            "support": [None if s is None else list(s) for s in self.support_],
        }

    def _set_state(self, state: dict) -> None:
        model = get_class(self._inner).from_dict(state["model"])
        if tuple(model.classes_) != (POOLED_CLASS,) or tuple(model.score_range_) != tuple(
            self.score_range_
        ):
            raise ValueError(
                f"the pooled model must be one {self._inner!r} curve on the model's score "
                "range"
            )
        sup = state["support"]
        if not isinstance(sup, list) or len(sup) != len(self.classes_):
            raise ValueError(f"support must be a list of {len(self.classes_)} entries")
        self.support_ = [
            None if v is None else tuple(finite_array(v, "support", 2)) for v in sup
        ]
        self.model_ = model


@register
class PooledPlatt(_Pooled):
    """Platt scaling of logit(s), one curve for all classes: sigmoid(a logit(s) + b).

    ``btswa`` fitted on all classes pooled (a = 1/T, b = A/T; the pooled ``bts`` with an
    intercept). ``describe`` gives ``slope`` a and ``intercept`` b.

    Parameters
    ----------
    loss : {"nll", "brier"}, default "nll"
    max_iter : int, default 100
    """

    name = "pooled-platt"
    summary = "Platt scaling of logit(top score), one curve for all classes, 2 parameters"
    _inner = BinaryTemperatureScalingWithAwards.name
    _parameter_constraints = dict(BinaryTemperatureScalingWithAwards._parameter_constraints)

    def __init__(self, *, loss: str = "nll", max_iter: int = 100):
        self.loss = loss
        self.max_iter = max_iter

    def _pooled_summary(self) -> dict:
        t = float(self.model_.temperature_[0])
        return {
            "method": "platt",
            "samples": float(self.model_.n_tp_[0] + self.model_.n_fp_[0]),
            "slope": 1.0 / t,
            "intercept": float(self.model_.awards_[0]) / t,
            "nll": float(self.model_.nll_),
        }

    @property
    def slope_(self) -> float:
        return 1.0 / float(self.model_.temperature_[0])

    @property
    def intercept_(self) -> float:
        return float(self.model_.awards_[0]) / float(self.model_.temperature_[0])


@register
class PooledBeta(_Pooled):
    """Beta calibration (Kull et al. 2017), one curve for all classes: sigmoid(a ln s - b
    ln(1 - s)
    + c).

    ``hier-beta`` fitted on all classes pooled (one class: nothing to shrink), on the
    normalised top score s clipped to [1e-12, 1 - 1e-12]. ``describe`` gives a, b, c.

    Parameters
    ----------
    loss : {"nll"}, default "nll"
    """

    name = "pooled-beta"
    summary = "beta calibration of the top score, one curve for all classes, 3 parameters"
    _inner = HierarchicalBeta.name
    _warm_starts = (
        # cross-validation folds start from the all-data curve (its optimum and its
        # strength)
        True
    )
    _parameter_constraints = {"loss": HierarchicalBeta._parameter_constraints["loss"]}

    def __init__(self, *, loss: str = "nll"):
        self.loss = loss


@register
class PooledHistogram(_Pooled):
    """A histogram of the pooled scores, one curve for all classes (shrunk toward the
    overall accuracy).

    Parameters
    ----------
    n_bins : int, default 15
    strategy : {"uniform", "quantile"}, default "quantile"
        Equal-mass bins by default: pooled top scores crowd near the top of the range.
    shrinkage : "auto", "class" or a number >= 0, default "auto"
        As for ``hist`` (0: the raw bin frequencies).
    """

    name = "pooled-hist"
    tier = 1.5  # one non-parametric curve: less simple than 2 or 3 parameters
    summary = (
        "histogram of the top score, one curve for all classes (15 equal-mass bins, shrunk)"
    )
    step_curve = True
    _inner = Histogram.name
    _parameter_constraints = dict(Histogram._parameter_constraints)

    def __init__(self, *, n_bins: int = 15, strategy: str = "quantile", shrinkage="auto"):
        self.n_bins = n_bins
        self.strategy = strategy
        self.shrinkage = shrinkage


@register
class PooledKDEMon2(_Pooled):
    """The kernel density ratio with bandwidth b_mon2, one curve for all classes (shrunk).

    Parameters
    ----------
    engine, boundary, shrinkage
        As for ``kde-mon2``.
    """

    name = "pooled-kde-mon2"
    tier = 1.5  # one non-parametric curve: less simple than 2 or 3 parameters
    summary = (
        "kernel density ratio (b_mon2) of the top score, one curve for all classes (shrunk)"
    )
    _inner = KDEMon2.name
    _parameter_constraints = dict(KDEMon2._parameter_constraints)

    def __init__(self, *, engine: str = "auto", boundary: str | None = None, shrinkage="auto"):
        self.engine = engine
        self.boundary = boundary
        self.shrinkage = shrinkage
