"""Fitting several methods and comparing their metrics, under three protocols.

* ``"same"``: fit and evaluate on the same data (the paper's practice; it flatters flexible
  methods);
* ``"holdout"``: fit on ``data``, evaluate on a second test set ``eval_data`` (the paper's
  appendix, two MNIST test sets);
* ``"kfold"``: K-fold cross-fitting within ``data``: every row's confidence comes from a
  model fitted on the other K - 1 folds (the paper's third approach to parameter fitting).

Folds come from :func:`topcal.data.kfold_split` (stratified by predicted class; binned
counts dealt by a seeded multinomial draw).

This module is topcal's one fit-and-score service: :func:`fit_quietly` is how the report,
``compare``, the figures and the experiments fit a method on the user's behalf (warnings
collected for the caller to show, not printed mid-table), :func:`evaluate` the one metric
bundle they all show (built on :func:`topcal.metrics.bundle`), :func:`fit_and_score` the two
together.
"""

from __future__ import annotations

import warnings

import numpy as np

from . import _progress
from ._numeric import linspace_rows
from .calibrators import available_methods, calibrator, get_class
from .calibrators.select.crossfit import cross_fit, scratch_options
from .calibrators.registry import BASELINE
from .calibrators.wrapper import Wrapper
from .comparison import Comparison, MethodMetrics, MetricValues
from .data import TopLabelData, kfold_split
from .errors import ParameterError, TopcalError, TopcalWarning
from .metrics import BUNDLE, bundle
from .overall import paired_ranking

__all__ = [
    "compare_methods",
    "evaluate",
    "fit_quietly",
    "fit_and_score",
    "score_models",
    "kfold_split",
    "fit_methods",
    "check_params",
    "curve_findings",
    "class_curves",
    "few_positives",
    "comparison_rows",
    "METRICS",
    "PROTOCOLS",
    "Comparison",
    "MethodMetrics",
    "MetricValues",
]

#: Metric names in the order tables show them.
METRICS = BUNDLE
#: Comparison protocols (see the module docstring).
PROTOCOLS = ("same", "holdout", "kfold")


def evaluate(data: TopLabelData, confidence, *, n_bins: int = 10, metrics=METRICS) -> dict:
    """NLL, Brier, ECE1, ECE2 (or ``metrics``) of ``confidence`` on ``data``, JSON-ready.

    Returns
    -------
    dict
        ``{metric: {"overall": float, "per_class": {class: float or None}}}``.
    """
    return {
        m.name: m.to_dict() for m in bundle(data, confidence, n_bins=n_bins, names=metrics)
    }


def fit_quietly(
    method,
    data: TopLabelData,
    *,
    params: dict | None = None,
    notes: dict | None = None,
    collect=TopcalWarning,
    **fit_options,
):
    """Fit ``method`` on ``data`` without printing its warnings; return the fitted
    calibrator.

    ``method`` is a registered name (built with ``params``) or an unfitted calibrator (e.g.
    :func:`topcal.calibrators.paper_calibrator`'s).

    Warnings of category ``collect`` (default: every topcal warning) raised while fitting
    are collected, deduplicated and in order, into ``notes[method]`` for the caller to show
    (``compare``'s "warnings", the report's findings); other warnings pass through
    unchanged. Without ``notes`` the collected messages are dropped: only for side fits (a
    figure's reference histogram, one of many ensembles) whose data the caller's own fits
    already report on. ``fit_options`` go to ``fit`` (``keep``, ``warm``). Errors propagate.
    """
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", collect)
        model = (
            calibrator(method, **(params or {})) if isinstance(method, str) else method
        ).fit(data, **fit_options)
    seen = notes.setdefault(model.name, []) if notes is not None else []
    for w in caught:
        if issubclass(w.category, collect):
            msg = str(w.message)
            if msg not in seen:
                seen.append(msg)
        else:
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    return model


def fit_and_score(
    method: str,
    data: TopLabelData,
    score_on=None,
    *,
    params: dict | None = None,
    notes: dict | None = None,
    n_bins: int = 10,
    metrics=METRICS,
    collect=TopcalWarning,
):
    """Fit ``method`` on ``data`` (:func:`fit_quietly`) and score it on each set of
    ``score_on`` (default ``data``).

    Returns ``(model, [metric dict per set])``, the dicts as :func:`evaluate` gives them.
    """
    model = fit_quietly(method, data, params=params, notes=notes, collect=collect)
    sets = [data] if score_on is None else list(score_on)
    return model, [evaluate(d, model.predict(d), n_bins=n_bins, metrics=metrics) for d in sets]


