"""``auto``: the method with the smallest cross-validated top-label NLL.

Candidates (default): the uncalibrated score, the shrunk per-class score
methods ``kde-mon2``, ``hist`` and ``cum-opt``, and the temperature family:
``sts``, ``csts``, ``tswa`` where the data carry full score vectors, and the
binary variants ``bts``, ``btswa`` (per-class Platt on logit(S)) always.
Every candidate is cross-fitted on the same seeded K folds of the fitting
data (:func:`topcal.data.kfold_split`: stratified by predicted class; binned
counts dealt by a multinomial draw, as ``topcal compare`` does); the one
with the smallest overall held-out NLL is refitted on all the data. The
choice is global (one method for every class): a per-class choice would
pick among noisy estimates on exactly the small classes that need help.
Because the uncalibrated score is a candidate, ``auto`` is never worse
than doing nothing *by the cross-validation's estimate*; a candidate that
fails in a fold is dropped (recorded with its error), never fatal.

The model file records the choice and the whole cross-validation table
(overall and per-class NLL of every candidate); ``topcal describe`` shows it.
"""

from __future__ import annotations

import warnings

import numpy as np

from .._params import Interval, NoneOr
from ..data import TopLabelData, kfold_split
from ..errors import DegenerateClassWarning, ParameterError, TopcalError, TopcalWarning
from ..metrics import nll
from .base import Calibrator, to_jsonable
from .registry import available_methods, calibrator, get_class, register

__all__ = ["Auto", "DEFAULT_CANDIDATES"]

#: Candidates in order of preference on ties (simplest first).
DEFAULT_CANDIDATES = ("uncalibrated", "kde-mon2", "hist", "cum-opt", "sts", "csts", "tswa", "bts", "btswa")


class _Candidates:
    """None, or a non-empty list of registered method names other than 'auto'."""

    def ok(self, v) -> bool:
        if v is None:
            return True
        if isinstance(v, str) or not isinstance(v, (list, tuple)) or not v:
            return False
        names = set(available_methods()) - {"auto"}
        return all(isinstance(n, str) and n in names for n in v) and len(set(v)) == len(v)

    def __str__(self) -> str:
        return "None (the defaults) or a list of distinct method names from: " + ", ".join(
            n for n in available_methods() if n != "auto")


