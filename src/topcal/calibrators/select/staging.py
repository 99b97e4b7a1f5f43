"""``auto``'s first look: one cheap split for every candidate, full K-fold only for the
contenders.

Stage 1 (:func:`first_look`): the per-sample data the choice is made on is dealt into seeded
stratified folds of about ``rows`` rows (:func:`~topcal.data.kfold_split`); every candidate
is fitted once on the first fold (a scratch fit, as a cross-validation fold's) and scored on
the next folds, at most :data:`TEST_FOLDS` of them (so on up to 8 x ``rows`` held-out rows).
The first fold holds ``max(rows, ROWS_PER_CLASS x classes)`` rows, so that per-class
candidates see enough rows of every class: a per-class fit on few rows a class lags its fit
on the K folds' more rows (its learning curve), which favours the pooled candidates at the
first look. Where that is more than half the rows, the first look is the first fold of
auto's own K folds instead (fit on the other K - 1, scored on it): the same training size as
the K folds (on ImageNet's 1,000 classes, fits on 10,000-12,500 rows against the K folds'
20,000-32,000 dropped ``kde-mon2`` and ``hier-platt``, members of the blend there: held out
0.3-0.7% worse); the K folds then take the contenders' confidences on that fold from it
instead of fitting it again (:func:`~.crossfit.cross_fit`'s ``done``). Its table is auto's
(:func:`~.rules.tabulate_cv`: mean NLL, standard error of the paired difference to the
stage's best).

Stage 2: the candidates whose stage-1 excess over the best is at most :data:`MARGIN`
standard errors of the paired difference (ties at the margin kept), those that failed in
stage 1 (the full K-fold says whether they fail) and the baseline (``uncalibrated``: it
costs nothing and the table's gain is measured against it) go on to auto's full K-fold
cross-validation; the rest stop at stage 1. That is racing / successive halving (Jamieson &
Talwalkar 2016) with one cut. The margin is 3 x auto's one-standard-error rule: a candidate
dropped at stage 1 lies about 3 SE of a paired difference on up to 8 x ``rows`` rows behind
the best, further than auto's tolerance from being chosen unless its fit gains much more
from the 4-8 x more training rows of stage 2 than the best's does.

Where the first look leaves one contender and the baseline is beyond the margin too, the K
folds could not change the choice (the baseline is the only other candidate): they are
skipped, and the choice is *decided at the first look* (:func:`decisive`): auto's table is
then the first look's (the contender and the baseline, scored on the test part) and no blend
is tried.

The first look is skipped (every candidate reaches stage 2, as before) for binned data (its
cost is its bins), for data with fewer than 2 x ``rows`` rows, and with
``Auto(screen=None)``.

The record (``Auto.stages_``, the model file's ``stages``): ``{"rows", "test", "margin",
"best", "decided", "table": {method: {"nll", "diff_se", "error", "stage"}}}``: the first
fold's and the test part's samples, the margin, stage 1's best, the stage the choice was
made at (1: decided at the first look, 2: by the K folds), and per candidate its stage-1
mean NLL, the SE of its paired difference to that best, its error (None where it ran) and
the stage it reached (1: stopped at the first look, or all of them where it decided; 2: the
K folds).
"""

from __future__ import annotations

import warnings

from ...data import TopLabelData, kfold_split
from ...errors import TopcalError
from .rules import tabulate_cv
from .crossfit import CrossFit, scratch_fit
from ..foldmemo import sharing
from ..registry import BASELINE, fits_from_counts

__all__ = [
    "SCREEN_ROWS",
    "MARGIN",
    "TEST_FOLDS",
    "ROWS_PER_CLASS",
    "first_look",
    "contenders",
    "decisive",
    "best_score_method",
    "record",
    "check_record",
    "rule_text",
]

#: Default of ``Auto(screen=...)``: rows of the first look's training fold.
SCREEN_ROWS = 2000

#: Standard errors of the paired difference behind stage 1's best that still reach stage 2.
MARGIN = 3.0

#: Folds (of the first fold's size) the first look scores on.
TEST_FOLDS = 8

#: The first fold holds at least this many rows per class (else: one fold of the K folds)
ROWS_PER_CLASS = 20


