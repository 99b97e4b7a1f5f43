"""The calibrator contract shared by every method.

* Parameters are keyword-only ``__init__`` arguments, stored untouched and
  checked in ``fit`` against ``_parameter_constraints``.
* ``fit(data)`` returns ``self`` and sets attributes ending in ``_``.
* ``predict(data)`` returns the calibrated confidence of each row: the
  probability that the row's predicted class is right.
* ``data`` is a :class:`TopLabelData` or anything :func:`topcal.inputs.as_data`
  reads: ``fit(scores, y)`` / ``predict(scores)`` with a 2-d array of
  probabilities or logits (NumPy, torch on the CPU, ...), a DataFrame with
  ``p_<class>`` columns, or a data file.
* ``get_params(deep=True)`` / ``set_params(**params)`` follow scikit-learn,
  so ``sklearn.base.clone`` copies an unfitted calibrator.
* ``describe()`` returns the fitted parameters per class (JSON-ready);
  ``to_dict()`` / ``from_dict()`` (and :mod:`topcal.persist`) save and load.

Calibration is always per predicted class: class k's function is fitted on
the positives of k (the rows with k(X) = k) and nothing else.

:class:`ScoreCalibrator` is the base of methods whose confidence is a
function Conf_k(S) of the top score alone (histogram, cumulative, kernel
density); they fit class by class from the class's TP/FP scores and weights
and expose ``curve(k)``.

Size: the whole contract in one place: parameters and their checks, per-class fitting, the
shrinkage step, state persistence, and the statistics and confusion counts every model carries.
"""

from __future__ import annotations

import inspect
import json
import warnings
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from .._params import validate_params
from ..confusion import ConfusionStats, GridConfusion
from ..data import ClassView, TopLabelData, preview, rows_by_class
from ..evidence import Evidence
from ..fingerprint import Fingerprint
from ..errors import DataError, DegenerateClassWarning, ModelFileError, NotFittedError, ParameterError, TopcalError
from ..inputs import as_data
from ..stats import ScoreStats
from . import intervals
from . import shrinkage as shr
from ._fit_rows import FitRows

__all__ = ["Calibrator", "ScoreCalibrator", "Curve", "to_jsonable", "finite_array", "set_html_renderer", "register_hook"]

#: Conveniences on a fitted calibrator whose code lives in higher layers
#: (docs/architecture.md): "save" (topcal.persist), "adapt"
#: (topcal.labelshift) and "html" (the Jupyter view, topcal.api). Each of
#: those modules registers its function here when imported; ``import topcal``
#: imports all three, so calibrators never import upward.
_HOOKS: dict = {"save": None, "adapt": None, "html": None}


def register_hook(name: str, func) -> None:
    """Register ``func`` for the calibrator convenience ``name`` ("save", "adapt" or "html")."""
    if name not in _HOOKS:
        raise ParameterError(f"unknown calibrator hook {name!r}; options are {', '.join(_HOOKS)}")
    _HOOKS[name] = func


def _hook(name: str):
    func = _HOOKS[name]
    if func is None:  # only when a module was imported without the topcal package around it
        raise TopcalError(f"Calibrator.{name} needs 'import topcal' first")
    return func


def set_html_renderer(func) -> None:
    """Register ``func(calibrator) -> str``, the HTML Jupyter shows for a fitted calibrator."""
    register_hook("html", func)


@dataclass(frozen=True)
class Curve:
    """A class's calibration function sampled on a score grid.

    Attributes
    ----------
    class_name : str
    score : ndarray, shape (m,)
        Scores on the data's declared scale.
    confidence : ndarray, shape (m,)
        Conf_k(score).
    support : (float, float) or None
        Lowest and highest score of the class's positives in the fitting
        data: outside it the curve is extrapolated (plots shade it). None
        when the class had no positives.
    """

    class_name: str
    score: np.ndarray
    confidence: np.ndarray
    support: tuple[float, float] | None


