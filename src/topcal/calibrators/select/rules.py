"""auto's candidates and choice: the defaults, simplicity tiers, paired standard errors, the
cross-validation table, the rule and the blend.

Kept apart from :mod:`topcal.calibrators.select.auto` (whose docstring describes the rule and
the blend; its users import these names from here) so that each file stays under 600 lines.
"""

from __future__ import annotations

import math

from collections.abc import Mapping
from typing import Any

import numpy as np

from ..._numeric import binary_nll, dot
from ...errors import TopcalError
from ...metrics import nll
from .blend import blend_weights
from ..registry import available_methods, fits_from_counts, get_class, is_registered

__all__ = [
    "check_cv_table",
    "DEFAULT_CANDIDATES",
    "TIERS",
    "TIER_LEGEND",
    "tier",
    "paired_se",
    "choose",
    "tabulate_cv",
    "TOLERANCE",
    "BLEND_GATE",
    "BLEND_SIZE",
    "plan_blend",
    "CV_ROWS",
]

#: Default of ``Auto(cv_rows=...)``: per-sample data with more rows chooses on a stratified
#: subsample of this many.
CV_ROWS = 100_000

#: Default candidates left out above this many classes where they also outnumber half the
#: rows (see ``Auto._names``).
LARGE_SYSTEM_CANDIDATES, LARGE_SYSTEM_CLASSES = ("tswa",), 1000

#: Above :data:`LARGE_SYSTEM_CLASSES` classes, the default candidates of tier 3 (unshrunk
#: per-class fits: ``bts``, ``btswa``, ``csts``...) are left out where the median predicted
#: class holds fewer samples than this: one or two parameters a class fitted on a sample or
#: two sit at their bounds. On 10^6 Zipf rows of 71,507 predicted classes (median 2 samples)
#: ``bts`` and ``btswa`` scored a first-look NLL of 0.90 and 1.41 against the best's 0.51
#: and the raw score's 0.52, and took 16 of the first look's 30 s. Named, they run.
UNSHRUNK_MIN_MEDIAN_SAMPLES = 5

#: Candidates, simplest first. Not ``pooled-kde-mon2``: never chosen nor blended on the 29
#: held-out cells of bench_heldout.py (--quick, and --folds 2 on every set), whose choices
#: and NLL it left unchanged when dropped; its b_mon2 bandwidth on the pooled scores is set
#: by the sparse low scores and flattens the curve near 1 (its intervals covered 0.79 of
#: DenseNet-BC-100's cells, docs/intervals.md). ``auto(candidates=[...])`` still takes it.
DEFAULT_CANDIDATES = (
    "uncalibrated",
    "pooled-platt",
    "pooled-beta",
    "pooled-hist",
    "sts",
    "hier-platt",
    "hier-beta",
    "kde-mon2",
    "hist",
    "cum-opt",
    "vs",
    "sms",
    "vs-hier-platt",
    "tswa",
    "csts",
    "bts",
    "btswa",
)

#: Default of ``Auto(tolerance=...)`` and :func:`choose`: standard errors a simpler
#: candidate may lose by.
TOLERANCE = 1.0

#: A blend replaces the choice only where its out-of-fold NLL is lower than the choice's by
#: more than this many standard errors of the paired difference (the gate measured on the
#: auto-rule grid, docs/benchmarks.md).
BLEND_GATE = 1.0

#: Components of a blend: the choice and the best others by mean cross-validated NLL.
BLEND_SIZE = 3


class _Tiers(Mapping):
    """Registered method name -> its simplicity tier (the class attribute ``tier``;
    read-only)."""

    def __getitem__(self, name: str) -> float:
        cls = get_class(name, unlisted=True) if is_registered(name) else None
        if cls is None:
            raise KeyError(name)
        return cls.tier

    def __iter__(self):
        return iter(available_methods())

    def __len__(self) -> int:
        return len(available_methods())


