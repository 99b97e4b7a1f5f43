"""A fitted calibrator as a JSON-ready dict, and back (:mod:`topcal.persist` writes
versioned JSON).

The dict holds the method, its parameters, classes, score range, the method's fitted
``state``, the vector map fitted beside it (``vector``, where one is) and one ``evidence``
object: everything the model knows of its data. That is the per-class TP/FP counts
(``n_tp``, ``n_fp``), the between-class ``spread`` table (where measured), the state entries
a method names in ``_evidence_keys`` (``auto``'s cross-validation table), and the model's
:class:`~topcal.evidence.core.Evidence` (``confusion``, ``stats`` with their part marks
``fingerprints``, ``fingerprint``). A model fitted inside another's (auto's choice, a blend's
components, a pooled curve, a shrinkage reference) keeps only its counts
(``fit(..., keep="model")``): its owner's evidence is the one. Files of an earlier layout
are turned into this one by :func:`topcal.persist.migrate` before they reach
:func:`from_dict`.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import ModelFileError

__all__ = ["to_dict", "from_dict", "to_jsonable", "finite_array", "support_list"]


def to_dict(model, state: dict, evidence, spread: dict | None = None) -> dict[str, Any]:
    """The dict of fitted ``model`` with its ``state`` and, in one ``evidence`` object, its
    counts, between-class ``spread`` table (where measured, :mod:`.spread`), the state
    entries its method names in ``_evidence_keys`` and its ``evidence`` (each piece where
    kept)."""
    moved = [k for k in model._evidence_keys if k in state]
    kept: dict[str, Any] = {
        "n_tp": [float(v) for v in model.n_tp_],
        "n_fp": [float(v) for v in model.n_fp_],
    }
    if spread is not None:
        kept["spread"] = spread
    kept.update({k: state[k] for k in moved})
    kept.update(evidence.to_dict())
    return {
        "method": model.name,
        "params": model._file_params(),  # a loaded file's own, parameters added since left out
        "classes": list(model.classes_),
        "score_range": [float(v) for v in model.score_range_],
        "state": {k: v for k, v in state.items() if k not in moved},
        "evidence": kept,
    }


def from_dict(cls, d: dict[str, Any]):
    """A fitted ``cls`` from :func:`to_dict` output; ModelFileError for anything missing or
    odd."""
    try:
        obj = cls(**dict(d["params"]))
        obj._validate_params()
        classes = tuple(str(c) for c in d["classes"])
        lo, hi = (float(v) for v in d["score_range"])
        evidence = d["evidence"]
        if not isinstance(evidence, dict) or not isinstance(d["state"], dict):
            raise ValueError("state and evidence must be objects")
        n_tp = np.asarray(evidence["n_tp"], dtype=np.float64)
        n_fp = np.asarray(evidence["n_fp"], dtype=np.float64)
        if not (lo < hi) or n_tp.shape != (len(classes),) or n_fp.shape != (len(classes),):
            raise ValueError("classes, score_range and counts are inconsistent")
        state = {**d["state"], **{k: evidence[k] for k in cls._evidence_keys if k in evidence}}
        obj._load(d, state, classes, (lo, hi), n_tp, n_fp)
    except ModelFileError:
        raise
    except (KeyError, TypeError, ValueError, IndexError) as exc:
        msg = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise ModelFileError(
            f"model for method {cls.name!r} is malformed ({msg}); refit and save it again"
        ) from None
    return obj


def to_jsonable(obj):
    """Turn ndarrays and numpy scalars inside dicts/lists into plain JSON types.

    Floats keep every bit: JSON stores Python's shortest round-trip repr.
    """
    if isinstance(obj, dict):
        return {str(k): to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [to_jsonable(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if isinstance(obj, np.integer):
        return int(obj)
    if isinstance(obj, np.floating):
        return float(obj)
    return obj


def support_list(values, k: int) -> list:
    """Parse the per-class supports of a model file: ``k`` entries, each None or a finite
    (low, high) pair with low <= high (raises ValueError)."""
    if not isinstance(values, list) or len(values) != k:
        raise ValueError(f"support must be a list of {k} entries")
    pairs = [v for v in values if v is not None]
    try:  # all pairs checked at once; on any doubt, one by one below (which names it)
        arr = np.array(pairs, dtype=np.float64).reshape(len(pairs), 2)
        if np.isfinite(arr).all() and (arr[:, 0] <= arr[:, 1]).all():
            it = iter(map(tuple, arr.tolist()))
            return [None if v is None else next(it) for v in values]
    except (TypeError, ValueError):
        pass
    out = []
    for v in values:
        try:
            pair = (
                None if v is None else tuple(float(x) for x in finite_array(v, "support", 2))
            )
        except (TypeError, ValueError):
            raise ValueError(
                "support must hold a (low, high) pair of finite numbers per class"
            ) from None
        if pair is not None and not pair[0] <= pair[1]:
            raise ValueError("support must be a (low, high) pair with low <= high")
        out.append(pair)
    return out


def finite_array(values, name: str, length: int | None = None) -> np.ndarray:
    """Parse a list of finite floats from a model file (raises ValueError)."""
    arr = np.asarray(values, dtype=np.float64)
    if arr.ndim != 1 or not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} must be a list of finite numbers")
    if length is not None and arr.shape[0] != length:
        raise ValueError(f"{name} must have {length} entries, has {arr.shape[0]}")
    return arr
