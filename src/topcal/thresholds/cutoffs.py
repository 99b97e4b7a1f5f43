"""The cut-offs :func:`topcal.thresholds.core.fit_thresholds` chooses, and their file.

:class:`ClassCutoff` (one class's, the shared group's or the global cut-off with its counts
and test), :class:`Thresholds` (all of them with the guarantee they carry: ``accept``, the
notebook view, the statements), :func:`model_digest` (which model they belong to) and the
versioned JSON file with a checksum (:meth:`Thresholds.save`, :func:`load_thresholds`,
:func:`loads_thresholds`), every field checked on load. Kept apart from
:mod:`topcal.thresholds.core`; that module chooses the cut-offs (Learn-then-Test) and
re-exports every name here.
"""

from __future__ import annotations

import hashlib
import html
import json
import math
import os
from dataclasses import dataclass, field, fields

import numpy as np

from .._fileio import read_text, write_text
from .._params import Interval, Options, validate_params
from .._typing import ArrayLike, PathLike
from ..calibrators.base import Calibrator
from ..data import preview
from ..errors import DataError, ModelFileError, TopcalError
from ..persist import canonical_json, check_format, digests, finite_json, versioned_text
from .split import Split

__all__ = [
    "Thresholds",
    "ClassCutoff",
    "load_thresholds",
    "loads_thresholds",
    "model_digest",
    "validate_settings",
    "FORMAT",
    "FORMAT_VERSION",
    "MODES",
    "MULTIPLICITY",
]

FORMAT = "topcal-thresholds"
FORMAT_VERSION = 1
MODES = ("per-class", "global")
MULTIPLICITY = ("per-class", "bonferroni")


#: What a cut-off is on: the calibrated confidence (ties broken by the raw score), or the
#: raw top score itself (a global or shared cut-off, where the raw order accepted more: see
#: topcal.thresholds.core).
ON = ("confidence", "score")


def _as_cut(c) -> tuple[float, float, float]:
    """A cut-off as (value, tie-breaking score, 1 if on the raw score else 0); NaN for none
    (no cut-off: nothing reaches it; no score: value >= cut-off)."""
    return (
        np.nan if c.cutoff is None else c.cutoff,
        np.nan if c.score_cutoff is None else c.score_cutoff,
        float(c.on == "score"),
    )


def _reaches(confidence, score, cut, score_cut, on_score=0.0) -> np.ndarray:
    """Rows whose value (the confidence, or the raw score where ``on_score``) is above the
    cut-off, or equal to it with a raw score at least the tie-breaking score (any, where
    that is NaN); elementwise over arrays of cut-offs too (one per row)."""
    conf = np.asarray(confidence, dtype=np.float64)
    cut, score_cut = np.asarray(cut, dtype=np.float64), np.asarray(score_cut, dtype=np.float64)
    on_score = np.asarray(on_score, dtype=np.float64) > 0
    tie_free = np.isnan(score_cut)
    if score is None:
        if not np.all((tie_free & ~on_score) | np.isnan(cut)):
            raise TopcalError(
                "these thresholds read the raw score (a cut-off on it, or ties of the "
                "confidence broken by it): pass the rows' scores too"
            )
        tie_ok, value = tie_free, conf
    else:
        score = np.asarray(score, dtype=np.float64)
        with np.errstate(invalid="ignore"):
            tie_ok = tie_free | on_score | (score >= score_cut)
        value = np.where(on_score, score, conf) if on_score.any() else conf
    with np.errstate(invalid="ignore"):  # NaN cut-off: no row reaches it
        return (value > cut) | ((value == cut) & tie_ok)