def _split(data: TopLabelData, rows: int, seed: int, n_folds: int):
    """(first fold, test part, whether the test part is the K folds' first fold) of the
    first look, or None where the data is too small for it."""
    if data.is_binned or data.n_rows < 2 * rows:
        return None
    rows = max(rows, ROWS_PER_CLASS * data.n_classes)
    if rows > data.n_rows // 2:  # few rows a class: fit on what a fold of the K folds fits on
        groups = [range(1, n_folds), [0]]
        return (*kfold_split(data, n_folds, seed=seed, groups=groups), True)
    n = max(2, data.n_rows // rows)
    groups = [[0], range(1, min(n, 1 + TEST_FOLDS))]
    return (*kfold_split(data, n, seed=seed, groups=groups), False)


def first_look(
    data: TopLabelData, names, *, rows: int, seed: int = 0, folds: int = 5, record=None
):
    """Stage 1 on ``data`` for the methods ``names``: ``(table, train samples, test samples,
    run)``, or None where the first look is skipped (binned data, fewer than 2 x ``rows``
    rows); ``run.warm`` holds the fits of the methods whose refit may start from them
    (``_warm_refit``: where the first look decides, auto's final fit does;
    :func:`~.crossfit.refit_start`).

    ``table`` is :func:`~.rules.tabulate_cv`'s on the test part; a method that failed has
    its error there. The run (a :class:`~.crossfit.CrossFit` of one fold: the test part) is
    appended to ``record`` where given, before the K folds' (the report reuses the last one:
    the first look's where it decided).
    """
    split = _split(data, int(rows), seed, int(folds))
    if split is None:
        return None
    train, test, first_of_k = split  # (first_of_k: test is the K folds' first fold)
    run = CrossFit([test], test, first_of_k=first_of_k)
    # the temperature family's common preparation of train, once; the vector maps' margins
    # on test
    with sharing(train), sharing(test):
        for name in names:
            try:
                model = scratch_fit(name, train)
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    run.confidence[name] = model.predict(test)
                if model._warm_refit:
                    run.warm[name] = model
            except TopcalError as exc:
                run.errors[name] = (0, f"{type(exc).__name__}: {exc}")
            model = None
    if record is not None:
        record.append(run)
    try:
        table = tabulate_cv(run, list(names))
    except TopcalError:  # every candidate failed on the first fold: let stage 2 say
        table = {n: {"nll": None, "diff_se": None, "error": run.errors[n][1]} for n in names}
    return table, float(train.n_samples), float(test.n_samples), run


def contenders(table: dict, margin: float = MARGIN) -> list[str]:
    """The methods of a first-look ``table`` that reach stage 2, in table order: within
    ``margin`` standard errors of the paired difference of the best mean (ties kept),
    failed, or the baseline."""
    ok = [n for n, v in table.items() if v["nll"] is not None]
    if not ok:
        return list(table)
    best = min(ok, key=lambda n: table[n]["nll"])
    return [
        n
        for n, v in table.items()
        if n == BASELINE
        or v["nll"] is None
        or v["nll"] - table[best]["nll"] <= margin * (v.get("diff_se") or 0.0)
    ]


def decisive(table: dict, reached, margin: float = MARGIN) -> bool:
    """Whether the first look decides: one contender in ``reached`` besides the baseline,
    and the baseline itself (if it ran) beyond ``margin`` standard errors of it."""
    others = [n for n in reached if n != BASELINE]
    if len(others) != 1 or table[others[0]]["nll"] is None:
        return False
    raw = table.get(BASELINE)
    return (
        raw is None
        or raw["nll"] is None
        or raw["nll"] - table[others[0]]["nll"] > margin * (raw.get("diff_se") or 0.0)
    )


def best_score_method(table: dict) -> str | None:
    """The score method (one that refits from mergeable statistics) with the smallest mean
    in ``table`` (auto's table or the first look's), or None (``update`` of a full-vector
    choice)."""
    ok = [n for n, v in table.items() if v.get("nll") is not None and fits_from_counts(n)]
    return min(ok, key=lambda n: table[n]["nll"]) if ok else None


def record(
    table: dict, reached, train: float, test: float, margin: float, decided: int
) -> dict:
    """The stage record auto keeps (see the module docstring)."""
    ok = [n for n, v in table.items() if v["nll"] is not None]
    return {
        "rows": train,
        "test": test,
        "margin": float(margin),
        "best": min(ok, key=lambda n: table[n]["nll"]) if ok else None,
        "decided": int(decided),
        "table": {
            n: {
                "nll": v["nll"],
                "diff_se": v.get("diff_se"),
                "error": v.get("error"),
                "stage": 2 if n in reached and decided == 2 else 1,
            }
            for n, v in table.items()
        },
    }


def check_record(rec, names) -> dict:
    """A loaded stage record, checked against the cross-validation table's ``names``
    (ValueError for anything odd)."""
    if not isinstance(rec, dict) or not all(
        k in rec for k in ("rows", "test", "margin", "best", "decided", "table")
    ):
        raise ValueError("stages must hold rows, test, margin, best, decided and table")
    table = rec["table"]
    if not isinstance(table, dict) or any(
        not isinstance(v, dict) or v.get("stage") not in (1, 2) for v in table.values()
    ):
        raise ValueError("every candidate of the stage table needs its stage (1 or 2)")
    if rec["decided"] == 2:
        if {n for n, v in table.items() if v["stage"] == 2} != set(names):
            raise ValueError("the candidates that reached stage 2 must be the table's")
    elif rec["decided"] != 1 or not set(names) <= set(table):
        raise ValueError("decided must be 1 (the first look's table) or 2 (the K folds')")
    return rec


def rule_text(rec: dict | None) -> str:
    """The first look in words (describe and the report print it), or '' where none ran."""
    if not rec:
        return ""
    head = (
        f"first look: every candidate fitted on {rec['rows']:g} samples and scored on "
        f"{rec['test']:g} others"
    )
    if rec["decided"] == 1:
        return (
            f"{head}; decided there: every other candidate, the baseline included, more than "
            f"{rec['margin']:g} SE of the paired difference behind {rec['best']}"
        )
    dropped = sum(v["stage"] == 1 for v in rec["table"].values())
    return (
        f"{head}; {dropped} of {len(rec['table'])} stopped there, more than "
        f"{rec['margin']:g} SE of the paired difference behind the best ({rec['best']})"
    )
