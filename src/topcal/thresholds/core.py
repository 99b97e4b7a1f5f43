"""Acceptance thresholds with a precision guarantee (Learn-then-Test).

:func:`fit_thresholds` chooses, per predicted class (and once over all classes), the loosest
cut-off ``t`` on the **calibrated confidence** such that the predictions with confidence >=
t have precision >= ``precision``, with probability >= 1 - ``delta`` over the labelled
sample. The cut-off is on the calibrated confidence, not on the raw score, so it works for
every method (the full-vector ones too) and reads as a probability.

Method (Angelopoulos, Bates, Candès, Jordan and Lei 2021, "Learn then Test"): for each
cut-off t of a fixed grid (:data:`GRID`, chosen before any data are seen) the null
hypothesis "precision(t) < target" is tested with the exact binomial tail p-value P(Bin(n_t,
target) >= c_t) (n_t predictions accepted, c_t of them right; given n_t the accepted rows
are an i.i.d. sample of the accepted population). The hypotheses are tested in a fixed
sequence from the strictest cut-off to the loosest, each at level delta', stopping at the
first that is not rejected: one sequence's family-wise error is at most delta', whatever the
grid size. :data:`STARTS` = 3 sequences run, each at delta' = delta / 3 (a union bound:
delta in all), starting at the strictest cut-off that accepts at least n0, 4 n0 and 16 n0
predictions, where n0 = ceil(log delta' / log target) is the fewest for which a rejection is
possible at all (every one of them right); the result is the loosest cut-off any sequence
rejects. The starts depend on the confidences only, never on the labels.

Classes too small to show the target alone: a class with fewer predictions than
``pool_below`` (by default :data:`POOL_FACTOR` times the fewest a per-class sequence can
test, a count of predictions, never of labels, so the split is fixed before the labels are
looked at) joins one **shared** group; the group gets one cut-off, by the same test on its
rows pooled, and its statement is about the accepted predictions of the group's classes
together. ``pool_below=0`` tests every class alone (no group).

Multiplicity across classes: ``multiplicity="per-class"`` tests each class (and the shared
group) at delta (each statement holds with probability 1 - delta); ``"bonferroni"`` at delta
/ S (S = the statements: the classes tested alone, plus one for the shared group), so that
all statements hold together with probability 1 - delta. The global cut-off is tested at
delta.

Pooled cut-offs (the global one, the shared group's; :func:`pooled_cutoff`) come from two
families tested at delta / 2 each: on the calibrated confidence, and on the raw top score
(rows of many classes ranked by the network's own score can reach the target sooner than
ranked by a confidence fitted on a few dozen rows a class); the one that accepts more is
kept, and says which it is (``ClassCutoff.on``). Both families' statements hold together
with probability 1 - delta, so keeping either keeps the guarantee.

Assumptions: the labelled rows and the rows the cut-offs are applied to are exchangeable
(i.i.d. from one distribution), per predicted class; the calibrator was fitted on other rows
(enforced: the model's :class:`~topcal.evidence.fingerprint.Fingerprint`). See
docs/thresholds.md.
"""

from __future__ import annotations

import dataclasses
import warnings

import numpy as np

from ._ltt import (
    accepted_counts,
    binomial_tail,
    fixed_sequence,
    n_min,
    ordered_counts,
    sequences,
    sgr_threshold,
)
from .._typing import ArrayLike, PathLike
from ..calibrators.base import Calibrator
from ..data import TopLabelData, rows_by_class
from ..errors import DataError, NotFittedError, ParameterError, TopcalError, TopcalWarning
from ..evidence.fingerprint import MAX_OVERLAP, WARN_OVERLAP, unchecked
from ..io.inputs import as_data
from .split import check_split_args, split_rows
from .cutoffs import (
    FORMAT,
    ClassCutoff,
    Thresholds,
    load_thresholds,
    loads_thresholds,
    model_digest,
    validate_settings,
)

__all__ = [
    "fit_thresholds",
    "fit_and_threshold",
    "Thresholds",
    "ClassCutoff",
    "GRID",
    "binomial_tail",
    "fixed_sequence",
    "sgr_threshold",
    "ltt_cutoff",
    "STARTS",
    "START_FACTOR",
    "GLOBAL_STARTS",
    "POOL_FACTOR",
    "POOL_AUTO",
    "sequences",
    "check_not_fitting_data",
    "pooled_cutoff",
    "load_thresholds",
    "loads_thresholds",
    "model_digest",
    "FORMAT",
]


