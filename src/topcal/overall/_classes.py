"""The per-class table of ``topcal metrics`` and the choice of its rows (``--classes``)."""

from __future__ import annotations

import re

import numpy as np

from ..data import TopLabelData
from ..errors import TopcalError
from ..metrics import summary

#: ``--classes`` keywords of the per-class metrics table: ``KEYWORD:N``.
KEYWORDS = {
    "worst": "the largest share of the top-label ECE (samples x the class's ECE)",
    "most": "the most predictions",
}
_KEYWORD = re.compile(r"(worst|most):(\d+)")
#: The per-class table's columns.
CLASS_COLUMNS = ("tp", "fp", "conf1", "nll", "brier", "ece_top_label")


def per_class(data: TopLabelData, confidence, *, n_bins: int = 10) -> dict:
    """``{class: {column: value}}`` for :data:`CLASS_COLUMNS`: counts, Conf1, the class's
    mean NLL and Brier and its top-label ECE over ``n_bins`` equal-width bins. A value is
    None where it is undefined: no predictions of the class, or (the ECE) a single one,
    whose binned error is its own |label - confidence| and says nothing of calibration."""
    s = summary(data, confidence, n_bins=n_bins)
    out = {}
    for name, row in s["classes"].items():
        n = row["tp"] + row["fp"]
        out[name] = {
            "tp": row["tp"],
            "fp": row["fp"],
            "conf1": row["conf1"],
            "nll": row["nll"],
            "brier": row["brier"],
            "ece_top_label": row["ece1"] if n >= 2 else None,
        }
    return out


def pick_classes(data: TopLabelData, table: dict, spec) -> list[str]:
    """The class names ``spec`` (``--classes``'s strings: names, ``worst:N``, ``most:N``, or
    several separated by commas) chooses from ``table`` (:func:`per_class`), in order, each
    once."""
    index = {c: k for k, c in enumerate(data.classes)}
    n = {c: row["tp"] + row["fp"] for c, row in table.items()}
    ranked = {
        "most": sorted(table, key=lambda c: (-n[c], index[c])),
        "worst": sorted(
            (c for c in table if table[c]["ece_top_label"] is not None),
            key=lambda c: (-n[c] * table[c]["ece_top_label"], index[c]),
        ),
    }
    out: list[str] = []
    for part in parse_classes(spec, data.classes):
        out += [part] if isinstance(part, str) else ranked[part[0]][: part[1]]
    return list(dict.fromkeys(out))


def parse_classes(spec, classes) -> list[str | tuple[str, int]]:
    """``spec`` (``--classes``'s strings) as a list of class names (of ``classes``) and
    (keyword, N) pairs (``worst:N``, ``most:N``), in order; a string that is no class name
    and no keyword may be several of them separated by commas."""
    names = set(classes)
    out: list[str | tuple[str, int]] = []
    for item in spec:
        parts = [item] if item in names or _KEYWORD.fullmatch(item) else item.split(",")
        for part in parts:
            if part in names:
                out.append(part)
                continue
            m = _KEYWORD.fullmatch(part.strip())
            if m is None:
                few = ", ".join(repr(c) for c in classes[:6])
                raise TopcalError(
                    f"--classes {part!r} is no class of the data and no keyword "
                    f"({', '.join(k + ':N' for k in KEYWORDS)}); classes are e.g. {few}"
                )
            if int(m.group(2)) < 1:
                raise TopcalError(f"--classes {part}: N must be at least 1")
            out.append((m.group(1), int(m.group(2))))
    return out


def finite_or_none(x) -> float | None:
    """``x`` as a float, or None where it is missing or not finite."""
    return None if x is None or not np.isfinite(x) else float(x)
