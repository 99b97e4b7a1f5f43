"""A scikit-learn meta-estimator: any classifier, top-label calibrated.

:class:`TopLabelCalibratedClassifier` wraps a scikit-learn classifier the way
``sklearn.calibration.CalibratedClassifierCV`` does, but calibrates the
*top-label* confidence with any topcal method, per predicted class::

    clf = HistGradientBoostingClassifier().fit(X_train, y_train)
    cal = topcal.TopLabelCalibratedClassifier(clf, method="kde-mon2").fit(X_cal, y_cal)
    cal.predict_confidence(X_test)      # P(prediction is right), calibrated

Needs scikit-learn (``pip install topcal[sklearn]``).

Scores. The wrapped classifier's ``predict_proba`` is used when it has one (probabilities),
else its ``decision_function`` (read as logits; a binary classifier's single margin d
becomes the logits (0, d)).

Fitting. ``cv=None`` (default): the classifier is already fitted and is not refitted;
``fit(X, y)`` fits only the calibrator, on the classifier's scores for (X, y), which must be
data the classifier was not trained on. ``cv=K`` (an integer, or any scikit-learn CV
splitter): like ``CalibratedClassifierCV(ensemble=False)``: the classifier is fitted on K -
1 folds and scores the held-out fold, K times (stratified folds for an integer), one
calibrator is fitted on those out-of-fold scores, and the classifier is then refitted on all
of (X, y) for prediction.

``predict_proba``: the calibrated full vector of the fitted calibrator
(:meth:`topcal.calibrators.base.Calibrator.predict_proba`): the entry of the class the
classifier's scores rank first, k(X), is the calibrated top-label confidence c (what
``predict_confidence`` returns); the other classes share 1 - c as the calibrator's
whole-vector map (``vs``/``sms``: the calibrator's own, auto's choice, or one fitted beside
it on the same scores) distributes the mass among them. Rows sum to 1.

``predict``: the argmax of ``predict_proba``, the first column on exact ties (scikit-learn's
contract, ``predict == classes_[argmax(predict_proba)]``, on every row). It is k(X) wherever
c is at least every other calibrated entry; where the calibrated vector finds another class
more probable than the miscalibrated top one (c below that class's share, always so when c <
1/K), ``predict`` follows the vector. It can therefore differ from the classifier's own
``predict`` on a few rows (and does for classifiers whose ``predict`` is not the argmax of
their scores, such as ``SVC(probability=True)``, which votes one-vs-one).
"""

from __future__ import annotations

import copy
import re
import warnings
from typing import Any

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin, MetaEstimatorMixin, clone
from sklearn.model_selection import check_cv
from sklearn.exceptions import NotFittedError as SklearnNotFittedError
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_is_fitted, column_or_1d

from ._typing import ArrayLike, MatrixLike
from .calibrators import calibrator, get_class
from .data import TopLabelData
from .errors import (
    DataError,
    DegenerateClassWarning,
    NotFittedError,
    ParameterError,
    TopcalWarning,
)

__all__ = ["TopLabelCalibratedClassifier"]


class _Unfitted(NotFittedError, SklearnNotFittedError):
    """Used before fit: topcal's NotFittedError and scikit-learn's alike (either ``except``
    catches it)."""


#: The parameters of the meta-estimator itself; every other keyword is a parameter of the
#: calibration method.
_OWN_PARAMS = ("estimator", "method", "cv")

#: Kinds of degenerate-class summaries already shown in this process (see ``_pass_on``).
_SHOWN_DEGENERATE: set[str] = set()