class Calibrator:
    """Base class of all calibrators. Subclasses set ``name`` and implement
    ``_fit``, ``_predict``, ``_get_state`` and ``_set_state``."""

    #: Registry key, also the ``method`` field of saved models.
    name: ClassVar[str] = ""
    #: One-line summary for ``topcal methods`` and docs.
    summary: ClassVar[str] = ""
    #: Whether the method needs the full score vector Y(X).
    needs_full: ClassVar[bool] = False
    #: Parameter name -> constraint (see :mod:`topcal._params`).
    _parameter_constraints: ClassVar[dict] = {}
    #: True on the pooled reference a shrunk model fits (``_fit_shrinkage``): its fit skips
    #: the mergeable statistics, a pass over all rows that nothing reads.
    _is_reference: bool = False

    # ------------------------------------------------------------- params
    @classmethod
    def _param_names(cls) -> list[str]:
        sig = inspect.signature(cls.__init__)
        return [p.name for p in sig.parameters.values() if p.name != "self"]

    def get_params(self, deep: bool = True) -> dict[str, Any]:
        """The constructor parameters, as given (``deep`` is accepted for
        scikit-learn; calibrators hold no nested estimators)."""
        return {k: getattr(self, k) for k in self._param_names()}

    @classmethod
    def check_param_names(cls, params) -> None:
        """Raise ParameterError naming any key of ``params`` that is not a constructor parameter."""
        allowed = cls._param_names()
        unknown = sorted(set(params) - set(allowed))
        if unknown:
            opts = ", ".join(allowed) if allowed else "none"
            raise ParameterError(
                f"method {cls.name!r} has no parameter(s) {', '.join(map(repr, unknown))}; its parameters are: {opts}"
            )

    def set_params(self, **params) -> "Calibrator":
        """Set constructor parameters (values checked at the next ``fit``); returns self."""
        self.check_param_names(params)
        for k, v in params.items():
            setattr(self, k, v)
        return self

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.get_params().items())
        return f"{type(self).__name__}({args})"

    def __sklearn_tags__(self):
        """scikit-learn's estimator tags (asked only by scikit-learn, e.g. a
        Pipeline whose last step is a calibrator): fit needs labels."""
        from sklearn.utils import Tags, TargetTags

        return Tags(estimator_type=None, target_tags=TargetTags(required=True))

    def _repr_html_(self) -> str | None:
        """Jupyter's rich display: the per-class curves of a fitted calibrator
        (None, i.e. the plain repr, while unfitted)."""
        if not hasattr(self, "classes_") or _HOOKS["html"] is None:
            return None
        return _HOOKS["html"](self)

    def _validate_params(self) -> None:
        validate_params(self.name, self._parameter_constraints, self.get_params())

    # ---------------------------------------------------------------- fit
    def fit(self, data, y=None, *, classes=None, kind: str = "auto") -> "Calibrator":
        """Fit one calibration function per predicted class on labelled ``data``.

        Parameters
        ----------
        data : TopLabelData, array-like of shape (n, K), DataFrame or path
            The labelled data, or a classifier's scores (probabilities or
            logits; NumPy, torch on the CPU, anything with ``__array__``).
        y : array-like of shape (n,), optional
            True classes (names or column indices) when ``data`` is scores.
        classes : sequence of str, optional
            Names of the K score columns (default "0".."K-1", or the sorted
            distinct names in ``y``).
        kind : {"auto", "probs", "logits"}, default "auto"
            What the score matrix holds (see :mod:`topcal.inputs`).

        Returns
        -------
        self
        """
        self._validate_params()
        data = as_data(data, y, classes=classes, kind=kind)
        data.require_labels(f"fitting {self.name!r}")
        self._check_data(data)
        self.classes_ = data.classes
        self.score_range_ = data.score_range
        tp, fp = data.class_counts()
        self.n_tp_ = tp
        self.n_fp_ = fp
        # per predicted class and score region, the true classes behind its rows: what label-shift
        # adaptation needs (None for binned data); counted on first use from a compact copy of the rows
        rows = FitRows.of(data)
        self.confusion_ = ConfusionStats.from_data(data) if rows is None else None
        self.__dict__["_confusion_rows"] = rows
        empty = [c for c, n in zip(data.classes, tp + fp) if n == 0]
        if empty:
            warnings.warn(
                f"{self.name}: {'class' if len(empty) == 1 else 'classes'} {preview(empty)} "
                f"{'is' if len(empty) == 1 else 'are'} never predicted in the fitting data; "
                "their confidence falls back to the uncalibrated score",
                DegenerateClassWarning,
                stacklevel=2,
            )
        self.stats_ = None
        # what the model remembers of its fitting rows, so that a guarantee is never computed on them
        # (topcal.thresholds); a fit from statistics (fit_stats) has no rows and keeps none
        self.fingerprint_ = Fingerprint.of(data)
        self._fit(data)
        # the mergeable statistics that let update() refit on old + new data; a shrinkage
        # reference keeps none (it is saved without them and refitted, not updated, with its model).
        # Score counts are counted on first use from the same copy of the rows as the confusion counts.
        keeps = self._keeps_stats() and not self._is_reference
        lazy = keeps and rows is not None and type(self).stats_of is Calibrator.stats_of
        self.stats_ = self.stats_of(data) if keeps and not lazy else None
        self.__dict__["_stats_rows"] = rows if lazy else None
        return self

    # The two counts above, made when first read (saving, update, adapt, describe). Setting
    # either replaces it (and forgets the rows it would have been counted from).
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
    def stats_(self):
        rows = self.__dict__.pop("_stats_rows", None)
        if rows is not None:
            self.__dict__["_stats"] = ScoreStats.from_data(rows.data())
        return self.__dict__.get("_stats")

    @stats_.setter
    def stats_(self, value) -> None:
        self.__dict__.pop("_stats_rows", None)
        self.__dict__["_stats"] = value

    def _fit(self, data: TopLabelData) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    @property
    def has_curve(self) -> bool:
        """Whether the fitted confidence is a function of (class, top score) alone, so ``curve`` works."""
        return not self.needs_full

    #: full-vector methods: the top-score method to suggest for data without vectors
    _full_alternative: ClassVar[str | None] = None

    def _check_data(self, data: TopLabelData) -> None:
        """Checks of the data every ``fit`` and ``predict`` runs once: a full-vector method
        needs the full score vector over at least 2 classes. Subclasses may add their own."""
        if not self.needs_full:
            return
        alt = self._full_alternative
        data.require_full(f"method {self.name!r}", None if alt is None else (
            f"use the binary variant {alt!r} (temperature on the normalised top score) or a score-based "
            "method (hist, ...)"))
        if data.n_classes < 2:
            raise DataError(
                f"method {self.name!r} needs at least 2 classes in the score vector, got {data.n_classes}"
                + ("" if alt is None else f"; use {alt!r} on the top score instead")
            )

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
        self.fingerprint_ = None
        self.confusion_ = None if confusion is None else confusion.to_confusion()
        return self

    def fit_stats(self, stats, confusion=None) -> "Calibrator":
        """``fit_evidence(Evidence(stats, confusion))``: fit from mergeable statistics."""
        return self.fit_evidence(Evidence(stats, confusion))

    def evidence_of(self, data: TopLabelData) -> Evidence:
        """The evidence of labelled ``data`` in this model's form (what ``update`` adds): its kind of
        statistics (:meth:`stats_of`) and the true classes counted in its regions."""
        return Evidence.for_update(data, stats_of=self.stats_of, regions=getattr(self, "confusion_", None))

    def update(self, data, *, confusion=None) -> "Calibrator":
        """Add labelled data and refit: merge the evidence, refit from it.

        ``data`` is a TopLabelData, an :class:`~topcal.evidence.Evidence`
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
        before = getattr(self, "fingerprint_", None)
        merged = Evidence(old, current).merge(new)
        self._refit(merged.stats)
        self.confusion_ = merged.confusion
        # rows seen: the old ones and these (statistics bring no rows: then it is unknown)
        self.fingerprint_ = (before.merge(Fingerprint.of(data))
                             if before is not None and isinstance(data, TopLabelData) else None)
        return self

    def _refit(self, stats) -> None:
        """Refit from merged statistics (Auto overrides this to keep its choice)."""
        self.fit(stats.to_data())
        self.stats_ = stats

    @classmethod
    def _stats_from_dict(cls, d: dict, classes: tuple, score_range: tuple):
        """The statistics of a model file (:meth:`stats_of`'s kind)."""
        return ScoreStats.from_dict(d, classes, score_range)

    # ------------------------------------------------------------ predict
    def _class_index(self, k) -> int:
        """Index of class ``k`` (an index or a name) in ``classes_``."""
        if isinstance(k, (int, np.integer)) and not isinstance(k, bool):
            if 0 <= k < len(self.classes_):
                return int(k)
        elif str(k) in self.classes_:
            return self.classes_.index(str(k))
        raise TopcalError(f"unknown class {k!r}; choose one of {list(self.classes_)} or an index 0..{len(self.classes_) - 1}")

    def _check_fitted(self) -> None:
        if not hasattr(self, "classes_"):
            raise NotFittedError(f"this {self.name!r} calibrator is not fitted yet; call fit(data) first")

    def _check_compatible(self, data: TopLabelData) -> TopLabelData:
        """``data`` on the model's class list (any subset of the model's classes may occur)."""
        if not isinstance(data, TopLabelData):
            raise DataError(f"predict expects a TopLabelData, got {type(data).__name__}")
        if tuple(data.score_range) != tuple(self.score_range_):
            lo, hi = self.score_range_
            raise DataError(
                f"the data's score range ({data.score_range[0]:g}, {data.score_range[1]:g}) differs from the "
                f"model's ({lo:g}, {hi:g}); build the data with score_range=({lo:g}, {hi:g}) "
                f"(--score-range {lo:g} {hi:g})"
            )
        if self.needs_full and data.has_full and set(data.classes) != set(self.classes_):
            raise DataError(
                f"method {self.name!r} needs score vectors over the model's {len(self.classes_)} classes, but the "
                f"data has {data.n_classes} columns ({preview(data.classes)}); give one column per model class"
            )
        data = data.with_classes(self.classes_, "the data")
        if self.needs_full:  # with_classes drops vectors whose columns are not the model's classes
            data.require_full(f"method {self.name!r}")
        return data

    def predict(self, data, *, classes=None, kind: str = "auto") -> np.ndarray:
        """Calibrated confidence of each row, shape (n_rows,), values in [0, 1].

        ``data`` as in :meth:`fit` (labels, if any, are ignored); a score
        matrix's columns are the fitted classes, in order, unless ``classes``
        names them. For binned data, one value per bin (at the bin's
        midpoint score).
        """
        self._check_fitted()
        if not isinstance(data, TopLabelData):
            data = as_data(data, classes=self.classes_ if classes is None else classes, kind=kind)
        self._check_data(data)
        data = self._check_compatible(data)
        out = np.asarray(self._predict(data), dtype=np.float64)
        return out

    def _predict(self, data: TopLabelData) -> np.ndarray:  # pragma: no cover - abstract
        raise NotImplementedError

    def predict_interval(self, data, level: float = 0.9, *, classes=None,
                         kind: str = "auto") -> tuple[np.ndarray, np.ndarray]:
        """Lower and upper end of a ``level`` interval on each row's calibrated confidence.

        The interval is about the estimation error of the fitted calibration map
        at the row's class and score (how well the fitting data pin Conf_k(S)
        down), not about the row's outcome; docs/intervals.md states what is
        random for each method family. Count methods: the Beta posterior of
        the local counts (with the shrinkage pseudo-counts as its prior, or
        Jeffreys' for the unshrunk estimators); temperature methods: the delta
        method on the fitted (log) temperature and award. Everything needed is
        in the fitted model (and its JSON file): nothing is refitted.

        Parameters
        ----------
        data : as in :meth:`predict`
        level : float in (0, 1), default 0.9
            Nominal coverage (0.9: a 90% interval, 5% in each tail).

        Returns
        -------
        (lower, upper) : tuple of two ndarrays, shape (n_rows,)
            0 < lower <= predict(data) <= upper < 1 wherever the confidence is
            strictly inside (0, 1). ``uncalibrated`` estimates nothing: its
            interval is the point itself.
        """
        level = intervals.check_level(level)
        self._check_fitted()
        if not isinstance(data, TopLabelData):
            data = as_data(data, classes=self.classes_ if classes is None else classes, kind=kind)
        self._check_data(data)
        data = self._check_compatible(data)
        lo, hi = self._interval(data, level)
        return np.asarray(lo, dtype=np.float64), np.asarray(hi, dtype=np.float64)

    def _interval(self, data: TopLabelData, level: float) -> tuple[np.ndarray, np.ndarray]:
        """(lower, upper) per row of compatible ``data``: the per-family hook of :meth:`predict_interval`."""
        raise ParameterError(f"method {self.name!r} has no confidence interval")

    def _no_interval_stats(self, what: str):
        """The one-line error of a model loaded from a file without what its intervals need."""
        return ModelFileError(
            f"this {self.name!r} model file holds no {what} (saved by an older topcal); refit it with "
            f"topcal >= {intervals.INTERVAL_SINCE} to get intervals"
        )

    # ----------------------------------------------------------- describe
    @property
    def n_params_(self) -> int:
        """Number of fitted parameters (for AIC); subclasses refine it."""
        return 0

    def describe(self) -> dict[str, Any]:
        """Fitted parameters: ``{"method", "params", "classes": {name: {...}}}``."""
        self._check_fitted()
        per_class = self._describe_classes()
        for row, extra in zip(per_class, self._describe_intervals()):
            row.update(extra)
        return {
            "method": self.name,
            "params": self.get_params(),
            "score_range": list(self.score_range_),
            "classes": {
                c: {"n_tp": float(self.n_tp_[i]), "n_fp": float(self.n_fp_[i]), **per_class[i]}
                for i, c in enumerate(self.classes_)
            },
        }

    def _describe_classes(self) -> list[dict]:
        return [{} for _ in self.classes_]

    def _describe_head(self, d: dict) -> list[str]:
        """Lines :meth:`describe_text` prints after the method's name and parameters (a wrapper's summary)."""
        return []

    def _describe_body(self, d: dict) -> dict:
        """The description whose method-wide and per-class entries :meth:`describe_text` prints."""
        return d

    #: The level of the interval widths ``describe`` shows.
    DESCRIBE_LEVEL: ClassVar[float] = 0.9

    def _describe_intervals(self) -> list[dict]:
        """Per class, the mean width of the 90% interval over 21 scores evenly across the class's
        support (``interval_width_90``); nothing for models without curves or interval statistics."""
        if not self.has_curve or not hasattr(self, "support_"):
            return [{} for _ in self.classes_]
        out = []
        for k, sup in enumerate(self.support_):
            if sup is None:
                out.append({})
                continue
            s = np.linspace(sup[0], sup[1], 21)
            grid = TopLabelData(tuple(self.classes_), np.full(s.shape, k, dtype=np.int64), s,
                                tuple(self.score_range_))
            try:
                lo, hi = self._interval(grid, self.DESCRIBE_LEVEL)
            except (ModelFileError, ParameterError):  # old file, or a method without intervals
                return [{} for _ in self.classes_]
            out.append({"interval_width_90": float(np.mean(hi - lo))})
        return out

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
        except ModelFileError:
            raise
        except (KeyError, TypeError, ValueError, IndexError) as exc:
            msg = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise ModelFileError(
                f"model for method {cls.name!r} is malformed ({msg}); refit and save it again"
            ) from None
        return obj

    def _get_state(self) -> dict:  # pragma: no cover - abstract
        raise NotImplementedError

    def _set_state(self, state: dict) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    def save(self, path) -> None:
        """Write the fitted model as versioned JSON (see :func:`topcal.persist.save`)."""
        _hook("save")(self, path)

    def adapt(self, data: TopLabelData | None = None, *, priors=None, estimator: str = "em",
              source_data: TopLabelData | None = None, n_bootstrap: int = 100, seed: int = 0,
              shrink="auto") -> "Calibrator":
        """A copy of this model adapted to a use set's class priors (label shift).

        Give the unlabelled use set ``data`` (priors estimated by ``estimator``,
        "em" or "bbse"; ``source_data``, the labelled test set with full
        vectors, makes "em" run on BCTS vectors) or ``priors=`` (dict class ->
        prior, or one value per class). ``shrink`` ("auto" or a number in
        [0, 1]): how far to move towards estimated priors (the safety step).
        :func:`topcal.labelshift.adapt` takes further options. This model is unchanged.
        """
        return _hook("adapt")(self, data, priors=priors, estimator=estimator, source_data=source_data,
                              n_bootstrap=n_bootstrap, seed=seed, shrink=shrink)


def to_jsonable(obj):
    """Turn ndarrays and numpy scalars inside dicts/lists into plain JSON types.

    Floats keep every bit: JSON stores Python's shortest round-trip repr.
    """
    if isinstance(obj, dict):
        return {str(k): to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [to_jsonable(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if isinstance(obj, np.integer):
        return int(obj)
    if isinstance(obj, np.floating):
        return float(obj)
    return obj


def finite_array(values, name: str, length: int | None = None) -> np.ndarray:
    """Parse a list of finite floats from a model file (raises ValueError)."""
    arr = np.asarray(values, dtype=np.float64)
    if arr.ndim != 1 or not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} must be a list of finite numbers")
    if length is not None and arr.shape[0] != length:
        raise ValueError(f"{name} must have {length} entries, has {arr.shape[0]}")
    return arr


class ScoreCalibrator(Calibrator):
    """Calibrators whose confidence for class k is a function Conf_k(S) of the score.

    Subclasses implement ``_fit_class(view, k) -> dict`` (JSON-ready per-class
    state) and ``_predict_class(state, score) -> ndarray``. Classes with no
    positives in the fitting data get ``None`` state and the uncalibrated
    score (S - lo) / (hi - lo) as their confidence (a warning is raised at fit).

    Methods that fit or predict many classes faster together override the
    batched hooks, whose defaults go class by class through the two above:
    ``_fit_all_classes(data) -> (states, support)`` and
    ``_predict_rows(pred, score) -> ndarray``; ``_index_states()`` runs
    whenever ``class_state_`` is set (fit or load), for methods that predict
    from tables built out of the states. The batched hooks must give what the
    per-class ones give (``kde`` fits every class in a few passes over the
    rows and predicts all rows in one gather).
    """

    #: Whether the method takes the ``shrinkage`` parameter: it estimates
    #: Conf_k(S) from local counts and implements :meth:`_local_counts`.
    shrinkable: ClassVar[bool] = False
    #: Whether the local counts (and the reference) are piecewise constant in the score (a
    #: histogram): rows sharing them are merged before the pseudo-count's loss is evaluated.
    piecewise_counts: ClassVar[bool] = False
    #: Choose the pseudo-count on rows merged by cell where the method gives cells
    #: (:meth:`_count_cells`); False evaluates the loss on every row (for tests and benchmarks).
    merge_cells: ClassVar[bool] = True

    def _shrunk(self) -> bool:
        return self.shrinkable and not (
            not isinstance(self.shrinkage, str) and float(self.shrinkage) == 0.0
        )

    def _fit(self, data: TopLabelData) -> None:
        self._fit_classes(data)
        if self._shrunk():
            self._fit_shrinkage(data)

    def _fit_classes(self, data: TopLabelData) -> None:
        """Fit every class with the paper's estimator (sets class_state_, support_)."""
        self.class_state_, self.support_ = self._fit_all_classes(data)
        self._index_states()

    def _fit_all_classes(self, data: TopLabelData) -> tuple[list, list]:
        """Per-class states and supports (None for classes without positives): the batched-fit hook.

        The default fits class by class with :meth:`_fit_class`.
        """
        states = []
        support = []
        for k, view in enumerate(data.class_views()):
            support.append(data.class_support(k, view))
            states.append(None if support[-1] is None else self._fit_class(view, k))
        return states, support

    def _index_states(self) -> None:
        """Called whenever ``class_state_`` is set (fit, load); nothing to do by default."""

    def _fit_class(self, view: ClassView, k: int) -> dict:  # pragma: no cover - abstract
        raise NotImplementedError

    def _predict_class(self, state: dict, score: np.ndarray) -> np.ndarray:  # pragma: no cover
        raise NotImplementedError

    def _uncalibrated(self, score: np.ndarray) -> np.ndarray:
        lo, hi = self.score_range_
        return np.clip((score - lo) / (hi - lo), 0.0, 1.0)

    def _predict_scores(self, k: int, score: np.ndarray) -> np.ndarray:
        state = self.class_state_[k]
        if self._shrunk():
            return self._shrunk_scores(k, score)
        if state is None:
            return self._uncalibrated(score)
        return self._predict_class(state, score)

    # ------------------------------------------------------------ shrinkage
    def _local_counts(self, k: int, score: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Local TP and positive counts (t, n) behind Conf_k at ``score`` (paper estimator).

        Conf_k = t / n where n > 0. Implemented by shrinkable methods.
        """
        raise NotImplementedError  # pragma: no cover - abstract

    def _local_counts_rows(self, pred: np.ndarray, score: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`_local_counts` of every row's own class (rows of classes without state: 0, 0).

        One pass per class present, over rows grouped once; methods with
        flat per-class tables override it with a single gather.
        """
        t = np.zeros(score.shape[0])
        n = np.zeros(score.shape[0])
        for k, idx in rows_by_class(pred, len(self.classes_)):
            if self.class_state_[k] is not None:
                t[idx], n[idx] = self._local_counts(k, score[idx])
        return t, n

    def _fit_shrinkage(self, data: TopLabelData) -> None:
        """Fit the pooled reference curve and choose the pseudo-counts (see calibrators.shrinkage)."""
        ref = type(self)(**{**self.get_params(), "shrinkage": 0})
        ref._is_reference = True
        pooled = TopLabelData(
            ("all classes",), np.zeros(data.n_rows, dtype=np.int64), data.score, data.score_range,
            tp=data.tp, fp=data.fp, bin_edges=data.bin_edges,
        )
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DegenerateClassWarning)
            ref.fit(pooled)
        keep = (data.tp + data.fp) > 0
        if keep.all():  # per-sample data: every row has weight; no copies (contiguous, as the copies are)
            s, tp, fp, pred = (np.ascontiguousarray(a) for a in (data.score, data.tp, data.fp, data.pred))
        else:
            s, tp, fp, pred = data.score[keep], data.tp[keep], data.fp[keep], data.pred[keep]
        self.reference_ = ref
        self.reference_rate_ = shr.jeffreys_rate(tp.sum(), tp.sum() + fp.sum())
        one = np.zeros(s.shape[0], dtype=np.int64)
        s0, tp0, fp0, _ = ref._merged_rows(one, s, tp, fp)
        t0, n0 = ref._local_counts(0, s0)
        rows = (t0, n0, tp0, fp0, self.reference_rate_, np.zeros(s0.shape[0], dtype=np.int64))
        if self.piecewise_counts:
            rows = shr.merge_equal_rows(*rows)
        self.reference_m_ = shr.choose_m(shr.loo_nll_by_group(*rows, 1)[0])
        K = len(self.classes_)
        s, tp, fp, pred = self._merged_rows(pred, s, tp, fp)
        r = self._reference(s)
        t, n = self._local_counts_rows(pred, s)
        rows = (t, n, tp, fp, r, pred)
        if self.piecewise_counts:
            rows = shr.merge_equal_rows(*rows)
        losses = shr.loo_nll_by_group(*rows, K)
        if self.shrinkage == "auto":
            m = np.full(K, shr.choose_m(losses.sum(axis=0)))
        elif self.shrinkage == "class":
            m = np.array([shr.choose_m(losses[k]) for k in range(K)])
        else:
            m = np.full(K, float(self.shrinkage))
        self.shrinkage_ = m
        self.shrinkage_loss_ = losses

    def _count_cells(self, pred: np.ndarray, score: np.ndarray):
        """(cell of every row, number of cells) where the local counts are smooth within cells, else None.

        Cells number 0 .. n_cells - 1 across all classes (a cell lies in one class). Methods
        whose counts are smooth in the score (``kde``: linear within a cell of the class's
        table) return them, so that choosing the pseudo-count can merge the rows of a cell
        (:meth:`_merged_rows`).
        """
        return None

    def _merged_rows(self, pred, score, tp, fp):
        """The rows the pseudo-count's loss is evaluated on: (score, tp, fp, pred).

        The rows themselves, or, where :meth:`_count_cells` gives cells, ``merge_cells`` is
        on and merging divides the rows by at least ``shrinkage.CELL_MERGE_GAIN``, one TP and
        one FP row per occupied cell at the weighted mean score
        (:func:`shrinkage.merge_rows_by_cell`; documented tolerance in docs/shrinkage.md).
        """
        cells = self._count_cells(pred, score) if self.merge_cells else None
        if cells is None or score.shape[0] < shr.CELL_MERGE_GAIN * 2:
            return score, tp, fp, pred
        cell, n_cells = cells
        occupied = np.count_nonzero(np.bincount(cell, minlength=n_cells))
        if 2 * occupied * shr.CELL_MERGE_GAIN > score.shape[0]:
            return score, tp, fp, pred
        cell_class = np.zeros(n_cells, dtype=np.int64)
        cell_class[cell] = pred
        s, t, f, c = shr.merge_rows_by_cell(cell, score, tp, fp, n_cells)
        return s, t, f, cell_class[c]

    def _shrink_terms(self, pred: np.ndarray, score: np.ndarray):
        """(t, n, r) of every row: its class's local counts and the reference curve at its score.

        The reference once for all rows, the class counts in one grouped pass; methods whose
        lookups want the rows sorted by score override it to sort once for both.
        """
        r = self._reference(score)
        t, n = self._local_counts_rows(pred, score)
        return t, n, r

    def _reference(self, score: np.ndarray) -> np.ndarray:
        """The reference curve r(S): the pooled curve shrunk toward the overall rate."""
        t0, n0 = self.reference_._local_counts(0, score)
        return shr.shrink(t0, n0, self.reference_rate_, self.reference_m_)

    def _shrunk_scores(self, k: int, score: np.ndarray) -> np.ndarray:
        r = self._reference(score)
        if self.class_state_[k] is None:
            return r  # no data of its own: the reference curve
        t, n = self._local_counts(k, score)
        return shr.shrink(t, n, r, self.shrinkage_[k])

    def _predict(self, data: TopLabelData) -> np.ndarray:
        if self._shrunk():
            t, n, r = self._shrink_terms(data.pred, data.score)
            m = self.shrinkage_
            # one pseudo-count for all classes ("auto", a number): the same value, without a gather per row
            out = shr.shrink(t, n, r, m[0] if (m == m[0]).all() else m[data.pred])
            none = [k for k, st in enumerate(self.class_state_) if st is None]
            if none:  # no data of their own: the reference curve
                rows = np.isin(data.pred, none)
                out[rows] = r[rows]
            return out
        return self._predict_rows(data.pred, data.score)

    def _predict_rows(self, pred: np.ndarray, score: np.ndarray) -> np.ndarray:
        """Unshrunk Conf of every row's own class: the batched-predict hook.

        The default goes class by class through :meth:`_predict_scores`.
        """
        out = np.empty(score.shape[0], dtype=np.float64)
        for k, idx in rows_by_class(pred, len(self.classes_)):
            out[idx] = self._predict_scores(k, score[idx])
        return out

    # ------------------------------------------------------------ intervals
    #: Effective sample size per unit of the local count n (1 for plain counts; the
    #: kernel methods' kernel-weighted counts count more, docs/intervals.md).
    _count_scale: ClassVar[float] = 1.0

    def _counts_stored(self) -> bool:
        """Whether the fitted state holds the local counts the intervals need (old files may not)."""
        return True

    def _interval_bias(self, pred: np.ndarray, score: np.ndarray) -> np.ndarray | float:
        """Estimated bias of each row's confidence as an estimate of Conf_k at its own score (0: none;
        the histogram's binning and the kernel's smoothing bias); the interval is widened for it."""
        return 0.0

    def _curve_rows(self, pred: np.ndarray, score: np.ndarray) -> np.ndarray:
        """The fitted confidence (shrunk where the model is) of each row's class at ``score``."""
        return self._predict(TopLabelData(tuple(self.classes_), pred, score, tuple(self.score_range_)))

    def _interval(self, data: TopLabelData, level: float):
        """Beta posterior of the local counts (module :mod:`topcal.calibrators.intervals`)."""
        if not self.shrinkable:
            raise ParameterError(f"method {self.name!r} has no confidence interval")
        if not self._counts_stored():
            raise self._no_interval_stats("local counts")
        pred, score = data.pred, data.score
        conf = self._predict(data)
        none = np.array([st is None for st in self.class_state_], dtype=bool)[pred]
        if self._shrunk():
            t, n = self._local_counts_rows(pred, score)
            t0, n0 = self.reference_._local_counts(0, score)
            m = self.shrinkage_[pred]
            if none.any():  # no data of their own: the reference curve alone
                t, n = np.where(none, 0.0, t), np.where(none, 0.0, n)
            post = None
            if isinstance(self.shrinkage, str):  # m chosen from the data: the spread it stands for is uncertain
                grid, w = shr.m_posterior(shr.spread_losses(self.n_tp_, self.n_tp_ + self.n_fp_,
                                                            self.reference_rate_))
                post = (grid, w[pred])
            lo, hi = intervals.shrunk_interval(t, n, m, t0, n0, self.reference_m_, self.reference_rate_,
                                               float(np.sum(self.n_tp_) + np.sum(self.n_fp_)), level,
                                               scale=self._count_scale, m_posterior=post)
        else:
            t, n = self._local_counts_rows(pred, score)
            lo, hi = intervals.count_interval(t, n, level, scale=self._count_scale)
            lo[none], hi[none] = conf[none], conf[none]  # the uncalibrated score: nothing estimated
        bias = self._interval_bias(pred, score)
        if np.any(bias):
            lo, hi = intervals.widen(lo, hi, conf, np.where(none, 0.0, bias), level)
        return intervals.include_point(lo, hi, conf)

    def curve(self, k, score=None, *, n_points: int = 401) -> Curve:
        """Conf_k sampled on ``score`` (default: ``n_points`` evenly spaced over the score range).

        Parameters
        ----------
        k : int or str
            Class index or name.
        score : array-like, optional
            Scores (declared scale) to evaluate at.
        n_points : int, default 401
            Grid size when ``score`` is not given.
        """
        self._check_fitted()
        i = self._class_index(k)
        lo, hi = self.score_range_
        s = np.linspace(lo, hi, n_points) if score is None else np.asarray(score, dtype=np.float64)
        return Curve(self.classes_[i], s, self._predict_scores(i, s), self.support_[i])

    # per-class state persistence: shared by every score calibrator
    def _get_state(self) -> dict:
        out = {
            "class_state": [None if s is None else self._dump_class_state(s) for s in self.class_state_],
            "support": [None if s is None else list(s) for s in self.support_],
        }
        if self._shrunk():
            out["shrinkage"] = {
                "m": [float(v) for v in self.shrinkage_],
                "reference": self.reference_.to_dict(stats=False),
                "reference_m": float(self.reference_m_),
                "reference_rate": float(self.reference_rate_),
            }
        return out

    def _set_state(self, state: dict) -> None:
        cs = state["class_state"]
        sup = state["support"]
        if len(cs) != len(self.classes_) or len(sup) != len(self.classes_):
            raise ValueError("per-class state has the wrong number of classes")
        self.class_state_ = [None if s is None else self._load_class_state(s) for s in cs]
        self.support_ = [None if s is None else tuple(float(v) for v in s) for s in sup]
        self._index_states()
        if self._shrunk():
            sh = state["shrinkage"]
            m = finite_array(sh["m"], "shrinkage m", len(self.classes_))
            (m0, r0) = finite_array([sh["reference_m"], sh["reference_rate"]], "reference m/rate")
            if np.any(m <= 0) or not m0 > 0 or not 0 < r0 < 1:
                raise ValueError("shrinkage needs pseudo-counts > 0 and a reference rate in (0, 1)")
            ref = type(self).from_dict(sh["reference"])
            if ref._shrunk() or len(ref.classes_) != 1:
                raise ValueError("the shrinkage reference must be one unshrunk pooled curve")
            self.shrinkage_, self.reference_m_, self.reference_rate_, self.reference_ = m, float(m0), float(r0), ref

    def _dump_class_state(self, state: dict) -> dict:
        """One class's state as JSON (the inverse of :meth:`_load_class_state`)."""
        return to_jsonable(state)

    def _load_class_state(self, state: dict) -> dict:
        """Validate one class's saved state (raise ValueError if malformed)."""
        return state

    def _describe_classes(self) -> list[dict]:
        out = []
        for st, sup in zip(self.class_state_, self.support_):
            if st is None:
                out.append({"fallback": "uncalibrated (class never predicted in fitting data)"})
            else:
                out.append({**to_jsonable(st), "support": list(sup)})
        return out

    def describe(self) -> dict[str, Any]:
        """Fitted parameters; with shrinkage also the pseudo-counts and the reference."""
        d = super().describe()
        if self._shrunk():
            d["shrinkage"] = {
                "rule": self.shrinkage if isinstance(self.shrinkage, str) else "fixed",
                "reference": "same method on all classes pooled, shrunk toward the overall rate",
                "reference_rate": self.reference_rate_,
                "reference_pseudo_count": self.reference_m_,
            }
            for i, c in enumerate(self.classes_):
                d["classes"][c]["pseudo_count"] = float(self.shrinkage_[i])
        return d
