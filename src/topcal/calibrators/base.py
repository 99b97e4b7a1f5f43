"""The calibrator contract shared by every method.

* Parameters are keyword-only ``__init__`` arguments, stored untouched and checked in
  ``fit`` against ``_parameter_constraints``.
* ``fit(data)`` returns ``self`` and sets attributes ending in ``_``.
* ``predict(data)`` returns the calibrated confidence of each row: the probability that the
  row's predicted class is right.
* ``data`` is a :class:`TopLabelData` or anything :func:`topcal.io.inputs.as_data` reads:
  ``fit(scores, y)`` / ``predict(scores)`` with a 2-d array of probabilities or logits
  (NumPy, torch on the CPU, ...), a DataFrame with ``p_<class>`` columns, or a data file.
* ``get_params(deep=True)`` / ``set_params(**params)`` follow scikit-learn, so
  ``sklearn.base.clone`` copies an unfitted calibrator.
* ``describe()`` returns the fitted parameters per class (JSON-ready); ``to_dict()`` /
  ``from_dict()`` (and :mod:`topcal.persist`) save and load.

Calibration is always per predicted class: class k's function is fitted on the positives of
k (the rows with k(X) = k) and nothing else.

:class:`~.score.ScoreCalibrator` is the base of methods whose confidence is a function
Conf_k(S) of the top score alone (histogram, cumulative, kernel density); they fit class by
class from the class's TP/FP scores and weights and expose ``curve(k)``.

A fitted model holds one :class:`~topcal.evidence.core.Evidence` (``evidence_``): what its
fit was told to keep (``fit(..., keep=...)``). ``update`` (:mod:`.updating`) merges evidence
and refits; :mod:`.modelfile` is the JSON-ready form. ``predict_proba`` gives the calibrated
full vector (:mod:`.fullvector` states the rule). The per-class score methods' shared
machinery (shrinkage, count intervals) is :mod:`.score`.
"""

from __future__ import annotations

import functools
import inspect
import warnings
from dataclasses import dataclass
from typing import Any, ClassVar, Self

import numpy as np

from .. import _recycle
from .._numeric import linspace_rows
from .._params import validate_params
from .._typing import ArrayLike, PathLike
from ..data import TopLabelData, check_sample_total, preview
from ..errors import (
    DataError,
    DegenerateClassWarning,
    ModelFileError,
    NotFittedError,
    ParameterError,
    TopcalError,
    TopcalWarning,
)
from ..evidence.core import Evidence
from ..evidence.fingerprint import Fingerprint
from ..evidence.stats import ScoreStats
from ..io.inputs import as_data
from . import fullvector, intervals, modelfile, spread, updating
from .context import FitContext
from .fullvector import combine, distribute_rest, fit_map
from .hooks import HOOKS, Description, hook, register_hook, set_html_renderer
from .modelfile import finite_array, support_list, to_jsonable
from .registry import fits_from_counts, require_counts

__all__ = [
    "Calibrator",
    "Curve",
    "KEEP",
    "to_jsonable",
    "finite_array",
    "support_list",
    "set_html_renderer",
    "register_hook",
]

