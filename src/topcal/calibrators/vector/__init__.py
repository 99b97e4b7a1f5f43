"""Whole-vector scalings: ``vs`` (ridge vector scaling) and ``sms`` (structured matrix scaling);
docs/vector.md."""

from .calibrator import COV_MAX_PARAMS, StructuredMatrixScaling, VectorScaling

__all__ = ["VectorScaling", "StructuredMatrixScaling", "COV_MAX_PARAMS"]
