"""The report's warnings: what a careful analyst checks first (:func:`diagnose`), and
aligning a second data set's classes."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .. import plots
from ..calibrators.registry import BASELINE
from ..calibrators.wrapper import Wrapper
from ..data import TopLabelData, preview
from ..errors import TopcalError
from ..evaluate import Comparison, class_curves

__all__ = [
    "Finding",
    "FindingGroup",
    "group_findings",
    "diagnose",
    "count_wiggles",
    "smoother_advice",
    "align_classes",
    "KIND_TITLES",
    "MIN_POSITIVES",
    "MAX_SIGN_CHANGES",
    "MAX_EXTRAPOLATED",
    "CLOSE_ECE1",
    "CLOSE_NLL_RATIO",
    "WIGGLE_AMPLITUDE",
]


#: A class with fewer positives than this gets a warning: its curve rests on a handful of
#: samples (the paper's MNIST runs had ~100 per class).
MIN_POSITIVES = 30
#: More slope sign changes than this inside the observed scores is "wiggly" (kde-mon4 allows
#: 4; more is usually noise, paper Fig. 13).
MAX_SIGN_CHANGES = 4
#: Warn when more than this share of the attainable score range lies outside the class's
#: observed scores (the curve there is extrapolated).
MAX_EXTRAPOLATED = 0.3
#: A class whose uncalibrated ECE1 is below this, with NLL within 10 % of the best method,
#: is "already close to calibrated" (paper Fig. 7).
CLOSE_ECE1 = 0.06
CLOSE_NLL_RATIO = 1.10


@dataclass(frozen=True)
class Finding:
    """One warning of the report.

    Attributes
    ----------
    kind : str
        "never-predicted", "few-positives", "no-tp", "no-fp", "wiggles", "extrapolated",
        "already-calibrated", "calibration-hurts", "overfit" or "skipped".
    text : str
        One line for the reader.
    class_name : str or None
    method : str or None
    """

    kind: str
    text: str
    class_name: str | None = None
    method: str | None = None
    # : larger is worse, within one kind (which classes a summary names first)
    severity: float = 0.0

    @property
    def subject(self) -> str:
        """What the finding is about, in a few words: the class, the method, or both."""
        if (
            self.class_name is not None
            and self.method is not None
            and self.kind not in ("already-calibrated", "calibration-hurts")
        ):
            return f"{self.method} on {self.class_name!r}"
        if self.class_name is not None:
            return repr(self.class_name)
        return self.method or "the data"


#: A kind's summary line when it repeats (``group_findings``); kinds not listed use their
#: first finding.
KIND_TITLES = {
    "never-predicted": "classes never predicted: every method falls back to the raw score",
    "few-positives": "classes with few positives: their curves rest on a handful of samples (treat "
    "as rough guesses)",
    "no-tp": "classes without true positives: the shrunk defaults borrow from the other classes",
    "no-fp": "classes without false positives: the test set cannot show their error rate",
    "wiggles": "curves that change direction more often than kde-mon4 allows: they probably fit "
    "noise",
    "extrapolated": "classes whose observed scores leave much of the range extrapolated (shaded in "
    "the figures)",
    "already-calibrated": "classes whose uncalibrated score is already close to calibrated",
    "calibration-hurts": "classes where every method is worse than the uncalibrated score out of "
    "sample",
    "overfit": "methods much worse on the second test set: part of their fit is noise",
    "fit-warning": "warnings from fitting the methods (all of them: the report's Warnings section)",
    "certainty": "methods whose curves reach confidence 0 or 1 (a held-out mistake there costs "
    "27.6 nats)",
}


@dataclass(frozen=True)
class FindingGroup:
    """The findings of one kind, worst first (see :func:`group_findings`)."""

    kind: str
    findings: tuple

    @property
    def title(self) -> str:
        return KIND_TITLES.get(self.kind, self.findings[0].text)

    def summary(self, shown: int = 5) -> str:
        """One line: the count, what they are, and the worst ``shown`` subjects."""
        subjects = list(
            dict.fromkeys(f.subject for f in self.findings)
        )  # one mention each, worst first
        worst = ", ".join(subjects[:shown])
        more = f" and {len(subjects) - shown} more" if len(subjects) > shown else ""
        return f"{len(self.findings)} {self.title}; worst: {worst}{more}."


def group_findings(
    findings: list[Finding], *, expand: int = 8
) -> list[Finding | FindingGroup]:
    """Findings grouped by kind, in order of first appearance; within a kind, worst first.

    Returns a list whose items are a :class:`Finding` (a kind with at most ``expand``
    findings: shown as it is) or a :class:`FindingGroup` (a kind that repeats, e.g. over a
    thousand classes: shown as one summary line).
    """
    kinds: dict = {}
    for f in findings:
        kinds.setdefault(f.kind, []).append(f)
    out: list = []
    for kind, items in kinds.items():
        if len(items) <= expand:
            out.extend(items)
        else:
            order = sorted(range(len(items)), key=lambda i: (-items[i].severity, i))
            out.append(FindingGroup(kind, tuple(items[i] for i in order)))
    return out


#: A change of direction counts as a wiggle only once the curve has moved back by this much
#: (confidence units): invisible ripples are not wiggles.
WIGGLE_AMPLITUDE = 0.01


def count_wiggles(y: np.ndarray, amplitude: float = WIGGLE_AMPLITUDE) -> int:
    """Changes of direction of ``y`` that reverse by at least ``amplitude`` (a zigzag
    count).

    A curve that rises, dips by 0.05 and rises again has 2; a monotone curve with ripples
    smaller than ``amplitude`` has 0.
    """
    y = np.asarray(y, dtype=np.float64)
    if y.size < 2 or y.max() - y.min() < amplitude:
        return 0
    d = np.diff(y)
    if (d >= 0).all() or (d <= 0).all():  # monotone: no reversal (most curves; no walk)
        return 0
    count, direction, hi, lo, ext = 0, 0, y[0], y[0], y[0]
    for v in y[1:]:
        if direction == 0:
            hi, lo = max(hi, v), min(lo, v)
            if v - lo >= amplitude:
                direction, ext = 1, v
            elif hi - v >= amplitude:
                direction, ext = -1, v
        elif direction == 1:
            if v > ext:
                ext = v
            elif ext - v >= amplitude:
                direction, ext, count = -1, v, count + 1
        else:
            if v < ext:
                ext = v
            elif v - ext >= amplitude:
                direction, ext, count = 1, v, count + 1
    return count


def diagnose(
    data: TopLabelData,
    models: dict,
    comparison: Comparison,
    holdout: Comparison | None = None,
    *,
    min_positives: float = MIN_POSITIVES,
    max_sign_changes: int = MAX_SIGN_CHANGES,
    max_extrapolated: float = MAX_EXTRAPOLATED,
    close_ece1: float = CLOSE_ECE1,
) -> list[Finding]:
    """The warnings of the report.

    Parameters
    ----------
    data : TopLabelData
        The fitting data.
    models : dict of str -> fitted Calibrator
    comparison : Comparison or its dict form
        Metrics of ``models`` on ``data`` (as :func:`topcal.evaluate.compare_methods`
        returns them).
    holdout : Comparison or its dict form, optional
        Metrics of the same fits on a second test set.
    min_positives, max_sign_changes, max_extrapolated, close_ece1
        Thresholds (defaults: module constants).

    Returns
    -------
    list of Finding
        In the order: per-class data problems, wiggles, extrapolation, already-calibrated
        classes, overfitting seen on the second set.

    Notes
    -----
    The *attainable* score range of a class starts at lo + (hi - lo) / K: a top score (a
    maximum over K probabilities, or PhANNs' sum of ten) is never below that, so the empty
    region beneath it is not counted as extrapolation.
    """
    out = (
        _class_findings(data, min_positives)
        + _wiggle_findings(data, models, max_sign_changes)
        + _extrapolation_findings(data, max_extrapolated)
    )
    res = Comparison.of(comparison).methods
    return out + _baseline_findings(data, res, close_ece1) + _overfit_findings(res, holdout)


def _class_findings(data: TopLabelData, min_positives: float) -> list[Finding]:
    """Per-class data problems: never predicted, few positives, no TP or no FP."""
    out: list[Finding] = []
    tp, fp = data.class_counts()
    for k, c in enumerate(data.classes):
        n = tp[k] + fp[k]
        if n == 0:
            out.append(
                Finding(
                    "never-predicted",
                    f"{c}: never predicted; every method falls back to the raw score.",
                    c,
                )
            )
            continue
        if n < min_positives:
            out.append(
                Finding(
                    "few-positives",
                    f"{c}: only {n:g} positives (TP {tp[k]:g}, FP {fp[k]:g}); its own "
                    "curve rests on a handful of samples (the shrunk defaults lean on the "
                    "pooled curve instead), treat it as a rough guess.",
                    c,
                    severity=min_positives - n,
                )
            )
        if tp[k] == 0:
            out.append(
                Finding(
                    "no-tp",
                    f"{c}: no true positives; the paper's unshrunk estimators give every "
                    "prediction of this class confidence 0, the shrunk defaults borrow "
                    "from the other classes.",
                    c,
                    severity=n,
                )
            )
        elif fp[k] == 0:
            out.append(
                Finding(
                    "no-fp",
                    f"{c}: no false positives (the test set cannot show its error rate); "
                    "the paper's unshrunk estimators give every prediction of this class "
                    "confidence 1, the shrunk defaults borrow from the other classes.",
                    c,
                    severity=n,
                )
            )
    return out


def _wiggle_findings(data: TopLabelData, models: dict, max_sign_changes: int) -> list:
    """Smooth curves that change direction more than ``max_sign_changes`` times."""
    out: list[Finding] = []
    supports = data.class_supports()
    spread = [k for k, sup in enumerate(supports) if sup is not None and sup[1] > sup[0]]
    for name, m in models.items():
        if m.step_curve or m.is_baseline or not plots.is_score_curve(m):
            continue  # a step function's jumps are no wiggles; the baseline fits nothing
        for ks, ys in class_curves(m, spread, supports, 513):
            for k, y in zip(ks, ys):
                n_ch = count_wiggles(y)
                if n_ch > max_sign_changes:
                    c = data.classes[k]
                    out.append(
                        Finding(
                            "wiggles",
                            f"{name} on {c}: the curve changes direction {n_ch} times (by at "
                            f"least {WIGGLE_AMPLITUDE:g}) inside the observed scores; it "
                            f"probably fits noise ({smoother_advice(m)}).",
                            c,
                            name,
                            severity=n_ch,
                        )
                    )
    return out



def _extrapolation_findings(data: TopLabelData, max_extrapolated: float) -> list[Finding]:
    """Classes whose observed scores leave more than ``max_extrapolated`` of the attainable
    range to extrapolation."""
    out: list[Finding] = []
    lo, hi = data.score_range
    att_lo = lo + (hi - lo) / max(data.n_classes, 1)
    span = hi - att_lo
    for c, sup in zip(data.classes, data.class_supports()):
        if sup is None or span <= 0:
            continue
        outside = max(0.0, sup[0] - att_lo) + max(0.0, hi - sup[1])
        share = outside / span
        if share > max_extrapolated:
            out.append(
                Finding(
                    "extrapolated",
                    f"{c}: scores observed only in [{sup[0]:.3g}, {sup[1]:.3g}]; "
                    f"{share:.0%} of the attainable range [{att_lo:.3g}, {hi:.3g}] is "
                    "extrapolated (shaded in the figures).",
                    c,
                    severity=share,
                )
            )
    return out


def _baseline_findings(data: TopLabelData, res: dict, close_ece1: float) -> list[Finding]:
    """Classes where calibration hurts out of sample, or where the uncalibrated score is
    already close to calibrated (``res``: the comparison's methods)."""
    out: list[Finding] = []
    if BASELINE in res:
        uncal_nll = res[BASELINE].nll.per_class
        uncal_ece = res[BASELINE].ece1.per_class
        others = [m for m in res if m != BASELINE]
        for c in data.classes:
            e, u = uncal_ece[c], uncal_nll[c]
            if e is None or u is None or not others:
                continue
            best = min(
                others,
                key=lambda m: (
                    np.inf if res[m].nll.per_class[c] is None else res[m].nll.per_class[c]
                ),
            )
            b = res[best].nll.per_class[c]
            # every method loses to the raw score by more than the closeness ratio: "gains
            # little" would hide harm (a CIFAR-100 class at NLL 0.066 uncalibrated, 0.183
            # with auto)
            if b is not None and b > CLOSE_NLL_RATIO * u:
                out.append(
                    Finding(
                        "calibration-hurts",
                        f"{c}: every method is worse than the uncalibrated score out of "
                        f"sample (NLL {u:.4f} vs {b:.4f} for the best, {best}); "
                        "calibration hurts this class.",
                        c,
                        BASELINE,
                        severity=b / max(u, 1e-12),
                    )
                )
            elif b is not None and e <= close_ece1 and u <= CLOSE_NLL_RATIO * b:
                out.append(
                    Finding(
                        "already-calibrated",
                        f"{c}: the uncalibrated score is already close to calibrated "
                        f"(ECE1 {e:.3f}; NLL {u:.4f} vs best {b:.4f} by {best}); "
                        "calibration gains little.",
                        c,
                        BASELINE,
                        severity=close_ece1 - e,
                    )
                )
    return out


def _overfit_findings(res: dict, holdout) -> list[Finding]:
    """Methods whose NLL on the second set is over 1.2 times that on the fitting set."""
    out: list[Finding] = []
    if holdout is not None:
        for name, r in Comparison.of(holdout).methods.items():
            a = res[name].nll.overall if name in res else None
            b = r.nll.overall
            if a is not None and a > 0 and b > 1.2 * a and name != BASELINE:
                out.append(
                    Finding(
                        "overfit",
                        f"{name}: NLL {a:.4f} on the fitting set but {b:.4f} on the "
                        f"second set (+{b / a - 1:.0%}); part of its fit is noise.",
                        None,
                        name,
                        severity=b / a,
                    )
                )
    return out


def align_classes(
    other: TopLabelData, data: TopLabelData, what: str = "the other data"
) -> TopLabelData:
    """``other`` re-expressed on ``data``'s class list (a file of extra samples may name
    only some classes).

    Top-score and binned data whose classes are a subset of ``data``'s are re-indexed; full
    score vectors must have exactly ``data``'s columns.

    Raises
    ------
    TopcalError
        When the labels are missing, the score ranges differ, or the classes cannot be
        matched.
    """
    other.require_labels(what)
    if other.score_range != data.score_range:
        raise TopcalError(
            f"{what} has score range {other.score_range} but the data has {data.score_range}; "
            "declare the same --score-range for both"
        )
    if other.classes == data.classes:
        return other
    unknown = [c for c in other.classes if c not in data.classes]
    if unknown or other.has_full:
        why = (
            f"classes {preview(unknown)} are not in the data"
            if unknown
            else "its score vectors have other columns than the data's"
        )
        raise TopcalError(
            f"{what} must have the same classes as the data: {why} (data classes: "
            f"{preview(data.classes)})"
        )
    return other.with_classes(data.classes, what)


def smoother_advice(model) -> str:
    """What to try instead of a curve that wiggles: kde-mon2, unless the model is a choice
    by cross-validation (``auto``), which already weighed kde-mon2 and the other candidates."""
    choice = model.choice() if isinstance(model, Wrapper) else None
    if choice is None:
        return "compare kde-mon2"
    return (
        f"{choice['chosen']} was chosen by cross-validated NLL over the smoother candidates; "
        "see its table under Fitted parameters"
    )