#: What a fit keeps (``fit(..., keep=...)``), said by the caller that knows: "evidence" (the
#: default) the model and its :class:`~topcal.evidence.core.Evidence`; "model" the model
#: alone, with what its intervals need (a part of another model, whose owner holds the
#: evidence: a shrinkage reference, a pooled curve, a blend's component, auto's choice);
#: "predictions" only what ``predict`` needs (a model scored and dropped: a cross-validation
#: fold's, :mod:`.crossfit`).
KEEP = ("evidence", "model", "predictions")


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
        Lowest and highest score of the class's positives in the fitting data: outside it
        the curve is extrapolated (plots shade it). None when the class had no positives.
    """

    class_name: str
    score: np.ndarray
    confidence: np.ndarray
    support: tuple[float, float] | None


#: The level of the interval widths ``describe`` shows (``interval_width_90``).
DESCRIBE_LEVEL = 0.9


@functools.cache
def _init_params(init) -> tuple[str, ...]:
    """The parameter names of a constructor (every fit reads them: 86 signatures a default
    auto)."""
    return tuple(
        p.name for p in inspect.signature(init).parameters.values() if p.name != "self"
    )


class Calibrator:
    """Base of all calibrators: subclasses set ``name``, implement ``_fit``, ``_predict``,
    ``_get_state``, ``_set_state``."""

    #: Registry key, also the ``method`` field of saved models.
    name: ClassVar[str] = ""
    #: One-line summary for ``topcal methods`` and docs.
    summary: ClassVar[str] = ""
    #: Whether the method needs the full score vector Y(X).
    needs_full: ClassVar[bool] = False
    #: whether the method is one of the paper's (the experiments that reproduce the paper
    #: run those)
    in_paper: ClassVar[bool] = True
    #: Whether the method is the do-nothing reference (the top score rescaled,
    #: ``uncalibrated``): the report compares every method with it, lists no fitted
    #: parameters for it, and figures draw it as the dashed diagonal or grey bars instead of
    #: a fitted curve.
    is_baseline: ClassVar[bool] = False
    #: Whether the curve is piecewise constant in the score (a step function, or one
    #: constant per class): its jumps are no wiggles, so the report's wiggle check skips it.
    step_curve: ClassVar[bool] = False
    #: Each class's score range in the fitting data (None: no positives); set by the fits of
    #: the models that have curves.
    support_: list
    #: Whether the confidence is one constant per class, ignoring the score (``conf1``):
    #: figures of calibration curves leave it out unless asked for by name.
    constant_per_class: ClassVar[bool] = False
    #: Metrics (names of :data:`topcal.metrics.BUNDLE`) the method is shown on but not
    #: ranked on (never marked best), with the reason in ``unranked_note`` (printed under
    #: the tables).
    unranked_on: ClassVar[frozenset] = frozenset()
    #: Why the method is not ranked on ``unranked_on``: one sentence for the reader.
    unranked_note: ClassVar[str] = ""
    #: Simplicity for ``auto``'s choice (lower: simpler; auto takes the lowest within noise
    #: of the best): 0 nothing fitted, 1 one parametric curve for all classes, 1.5 one
    #: non-parametric curve for all classes, 2 per-class curves shrunk toward a pooled one,
    #: 3 per-class fits.
    tier: ClassVar[float] = 3
    #: Whether one curve serves every class (``pooled-*``, ``sts``): the fit measures the
    #: classes' spread around it and the interval adds it (:mod:`.spread`).
    _pools_classes: ClassVar[bool] = False
    #: The between-class spread table (:func:`.spread.measure`); None: not measured (a
    #: method with per-class curves, an older model file, a cross-validation fold's fit).
    _spread: dict | None = None
    #: Parameter name -> constraint (see :mod:`topcal._params`).
    _parameter_constraints: ClassVar[dict] = {}
    #: Whether a cross-validation fold's fit may start from the optimum on all the data
    #: (``fit(..., warm=model)``, given by :mod:`.crossfit`): methods with an iterative
    #: optimiser.
    _warm_starts: ClassVar[bool] = False
    #: Whether auto's final fit may start from its cross-validation's (or first look's) fit
    #: of the method (:func:`.crossfit.refit_start`): the vector maps, whose optimum is well
    #: defined.
    _warm_refit: ClassVar[bool] = False
    #: What the last ``fit`` was told to keep (:data:`KEEP`); a method's own fit reads it
    #: (no interval statistics for "predictions"). A loaded model is a full one.
    _keep: str = "evidence"
    #: During ``fit``: the fitted model it may start from (``warm``), or None.
    _warm = None
    #: during a fit: the caller's :class:`~.context.FitContext`, or None
    _context = None
    #: The model's evidence (:attr:`evidence_`); empty until a fit keeps some.
    _evidence: Evidence = Evidence.EMPTY
    #: Parameters a loaded model file did not name (added to topcal after it was written),
    #: with the value loading gave them: written back left out while they keep that value,
    #: so that a loaded model's dict, and the digest a thresholds file holds of it, are the
    #: file's own.
    _unnamed_params: dict = {}
    #: Entries of the method's state that are evidence (``auto``'s cross-validation table):
    #: the model file keeps them in its ``evidence`` object (:func:`.modelfile.to_dict`).
    _evidence_keys: tuple[str, ...] = ()
    #: the vector map fitted beside the model (None: none fitted, or the model has its own)
    _vector = None
    #: during and after ``fit``: whether the fit was told to fit the map (``fit(...,
    #: vector=)``)
    _map_wanted = False

    # ------------------------------------------------------------- params
    @classmethod
    def _param_names(cls) -> list[str]:
        return list(_init_params(cls.__init__))

    def get_params(self, deep: bool = True) -> dict[str, Any]:
        """The constructor parameters, as given (``deep`` is accepted for scikit-learn;
        calibrators hold no nested estimators)."""
        return {k: getattr(self, k) for k in self._param_names()}

    @classmethod
    def _check_param_names(cls, params) -> None:
        """Raise ParameterError naming any key of ``params`` that is not a constructor
        parameter."""
        allowed = cls._param_names()
        unknown = sorted(set(params) - set(allowed))
        if unknown:
            opts = ", ".join(allowed) if allowed else "none"
            raise ParameterError(
                f"method {cls.name!r} has no parameter(s) {', '.join(map(repr, unknown))}; "
                f"its parameters are: {opts}"
            )

    def set_params(self, **params: Any) -> "Calibrator":
        """Set constructor parameters (values checked at the next ``fit``); returns self."""
        self._check_param_names(params)
        for k, v in params.items():
            setattr(self, k, v)
        return self

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.get_params().items())
        return f"{type(self).__name__}({args})"

    def __sklearn_tags__(self):
        """scikit-learn's estimator tags (asked only by scikit-learn, e.g. a Pipeline whose
        last step is a calibrator): fit needs labels."""
        from sklearn.utils import Tags, TargetTags

        return Tags(estimator_type=None, target_tags=TargetTags(required=True))

    def _repr_html_(self) -> str | None:
        """Jupyter's rich display: the per-class curves of a fitted calibrator (None, i.e.
        the plain repr, while unfitted)."""
        if not hasattr(self, "classes_") or HOOKS["html"] is None:
            return None
        return HOOKS["html"](self)

    def _validate_params(self) -> None:
        validate_params(self.name, self._parameter_constraints, self.get_params())

    # ---------------------------------------------------------------- fit
    def fit(
        self,
        data: TopLabelData | Evidence | ArrayLike | PathLike,
        y: ArrayLike | None = None,
        *,
        classes: ArrayLike | None = None,
        kind: str = "auto",
        keep: str = "evidence",
        warm: Calibrator | None = None,
        fingerprint: Fingerprint | None = None,
        vector: bool = True,
        context: FitContext | None = None,
    ) -> "Calibrator":
        """Fit one calibration function per predicted class on labelled ``data``.

        Parameters
        ----------
        data : TopLabelData, array-like of shape (n, K), DataFrame, path or Evidence
            The labelled data, or a classifier's scores (probabilities or logits; NumPy,
            torch on the CPU, anything with ``__array__``), or the
            :class:`~topcal.evidence.core.Evidence` of labelled data (streamed and Dask
            fits, :meth:`_fit_evidence`).
        y : array-like of shape (n,), optional
            True classes (names or column indices) when ``data`` is scores.
        classes : sequence of str, optional
            Names of the K score columns (default "0".."K-1", or the sorted distinct names
            in ``y``).
        kind : {"auto", "probs", "logits"}, default "auto"
            What the score matrix holds (see :mod:`topcal.io.inputs`).
        keep : {"evidence", "model", "predictions"}, default "evidence"
            What the fitted model keeps (:data:`KEEP`): said by the caller that knows, e.g.
            a model fitted inside another's or a cross-validation fold's.
        warm : fitted calibrator of the same method, optional
            A fit on all the data whose optimum a fold's fit may start from (methods with an
            iterative optimiser; others ignore it). With ``keep="predictions"`` and a
            ``warm`` fitted on as many samples or more the fit is taken for a
            cross-validation fold's, which ``vs``, ``sms`` and ``sts`` approximate
            (:meth:`_fold_fit`; docs/vector.md#fold-fits). A ``vs``/``sms`` fit (and their
            maps in ``vs-hier-platt``/``sms-pooled-beta``) on the very data object,
            unchanged, that a scratch ``warm`` was fitted on takes that fit's optimum
            (auto's final fit: docs/vector.md#same-rows).
        fingerprint : Fingerprint, optional
            The fingerprint of these same rows, already computed by the caller; taken
            instead of hashing every row again.
        vector : bool, default True
            Also fit ``predict_proba``'s vector map (:mod:`.fullvector`; with full vectors).
        context : FitContext, optional
            What the caller wants back besides the model (:mod:`.context`: ``auto`` appends
            its cross-validation runs to ``context.runs``).

        Returns
        -------
        self
        """
        if keep not in KEEP:
            raise ParameterError(
                f"keep must be one of {', '.join(map(repr, KEEP))}, got {keep!r}"
            )
        if isinstance(data, Evidence):
            if y is not None:
                raise ParameterError("y goes with a score matrix, not with an Evidence")
            return self._fit_evidence(data, keep)
        data = self._checked_fit_data(data, y, classes, kind)
        self._keep, self._evidence, self._vector = keep, Evidence.EMPTY, None
        self._map_wanted = keep == "evidence" and bool(vector)
        # what the model remembers of its fitting rows, so that a guarantee is never
        # computed on them (topcal.thresholds.core); a fit from evidence takes the rows'
        # fingerprint from it
        if keep == "evidence" and fingerprint is None:
            fingerprint = Fingerprint.of(data)
        self._warm, self._context = warm, context
        try:
            with _recycle.recycling():  # a long fit's data-sized scratch arrays, reused
                self._fit(data)
            if self._map_wanted and self._vector is None:  # a fit may have fitted its own
                self._vector = fit_map(self, data)  # the vector's map (fullvector.py)
        finally:
            self._warm = self._context = None
        self._keep_after_fit(data, keep, fingerprint)
        return self

    def _checked_fit_data(self, data, y, classes, kind: str) -> TopLabelData:
        """:meth:`fit`'s checks of its parameters and ``data`` (read as :func:`as_data` does);
        sets the classes, score range and counts, and warns of classes never predicted."""
        self._validate_params()
        data = as_data(data, y, classes=classes, kind=kind)
        data.require_labels(f"fitting {self.name!r}")
        check_sample_total(data.n_samples, "the fitting data (with any updates)")
        self._check_data(data)
        self.classes_, self.score_range_ = data.classes, data.score_range
        tp, fp = data.class_counts()
        self.n_tp_, self.n_fp_ = tp, fp
        empty = [c for c, n in zip(data.classes, tp + fp) if n == 0]
        if empty:
            warnings.warn(
                f"{self.name}: {'class' if len(empty) == 1 else 'classes'} {preview(empty)} "
                f"{'is' if len(empty) == 1 else 'are'} never predicted in the fitting data; "
                "their confidence falls back to the uncalibrated score",
                DegenerateClassWarning,
                stacklevel=3,
            )
        return data

    def _keep_after_fit(self, data: TopLabelData, keep: str, fingerprint) -> None:
        """What :meth:`fit` keeps of ``data`` besides the model: the classes' spread (methods
        that pool classes) and, with ``keep="evidence"``, the evidence."""
        self._spread = None
        if self._pools_classes and keep != "predictions":
            self._spread = spread.measure(data, self._predict(data))
        if keep == "evidence":
            # the mergeable statistics that let update() refit on old + new data and, per
            # predicted class and score region, the true classes behind its rows
            # (label-shift adaptation; None for binned data); score counts on the default
            # grid: on first read, from a row copy
            keeps = self._keeps_stats()
            count = keeps and type(self)._stats_of is Calibrator._stats_of
            self._evidence = Evidence.kept(
                data,
                stats=self._stats_of(data) if keeps and not count else None,
                count_stats=count,
                fingerprint=fingerprint,
            )

    def _fit(self, data: TopLabelData) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    @property
    def _scratch(self) -> bool:
        """Whether this fit keeps only what ``predict`` needs (``keep="predictions"``: a
        fold's model, no interval statistics)."""
        return self._keep == "predictions"

    def _fold_fit(self, data: TopLabelData) -> bool:
        """Whether this fit is a cross-validation fold's that may stop short of its own
        optimum's last digits (a method's fold rule, e.g. docs/vector.md#fold-fits): its
        caller says it is a fold's (``FitContext(fold=True)``: :mod:`.select.crossfit`), it
        keeps only its predictions, and it starts from a fit of the same method on at least
        as many samples (the all-data fit, or a sibling fold's where auto's first look was
        the first of its K folds: optima the fold's lies near)."""
        warm, context = self._warm, self._context
        return (
            context is not None
            and context.fold
            and self._scratch
            and isinstance(warm, type(self))
            and float(np.sum(warm.n_tp_) + np.sum(warm.n_fp_)) >= float(data.n_samples)
        )

    def _part_keep(self) -> str:
        """What a model fitted as a part of this one keeps: no evidence (this model's is the
        one), and nothing beyond its predictions where this fit keeps no more (a fold's)."""
        return "predictions" if self._keep == "predictions" else "model"

    @property
    def has_curve(self) -> bool:
        """Whether the fitted confidence is a function of (class, top score) alone, so
        ``curve`` works."""
        return not self.needs_full

    #: full-vector methods: the top-score method to suggest for data without vectors
    _full_alternative: ClassVar[str | None] = None

    def _check_data(self, data: TopLabelData) -> None:
        """Checks of the data every ``fit`` and ``predict`` runs once: a full-vector method
        needs the full score vector over at least 2 classes. Subclasses may add their own."""
        if not self.needs_full:
            return
        alt = self._full_alternative
        data.require_full(
            f"method {self.name!r}",
            None
            if alt is None
            else (
                f"use the binary variant {alt!r} (temperature on the normalised top score) "
                "or a score-based method (hist, ...)"
            ),
        )
        if data.n_classes < 2:
            raise DataError(
                f"method {self.name!r} needs at least 2 classes in the score vector, got "
                f"{data.n_classes}"
                + ("" if alt is None else f"; use {alt!r} on the top score instead")
            )

    # --------------------------------------- evidence, update, model file
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

    # ------------------------------------------------------------ predict
    def _class_index(self, k) -> int:
        """Index of class ``k`` (an index or a name) in ``classes_``."""
        if isinstance(k, (int, np.integer)) and not isinstance(k, bool):
            if 0 <= k < len(self.classes_):
                return int(k)
        elif str(k) in self.classes_:
            return self.classes_.index(str(k))
        raise TopcalError(
            f"unknown class {k!r:.60}; choose one of {preview(self.classes_)} or an index "
            f"0..{len(self.classes_) - 1}"
        )

    def _curve_scores(self, k, score, n_points: int) -> tuple[int, np.ndarray]:
        """Class ``k``'s index and the scores its curve is sampled on: ``score``, else
        ``n_points`` evenly spaced over the score range."""
        i = self._class_index(k)
        lo, hi = self.score_range_
        s = np.linspace(lo, hi, n_points) if score is None else np.asarray(score, dtype=np.float64)
        return i, s

    def _predicted_curve(self, k, score, n_points: int) -> Curve:
        """Class ``k``'s curve read off :meth:`predict` on rows of that class at the curve's
        scores: for models whose confidence is a function of the class and the top score."""
        i, s = self._curve_scores(k, score, n_points)
        grid = TopLabelData(
            tuple(self.classes_), np.full(s.shape, i, dtype=np.int64), s, tuple(self.score_range_)
        )
        return Curve(self.classes_[i], s, self.predict(grid), self.support_[i])

    def _check_fitted(self) -> None:
        if not hasattr(self, "classes_"):
            raise NotFittedError(
                f"this {self.name!r} calibrator is not fitted yet; call fit(data) first"
            )

    def _check_compatible(self, data: TopLabelData) -> TopLabelData:
        """``data`` on the model's class list (any subset of the model's classes may occur)."""
        if not isinstance(data, TopLabelData):
            raise DataError(f"predict expects a TopLabelData, got {type(data).__name__}")
        if tuple(data.score_range) != tuple(self.score_range_):
            lo, hi = self.score_range_
            raise DataError(
                f"the data's score range ({data.score_range[0]:g}, "
                f"{data.score_range[1]:g}) differs from the model's ({lo:g}, {hi:g}); "
                f"build the data with score_range=({lo:g}, {hi:g}) (--score-range {lo:g} "
                f"{hi:g})"
            )
        if self.needs_full and data.has_full and set(data.classes) != set(self.classes_):
            raise DataError(
                f"method {self.name!r} needs score vectors over the model's "
                f"{len(self.classes_)} classes, but the data has {data.n_classes} columns "
                f"({preview(data.classes)}); give one column per model class"
            )
        data = data.with_classes(self.classes_, "the data")
        # with_classes drops vectors whose columns are not the model's classes
        if self.needs_full:
            data.require_full(f"method {self.name!r}")
        return data

    def predict(
        self,
        data: TopLabelData | ArrayLike | PathLike,
        *,
        classes: ArrayLike | None = None,
        kind: str = "auto",
    ) -> np.ndarray:
        """Calibrated confidence of each row, shape (n_rows,), values in [0, 1].

        ``data`` as in :meth:`fit` (labels, if any, are ignored); a score matrix's columns
        are the fitted classes, in order, unless ``classes`` names them. For binned data,
        one value per bin (at the bin's midpoint score).
        """
        data = self._checked_input(data, classes, kind)
        out = np.asarray(self._predict(data), dtype=np.float64)
        return out

    def _checked_input(self, data, classes, kind: str) -> TopLabelData:
        """``data`` given to predict or predict_interval as TopLabelData this fitted model
        can take (:meth:`_as_input`, then the method's and the model's checks)."""
        self._check_fitted()
        data = self._as_input(data, classes, kind)
        self._check_data(data)
        return self._check_compatible(data)

    def _predict(self, data: TopLabelData) -> np.ndarray:  # pragma: no cover - abstract
        raise NotImplementedError

    def predict_interval(
        self,
        data: TopLabelData | ArrayLike | PathLike,
        level: float = 0.9,
        *,
        classes: ArrayLike | None = None,
        kind: str = "auto",
    ) -> tuple[np.ndarray, np.ndarray]:
        """Lower and upper end of a ``level`` interval on each row's calibrated confidence.

        The interval is about the estimation error of the fitted calibration map at the
        row's class and score (how well the fitting data pin Conf_k(S) down), not about the
        row's outcome; docs/intervals.md states what is random for each method family. Count
        methods: the Beta posterior of the local counts (with the shrinkage pseudo-counts as
        its prior, or Jeffreys' for the unshrunk estimators); temperature methods: the delta
        method on the fitted (log) temperature and award; ``hier-*``: the delta method on
        each class's approximate posterior; ``pooled-*`` and ``sts``: the curve's own
        interval plus the classes' spread around it (:mod:`.spread`). Everything needed is
        in the fitted model (and its JSON file): nothing is refitted.

        Parameters
        ----------
        data : as in :meth:`predict`
        level : float in (0, 1), default 0.9
            Nominal coverage (0.9: a 90% interval, 5% in each tail).

        Returns
        -------
        (lower, upper) : tuple of two ndarrays, shape (n_rows,)
            0 < lower <= predict(data) <= upper < 1 wherever the confidence is strictly
            inside (0, 1). ``uncalibrated`` estimates nothing: its interval is the point
            itself.
        """
        level = intervals.check_level(level)
        data = self._checked_input(data, classes, kind)
        lo, hi = self._interval_of_rows(data, level)
        return np.asarray(lo, dtype=np.float64), np.asarray(hi, dtype=np.float64)

    def _interval_of_rows(
        self, data: TopLabelData, level: float
    ) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`_interval` with the between-class spread added where the model measured
        one (:mod:`.spread`): what ``predict_interval``, ``describe`` and a model wrapping
        this one give."""
        lo, hi = self._interval(data, level)
        if self._spread is None:
            return lo, hi
        return spread.widen(
            self._spread, lo, hi, self._predict(data), data.score, level, data.pred
        )

    def _interval(self, data: TopLabelData, level: float) -> tuple[np.ndarray, np.ndarray]:
        """(lower, upper) per row of compatible ``data``: the per-family hook of
        :meth:`predict_interval`."""
        raise ParameterError(f"method {self.name!r} has no confidence interval")

    def _no_interval_stats(self, what: str):
        """The one-line error of a model loaded from a file without what its intervals need."""
        return ModelFileError(
            f"this {self.name!r} model file holds no {what} (saved by an older topcal); "
            f"refit it with topcal >= {intervals.INTERVAL_SINCE} to get intervals"
        )

    # -------------------------------------------------------- full vector
    def _vector_map(self):
        """The model's own whole-vector map (a fitted ``vs``/``sms``), or None: a method
        with one overrides this."""
        return None

    @property
    def vector_map_(self) -> Any:
        """The fitted whole-vector map the calibrated vector's other entries come from: the
        model's own (``vs``, ``sms``, auto's choice of one), else the one fitted beside it,
        else None (the rest is then not calibrated; see :meth:`predict_proba`)."""
        self._check_fitted()
        own = self._vector_map()
        return own if own is not None else self._vector

    def _as_input(self, data, classes, kind: str) -> TopLabelData:
        """``data`` (as :meth:`predict` takes it) as TopLabelData: a score matrix's columns
        are the fitted classes unless ``classes`` names them."""
        if isinstance(data, TopLabelData):
            return data
        return as_data(data, classes=self.classes_ if classes is None else classes, kind=kind)

    def predict_proba(
        self,
        data: TopLabelData | ArrayLike | PathLike,
        *,
        classes: ArrayLike | None = None,
        kind: str = "auto",
    ) -> np.ndarray:
        """Calibrated probability vectors, shape (n_rows, K) in ``classes_`` order.

        Row i's entry at its predicted class k(X) (the argmax of its scores) is
        ``predict``'s calibrated confidence c; the other entries are 1 - c shared by
        :attr:`vector_map_`'s distribution over the other classes. Rows sum to 1. The
        vector's argmax is k(X) where c is at least every other entry, and another class
        where the vector map finds it more probable than c (a decision taken on the vector
        follows it: :class:`~topcal.TopLabelCalibratedClassifier`'s ``predict``).

        A model without a vector map (fitted on top scores, counts or statistics alone)
        shares 1 - c in proportion to the uncalibrated scores (:func:`distribute_rest`) and
        warns (TopcalWarning) that those entries are not calibrated.

        Parameters
        ----------
        data : as in :meth:`predict`, with full score vectors (probabilities or logits)

        Returns
        -------
        ndarray (n_rows, K)
        """
        self._check_fitted()
        data = self._as_input(data, classes, kind)
        if not data.has_full:
            raise DataError(
                "a calibrated probability vector needs the full score vectors "
                "(probabilities or logits, one column per class), but this data has only "
                "top scores; use the confidence (predict) instead"
            )
        conf = self.predict(data)
        checked: TopLabelData = self._check_compatible(data)
        if not checked.has_full:  # vectors over other classes than the model's are dropped
            raise DataError(
                "a calibrated probability vector needs one score column per class of the "
                f"model ({len(self.classes_)}), but the data's columns are other classes"
            )
        return self._full_rows(checked, conf)

    def _full_rows(self, data: TopLabelData, conf: np.ndarray) -> np.ndarray:
        """:meth:`predict_proba` of compatible ``data`` whose confidences are ``conf``."""
        vmap = self.vector_map_
        if vmap is not None:
            return combine(conf, data.pred, vmap._rest(data))
        if self.is_baseline:  # the do-nothing reference: the scores' own vector
            return distribute_rest(np.exp(data.log_probs()), data.pred, conf)
        warnings.warn(
            f"this {self.name!r} model has no whole-vector map (fitted without full score "
            "vectors, or with vector=False): the entries other than the predicted class "
            "are the uncalibrated scores' shares of 1 - confidence, not calibrated; fit "
            "it on full vectors to calibrate them",
            TopcalWarning,
            stacklevel=3,
        )
        return distribute_rest(np.exp(data.log_probs()), data.pred, conf)

    # ----------------------------------------------------------- describe
    @property
    def n_params_(self) -> int:
        """Number of fitted parameters (for AIC); subclasses refine it."""
        return 0

    def describe(self) -> dict[str, Any]:
        """Fitted parameters: ``{"method", "params", "classes": {name: {...}}}`` (a
        :class:`~.hooks.Description`: a dict that Jupyter shows as ``topcal describe``'s
        summary)."""
        self._check_fitted()
        per_class = self._describe_classes()
        for row, extra in zip(per_class, self._describe_intervals()):
            row.update(extra)
        return Description(
            {
                "method": self.name,
                "params": self.get_params(),
                "score_range": list(self.score_range_),
                "classes": {
                    c: {
                        "n_tp": float(self.n_tp_[i]),
                        "n_fp": float(self.n_fp_[i]),
                        **per_class[i],
                    }
                    for i, c in enumerate(self.classes_)
                },
            }
        )

    def _describe_classes(self) -> list[dict]:
        return [{} for _ in self.classes_]

    def _describe_intervals(self) -> list[dict]:
        """Per class, the mean width of the 90% interval over 21 scores evenly across the
        class's support (``interval_width_90``); nothing for models without curves or
        interval statistics."""
        if not self.has_curve or not hasattr(self, "support_"):
            return [{} for _ in self.classes_]
        have = [k for k, sup in enumerate(self.support_) if sup is not None]
        if not have:
            return [{} for _ in self.classes_]
        # one call for every class's 21 scores: per-class calls cost K passes over K classes
        bounds = np.array([self.support_[k] for k in have], dtype=np.float64)
        s = linspace_rows(bounds[:, 0], bounds[:, 1], 21).ravel()
        pred = np.repeat(np.asarray(have, dtype=np.int64), 21)
        grid = TopLabelData(tuple(self.classes_), pred, s, tuple(self.score_range_))
        try:
            lo, hi = self._interval_of_rows(grid, DESCRIBE_LEVEL)
        except (ModelFileError, ParameterError):  # old file, or a method without intervals
            return [{} for _ in self.classes_]
        width = np.mean((np.asarray(hi) - np.asarray(lo)).reshape(len(have), 21), axis=1)
        out: list[dict] = [{} for _ in self.classes_]
        for k, w in zip(have, width.tolist()):
            out[k] = {"interval_width_90": w}
        return out

    def _get_state(self) -> dict:  # pragma: no cover - abstract
        raise NotImplementedError

    def _set_state(self, state: dict) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    def save(self, path: PathLike) -> None:
        """Write the fitted model as versioned JSON (see :func:`topcal.persist.save`)."""
        hook("save")(self, path)

    def adapt(
        self,
        data: TopLabelData | None = None,
        *,
        priors: ArrayLike | dict[str, float] | None = None,
        estimator: str = "em",
        source_data: TopLabelData | None = None,
        n_bootstrap: int = 100,
        seed: int = 0,
        shrink: float | str = "auto",
    ) -> "Calibrator":
        """A copy of this model adapted to a use set's class priors (label shift).

        Give the unlabelled use set ``data`` (priors estimated by ``estimator``, "em" or
        "bbse"; ``source_data``, the labelled test set with full vectors, makes "em" run on
        BCTS vectors) or ``priors=`` (dict class -> prior, or one value per class).
        ``shrink`` ("auto" or a number in [0, 1]): how far to move towards estimated priors
        (the safety step). :func:`topcal.labelshift.adapt` takes further options. This model
        is unchanged.
        """
        adapt = hook("adapt")
        return adapt(
            self,
            data,
            priors=priors,
            estimator=estimator,
            source_data=source_data,
            n_bootstrap=n_bootstrap,
            seed=seed,
            shrink=shrink,
        )
