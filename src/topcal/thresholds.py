"""Acceptance thresholds with a precision guarantee (Learn-then-Test).

:func:`fit_thresholds` chooses, per predicted class (and once over all
classes), the loosest cut-off ``t`` on the **calibrated confidence** such
that the predictions with confidence >= t have precision >= ``precision``,
with probability >= 1 - ``delta`` over the labelled sample. The cut-off is
on the calibrated confidence, not on the raw score, so it works for every
method (the full-vector ones too) and reads as a probability.

Method (Angelopoulos, Bates, Candès, Jordan and Lei 2021, "Learn then Test"):
for each cut-off t of a fixed grid (:data:`GRID`, chosen before any data are
seen) the null hypothesis "precision(t) < target" is tested with the exact
binomial tail p-value P(Bin(n_t, target) >= c_t) (n_t predictions accepted,
c_t of them right; given n_t the accepted rows are an i.i.d. sample of the
accepted population). The hypotheses are tested in a fixed sequence from the
strictest cut-off to the loosest, each at level delta', stopping at the first
that is not rejected: one sequence's family-wise error is at most delta',
whatever the grid size. :data:`STARTS` = 3 sequences run, each at
delta' = delta / 3 (a union bound: delta in all), starting at the strictest
cut-off that accepts at least n0, 4 n0 and 16 n0 predictions, where
n0 = ceil(log delta' / log target) is the fewest for which a rejection is
possible at all (every one of them right); the result is the loosest cut-off
any sequence rejects. The starts depend on the confidences only, never on
the labels.

Classes too small to show the target alone: a class with fewer predictions
than ``pool_below`` (by default :data:`POOL_FACTOR` times the fewest a
per-class sequence can test, a count of predictions, never of labels, so the
split is fixed before the labels are looked at) joins one **shared** group;
the group gets one cut-off, by the same test on its rows pooled, and its
statement is about the accepted predictions of the group's classes together.
``pool_below=0`` tests every class alone (no group).

Multiplicity across classes: ``multiplicity="per-class"`` tests each class
(and the shared group) at delta (each statement holds with probability
1 - delta); ``"bonferroni"`` at delta / S (S = the statements: the classes
tested alone, plus one for the shared group), so that all statements hold
together with probability 1 - delta. The global cut-off is one test sequence
at delta.

Assumptions: the labelled rows and the rows the cut-offs are applied to are
exchangeable (i.i.d. from one distribution), per predicted class; the
calibrator was fitted on other rows (enforced: the model's
:class:`~topcal.fingerprint.Fingerprint`). See docs/thresholds.md.
"""

from __future__ import annotations

import hashlib
import html
import json
import math
import os
import warnings
from dataclasses import dataclass, field

import numpy as np

from ._fileio import read_text, write_text
from ._ltt import (
    accepted_counts,
    binomial_tail,
    fixed_sequence,
    n_min,
    ordered_counts,
    sequences,
    sgr_threshold,
)
from ._params import Interval, Options, validate_params
from ._version import __version__
from .data import TopLabelData, preview
from .errors import DataError, ModelFileError, NotFittedError, TopcalError, TopcalWarning
from .fingerprint import MAX_OVERLAP, WARN_OVERLAP
from .inputs import as_data
from .persist import canonical_json

__all__ = [
    "fit_thresholds",
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
    "load_thresholds",
    "loads_thresholds",
    "model_digest",
    "FORMAT",
]

FORMAT = "topcal-thresholds"
FORMAT_VERSION = 1
MODES = ("per-class", "global")
MULTIPLICITY = ("per-class", "bonferroni")

#: The candidate cut-offs, fixed before any data are seen: 0, 0.0005, ..., 1 and, near 1
#: where over-confident networks put most predictions, 1 - 10^-x for x from 3.3 to 9.
GRID = np.unique(np.concatenate([np.arange(2001) / 2000.0, 1.0 - np.logspace(-3.3, -9.0, 115)]))


def _as_cut(c) -> tuple[float, float]:
    """A cut-off as (confidence, tie-breaking score); NaN for none (no cut-off: nothing reaches it;
    no score: confidence >= cut-off)."""
    return (
        np.nan if c.cutoff is None else c.cutoff,
        np.nan if c.score_cutoff is None else c.score_cutoff,
    )


