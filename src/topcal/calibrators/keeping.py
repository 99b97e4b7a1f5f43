"""The part of the calibrator contract about a fitted model's evidence: what it keeps,
``update``, and the model file.

:class:`EvidenceKeeping` is a base of :class:`~.base.Calibrator`, kept apart from
``base.py``: ``evidence_`` and ``evidence_of``, a fit from evidence, ``update``
(:mod:`.updating` merges, ``_refit`` refits), the statistics a model keeps (``_stats_of``,
``_keeps_stats``) and ``to_dict`` / ``from_dict`` (:mod:`.modelfile`). It uses the
contract's ``fit``, ``_check_fitted``, ``_get_state`` and ``_set_state``, and the
``_evidence`` and ``_keep`` that ``Calibrator`` declares.
"""

from __future__ import annotations

from typing import Any, Self

from .._typing import ArrayLike, PathLike
from ..data import TopLabelData
from ..evidence.core import Evidence
from ..evidence.stats import ScoreStats
from . import fullvector, modelfile, spread, updating
from .registry import fits_from_counts, require_counts

__all__ = ["EvidenceKeeping"]


class EvidenceKeeping:
    """A fitted model's evidence, its update and its model file (a base of ``Calibrator``)."""

    #: Parameters a loaded model file did not name (added to topcal after it was written),
    #: with the value loading gave them: written back left out while they keep that value,
    #: so that a loaded model's dict, and the digest a thresholds file holds of it, are the
    #: file's own.
    _unnamed_params: dict = {}
    #: Entries of the method's state that are evidence (``auto``'s cross-validation table):
    #: the model file keeps them in its ``evidence`` object (:func:`.modelfile.to_dict`).
    _evidence_keys: tuple[str, ...] = ()
    #: The vector map fitted beside the model (its value: fullvector.VectorPredicting).
    _vector: Any

    @property
    def evidence_(self) -> Evidence:
        """What the fitted model knows of its data
        (:class:`~topcal.evidence.core.Evidence`): statistics, label-shift counts, the
        fitting rows' fingerprint; empty parts where the fit kept none."""
        self._check_fitted()
        return self._evidence

    def _keeps_stats(self) -> bool:
        """Whether ``fit`` keeps mergeable statistics (by default
        ``registry.fits_from_counts``)."""
        return fits_from_counts(self)

    def _no_stats_reason(self) -> str:
        """Why a fitted model of this method keeps no statistics
        (``updating.require_stats``)."""
        return (
            f"method {self.name!r} recalibrates the full score vector, which has no mergeable "
            "statistics; refit it on all the data (old and new) instead of updating"
        )

    def _stats_of(self, data: TopLabelData):
        """The mergeable statistics of labelled ``data`` in the form this model keeps (what
        ``update`` adds): :class:`~topcal.evidence.stats.ScoreStats` on the model's score
        cells (the temperature methods that can update keep loss tables)."""
        old = self._evidence.stats
        return (
            ScoreStats.from_data(data, n_cells=old.n_cells)
            if old is not None
            else ScoreStats.from_data(data)
        )

    def evidence_of(self, data: TopLabelData) -> Evidence:
        """The evidence of labelled ``data`` in this model's form (what ``update`` adds):
        its kind of statistics and the true classes counted in its regions. Raises where the
        model cannot be updated (it keeps no statistics)."""
        updating.require_stats(self)
        kept = self._evidence
        # a fitted model's confusion counts are ConfusionStats (GridConfusion: a fit in
        # progress)
        return Evidence.for_update(
            data,
            stats_of=self._stats_of,
            regions=kept.confusion,  # type: ignore[arg-type]  # a fitted model's: ConfusionStats
            like=kept.fingerprint,
        )

    def _fit_evidence(self, evidence: Evidence, keep: str) -> Self:
        """``fit(evidence)``: see :func:`.updating.check_fit_evidence`."""
        require_counts(self, "fit it in memory on the rows themselves")
        stats, confusion = updating.check_fit_evidence(evidence)
        self.fit(stats.to_data(), keep="model" if keep == "evidence" else keep)
        if keep == "evidence":  # the evidence itself, not its re-count on the default grid
            self._evidence = Evidence(
                stats if self._keeps_stats() else None,
                None if confusion is None else confusion.to_confusion(),
                evidence.fingerprint,
            )
            self._keep = keep
        return self

    def update(
        self,
        data: TopLabelData | Evidence | ScoreStats | ArrayLike | PathLike,
        y: ArrayLike | None = None,
        *,
        classes: ArrayLike | None = None,
        kind: str = "auto",
        confusion: Any = None,
    ) -> Self:
        """Add labelled data and refit: merge the evidence, refit from it
        (:mod:`.updating`).

        ``data``, ``y``, ``classes`` and ``kind`` as in :meth:`fit` (a score matrix's
        columns are the fitted classes, in order, unless ``classes`` names them, as in
        :meth:`predict`); or ``data`` is an :class:`~topcal.evidence.core.Evidence`
        (:meth:`evidence_of` of each chunk or partition, merged), or bare statistics of this
        model's kind (with their ``confusion`` counts in this model's regions, if any). The
        result is the model ``fit(ScoreStats.merge_all(parts).to_data())`` gives on all the
        parts, whatever the split and the order of updates (see
        :mod:`topcal.evidence.stats`; for ``sts``/``csts``, the fit on all the data to the
        tables' tolerance, ``docs/scale.md``). The label-shift counts are merged too, in the
        model's own score regions; where the new evidence has none (binned data, statistics
        alone) the model drops them, and ``adapt`` asks for a refit.

        Returns
        -------
        self
        """
        old = updating.require_stats(self)
        merged = updating.merged_evidence(
            self, old, data, y, classes=classes, kind=kind, confusion=confusion
        )
        vector = self._vector  # statistics hold no vectors: the first fit's map is kept
        self._refit(merged.stats)
        self._evidence, self._vector = merged, vector
        return self

    def _refit(self, stats) -> None:
        """Refit from merged statistics (``update``; Auto overrides this to keep its
        choice)."""
        self.fit(stats.to_data(), keep="model")

    @classmethod
    def _stats_from_dict(cls, d: dict, classes: tuple, score_range: tuple):
        """The statistics of a model file (:meth:`_stats_of`'s kind)."""
        return ScoreStats.from_dict(d, classes, score_range)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict: method, params, classes, score range, fitted state and the
        model's evidence, each piece where kept (:func:`.modelfile.to_dict`)."""
        self._check_fitted()
        d = modelfile.to_dict(self, self._get_state(), self._evidence, self._spread)
        if self._vector is not None:  # the vector map fitted beside the model (fullvector.py)
            d["vector"] = self._vector.to_dict()
        return d

    def _file_params(self) -> dict:
        """The parameters a model file holds: :meth:`get_params` less those a loaded file
        did not name and that still have the value loading gave them."""
        return {
            k: v
            for k, v in self.get_params().items()
            if not (k in self._unnamed_params and v is self._unnamed_params[k])
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Self:
        """Rebuild a fitted calibrator from :meth:`to_dict` output
        (:func:`.modelfile.from_dict`).

        Raises ModelFileError for anything missing or inconsistent.
        """
        return modelfile.from_dict(cls, d)

    def _load(self, d: dict, state: dict, classes: tuple, score_range: tuple, n_tp, n_fp) -> None:
        """Set the fitted attributes of a model file's parts (:func:`.modelfile.from_dict`;
        ``state`` with the entries of ``_evidence_keys`` put back)."""
        self.classes_, self.score_range_, self.n_tp_, self.n_fp_ = (
            classes,
            score_range,
            n_tp,
            n_fp,
        )
        named = d["params"]
        self._unnamed_params = {k: v for k, v in self.get_params().items() if k not in named}
        self._set_state(state)
        evidence = d["evidence"]
        self._spread = spread.check(evidence.get("spread"), len(classes))
        self._vector = fullvector.load_map(d.get("vector"), classes)
        self._evidence = Evidence.from_dict(
            evidence, classes, lambda s: type(self)._stats_from_dict(s, classes, score_range)
        )
