"""Fit the calibrator and choose the cut-offs on disjoint parts of one labelled file.

The guarantee of :func:`topcal.thresholds.core.fit_thresholds` assumes that the calibrator
was fitted on other rows than the ones the cut-offs are chosen on. :func:`fit_and_threshold`
makes that the easy path: it splits one labelled dataset into a fitting part and a cut-off
part (stratified by predicted class, seeded), fits the calibrator on the first, chooses the
cut-offs on the second, and records the split in the thresholds file (:class:`Split`). The
rows of the two parts are disjoint by construction; the fingerprint check then only guards
the two-file path (``topcal fit`` on one file, ``topcal threshold --model`` on another).

The split looks at the predicted classes only (never at the labels), so it is fixed before
any label is read, and each class's rows go to the fitting part in the proportion
``fit_fraction`` (a class of n rows gives floor(fraction * n + u) of them, u uniform per
class: no class is rounded the same way every time).
"""

from __future__ import annotations

import dataclasses
import hashlib
import math

import numpy as np

from .._typing import ArrayLike
from ..errors import ParameterError

__all__ = ["Split", "split_rows", "check_split_args", "STRATIFY"]

#: What the split is stratified by (the only kind: the predicted class, never the label).
STRATIFY = "predicted class"


@dataclasses.dataclass(frozen=True)
class Split:
    """How one labelled file was cut into a fitting part and a cut-off part.

    ``fraction``: the share of each predicted class's rows that fitted the calibrator;
    ``seed`` the random seed; ``n_fit`` / ``n_cutoff`` the rows of each part;
    ``rows_sha256`` a SHA-256 of the row assignment (one bit a row, in the file's order: 1 =
    fitting part), so the same file split again can be checked to give the same parts."""

    fraction: float
    seed: int
    n_fit: int
    n_cutoff: int
    rows_sha256: str
    stratify: str = STRATIFY

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d) -> "Split":
        """Rebuild from :meth:`to_dict` output; every field checked (raises ValueError)."""
        if not isinstance(d, dict) or set(d) != {f.name for f in dataclasses.fields(cls)}:
            raise ValueError(
                "split must hold fraction, seed, n_fit, n_cutoff, rows_sha256 and stratify"
            )
        frac = d["fraction"]
        if isinstance(frac, bool) or not isinstance(frac, (int, float)) or not 0 < frac < 1:
            raise ValueError(f"split.fraction must be in (0, 1), got {frac!r:.40}")
        for key in ("seed", "n_fit", "n_cutoff"):
            if type(d[key]) is not int or d[key] < 0:
                raise ValueError(f"split.{key} must be an integer >= 0, got {d[key]!r:.40}")
        digest = d["rows_sha256"]
        if (
            not isinstance(digest, str)
            or len(digest) != 64
            or any(ch not in "0123456789abcdef" for ch in digest)
        ):
            raise ValueError("split.rows_sha256 must be 64 hexadecimal digits")
        if d["stratify"] != STRATIFY:
            raise ValueError(f"split.stratify must be {STRATIFY!r}, got {d['stratify']!r:.40}")
        return cls(float(frac), d["seed"], d["n_fit"], d["n_cutoff"], digest)


def check_split_args(fraction, seed) -> None:
    if (
        isinstance(fraction, bool)
        or not isinstance(fraction, (int, float, np.floating))
        or not (math.isfinite(fraction) and 0 < fraction < 1)
    ):
        raise ParameterError(
            f"fit_fraction must be a number in (0, 1) (the share of the rows that fits the "
            f"calibrator), got {fraction!r:.40}"
        )
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ParameterError(f"seed must be an integer >= 0, got {seed!r:.40}")


def split_rows(pred: ArrayLike, fraction: float, seed: int) -> tuple[np.ndarray, Split]:
    """A boolean mask of the rows that fit the calibrator (the rest choose the cut-offs),
    and the :class:`Split` that describes it.

    ``pred``: each row's predicted class (any integer codes). Per class, a seeded random
    floor(fraction * n + u) of its n rows (u uniform in [0, 1) per class, so the expected
    share is exactly ``fraction``) go to the fitting part. Depends on ``pred``, ``fraction``
    and ``seed`` only."""
    check_split_args(fraction, seed)
    pred = np.asarray(pred)
    n = pred.shape[0]
    rng = np.random.default_rng(int(seed))
    key = np.asarray(rng.random(n))
    order = np.lexsort((key, pred))  # by class, then at random within a class
    sorted_pred = pred[order]
    starts: np.ndarray = (
        np.flatnonzero(np.r_[True, sorted_pred[1:] != sorted_pred[:-1]])
        if n
        else np.zeros(0, dtype=np.int64)
    )
    sizes = np.diff(np.r_[starts, n]) if n else np.zeros(0, dtype=np.int64)
    take = np.floor(fraction * sizes + rng.random(len(sizes))).astype(np.int64)
    rank = np.arange(n) - np.repeat(starts, sizes) if n else np.zeros(0, dtype=np.int64)
    mask = np.zeros(n, dtype=bool)
    mask[order] = rank < np.repeat(take, sizes)
    digest = hashlib.sha256(n.to_bytes(8, "little") + np.packbits(mask).tobytes()).hexdigest()
    n_fit = int(mask.sum())
    return mask, Split(float(fraction), int(seed), n_fit, n - n_fit, digest)
