"""Reference calibrators: the rescaled raw score and the per-class accuracy."""

from __future__ import annotations

import numpy as np

from ...data import ClassView
from ..base import finite_array
from ..score import ScoreCalibrator
from ..registry import BASELINE, register
from .. import intervals

__all__ = ["Uncalibrated", "Conf1"]


@register
class Uncalibrated(ScoreCalibrator):
    """The top score rescaled to [0, 1] by the declared range: (S - lo) / (hi - lo).

    S / 10 for PhANNs scores, S itself for probabilities. Fits nothing; it is the baseline
    every method must beat (the paper's "uncalibrated").
    """

    name = BASELINE
    summary = "top score rescaled to [0, 1] by the declared score range (no fit)"
    is_baseline = True
    tier = 0  # nothing fitted

    def __init__(self):
        pass

    def _fit_class(self, view: ClassView, k: int) -> dict:
        return {}

    def _predict_class(self, state: dict, score: np.ndarray) -> np.ndarray:
        return self._uncalibrated(score)

    def _interval(self, data, level):
        """The point itself: nothing is estimated, so there is no estimation error to bound
        (this says nothing about whether the raw score is calibrated; docs/intervals.md)."""
        conf = self._predict(data)
        return conf, conf.copy()


@register
class Conf1(ScoreCalibrator):
    """Conf1 (paper eq. 1): P(correct | predicted class k) = |TP_k| / |P_k|.

    One constant per class, ignoring the score: the diagonal of the reverse confusion
    matrix.
    """

    name = "conf1"
    summary = "per-class accuracy |TP_k| / |P_k|, ignoring the score (paper eq. 1)"
    step_curve = True
    constant_per_class = True
    # one constant per class matches the class's accuracy in every bin: its ECE is near 0 by
    # construction
    unranked_on = frozenset({"ece1", "ece2"})
    unranked_note = (
        "conf1 is not ranked on ECE1/ECE2: one constant per class equals the class's "
        "accuracy, so its ECE is near 0 by construction while it tells confident from "
        "doubtful predictions apart not at all."
    )

    def __init__(self):
        pass

    @property
    def n_params_(self) -> int:
        return sum(s is not None for s in self.class_state_)

    def _fit_class(self, view: ClassView, k: int) -> dict:
        tp = view.tp.sum()
        return {"conf1": float(tp / (tp + view.fp.sum()))}

    def _load_class_state(self, state: dict) -> dict:
        (c,) = finite_array([state["conf1"]], "conf1")
        if not 0.0 <= c <= 1.0:
            raise ValueError("conf1 must be in [0, 1]")
        return {"conf1": float(c)}

    def _predict_class(self, state: dict, score: np.ndarray) -> np.ndarray:
        return np.full(score.shape, state["conf1"])

    def _interval(self, data, level):
        """Jeffreys interval of the class's accuracy from its TP and FP counts (classes
        never predicted: the uncalibrated score itself)."""
        conf = self._predict(data)
        t, f = self.n_tp_[data.pred], self.n_fp_[data.pred]
        lo, hi = intervals.count_interval(t, t + f, level)
        none = (t + f) == 0
        lo[none], hi[none] = conf[none], conf[none]
        return intervals.include_point(lo, hi, conf)