def _reaches(confidence, score, cut, score_cut) -> np.ndarray:
    """Rows above the cut-off, or equal to it with a raw score at least the tie-breaking score
    (any, where that is NaN); elementwise over arrays of cut-offs too (one per row)."""
    conf = np.asarray(confidence, dtype=np.float64)
    cut, score_cut = np.asarray(cut, dtype=np.float64), np.asarray(score_cut, dtype=np.float64)
    tie_free = np.isnan(score_cut)
    if score is None:
        if not np.all(tie_free | np.isnan(cut)):
            raise TopcalError(
                "these thresholds break ties of the confidence by the raw score: pass the "
                "rows' scores too"
            )
        tie_ok = tie_free
    else:
        with np.errstate(invalid="ignore"):
            tie_ok = tie_free | (np.asarray(score, dtype=np.float64) >= score_cut)
    with np.errstate(invalid="ignore"):  # NaN cut-off: no row reaches it
        return (conf > cut) | ((conf == cut) & tie_ok)


@dataclass(frozen=True)
class ClassCutoff:
    """The cut-off of one predicted class (or of all classes: ``name`` "(all)").

    ``cutoff`` is None when the target cannot be shown, and ``reason`` says
    why. ``precision`` is the labelled sample's precision at the cut-off,
    ``precision_lower`` its one-sided Clopper-Pearson lower bound at level
    ``level`` (the delta the class was tested at), ``p_value`` the test's.
    """

    name: str
    cutoff: float | None
    level: float
    n_predicted: float
    n_accepted: float = 0.0
    n_correct: float = 0.0
    precision: float | None = None
    precision_lower: float | None = None
    p_value: float | None = None
    reason: str | None = None
    #: "shared" where the cut-off is the shared group's (the statement is the group's); None: its
    #: own
    group: str | None = None
    #: the raw score that breaks ties at ``cutoff``: a row is accepted when its confidence is above
    #: ``cutoff``, or equal to it with a raw score >= ``score_cutoff`` (None: confidence >= cutoff)
    score_cutoff: float | None = None

    def accepts(self, confidence, score=None) -> np.ndarray:
        """Whether rows with these confidences (and raw scores) reach this cut-off."""
        return _reaches(confidence, score, *_as_cut(self))

    @property
    def accepted_fraction(self) -> float:
        return self.n_accepted / self.n_predicted if self.n_predicted > 0 else 0.0

    def to_dict(self) -> dict:
        return {
            "name": self.name,
            "cutoff": self.cutoff,
            "level": self.level,
            "n_predicted": self.n_predicted,
            "n_accepted": self.n_accepted,
            "n_correct": self.n_correct,
            "precision": self.precision,
            "precision_lower": self.precision_lower,
            "p_value": self.p_value,
            "reason": self.reason,
            "group": self.group,
            "score_cutoff": self.score_cutoff,
        }

    @classmethod
    def from_dict(cls, d: dict) -> "ClassCutoff":
        """Rebuild from :meth:`to_dict` output; every field checked (raises ValueError): a
        hand-edited cut-off of -inf, 2 or true would accept rows no guarantee covers. ``group`` and
        ``score_cutoff`` are absent from files before issue 33 (read as None)."""
        if not isinstance(d, dict):
            raise ValueError(f"a cut-off entry must be an object, got {type(d).__name__}")
        unit, count = Interval(0, 1), Interval(0, None)
        name = _field(d, "name", str)
        level = _field(d, "level", Interval(0, 1, "right"))
        group = _field(d, "group", str, True) if "group" in d else None
        if group not in (None, "shared"):
            raise ValueError("group must be null or 'shared'")
        score_cut = (
            _field(d, "score_cutoff", Interval(None, None), True) if "score_cutoff" in d else None
        )
        out = cls(
            name,
            _field(d, "cutoff", unit, True),
            level,
            *(_field(d, k, count) for k in ("n_predicted", "n_accepted", "n_correct")),
            *(_field(d, k, unit, True) for k in ("precision", "precision_lower", "p_value")),
            _field(d, "reason", str, True),
            group,
            score_cut,
        )
        if not out.n_correct <= out.n_accepted <= out.n_predicted:
            raise ValueError(f"the counts of {name!r} need n_correct <= n_accepted <= n_predicted")
        if out.score_cutoff is not None and out.cutoff is None:
            raise ValueError(f"{name!r} has a score_cutoff but no cutoff")
        return out


