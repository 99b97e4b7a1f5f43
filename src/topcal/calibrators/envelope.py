"""The envelope of a fitted model: what it carries around its method (see docs/architecture.md).

:class:`Envelope` is the part of every calibrator that is not the method
itself: its evidence (the mergeable statistics, the label-shift counts and
the fitted rows' fingerprint, counted lazily from a compact copy of the rows,
:class:`~topcal.evidence.Evidence`), ``update`` (merge evidence, refit),
its description as text, and its persistence as a JSON-ready dict. The
method contract (parameters, ``fit``, ``predict``, ``describe``) is
:class:`~topcal.calibrators.base.Calibrator`, which subclasses it.
"""

from __future__ import annotations

import json
import warnings
from typing import Any

import numpy as np

from ..confusion import ConfusionStats, GridConfusion
from ..data import TopLabelData
from ..errors import DataError, ModelFileError, ParameterError, TopcalWarning
from ..evidence import Evidence
from ..fingerprint import Fingerprint
from ..inputs import as_data
from ..stats import ScoreStats

__all__ = ["Envelope", "fingerprint"]


def fingerprint(stats) -> str:
    """A short hash of a data part's mergeable statistics: equal rows give equal statistics, hence equal
    fingerprints, whichever path (in memory, chunks, Dask) counted them; ``update`` warns on a repeat."""
    import hashlib

    return hashlib.sha256(json.dumps(stats.to_dict(), sort_keys=True).encode()).hexdigest()[:16]