#: The candidate cut-offs, fixed before any data are seen: 0, 0.0005, ..., 1 and, near 1
#: where over-confident networks put most predictions, 1 - 10^-x for x from 3.3 to 9.
GRID = np.unique(
    np.concatenate([np.arange(2001) / 2000.0, 1.0 - np.logspace(-3.3, -9.0, 115)])
)


#: Fixed sequences run side by side, each at delta / STARTS, starting where 1, 4 and 16
#: (START_FACTOR^j) times the fewest testable predictions are accepted: one sequence that
#: starts at the very top stops at the first error among a few dozen predictions (even at a
#: true precision of 0.99); the later starts keep the search going. The union bound over the
#: sequences keeps the family-wise error at delta. Per class (often a few dozen rows) three
#: starts keep the fewest testable predictions small.
STARTS = 3
START_FACTOR = 4
#: The global cut-off (all rows: thousands) runs more, denser starts: 6 sequences from 1, 2,
#: 4, ..., 32 times the fewest testable predictions, so that some sequence starts within a
#: factor 2 below any cut-off and a dip of the precision near the top stops only the
#: sequences that start above it.
GLOBAL_STARTS = (6, 2)
#: A class is tested alone when it has at least POOL_FACTOR times the fewest predictions its
#: sequences can test (n0 at delta / STARTS): below that even a class that is always right
#: has at most one or two starts and shows the target rarely; it joins the shared group
#: instead. With 1,000 classes of a few dozen rows (ImageNet), every class is in the group
#: and the group's cut-off accepts what the global one does; with a few large classes, every
#: class is tested alone.
POOL_FACTOR = 4
#: ``pool_below``'s default: POOL_FACTOR times the fewest predictions a class's sequences
#: can test.
POOL_AUTO = "auto"


def ltt_cutoff(
    name,
    conf,
    tp,
    fp,
    precision: float,
    delta: float,
    *,
    starts: tuple[int, int] = (STARTS, START_FACTOR),
    score=None,
) -> ClassCutoff:
    """Learn-then-Test on one class's (or all) rows: the loosest cut-off any of the fixed
    sequences rejects "precision < target" at; ``starts`` = (number S, factor f): sequence j
    starts where f^j times the fewest testable predictions are accepted, each at ``delta`` /
    S (:func:`sequences`).

    Without ``score`` the candidates are the fixed :data:`GRID` of confidences. With
    ``score`` (the rows' raw top scores) the candidates are the rows ordered by confidence,
    then raw score (both label-free): every distinct (confidence, score) pair is a cut-off,
    so a step curve (``hist``, whose bins tie many rows at one confidence) still offers fine
    cut-offs inside a tie."""
    from scipy.special import betaincinv

    total = float(tp.sum() + fp.sum())
    n_starts = starts[0]
    need = n_min(precision, delta / n_starts)
    if total < need:
        return ClassCutoff(
            name,
            None,
            delta,
            total,
            reason=(
                f"only {total:g} predictions in the labelled data; at least {need} are "
                f"needed to show precision {precision:.12g} at delta={delta:.12g}"
            ),
        )
    cut, cut_score, n, c = _candidate_counts(conf, tp, fp, score)
    p = binomial_tail(c, n, precision)
    first = _sequence_starts(n, need, starts)
    best = sequences(p, first, delta / n_starts)
    stuck = first[0]
    if best < 0:
        i = stuck
        return ClassCutoff(
            name,
            None,
            delta,
            total,
            float(n[i]),
            float(c[i]),
            float(c[i] / n[i]),
            None,
            float(p[i]),
            reason=(
                f"precision never reaches {precision:.12g} at level delta={delta:.12g}: at "
                f"the strictest testable cut-off ({n[i]:g} predictions with confidence >= "
                f"{cut[i]:.6g}) {c[i]:g} are right (p = {p[i]:.3g} > delta/{n_starts})"
            ),
        )
    nn, cc = float(n[best]), float(c[best])
    lower = float(betaincinv(cc, nn - cc + 1.0, delta)) if cc > 0 else 0.0
    return ClassCutoff(
        name,
        float(cut[best]),
        delta,
        total,
        nn,
        cc,
        cc / nn,
        lower,
        float(p[best]),
        score_cutoff=None if cut_score is None else float(cut_score[best]),
    )


