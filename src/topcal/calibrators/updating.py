"""``update`` and fits from evidence: the checks and the merge, apart from the calibrator
contract.

A model's :meth:`~topcal.calibrators.base.Calibrator.update` reads the new data in any form
it accepts (:func:`merged_evidence`), merges the new :class:`~topcal.evidence.core.Evidence`
with the model's (statistics, label-shift counts in the model's regions, fingerprint of the
rows, one mark per part) and refits from the merged statistics; ``fit(evidence)`` checks
what a fit from statistics needs (:func:`check_fit_evidence`).
"""

from __future__ import annotations

import warnings

from ..evidence.confusion import GridConfusion
from ..data import TopLabelData
from ..errors import DataError, ParameterError, TopcalWarning
from ..evidence.core import Evidence, stats_mark
from ..evidence.fingerprint import MAX_OVERLAP, WARN_OVERLAP, unchecked
from ..io.inputs import as_data
from ..evidence.stats import ScoreStats

__all__ = ["check_fit_evidence", "merged_evidence", "require_stats"]


def require_stats(model):
    """The fitted ``model``'s mergeable statistics (what ``update`` adds to); a clear error
    where it keeps none (a full-vector method, an adapted model, a copy saved without them,
    a temperature model of format 2)."""
    kept = model.evidence_
    if not model._keeps_stats():
        raise ParameterError(model._no_stats_reason())
    if kept.stats is None:
        raise ParameterError(
            f"this {model.name!r} model holds no statistics (it was saved without them, or "
            "by a topcal of model format 2 for the temperature methods); refit it on all "
            "the data once, then update it"
        )
    return kept.stats


def check_fit_evidence(evidence: Evidence):
    """(stats, confusion) of the :class:`~topcal.evidence.core.Evidence` a model is fitted
    from.

    A fit from evidence is ``fit(evidence.stats.to_data())`` keeping the given statistics as
    they are (their grid included), so a later ``update`` adds to exactly what it was fitted
    on. Statistics carry no true classes, so the label-shift counts come in
    ``evidence.confusion``: a :class:`~topcal.evidence.confusion.GridConfusion` counted on
    the same grid gives the model the regions and counts of
    :meth:`~topcal.evidence.confusion.GridConfusion.to_confusion`. Without it the model
    cannot be adapted.
    """
    stats, confusion = evidence.stats, evidence.confusion
    if not isinstance(stats, ScoreStats):
        raise DataError(
            "a fit from statistics needs score counts (ScoreStats), got "
            f"{type(stats).__name__}"
        )
    if confusion is not None:
        if not isinstance(confusion, GridConfusion):
            raise DataError(
                f"confusion must be a GridConfusion, got {type(confusion).__name__}"
            )
        if confusion.grid != stats.grid:
            raise DataError(
                "the confusion counts are not on the statistics' classes, score range and grid"
            )
    return stats, confusion


def merged_evidence(
    model, old, data, y=None, *, classes=None, kind: str = "auto", confusion=None
) -> Evidence:
    """The model's evidence merged with that of the new ``data`` (see
    ``Calibrator.update``); ``old`` is the model's statistics. Warns where the new part's
    statistics equal a part already in."""
    kept = model.evidence_
    current = kept.confusion
    statistics = (hasattr(data, "merge") and hasattr(data, "n_samples")) or isinstance(
        data, Evidence
    )
    if not isinstance(data, (TopLabelData, type(old), Evidence)) and (
        y is not None or not statistics
    ):
        data = as_data(
            data, y, classes=model.classes_ if classes is None else classes, kind=kind
        )
    elif y is not None:
        raise ParameterError(
            "y goes with a score matrix; a TopLabelData or statistics carry their own labels"
        )
    if isinstance(data, TopLabelData):
        if confusion is not None:
            raise ParameterError(
                "confusion is for updates from statistics; a TopLabelData's counts are "
                "taken from its rows"
            )
        data = model._check_compatible(data)
        data.require_labels(f"updating {model.name!r}")
        new = model.evidence_of(data)
    elif isinstance(data, (Evidence, type(old))):
        if isinstance(data, Evidence):
            if confusion is not None:
                raise ParameterError(
                    "give the confusion counts inside the Evidence, not beside it"
                )
            new = data
        else:
            new = Evidence(data, confusion)
        if not isinstance(new.stats, type(old)):
            raise DataError(
                f"{model.name}.update: the evidence holds {type(new.stats).__name__}, this "
                f"model keeps {type(old).__name__}"
            )
        if new.confusion is not None and current is None:
            raise ParameterError(
                f"this {model.name!r} model keeps no confusion counts to add these to"
            )
    else:
        raise DataError(
            f"{model.name}.update expects a TopLabelData or {type(old).__name__} (this "
            f"model's statistics), or an Evidence, got {type(data).__name__}"
        )
    seen = list(kept.marks)
    mark = stats_mark(new.stats)
    _refuse_overlap(model, kept, data, new, mark in seen)
    merged = Evidence(old, current, kept.fingerprint).merge(new)
    # rows seen: old and new (fingerprint unknown once statistics alone came)
    return Evidence(merged.stats, merged.confusion, merged.fingerprint, marks=seen + [mark])


def _refuse_overlap(model, kept, data, new, repeated: bool) -> None:
    """Refuse new rows (``data``, their evidence ``new``) that are mostly rows the model
    already holds, or hold most of them (a superset); warn where many are (``repeated``: the
    same statistics as a part already in)."""
    share = 1.0 if repeated else 0.0
    if isinstance(data, TopLabelData) and (why := unchecked(kept.fingerprint, data)):
        warnings.warn(f"{model.name}.update: {why}", TopcalWarning, stacklevel=4)
    held = 0.0  # the share of the rows the model holds that these rows contain (a superset)
    if isinstance(data, TopLabelData) and kept.fingerprint is not None:
        ov = kept.fingerprint.overlap(data)
        share, held = max(share, ov.of_data), ov.of_fit
    elif kept.fingerprint is not None and new.fingerprint is not None:
        # statistics with their rows' fingerprint (streamed, Dask, evidence_of): the
        # sketches
        share = max(share, kept.fingerprint.shared(new.fingerprint))
    if share >= MAX_OVERLAP or held >= MAX_OVERLAP:
        raise DataError(
            f"{model.name}.update: "
            + (
                "these rows are the same as data already in the model (its fit or an earlier "
                "update, by the fingerprint of their statistics)"
                if repeated
                else f"about {share:.0%} of these rows are rows the model already holds (its fit "
                "or an earlier update, by their fingerprint, in any encoding)"
                if share >= MAX_OVERLAP
                else f"these rows contain about {held:.0%} of the rows the model already holds "
                "(its fit or an earlier update, by their fingerprint: a superset of them)"
            )
            + "; adding them would count them twice: update with rows the model has not seen"
        )
    if share >= WARN_OVERLAP:
        warnings.warn(
            f"{model.name}.update: about {share:.0%} of these rows look like rows the model "
            "already holds (same classes, same score to 6 decimals); if they are, they are "
            "counted twice",
            TopcalWarning,
            stacklevel=4,
        )