#: Simplicity of a method (lower: simpler), from each class's ``tier``: 0 nothing fitted, 1
#: one parametric curve for all classes, 1.5 one non-parametric curve for all classes, 2
#: per-class curves shrunk toward a pooled one, 3 per-class fits.
TIERS = _Tiers()

#: The tiers in words (describe, compare and the report print it under the table).
TIER_LEGEND = (
    "0 uncalibrated, 1 one parametric curve for all classes, 1.5 one non-parametric curve "
    "for all classes, 2 per-class curves shrunk toward a pooled one, 2.5 a shrunk "
    "class-to-class matrix, 2.25 vs with shrunk per-class curves on top, 2.75 sms with a "
    "pooled curve on top, 3 per-class"
)


def tier(name: str) -> float:
    """The simplicity tier of method ``name`` (:data:`TIERS`; 3 for names not registered)."""
    return TIERS.get(name, 3)


def paired_se(tp, fp, loss_tp, loss_fp, ref_tp=None, ref_fp=None) -> tuple[float, float]:
    """(mean, standard error) of per-sample losses, or of their paired difference to a
    reference.

    Row i holds tp_i samples with loss ``loss_tp[i]`` and fp_i with ``loss_fp[i]`` (1/0 per
    sample; counts for bins); with ``ref_tp``/``ref_fp`` the per-sample values are the
    differences to the reference's losses on the same samples. The standard error is sd /
    sqrt(N) with the unbiased sd over the N samples.
    """
    a = np.asarray(loss_tp, dtype=np.float64)
    b = np.asarray(loss_fp, dtype=np.float64)
    if ref_tp is not None:
        a, b = a - ref_tp, b - ref_fp
    n = float(tp.sum() + fp.sum())
    mean = (dot(tp, a) + dot(fp, b)) / n
    if n <= 1:
        return mean, float("inf")
    var = (dot(tp, (a - mean) ** 2) + dot(fp, (b - mean) ** 2)) / (n - 1.0)
    return mean, float(np.sqrt(max(var, 0.0) / n))


def choose(cv: dict, tolerance: float = TOLERANCE) -> tuple[str, str]:
    """(chosen, best) from a table ``{name: {"nll", "diff_se", ...}}`` (failed candidates:
    nll None).

    best: the smallest mean (first in table order on ties); chosen: among the candidates
    whose excess over the best is at most ``tolerance`` x the standard error of the paired
    difference, the lowest :func:`tier`, then the smallest mean.
    """
    ok = [n for n, v in cv.items() if v["nll"] is not None]
    best = min(ok, key=lambda n: cv[n]["nll"])
    near = [
        n
        for n in ok
        if cv[n]["nll"] - cv[best]["nll"] <= tolerance * (cv[n].get("diff_se") or 0.0)
    ]
    chosen = min(near, key=lambda n: (tier(n), cv[n]["nll"]))
    return chosen, best


def tabulate_cv(run, names) -> dict:
    """auto's cross-validation table from a :class:`~.crossfit.CrossFit` ``run`` of the
    methods ``names``.

    ``{name: {"nll": mean held-out NLL, "se": its standard error, "diff_se": standard error
    of the paired difference to the best (smallest mean), "per_class": [...], "error":
    None}}``; a method that failed has ``nll``, ``se``, ``diff_se`` and ``per_class`` None
    and its error. Raises :class:`~topcal.errors.TopcalError` when every method failed.
    """
    target = run.target
    cv: dict[str, dict[str, Any]] = {}
    tp, fp = target.tp, target.fp
    for n in names:
        if n in run.confidence:
            m = nll(target, run.confidence[n])
            per = [float(v) if np.isfinite(v) else None for v in m.per_class]
            cv[n] = {"nll": float(m.overall), "se": None, "per_class": per, "error": None}
        else:
            cv[n] = {
                "nll": None,
                "se": None,
                "diff_se": None,
                "per_class": None,
                "error": run.errors[n][1],
            }
    ok = [n for n in names if cv[n]["nll"] is not None]
    if not ok:
        raise TopcalError(
            "auto: every candidate failed in cross-validation ("
            + "; ".join(f"{n}: {cv[n]['error']}" for n in names)
            + "); choose a method yourself"
        )
    lead = min(ok, key=lambda n: cv[n]["nll"])
    # the others' losses made one at a time, once each (not again for the paired
    # difference): two row arrays a candidate are not all held at once (peak memory)
    best = run.losses(lead)
    for n in ok:
        loss = run.losses(n)
        cv[n]["se"] = paired_se(tp, fp, *loss)[1]
        cv[n]["diff_se"] = paired_se(tp, fp, *loss, *best)[1]
        loss = None
    return cv