def _candidate_counts(conf, tp, fp, score):
    """``(cut, cut_score, n, c)`` of :func:`ltt_cutoff`'s candidate cut-offs, strictest first:
    the confidences (and raw scores, None without ``score``) and the predictions accepted and
    right at each."""
    if score is None:
        cut = GRID[::-1]  # strictest first
        n, c = accepted_counts(conf, tp, fp, cut)
        return cut, None, n, c
    return ordered_counts(conf, np.asarray(score, dtype=np.float64), tp, fp)


def _sequence_starts(n, need: float, starts: tuple[int, int]) -> list[int]:
    """Where each fixed sequence starts (confidences only): the first candidate accepting
    factor^j times the fewest testable predictions, for j < the number of sequences."""
    n_starts, factor = starts
    return sorted(
        {
            int(np.argmax(n >= need * factor**j))
            for j in range(n_starts)
            if n[-1] >= need * factor**j
        }
    )


def pooled_cutoff(name, conf, tp, fp, precision: float, delta: float, score) -> ClassCutoff:
    """The cut-off of rows of many classes pooled (the global one, the shared group's): the
    looser of two families, each tested at ``delta`` / 2 (a union bound: delta in all), one
    on the calibrated confidence (ties broken by the raw score), one on the raw top score
    itself; whichever accepts more of these rows (ties: the confidence). Where the raw score
    rises with the confidence over these rows (checked on them, without labels) the families
    are one, tested at ``delta``.

    Why both: with a few dozen fitting rows a class, a calibrator's confidence (``hist``'s
    above all) can rank rows of different classes worse than the network's own score near
    the top; on ImageNet at precision 0.95 the confidence's cut-off accepted 0.41-0.47 of
    the rows where the raw score's accepts ~0.54 (docs/thresholds.md)."""
    raw = np.asarray(score, dtype=np.float64)
    conf = np.asarray(conf, dtype=np.float64)
    order = np.lexsort((raw, conf))
    if np.all(np.diff(raw[order]) >= 0):
        # the raw score rises with the confidence (an uncalibrated model, one monotone
        # curve): every cut-off on the score is one on the confidence, so there is one
        # family, at delta
        return ltt_cutoff(
            name, conf, tp, fp, precision, delta, starts=GLOBAL_STARTS, score=raw
        )
    on_conf = ltt_cutoff(
        name, conf, tp, fp, precision, delta / 2, starts=GLOBAL_STARTS, score=raw
    )
    on_score = ltt_cutoff(
        name, raw, tp, fp, precision, delta / 2, starts=GLOBAL_STARTS, score=raw
    )
    if on_score.cutoff is None or on_score.n_accepted <= on_conf.n_accepted:
        return on_conf
    return dataclasses.replace(on_score, score_cutoff=None, on="score")


def _fingerprint(model):
    """The fitting rows' fingerprint (an adapted model's: its source model's,
    ``evidence_``)."""
    return model.evidence_.fingerprint


def check_not_fitting_data(model, data: TopLabelData) -> None:
    """Raise DataError when ``data`` holds the rows ``model`` was fitted on: all of them,
    most of them (a superset or a resample), or mostly consists of them (bit for bit or
    re-encoded: see :mod:`topcal.evidence.fingerprint`); warn where at least
    :data:`WARN_OVERLAP` of its rows are fitting rows.

    Models saved before fingerprints (or their coarse keys) were kept cannot be checked (in
    full); then one warning says so.
    """
    fp = _fingerprint(model)
    why = unchecked(fp, data)
    if why is not None:
        warnings.warn(why, TopcalWarning, stacklevel=2)
    if fp is None:
        return
    ov = fp.overlap(data)
    if ov.same or ov.of_fit >= MAX_OVERLAP or ov.of_data >= MAX_OVERLAP:
        if ov.same:
            what = "the labelled data are the rows the model was fitted on"
        elif ov.of_data >= MAX_OVERLAP:
            what = (
                f"about {ov.of_data:.0%} of the labelled rows are rows the model was fitted on"
            )
        else:
            what = (
                f"the labelled data contain about {ov.of_fit:.0%} of the model's fitting rows"
            )
        raise DataError(
            f"{what} (by its fingerprint of them, in any encoding), so no guarantee holds "
            "on them; choose thresholds on held-out labelled data (fit the calibrator on "
            "one part, run threshold on another)"
        )
    if ov.of_data >= WARN_OVERLAP:
        warnings.warn(
            f"about {ov.of_data:.0%} of the labelled rows look like rows the model was "
            "fitted on (same classes, same score to 6 decimals); the guarantee assumes "
            "held-out rows, so drop them if they are",
            TopcalWarning,
            stacklevel=2,
        )


