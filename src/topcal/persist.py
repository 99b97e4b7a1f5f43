"""Fitted models as versioned JSON (never pickle).

A model file is one JSON object::

    {"format": "topcal-model", "format_version": 5, "topcal_version": "...",
     "model": {method, params, classes, score_range, state, evidence, vector},
     "sha256": "<hash of the canonical JSON of 'model'>"}

``evidence`` holds all the model knows of its data (:mod:`topcal.calibrators.modelfile`):
the per-class counts, the between-class spread table, ``auto``'s cross-validation table,
the label-shift counts, the mergeable statistics ``update`` refits from and the fitting
rows' fingerprint. Files of formats 2 to 4 still load: :func:`migrate` turns them into this
layout after their checksum is checked, and is the one place that knows the earlier layouts
(2 and 3: the evidence beside the state, format 2 without the temperature methods' loss
tables; 2 to 4: label-shift counts in the dense per-class layout).
Older files are refused with a one-line error that says to refit.

Floats are written with Python's shortest round-trip repr, so a loaded model predicts bit
for bit what the saved one did. Loading only parses JSON and numbers, so a file can never
run code. A file that is not JSON, is truncated, has another format version, names an
unknown method, or whose content no longer matches its checksum (edited by hand or
corrupted) raises :class:`~topcal.errors.ModelFileError`.
"""

from __future__ import annotations

import hashlib
import json
import os
import weakref
from typing import Any

from ._version import __version__
from ._fileio import read_text, write_text
from ._typing import PathLike
from .calibrators.base import register_hook
from .calibrators.base import Calibrator
from .calibrators.registry import available_methods, get_class, is_registered
from .errors import ModelFileError, TopcalError
from .evidence.confusion import SPARSE_LAYOUT
from . import labelshift  # noqa: F401  (registers the adapted model, so its files load through the registry)

__all__ = [
    "FORMAT",
    "FORMAT_VERSION",
    "dumps",
    "loads",
    "migrate",
    "save",
    "load",
    "canonical_json",
    "digests",
    "finite_json",
    "check_format",
    "versioned_text",
]

FORMAT = "topcal-model"
FORMAT_VERSION = 5
#: Versions this topcal reads: this one, and those :func:`migrate` turns into it (2: before
#: the temperature methods' loss tables were stored; 3: counts, spread and cross-validation
#: table beside the evidence; 4: the evidence in one object, its label-shift counts possibly
#: still in the dense per-class layout of files before the sparse one).
READABLE_VERSIONS = (2, 3, 4, FORMAT_VERSION)
#: The model-file keys of format 3 that format 4 keeps in the model's ``evidence`` object.
_EVIDENCE_KEYS_3 = ("n_tp", "n_fp", "spread", "confusion", "stats", "fingerprints", "fingerprint")


