"""Adapting a fitted calibrator to new class priors (:func:`adapt`): the
:class:`AdaptedCalibrator`, and reading priors from a CSV file."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any, cast

import numpy as np

from ..calibrators.base import Calibrator, Curve, register_hook
from ..calibrators.fullvector import combine
from ..calibrators.registry import get_class, register
from ..calibrators.wrapper import Wrapper
from ..data import TopLabelData, preview
from ..errors import DataError, ModelFileError, ParameterError, TopcalError
from ..evidence.confusion import ConfusionStats
from .estimators import ADAPTED_METHOD, FP_PSEUDOCOUNT, PRIOR_SUM_TOL, adapt_confidence
from .estimates import (
    PriorEstimate,
    check_nonneg,
    check_shrink,
    check_use_data,
    confusion_of,
    estimate_priors,
    fp_weight,
    top_label_posterior,
)

__all__ = [
    "adapt",
    "AdaptedCalibrator",
    "read_priors",
]


def _given_priors(priors, classes: tuple[str, ...]) -> np.ndarray:
    K = len(classes)
    if isinstance(priors, dict):
        unknown = [str(c) for c in priors if str(c) not in classes]
        if unknown:
            raise DataError(
                f"priors name class(es) {preview(unknown)} the model never saw (its classes: "
                f"{preview(classes)})"
            )
        missing = [c for c in classes if c not in {str(k) for k in priors}]
        if missing:
            raise DataError(
                f"priors miss class(es) {preview(missing)}; give every class a prior (0 for "
                "absent classes)"
            )
        by_name = {str(k): v for k, v in priors.items()}
        values = [by_name[c] for c in classes]
    else:
        values = priors
    try:
        p = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError):
        raise DataError(f"priors must be numbers, got {values!r}") from None
    if p.shape != (K,):
        raise DataError(f"priors must hold one value per class ({K}), got shape {p.shape}")
    if not np.all(np.isfinite(p)) or np.any(p < 0):
        i = int(np.flatnonzero(~np.isfinite(p) | (p < 0))[0])
        raise DataError(
            f"prior of class {classes[i]!r} is {p[i]}; priors must be finite and >= 0"
        )
    if abs(p.sum() - 1.0) > PRIOR_SUM_TOL:
        raise DataError(
            f"priors sum to {p.sum():.6g}, not 1 (tolerance {PRIOR_SUM_TOL}); give class "
            f"frequencies"
        )
    return p / p.sum()


def adapt(
    model: Calibrator,
    data: TopLabelData | None = None,
    *,
    priors=None,
    estimator: str = "em",
    source_data: TopLabelData | None = None,
    prior_strength: float | None = None,
    n_bootstrap: int = 100,
    level: float = 0.95,
    seed: int = 0,
    fp_pseudocount: float = FP_PSEUDOCOUNT,
    shrink="auto",
) -> "AdaptedCalibrator":
    """A copy of ``model`` whose confidences hold for the use set's class priors.

    Give either the unlabelled use set ``data`` (priors estimated with ``estimator``, see
    :func:`estimate_priors`) or ``priors`` (a dict class -> prior naming every class, or a
    sequence in the model's class order; must sum to 1). Adapting an adapted model starts
    again from its source model. ``estimator``, ``source_data``, ``prior_strength``,
    ``n_bootstrap``, ``level`` and ``seed`` are passed to :func:`estimate_priors`.
    ``priors`` may also be a :class:`PriorEstimate` (e.g. from :func:`estimate_priors` with
    another model fitted on the same test set), whose intervals are kept. ``fp_pseudocount``
    (default 10) shrinks each class's false-positive mix towards the test set's overall one,
    in false positives (0: none). ``shrink`` (default "auto", estimated priors only) is the
    safety step: how far to move from the source priors towards the estimate, chosen by
    simulated shift on the model's own counts so that an unreliable estimator leaves the
    model (nearly) as it is; a number in [0, 1] fixes it (1: the estimate as it is). See
    :func:`estimate_priors` and :mod:`topcal.labelshift.safety`.

    Returns
    -------
    AdaptedCalibrator
        ``model`` itself is left unchanged.
    """
    if (data is None) == (priors is None):
        raise ParameterError(
            "give exactly one of data (the unlabelled use set, to estimate priors) or "
            "priors=..."
        )
    check_shrink(shrink)
    if priors is not None and shrink != "auto":
        raise ParameterError(
            "shrink applies to estimated priors; given priors are used as they are"
        )
    base = model.base_ if isinstance(model, AdaptedCalibrator) else model
    stats = confusion_of(base)
    check_nonneg("fp_pseudocount", fp_pseudocount)
    ps = stats.source_priors()
    if priors is not None:
        est = _given_estimate(priors, base, ps)
    else:
        est = estimate_priors(
            base,
            data,
            estimator=estimator,
            source_data=source_data,
            prior_strength=prior_strength,
            n_bootstrap=n_bootstrap,
            level=level,
            seed=seed,
            fp_pseudocount=fp_pseudocount,
            shrink=shrink,
        )
    return AdaptedCalibrator._build(base, est, float(fp_pseudocount))


def _given_estimate(priors, base: Calibrator, ps: np.ndarray) -> PriorEstimate:
    """The :class:`PriorEstimate` of priors given to :func:`adapt` (a PriorEstimate made with
    ``base``, a dict or a sequence), checked against the source priors ``ps``."""
    if isinstance(priors, PriorEstimate):
        if tuple(priors.classes) != tuple(base.classes_) or not np.allclose(
            priors.source, ps, rtol=0, atol=1e-12
        ):
            raise DataError(
                "the PriorEstimate was made with a model fitted on other test data (its "
                "classes or source priors differ); estimate again with this model"
            )
        return priors
    p = _given_priors(priors, tuple(base.classes_))
    bad = [c for c, a, b in zip(base.classes_, p, ps) if a > 0 and b <= 0]
    if bad:
        raise DataError(
            f"class(es) {preview(bad)} never occur in the test set the model was "
            "fitted on, so their prior ratio is undefined; give them prior 0 or refit "
            "on test data that includes them"
        )
    return PriorEstimate(
        tuple(base.classes_),
        ps,
        p,
        None,
        None,
        "given",
        0,
        0.95,
        0,
        "given by the user",
        1.0,
        "priors given by the user are used as they are",
    )


# ------------------------------------------------------------ the adapted model
@register(listed=False)
class AdaptedCalibrator(Wrapper):
    """A fitted calibrator moved to new class priors (build it with :func:`adapt`).

    Fitted attributes
    -----------------
    base_ : Calibrator
        The source model (fitted on the labelled test set), unchanged.
    estimate_ : PriorEstimate
        Source and use-set priors (with intervals when estimated).
    weights_ : ndarray (K,)
        Prior ratios w = pi_u / pi_s.
    fp_pseudocount_ : float
        Shrinkage of the false-positive mixes (see :func:`adapt`).

    ``predict`` returns the source model's confidence with its odds multiplied by w_k /
    wbar_FP (module docstring); ``posterior`` the adapted P(Y | k, S) over all classes and
    ``redecide`` its argmax.
    """

    name = ADAPTED_METHOD
    summary = "a fitted calibrator adapted to new class priors (topcal adapt)"

    #: its evidence (statistics, label-shift counts) is its source model's; its confidences
    #: are its own
    owns_evidence = False
    predicts_as_inner = False
    base_: Calibrator | None = None  # the source model, once built or loaded

    def __init__(self):
        pass

    @property
    def inner_(self) -> Calibrator:  # type: ignore[override]  # read-only here (Wrapper allows it)
        """The source model (``base_``)."""
        return self.base_

    def summary_line(self) -> str:
        e = self.estimate_
        return (
            f"{self.base_.name} adapted to the use set's class priors ({e.estimator}, "
            f"{e.n_use:g} use rows)"
        )

    def _keeps_stats(self) -> bool:
        return (
            # new labelled data go to the source model; the priors are estimated again after
            False
        )

    def _no_stats_reason(self) -> str:
        return (
            "this is an adapted model (topcal adapt), which is not updated itself: update "
            "the model it was adapted from with the new labelled data, then adapt the "
            "updated model again"
        )

    @classmethod
    def _build(
        cls, base: Calibrator, est: PriorEstimate, fp_pseudocount: float
    ) -> "AdaptedCalibrator":
        obj = cls()
        obj._attach(base, est, fp_pseudocount)
        obj.n_tp_ = base.n_tp_
        obj.n_fp_ = base.n_fp_
        return obj

    def _attach(self, base: Calibrator, est: PriorEstimate, fp_pseudocount: float) -> None:
        self.base_ = base
        self.fp_pseudocount_ = fp_pseudocount
        self.estimate_ = est
        self.weights_ = est.ratios
        self.classes_ = tuple(base.classes_)
        self.score_range_ = tuple(base.score_range_)

    def fit(self, data):
        raise TopcalError(
            "an adapted model is not refitted: fit the source method, then adapt it again"
        )

    @property
    def n_params_(self) -> int:
        return self.base_.n_params_ + len(self.classes_)

    def _check_compatible(self, data) -> TopLabelData:
        return super()._check_compatible(check_use_data(self, data))

    def _fp_weight(self, data: TopLabelData) -> np.ndarray:
        """Each row's false-positive weight wbar (:func:`fp_weight`) at the new priors."""
        return fp_weight(
            cast(ConfusionStats, self.base_.evidence_.confusion),  # (set in fit: confusion_of)
            data.pred,
            data.score,
            self.weights_,
            self.fp_pseudocount_,
        )

    def _predict(self, data: TopLabelData) -> np.ndarray:
        c = self.base_.predict(data)
        wbar = self._fp_weight(data)
        return adapt_confidence(c, self.weights_[data.pred], wbar)

    def _full_rows(self, data: TopLabelData, conf: np.ndarray) -> np.ndarray:
        """``predict_proba``'s rows: the adapted confidence at k(X); the source's vector
        map's other entries times the prior ratios w_j, renormalised (Bayes' rule under
        label shift)."""
        vmap = self.vector_map_
        if vmap is None:
            return super()._full_rows(data, conf)
        rest = vmap._rest(data) * self.weights_
        total = rest.sum(axis=1, keepdims=True)
        np.divide(rest, total, out=rest, where=total > 0)
        return combine(conf, data.pred, rest)

    def _interval(self, data: TopLabelData, level: float):
        """The base model's interval moved to the new priors the way its confidence is (the
        map c -> w c / (w c + wbar (1 - c)) is increasing). The priors are held fixed: their
        own uncertainty (``topcal adapt --bootstrap``) is not in the interval
        (docs/intervals.md)."""
        lo, hi = self.base_._interval_of_rows(data, level)
        wbar = self._fp_weight(data)
        w = self.weights_[data.pred]
        return adapt_confidence(lo, w, wbar), adapt_confidence(hi, w, wbar)

    def posterior(self, data: TopLabelData) -> np.ndarray:
        """Adapted P(Y = j | k, S) of each row, shape (n, K) (rows sum to 1)."""
        self._check_fitted()
        data = self._check_compatible(data)
        return top_label_posterior(
            self.base_.evidence_.confusion,
            data,
            self.base_.predict(data),
            self.weights_,
            self.fp_pseudocount_,
        )

    def redecide(self, data: TopLabelData) -> tuple[np.ndarray, np.ndarray]:
        """Re-decided class and its probability per row: argmax of :meth:`posterior`.

        Under strong shift the most likely true class behind a prediction of k can be
        another class. Returns (class indices, probabilities).
        """
        post = self.posterior(data)
        new = np.argmax(post, axis=1)
        return new, post[np.arange(post.shape[0]), new]

    @property
    def has_curve(self) -> bool:
        return self.base_.has_curve

    def curve(self, k, score=None, *, n_points: int = 401) -> Curve:
        """The adapted Conf_k on a score grid (score-based source methods only)."""
        self._check_fitted()
        if not self.has_curve:
            raise TopcalError(
                f"method {self.base_.name!r} has no per-class curve (it needs the full score "
                f"vector)"
            )
        src = cast(Any, self.base_).curve(k, score, n_points=n_points)  # has_curve models
        i = self.classes_.index(src.class_name)
        pred = np.full(src.score.shape, i)
        wbar = fp_weight(
            cast(ConfusionStats, self.base_.evidence_.confusion),
            pred,
            src.score,
            self.weights_,
            self.fp_pseudocount_,
        )
        return Curve(
            src.class_name,
            src.score,
            adapt_confidence(src.confidence, self.weights_[i], wbar),
            src.support,
        )

    def describe(self) -> dict:
        """The source model's description plus, per class, source and use priors (with
        intervals)."""
        self._check_fitted()
        d = self.base_.describe()
        e = self.estimate_
        d["label_shift"] = {
            "adapted": True,
            "estimator": e.estimator,
            "basis": e.basis,
            "n_use": e.n_use,
            "fp_pseudocount": self.fp_pseudocount_,
            "shrink": e.shrink,
            "shrink_reason": e.shrink_reason,
            "interval": _interval_text(e),
        }
        for i, c in enumerate(self.classes_):
            info = d["classes"][c]
            info["source_prior"] = float(e.source[i])
            info["use_prior"] = float(e.priors[i])
            if e.lower is not None:
                info["use_prior_interval"] = [float(e.lower[i]), float(e.upper[i])]
            if e.estimated is not None:
                info["estimated_prior"] = float(e.estimated[i])
            info["prior_ratio"] = float(self.weights_[i])
        return d

    def _get_state(self) -> dict:
        return {
            "base": self.base_.to_dict(),
            "estimate": self.estimate_.to_dict(),
            "fp_pseudocount": self.fp_pseudocount_,
        }

    def _set_state(self, state: dict) -> None:
        base_doc = state["base"]
        if not isinstance(base_doc, dict):
            raise ValueError("the source model must be a plain calibrator")
        try:
            cls = get_class(base_doc.get("method"), unlisted=True)
        except ParameterError as exc:
            raise ModelFileError(f"adapted model: {exc}") from None
        if issubclass(cls, AdaptedCalibrator):
            raise ValueError("the source model must be a plain calibrator")
        base = cls.from_dict(base_doc)
        if tuple(base.classes_) != tuple(self.classes_) or base.evidence_.confusion is None:
            raise ValueError("the source model's classes or confusion counts do not match")
        a = float(state["fp_pseudocount"])
        if not (np.isfinite(a) and a >= 0):
            raise ValueError("fp_pseudocount must be finite and >= 0")
        self._attach(base, PriorEstimate.from_dict(state["estimate"], tuple(self.classes_)), a)


def read_priors(path) -> dict[str, float]:
    """Read use-set priors from a CSV with columns ``class,prior`` (one row per class)."""
    p = Path(path)
    try:
        with p.open(
            newline="", encoding="utf-8-sig"
        ) as fh:  # -sig: a byte-order mark (Excel) is not a name
            rows = list(csv.reader(fh))
    except FileNotFoundError:
        raise DataError(f"priors file {str(p)!r} does not exist; check the path") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise DataError(f"cannot read priors file {str(p)!r}: {exc}") from None
    rows = [r for r in rows if any(x.strip() for x in r)]
    if not rows or [x.strip().lower() for x in rows[0]] != ["class", "prior"]:
        raise DataError(
            f"priors file {str(p)!r} must be a CSV with the header 'class,prior' and one "
            "row per class"
        )
    out: dict[str, float] = {}
    for i, r in enumerate(rows[1:], 2):
        if len(r) != 2:
            raise DataError(
                f"priors file {str(p)!r} line {i} has {len(r)} fields; expected 'class,prior'"
            )
        name = r[0].strip()
        if name in out:
            raise DataError(f"priors file {str(p)!r} names class {name!r} twice (line {i})")
        try:
            out[name] = float(r[1])
        except ValueError:
            raise DataError(
                f"priors file {str(p)!r} line {i}: prior {r[1]!r} is not a number"
            ) from None
    return out


register_hook("adapt", adapt)  # Calibrator.adapt (calibrators sit below this layer)


def _interval_text(e) -> str:
    """What the use priors' intervals are, in words (``describe``'s ``interval``)."""
    if e.lower is None:
        return "none"
    if e.shrink == 0.0 and e.estimator != "given":
        # estimate_priors runs no resample here: the priors in use are the source ones
        return "the source priors (not adapted, so no resample was needed)"
    return f"{e.level:.0%} bootstrap percentile, {e.n_bootstrap} resamples"