def fit_thresholds(
    model: Calibrator,
    data: TopLabelData | ArrayLike | PathLike,
    precision: float = 0.95,
    delta: float = 0.05,
    *,
    mode: str = "per-class",
    multiplicity: str = "per-class",
    pool_below: float | str = POOL_AUTO,
    y: ArrayLike | None = None,
    classes: ArrayLike | None = None,
    kind: str = "auto",
) -> Thresholds:
    """Cut-offs on ``model``'s calibrated confidence with precision >= ``precision`` w.p. >=
    1 - ``delta``.

    Parameters
    ----------
    model : fitted Calibrator
        Fitted on other rows than ``data`` (checked: a DataError otherwise).
    data : TopLabelData, array-like of shape (n, K), DataFrame or path
        Labelled held-out data (``y`` gives the labels of a score matrix).
    precision, delta : float in (0, 1)
        The target precision and the error probability of the guarantee.
    mode : {"per-class", "global"}
        Which cut-offs :meth:`Thresholds.accept` applies (both are computed).
    multiplicity : {"per-class", "bonferroni"}
        Each statement (a class tested alone, the shared group) at ``delta``, or at
        ``delta`` / S (S statements: all of them hold together).
    pool_below : "auto" or number >= 0, default "auto"
        Classes with fewer predictions in ``data`` share one cut-off (the shared group);
        "auto": :data:`POOL_FACTOR` times the fewest predictions a class's sequences can
        test; 0: every class tested alone.

    Returns
    -------
    Thresholds
    """
    validate_settings(precision, delta, mode, multiplicity)
    if not hasattr(model, "classes_"):
        raise NotFittedError("the model is not fitted; fit it on other labelled data first")
    if not isinstance(data, TopLabelData):
        data = as_data(
            data, y, classes=model.classes_ if classes is None else classes, kind=kind
        )
    data.require_labels("choosing thresholds")
    data = data.with_classes(model.classes_, "the labelled data")
    check_not_fitting_data(model, data)
    conf = model.predict(data)
    if not np.isfinite(conf).all():
        raise DataError("the model's confidence is not finite on this data")
    tp, fp, score = data.tp, data.fp, data.score
    n_pred = np.bincount(data.pred, weights=tp + fp, minlength=len(model.classes_))
    below = _pool_below(pool_below, precision, delta, multiplicity, len(model.classes_))
    small = n_pred < below
    statements = int((~small).sum()) + int(small.any())
    level = delta / max(statements, 1) if multiplicity == "bonferroni" else delta
    shared, per = _class_cutoffs(model.classes_, data, conf, small, precision, level)
    overall = pooled_cutoff("(all)", conf, tp, fp, precision, delta, score)
    return Thresholds(
        float(precision),
        float(delta),
        mode,
        multiplicity,
        tuple(model.classes_),
        tuple(per),
        overall,
        model.name,
        model_digest(model),
        data.n_samples,
        shared=shared,
        pool_below=float(below),
    )


def _class_cutoffs(classes, data: TopLabelData, conf, small, precision: float, level: float):
    """``(shared, per)``: the shared group's cut-off (None without ``small`` classes) and one
    :class:`ClassCutoff` per class, each tested at ``level``."""
    tp, fp, score = data.tp, data.fp, data.score
    shared = None
    if small.any():
        rows = np.flatnonzero(small[data.pred])
        shared = pooled_cutoff(
            "(shared)", conf[rows], tp[rows], fp[rows], precision, level, score[rows]
        )
    per = []
    # each class's rows from one sort (a pass over the rows per class cost 14 s at 10^5
    # classes); the same ascending row numbers as np.flatnonzero(pred == k)
    rows_of = dict(rows_by_class(data.pred, len(classes)))
    empty = np.zeros(0, dtype=np.int64)
    for k, name in enumerate(classes):
        idx = rows_of.get(k, empty)
        if small[k]:
            per.append(_in_group(name, shared, conf[idx], tp[idx], fp[idx], level, score[idx]))
        else:
            per.append(
                ltt_cutoff(
                    name, conf[idx], tp[idx], fp[idx], precision, level, score=score[idx]
                )
            )
    return shared, per