def canonical_json(obj) -> str:
    """The canonical JSON text of ``obj`` whose SHA-256 a model file stores (sorted keys, no
    spaces)."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), allow_nan=False)


def dumps(model, *, stats: bool = True) -> str:
    """The JSON text of a fitted calibrator (without its mergeable statistics:
    ``stats=False``, for a copy that only predicts)."""
    payload = model.to_dict()
    if not stats:
        evidence = payload["evidence"]
        payload = {
            **payload,
            "evidence": {k: v for k, v in evidence.items() if k not in ("stats", "fingerprints")},
        }
    return versioned_text(FORMAT, FORMAT_VERSION, "model", payload, "model state")


def versioned_text(fmt: str, version: int, key: str, payload, what: str) -> str:
    """A versioned JSON file's text: ``format``, ``format_version``, ``topcal_version``,
    ``payload`` under ``key`` and the SHA-256 of its :func:`canonical_json` text, one key a
    line, lists of scalars (and one-line-a-class lists of states) on one line each by the C
    encoder, every array encoded once for the file and the digest; ``what`` names the payload
    in the error for a value that is not finite."""
    try:
        text, canonical = _both(payload, 1)
    except ValueError as exc:  # NaN/inf: a bug, not a user error
        raise TopcalError(f"{what} is not finite and cannot be saved: {exc}") from None
    doc = {
        "format": fmt,
        "format_version": version,
        "topcal_version": __version__,
        key: _Encoded(text),
        "sha256": hashlib.sha256(canonical.encode()).hexdigest(),
    }
    return _pretty(doc) + "\n"


#: the containers ``to_dict`` builds (plain dicts and lists, from ``to_jsonable``)
_NESTING = frozenset((dict, list))


class _Encoded:
    """JSON text already written (``_pretty`` puts it in as it is)."""

    def __init__(self, text: str):
        self.text = text


def _pretty(obj, level: int = 0) -> str:
    """JSON with one key per line and every list of numbers on one line, compact (no
    spaces).

    ``json.dumps(indent=...)`` puts each number of a long list on its own line and runs the
    pure-Python encoder (seconds for a model with large statistics); lists of scalars here
    go through the C encoder.
    """
    return _both(obj, level)[0]


def _both(obj, level: int) -> tuple[str, str]:
    """(``_pretty`` text, :func:`canonical_json` text) of ``obj``, each list of scalars
    encoded once."""
    if isinstance(obj, _Encoded):
        return obj.text, obj.text
    pad = " " * (level + 1)
    if isinstance(obj, dict) and obj and all(type(k) is str for k in obj):
        parts: Any = {k: _both(v, level + 1) for k, v in obj.items()}
        keys = {k: json.dumps(k) for k in obj}
        pretty = (
            "{\n"
            + ",\n".join(f"{pad}{keys[k]}: {parts[k][0]}" for k in obj)
            + "\n"
            + " " * level
            + "}"
        )
        return pretty, "{" + ",".join(f"{keys[k]}:{parts[k][1]}" for k in sorted(obj)) + "}"
    if isinstance(obj, list) and _flat_rows(obj):  # e.g. one state per class
        rows = [canonical_json(v) for v in obj]  # a row's keys sorted in the file too
        pretty = "[\n" + ",\n".join(pad + r for r in rows) + "\n" + " " * level + "]"
        return pretty, "[" + ",".join(rows) + "]"
    if isinstance(obj, list) and not _NESTING.isdisjoint(
        map(type, obj)
    ):  # one C-level pass over the types
        parts = [_both(v, level + 1) for v in obj]
        pretty = "[\n" + ",\n".join(pad + p for p, _ in parts) + "\n" + " " * level + "]"
        return pretty, "[" + ",".join(c for _, c in parts) + "]"
    text = _compact(obj)  # large arrays are most of a file
    if isinstance(obj, (dict, list, tuple)) and not isinstance(
        obj, list
    ):  # dicts with other keys, tuples
        return text, canonical_json(obj)
    return text, text


def _compact(obj) -> str:
    """``obj`` as JSON on one line, keys in their order, no spaces (the C encoder)."""
    return json.dumps(obj, allow_nan=False, separators=(",", ":"))


def _flat_rows(obj: list) -> bool:
    """Whether ``obj`` is a list of two or more entries, each None, a list of scalars or a
    dict with string keys whose values are scalars or lists of them (one state or support
    per class: a model of 10^5 classes has 10^5 of them). ``_pretty`` writes such a list one
    entry a line, each encoded once, by the C encoder, as its canonical text."""
    rows = [v for v in obj if v is not None]
    if len(obj) < 2 or not rows:
        return False
    for row in rows:
        if type(row) is list:
            if not _NESTING.isdisjoint(map(type, row)):
                return False
            continue
        if type(row) is not dict:
            return False
        for k, v in row.items():
            if type(k) is not str or type(v) is dict or type(v) is tuple:
                return False
            if type(v) is list and not _NESTING.isdisjoint(map(type, v)):
                return False
    return True


class _NonFinite(ValueError):
    """NaN, Infinity or -Infinity written in a model file."""


def _reject_constant(name):
    raise _NonFinite(f"non-finite number {name}")


def finite_json(text: str):
    """``text`` parsed as JSON; NaN, Infinity or -Infinity in it raise a ValueError that
    names them."""
    return json.loads(text, parse_constant=_reject_constant)


def check_format(doc, fmt: str, source: str, kind: str) -> None:
    """Refuse a parsed ``doc`` that is no JSON object with ``"format": fmt`` (``kind``: the
    file's kind in the message, e.g. "model")."""
    if not isinstance(doc, dict) or doc.get("format") != fmt:
        raise ModelFileError(
            f'{source} is not a topcal {kind} file (no "format": "{fmt}" field)'
        )


#: Why a file whose JSON holds a number beyond the range of doubles (read as infinity) is
#: refused.
_HUGE = "JSON error: a number is out of the range of finite floats"


def loads(text: str, *, source: str = "model"):
    """Rebuild a fitted calibrator from :func:`dumps` text.

    Numbers are parsed by the C parser; one beyond the range of doubles (read as infinity)
    is found by the canonical text the checksum is computed on (``allow_nan=False``), which
    is made anyway, and the few fields outside the model (a per-number check while parsing
    was the slow part of reading a large model).
    """
    try:
        doc = finite_json(text)
        if isinstance(doc, dict):
            canonical_json({k: v for k, v in doc.items() if k != "model"})
    except RecursionError:
        raise ModelFileError(
            f"{source} is not a valid topcal model file (nested too deeply); save the "
            "model again"
        ) from None
    except json.JSONDecodeError as exc:
        raise ModelFileError(
            f"{source} is not a valid topcal model file (JSON error: "
            f"{str(exc).splitlines()[0]}); it may be truncated: save the model again"
        ) from None
    except ValueError as exc:  # NaN or Infinity written out, or a number beyond doubles
        what = f"JSON error: {exc}" if isinstance(exc, _NonFinite) else _HUGE
        raise ModelFileError(
            f"{source} is not a valid topcal model file ({what}); save the model again"
        ) from None
    check_format(doc, FORMAT, source, "model")
    version = doc.get("format_version")
    if (
        type(version) is not int or version not in READABLE_VERSIONS
    ):  # true == 1 in Python, but is no version
        raise ModelFileError(
            f"{source} has model format version {version!r}; this topcal reads versions "
            f"{', '.join(map(str, READABLE_VERSIONS))}: refit the model with this version "
            "of topcal"
        )
    payload = _checked_model(doc, source)
    method = payload.get("method")
    if not is_registered(
        method
    ):  # methods and registered wrappers (an adapted model: topcal adapt)
        raise ModelFileError(
            f"{source} uses method {method!r}, unknown to this topcal. Options are: "
            f"{', '.join(available_methods())}"
        )
    try:
        if version != FORMAT_VERSION:
            payload = migrate(doc)["model"]
        model = get_class(method, unlisted=True).from_dict(payload)
    except ModelFileError:
        raise
    except Exception as exc:  # noqa: BLE001 - the file is untrusted input: anything odd in it is a bad file
        msg = str(exc).splitlines()[0] if str(exc) else ""
        raise ModelFileError(
            f"{source} holds a malformed {method!r} model ({type(exc).__name__}: "
            f"{msg[:200]}); refit and save it again"
        ) from None
    if version != FORMAT_VERSION:  # thresholds chosen for the file still name it
        own = digests(model)[0]
        if own != doc["sha256"]:  # (a format-4 file that needed no change: the same digest)
            _READ_AS[model] = (own, doc["sha256"])
    return model


def _checked_model(doc: dict, source: str) -> dict:
    """The ``model`` part of a model file's JSON object, its checksum checked."""
    payload = doc.get("model")
    if not isinstance(payload, dict) or not isinstance(doc.get("sha256"), str):
        raise ModelFileError(
            f"{source} is missing its 'model' or 'sha256' field; save the model again"
        )
    try:
        canonical = canonical_json(payload)
    except ValueError:  # infinity: a number beyond the range of doubles
        raise ModelFileError(
            f"{source} is not a valid topcal model file ({_HUGE}); save the model again"
        ) from None
    except (RecursionError, OverflowError) as exc:
        raise ModelFileError(
            f"{source} holds a model that cannot be read ({type(exc).__name__}); "
            "refit and save it again"
        ) from None
    if hashlib.sha256(canonical.encode()).hexdigest() != doc["sha256"]:
        raise ModelFileError(
            f"{source} was modified after it was saved (checksum mismatch); refit and save "
            "it again instead of editing the file"
        )
    return payload


#: Models read from a file of an earlier format: (the SHA-256 of the model as read, the
#: SHA-256 its file stored).
_READ_AS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def digests(model) -> tuple[str, ...]:
    """The SHA-256s that name fitted ``model``: first that of its canonical JSON (what its
    file stores as ``sha256``), then, for a model read from a file of an earlier format and
    unchanged since, the one that file stored (which thresholds chosen for it hold)."""
    own = hashlib.sha256(canonical_json(model.to_dict()).encode()).hexdigest()
    read = _READ_AS.get(model)
    return (own, read[1]) if read is not None and read[0] == own else (own,)


def migrate(doc: dict) -> dict:
    """A model file's JSON object of format 2, 3 or 4 in this format's layout.

    Each model dict (the file's model and those nested in its state: auto's choice, a
    blend's components, a pooled curve, a shrinkage reference, an adapted model's source,
    the vector map) keeps its counts, spread table, label-shift counts, statistics and
    fingerprints in one ``evidence`` object, and ``auto``'s cross-validation table there too;
    its label-shift counts are in the sparse layout (:func:`_sparse_confusion`).
    Its checksum is not recomputed: the caller has checked it on the file as written.
    """
    return {**doc, "format_version": FORMAT_VERSION, "model": _migrated(doc["model"])}


def _migrated(obj):
    """``obj`` with every format-3 or format-4 model dict in it in this format's layout (see
    :func:`migrate`)."""
    if isinstance(obj, list):
        if _NESTING.isdisjoint(map(type, obj)):  # numbers and strings: nothing to move
            return obj
        return [_migrated(v) for v in obj]
    if not isinstance(obj, dict):
        return obj
    if not ("method" in obj and "state" in obj and "n_tp" in obj):
        out = {k: _migrated(v) for k, v in obj.items()}
        if "method" in obj and isinstance(out.get("evidence"), dict):  # a format-4 model
            out["evidence"] = _migrated_evidence(out["evidence"], obj.get("classes"))
        return out
    evidence = {k: obj[k] for k in _EVIDENCE_KEYS_3 if k in obj}
    state = _migrated(obj["state"])
    params = obj.get("params")
    if (
        isinstance(params, dict)
        and is_registered(obj["method"])
        and "shrinkage" in get_class(obj["method"], unlisted=True)._param_names()
    ):  # files written before shrinkage existed hold the paper's estimators (m = 0)
        params = {"shrinkage": 0, **params}
    if isinstance(state, dict) and "cv" in state:  # auto's: its cross-validation table
        state, evidence = _migrated_choice(state, evidence)
    out = {k: v for k, v in obj.items() if k not in _EVIDENCE_KEYS_3}
    evidence = _migrated_evidence(evidence, obj.get("classes"))
    out.update(params=params, state=state, evidence=evidence)
    if "vector" in obj:
        out["vector"] = _migrated(obj["vector"])
    return out


def _migrated_evidence(evidence: dict, classes) -> dict:
    """A model's evidence with label-shift counts of the dense per-class layout (files before
    the sparse one; format 4 files of models loaded from them and saved again) in the sparse
    layout."""
    confusion = evidence.get("confusion")
    if isinstance(confusion, dict) and "layout" not in confusion:
        evidence = {**evidence, "confusion": _sparse_confusion(confusion, classes)}
    return evidence


def _sparse_confusion(dense: dict, classes) -> dict:
    """The dense per-class layout (``edges``: per class its region edges; ``counts``: per
    class and region, [true class, count] pairs) in the sparse one that
    ``ConfusionStats.to_dict`` writes: the same counts (a pair named twice: its last count, as
    the dense reader took it; zero counts dropped), in (cell, class) order. What the sparse
    layout cannot tell is checked here (ValueError): the number of classes, each class's
    number of regions and the true classes named; its reader checks the rest (edges, counts).
    """
    K = len(classes)
    edges, counts = dense["edges"], dense["counts"]
    if not (isinstance(edges, list) and isinstance(counts, list)) or not (
        len(edges) == len(counts) == K
    ):
        raise ValueError("confusion statistics have the wrong number of classes")
    last: dict[tuple[int, int], Any] = {}
    start = 0
    for e, regions in zip(edges, counts):
        if not (isinstance(e, list) and isinstance(regions, list) and len(regions) == len(e) + 1):
            raise ValueError("confusion counts need one region more than there are edges")
        for r, pairs in enumerate(regions):
            for j, v in pairs:
                if isinstance(j, bool) or not isinstance(j, int) or not 0 <= j < K:
                    raise ValueError(
                        f"confusion counts name class index {j!r}, outside 0..{K - 1}"
                    )
                last[(start + r, j)] = v
        start += len(e) + 1
    kept = sorted(key for key, v in last.items() if v != 0)
    return {
        "layout": SPARSE_LAYOUT,
        "edged": [k for k, e in enumerate(edges) if e],
        "edges": [e for e in edges if e],
        "cell": [c for c, _ in kept],
        "class": [j for _, j in kept],
        "count": [last[key] for key in kept],
    }


def _migrated_choice(state: dict, evidence: dict) -> tuple[dict, dict]:
    """``auto``'s format-3 state in format 4: its cross-validation table and sample counts
    in the evidence, what files written before them left out filled in as it was read."""
    state = dict(state)
    # the smallest mean was chosen before the standard-error rule, with no SE recorded
    state.setdefault("rule", "min")
    state.setdefault("best", state.get("method"))
    seen = sum(map(float, evidence.get("n_tp", []))) + sum(map(float, evidence.get("n_fp", [])))
    # before format 2 the cross-validation ran on all the model's data, and before cv_rows
    # on all the data the choice was made for
    cv_samples = state.pop("cv_samples", seen)
    fit_samples = state.pop("fit_samples", cv_samples)
    evidence = {
        **evidence,
        "cv": state.pop("cv", None),
        "cv_samples": cv_samples,
        "fit_samples": fit_samples,
    }
    return state, evidence


def save(model: Calibrator, path: PathLike) -> None:
    """Write ``model`` (fitted) to ``path`` as JSON, atomically (temp file + rename)."""
    write_text(path, dumps(model))


def load(path: PathLike) -> Calibrator:
    """Read a model saved with :func:`save` (or ``topcal fit -o``); ``path`` is a str, bytes
    or path object."""
    text = read_text(
        path,
        "model file",
        ModelFileError,
        "; for a model's JSON text use topcal.persist.loads",
    )
    path = os.fsdecode(path) if isinstance(path, (bytes, bytearray)) else path
    return loads(text, source=f"model file {str(path)!r}")


register_hook("save", save)  # Calibrator.save (calibrators sit below this layer)
