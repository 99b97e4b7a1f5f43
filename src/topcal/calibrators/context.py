"""What a caller tells a fit beyond its data, what to keep and where to start.

A fit computes from its arguments alone. What a caller wants back from a fit besides the model
travels in one :class:`FitContext` passed to ``fit(..., context=...)``: today the list where a
fit that cross-validates (``auto``) appends the cross-validation runs it makes, so that the
report reuses ``auto``'s out-of-fold confidences of its candidates instead of cross-fitting them
again. No thread-local or module-level state is read instead.
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["FitContext"]


@dataclass
class FitContext:
    """Explicit context of one fit.

    Parameters
    ----------
    runs : list
        Where a fit that cross-validates appends each
        :class:`~topcal.calibrators.select.crossfit.CrossFit` it runs, in order (``auto``: its
        first look's split, then its K folds where they ran). Fits that do not cross-validate
        leave it alone.
    """

    runs: list = field(default_factory=list)
