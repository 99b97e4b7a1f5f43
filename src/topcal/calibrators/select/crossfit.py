"""Cross-fitting: every sample's confidence from a model fitted on the other folds.

The one K-fold loop of the project: ``auto``'s cross-validation (:mod:`.auto`) and
``compare``'s "kfold" protocol (:mod:`topcal.evaluate`) both run :func:`cross_fit`. The
folds are :func:`topcal.data.kfold_split`'s (seeded; stratified by predicted class; binned
counts dealt by a multinomial draw); fold f's confidences come from a model fitted on the
other K - 1 folds, and :attr:`CrossFit.target` (the folds one after the other) gives the row
order of every confidence array.

A fold's model is a *scratch* fit (``fit(..., keep="predictions")``): it is scored and
dropped, so its fit skips what a model keeps for later (the rows' fingerprint, the mergeable
statistics, the label-shift counts). Its confidences are those of an ordinary fit on the
same rows, bit for bit, except for the methods whose optimum is well defined and found by an
iterative optimiser (``_warm_starts``: ``sts``, ``hier-platt``, ``hier-beta``,
``pooled-beta``, ``vs``, ``sms``, and the maps of ``vs-hier-platt`` and
``sms-pooled-beta``): those are first fitted on all the data (sharing what they derive alike
from it, as a fold's fits do: :mod:`.foldmemo`), and each fold's fit starts from that
optimum instead of the fixed starting point (a fold's optimum lies near the whole data's). A
hierarchical fold's fit also searches its prior strength from the all-data choice outward (a
descent on the grid, 3-5 Newton solves instead of the grid scan's 15), which lands on the
scan's strength wherever the approximate LOO loss is unimodal in the log strength (on every
fold of the benchmark sets, full and subsampled to 2,000 and 5,000 samples: 585 fold fits,
confidences within 2.2e-9 relative). The optimisers stop at the same tolerance (relative
1e-10 on the loss), so the confidences agree with cold-started fits to about 1e-8 relative
(tested: auto's cross-validation table within 1e-6 relative, the same choice; on the
benchmark sets within 1e-10). The warm start saves about a third of a fold's sts fit and a
sixth of a hierarchical one. Per-class and award temperature fits start cold: a class with
(almost) only true or false positives has a loss flat toward a bound, where the optimiser's
stop depends on its start (on the ImageNet set, about 40 rows a class, a warm-started
``btswa``'s fold NLL moved by 1.4 %). ``vs``/``sms`` folds also take the all-data fit's
Hessian (docs/vector.md; their warm fits are closer to the optimum than cold ones: auto's
table within 1e-5 relative of the cold path's).
"""

from __future__ import annotations

import contextlib
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from ... import _progress
from ..._numeric import binary_nll
from ...data import TopLabelData, kfold_split
from ...errors import DataError, TopcalError
from ..context import FitContext
from ..foldmemo import sharing
from ..registry import calibrator, get_class

__all__ = [
    "CrossFit",
    "cross_fit",
    "refit_start",
    "scratch_fit",
    "scratch_options",
]


def scratch_options(name: str, warm=None, fold: bool = False) -> dict:
    """The ``fit`` options of a scratch ``name`` model: keep nothing for later
    (``keep="predictions"``), start from the fitted model ``warm``'s optimum where the
    method has an optimiser (see the module docstring); ``fold``: a cross-validation fold's
    fit (its :class:`~topcal.calibrators.context.FitContext`)."""
    warm = warm if get_class(name)._warm_starts else None
    return {"keep": "predictions", "warm": warm, "context": FitContext(fold=bool(fold))}