#: Fixed sequences run side by side, each at delta / STARTS, starting where 1, 4 and 16
#: (START_FACTOR^j) times the fewest testable predictions are accepted: one sequence that starts at
#: the very
#: top stops at the first error among a few dozen predictions (even at a true precision of 0.99);
#: the later
#: starts keep the search going. The union bound over the sequences keeps the family-wise error at
#: delta.
#: Per class (often a few dozen rows) three starts keep the fewest testable predictions small.
STARTS = 3
START_FACTOR = 4
#: The global cut-off (all rows: thousands) runs more, denser starts: 6 sequences from 1, 2, 4, ...,
#: 32
#: times the fewest testable predictions, so that some sequence starts within a factor 2 below any
#: cut-off
#: and a dip of the precision near the top stops only the sequences that start above it.
GLOBAL_STARTS = (6, 2)
#: A class is tested alone when it has at least POOL_FACTOR times the fewest predictions its
#: sequences can test (n0 at delta / STARTS): below that even a class that is always right has at
#: most one or two starts and shows the target rarely; it joins the shared group instead. With
#: 1,000 classes of a few dozen rows (ImageNet), every class is in the group and the group's cut-off
#: accepts what the global one does; with a few large classes, every class is tested alone.
POOL_FACTOR = 4
#: ``pool_below``'s default: POOL_FACTOR times the fewest predictions a class's sequences can test.
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
    """Learn-then-Test on one class's (or all) rows: the loosest cut-off any of the fixed sequences
    rejects "precision < target" at; ``starts`` = (number S, factor f): sequence j starts where f^j
    times
    the fewest testable predictions are accepted, each at ``delta`` / S (:func:`sequences`).

    Without ``score`` the candidates are the fixed :data:`GRID` of confidences. With ``score`` (the
    rows' raw top scores) the candidates are the rows ordered by confidence, then raw score (both
    label-free): every distinct (confidence, score) pair is a cut-off, so a step curve (``hist``,
    whose bins tie many rows at one confidence) still offers fine cut-offs inside a tie."""
    from scipy.special import betaincinv

    total = float(tp.sum() + fp.sum())
    n_starts, factor = starts
    need = n_min(precision, delta / n_starts)
    if total < need:
        return ClassCutoff(
            name,
            None,
            delta,
            total,
            reason=(
                f"only {total:g} predictions in the labelled data; at least {need} are needed to "
                f"show precision "
                f"{precision:g} at delta={delta:g}"
            ),
        )
    if score is None:
        cut = GRID[::-1]  # strictest first
        cut_score = None
        n, c = accepted_counts(conf, tp, fp, cut)
    else:
        cut, cut_score, n, c = ordered_counts(conf, np.asarray(score, dtype=np.float64), tp, fp)
    p = binomial_tail(c, n, precision)
    # the starts (confidences only): where START_FACTOR^j times the fewest testable predictions are
    # accepted
    first = sorted(
        {
            int(np.argmax(n >= need * factor**j))
            for j in range(n_starts)
            if n[-1] >= need * factor**j
        }
    )
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
                f"precision never reaches {precision:g} at level delta={delta:g}: at the strictest "
                f"testable cut-off ({n[i]:g} predictions with confidence >= {cut[i]:.6g}) "
                f"{c[i]:g} are right (p = {p[i]:.3g} > delta/{n_starts})"
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


def model_digest(model) -> str:
    """SHA-256 of a fitted model's canonical JSON: which model a thresholds file belongs to."""
    return hashlib.sha256(canonical_json(model.to_dict()).encode()).hexdigest()


def _fingerprint(model):
    """The fitting rows' fingerprint (an adapted model's: its source model's, ``evidence_``)."""
    return model.evidence_.fingerprint


