"""Whole-vector scalings: ``vs`` (ridge vector scaling) and ``sms`` (structured matrix
scaling), ``vs-hier-platt`` and ``sms-pooled-beta`` (a top-label curve on their confidence);
docs/vector.md."""

from .calibrator import COV_MAX_PARAMS, StructuredMatrixScaling, VectorScaling
from .corrected import StructuredMatrixScalingBeta, VectorScalingHierPlatt

__all__ = [
    "VectorScaling",
    "StructuredMatrixScaling",
    "StructuredMatrixScalingBeta",
    "VectorScalingHierPlatt",
    "COV_MAX_PARAMS",
]
