"""The count family: functions of per-class TP/FP counts along the score.

``histogram.py`` (the paper's per-class histogram), ``cumulative.py`` (cumulative confidence
with cut-offs: Cum, Cum*, cum-opt) and ``baseline.py`` (the uncalibrated score and the
constant per-class confidence conf1).
"""

from .baseline import Conf1, Uncalibrated
from .cumulative import Cumulative, CumulativeMedian, CumulativeOptimal
from .histogram import Histogram

__all__ = [
    "Histogram",
    "Cumulative",
    "CumulativeMedian",
    "CumulativeOptimal",
    "Uncalibrated",
    "Conf1",
]