@register
class Auto(Calibrator):
    """Choose the calibration method by K-fold cross-validated top-label NLL.

    Parameters
    ----------
    candidates : list of str or None, default None
        Methods to choose from; None: :data:`DEFAULT_CANDIDATES` that can
        run on the data (the full-vector ones only with full vectors).
    folds : int >= 2, default 5
        Cross-validation folds.
    seed : int >= 0, default 0
        Seed of the fold split.

    Attributes
    ----------
    method_ : str
        The chosen method.
    model_ : Calibrator
        The chosen method fitted on all the data.
    cv_ : dict
        ``{method: {"nll": overall, "per_class": [...], "error": str or None}}``:
        held-out NLL of every candidate (mean over samples; per class, mean
        over the class's positives).
    """

    name = "auto"
    summary = "the candidate (shrunk kde-mon2, hist, cum-opt, temperature family, uncalibrated) " \
              "with the smallest K-fold cross-validated NLL"
    _parameter_constraints = {
        "candidates": _Candidates(),
        "folds": Interval(2, 100, integer=True),
        "seed": NoneOr(Interval(0, 2**32 - 1, integer=True)),
    }

    def __init__(self, *, candidates=None, folds: int = 5, seed: int = 0):
        self.candidates = candidates
        self.folds = folds
        self.seed = seed

    def _names(self, data: TopLabelData) -> list[str]:
        names = list(DEFAULT_CANDIDATES if self.candidates is None else self.candidates)
        run = [n for n in names if not get_class(n).needs_full or data.has_full]
        if not run:
            raise ParameterError(
                f"auto: none of the candidates {names} can run on data without full score vectors; "
                "add a score method (kde-mon2, hist, ...) or bts/btswa"
            )
        return run

    def _fit(self, data: TopLabelData) -> None:
        names = self._names(data)
        n_folds = int(self.folds)
        if data.n_samples < 2 * n_folds or (not data.is_binned and data.n_rows < 2 * n_folds):
            # nothing can be judged out of sample: doing nothing is the only safe choice
            warnings.warn(
                f"auto: {data.n_samples:g} samples are too few for {n_folds}-fold cross-validation "
                f"(at least {2 * n_folds} needed); keeping the uncalibrated score",
                DegenerateClassWarning,
                stacklevel=3,
            )
            self.method_, self.cv_ = "uncalibrated", {}
            self.cv_samples_ = float(data.n_samples)
            self.model_ = calibrator("uncalibrated").fit(data)
            return
        folds = kfold_split(data, n_folds, seed=int(self.seed or 0))
        target = TopLabelData.concat(folds)
        conf = {n: [] for n in names}
        errors: dict[str, str | None] = {n: None for n in names}
        for f in range(n_folds):
            train = TopLabelData.concat([folds[g] for g in range(n_folds) if g != f])
            for n in names:
                if errors[n] is not None:
                    continue
                try:
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore")
                        conf[n].append(calibrator(n).fit(train).predict(folds[f]))
                except TopcalError as exc:
                    errors[n] = f"{type(exc).__name__}: {exc}"
        cv = {}
        for n in names:
            if errors[n] is None:
                m = nll(target, np.concatenate(conf[n]))
                per = [float(v) if np.isfinite(v) else None for v in m.per_class]
                cv[n] = {"nll": float(m.overall), "per_class": per, "error": None}
            else:
                cv[n] = {"nll": None, "per_class": None, "error": errors[n]}
        ok = [n for n in names if cv[n]["nll"] is not None]
        if not ok:
            raise TopcalError(
                "auto: every candidate failed in cross-validation (" +
                "; ".join(f"{n}: {cv[n]['error']}" for n in names) + "); choose a method yourself"
            )
        best = min(ok, key=lambda n: cv[n]["nll"])  # first of the minimisers: the simplest on ties
        self.method_ = best
        self.cv_ = cv
        self.cv_samples_ = float(data.n_samples)
        # auto updates from its own score statistics, never from a chosen full-vector method's
        # (sts/csts keep no loss tables by default)
        self.model_ = calibrator(best).fit(data)

    def _refit(self, stats) -> None:
        """``update``: refit the chosen method from the merged statistics; keep the choice.

        Re-choosing would need the cross-validation to run again on all the
        data: fit ``auto`` again (from statistics: ``fit(stats.to_data())``,
        e.g. ``topcal fit --chunk-rows``; with full score vectors: in memory).
        The cross-validation table stays that of the original fit, and
        ``cv_samples_`` says how many samples it was run on.
        """
        cls = get_class(self.method_)
        params = self.model_.get_params()
        if cls.needs_full:
            # the full vector has no mergeable statistics: the best candidate that can be refitted from
            # them, by the first fit's cross-validation (a warning says which)
            ok = [n for n, r in self.cv_.items() if r.get("nll") is not None and not get_class(n).needs_full]
            if not ok:
                raise ParameterError(
                    f"auto chose {self.method_!r}, which recalibrates the full score vector and has no "
                    "mergeable statistics, and no score method ran in its cross-validation; refit auto on all "
                    "the data (old and new) instead of updating"
                )
            new = min(ok, key=lambda n: self.cv_[n]["nll"])
            warnings.warn(
                f"auto: {self.method_!r}, its choice, recalibrates the full score vector and cannot be updated "
                f"from statistics; the update refits {new!r}, the best score method in the first fit's "
                f"cross-validation (NLL {self.cv_[new]['nll']:.4g} vs {self.cv_[self.method_]['nll']:.4g}); "
                "refit auto on all the data to choose again",
                TopcalWarning,
                stacklevel=4,
            )
            self.method_, cls, params = new, get_class(new), {}
        data = stats.to_data()
        model = cls(**params)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DegenerateClassWarning)
            model.fit(data)
        self.model_ = model
        self.n_tp_, self.n_fp_ = data.class_counts()
        self.stats_ = stats

    def _predict(self, data: TopLabelData) -> np.ndarray:
        # Calibrator.predict checks the data (any form it accepts) first
        return self.model_.predict(data)

    @property
    def has_curve(self) -> bool:
        return self.model_.has_curve

    def curve(self, k, score=None, *, n_points: int = 401):
        """The chosen method's curve (score methods, bts and btswa; see ScoreCalibrator.curve)."""
        self._check_fitted()
        if not self.model_.has_curve:
            raise ParameterError(
                f"auto chose {self.method_!r}, which recalibrates the score vector and has no curve of "
                "the score alone; plot its confidences against the score instead"
            )
        return self.model_.curve(k, score, n_points=n_points)

    @property
    def n_params_(self) -> int:
        return self.model_.n_params_

    def describe(self) -> dict:
        d = super().describe()
        d["chosen"] = self.method_
        d["model"] = self.model_.describe()
        d["cross_validation"] = {
            "folds": int(self.folds), "seed": int(self.seed or 0), "samples": self.cv_samples_,
            "nll": {n: v["nll"] for n, v in self.cv_.items()},
            "errors": {n: v["error"] for n, v in self.cv_.items() if v["error"]},
        }
        return d

    def _describe_classes(self) -> list[dict]:
        out = []
        for i, _ in enumerate(self.classes_):
            row = {}
            for n, v in self.cv_.items():
                if v["per_class"] is not None:
                    row[f"cv_nll_{n}"] = v["per_class"][i]
            out.append(row)
        return out

    def _get_state(self) -> dict:
        return {"method": self.method_, "model": self.model_.to_dict(stats=False), "cv": to_jsonable(self.cv_),
                "cv_samples": self.cv_samples_}

    def _set_state(self, state: dict) -> None:
        method = str(state["method"])
        if method == "auto":
            raise ValueError("auto cannot choose itself")
        model = get_class(method).from_dict(state["model"])
        if model.name != method or tuple(model.classes_) != tuple(self.classes_):
            raise ValueError("the chosen model does not match the auto model's method and classes")
        cv = state["cv"]
        if not isinstance(cv, dict) or (cv and method not in cv):
            raise ValueError("the cross-validation table is missing the chosen method")
        self.method_, self.model_, self.cv_ = method, model, cv
        # files before format 2: the cross-validation ran on all the model's data
        self.cv_samples_ = float(state.get("cv_samples", float(self.n_tp_.sum() + self.n_fp_.sum())))
