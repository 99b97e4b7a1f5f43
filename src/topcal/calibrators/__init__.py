"""Calibration methods. Importing this package registers every method."""

from . import baseline, cumulative, histogram, kde, temperature  # noqa: F401  (registration)
from .base import Calibrator, Curve, ScoreCalibrator
from .registry import available_methods, calibrator, get_class, register

__all__ = [
    "Calibrator",
    "ScoreCalibrator",
    "Curve",
    "available_methods",
    "calibrator",
    "get_class",
    "register",
]
