"""Calibration methods. Importing this package registers every method."""

from . import counts, kde, temperature, vector  # noqa: F401  (registration)
from .pooled import hierarchical, methods  # noqa: F401  (registration; they use the methods above)
from .select import auto  # noqa: F401,I001  (registered last: it chooses among the others)
from .base import Calibrator, Curve
from .score import ScoreCalibrator
from .registry import available_methods, calibrator, get_class, paper_calibrator, register

__all__ = [
    "Calibrator",
    "ScoreCalibrator",
    "Curve",
    "available_methods",
    "calibrator",
    "get_class",
    "register",
    "paper_calibrator",
]