def check_not_fitting_data(model, data: TopLabelData) -> None:
    """Raise DataError when ``data`` holds the rows ``model`` was fitted on: all of them, most of
    them (a superset or a resample), or mostly consists of them (bit for bit or re-encoded: see
    :mod:`topcal.fingerprint`); warn where at least :data:`WARN_OVERLAP` of its rows are fitting
    rows.

    Models saved before fingerprints were kept cannot be checked; then nothing is raised.
    """
    fp = _fingerprint(model)
    if fp is None:
        return
    ov = fp.overlap(data)
    if ov.same or ov.of_fit >= MAX_OVERLAP or ov.of_data >= MAX_OVERLAP:
        if ov.same:
            what = "the labelled data are the rows the model was fitted on"
        elif ov.of_data >= MAX_OVERLAP:
            what = f"about {ov.of_data:.0%} of the labelled rows are rows the model was fitted on"
        else:
            what = f"the labelled data contain about {ov.of_fit:.0%} of the model's fitting rows"
        raise DataError(
            f"{what} (by its fingerprint of them, in any encoding), so no guarantee holds on them; "
            "choose thresholds on held-out labelled data (fit the calibrator on one part, run "
            "threshold on another)"
        )
    if ov.of_data >= WARN_OVERLAP:
        warnings.warn(
            f"about {ov.of_data:.0%} of the labelled rows look like rows the model was fitted on "
            "(same classes, same score to 6 decimals); the guarantee assumes held-out rows, so "
            "drop them if they are",
            TopcalWarning,
            stacklevel=2,
        )