@dataclass(frozen=True)
class ClassCutoff:
    """The cut-off of one predicted class (or of all classes: ``name`` "(all)").

    ``cutoff`` is None when the target cannot be shown, and ``reason`` says why.
    ``precision`` is the labelled sample's precision at the cut-off, ``precision_lower`` its
    one-sided Clopper-Pearson lower bound at level ``level`` (the delta the class was tested
    at), ``p_value`` the test's.
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
    #: "shared" where the cut-off is the shared group's (the statement is the group's);
    #: None: its own
    group: str | None = None
    #: the raw score that breaks ties at ``cutoff``: a row is accepted when its confidence
    #: is above ``cutoff``, or equal to it with a raw score >= ``score_cutoff`` (None:
    #: confidence >= cutoff)
    score_cutoff: float | None = None
    #: what ``cutoff`` is on (:data:`ON`): "score" accepts rows whose raw top score is >= it
    on: str = "confidence"

    def accepts(self, confidence, score=None) -> np.ndarray:
        """Whether rows with these confidences (and raw scores) reach this cut-off."""
        return _reaches(confidence, score, *_as_cut(self))

    @property
    def accepted_fraction(self) -> float:
        return self.n_accepted / self.n_predicted if self.n_predicted > 0 else 0.0

    def to_dict(self) -> dict:
        # every field in order; "on" absent where it is "confidence", as in every file before
        # the raw-score cut-offs
        return {
            f.name: getattr(self, f.name)
            for f in fields(self)
            if f.name != "on" or self.on != "confidence"
        }

    @classmethod
    def from_dict(cls, d: dict) -> "ClassCutoff":
        """Rebuild from :meth:`to_dict` output; every field checked (raises ValueError): a
        hand-edited cut-off of -inf, 2 or true would accept rows no guarantee covers.
        ``group`` and ``score_cutoff`` may be absent from a file (read as None)."""
        if not isinstance(d, dict):
            raise ValueError(f"a cut-off entry must be an object, got {type(d).__name__}")
        unit, count = Interval(0, 1), Interval(0, None)
        name = _field(d, "name", str)
        level = _field(d, "level", Interval(0, 1, "right"))
        group = _field(d, "group", str, True) if "group" in d else None
        if group not in (None, "shared"):
            raise ValueError("group must be null or 'shared'")
        score_cut = (
            _field(d, "score_cutoff", Interval(None, None), True)
            if "score_cutoff" in d
            else None
        )
        on = _field(d, "on", str) if "on" in d else "confidence"
        if on not in ON:
            raise ValueError(f"on must be one of {', '.join(ON)}")
        out = cls(  # type: ignore[call-arg]  # the checker does not count the unpacked fields
            name,
            _field(d, "cutoff", unit if on == "confidence" else Interval(None, None), True),
            level,
            *(_field(d, k, count) for k in ("n_predicted", "n_accepted", "n_correct")),
            *(_field(d, k, unit, True) for k in ("precision", "precision_lower", "p_value")),
            _field(d, "reason", str, True),
            group,
            score_cut,
            on,
        )
        if on == "score" and score_cut is not None:
            raise ValueError(f"{name!r} is a cut-off on the raw score: it has no score_cutoff")
        if not out.n_correct <= out.n_accepted <= out.n_predicted:
            raise ValueError(
                f"the counts of {name!r} need n_correct <= n_accepted <= n_predicted"
            )
        if out.score_cutoff is not None and out.cutoff is None:
            raise ValueError(f"{name!r} has a score_cutoff but no cutoff")
        return out


def model_digest(model) -> str:
    """SHA-256 of a fitted model's canonical JSON: which model a thresholds file belongs to."""
    return digests(model)[0]


