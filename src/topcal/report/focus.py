"""The report's default: fit what the user is deciding about, once.

``auto`` is fitted on all the data, and its own cross-validation (every candidate
cross-fitted on the same seeded folds, appended to the fit's
:class:`~topcal.calibrators.context.FitContext`) gives the out-of-sample metrics of every
candidate, nothing fitted again. ``auto``'s row is its choice's (its blend's) out-of-fold
confidences: the choice was made on those folds, so that row is slightly optimistic
(``--methods all`` cross-fits ``auto`` itself, nested, at the cost of ``auto``'s whole
cross-validation in every fold). The uncalibrated baseline and the :data:`PEERS` best other
candidates are fitted on all the data too, for the figures and the fitted parameters (and,
where none of those has a per-class curve, the best candidate that has). Before, the default
fitted every method 5-fold with ``auto``'s inner cross-validation in every fold (1 min 41 s
on 25,000 ImageNet rows, 1,000 classes).
"""

from __future__ import annotations

import numpy as np

from ..calibrators.select.auto import Auto
from ..calibrators.context import FitContext
from ..calibrators.registry import BASELINE, lookup
from ..calibrators.wrapper import Wrapper
from ..comparison import Comparison
from ..data import TopLabelData
from ..errors import TopcalError
from ..overall import paired_ranking
from ..evaluate import auto_summary, compare_methods, evaluate, fit_methods, score_models

__all__ = ["PEERS", "AUTO", "focused_fits", "model_in_use", "peers_of"]

#: The best other candidates (by auto's cross-validated NLL) fitted on all the data beside
#: auto.
PEERS = 2
#: The method the default report is about (its class is a ``Wrapper`` whose ``choice()`` is
#: the cross-validation table).
AUTO = Auto.name


def model_in_use(models: dict) -> str | None:
    """The name of the model the report is about: ``auto`` where it was fitted (a wrapper
    with a choice), else the first method that is not the baseline (None: only the
    baseline)."""
    for n, m in models.items():
        if isinstance(m, Wrapper) and m.choice() is not None:
            return n
    return next((n for n, m in models.items() if not m.is_baseline), None)


def peers_of(choice: dict, n: int, curve: bool) -> list[str]:
    """The ``n`` best candidates of auto's table other than its choice and the baseline, and
    where neither they nor the choice (``curve``: whether it has one) have a per-class curve
    to draw, the best one that has."""
    ok = [
        r["method"]
        for r in choice["table"]
        if r["nll"] is not None and r["method"] not in (choice["chosen"], BASELINE)
    ]
    out = ok[:n]
    if not curve and all(lookup(m).needs_full for m in out):
        out += [m for m in ok[n:] if not lookup(m).needs_full][:1]
    return out


def _oof(run, choice: dict):
    """auto's out-of-fold confidences on ``run``: its choice's, or its blend's mixture."""
    blend = choice["blend"]
    if not blend:
        return run.confidence.get(choice["chosen"])
    if not all(m in run.confidence for m in blend["methods"]):
        return None
    return sum(w * run.confidence[m] for m, w in zip(blend["methods"], blend["weights"]))