def scratch_fit(
    name: str,
    train: TopLabelData,
    fold: int | None = None,
    warm=None,
    params: dict | None = None,
):
    """A scratch ``name`` model (:func:`scratch_options`) fitted on ``train``, warnings
    ignored; ``fold``: the index of the cross-validation fold it is fitted for, or None."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        options = scratch_options(name, warm, fold=fold is not None)
        return calibrator(name, **(params or {})).fit(train, **options)


@dataclass
class CrossFit:
    """The outcome of :func:`cross_fit`.

    Attributes
    ----------
    folds : list of TopLabelData
    target : TopLabelData
        The folds concatenated: row i of every confidence array is its row i.
    confidence : dict
        ``{method: out-of-fold confidence per row of target}`` for the methods that fitted
        in every fold.
    errors : dict
        ``{method: (fold index, "ErrorType: message")}`` for those that failed (the first
        failure; the method is not fitted in later folds).
    warm : dict
        ``{method: its all-data fit}`` that warm-started the folds (auto's first look: its
        fits of the ``_warm_refit`` methods; :func:`refit_start`).
    first_of_k : bool
        Set on a run of one fold whose fits were made on the other folds of a K-fold split
        whose first fold it is (auto's first look where few rows a class make it so): what
        :func:`cross_fit`'s ``done`` needs.
    """

    folds: list
    target: TopLabelData
    confidence: dict = field(default_factory=dict)
    errors: dict = field(default_factory=dict)
    warm: dict = field(default_factory=dict)
    #: the methods whose fit in ``warm`` was made on this run's data (not taken from
    #: ``begin``)
    on_data: set = field(default_factory=set)
    #: (a run of one fold) its fits were made on the other K - 1 of the K folds it is the
    #: first of
    first_of_k: bool = False

    def losses(self, name: str) -> tuple[np.ndarray, np.ndarray]:
        """Per row of ``target``, the held-out NLL of ``name`` if the prediction is right
        and if it is wrong."""
        c = self.confidence[name]
        return binary_nll(1.0, 0.0, c), binary_nll(0.0, 1.0, c)


def _reusable(done, fold, names) -> dict:
    """``{method: fold-0 confidences}`` that :func:`cross_fit` takes from ``done``."""
    if done is None or not done.first_of_k or len(done.folds) != 1:
        return {}
    d = done.folds[0]
    same = (
        d.n_rows == fold.n_rows
        and np.array_equal(d.pred, fold.pred)
        and np.array_equal(d.score, fold.score)
        and np.array_equal(d.tp, fold.tp)
        and np.array_equal(d.fp, fold.fp)
    )
    return {n: done.confidence[n] for n in names if same and n in done.confidence}


def refit_start(name: str | None, *runs):
    """The fit of ``name`` in the first of ``runs`` that is not None (auto: the K folds'
    all-data fits, else the first look's) where its method may start a refit on the same or
    more rows there (``_warm_refit``: the vector maps; auto's final fit), else None (also
    for ``name`` None: a blend). Every run's fits are dropped."""
    live = [r for r in runs if r is not None]
    ok = live and name is not None and get_class(name)._warm_refit
    warm = live[0].warm.get(name) if ok else None
    for r in live:
        r.warm.clear()
    return warm


def cross_fit(
    data: TopLabelData,
    names,
    n_folds: int,
    *,
    seed: int = 0,
    params: dict | None = None,
    fit: Callable | None = None,
    on_model: Callable | None = None,
    desc: str = "cross-fitting",
    begin: dict | None = None,
    done=None,
    record: list | None = None,
) -> CrossFit:
    """Fit every method of ``names`` on each fold's training part and predict the fold.

    Parameters
    ----------
    data : TopLabelData (labelled)
    names : sequence of str
        Registered method names.
    n_folds : int >= 2
    seed : int, default 0
        Seed of the fold split.
    params : dict, optional
        ``{method: {parameter: value}}`` of the all-data fits that warm-start the folds' (a
        caller's ``fit`` builds the folds' models with the same).
    fit : callable(name, train, fold, warm) -> fitted calibrator, optional
        How a fold's model is fitted (default :func:`scratch_fit`); a caller that collects
        warnings or passes parameters gives its own, building the model with
        :func:`scratch_options` (``warm``: the warm start, or None).
    on_model : callable(name, fold, model, train), optional
        Called after each fold's fit (folds counted from 0).
    desc : str
        The progress bar's label.
    begin : dict, optional
        ``{method: fitted model}`` the all-data fits that warm-start the folds start from in
        turn (auto: its first look's ``vs``/``sms``, fitted on fewer rows of the same data).
    done : CrossFit, optional
        A run of one fold that is fold 0 of these folds, fitted on the other K - 1 (auto's
        first look): its fold-0 confidences are taken instead of fitting fold 0 again (the
        same fit, started cold: within the optimiser's tolerance of a warm one), and the
        folds start from its fit in ``begin``. Ignored unless it is marked ``first_of_k``
        and its fold holds exactly fold 0's rows.
    record : list, optional
        Where the run is appended (a fit context's ``runs``).

    A method whose fit or prediction raises a :class:`~topcal.errors.TopcalError` is
    recorded in ``errors`` and skipped in the later folds; the others go on.
    """
    folds = kfold_split(data, n_folds, seed=seed)
    names = list(names)
    # the default fit ignores the folds' warnings, and so does their prediction
    quiet = fit is None
    fit = scratch_fit if fit is None else fit
    parts: dict = {n: [] for n in names}
    errors: dict = {}
    reuse = _reusable(done, folds[0], names)
    starts = [n for n in names if get_class(n)._warm_starts]
    total = (n_folds + 1) * len(starts) + n_folds * (len(names) - len(starts))
    bar = _progress.bar(total=total, desc=desc, unit=" fits")
    try:
        warm, on_data = _all_data_fits(data, starts, reuse, begin or {}, params or {}, bar)
        for f in range(n_folds):
            _one_fold(f, folds, names, (fit, quiet, on_model), warm, reuse, parts, errors, bar)
    finally:
        bar.close()
    out = CrossFit(folds, TopLabelData.concat(folds), _joined(parts, errors), errors, warm)
    out.on_data = on_data
    if record is not None:
        record.append(out)
    return out


def _joined(parts, errors) -> dict:
    """Each method's out-of-fold confidences (but a failed method's), its fold parts freed
    as they are joined (peak memory)."""
    confidence = {}
    for n in list(parts):
        p = parts.pop(n)
        if n not in errors:
            confidence[n] = np.concatenate(p)
        del p
    return confidence


def _all_data_fits(data, starts, reuse, begin, params, bar) -> tuple[dict, set]:
    """The all-data fits that warm-start the folds of the methods ``starts``, by name (a
    method whose all-data fit fails has none: the folds' cold fits then say whether it
    fails), and the names of those fitted here on ``data`` (the others taken from
    ``begin``)."""
    warm, on_data = {}, set()
    # the all-data fits share what they derive alike from data, as a fold's do (a vs and its
    # vs-hier-platt: one first stage, one solve)
    with sharing(data):
        for name in starts:
            bar.update()
            if name in reuse and name in begin and not params.get(name):
                warm[name] = begin[name]  # fitted on the other K - 1 folds: as near a start
                continue
            try:
                warm[name] = scratch_fit(
                    name, data, warm=begin.get(name), params=params.get(name)
                )
                on_data.add(name)
            except TopcalError:
                pass
    return warm, on_data


def _one_fold(
    f, folds, names, fitting: tuple[Any, Any, Any], warm, reuse, parts, errors, bar
) -> None:
    """Fit every method still running on fold ``f``'s training part (the other folds) and
    keep its confidences on the fold (``fitting``: the fit callable, whether it is quiet,
    on_model)."""
    n_folds = len(folds)
    train = TopLabelData.concat([folds[g] for g in range(n_folds) if g != f])
    if train.n_samples <= 0:
        raise DataError(f"fold {f}'s training part holds no samples; use fewer folds")
    # what the methods derive alike from train, and from the fold they predict, derived once
    # (foldmemo.py)
    with sharing(train), sharing(folds[f]):
        for name in names:
            bar.update()
            if name in errors:
                continue
            if f == 0 and name in reuse:
                parts[name].append(reuse[name])
                continue
            _fold_fit(name, train, folds[f], f, warm, *fitting, parts, errors)


def _fold_fit(name, train, fold, f, warm, fit, quiet, on_model, parts, errors) -> None:
    """Fit ``name`` on fold ``f``'s training part and append its confidences on the fold to
    ``parts[name]``, or record its error in ``errors``."""
    try:
        model = fit(name, train, f, warm.get(name))
        with warnings.catch_warnings() if quiet else contextlib.nullcontext():
            if quiet:
                warnings.simplefilter("ignore")
            parts[name].append(model.predict(fold))
    except TopcalError as exc:
        errors[name] = (f, f"{type(exc).__name__}: {exc}")
        return
    if on_model is not None:
        on_model(name, f, model, train)