def score_models(
    models: dict, data: TopLabelData, *, n_bins: int = 10, metrics=METRICS
) -> dict:
    """``{name: metric dict}`` of already fitted ``models`` on ``data`` (:func:`evaluate` of
    each)."""
    return {
        name: evaluate(data, model.predict(data), n_bins=n_bins, metrics=metrics)
        for name, model in models.items()
    }


def check_params(params: dict | None, names) -> dict:
    """Validate ``{method: {param: value}}`` against the methods (one-line errors)."""
    params = {} if params is None else dict(params)
    for name, p in params.items():
        if name not in names:
            raise ParameterError(
                f"parameters given for {name!r}, which is not among the methods run "
                f"({', '.join(names)})"
            )
        calibrator(name, **p)._validate_params()  # unknown names and bad values fail here
    return params


def curve_findings(name: str, model, data: TopLabelData) -> list[str]:
    """Warnings about a fitted score calibrator's curves: certainty (0 or 1) and bandwidths
    at the floor.

    A curve that reaches exactly 0 or 1 inside a class's observed scores claims certainty
    that finite counts cannot give (the paper's estimators with shrinkage=0 do this wherever
    a bin or kernel sees only one outcome); a kde bandwidth at the smallest candidate means
    the rule found nothing smoother to accept.
    """
    out: list[str] = []
    if model.is_baseline or not hasattr(model, "curve") or not hasattr(model, "support_"):
        return out
    have = [k for k, sup in enumerate(model.support_) if sup is not None]
    certain = [
        model.classes_[k]
        for ks, y in class_curves(model, have, model.support_, 257)
        for k, hit in zip(ks, (y.min(axis=1) <= 0.0) | (y.max(axis=1) >= 1.0))
        if hit
    ]
    if certain:
        fix = (
            "use shrinkage (the default) or auto"
            if "shrinkage" in model.get_params()
            else f"{name} has no shrinkage: compare a shrunk method (kde-mon2, hist) or auto"
        )
        out.append(
            f"{name}: the curve reaches confidence 0 or 1 for {_few(certain)}; a held-out "
            f"mistake there costs 27.6 nats: {fix}"
        )
    floor = []
    for k, st in enumerate(getattr(model, "class_state_", []) or []):
        if (
            isinstance(st, dict)
            and st.get("b_range")
            and np.isfinite(st.get("bandwidth", np.nan))
        ):
            if st["bandwidth"] <= st["b_range"][0] * (1 + 1e-9):
                floor.append(model.classes_[k])
    if floor:
        out.append(
            f"{name}: the bandwidth sits at its smallest candidate for {_few(floor)}; the "
            "curve may follow noise"
        )
    return out


#: Curve points one :func:`class_curves` step evaluates (a grid of classes x points).
CURVE_BATCH_POINTS = 1 << 19