class TopLabelCalibratedClassifier(MetaEstimatorMixin, ClassifierMixin, BaseEstimator):
    """A classifier whose top-label confidence is calibrated per predicted class.

    Parameters
    ----------
    estimator : scikit-learn classifier
        Fitted (``cv=None``) or to be fitted here (``cv=K``). Needs ``predict_proba`` or
        ``decision_function``.
    method : str, default "auto"
        A topcal method name (``topcal.available_methods()``).
    cv : None, int or CV splitter, default None
        None: ``estimator`` is already fitted and is not refitted. An integer K or a
        splitter: cross-fit (see the module docstring).
    **params
        Parameters of the method, e.g. ``n_bins=20`` for "hist"; they are parameters of this
        estimator too (``get_params``, ``set_params``, grid search).

    Attributes
    ----------
    estimator_ : classifier
        The fitted classifier used for prediction (``estimator`` itself when ``cv=None``).
    calibrator_ : topcal Calibrator
        The fitted calibrator (save it with ``topcal.save``).
    classes_ : ndarray
        The classifier's classes.
    score_kind_ : {"probs", "logits"}
        Which scores were calibrated.
    n_features_in_ : int
    """

    def __init__(
        self, estimator: Any, *, method: str = "auto", cv: Any = None, **params: Any
    ) -> None:
        self.estimator = estimator
        self.method = method
        self.cv = cv
        for key, value in params.items():
            setattr(self, key, value)
        self._method_params = tuple(params)

    # ---------------------------------------------------------- parameters
    def get_params(self, deep: bool = True) -> dict:
        out = super().get_params(deep=deep)
        for key in self._method_params:
            out[key] = getattr(self, key)
        return out

    def set_params(self, **params: Any) -> "TopLabelCalibratedClassifier":
        new = {
            k: v
            for k, v in params.items()
            if "__" not in k and k not in _OWN_PARAMS and k not in self._method_params
        }
        for key, value in new.items():
            if key.startswith("_") or hasattr(type(self), key):
                raise ParameterError(
                    f"{key!r} cannot be a method parameter of TopLabelCalibratedClassifier"
                )
            setattr(self, key, value)
        self._method_params = self._method_params + tuple(new)
        rest = {k: v for k, v in params.items() if k not in new}
        if rest:
            super().set_params(**rest)
        return self

    def _method_kwargs(self) -> dict:
        return {k: getattr(self, k) for k in self._method_params}

    def __sklearn_tags__(self):
        from sklearn.utils import get_tags

        tags = super().__sklearn_tags__()
        inner = get_tags(self.estimator)
        tags.input_tags.sparse = inner.input_tags.sparse
        tags.input_tags.allow_nan = inner.input_tags.allow_nan
        return tags

    # ---------------------------------------------------------------- fit
    def fit(self, X: MatrixLike, y: MatrixLike) -> "TopLabelCalibratedClassifier":
        """Calibrate on (X, y); with ``cv=K`` also fit the classifier (see the class
        docstring).

        Returns
        -------
        self
        """
        get_class(self.method)  # unknown method names fail before any fitting
        cal = calibrator(self.method, **self._method_kwargs())
        y = column_or_1d(y, warn=True)
        check_classification_targets(y)
        if self.cv is None:
            est = self.estimator
            try:
                check_is_fitted(est)
            except Exception:  # sklearn's NotFittedError, or a non-estimator
                raise _Unfitted(
                    f"This {type(est).__name__} instance is not fitted yet, and with "
                    "cv=None TopLabelCalibratedClassifier does not fit it: fit the "
                    "classifier first (on other data), or pass cv=5 to cross-fit it here; "
                    "under GridSearchCV or cross_val_score (which clone it unfitted) wrap "
                    "the fitted classifier in sklearn.frozen.FrozenEstimator"
                ) from None
            classes = np.asarray(est.classes_)
            scores, kind = self._scores(est, X, classes)
        else:
            splitter = check_cv(self.cv, y, classifier=True)
            classes = np.unique(y)
            scores, kind = None, None
            for train, test in splitter.split(X, y):
                est = clone(self.estimator).fit(_index(X, train), y[train])
                s, kind = self._scores(est, _index(X, test), classes)
                if scores is None:
                    scores = np.empty((len(y), s.shape[1]))
                scores[test] = s
            est = clone(self.estimator).fit(X, y)
        codes = np.searchsorted(classes, y)
        codes = np.clip(codes, 0, len(classes) - 1)
        unknown = classes[codes] != y
        if unknown.any():
            raise DataError(
                f"y holds the class {y[np.flatnonzero(unknown)[0]]!r}, which the "
                f"classifier does not know (its classes are {list(classes)}); calibrate on "
                "data of the classifier's classes"
            )
        data = self._data(scores, kind, classes, codes)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            self.calibrator_ = cal.fit(data)
        self._pass_on(caught)
        self.estimator_ = est
        self._check_predict_is_argmax(est, X, classes, data if self.cv is None else None)
        self.classes_ = classes
        self.score_kind_ = kind
        for attr in ("n_features_in_", "feature_names_in_"):
            if hasattr(est, attr):
                setattr(self, attr, getattr(est, attr))
        return self

    def _pass_on(self, caught) -> None:
        """Re-emit the calibrator's warnings, its DegenerateClassWarnings as at most one per
        fit.

        GridSearchCV and cross_val_score fit a clone per fold and candidate, and
        scikit-learn's parallel helper resets Python's once-per-message registry for each:
        every fold repeated the same degenerate-class warning. Here one summary per fit, and
        a summary whose kind (text without class names and numbers) was shown before in this
        process is not repeated; ``fit_warnings_`` keeps every message of this fit.
        """
        self.fit_warnings_ = [str(w.message) for w in caught]
        degenerate = []
        for w in caught:
            if issubclass(w.category, DegenerateClassWarning):
                degenerate.append(str(w.message))
            else:
                warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
        if not degenerate:
            return
        key = re.sub(r"\[[^\]]*\]|\d[\d.e+-]*", "", degenerate[0])
        if key in _SHOWN_DEGENERATE:
            return
        _SHOWN_DEGENERATE.add(key)
        more = (
            f" (and {len(degenerate) - 1} more: fit_warnings_)" if len(degenerate) > 1 else ""
        )
        warnings.warn(
            degenerate[0] + more + "; shown once per kind in this process",
            DegenerateClassWarning,
            stacklevel=3,
        )

    def _check_predict_is_argmax(self, est, X, classes, data=None) -> None:
        """Warn when the classifier's ``predict`` is not the argmax of its scores on X
        (SVC(probability=True)).

        The calibrated confidence is about the argmax class; ``predict`` is the calibrated
        vector's argmax, not the classifier's own. ``argmax_disagreement_`` keeps the share
        of rows that differ.
        """
        if data is None:
            s, kind = self._scores(est, X, classes)
            data = self._data(s, kind, classes)
        own = np.asarray(est.predict(X))
        top = np.asarray(classes)[data.pred]
        differ = int(np.count_nonzero(own != top))
        self.argmax_disagreement_ = differ / max(len(own), 1)
        if differ:
            warnings.warn(
                f"{type(est).__name__}.predict() differs from the argmax of its "
                f"{'predict_proba' if data.full_kind == 'probs' else 'decision_function'} "
                f"on {differ} of {len(own)} calibration rows; predict_confidence and "
                "predict_proba calibrate the argmax class (top_label_data(X).pred), and "
                "predict follows the calibrated vector (its argmax), not "
                f"{type(est).__name__}.predict()",
                TopcalWarning,
                stacklevel=3,
            )

    @staticmethod
    def _data(scores, kind, classes, codes=None) -> TopLabelData:
        names = [str(c) for c in classes]
        # labels by name: integers would be read as names when the class names are integers
        labels = None if codes is None else np.asarray(names, dtype=object)[codes]
        if kind == "logits":
            return TopLabelData.from_logits(scores, labels, classes=names)
        return TopLabelData.from_probs(scores, labels, classes=names)

    @staticmethod
    def _scores(est, X, classes) -> tuple[np.ndarray, str]:
        """The classifier's scores for X as (n, len(classes)) columns in ``classes`` order."""
        if hasattr(est, "predict_proba"):
            s, kind = np.asarray(est.predict_proba(X), dtype=np.float64), "probs"
        elif hasattr(est, "decision_function"):
            s, kind = np.asarray(est.decision_function(X), dtype=np.float64), "logits"
            if s.ndim == 1:
                s = np.column_stack([np.zeros_like(s), s])
        else:
            raise ParameterError(
                f"{type(est).__name__} has neither predict_proba nor decision_function; "
                "topcal needs the classifier's scores for every class"
            )
        own = np.asarray(est.classes_)
        if len(own) == len(classes) and np.array_equal(own, classes):
            return s, kind
        if kind == "logits":  # a fold without some class: its logits cannot be filled in
            raise DataError(
                f"a cross-fitting fold's training part lacks class(es) "
                f"{sorted(set(classes.tolist()) - set(own.tolist()))}; use fewer folds"
            )
        full = np.zeros((s.shape[0], len(classes)))
        full[:, np.searchsorted(classes, own)] = s
        return full, kind

    # ------------------------------------------------------------ predict
    def _check(self):
        try:
            check_is_fitted(self, "calibrator_")
        except SklearnNotFittedError:
            raise _Unfitted(
                f"this {type(self).__name__} is not fitted yet; call fit(X, y) first"
            ) from None

    def _unlabelled(self, X) -> TopLabelData:
        self._check()
        s, kind = self._scores(self.estimator_, X, self.classes_)
        return self._data(s, kind, self.classes_)

    def predict(self, X: MatrixLike) -> np.ndarray:
        """The class of largest calibrated probability:
        ``classes_[argmax(predict_proba(X))]`` (the first on exact ties), so ``predict`` and
        ``predict_proba`` always agree.

        Usually the class the classifier's scores rank first; another where the calibrated
        vector finds that class more probable than the top one (see the module docstring).
        ``argmax_disagreement_`` keeps the share of calibration rows where the classifier's
        own ``predict`` is not the argmax of its scores (``SVC(probability=True)``).
        """
        proba = self.predict_proba(X)  # checks that this estimator is fitted first
        return self.classes_[np.argmax(proba, axis=1)]

    def predict_confidence(
        self, X: MatrixLike, interval: float | None = None
    ) -> np.ndarray | tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Calibrated top-label confidence of each row: the probability that the predicted
        class (the argmax of the classifier's scores) is right.

        Parameters
        ----------
        X : array-like of shape (n, n_features)
        interval : float in (0, 1), optional
            Also return a level-``interval`` interval on each confidence
            (:meth:`topcal.calibrators.base.Calibrator.predict_interval`; what it covers:
            docs/intervals.md).

        Returns
        -------
        conf : ndarray (n,)
            Without ``interval``.
        (conf, lower, upper) : tuple of three ndarrays (n,)
            With ``interval`` (as scikit-learn's ``predict(X, return_std=True)`` returns a
            tuple).
        """
        data = self._unlabelled(X)  # checks the estimator is fitted first
        conf = self.calibrator_.predict(data)
        if interval is None:
            return conf
        lo, hi = self.calibrator_.predict_interval(data, interval)
        return conf, lo, hi

    def predict_proba(self, X: MatrixLike) -> np.ndarray:
        """Calibrated probabilities, shape (n, n_classes) in ``classes_`` order.

        The entry of the class the classifier's scores rank first is the calibrated
        confidence (``predict_confidence``); the other entries share the rest as the
        calibrator's whole-vector map says (``calibrator_.vector_map_``; the module
        docstring). Rows sum to 1.
        """
        data = self._unlabelled(X)  # checks that this estimator is fitted first
        return self.calibrator_.predict_proba(data)

    def adapt(
        self,
        X_use: MatrixLike = None,
        *,
        priors: ArrayLike | dict[str, float] | None = None,
        estimator: str = "em",
        n_bootstrap: int = 100,
        seed: int = 0,
        shrink: float | str = "auto",
    ) -> "TopLabelCalibratedClassifier":
        """A copy whose confidences are adapted to a use set's class priors (label shift).

        Give the unlabelled use set ``X_use`` (priors estimated by ``estimator``, "em" or
        "bbse"; ``shrink`` is the safety step, "auto" or a number in [0, 1]) or ``priors=``
        (dict class -> prior, or one value per class in ``classes_`` order); see
        :func:`topcal.labelshift.adapt`. The classifier is shared, not refitted; this object
        is unchanged. ``predict`` stays the classifier's; ``predict_confidence`` and
        ``predict_proba`` use the adapted calibrator (``calibrator_.estimate_`` holds the
        priors).
        """
        self._check()
        data = None if X_use is None else self._unlabelled(X_use)
        if isinstance(priors, dict):
            priors = {str(k): v for k, v in priors.items()}
        adapted = self.calibrator_.adapt(
            data,
            priors=priors,
            estimator=estimator,
            n_bootstrap=n_bootstrap,
            seed=seed,
            shrink=shrink,
        )
        new = copy.copy(self)
        new.calibrator_ = adapted
        return new

    def top_label_data(self, X: MatrixLike, y: MatrixLike = None) -> TopLabelData:
        """The classifier's scores for X (and labels y) as :class:`TopLabelData`, e.g. for
        :func:`topcal.report` or :func:`topcal.compare`."""
        if y is None:
            return self._unlabelled(X)
        self._check()
        y = column_or_1d(y)
        s, kind = self._scores(self.estimator_, X, self.classes_)
        codes = np.searchsorted(self.classes_, y)
        codes = np.clip(codes, 0, len(self.classes_) - 1)
        if (self.classes_[codes] != y).any():
            raise DataError(f"y holds classes outside the classifier's {list(self.classes_)}")
        return self._data(s, kind, self.classes_, codes)


def _index(X, idx):
    """Rows ``idx`` of a NumPy array, sparse matrix, DataFrame or list."""
    from scipy.sparse import issparse

    if hasattr(X, "iloc"):
        return X.iloc[idx]
    if issparse(X):
        return X.tocsr()[idx]
    if isinstance(X, np.ndarray):
        return X[idx]
    return np.asarray(X)[idx]
