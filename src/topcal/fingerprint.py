"""A cheap fingerprint of the rows a model was fitted on.

A guarantee computed on labelled data (:mod:`topcal.thresholds`) is void when
those rows are the ones the calibrator was fitted on. To refuse them, a
fitted model keeps a :class:`Fingerprint` of its fitting rows:

* ``n_rows`` and ``total``, the sum (mod 2^64) of one 64-bit hash per row:
  the same rows in any order give the same total;
* ``sketch``, the :data:`SKETCH_SIZE` smallest distinct row hashes (a
  bottom-k sketch, Broder 1997): the share of them found among another data
  set's row hashes estimates the share of the fitting rows that set
  contains (a superset, or a resample of the fitting data, is caught too).

A row's hash mixes its predicted and true class *names* (so the class order
of a file does not matter), its score, its TP/FP weights, its bin and its
full score vector (columns by class name), each as exact float bits, through
the splitmix64 finaliser (Steele, Lea and Flood 2014). Both parts merge, so
an update keeps the fingerprint of all the data it was fitted on. About
2 KB in a model file; one pass over the rows.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np

from .data import TopLabelData

__all__ = ["Fingerprint", "row_hashes", "SKETCH_SIZE"]

#: Hashes kept in the sketch: containment is estimated to about +-4 points
#: (binomial standard error at 128 draws) - enough to tell "these are the
#: fitting rows" from "a few rows coincide".
SKETCH_SIZE = 128
_MASK = (1 << 64) - 1
#: Score-vector entries hashed per block of rows (256 KB of uint64).
_BLOCK_VALUES = 32_768


_S30, _S27, _S31 = np.uint64(30), np.uint64(27), np.uint64(31)
_M1, _M2 = np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB)


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser on uint64 (wrapping arithmetic); ``x`` is overwritten (a fresh
    array)."""
    t = np.right_shift(x, _S30)
    x ^= t
    x *= _M1
    np.right_shift(x, _S27, out=t)
    x ^= t
    x *= _M2
    np.right_shift(x, _S31, out=t)
    x ^= t
    return x


def _name_hash(name: str) -> np.uint64:
    return np.uint64(
        int.from_bytes(hashlib.blake2b(name.encode(), digest_size=8).digest(), "little")
    )


def _bits(a: np.ndarray) -> np.ndarray:
    """The float64 bits of ``a`` as uint64: a view where ``a`` is float64 (no copy), else a
    converted copy."""
    a = np.asarray(a)
    return (a if a.dtype == np.float64 else a.astype(np.float64)).view(
        np.uint64
    )  # same item size: any strides


def row_hashes(data: TopLabelData) -> np.ndarray:
    """One 64-bit hash per row of ``data``, shape (n_rows,), dtype uint64."""
    names = np.array([_name_hash(c) for c in data.classes], dtype=np.uint64)
    with np.errstate(over="ignore"):  # every _mix gets a fresh array (a ^ b), which it overwrites
        h = _mix(names[data.pred] ^ np.uint64(0x9E3779B97F4A7C15))
        parts = [_bits(data.score)]
        if data.tp is not None:
            parts += [_bits(data.tp), _bits(data.fp)]
        if data.labels is not None:
            parts.append(names[data.labels])
        if data.bin_edges is not None:
            parts += [_bits(data.bin_edges[:, 0]), _bits(data.bin_edges[:, 1])]
        if (
            data.full is not None
        ):  # the vector, columns keyed by class name (file order does not matter)
            full = _bits(data.full)
            acc = np.empty(data.n_rows, dtype=np.uint64)
            step = max(1, _BLOCK_VALUES // max(data.n_classes, 1))
            for a in range(
                0, data.n_rows, step
            ):  # row blocks within a core's cache; sums wrap (any order)
                np.sum(
                    _mix(full[a : a + step] ^ names), axis=1, dtype=np.uint64, out=acc[a : a + step]
                )
            parts.append(acc)
        for p in parts:
            h = _mix(h ^ p)
    return h


@dataclass(frozen=True)
class Fingerprint:
    """What a model remembers of its fitting rows (see the module docstring)."""

    n_rows: int
    total: int
    sketch: tuple[int, ...]

    @classmethod
    def of(cls, data: TopLabelData) -> "Fingerprint":
        h = row_hashes(data)
        total = int(h.sum(dtype=np.uint64)) & _MASK  # uint64 sums wrap: mod 2^64
        distinct = (
            np.unique(np.partition(h, 8 * SKETCH_SIZE)[: 8 * SKETCH_SIZE + 1])
            if h.size > 16 * SKETCH_SIZE
            else np.unique(h)
        )
        if distinct.size < SKETCH_SIZE:  # many repeated rows: the sketch needs all distinct hashes
            distinct = np.unique(h)
        distinct = distinct[:SKETCH_SIZE]
        return cls(data.n_rows, total, tuple(int(v) for v in distinct))

    def merge(self, other: "Fingerprint") -> "Fingerprint":
        """The fingerprint of both row sets together."""
        sketch = sorted(set(self.sketch) | set(other.sketch))[:SKETCH_SIZE]
        return Fingerprint(
            self.n_rows + other.n_rows, (self.total + other.total) & _MASK, tuple(sketch)
        )

    def distinct_rows(self) -> float:
        """Estimated number of distinct fitting rows (k minimum values, Bar-Yossef et al. 2002)."""
        if len(self.sketch) < SKETCH_SIZE:
            return float(len(self.sketch))
        return (SKETCH_SIZE - 1) / ((self.sketch[-1] + 1) / 2.0**64)

    def containment(self, data: TopLabelData) -> tuple[bool, float]:
        """(same rows, estimated share of the fitting rows that occur in ``data``).

        ``same rows``: ``data`` holds exactly the fitting rows (any order).
        """
        h = row_hashes(data)
        same = data.n_rows == self.n_rows and (int(h.sum(dtype=np.uint64)) & _MASK) == self.total
        if not self.sketch:
            return same, 0.0
        found = np.isin(np.array(self.sketch, dtype=np.uint64), h)
        return same, float(found.mean())

    def to_dict(self) -> dict:
        # hex strings: 64-bit integers do not survive every JSON reader
        return {
            "n_rows": self.n_rows,
            "total": f"{self.total:016x}",
            "sketch": [f"{v:016x}" for v in self.sketch],
        }

    @classmethod
    def from_dict(cls, d: dict) -> "Fingerprint":
        n = int(d["n_rows"])
        sketch = tuple(int(v, 16) for v in d["sketch"])
        if n < 0 or len(sketch) > SKETCH_SIZE or any(not 0 <= v <= _MASK for v in sketch):
            raise ValueError("fingerprint is malformed")
        return cls(n, int(d["total"], 16) & _MASK, sketch)