@dataclass(frozen=True)
class Thresholds:
    """Cut-offs on the calibrated confidence, per predicted class and global, with their
    guarantee.

    ``mode`` says which :meth:`accept` uses. Save with :meth:`save`, read with
    :func:`load_thresholds` (versioned JSON with a checksum).
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
    #: the shared group's cut-off (its statement covers the group's classes together); None:
    #: no group
    shared: ClassCutoff | None = None
    #: classes with fewer predictions than this joined the shared group (0: every class
    #: alone)
    pool_below: float = 0.0
    #: how one labelled file was cut into the calibrator's rows and these cut-offs' rows
    #: (:func:`topcal.thresholds.split.fit_and_threshold`); None: the model was fitted
    #: elsewhere
    split: Split | None = None

    def cutoffs(self) -> np.ndarray:
        """The cut-off each predicted class's rows must reach under ``mode`` (NaN: none
        accepted)."""
        if self.mode == "global":
            v = np.nan if self.overall.cutoff is None else self.overall.cutoff
            return np.full(len(self.classes), v)
        return np.array([np.nan if c.cutoff is None else c.cutoff for c in self.per_class])

    def check_model(self, model: Calibrator) -> None:
        """Raise TopcalError unless ``model`` is the model these thresholds were chosen for."""
        if tuple(model.classes_) != self.classes:
            raise TopcalError(
                f"the thresholds are for a model with classes {preview(self.classes)}, but "
                f"this model has {preview(model.classes_)}; choose thresholds for this "
                "model with topcal threshold"
            )
        if self.model_sha256 not in digests(model):
            raise TopcalError(
                f"the thresholds were chosen for another {self.model_method!r} model "
                "(checksum differs: refitted or updated since); choose them again for this "
                "model with topcal threshold"
            )

    def accept(
        self, pred: ArrayLike, confidence: ArrayLike, score: ArrayLike | None = None
    ) -> np.ndarray:
        """Whether each row is accepted: its calibrated confidence reaches its predicted
        class's cut-off.

        ``pred``: class indices in ``classes``; rows of a class without a cut-off are not
        accepted. ``score``: the rows' raw top scores, which break ties of the confidence at
        a cut-off (needed where a cut-off has a ``score_cutoff``).
        """
        confidence, score, pred = self._check_rows(pred, confidence, score)
        if self.mode == "global":
            return self.overall.accepts(confidence, score)
        cuts = np.array([_as_cut(c) for c in self.per_class], dtype=np.float64).reshape(-1, 3)
        # pred: the class indices _check_rows made of the argument
        return _reaches(confidence, score, cuts[pred, 0], cuts[pred, 1], cuts[pred, 2])  # type: ignore[index]

    def _check_rows(self, pred, confidence, score):
        """``accept``'s arguments as 1-d arrays of one length, ``pred`` class indices;
        one-line DataError otherwise (numpy would broadcast a length-1 array, or fail on an
        index)."""
        try:
            conf = np.asarray(confidence, dtype=np.float64)
            p = np.asarray(pred)
            sc = None if score is None else np.asarray(score, dtype=np.float64)
        except (TypeError, ValueError) as exc:
            raise DataError(f"accept needs numeric arrays: {str(exc)[:100]}") from None
        arrays = {"pred": p, "confidence": conf, **({} if sc is None else {"score": sc})}
        shapes = {k: a.shape for k, a in arrays.items()}
        if any(len(v) != 1 for v in shapes.values()) or len(set(shapes.values())) != 1:
            raise DataError(
                "accept needs 1-d pred, confidence (and score) of one length, got shapes "
                + ", ".join(f"{k} {v}" for k, v in shapes.items())
            )
        k = len(self.classes)
        if p.size and (p.dtype.kind not in "iu" or p.min() < 0 or p.max() >= k):
            bad = p[0] if p.dtype.kind not in "iu" else (p.min() if p.min() < 0 else p.max())
            raise DataError(
                f"pred holds {bad!r:.40}, not a class index 0..{k - 1} of these thresholds' "
                f"{k} classes"
            )
        return conf, sc, p

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
            # (absent: the model was fitted on another file, as in every file before splits)
            **({} if self.split is None else {"split": self.split.to_dict()}),
        }

    @classmethod
    def from_dict(cls, d: dict) -> "Thresholds":
        """Rebuild from :meth:`to_dict` output; every field checked like a model file's
        (raises ValueError). ``shared`` and ``pool_below`` may be absent from a file."""
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
        split = Split.from_dict(d["split"]) if "split" in d else None
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
            split,
        )
        if any(c.group == "shared" for c in per) and (
            out.shared is None
            or any(
                c.group == "shared"
                and (c.cutoff, c.score_cutoff, c.on)
                != (out.shared.cutoff, out.shared.score_cutoff, out.shared.on)
                for c in per
            )
        ):
            raise ValueError("a class of the shared group does not carry the group's cut-off")
        validate_settings(out.precision, out.delta, out.mode, out.multiplicity)
        return out

    def dumps(self) -> str:
        # one line a class (json.dumps(indent=1) took 10 s at 10^5 classes)
        return versioned_text(
            FORMAT, FORMAT_VERSION, "thresholds", self.to_dict(), "a threshold"
        )

    def save(self, path: PathLike) -> None:
        """Write as versioned JSON, atomically."""
        write_text(path, self.dumps())

    #: Classes the notebook view lists (the global row is always shown).
    HTML_ROWS = 100

    def _repr_html_(self) -> str:
        """The notebook view: per class (and global) the cut-off, the labelled sample's
        precision there, its lower bound, and the accepted fraction, or why a class has no
        cut-off."""

        def num(v, fmt):
            return "&ndash;" if v is None else format(v, fmt)

        def row(c, strong=False):
            cells = [html.escape(c.name), num(c.cutoff, ".6g")]
            if c.cutoff is None:
                cells += [f"<td colspan='3'>no cut-off: {html.escape(c.reason or '')}</td>"]
                tds = "".join(f"<td>{v}</td>" for v in cells[:2]) + cells[2]
            else:
                bound = (
                    "shared group's" if c.group == "shared" else num(c.precision_lower, ".4f")
                )
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
            f"<p><b>Thresholds</b>: precision &ge; {self.precision:.12g} with probability "
            f"&ge; {1 - self.delta:.12g} (delta {self.delta:.12g}, multiplicity "
            f"{html.escape(self.multiplicity)}), for a "
            f"<code>{html.escape(self.model_method)}</code> model; <code>accept</code> "
            f"uses {used}</p>"
        )
        return (
            f"<div>{head}<table><tr><th>class</th><th>cut-off</th><th>precision</th>"
            f"<th>lower bound</th><th>accepted</th></tr>{''.join(row(c) for c in shown)}"
            f"{group}{row(self.overall, strong=True)}</table>"
            f"<p>{html.escape(self.statements())}</p>"
            f"{more}</div>"
        )

    def table(self) -> list[list]:
        """Rows ``[class, cut-off, accepted, predicted, precision, lower bound, reason]``
        (classes, then "(shared)" where there is a group, then "(all)"); None where a class
        has no cut-off. A class of the shared group has no lower bound of its own (the
        group's row holds it)."""
        rows = (
            *self.per_class,
            *(() if self.shared is None else (self.shared,)),
            self.overall,
        )
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
        """Which statement holds for which classes, in one line (the CLI and the report
        print it)."""
        if self.mode == "global":
            return (
                f"one cut-off for all classes{_on_text(self.overall)}: precision >= "
                f"{self.precision:.12g} over all accepted predictions together, with "
                f"probability >= {1 - self.delta:.12g}"
            )
        alone = sum(c.group is None for c in self.per_class)
        level = self.per_class[0].level if self.per_class else self.delta
        out = f"{alone} classes with their own cut-off (each tested at delta = {level:.3g})"
        if self.shared is not None:
            n = len(self.per_class) - alone
            out += (
                f"; {n} classes with fewer than {self.pool_below:g} predictions share one "
                f"cut-off{_on_text(self.shared)}, whose statement is about their accepted "
                "predictions together"
            )
        return out


def _on_text(c: ClassCutoff) -> str:
    """What a pooled cut-off is on, where it is on the raw score (blank on the confidence)."""
    if c.on != "score" or c.cutoff is None:
        return ""
    return (
        f" (on the raw top score, >= {c.cutoff:.6g}: it accepted more of these rows than the "
        "calibrated confidence; each tested at delta / 2)"
    )


def _field(d: dict, key: str, kind, optional: bool = False):
    """``d[key]`` checked: ``kind`` a type (str, list, dict) or an :class:`Interval` (a
    finite number in it, returned as float); None only where ``optional``. Raises ValueError
    naming the field."""
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
            raise ValueError(
                f"{key} must be {kind}{' or null' if optional else ''}, got {v!r:.40}"
            )
        return float(v)
    if not isinstance(v, kind):
        raise ValueError(
            f"{key} must be a {kind.__name__}{' or null' if optional else ''}, got "
            f"{type(v).__name__}"
        )
    return v


def loads_thresholds(text: str, *, source: str = "thresholds") -> Thresholds:
    try:
        doc = finite_json(text)
    except (json.JSONDecodeError, RecursionError, ValueError):
        raise ModelFileError(
            f"{source} is not valid JSON; run topcal threshold again"
        ) from None
    check_format(doc, FORMAT, source, "thresholds")
    if (
        doc.get("format_version") != FORMAT_VERSION
        or type(doc.get("format_version")) is not int
    ):
        raise ModelFileError(
            f"{source} has thresholds format version {doc.get('format_version')!r}; this "
            f"topcal reads version {FORMAT_VERSION}: run topcal threshold again"
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
        raise ModelFileError(
            f"{source} is malformed ({why}); run topcal threshold again"
        ) from None


def load_thresholds(path: PathLike) -> Thresholds:
    """Read a file written by :meth:`Thresholds.save` (or ``topcal threshold -o``)."""
    text = read_text(path, "thresholds file", ModelFileError)
    path = os.fsdecode(bytes(path)) if isinstance(path, (bytes, bytearray)) else path
    return loads_thresholds(text, source=f"thresholds file {str(path)!r}")


def validate_settings(precision, delta, mode, multiplicity) -> None:
    """Raise ParameterError unless the guarantee's settings are valid (fit and file alike)."""
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