def class_curves(model, ks, supports, points: int):
    """Yield ``(classes, y)``: class ``k``'s curve at ``np.linspace(*supports[k], points)``
    for every ``k`` of ``ks``, as rows of ``y``, many classes a step. A model whose confidence
    is a function of (class, score) (``has_curve``) reads them off one ``predict`` over all
    their points (its curves, bit for bit: a class at a time cost a pass per class, minutes at
    10^5 classes); any other, one ``curve`` call a class."""
    ks = list(ks)
    step = max(CURVE_BATCH_POINTS // points, 1) if model.has_curve else 1
    for a in range(0, len(ks), step):
        part = ks[a : a + step]
        bounds = np.array([supports[k] for k in part], dtype=np.float64).reshape(-1, 2)
        grids = linspace_rows(bounds[:, 0], bounds[:, 1], points)
        if not model.has_curve:
            yield part, model.curve(part[0], grids[0]).confidence[None, :]
            continue
        rows = TopLabelData(
            tuple(model.classes_),
            np.repeat(np.asarray(part, dtype=np.int64), points),
            grids.ravel(),
            tuple(model.score_range_),
        )
        yield part, np.asarray(model.predict(rows)).reshape(len(part), points)


def _few(names, n: int = 5) -> str:
    names = list(names)
    head = ", ".join(repr(c) for c in names[:n])
    return f"{len(names)} class(es) ({head}{', ...' if len(names) > n else ''})"


def few_positives(data: TopLabelData, minimum: float = 30) -> str | None:
    """A warning when classes have too few positives for a per-class method, else None."""
    tp, fp = data.class_counts()
    n = tp + fp
    small = [c for c, v in zip(data.classes, n) if 0 < v < minimum]
    if not small:
        return None
    return (
        f"{_few(small)} have fewer than {minimum:g} positives: per-class curves there rest "
        "on a handful of samples (shrinkage borrows from the pooled curve; compare out of "
        "sample)"
    )


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


def fit_methods(
    data: TopLabelData,
    methods=None,
    *,
    params=None,
    progress=None,
    diagnostics: dict | None = None,
    context=None,
) -> tuple[dict, list]:
    """Fit each runnable method on ``data``.

    Parameters
    ----------
    data : TopLabelData (labelled)
    methods : sequence of str, optional
        Method names; default every registered method.
    params : dict, optional
        ``{method: {parameter: value}}``.
    progress : callable(str), optional
        Called with a short message before each fit.
    diagnostics : dict, optional
        Filled with ``"failed"`` (``{method: error message}``: a method that raises is left
        out, the others go on) and ``"warnings"`` (``{method: [messages]}``: what the fits
        warned about).
    context : FitContext, optional
        Passed to every fit (:mod:`topcal.calibrators.context`).

    Returns
    -------
    (dict, list)
        ``{name: fitted calibrator}`` in the given order, and the names skipped because
        ``data`` has no full score vectors.
    """
    names = list(available_methods()) if methods is None else list(methods)
    run, skipped = _split_names(names, data)
    params = check_params(params, run)
    notes: dict[str, list[str]]
    fitted, failed, notes = {}, {}, {}
    for name in _progress.bar(run, desc="fitting", unit=" methods"):
        if progress is not None:
            progress(f"fitting {name}")
        try:
            fitted[name] = fit_quietly(
                name, data, params=params.get(name), notes=notes, context=context
            )
        except TopcalError as exc:
            failed[name] = f"{type(exc).__name__}: {exc}"
    if diagnostics is not None:
        diagnostics["failed"] = failed
        diagnostics["warnings"] = {n: v for n, v in notes.items() if v}
    return fitted, skipped


def auto_summary(model, fold: int | None = None) -> dict | None:
    """What an ``auto`` model chose and its cross-validation table (mean NLL, SE, paired
    SE), or
    None
    for other models: ``{"fold", "chosen", "best", "rule", "blend", "table": [...]}`` (see
    ``Auto.cv_table``, ``Auto.blend_``)."""
    choice = model.choice() if isinstance(model, Wrapper) else None
    return None if choice is None else {"fold": fold, **choice}


def _kfold_predictions(
    data: TopLabelData,
    names,
    n_folds: int,
    seed: int,
    progress=None,
    params=None,
    failed=None,
    notes=None,
    choices=None,
):
    """Out-of-fold confidences of every method
    (:func:`topcal.calibrators.select.crossfit.cross_fit`), what the fits warned about in
    ``notes``, each fold's ``auto`` choice in ``choices``, failures in ``failed``."""
    failed = {} if failed is None else failed

    def fit(name, train, f, warm):
        if progress is not None:
            progress(f"fold {f + 1}/{n_folds}: fitting {name}")
        options = scratch_options(name, warm, fold=True)
        return fit_quietly(
            name, train, params=(params or {}).get(name), notes=notes, **options
        )

    def on_model(name, f, model, train):
        summary = auto_summary(model, f + 1)
        if summary is not None and choices is not None:
            choices.setdefault(name, []).append(summary)
        if f == 0 and notes is not None:
            for msg in curve_findings(name, model, train):
                if msg not in notes.setdefault(name, []):
                    notes[name].append(msg)

    run = cross_fit(
        data,
        [n for n in names if n not in failed],
        n_folds,
        seed=seed,
        params=params,
        fit=fit,
        on_model=on_model,
    )
    for name, (f, msg) in run.errors.items():
        failed[name] = f"fold {f + 1}: {msg}"
    return run.target, run.confidence


def compare_methods(
    data: TopLabelData,
    methods=None,
    *,
    eval_data: TopLabelData | None = None,
    folds: int | None = None,
    seed: int = 0,
    n_bins: int = 10,
    params=None,
    progress=None,
) -> Comparison:
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
        Cross-fit with this many folds within ``data`` ("kfold" protocol). Exclusive with
        ``eval_data``. Neither: fit and evaluate on ``data`` ("same").
    seed : int, default 0
        Seed of the fold split.
    n_bins : int, default 10
        Bins of ECE1/ECE2.
    params : dict, optional
        ``{method: {parameter: value}}``, e.g. ``{"btswa": {"max_iter": 500}}``.
    progress : callable(str), optional
        Called with a short message before each fit.

    Methods that need the full score vector are skipped (and listed under ``"skipped"``)
    when the data has only top scores. A method whose fit raises is listed under
    ``"failed"`` with its error and the others go on. What the fits warned about (and curves
    that reach 0 or 1, bandwidths at their floor, classes with few positives) is listed
    under ``"warnings"``.

    Returns
    -------
    Comparison
        ``protocol``, ``folds``, ``methods`` (``{name: MethodMetrics}``, e.g.
        ``res.methods["hist"].nll.per_class``), ``skipped``, ``failed`` (``{name: str}``),
        ``warnings`` (``{name or "data": [str]}``) and ``choices`` (``{name: [auto_summary,
        ...]}``: what every fitted ``auto`` chose, one entry per fold under "kfold", and its
        cross-validation table). It reads as the old nested dict too
        (``res["methods"]["hist"]["nll"]["per_class"]``); ``res.to_dict()`` is that dict
        (JSON-ready).
    """
    if eval_data is not None and folds is not None:
        raise ParameterError(
            "give either eval_data (a second test set) or folds (cross-fitting), not both"
        )
    names = list(available_methods()) if methods is None else list(methods)
    run, skipped = _split_names(names, data, eval_data)
    params = check_params(params, run)
    failed: dict = {}
    notes: dict = {}
    choices: dict = {}
    out: dict = {
        "protocol": "same",
        "folds": None,
        "methods": {},
        "skipped": skipped,
        "failed": failed,
        "warnings": notes,
        "choices": choices,
    }
    small = few_positives(data)
    if small is not None:
        notes["data"] = [small]
    target, confs = _evaluated_predictions(
        data, eval_data, run, folds, seed, params, n_bins, progress, out
    )
    if confs:
        out["ranking"] = paired_ranking(target, confs, baseline=BASELINE)
    return Comparison(**{**out, "warnings": {k: v for k, v in notes.items() if v}})


def _evaluated_predictions(
    data: TopLabelData, eval_data, run, folds, seed: int, params, n_bins: int, progress, out
) -> tuple[TopLabelData, dict]:
    """:func:`compare_methods`'s protocol run: the methods evaluated into ``out`` (its
    fields); the data evaluated on and each method's confidences there."""
    if folds is not None:
        failed, notes, choices = out["failed"], out["warnings"], out["choices"]
        target, confs = _kfold_predictions(
            data, run, folds, seed, progress, params, failed, notes, choices
        )
        out.update(protocol="kfold", folds=int(folds))
        for name in run:
            if name in confs:
                out["methods"][name] = evaluate(target, confs[name], n_bins=n_bins)
        return target, {name: confs[name] for name in run if name in confs}
    target = data if eval_data is None else eval_data
    if eval_data is not None:
        out["protocol"] = "holdout"
    return target, _fit_and_evaluate(data, target, run, params, n_bins, progress, out)


