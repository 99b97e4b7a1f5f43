"""A cheap fingerprint of the rows a model was fitted on.

A guarantee computed on labelled data (:mod:`topcal.thresholds.core`) is void when those
rows are the ones the calibrator was fitted on. To refuse them, a fitted model keeps a
:class:`Fingerprint` of its fitting rows:

* ``n_rows`` and ``total``, the sum (mod 2^64) of one 64-bit hash per row: the same rows in
  any order give the same total;
* ``sketch``, the :data:`SKETCH_SIZE` smallest distinct row hashes (a bottom-k sketch,
  Broder 1997): the share of them found among another data set's row hashes estimates the
  share of the fitting rows that set contains (a superset, or a resample of the fitting
  data, is caught too).

A row's hash mixes its predicted and true class *names* (so the class order of a file does
not matter), its score, its TP/FP weights, its bin and its full score vector (columns by
class name), each as exact float bits, through the splitmix64 finaliser (Steele, Lea and
Flood 2014). Both parts merge, so an update keeps the fingerprint of all the data it was
fitted on. About 2 KB in a model file; one pass over the rows.

Two versioned schemes (``scheme``, stored in the model file from the second on; new
fingerprints: :data:`SCHEME`). Scheme 1 (files before schemes) mixes the parts in turn, and
folds the full vector by mixing every entry's bits with its class's name and summing the
mixes (about ten passes over the n x K entries). Scheme 2 folds the full vector by one
integer matrix-vector product: each entry's bits x ^ (x >> 29), times one odd 64-bit key per
class name, summed mod 2^64 (a product carries a bit only upward: the shift brings the sign,
exponent and leading mantissa bits, where round floats and widened float32 differ, down); it
sums the other parts, each mixed by x ^ (x >> 32), times its own odd key, y ^ (y >> 29), and
mixes the sum once. Side by side, the vector's fold takes 0.33 x scheme 1's time on 10^6 x
100 probabilities (load 3). Both are exact and order-free (wrapping integer sums). The fold
is linear in the shifted bits: two rows alike in their classes, score and weights collide
where their vectors' shifted differences have a key-weighted sum of 0 mod 2^64: never where
one entry differs, with chance 2^-37 or less where several do (plain keyed sums of plain
bits collide for vectors of round entries, and of parts for round weights: both tested). A
fingerprint compares data hashed by its own scheme (an older file's against new data hashed
the old way: :meth:`Fingerprint.containment`); an update hashes its new rows by the model's
scheme, and fingerprints of two schemes do not merge (:meth:`Fingerprint.merge`). A topcal
before schemes finds a scheme-2 file's rows by their coarse keys only.

Rows found bit for bit count only beyond chance: where row values recur across samples (a
forest's votes / trees, a few score levels) honest held-out data hold many of the fitting
rows' values, so the recurrence inside the data (one random half's sketch found in the other
half) is taken off, and an excess within 3 standard errors counts for nothing. An update
that arrives as statistics with its rows' fingerprint (streamed, Dask, an Evidence) is
compared sketch against sketch (:meth:`Fingerprint.shared`).

Exact bits do not survive a re-encoding of the same rows (rounded to 6 decimals, float32,
logits instead of probabilities, the top-score layout, percentages renormalised), so a
second, coarse sketch (``coarse``, ``n_coarse``) keys each labelled per-sample row by its
predicted and true class names and its top score on a grid of :data:`COARSE_STEP`, and a row
is found again when a row of the other data has the same names and a score within
:data:`COARSE_REACH` steps. Rows scoring above :data:`COARSE_TOP` are left out: near 1 the
scores of different rows crowd together (on real networks' held-out halves 0-1.4% of the
fitting rows' coarse keys then recur by chance, against 100% after each re-encoding above).
What recurs by chance is measured, too, further away (where no re-encoding moves a score)
and taken off, so that large fits on crowded scores do not see their own new rows as old; an
excess within 3 standard errors of the chance counts for nothing, and so does a sketch whose
keys recur by chance half the time or more (too many rows too close together to tell apart
by their top score). Both sketches merge like the statistics: a model fitted in chunks or on
Dask keeps the fingerprint of the whole fit, bit for bit.

Coarser re-encodings (rounded to 4 or 3 decimals, percentages with 2, renormalised or not)
move a top score by up to 5e-4 and more: on a grid that coarse, one top score no longer
tells a few thousand rows apart. Where the rows hold score vectors of three classes or
more, a third sketch (``rough``, ``n_rough``) keys each by its class names and its top and
*second* scores on a grid of :data:`ROUGH_STEP` (the second from the ratio of the two
largest entries, which renormalising does not change); a key is found again within
:data:`ROUGH_REACH` steps in both. Its chance is measured inside the data, as the exact
rows' is (one half's keys found in the other half), so that scores on a lattice (a
forest's votes) count for nothing: honest held-out votes of 20-200 trees are never taken
for fitting rows (0 of 50 seeds at each), rows rounded to 3 or 4 decimals are, at 98-100%.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np

from .._numeric import distinct, found_in
from ..data import TopLabelData

__all__ = [
    "MAX_OVERLAP",
    "WARN_OVERLAP",
    "Fingerprint",
    "Overlap",
    "coarse_hashes",
    "row_hashes",
    "unchecked",
    "SCHEME",
    "SKETCH_SIZE",
]

#: Hashes kept in the sketch: containment is estimated to about +-4 points (binomial
#: standard error at 128 draws) - enough to tell "these are the fitting rows" from "a few
#: rows coincide".
SKETCH_SIZE = 128
_MASK = (1 << 64) - 1
#: Score-vector entries hashed per block of rows (256 KB of uint64).
_BLOCK_VALUES = 32_768
#: How new fingerprints fold the full score vector (module docstring); files before the
#: scheme was stored hold scheme 1.
SCHEME = 2
_SCHEMES = (1, 2)
#: The coarse keys' score grid: rounding to 6 decimals moves a score by at most half a step,
#: float32 by 6e-8 near 1.
COARSE_STEP = 1e-6
#: Steps either side within which a coarse key is found again: rounding to 6 decimals and
#: renormalising a row of 10 classes moves its top score by up to ~5e-6 (2e-6 typically).
COARSE_REACH = 3
#: Rows scoring above this have no coarse key (module docstring); so do scores below 0.
COARSE_TOP = 1.0 - 1e-3
#: The rough keys' grid (module docstring) for the top and the second score: rounding to 3
#: decimals moves either by at most half a step, renormalising a few classes' rounded row
#: by about as much again.
ROUGH_STEP = 1e-3
#: Steps either side, in each of the two scores, within which a rough key is found again.
ROUGH_REACH = 2
#: The chance recurrence of rough keys from which they say nothing. Higher than the coarse
#: keys' one half: the chance is measured in the data themselves, which errs high (a mean
#: of powers), never low, so that a large excess is still sure; near 1 no key tells.
ROUGH_CHANCE = 0.8
#: Rows of score vectors read a block at a time for their second score.
_ROUGH_BLOCK = 4096
#: Share of the fitting rows found in some labelled data, or of the data's rows that are
#: fitting rows, from which a guarantee (topcal.thresholds.core) or an update refuses the
#: data.
MAX_OVERLAP = 0.5
#: Share of the data's rows that look like fitting rows from which they warn (held-out
#: halves of real networks' outputs: 0-1.4% by chance).
WARN_OVERLAP = 0.1


_S30, _S27, _S31 = np.uint64(30), np.uint64(27), np.uint64(31)
_S29, _S32 = np.uint64(29), np.uint64(32)
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


#: scheme 2's odd key per part of a row (predicted class, score, tp, fp, true class, bin
#: edges, the folded vector; fewer where a row has fewer parts): the splitmix64 generator's
#: first outputs from seed 0 (made odd)
_PART_KEYS = tuple(
    np.uint64(v | 1)
    for v in (
        0xE220A8397B1DCDAF,
        0x6E789E6AA1B965F4,
        0x06C45D188009454F,
        0xF88BB8A8724C81EC,
        0x1B39896A51A8749B,
        0x53CB9F0C747EA2EA,
        0x2C829ABE1F4532E1,
        0xC584133AC916AB3C,
    )
)


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


def _fold_vectors(full: np.ndarray, names: np.ndarray, scheme: int) -> np.ndarray:
    """One uint64 per row of the score vectors ``full`` (n, K), columns keyed by their class
    names' hashes ``names`` (the module docstring's schemes)."""
    n, k = full.shape
    acc = np.empty(n, dtype=np.uint64)
    if scheme == 1:
        full = _bits(full)
        step = max(1, _BLOCK_VALUES // max(k, 1))
        for a in range(0, n, step):  # row blocks within a core's cache; sums wrap (any order)
            np.sum(
                _mix(full[a : a + step] ^ names),
                axis=1,
                dtype=np.uint64,
                out=acc[a : a + step],
            )
        return acc
    # one odd key per class name: a product carries every bit of an entry upward, and x ^ (x
    # >> 29) first brings the sign, exponent and leading mantissa bits down (round floats,
    # float32's widened: their differences have no low bits to carry otherwise)
    keys = _mix(names ^ np.uint64(0xD1B54A32D192ED03)) | np.uint64(1)
    step = max(1, _BLOCK_VALUES // max(k, 1))
    t = np.empty((min(step, n), k), dtype=np.uint64)
    for a in range(0, n, step):  # row blocks within a core's cache
        x = _bits(full[a : a + step])
        u = t[: x.shape[0]]
        np.right_shift(x, _S29, out=u)
        u ^= x
        np.matmul(u, keys, out=acc[a : a + step])  # integer: exact, wraps mod 2^64
    return acc


def row_hashes(data: TopLabelData, scheme: int = SCHEME) -> np.ndarray:
    """One 64-bit hash per row of ``data``, shape (n_rows,), dtype uint64, by ``scheme``
    (module docstring)."""
    if scheme not in _SCHEMES:
        raise ValueError(f"unknown fingerprint scheme {scheme!r}")
    names = np.array([_name_hash(c) for c in data.classes], dtype=np.uint64)
    parts = [_bits(data.score)]
    if data.tp is not None:
        parts += [_bits(data.tp), _bits(data.fp)]
    if data.labels is not None:
        parts.append(names[data.labels])
    if data.bin_edges is not None:
        parts += [_bits(data.bin_edges[:, 0]), _bits(data.bin_edges[:, 1])]
    # every _mix gets a fresh array (a ^ b), which it overwrites
    with np.errstate(over="ignore"):
        if data.full is not None:  # columns keyed by class name (file order does not matter)
            parts.append(_fold_vectors(np.asarray(data.full), names, scheme))
        if scheme == 1:
            h = _mix(names[data.pred] ^ np.uint64(0x9E3779B97F4A7C15))
            for p in parts:
                h = _mix(h ^ p)
            return h
        # scheme 2: each part's high half folded onto its low half (a difference in high
        # bits only, as of round floats, reaches the low ones), times its own odd key (low
        # bits reach the high ones), the high bits folded back; the parts summed; one mix
        h = names[data.pred] * _PART_KEYS[0]
        t, u = np.empty_like(h), np.empty_like(h)
        for p, key in zip(parts, _PART_KEYS[1:]):
            np.right_shift(p, _S32, out=t)
            t ^= p
            t *= key
            np.right_shift(t, _S29, out=u)
            t ^= u
            h += t
        return _mix(h)


def coarse_hashes(data: TopLabelData, shift: int = 0) -> np.ndarray:
    """The coarse key's hash of each labelled per-sample row with a score in [0, COARSE_TOP]
    (module docstring), its score's grid index moved by ``shift`` steps; (m,) uint64, m <=
    rows. Empty for binned or unlabelled data."""
    if data.labels is None or data.is_binned:
        return np.zeros(0, dtype=np.uint64)
    score = np.asarray(data.score, dtype=np.float64)
    keep = (score >= 0.0) & (score <= COARSE_TOP)
    names = np.array([_name_hash(c) for c in data.classes], dtype=np.uint64)
    cell = np.rint(score[keep] / COARSE_STEP).astype(np.int64) + shift
    with np.errstate(over="ignore"):
        h = _mix(names[data.pred[keep]] ^ np.uint64(0x2545F4914F6CDD1D))
        h = _mix(h ^ names[data.labels[keep]])
        return _mix(h ^ cell.view(np.uint64))


def _second_scores(data: TopLabelData, keep: np.ndarray) -> np.ndarray:
    """The second-highest probability of the rows ``keep`` (a boolean mask) of data with
    full score vectors: the top score times the ratio of the two largest entries, which
    renormalising a row does not change (logits: the exponential of their difference)."""
    rows = np.flatnonzero(keep)
    out = np.zeros(rows.size)
    for a in range(0, rows.size, _ROUGH_BLOCK):
        idx = rows[a : a + _ROUGH_BLOCK]
        two = np.partition(np.asarray(data.full[idx], dtype=np.float64), -2, axis=1)[:, -2:]
        if data.full_kind == "logits":
            ratio = np.exp(two[:, 0] - two[:, 1])
        else:
            with np.errstate(divide="ignore", invalid="ignore"):
                ratio = np.where(two[:, 1] > 0, two[:, 0] / two[:, 1], 0.0)
        out[a : a + idx.size] = ratio
    return np.asarray(data.score, dtype=np.float64)[rows] * out


def _may_have_rough_keys(data: TopLabelData) -> bool:
    """Whether ``data``'s rows can have rough keys: labelled per-sample rows with score
    vectors of three or more classes (a cheap test: no pass over the scores)."""
    return (
        data.labels is not None
        and not data.is_binned
        and data.has_full
        and data.n_classes >= 3
        and data.n_rows > 0
    )


def rough_cells(data: TopLabelData) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(names' hash, top score's grid index, second score's grid index) of each labelled
    per-sample row that has a rough key (module docstring): a full score vector of three or
    more classes and a top score in [0, COARSE_TOP]. Empty arrays for the rest."""
    empty = np.zeros(0, dtype=np.uint64), np.zeros(0, np.int64), np.zeros(0, np.int64)
    if not _may_have_rough_keys(data):
        return empty
    score = np.asarray(data.score, dtype=np.float64)
    keep = (score >= 0.0) & (score <= COARSE_TOP)
    if not keep.any():
        return empty
    second = _second_scores(data, keep)
    names = np.array([_name_hash(c) for c in data.classes], dtype=np.uint64)
    with np.errstate(over="ignore"):
        h = _mix(names[data.pred[keep]] ^ np.uint64(0x6A09E667F3BCC909))
        h = _mix(h ^ names[data.labels[keep]])
    top = np.rint(score[keep] / ROUGH_STEP).astype(np.int64)
    return h, top, np.rint(second / ROUGH_STEP).astype(np.int64)