@dataclass(frozen=True)
class Thresholds:
    """Cut-offs on the calibrated confidence, per predicted class and global, with their guarantee.

    ``mode`` says which :meth:`accept` uses. Save with :meth:`save`, read
    with :func:`load_thresholds` (versioned JSON with a checksum).
    """

    precision: float
    delta: float
    mode: str
    multiplicity: str
    classes: tuple[str, ...]
    per_class: tuple[ClassCutoff, ...]
    overall: ClassCutoff
    model_method: str
    model_sha256: str
    n_samples: float
    grid: str = field(default="fixed-v1")
    #: the shared group's cut-off (its statement covers the group's classes together); None: no
    #: group
    shared: ClassCutoff | None = None
    #: classes with fewer predictions than this joined the shared group (0: every class alone)
    pool_below: float = 0.0

    def cutoffs(self) -> np.ndarray:
        """The cut-off each predicted class's rows must reach under ``mode`` (NaN: none
        accepted)."""
        if self.mode == "global":
            v = np.nan if self.overall.cutoff is None else self.overall.cutoff
            return np.full(len(self.classes), v)
        return np.array([np.nan if c.cutoff is None else c.cutoff for c in self.per_class])

    def check_model(self, model) -> None:
        """Raise TopcalError unless ``model`` is the model these thresholds were chosen for."""
        if tuple(model.classes_) != self.classes:
            raise TopcalError(
                f"the thresholds are for a model with classes {preview(self.classes)}, but this "
                f"model has "
                f"{preview(model.classes_)}; choose thresholds for this model with topcal threshold"
            )
        if model_digest(model) != self.model_sha256:
            raise TopcalError(
                f"the thresholds were chosen for another {self.model_method!r} model (checksum "
                f"differs: refitted "
                "or updated since); choose them again for this model with topcal threshold"
            )

    def accept(self, pred, confidence, score=None) -> np.ndarray:
        """Whether each row is accepted: its calibrated confidence reaches its predicted class's
        cut-off.

        ``pred``: class indices in ``classes``; rows of a class without a cut-off are not accepted.
        ``score``: the rows' raw top scores, which break ties of the confidence at a cut-off (needed
        where a cut-off has a ``score_cutoff``: files since issue 33).
        """
        if self.mode == "global":
            return self.overall.accepts(confidence, score)
        cuts = np.array([_as_cut(c) for c in self.per_class], dtype=np.float64).reshape(-1, 2)
        pred = np.asarray(pred)
        return _reaches(confidence, score, cuts[pred, 0], cuts[pred, 1])

    def to_dict(self) -> dict:
        return {
            "precision": self.precision,
            "delta": self.delta,
            "mode": self.mode,
            "multiplicity": self.multiplicity,
            "grid": self.grid,
            "classes": list(self.classes),
            "per_class": [c.to_dict() for c in self.per_class],
            "overall": self.overall.to_dict(),
            "model": {"method": self.model_method, "sha256": self.model_sha256},
            "n_samples": self.n_samples,
            "shared": None if self.shared is None else self.shared.to_dict(),
            "pool_below": self.pool_below,
        }

    @classmethod
    def from_dict(cls, d: dict) -> "Thresholds":
        """Rebuild from :meth:`to_dict` output; every field checked like a model file's
        (raises ValueError). ``shared`` and ``pool_below`` are absent from files before issue 33."""
        classes, per_class = _field(d, "classes", list), _field(d, "per_class", list)
        if not all(isinstance(c, str) for c in classes) or len(set(classes)) != len(classes):
            raise ValueError("classes must be distinct names (strings)")
        per = tuple(ClassCutoff.from_dict(c) for c in per_class)
        if [c.name for c in per] != classes:
            raise ValueError("the per_class entries must name the classes, in their order")
        overall = ClassCutoff.from_dict(_field(d, "overall", dict))
        if overall.name != "(all)":
            raise ValueError("the overall entry must be named '(all)'")
        model = _field(d, "model", dict)
        digest = _field(model, "sha256", str)
        if len(digest) != 64 or any(ch not in "0123456789abcdef" for ch in digest):
            raise ValueError("model.sha256 must be 64 hexadecimal digits")
        grid = _field(d, "grid", str)
        if grid != "fixed-v1":
            raise ValueError(f"grid {grid!r} is unknown to this topcal (it knows 'fixed-v1')")
        shared = _field(d, "shared", dict, True) if "shared" in d else None
        if shared is not None:
            shared = ClassCutoff.from_dict(shared)
            if shared.name != "(shared)":
                raise ValueError("the shared entry must be named '(shared)'")
        pool_below = _field(d, "pool_below", Interval(0, None)) if "pool_below" in d else 0.0
        unit = Interval(0, 1, "neither")
        out = cls(
            _field(d, "precision", unit),
            _field(d, "delta", unit),
            _field(d, "mode", str),
            _field(d, "multiplicity", str),
            tuple(classes),
            per,
            overall,
            _field(model, "method", str),
            digest,
            _field(d, "n_samples", Interval(0, None)),
            grid,
            shared,
            pool_below,
        )
        if any(c.group == "shared" for c in per) and (
            out.shared is None
            or any(
                c.group == "shared"
                and (c.cutoff, c.score_cutoff) != (out.shared.cutoff, out.shared.score_cutoff)
                for c in per
            )
        ):
            raise ValueError("a class of the shared group does not carry the group's cut-off")
        _validate(out.precision, out.delta, out.mode, out.multiplicity)
        return out

    def dumps(self) -> str:
        payload = self.to_dict()
        doc = {
            "format": FORMAT,
            "format_version": FORMAT_VERSION,
            "topcal_version": __version__,
            "thresholds": payload,
            "sha256": hashlib.sha256(canonical_json(payload).encode()).hexdigest(),
        }
        return json.dumps(doc, indent=1, allow_nan=False) + "\n"

    def save(self, path) -> None:
        """Write as versioned JSON, atomically."""
        write_text(path, self.dumps())

    #: Classes the notebook view lists (the global row is always shown).
    HTML_ROWS = 100

    def _repr_html_(self) -> str:
        """The notebook view: per class (and global) the cut-off, the labelled sample's precision
        there,
        its lower bound, and the accepted fraction, or why a class has no cut-off."""

        def num(v, fmt):
            return "&ndash;" if v is None else format(v, fmt)

        def row(c, strong=False):
            cells = [html.escape(c.name), num(c.cutoff, ".6g")]
            if c.cutoff is None:
                cells += [f"<td colspan='3'>no cut-off: {html.escape(c.reason or '')}</td>"]
                tds = "".join(f"<td>{v}</td>" for v in cells[:2]) + cells[2]
            else:
                bound = "shared group's" if c.group == "shared" else num(c.precision_lower, ".4f")
                cells += [
                    num(c.precision, ".4f"),
                    bound,
                    f"{c.accepted_fraction:.1%} ({c.n_accepted:g} of {c.n_predicted:g})",
                ]
                tds = "".join(f"<td>{v}</td>" for v in cells)
            return f"<tr style='font-weight:bold'>{tds}</tr>" if strong else f"<tr>{tds}</tr>"

        shown = self.per_class[: self.HTML_ROWS]
        more = (
            f"<p>(first {self.HTML_ROWS} of {len(self.per_class)} classes)</p>"
            if len(self.per_class) > self.HTML_ROWS
            else ""
        )
        used = "per-class cut-offs" if self.mode == "per-class" else "the global cut-off"
        group = "" if self.shared is None else row(self.shared, strong=True)
        head = (
            f"<p><b>Thresholds</b>: precision &ge; {self.precision:g} with probability &ge; "
            f"{1 - self.delta:g} (delta {self.delta:g}, multiplicity "
            f"{html.escape(self.multiplicity)}), "
            f"for a <code>{html.escape(self.model_method)}</code> model; <code>accept</code> uses "
            f"{used}</p>"
        )
        return (
            f"<div>{head}<table><tr><th>class</th><th>cut-off</th><th>precision</th>"
            f"<th>lower bound</th><th>accepted</th></tr>{''.join(row(c) for c in shown)}"
            f"{group}{row(self.overall, strong=True)}</table>"
            f"<p>{html.escape(self.statements())}</p>"
            f"{more}</div>"
        )

    def table(self) -> list[list]:
        """Rows ``[class, cut-off, accepted, predicted, precision, lower bound, reason]`` (classes,
        then
        "(shared)" where there is a group, then "(all)"); None where a class has no cut-off. A class
        of
        the shared group has no lower bound of its own (the group's row holds it)."""
        rows = (*self.per_class, *(() if self.shared is None else (self.shared,)), self.overall)
        return [
            [
                c.name,
                c.cutoff,
                c.n_accepted,
                c.n_predicted,
                c.precision,
                c.precision_lower,
                c.reason or "",
            ]
            for c in rows
        ]

    def statements(self) -> str:
        """Which statement holds for which classes, in one line (the CLI and the report print
        it)."""
        if self.mode == "global":
            return (
                f"one cut-off for all classes: precision >= {self.precision:g} over all accepted "
                f"predictions together, with probability >= {1 - self.delta:g}"
            )
        alone = sum(c.group is None for c in self.per_class)
        level = self.per_class[0].level if self.per_class else self.delta
        out = f"{alone} classes with their own cut-off (each tested at delta = {level:.3g})"
        if self.shared is not None:
            n = len(self.per_class) - alone
            out += (
                f"; {n} classes with fewer than {self.pool_below:g} predictions share one cut-off, "
                f"whose statement is about their accepted predictions together"
            )
        return out


