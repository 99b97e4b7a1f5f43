"""The six registered temperature scalings: the paper's sts, csts, tswa, cstswa and the
binary bts, btswa; each class only says which parameters are free (docs/temperature.md)."""

from __future__ import annotations

from ..._params import Boolean, Options
from ...errors import ParameterError
from ..registry import register
from .calibrator import TemperatureBase

__all__ = [
    "SharedTemperatureScaling",
    "ClassTemperatureScaling",
    "TemperatureScalingWithAwards",
    "ClassTemperatureScalingWithAwards",
    "BinaryTemperatureScaling",
    "BinaryTemperatureScalingWithAwards",
]


@register
class SharedTemperatureScaling(TemperatureBase):
    """STS: one temperature for all samples, yhat = softmax(log y / T) (paper section 9; Guo
    et al. 2017).

    Parameters
    ----------
    loss : {"nll", "brier"}, default "nll"
        Top-label binary loss minimised (paper eqs. 14, 15).
    objective : {"top-label", "multinomial"}, default "top-label"
        "top-label": the loss on yhat_{k(X)} only (the paper's choice). "multinomial": Guo
        et al.'s full multinomial NLL -sum log yhat_{y(X)} over all samples, as scikit-learn
        and netcal fit it (for comparison; needs ``loss="nll"``).
    max_iter : int, default 100
        Newton iterations allowed before :class:`~topcal.errors.ConvergenceError`.
    keep_stats : bool, default False
        True: also keep the loss tables (``evidence_.stats``) that let :meth:`update` refit
        on added data without the old (31-46 KB of JSON per class; computing them costs
        20-100 fits, ``docs/scale.md``). False: a fit alone, not updatable (opt-in because
        of that cost).
    """

    name = "sts"
    _pools_classes = True  # one temperature for every class: the interval holds their spread
    tier = 1  # one temperature for all classes
    # one temperature: cross-validation folds start from the all-data optimum
    _warm_starts = True
    # ... and that all-data fit from auto's first look's, auto's final fit from it (one convex
    # problem in log T: at 10^5 x 1,000 a cold all-data sts fit took 14 s, a warm 2.6 s)
    _warm_refit = True
    summary = "shared temperature scaling, softmax(log y / T), 1 parameter (paper section 9)"
    needs_full = True
    _shared = True
    _updatable = True
    _parameter_constraints = {
        **TemperatureBase._parameter_constraints,
        "objective": Options(("top-label", "multinomial")),
        "keep_stats": Boolean(),
    }

    def __init__(
        self,
        *,
        loss: str = "nll",
        objective: str = "top-label",
        max_iter: int = 100,
        keep_stats: bool = False,
    ):
        self.loss = loss
        self.objective = objective
        self.max_iter = max_iter
        self.keep_stats = keep_stats

    def _objective_kind(self) -> str:
        return self.objective

    def _validate_params(self) -> None:
        super()._validate_params()
        if self.objective == "multinomial" and self.loss != "nll":
            raise ParameterError(
                "sts: objective='multinomial' is the multinomial NLL and needs loss='nll', "
                f"got loss={self.loss!r}; use objective='top-label' for the Brier loss"
            )


@register
class ClassTemperatureScaling(TemperatureBase):
    """CSTS: a temperature T_k per predicted class, fitted on that class's positives (paper
    section 10).

    Parameters
    ----------
    loss : {"nll", "brier"}, default "nll"
    max_iter : int, default 100
        Newton iterations allowed per class.
    keep_stats : bool, default False
        True: keep the loss tables that let :meth:`update` refit on added data (see
        ``sts``).
    """

    name = "csts"
    summary = (
        "class-specific temperature scaling, softmax(log y / T_k), K parameters (paper "
        "section 10)"
    )
    needs_full = True
    _updatable = True
    _parameter_constraints = {
        **TemperatureBase._parameter_constraints,
        "keep_stats": Boolean(),
    }

    def __init__(self, *, loss: str = "nll", max_iter: int = 100, keep_stats: bool = False):
        self.loss = loss
        self.max_iter = max_iter
        self.keep_stats = keep_stats


@register
class TemperatureScalingWithAwards(TemperatureBase):
    """TSwA: softmax((log y + A_k e_k) / T), K awards and one shared T, one joint fit (paper
    section 11).

    The only method here that does not decompose into per-class fits. A class with only TP
    (only FP) has its offset A_k / T held at +1e6 (-1e6), i.e. confidence 1 (0).

    Parameters
    ----------
    loss : {"nll", "brier"}, default "nll"
    max_iter : int, default 100
    """

    name = "tswa"
    summary = (
        "temperature scaling with awards, softmax((log y + A_k e_k) / T), K + 1 parameters "
        "(section 11)"
    )
    needs_full = True
    _shared = True
    _has_award = True
    _full_alternative = "btswa"


@register
class ClassTemperatureScalingWithAwards(TemperatureBase):
    """CSTSwA: a temperature T_k and an award A_k per predicted class, 2K parameters (paper
    appendix).

    Parameters
    ----------
    loss : {"nll", "brier"}, default "nll"
    max_iter : int, default 100
    """

    name = "cstswa"
    summary = "class-specific temperature scaling with awards, 2K parameters (paper appendix)"
    needs_full = True
    _has_award = True
    _full_alternative = "btswa"


@register
class BinaryTemperatureScaling(TemperatureBase):
    """Binary temperature scaling of the top score alone, per class: sigmoid(logit(s) /
    T_k).

    yhat = s^(1/T_k) / (s^(1/T_k) + (1 - s)^(1/T_k)) on the normalised top score s = (S -
    lo) / (hi - lo), clipped to [1e-12, 1 - 1e-12]. Works on any data, including binned
    counts. Equals ``csts`` when K = 2 (the one other entry is then 1 - s); for K > 2 it
    differs because it cannot see how the remaining 1 - s is split among the other classes.

    Parameters
    ----------
    loss : {"nll", "brier"}, default "nll"
    max_iter : int, default 100
    """

    name = "bts"
    summary = (
        "binary temperature scaling of the top score, sigmoid(logit(s) / T_k), K parameters"
    )
    _binary = True


@register
class BinaryTemperatureScalingWithAwards(TemperatureBase):
    """Binary temperature scaling with awards, per class: sigmoid((logit(s) + A_k) / T_k).

    The top-score analogue of ``cstswa``; equivalent to per-class Platt scaling (Platt 1999)
    of logit(s), with slope 1/T_k and intercept A_k/T_k.

    Parameters
    ----------
    loss : {"nll", "brier"}, default "nll"
    max_iter : int, default 100
    """

    name = "btswa"
    summary = (
        "binary temperature scaling with awards, sigmoid((logit(s) + A_k) / T_k), 2K "
        "parameters"
    )
    _binary = True
    _has_award = True
