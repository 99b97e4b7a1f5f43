"""The calibrator contract shared by every method.

* Parameters are keyword-only ``__init__`` arguments, stored untouched and
  checked in ``fit`` against ``_parameter_constraints``.
* ``fit(data)`` returns ``self`` and sets attributes ending in ``_``.
* ``predict(data)`` returns the calibrated confidence of each row: the
  probability that the row's predicted class is right.
* ``describe()`` returns the fitted parameters per class (JSON-ready);
  ``to_dict()`` / ``from_dict()`` (and :mod:`topcal.persist`) save and load.

Calibration is always per predicted class: class k's function is fitted on
the positives of k (the rows with k(X) = k) and nothing else.

:class:`ScoreCalibrator` is the base of methods whose confidence is a
function Conf_k(S) of the top score alone (histogram, cumulative, kernel
density); they fit class by class from the class's TP/FP scores and weights
and expose ``curve(k)``.
"""

from __future__ import annotations

import inspect
import warnings
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from .._params import validate_params
from ..data import ClassView, TopLabelData
from ..errors import DataError, DegenerateClassWarning, ModelFileError, NotFittedError, TopcalError

__all__ = ["Calibrator", "ScoreCalibrator", "Curve", "to_jsonable", "finite_array"]


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

    # ------------------------------------------------------------- params
    @classmethod
    def _param_names(cls) -> list[str]:
        sig = inspect.signature(cls.__init__)
        return [p.name for p in sig.parameters.values() if p.name != "self"]

    def get_params(self) -> dict[str, Any]:
        """The constructor parameters, as given."""
        return {k: getattr(self, k) for k in self._param_names()}

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.get_params().items())
        return f"{type(self).__name__}({args})"

    def _validate_params(self) -> None:
        validate_params(self.name, self._parameter_constraints, self.get_params())

    # ---------------------------------------------------------------- fit
    def fit(self, data: TopLabelData) -> "Calibrator":
        """Fit one calibration function per predicted class on labelled ``data``.

        Returns
        -------
        self
        """
        self._validate_params()
        if not isinstance(data, TopLabelData):
            raise DataError(
                f"{self.name}.fit expects a TopLabelData, got {type(data).__name__}; "
                "build one with TopLabelData.from_probs / from_scores / from_binned"
            )
        data.require_labels(f"fitting {self.name!r}")
        if self.needs_full:
            data.require_full(f"method {self.name!r}")
        self.classes_ = data.classes
        self.score_range_ = data.score_range
        tp, fp = data.class_counts()
        self.n_tp_ = tp
        self.n_fp_ = fp
        empty = [c for c, n in zip(data.classes, tp + fp) if n == 0]
        if empty:
            warnings.warn(
                f"{self.name}: class(es) {empty} are never predicted in the fitting data; "
                "their confidence falls back to the uncalibrated score",
                DegenerateClassWarning,
                stacklevel=2,
            )
        self._fit(data)
        return self

    def _fit(self, data: TopLabelData) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    # ------------------------------------------------------------ predict
    def _check_fitted(self) -> None:
        if not hasattr(self, "classes_"):
            raise NotFittedError(f"this {self.name!r} calibrator is not fitted yet; call fit(data) first")

    def _check_compatible(self, data: TopLabelData) -> None:
        if not isinstance(data, TopLabelData):
            raise DataError(f"predict expects a TopLabelData, got {type(data).__name__}")
        if tuple(data.classes) != tuple(self.classes_):
            raise DataError(
                f"the data's classes {list(data.classes)} differ from the model's {list(self.classes_)}; "
                "pass classes=[...] (or the same probability columns, in the same order) as when fitting"
            )
        if tuple(data.score_range) != tuple(self.score_range_):
            raise DataError(
                f"the data's score range {tuple(data.score_range)} differs from the model's "
                f"{tuple(self.score_range_)}; declare the same score range as when fitting"
            )
        if self.needs_full:
            data.require_full(f"method {self.name!r}")

    def predict(self, data: TopLabelData) -> np.ndarray:
        """Calibrated confidence of each row, shape (n_rows,), values in [0, 1].

        For binned data, one value per bin (at the bin's midpoint score).
        """
        self._check_fitted()
        self._check_compatible(data)
        out = np.asarray(self._predict(data), dtype=np.float64)
        return out

    def _predict(self, data: TopLabelData) -> np.ndarray:  # pragma: no cover - abstract
        raise NotImplementedError

    # ----------------------------------------------------------- describe
    @property
    def n_params_(self) -> int:
        """Number of fitted parameters (for AIC); subclasses refine it."""
        return 0

    def describe(self) -> dict[str, Any]:
        """Fitted parameters: ``{"method", "params", "classes": {name: {...}}}``."""
        self._check_fitted()
        per_class = self._describe_classes()
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

    # -------------------------------------------------------- persistence
    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict: method, params, classes, score range and fitted state."""
        self._check_fitted()
        return {
            "method": self.name,
            "params": self.get_params(),
            "classes": list(self.classes_),
            "score_range": [float(v) for v in self.score_range_],
            "n_tp": [float(v) for v in self.n_tp_],
            "n_fp": [float(v) for v in self.n_fp_],
            "state": self._get_state(),
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Calibrator":
        """Rebuild a fitted calibrator from :meth:`to_dict` output.

        Raises ModelFileError for anything missing or inconsistent.
        """
        try:
            params = dict(d["params"])
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
            obj._set_state(d["state"])
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
        from ..persist import save

        save(self, path)


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
    """

    def _fit(self, data: TopLabelData) -> None:
        states = []
        support = []
        for k in range(data.n_classes):
            view = data.class_view(k)
            w = view.tp + view.fp
            if w.sum() <= 0:
                states.append(None)
                support.append(None)
                continue
            s = view.score[w > 0]
            if data.is_binned:
                edges = data.bin_edges[view.index[w > 0]]
                support.append((float(edges[:, 0].min()), float(edges[:, 1].max())))
            else:
                support.append((float(s.min()), float(s.max())))
            states.append(self._fit_class(view, k))
        self.class_state_ = states
        self.support_ = support

    def _fit_class(self, view: ClassView, k: int) -> dict:  # pragma: no cover - abstract
        raise NotImplementedError

    def _predict_class(self, state: dict, score: np.ndarray) -> np.ndarray:  # pragma: no cover
        raise NotImplementedError

    def _uncalibrated(self, score: np.ndarray) -> np.ndarray:
        lo, hi = self.score_range_
        return np.clip((score - lo) / (hi - lo), 0.0, 1.0)

    def _predict_scores(self, k: int, score: np.ndarray) -> np.ndarray:
        state = self.class_state_[k]
        if state is None:
            return self._uncalibrated(score)
        return self._predict_class(state, score)

    def _predict(self, data: TopLabelData) -> np.ndarray:
        out = np.empty(data.n_rows, dtype=np.float64)
        for k in range(len(self.classes_)):
            idx = np.flatnonzero(data.pred == k)
            if idx.size:
                out[idx] = self._predict_scores(k, data.score[idx])
        return out

    def _class_index(self, k) -> int:
        if isinstance(k, (int, np.integer)) and not isinstance(k, bool):
            if 0 <= k < len(self.classes_):
                return int(k)
        elif str(k) in self.classes_:
            return self.classes_.index(str(k))
        raise TopcalError(f"unknown class {k!r}; choose one of {list(self.classes_)} or an index 0..{len(self.classes_) - 1}")

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
        return {
            "class_state": [to_jsonable(s) for s in self.class_state_],
            "support": [None if s is None else list(s) for s in self.support_],
        }

    def _set_state(self, state: dict) -> None:
        cs = state["class_state"]
        sup = state["support"]
        if len(cs) != len(self.classes_) or len(sup) != len(self.classes_):
            raise ValueError("per-class state has the wrong number of classes")
        self.class_state_ = [None if s is None else self._load_class_state(s) for s in cs]
        self.support_ = [None if s is None else tuple(float(v) for v in s) for s in sup]

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