def _field(d: dict, key: str, kind, optional: bool = False):
    """``d[key]`` checked: ``kind`` a type (str, list, dict) or an :class:`Interval` (a finite
    number in it, returned as float); None only where ``optional``. Raises ValueError naming the
    field."""
    if key not in d:
        raise ValueError(f"the field {key!r} is missing")
    v = d[key]
    if v is None and optional:
        return None
    if isinstance(kind, Interval):
        try:
            finite = kind.ok(v) and math.isfinite(v)
        except OverflowError:  # an integer beyond the floats
            finite = False
        if not finite:
            raise ValueError(f"{key} must be {kind}{' or null' if optional else ''}, got {v!r:.40}")
        return float(v)
    if not isinstance(v, kind):
        raise ValueError(
            f"{key} must be a {kind.__name__}{' or null' if optional else ''}, got "
            f"{type(v).__name__}"
        )
    return v


def _reject_constant(name):
    raise ValueError(f"non-finite number {name}")


def loads_thresholds(text: str, *, source: str = "thresholds") -> Thresholds:
    try:
        doc = json.loads(text, parse_constant=_reject_constant)
    except (json.JSONDecodeError, RecursionError, ValueError):
        raise ModelFileError(f"{source} is not valid JSON; run topcal threshold again") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise ModelFileError(
            f'{source} is not a topcal thresholds file (no "format": "{FORMAT}" field)'
        )
    if doc.get("format_version") != FORMAT_VERSION or type(doc.get("format_version")) is not int:
        raise ModelFileError(
            f"{source} has thresholds format version {doc.get('format_version')!r}; this topcal "
            f"reads version {FORMAT_VERSION}: run topcal threshold again"
        )
    payload = doc.get("thresholds")
    try:
        ok = hashlib.sha256(canonical_json(payload).encode()).hexdigest() == doc.get("sha256")
    except (TypeError, ValueError, RecursionError):
        ok = False
    if not isinstance(payload, dict) or not ok:
        raise ModelFileError(
            f"{source} was modified after it was written (checksum mismatch); run topcal "
            "threshold again instead of editing it"
        )
    try:
        return Thresholds.from_dict(payload)
    except TopcalError:
        raise
    except (KeyError, TypeError, ValueError, IndexError) as exc:
        said = isinstance(exc, ValueError) and str(exc)
        why = str(exc).splitlines()[0][:200] if said else type(exc).__name__
        raise ModelFileError(f"{source} is malformed ({why}); run topcal threshold again") from None