def focused_fits(
    data: TopLabelData,
    *,
    folds: int | None,
    seed: int,
    params: dict | None,
    progress,
    diagnostics: dict,
):
    """Fit auto (its cross-validation kept), the baseline and the peers; score them.

    Returns ``(models, comparison, note)``: the fitted models (baseline, auto, peers), a
    :class:`~topcal.comparison.Comparison` ("kfold" from auto's folds; "same" with ``folds``
    None), and a sentence for the page saying how the table was made. ``diagnostics`` is
    filled as :func:`~topcal.evaluate.fit_methods` fills it.
    """
    params = _auto_params(params, folds, seed)
    own = params[AUTO]
    context = FitContext()  # auto's cross-validation runs, reused below
    models, _ = fit_methods(
        data,
        [AUTO],
        params={AUTO: own},
        progress=progress,
        diagnostics=diagnostics,
        context=context,
    )
    runs = context.runs
    auto = models.get(AUTO)
    choice = auto.choice() if auto is not None else None
    peers = peers_of(choice, PEERS, auto.has_curve) if choice is not None else []
    more: dict = {}
    others, _ = fit_methods(
        data,
        [BASELINE] + peers,
        progress=progress,
        diagnostics=more,
    )
    diagnostics["failed"].update(more["failed"])
    diagnostics["warnings"].update(more["warnings"])
    models = {
        **{BASELINE: others.pop(BASELINE)},
        **models,
        **others,
    }
    run = runs[-1] if runs else None
    conf = None if run is None or choice is None else _oof(run, choice)
    choices = {} if auto is None else {AUTO: [auto_summary(auto)]}
    if folds is None:
        comparison = Comparison("same", methods=score_models(models, data), choices=choices)
        return models, comparison, ""
    if conf is None or BASELINE not in run.confidence:
        # no cross-validation to reuse (auto kept the raw score on too few samples):
        # cross-fit the few models fitted here, nested, as --methods does
        comparison = compare_methods(
            data, list(models), folds=folds, seed=seed, params=params, progress=progress
        )
        diagnostics["failed"].update(comparison.failed)
        return models, comparison, ""
    comparison, note = _reused_comparison(data, run, choice, conf, auto, choices)
    return models, comparison, note


def _auto_params(params: dict | None, folds: int | None, seed: int) -> dict:
    """The default report's ``params``, copied: only auto's, with its folds and seed."""
    params = {k: dict(v) for k, v in (params or {}).items()}
    other = sorted(set(params) - {AUTO})
    if other:
        raise TopcalError(
            f"--param for {', '.join(other)}: the default report fits {AUTO} (its "
            f"candidates with their defaults), the baseline and {AUTO}'s best {PEERS} "
            "other candidates; name the methods to fit with parameters (--methods all, or "
            "--methods M1,M2,...)"
        )
    own = params.setdefault(AUTO, {})
    if folds is not None:
        own.setdefault("folds", int(folds))
    own.setdefault("seed", int(seed))
    return params


def _reused_comparison(data: TopLabelData, run, choice: dict, conf, auto, choices: dict):
    """``(comparison, note)`` from auto's own cross-validation ``run``: every candidate
    scored on its held-out rows, auto's row its choice's confidences ``conf``."""
    target = run.target
    order = [BASELINE, AUTO] + sorted(
        (n for n in run.confidence if n != BASELINE),
        key=lambda n: next(
            r["nll"] if r["nll"] is not None else r.get("first_nll") or 0.0
            for r in choice["table"]
            if r["method"] == n
        ),
    )
    confs = {**run.confidence, AUTO: np.clip(conf, 0.0, 1.0)}
    methods = {n: evaluate(target, confs[n]) for n in order}
    failed = {n: f"fold {f + 1}: {msg}" for n, (f, msg) in run.errors.items()}
    first = bool(auto.stages_) and auto.stages_["decided"] == 1  # chosen at the first look
    folds = 1 if first else int(auto.folds)
    ranking = paired_ranking(target, {n: confs[n] for n in order}, baseline=BASELINE)
    comparison = Comparison(
        "kfold", folds=folds, methods=methods, failed=failed, choices=choices, ranking=ranking
    )
    on = f"{target.n_samples:,.0f}"
    if target.n_samples < data.n_samples:
        on = (
            f"{'' if first else 'a stratified subsample of '}{on} of the {data.n_samples:,.0f}"
        )
    how = "first look (one split, " if first else f"{int(auto.folds)}-fold cross-validation ("
    every = (
        "every candidate" if first or not auto.stages_ else "every candidate of its K folds"
    )
    note = (
        f"{AUTO}'s own {how}seed {auto.seed}, on {on} samples), reused: {every} scored on "
        f"the same held-out rows; {AUTO}'s row is its choice's held-out confidences, and "
        "the choice was made on these folds, so that row is slightly optimistic "
        "(<code>--methods all</code> cross-fits it nested)."
    )
    return comparison, note
