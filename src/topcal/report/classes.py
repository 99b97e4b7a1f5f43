"""Which classes the report's per-class figures show: ``--classes`` (names and the keywords
``worst:N``, ``most:N``), or by default every class up to :data:`MAX_FIGURE_CLASSES` and the
ones with the most positives above it (the tables always list every class)."""

from __future__ import annotations

import numpy as np

from ..calibrators.registry import BASELINE
from ..comparison import Comparison
from ..data import TopLabelData
from ..errors import TopcalError
from ..overall import parse_classes

__all__ = [
    "MAX_FIGURE_CLASSES",
    "KEYWORDS",
    "choose_classes",
    "check_classes",
    "worst_classes",
]

#: Per-class figures show at most this many classes by default, those with the most
#: positives: a figure of thousands of panels (or a 10,000 x 10,000 confusion matrix) takes
#: minutes and gigabytes and shows nothing.
MAX_FIGURE_CLASSES = 24
#: At most this many classes may be chosen with ``--classes`` (one figure panel each).
MAX_CHOSEN = 100
#: ``--classes`` keywords: ``KEYWORD:N``.
KEYWORDS = {
    "worst": "the largest total out-of-sample NLL excess of the model in use over the "
    "uncalibrated score (n x per-sample difference: where calibration hurts most or helps "
    "least)",
    "most": "the most positives (predictions)",
}


def worst_classes(data: TopLabelData, comparison, model: str | None) -> list[int]:
    """Class indices by the total out-of-sample NLL excess of ``model`` over the baseline,
    largest first (classes without both values left out)."""
    res = Comparison.of(comparison).methods
    if model is None or model not in res or BASELINE not in res:
        raise TopcalError(
            "--classes worst:N ranks classes by the out-of-sample NLL of the model in use "
            "against the uncalibrated score; this report has no such model (fit auto, or "
            "name a method)"
        )
    mine, base = res[model].nll.per_class, res[BASELINE].nll.per_class
    tp, fp = data.class_counts()
    n = tp + fp
    have = [
        k
        for k, c in enumerate(data.classes)
        if mine.get(c) is not None and base.get(c) is not None
    ]
    excess = {k: n[k] * (mine[data.classes[k]] - base[data.classes[k]]) for k in have}
    return sorted(have, key=lambda k: (-excess[k], -n[k], k))


def _parse(spec, data: TopLabelData) -> list:
    """``spec`` (strings) as a list of class indices and (keyword, N) pairs, in order; a
    string that is no class name and no keyword may be several of them separated by commas."""
    index = {c: k for k, c in enumerate(data.classes)}
    return [index[p] if isinstance(p, str) else p for p in parse_classes(spec, data.classes)]


def check_classes(spec, data: TopLabelData) -> None:
    """Refuse a ``--classes`` that names no class of ``data`` or no keyword (before any
    fit)."""
    if spec is not None:
        _parse(spec, data)


def choose_classes(
    data: TopLabelData, spec=None, comparison=None, model: str | None = None
) -> tuple[np.ndarray | None, str]:
    """(indices of the classes the per-class figures show, None for all; a caption
    sentence).

    ``spec``: None (the default: all up to :data:`MAX_FIGURE_CLASSES` classes, else that
    many with the most positives) or ``--classes``'s strings: class names and ``worst:N``,
    ``most:N`` (:data:`KEYWORDS`; ``worst`` needs ``comparison`` and the name of the
    ``model`` in use). The chosen classes keep the order given (a keyword's classes worst or
    largest first), each once.
    """
    tp, fp = data.class_counts()
    most = np.argsort(-(tp + fp), kind="stable")
    if spec is None or not list(spec):
        if data.n_classes <= MAX_FIGURE_CLASSES:
            return None, ""
        keep = np.sort(most[:MAX_FIGURE_CLASSES])
        return keep, (
            f" Only the {keep.size} largest classes (most positives) of {data.n_classes} are "
            "shown; the tables list every class."
        )
    chosen: list[int] = []
    said: list[str] = []
    named: list[str] = []
    worst = None
    for item in _parse(spec, data):
        if isinstance(item, tuple):
            word, count = item
            if word == "worst":
                worst = worst_classes(data, comparison, model) if worst is None else worst
                ranked = worst
            else:
                ranked = most.tolist()
            picked = [k for k in ranked if k not in chosen][:count]
            chosen += picked
            said.append(f"{word}:{count} ({KEYWORDS[word]})")
        elif item not in chosen:
            chosen.append(item)
            named.append(repr(data.classes[item]))
    if len(chosen) > MAX_CHOSEN:
        raise TopcalError(
            f"--classes chose {len(chosen)} classes; at most {MAX_CHOSEN} can be drawn "
            "(one panel each)"
        )
    if not chosen:
        raise TopcalError(
            "--classes chose no class (no class has the values its keyword ranks)"
        )
    if named:
        said.append(
            ", ".join(named[:8])
            + (f" and {len(named) - 8} more named" if len(named) > 8 else "")
        )
    text = (
        f" Shown: {len(chosen)} of {data.n_classes} classes, chosen with --classes: "
        f"{'; '.join(said)}; the tables list every class."
    )
    return np.asarray(chosen, dtype=np.int64), text