def load_thresholds(path) -> Thresholds:
    """Read a file written by :meth:`Thresholds.save` (or ``topcal threshold -o``)."""
    text = read_text(path, "thresholds file", ModelFileError)
    path = os.fsdecode(path) if isinstance(path, (bytes, bytearray)) else path
    return loads_thresholds(text, source=f"thresholds file {str(path)!r}")


def _validate(precision, delta, mode, multiplicity) -> None:
    validate_params(
        "thresholds",
        {
            "precision": Interval(0, 1, "neither"),
            "delta": Interval(0, 1, "neither"),
            "mode": Options(MODES),
            "multiplicity": Options(MULTIPLICITY),
        },
        {"precision": precision, "delta": delta, "mode": mode, "multiplicity": multiplicity},
    )


def fit_thresholds(
    model,
    data,
    precision: float = 0.95,
    delta: float = 0.05,
    *,
    mode: str = "per-class",
    multiplicity: str = "per-class",
    pool_below=POOL_AUTO,
    y=None,
    classes=None,
    kind: str = "auto",
) -> Thresholds:
    """Cut-offs on ``model``'s calibrated confidence with precision >= ``precision`` w.p. >= 1 -
    ``delta``.

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
        Each statement (a class tested alone, the shared group) at ``delta``, or at ``delta`` / S
        (S statements: all of them hold together).
    pool_below : "auto" or number >= 0, default "auto"
        Classes with fewer predictions in ``data`` share one cut-off (the shared group); "auto":
        :data:`POOL_FACTOR` times the fewest predictions a class's sequences can test; 0: every
        class tested alone.

    Returns
    -------
    Thresholds
    """
    _validate(precision, delta, mode, multiplicity)
    if not hasattr(model, "classes_"):
        raise NotFittedError("the model is not fitted; fit it on other labelled data first")
    if not isinstance(data, TopLabelData):
        data = as_data(data, y, classes=model.classes_ if classes is None else classes, kind=kind)
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
    shared = None
    if small.any():
        rows = np.flatnonzero(small[data.pred])
        shared = ltt_cutoff(
            "(shared)",
            conf[rows],
            tp[rows],
            fp[rows],
            precision,
            level,
            starts=GLOBAL_STARTS,
            score=score[rows],
        )
    per = []
    for k, name in enumerate(model.classes_):
        idx = np.flatnonzero(data.pred == k)
        if small[k]:
            per.append(_in_group(name, shared, conf[idx], tp[idx], fp[idx], level, score[idx]))
        else:
            per.append(
                ltt_cutoff(name, conf[idx], tp[idx], fp[idx], precision, level, score=score[idx])
            )
    overall = ltt_cutoff("(all)", conf, tp, fp, precision, delta, starts=GLOBAL_STARTS, score=score)
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


def _pool_below(
    pool_below, precision: float, delta: float, multiplicity: str, n_classes: int
) -> float:
    """The class size (predictions) below which a class joins the shared group."""
    if isinstance(pool_below, str) and pool_below == POOL_AUTO:
        # at the level a class alone would be tested at if every class were (the strictest case)
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
    )
