"""What a caller tells a fit beyond its data, what to keep and where to start.

A fit computes from its arguments alone. What a caller knows of a fit beyond its data
travels in one :class:`FitContext` passed to ``fit(..., context=...)``: the list where a fit
that cross-validates (``auto``) appends the cross-validation runs it makes (the report
reuses ``auto``'s out-of-fold confidences of its candidates instead of cross-fitting them
again); whether the fit is a cross-validation fold's; and whether its warm start was fitted
on these very rows (``auto``'s final fit then takes the all-data fit's optimum). No
thread-local state or object identity is read instead.
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
        :class:`~topcal.calibrators.select.crossfit.CrossFit` it runs, in order (``auto``:
        its first look's split, then its K folds where they ran). Fits that do not
        cross-validate leave it alone.
    fold : bool, default False
        The fit is a cross-validation fold's (``cross_fit`` says so): scored on its fold and
        dropped, so a method may stop short of its optimum's last digits where it starts
        from a fit on at least as many samples (docs/vector.md#fold-fits).
    same_rows : bool, default False
        The fit's warm start (``fit(..., warm=...)``) was fitted on these very rows,
        unchanged (``auto``'s final fit after its K folds on all its rows): a method may
        take the warm fit's optimum as it is instead of solving again (the vector maps:
        docs/vector.md#same-rows). Only the caller knows it; nothing checks it.
    """

    runs: list = field(default_factory=list)
    fold: bool = False
    same_rows: bool = False