def plan_blend(run, cv: dict, chosen: str, gate: float = BLEND_GATE):
    """The blend of ``chosen`` with the best other candidates, or None where it does not
    clearly win.

    Components: ``chosen`` and the :data:`BLEND_SIZE` - 1 best others by mean (score methods
    that ran in every fold; a full-vector choice is never blended, since a blend must refit
    from score statistics). Weights: :func:`~.blend.blend_weights` on the candidates'
    out-of-fold confidences in ``run``. Returns ``{"methods", "weights", "nll", "gain",
    "se"}`` (gain: the blend's mean paired NLL difference to the choice, negative where
    better; se: its standard error) when the blend is better than the choice by more than
    ``gate`` standard errors, else None.
    """
    if not fits_from_counts(chosen):
        return None
    others = sorted(
        (
            n
            for n, v in cv.items()
            if v["nll"] is not None
            and n != chosen
            and n in run.confidence
            and fits_from_counts(n)
        ),
        key=lambda n: cv[n]["nll"],
    )
    names = [chosen] + others[: BLEND_SIZE - 1]
    if len(names) < 2:
        return None
    target = run.target
    w = blend_weights(target.tp, target.fp, [run.confidence[n] for n in names])
    keep = [i for i in range(len(names)) if w[i] > 0]
    if (
        len(keep) < 2 or keep[0] != 0
    ):  # the choice itself must stay in: otherwise it is another choice
        return None
    names, w = [names[i] for i in keep], w[keep]
    p = sum(wi * run.confidence[n] for wi, n in zip(w, names))
    lt, lf = binary_nll(1.0, 0.0, p), binary_nll(0.0, 1.0, p)
    gain, se = paired_se(target.tp, target.fp, lt, lf, *run.losses(chosen))
    if not gain < -gate * se:
        return None
    mean = paired_se(target.tp, target.fp, lt, lf)[0]
    return {
        "methods": names,
        "weights": [float(v) for v in w],
        "nll": float(mean),
        "gain": float(gain),
        "se": float(se),
    }


class Candidates:
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
            n for n in available_methods() if n != "auto"
        )


def _number_or_none(v) -> bool:
    return v is None or (
        isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
    )


def check_cv_table(cv: dict, n_classes: int) -> None:
    """A model file's cross-validation table: per candidate a dict whose losses are finite
    numbers or null, ``per_class`` null or one per class, ``error`` null or text (raise
    ValueError)."""
    for name, v in cv.items():
        if not isinstance(v, dict) or "nll" not in v or "error" not in v:
            raise ValueError(f"the cross-validation entry of {name!r} must hold nll and error")
        if not all(_number_or_none(v.get(k)) for k in ("nll", "se", "diff_se")):
            raise ValueError(
                f"the cross-validation losses of {name!r} must be numbers or null"
            )
        if not (v["error"] is None or isinstance(v["error"], str)):
            raise ValueError(f"the cross-validation error of {name!r} must be text or null")
        pc = v.get("per_class")
        if pc is not None and (
            not isinstance(pc, list)
            or len(pc) != n_classes
            or not all(_number_or_none(x) for x in pc)
        ):
            raise ValueError(
                f"the per-class losses of {name!r} must be null or {n_classes} numbers (or "
                "nulls)"
            )