def _pool_below(
    pool_below, precision: float, delta: float, multiplicity: str, n_classes: int
) -> float:
    """The class size (predictions) below which a class joins the shared group."""
    if isinstance(pool_below, str) and pool_below == POOL_AUTO:
        # at the level a class alone would be tested at if every class were (the strictest
        # case)
        level = delta / n_classes if multiplicity == "bonferroni" else delta
        return float(POOL_FACTOR * n_min(precision, level / STARTS))
    if (
        isinstance(pool_below, bool)
        or not isinstance(pool_below, (int, float))
        or not (np.isfinite(pool_below) and pool_below >= 0)
    ):
        raise TopcalError(
            f"pool_below must be 'auto' or a number of predictions >= 0, got {pool_below!r}"
        )
    return float(pool_below)


def _in_group(name, shared: ClassCutoff, conf, tp, fp, level: float, score) -> ClassCutoff:
    """A class of the shared group: the group's cut-off, and the class's own counts there."""
    total = float(tp.sum() + fp.sum())
    if shared.cutoff is None:
        return ClassCutoff(
            name,
            None,
            level,
            total,
            group="shared",
            reason=f"in the shared group, which has no cut-off: {shared.reason}",
        )
    keep = shared.accepts(conf, score)
    n, c = float(tp[keep].sum() + fp[keep].sum()), float(tp[keep].sum())
    return ClassCutoff(
        name,
        shared.cutoff,
        level,
        total,
        n,
        c,
        c / n if n > 0 else None,
        group="shared",
        score_cutoff=shared.score_cutoff,
        on=shared.on,
    )


def fit_and_threshold(
    data: TopLabelData | ArrayLike | PathLike,
    method: str | Calibrator = "hist",
    precision: float = 0.95,
    delta: float = 0.05,
    *,
    fit_fraction: float = 0.5,
    seed: int = 0,
    mode: str = "per-class",
    multiplicity: str = "per-class",
    pool_below: float | str = "auto",
    y: ArrayLike | None = None,
    classes: ArrayLike | None = None,
    kind: str = "auto",
) -> tuple[Calibrator, Thresholds]:
    """Fit a calibrator and choose cut-offs on disjoint parts of one labelled dataset.

    Parameters
    ----------
    data : TopLabelData, array-like of shape (n, K), DataFrame or path
        Labelled data, one row a sample (not binned counts: their rows are not samples).
    method : str or unfitted Calibrator, default "hist"
        The calibrator to fit on the fitting part (a method name, or an instance with its
        parameters set).
    precision, delta : float in (0, 1)
        The target precision and the error probability of the guarantee.
    fit_fraction : float in (0, 1), default 0.5
        The share of each predicted class's rows that fits the calibrator; the rest choose
        the cut-offs.
    seed : int >= 0, default 0
        The split's random seed.
    mode, multiplicity, pool_below
        As in :func:`topcal.fit_thresholds`.

    Returns
    -------
    (model, thresholds) : the fitted calibrator and its :class:`Thresholds`, whose ``split``
    records the split.
    """
    from ..calibrators import calibrator
    from .cutoffs import validate_settings

    validate_settings(precision, delta, mode, multiplicity)
    check_split_args(fit_fraction, seed)
    if isinstance(method, Calibrator):
        if hasattr(method, "classes_"):
            raise ParameterError(
                "method is a fitted calibrator; pass a method name or an unfitted calibrator"
            )
        model = method
    else:
        model = calibrator(method)
    if not isinstance(data, TopLabelData):
        data = as_data(data, y, classes=classes, kind=kind)
    data.require_labels("fitting and choosing thresholds")
    if data.bin_edges is not None:
        raise DataError(
            "binned counts cannot be split into samples; fit on one file of samples and "
            "choose thresholds on another (topcal fit, then topcal threshold --model)"
        )
    mask, split = split_rows(data.pred, fit_fraction, seed)
    if split.n_fit == 0 or split.n_cutoff == 0:
        part = "fitting" if split.n_fit == 0 else "cut-off"
        raise DataError(
            f"fit_fraction {fit_fraction:.6g} of {data.pred.shape[0]} rows leaves the "
            f"{part} part empty; give more labelled rows or a fraction nearer 0.5"
        )
    model.fit(data.subset(mask))
    th = fit_thresholds(
        model,
        data.subset(~mask),
        precision,
        delta,
        mode=mode,
        multiplicity=multiplicity,
        pool_below=pool_below,
    )
    return model, dataclasses.replace(th, split=split)
