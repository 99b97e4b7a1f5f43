"""Fitting several methods and comparing their metrics, under three protocols.

* ``"same"``: fit and evaluate on the same data (the paper's practice; it
  flatters flexible methods);
* ``"holdout"``: fit on ``data``, evaluate on a second test set ``eval_data``
  (the paper's appendix, two MNIST test sets);
* ``"kfold"``: K-fold cross-fitting within ``data``: every row's confidence
  comes from a model fitted on the other K - 1 folds (the paper's third
  approach to parameter fitting).

Folds come from :func:`topcal.data.kfold_split` (stratified by predicted class;
binned counts dealt by a seeded multinomial draw).
"""

from __future__ import annotations

import warnings

import numpy as np

from .calibrators import available_methods, calibrator, get_class
from .data import TopLabelData, kfold_split
from .errors import DataError, DegenerateClassWarning, ParameterError
from .metrics import brier, ece1, ece2, nll

__all__ = ["compare_methods", "evaluate", "kfold_split", "fit_methods", "METRICS", "PROTOCOLS"]

#: Metric names in the order tables show them.
METRICS = ("nll", "brier", "ece1", "ece2")
#: Comparison protocols (see the module docstring).
PROTOCOLS = ("same", "holdout", "kfold")


def evaluate(data: TopLabelData, confidence, *, n_bins: int = 10) -> dict:
    """NLL, Brier, ECE1, ECE2 of ``confidence`` on ``data`` as ClassMetric dicts.

    Returns
    -------
    dict
        ``{metric: {"overall": float, "per_class": {class: float or None}}}``.
    """
    return {
        m.name: m.to_dict()
        for m in (nll(data, confidence), brier(data, confidence), ece1(data, confidence, n_bins=n_bins),
                  ece2(data, confidence, n_bins=n_bins))
    }


def _fit_quiet(name: str, data: TopLabelData):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DegenerateClassWarning)
        return calibrator(name).fit(data)


def _split_names(names, data: TopLabelData, target: TopLabelData | None = None):
    """Runnable method names and those skipped for lack of full score vectors."""
    run, skipped = [], []
    for name in names:
        cls = get_class(name)  # raises ParameterError naming the options
        if cls.needs_full and not (data.has_full and (target is None or target.has_full)):
            skipped.append(name)
        else:
            run.append(name)
    return run, skipped


def fit_methods(data: TopLabelData, methods=None, *, progress=None) -> tuple[dict, list]:
    """Fit each runnable method on ``data``.

    Parameters
    ----------
    data : TopLabelData (labelled)
    methods : sequence of str, optional
        Method names; default every registered method.
    progress : callable(str), optional
        Called with a short message before each fit.

    Returns
    -------
    (dict, list)
        ``{name: fitted calibrator}`` in the given order, and the names skipped
        because ``data`` has no full score vectors.
    """
    names = list(available_methods()) if methods is None else list(methods)
    run, skipped = _split_names(names, data)
    fitted = {}
    for name in run:
        if progress is not None:
            progress(f"fitting {name}")
        fitted[name] = _fit_quiet(name, data)
    return fitted, skipped


def _kfold_predictions(data: TopLabelData, names, n_folds: int, seed: int, progress=None):
    folds = kfold_split(data, n_folds, seed=seed)
    conf = {name: [] for name in names}
    for f in range(n_folds):
        train = TopLabelData.concat([folds[g] for g in range(n_folds) if g != f])
        if train.n_samples <= 0:
            raise DataError(f"fold {f}'s training part holds no samples; use fewer folds")
        for name in names:
            if progress is not None:
                progress(f"fold {f + 1}/{n_folds}: fitting {name}")
            conf[name].append(_fit_quiet(name, train).predict(folds[f]))
    target = TopLabelData.concat(folds)
    return target, {name: np.concatenate(v) for name, v in conf.items()}


def compare_methods(data: TopLabelData, methods=None, *, eval_data: TopLabelData | None = None,
                    folds: int | None = None, seed: int = 0, n_bins: int = 10, progress=None) -> dict:
    """Fit each method and evaluate it under one of three protocols.

    Parameters
    ----------
    data : TopLabelData (labelled)
        The data to fit on.
    methods : sequence of str, optional
        Method names; default every registered method.
    eval_data : TopLabelData, optional
        A second labelled test set to evaluate on ("holdout" protocol).
    folds : int, optional
        Cross-fit with this many folds within ``data`` ("kfold" protocol).
        Exclusive with ``eval_data``. Neither: fit and evaluate on ``data``
        ("same").
    seed : int, default 0
        Seed of the fold split.
    n_bins : int, default 10
        Bins of ECE1/ECE2.
    progress : callable(str), optional
        Called with a short message before each fit.

    Methods that need the full score vector are skipped (and listed under
    ``"skipped"``) when the data has only top scores.

    Returns
    -------
    dict
        ``{"protocol": str, "folds": int or None, "methods": {name: {metric:
        {"overall", "per_class"}}}, "skipped": [...]}``
    """
    if eval_data is not None and folds is not None:
        raise ParameterError("give either eval_data (a second test set) or folds (cross-fitting), not both")
    names = list(available_methods()) if methods is None else list(methods)
    run, skipped = _split_names(names, data, eval_data)
    out: dict = {"protocol": "same", "folds": None, "methods": {}, "skipped": skipped}
    if folds is not None:
        target, confs = _kfold_predictions(data, run, folds, seed, progress)
        out.update(protocol="kfold", folds=int(folds))
        for name in run:
            out["methods"][name] = evaluate(target, confs[name], n_bins=n_bins)
        return out
    target = data if eval_data is None else eval_data
    if eval_data is not None:
        out["protocol"] = "holdout"
    for name in run:
        if progress is not None:
            progress(f"fitting {name}")
        model = _fit_quiet(name, data)
        out["methods"][name] = evaluate(target, model.predict(target), n_bins=n_bins)
    return out