class Envelope:
    """Evidence, update, text description and persistence of a fitted calibrator (mixin of ``Calibrator``)."""

    @property
    def confusion_(self):
        rows = self.__dict__.pop("_confusion_rows", None)
        if rows is not None:
            self.__dict__["_confusion"] = ConfusionStats.from_data(rows.data())
        return self.__dict__.get("_confusion")

    @confusion_.setter
    def confusion_(self, value) -> None:
        self.__dict__.pop("_confusion_rows", None)
        self.__dict__["_confusion"] = value

    @property
    def fingerprints_(self) -> list:
        """One mark per data part behind the statistics (the fit, each update), to warn on a repeated part."""
        marks = self.__dict__.get("_parts")
        if marks is None:
            stats = self.stats_ if "_stats" in self.__dict__ or "_stats_rows" in self.__dict__ else None
            marks = [] if stats is None else [fingerprint(stats)]
            self.__dict__["_parts"] = marks
        return marks

    @fingerprints_.setter
    def fingerprints_(self, value) -> None:
        self.__dict__["_parts"] = value

    @property
    def stats_(self):
        rows = self.__dict__.pop("_stats_rows", None)
        if rows is not None:
            self.__dict__["_stats"] = ScoreStats.from_data(rows.data())
        return self.__dict__.get("_stats")

    @stats_.setter
    def stats_(self, value) -> None:
        self.__dict__.pop("_stats_rows", None)
        self.__dict__["_stats"] = value

    # ------------------------------------------------------------- update
    def _keeps_stats(self) -> bool:
        """Whether ``fit`` keeps mergeable statistics (all methods but the full-vector ones by default)."""
        return not self.needs_full

    def _no_stats_reason(self) -> str:
        """Why a fitted model of this method keeps no statistics (the message of :meth:`require_stats`)."""
        return (f"method {self.name!r} recalibrates the full score vector, which has no mergeable "
                "statistics; refit it on all the data (old and new) instead of updating")

    def require_stats(self):
        """The model's mergeable statistics; a clear error where it has none."""
        self._check_fitted()
        if not self._keeps_stats():
            raise ParameterError(self._no_stats_reason())
        if getattr(self, "stats_", None) is None:
            raise ParameterError(
                f"this {self.name!r} model holds no statistics (it was saved by a topcal before it kept "
                "them: model format 1, or format 2 for the temperature methods); refit it on all the data "
                "once, then update it"
            )
        return self.stats_

    def stats_of(self, data: TopLabelData):
        """The mergeable statistics of labelled ``data`` in the form this model keeps (what ``update`` adds).

        :class:`~topcal.stats.ScoreStats` on the model's score cells (the score
        methods); the temperature methods that can update keep loss tables.
        """
        old = getattr(self, "stats_", None)
        return ScoreStats.from_data(data, n_cells=old.n_cells) if old is not None else ScoreStats.from_data(data)

    @property
    def evidence_(self) -> Evidence:
        """What the fitted model knows of its data, in mergeable form (:class:`~topcal.evidence.Evidence`)."""
        self._check_fitted()
        return Evidence(self.require_stats(), getattr(self, "confusion_", None))

    def fit_evidence(self, evidence: Evidence) -> "Calibrator":
        """Fit from :class:`~topcal.evidence.Evidence` (streamed and Dask fits): ``fit(evidence.stats.to_data())``.

        The model keeps the given statistics as they are (their grid
        included), so a later ``update`` adds to exactly what it was fitted
        on. Statistics carry no true classes, so the label-shift counts come
        in ``evidence.confusion``: a :class:`~topcal.confusion.GridConfusion`
        counted on the same grid gives the model the regions and counts of
        :meth:`~topcal.confusion.GridConfusion.to_confusion` (regions from the
        FP scores at their cell midpoints). Without it the model cannot be
        adapted.

        Returns
        -------
        self
        """
        if not isinstance(evidence, Evidence):
            raise DataError(f"fit_evidence expects an Evidence, got {type(evidence).__name__}")
        stats, confusion = evidence.stats, evidence.confusion
        if not isinstance(stats, ScoreStats):
            raise DataError(f"a fit from statistics needs score counts (ScoreStats), got {type(stats).__name__}")
        if confusion is not None:
            if not isinstance(confusion, GridConfusion):
                raise DataError(f"confusion must be a GridConfusion, got {type(confusion).__name__}")
            if (confusion.classes, confusion.score_range, confusion.n_cells) \
                    != (stats.classes, stats.score_range, stats.n_cells):
                raise DataError("the confusion counts are not on the statistics' classes, score range and grid")
        self.fit(stats.to_data())
        if self._keeps_stats() and not self._is_reference:
            self.stats_ = stats  # the evidence itself, not its re-count on the default grid
        self.fingerprint_ = evidence.fingerprint  # the rows' own, not the statistics' cells
        self.confusion_ = None if confusion is None else confusion.to_confusion()
        return self

    def fit_stats(self, stats, confusion=None) -> "Calibrator":
        """``fit_evidence(Evidence(stats, confusion))``: fit from mergeable statistics."""
        return self.fit_evidence(Evidence(stats, confusion))

    def evidence_of(self, data: TopLabelData) -> Evidence:
        """The evidence of labelled ``data`` in this model's form (what ``update`` adds): its kind of
        statistics (:meth:`stats_of`) and the true classes counted in its regions."""
        return Evidence.for_update(data, stats_of=self.stats_of, regions=getattr(self, "confusion_", None))

    def update(self, data, y=None, *, classes=None, kind: str = "auto", confusion=None) -> "Calibrator":
        """Add labelled data and refit: merge the evidence, refit from it.

        ``data``, ``y``, ``classes`` and ``kind`` as in :meth:`fit` (a score
        matrix's columns are the fitted classes, in order, unless ``classes``
        names them, as in :meth:`predict`); or ``data`` is an :class:`~topcal.evidence.Evidence`
        (:meth:`evidence_of` of each chunk or partition, merged), or bare
        statistics from :meth:`stats_of` (with their ``confusion`` counts in
        this model's regions, if any). The model's stored statistics and
        those of ``data`` are merged and the method is refitted from them,
        with the same parameters: the result is the model
        ``fit(ScoreStats.merge_all(parts).to_data())`` gives on all the
        parts, whatever the split and the order of updates (see
        :mod:`topcal.stats` for how this relates to a fit on raw scores; for
        ``sts``/``csts``, the fit on all the data to the tables' tolerance,
        ``docs/scale.md``). The label-shift counts are merged too, in the
        model's own score regions, so they add up to those of all the data;
        where the new evidence has none (binned data, statistics alone) the
        model drops them, and ``adapt`` asks for a refit.

        Returns
        -------
        self
        """
        old = self.require_stats()
        current = getattr(self, "confusion_", None)
        statistics = (hasattr(data, "merge") and hasattr(data, "n_samples")) or isinstance(data, Evidence)
        if not isinstance(data, (TopLabelData, type(old), Evidence)) and (y is not None or not statistics):
            data = as_data(data, y, classes=self.classes_ if classes is None else classes, kind=kind)
        elif y is not None:
            raise ParameterError("y goes with a score matrix; a TopLabelData or statistics carry their own labels")
        if isinstance(data, TopLabelData):
            if confusion is not None:
                raise ParameterError("confusion is for updates from statistics; a TopLabelData's counts are "
                                     "taken from its rows")
            data = self._check_compatible(data)
            data.require_labels(f"updating {self.name!r}")
            new = self.evidence_of(data)
        elif isinstance(data, Evidence) or isinstance(data, type(old)):
            if isinstance(data, Evidence):
                if confusion is not None:
                    raise ParameterError("give the confusion counts inside the Evidence, not beside it")
                new = data
            else:
                new = Evidence(data, confusion)
            if not isinstance(new.stats, type(old)):
                raise DataError(f"{self.name}.update: the evidence holds {type(new.stats).__name__}, this model "
                                f"keeps {type(old).__name__}")
            if new.confusion is not None and current is None:
                raise ParameterError(f"this {self.name!r} model keeps no confusion counts to add these to")
        else:
            raise DataError(
                f"{self.name}.update expects a TopLabelData or {type(old).__name__} (this model's statistics), or an "
                f"Evidence, got {type(data).__name__}"
            )
        seen = list(self.fingerprints_)
        mark = fingerprint(new.stats)
        if mark in seen:
            warnings.warn(
                f"{self.name}.update: these rows are the same as data already in the model (its fit or an earlier "
                "update, by the fingerprint of their statistics); they are counted twice",
                TopcalWarning,
                stacklevel=2,
            )
        merged = Evidence(old, current, getattr(self, "fingerprint_", None)).merge(new)
        self._refit(merged.stats)
        self.confusion_ = merged.confusion
        self.fingerprint_ = merged.fingerprint  # rows seen: old and new (unknown once statistics alone came)
        self.fingerprints_ = seen + [mark]
        return self

    def _refit(self, stats) -> None:
        """Refit from merged statistics (Auto overrides this to keep its choice)."""
        self.fit(stats.to_data())
        self.stats_ = stats

    @classmethod
    def _stats_from_dict(cls, d: dict, classes: tuple, score_range: tuple):
        """The statistics of a model file (:meth:`stats_of`'s kind)."""
        return ScoreStats.from_dict(d, classes, score_range)

    def _describe_head(self, d: dict) -> list[str]:
        """Lines :meth:`describe_text` prints after the method's name and parameters (a wrapper's summary)."""
        return []

    def _describe_body(self, d: dict) -> dict:
        """The description whose method-wide and per-class entries :meth:`describe_text` prints."""
        return d

    #: The level of the interval widths ``describe`` shows.
    DESCRIBE_LEVEL: ClassVar[float] = 0.9

    def describe_text(self) -> str:
        """:meth:`describe` as the text ``topcal describe`` prints (``--json`` prints the dict)."""
        d = self.describe()
        out: list[str] = []
        out.append(f"method: {d['method']}")
        out.append(f"params: {json.dumps(d['params'])}")
        out.append(f"score range: {d['score_range']}")
        out.extend(self._describe_head(d))
        d = self._describe_body(d)
        for key, val in d.items():  # method-wide results, e.g. a joint fit's loss and AIC
            if isinstance(val, dict) and key not in ("params", "classes"):
                out.append(f"{key}: " + ", ".join(f"{k}={v:.6g}" if isinstance(v, float) else f"{k}={v}"
                                                  for k, v in val.items()))
        for name, info in d["classes"].items():
            out.append(f"\n[{name}]  TP={info['n_tp']:g}  FP={info['n_fp']:g}")
            for key, val in info.items():
                if key in ("n_tp", "n_fp"):
                    continue
                if isinstance(val, list) and len(val) > 12:
                    shown = ", ".join(f"{v:.4g}" if isinstance(v, float) else str(v) for v in val[:12])
                    val = f"[{shown}, ...] ({len(val)} values)"
                elif isinstance(val, list):
                    val = "[" + ", ".join(f"{v:.4g}" if isinstance(v, float) else str(v) for v in val) + "]"
                elif isinstance(val, float):
                    val = f"{val:.6g}"
                out.append(f"  {key}: {val}")
        return "\n".join(out)

    # -------------------------------------------------------- persistence
    def to_dict(self, *, stats: bool = True) -> dict[str, Any]:
        """JSON-ready dict: method, params, classes, score range, fitted state and,
        with ``stats`` (and where the model has them), the mergeable statistics."""
        self._check_fitted()
        d = {
            "method": self.name,
            "params": self.get_params(),
            "classes": list(self.classes_),
            "score_range": [float(v) for v in self.score_range_],
            "n_tp": [float(v) for v in self.n_tp_],
            "n_fp": [float(v) for v in self.n_fp_],
            "state": self._get_state(),
        }
        if getattr(self, "confusion_", None) is not None:  # optional: files without it still load
            d["confusion"] = self.confusion_.to_dict()
        if stats and getattr(self, "stats_", None) is not None:
            d["stats"] = self.stats_.to_dict()
            if self.fingerprints_:  # the parts behind the statistics (update warns on repeats)
                d["fingerprints"] = list(self.fingerprints_)
        if getattr(self, "fingerprint_", None) is not None:  # optional: files without it still load
            d["fingerprint"] = self.fingerprint_.to_dict()
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Calibrator":
        """Rebuild a fitted calibrator from :meth:`to_dict` output.

        Raises ModelFileError for anything missing or inconsistent.
        """
        try:
            params = dict(d["params"])
            if "shrinkage" in cls._param_names():
                # files written before shrinkage existed hold the paper's estimators (m = 0)
                params.setdefault("shrinkage", 0)
            obj = cls(**params)
            obj._validate_params()
            classes = tuple(str(c) for c in d["classes"])
            lo, hi = (float(v) for v in d["score_range"])
            n_tp = np.asarray(d["n_tp"], dtype=np.float64)
            n_fp = np.asarray(d["n_fp"], dtype=np.float64)
            if not (lo < hi) or n_tp.shape != (len(classes),) or n_fp.shape != (len(classes),):
                raise ValueError("classes, score_range and counts are inconsistent")
            obj.classes_ = classes
            obj.score_range_ = (lo, hi)
            obj.n_tp_ = n_tp
            obj.n_fp_ = n_fp
            conf = d.get("confusion")
            obj.confusion_ = None if conf is None else ConfusionStats.from_dict(conf, classes)
            obj._set_state(d["state"])
            obj.stats_ = cls._stats_from_dict(d["stats"], classes, (lo, hi)) if d.get("stats") is not None else None
            fp = d.get("fingerprint")
            obj.fingerprint_ = None if fp is None else Fingerprint.from_dict(fp)
            marks = d.get("fingerprints", [])  # files before fingerprints: none
            if not isinstance(marks, list) or not all(isinstance(m, str) for m in marks):
                raise ValueError("fingerprints must be a list of strings")
            obj.fingerprints_ = marks
        except ModelFileError:
            raise
        except (KeyError, TypeError, ValueError, IndexError) as exc:
            msg = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise ModelFileError(
                f"model for method {cls.name!r} is malformed ({msg}); refit and save it again"
            ) from None
        return obj