def _fit_and_evaluate(
    data: TopLabelData, target: TopLabelData, run, params: dict, n_bins: int, progress, out
) -> dict:
    """The "same" and "holdout" protocols: each method fitted on ``data`` and evaluated on
    ``target`` into ``out`` (:func:`compare_methods`'s fields); its confidences there."""
    failed, notes, choices = out["failed"], out["warnings"], out["choices"]
    confs = {}
    for name in _progress.bar(run, desc="fitting", unit=" methods"):
        if progress is not None:
            progress(f"fitting {name}")
        try:
            model, (scores,) = fit_and_score(
                name, data, [target], params=params.get(name), notes=notes, n_bins=n_bins
            )
        except TopcalError as exc:
            failed[name] = f"{type(exc).__name__}: {exc}"
            continue
        for msg in curve_findings(name, model, data):
            if msg not in notes.setdefault(name, []):
                notes[name].append(msg)
        summary = auto_summary(model)
        if summary is not None:
            choices[name] = [summary]
        out["methods"][name] = scores
        confs[name] = model.predict(target)
    return confs


def comparison_rows(result) -> list[tuple[str, str, str, float | None]]:
    """Long-format rows (method, metric, class, value) of a :func:`compare_methods` result
    (or its dict form); class "overall" for the overall value."""
    rows = []
    for m, metrics in Comparison.of(result).methods.items():
        for metric, v in metrics.items():
            rows.append((m, metric, "overall", v.overall))
            rows += [(m, metric, c, x) for c, x in v.per_class.items()]
    return rows