def rough_hashes(cells, shifts=((0, 0),)) -> np.ndarray:
    """The rough keys' hashes of :func:`rough_cells`'s rows, each row's two grid indices
    moved by every (top, second) step pair of ``shifts``; (len(shifts) x rows,) uint64."""
    h, top, second = cells
    out = []
    with np.errstate(over="ignore"):
        for dt, ds in shifts:
            cell = ((top + dt) << np.int64(24)) ^ (second + ds)
            out.append(_mix(h ^ cell.view(np.uint64)))
    return np.concatenate(out) if out else np.zeros(0, dtype=np.uint64)


def _window(offset: int) -> list[tuple[int, int]]:
    """The (top, second) step pairs within ROUGH_REACH of (offset, offset)."""
    r = range(-ROUGH_REACH, ROUGH_REACH + 1)
    return [(offset + a, offset + b) for a in r for b in r]


def _chance(h: np.ndarray) -> float:
    """How often another sample's distinct row values recur in rows hashed ``h`` by chance
    alone: the share of one random half's sketch found in the other half, taken to the
    whole's size as 1 - (1 - c)^2 (each value found with probability 1 - (1 - p)^m in m
    rows). 0 where every row is distinct (continuous scores: no value recurs)."""
    if h.size < 4 or distinct(h).size == h.size:
        return 0.0
    # fixed: the same data, the same answer
    order = np.random.default_rng(0).permutation(h.size)
    a, b = h[order[: h.size // 2]], h[order[h.size // 2 :]]
    sketch = np.array(_bottom(a), dtype=np.uint64)
    c = float(found_in(sketch, b).mean()) if sketch.size else 0.0
    return 1.0 - (1.0 - c) ** 2


def _bottom(h: np.ndarray) -> tuple[int, ...]:
    """The :data:`SKETCH_SIZE` smallest distinct values of ``h`` (a bottom-k sketch)."""
    values = (
        distinct(np.partition(h, 8 * SKETCH_SIZE)[: 8 * SKETCH_SIZE + 1])
        if h.size > 16 * SKETCH_SIZE
        else distinct(h)
    )
    if values.size < SKETCH_SIZE:  # many repeated rows: the sketch needs all distinct hashes
        values = distinct(h)
    return tuple(int(v) for v in values[:SKETCH_SIZE])


def unchecked(fp: "Fingerprint | None", data: TopLabelData) -> str | None:
    """Why the overlap of ``data`` with the rows behind ``fp`` cannot be checked in full
    (one line for a warning), or None where it can: no fingerprint at all (a model file
    written before fingerprints, or statistics of unknown rows merged in), or one without
    coarse keys (a file written before them) while ``data`` have some, so that re-encoded
    fitting rows (rounded, float32, logits) cannot be recognised, only bit-identical ones;
    or one without rough keys (a file written before them) while ``data`` have some, so
    that rows rounded to 3 or 4 decimals cannot be."""
    if fp is None:
        return (
            "the model file keeps no fingerprint of its fitting rows (written by an older "
            "topcal, or statistics of unknown rows added), so whether these rows are "
            "fitting rows could not be checked"
        )
    if not fp.coarse and data.n_rows and coarse_hashes(data).size:
        return (
            "the model file's fingerprint predates its re-encoding sketch: fitting rows "
            "are recognised bit for bit only, not rounded or otherwise re-encoded (fit it "
            "again to check them)"
        )
    if not fp.rough_kept and _may_have_rough_keys(data):
        return (
            "the model file's fingerprint predates its rough sketch: fitting rows rounded "
            "to 3 or 4 decimals are not recognised, only finer re-encodings (fit it again to "
            "check them)"
        )
    return None


def _distinct(sketch: tuple[int, ...]) -> float:
    """Estimated number of distinct values behind a bottom-k sketch (k minimum values,
    Bar-Yossef et al. 2002)."""
    if len(sketch) < SKETCH_SIZE:
        return float(len(sketch))
    return (SKETCH_SIZE - 1) / ((sketch[-1] + 1) / 2.0**64)


def _rough_share(keys: np.ndarray, n_fit: int, data: TopLabelData) -> float:
    """The share of ``data``'s rows that are fitting rows, from the fitting rows' rough
    sketch ``keys`` (of ``n_fit`` rows): the keys found within ROUGH_REACH steps of a row of
    the data, beyond what recurs there by chance, over the data's rows with a rough key. The
    chance is measured inside the data (as :func:`_chance`): how often one random half's keys
    are found within reach in the other half, so that scores on a lattice (a forest's votes)
    or crowded together count for nothing. 0 unless the excess is sure (3 standard errors)
    and the keys tell rows apart (chance below :data:`ROUGH_CHANCE`)."""
    cells = rough_cells(data)
    if cells[0].size < 4:
        return 0.0
    m = cells[0].size
    near = float(found_in(keys, rough_hashes(cells, _window(0))).mean())
    order = np.random.default_rng(0).permutation(m)  # fixed: the same data, the same answer
    half_a = tuple(a[order[: m // 2]] for a in cells)
    half_b = tuple(a[order[m // 2 :]] for a in cells)
    sketch = np.array(_bottom(rough_hashes(half_a)), dtype=np.uint64)
    c_half = float(found_in(sketch, rough_hashes(half_b, _window(0))).mean())
    chance = 1.0 - (1.0 - c_half) ** 2
    se = np.sqrt((near * (1 - near) + chance * (1 - chance)) / keys.size)
    if chance >= ROUGH_CHANCE or near - chance <= 3 * se:
        return 0.0
    return (near - chance) / (1.0 - chance) * n_fit / m


@dataclass(frozen=True)
class Overlap:
    """How much of some labelled data a model was fitted on (:meth:`Fingerprint.overlap`).

    ``same``: the data are exactly the fitting rows (any order). ``of_fit``: the estimated
    share of the fitting rows found in the data, bit for bit (a superset or a resample; 0
    where the fitting rows are mostly repeated, as binned counts are). ``of_data``: the
    estimated share of the data's rows that are fitting rows, found bit for bit or
    re-encoded (their coarse keys), at most 1."""

    same: bool
    of_fit: float
    of_data: float


@dataclass(frozen=True)
class Fingerprint:
    """What a model remembers of its fitting rows (see the module docstring)."""

    n_rows: int
    total: int
    sketch: tuple[int, ...]
    #: the coarse keys' bottom-k sketch and the number of rows that have a coarse key (files
    #: before them: none)
    coarse: tuple[int, ...] = ()
    n_coarse: int = 0
    #: how the rows' full score vectors were folded into their hashes (module docstring;
    #: files before schemes were stored: 1)
    scheme: int = 1
    #: the rough keys' bottom-k sketch and the number of rows that have a rough key (files
    #: before them, and rows without score vectors of three or more classes: none)
    rough: tuple[int, ...] = ()
    n_rough: int = 0
    #: whether rough keys were kept at all (False: a file written before them)
    rough_kept: bool = True

    @classmethod
    def of(cls, data: TopLabelData, scheme: int = SCHEME) -> "Fingerprint":
        """The fingerprint of ``data``'s rows, hashed by ``scheme`` (an update's: its
        model's)."""
        h = row_hashes(data, scheme)
        total = int(h.sum(dtype=np.uint64)) & _MASK  # uint64 sums wrap: mod 2^64
        c = coarse_hashes(data)
        r = rough_hashes(rough_cells(data))
        return cls(
            data.n_rows,
            total,
            _bottom(h),
            _bottom(c) if c.size else (),
            int(c.size),
            scheme,
            _bottom(r) if r.size else (),
            int(r.size),
        )

    def merge(self, other: "Fingerprint") -> "Fingerprint":
        """The fingerprint of both row sets together (both hashed by one scheme: ValueError
        otherwise; :meth:`~topcal.evidence.core.Evidence.merge` keeps none then)."""
        if other.scheme != self.scheme:
            raise ValueError(
                f"fingerprints of hash schemes {self.scheme} and {other.scheme} do not merge"
            )
        sketch = sorted(set(self.sketch) | set(other.sketch))[:SKETCH_SIZE]
        coarse = sorted(set(self.coarse) | set(other.coarse))[:SKETCH_SIZE]
        rough = sorted(set(self.rough) | set(other.rough))[:SKETCH_SIZE]
        return Fingerprint(
            self.n_rows + other.n_rows,
            (self.total + other.total) & _MASK,
            tuple(sketch),
            tuple(coarse),
            self.n_coarse + other.n_coarse,
            self.scheme,
            tuple(rough),
            self.n_rough + other.n_rough,
            self.rough_kept and other.rough_kept,
        )

    def distinct_rows(self) -> float:
        """Estimated number of distinct fitting rows (k minimum values, Bar-Yossef et al.
        2002)."""
        return _distinct(self.sketch)

    def distinct_coarse(self) -> float:
        """Estimated number of distinct coarse keys of the fitting rows (as distinct_rows)."""
        return _distinct(self.coarse)

    def distinct_rough(self) -> float:
        """Estimated number of distinct rough keys of the fitting rows (as distinct_rows)."""
        return _distinct(self.rough)

    def containment(self, data: TopLabelData) -> tuple[bool, float]:
        """(same rows, estimated share of the fitting rows that occur in ``data``).

        ``same rows``: ``data`` holds exactly the fitting rows (any order). ``data`` is
        hashed by this fingerprint's scheme. The share counts what recurs beyond chance:
        where rows' values recur across samples (a forest's votes, a few score levels),
        honest data hold many of the fitting rows' values; :func:`_chance` measures that
        recurrence inside ``data`` and only an excess sure to 3 standard errors counts (the
        rescaled excess).
        """
        h = row_hashes(data, self.scheme)
        same = (
            data.n_rows == self.n_rows and (int(h.sum(dtype=np.uint64)) & _MASK) == self.total
        )
        if not self.sketch:
            return same, 0.0
        found = float(found_in(np.array(self.sketch, dtype=np.uint64), h).mean())
        chance = _chance(h)
        k = len(self.sketch)
        se = np.sqrt((found * (1 - found) + chance * (1 - chance)) / k)
        if chance <= 0.0 or found >= 1.0:
            return same, found
        if found - chance <= 3 * se:
            return same, 0.0
        return same, (found - chance) / (1.0 - chance)

    def overlap(self, data: TopLabelData) -> Overlap:
        """How much of ``data`` the fitting rows are (:class:`Overlap`)."""
        same, of_fit = self.containment(data)
        if self.distinct_rows() < 0.5 * self.n_rows:
            # rows mostly repeated (binned counts): a shared row is no shared sample
            of_fit = 0.0
        of_data = 0.0
        c = coarse_hashes(data)
        if self.coarse and c.size and self.distinct_coarse() >= 0.5 * self.n_coarse:
            # the coarse keys judge (a bit-identical row has the same key), where they tell
            # the fitting rows apart (not on a few discrete scores, where many samples share
            # a key)
            keys = np.array(self.coarse, dtype=np.uint64)

            def found(shifts):
                near = np.concatenate([coarse_hashes(data, d) for d in shifts])
                return float(found_in(keys, near).mean())

            # a fitting row's key found within COARSE_REACH steps (a re-encoded row, or
            # chance), and the chance alone: found as many steps further away, where no
            # re-encoding moves a score
            reach = np.arange(-COARSE_REACH, COARSE_REACH + 1)
            near, chance = found(reach), found(reach + 4 * COARSE_REACH + 2)
            # counted where the excess is sure (3 standard errors) and the keys still tell
            # rows apart (chance below one half; near 1 every key recurs and the sketch says
            # nothing)
            se = np.sqrt((near * (1 - near) + chance * (1 - chance)) / keys.size)
            if chance < 0.5 and near - chance > 3 * se:
                # the fitting rows' keys found, over the data's distinct keys: a part of the
                # fitting rows repeated counts as all fitting rows, not as its share of
                # c.size
                of_data = (near - chance) / (1.0 - chance) * self.n_coarse / distinct(c).size
        elif data.n_rows and not data.is_binned:  # (a binned row is a bin's counts, no sample)
            # no coarse keys that tell rows apart (binned rows, scores that are not
            # probabilities, a few discrete scores, older files): the fitting rows found bit
            # for bit, over the data's rows. Not where telling coarse keys exist: rows
            # saturated at one score repeat bit for bit across samples
            of_data = of_fit * self.distinct_rows() / data.n_rows
        if self.rough and self.distinct_rough() >= 0.5 * self.n_rough:
            # rows re-encoded more coarsely than the coarse keys reach (3 or 4 decimals,
            # percentages with 2): their top and second scores on a grid of ROUGH_STEP
            keys = np.array(self.rough, dtype=np.uint64)
            of_data = max(of_data, _rough_share(keys, self.n_rough, data))
        return Overlap(same, of_fit, 1.0 if same else min(of_data, 1.0))

    def shared(self, other: "Fingerprint") -> float:
        """Estimated share of ``other``'s rows that are rows of this fingerprint, bit for
        bit, from the two sketches alone (an update that arrives as statistics: streamed,
        Dask, an :class:`~topcal.evidence.core.Evidence`). The bottom-k sketch of the union
        holds every hash of either set below its largest; those in both sketches estimate
        the sets' Jaccard index J, and J x the union's distinct rows their common rows. 0
        where the schemes differ or either set's rows mostly repeat (binned counts, a few
        discrete scores: a shared row is no shared sample there)."""
        if (
            other.scheme != self.scheme
            or not self.sketch
            or not other.sketch
            or not other.n_rows
            or self.distinct_rows() < 0.5 * self.n_rows
            or other.distinct_rows() < 0.5 * other.n_rows
        ):
            return 0.0
        union = sorted(set(self.sketch) | set(other.sketch))[:SKETCH_SIZE]
        both = set(self.sketch) & set(other.sketch)
        jaccard = sum(v in both for v in union) / len(union)
        if len(union) < SKETCH_SIZE:
            distinct = float(len(union))
        else:
            distinct = (SKETCH_SIZE - 1) / ((union[-1] + 1) / 2.0**64)
        return min(jaccard * distinct / other.n_rows, 1.0)

    def to_dict(self) -> dict:
        # hex strings: 64-bit integers do not survive every JSON reader
        d = {
            "n_rows": self.n_rows,
            "total": f"{self.total:016x}",
            "sketch": [f"{v:016x}" for v in self.sketch],
        }
        if self.n_coarse:  # (none: written as files before coarse keys were, and read back so)
            d.update(coarse=[f"{v:016x}" for v in self.coarse], n_coarse=self.n_coarse)
        if self.scheme != 1:  # (1: written as files before schemes were, and read back so)
            d["scheme"] = self.scheme
        if self.rough_kept:  # (files before rough keys have neither)
            d.update(rough=[f"{v:016x}" for v in self.rough], n_rough=self.n_rough)
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "Fingerprint":
        n = int(d["n_rows"])
        sketch = tuple(int(v, 16) for v in d["sketch"])
        # files before coarse keys: none
        coarse = tuple(int(v, 16) for v in d.get("coarse", []))
        n_coarse = int(d.get("n_coarse", 0))
        scheme = d.get("scheme", 1)  # files before schemes: 1
        rough_kept = "n_rough" in d  # files before rough keys: none
        rough = tuple(int(v, 16) for v in d.get("rough", []))
        n_rough = int(d.get("n_rough", 0))
        if (
            scheme not in _SCHEMES
            or type(scheme) is not int
            or n < 0
            or not 0 <= n_coarse <= n
            or not 0 <= n_rough <= n
            or any(len(s) > SKETCH_SIZE for s in (sketch, coarse, rough))
            or any(not 0 <= v <= _MASK for v in sketch + coarse + rough)
        ):
            raise ValueError("fingerprint is malformed")
        total = int(d["total"], 16) & _MASK
        return cls(n, total, sketch, coarse, n_coarse, scheme, rough, n_rough, rough_kept)
