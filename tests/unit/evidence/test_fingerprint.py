"""The fingerprint's hash schemes (issue 36: the full score vector folded by one integer
matrix-vector product, scheme 2, instead of a splitmix mix per entry, scheme 1): files saved with
scheme 1 keep it and are compared, updated and saved by it; new fingerprints use scheme 2."""

import numpy as np
import pytest

import topcal
from topcal import TopLabelData
from topcal.errors import TopcalWarning
from topcal.evidence.core import Evidence
from topcal.evidence.fingerprint import SCHEME, Fingerprint, row_hashes
from topcal.evidence.stats import ScoreStats

NAMES = ["a", "b", "c", "d", "e"]


def _data(n, seed):
    rng = np.random.default_rng(seed)
    return TopLabelData.from_probs(rng.dirichlet(np.ones(5), size=n), rng.integers(0, 5, n), NAMES)


def test_scheme_1_is_the_hash_of_files_before_schemes():
    """Values of the code before scheme 2 (main at 9065f90), on the same seeded rows."""
    f = Fingerprint.of(_data(50, 7), scheme=1)
    assert f.total == 0xEDEBE27B70595054
    assert f.sketch[:3] == (0x91D69828F136B22, 0xFB63276E5F1A6AC, 0x1227B60F5462A44A)
    assert "scheme" not in f.to_dict()  # written as before, read back as scheme 1
    assert Fingerprint.from_dict(f.to_dict()) == f


def test_scheme_2_is_new_order_free_and_tells_vectors_apart():
    d = _data(400, 1)
    f = Fingerprint.of(d)
    assert SCHEME == f.scheme == 2 and f.to_dict()["scheme"] == 2
    assert Fingerprint.from_dict(f.to_dict()) == f
    assert f.total != Fingerprint.of(d, scheme=1).total
    assert f.coarse == Fingerprint.of(d, scheme=1).coarse  # the coarse keys have one scheme
    # any row order, any column order: the same fingerprint
    perm = np.random.default_rng(0).permutation(d.n_rows)
    cols = [4, 2, 0, 3, 1]
    y = np.array(NAMES)[d.labels[perm]]  # the true classes by name
    moved = TopLabelData.from_probs(d.full[perm][:, cols], y, [NAMES[c] for c in cols])
    assert Fingerprint.of(moved) == f
    # two non-top entries of one row swapped: that row's hash changes, no other
    full = d.full.copy()
    i, j = np.argsort(full[3])[:2]
    full[3, [i, j]] = full[3, [j, i]]
    changed = row_hashes(TopLabelData.from_probs(full, d.labels, NAMES))
    assert np.flatnonzero(changed != row_hashes(d)).tolist() == [3]


def test_scheme_2_hashes_rows_alone_in_any_block_and_the_float64_bits():
    """A row's hash is its own: the same in the whole data (hashed in blocks of rows) as in any
    part; float32 scores hash as their float64 values."""
    d = _data(20_000, 2)  # 100,000 vector entries: several blocks
    whole = row_hashes(d)
    for index in (np.arange(7), np.arange(19_990, 20_000), np.arange(0, 20_000, 997)):
        np.testing.assert_array_equal(row_hashes(d.subset(index)), whole[index])
    single = d.full.astype(np.float32)
    a = TopLabelData.from_probs(single, d.labels, NAMES, renormalize=True)
    b = TopLabelData.from_probs(single.astype(np.float64), d.labels, NAMES, renormalize=True)
    np.testing.assert_array_equal(row_hashes(a), row_hashes(b))


def test_old_scheme_files_compare_update_and_save_by_their_scheme():
    d, new = _data(2000, 3), _data(1500, 4)
    model = topcal.calibrator("hist").fit(d)
    doc = model.to_dict()
    old = Fingerprint.of(d, scheme=1)
    doc["evidence"]["fingerprint"] = old.to_dict()  # as a file saved before scheme 2 holds it
    loaded = type(model).from_dict(doc)
    fp = loaded.evidence_.fingerprint
    assert fp.scheme == 1 and fp == old
    ov = fp.overlap(d)  # the fitting rows, hashed the old way: found
    assert ov.same and ov.of_fit == 1.0
    assert fp.overlap(new).of_fit == 0.0
    loaded.update(new)  # the new rows hashed by scheme 1: the fingerprints merge
    both = TopLabelData.concat([d, new])
    assert loaded.evidence_.fingerprint == Fingerprint.of(both, scheme=1)
    assert "scheme" not in loaded.to_dict()["evidence"]["fingerprint"]
    assert loaded.evidence_.fingerprint.overlap(both).same


def test_two_schemes_do_not_merge():
    a, b = _data(200, 5), _data(200, 6)
    with pytest.raises(ValueError, match="schemes 1 and 2"):
        Fingerprint.of(a, scheme=1).merge(Fingerprint.of(b))
    ea = Evidence(ScoreStats.from_data(a), None, Fingerprint.of(a, scheme=1))
    eb = Evidence(ScoreStats.from_data(b), None, Fingerprint.of(b))
    with pytest.warns(TopcalWarning, match="schemes 1 and 2 and do not merge.*evidence_of"):
        merged = ea.merge(eb)
    assert merged.fingerprint is None  # unknown, as where a part has none: said
    assert ea.merge(Evidence(ScoreStats.from_data(b), None, Fingerprint.of(b, 1))).fingerprint
    with pytest.raises(ValueError, match="malformed"):
        Fingerprint.from_dict(dict(Fingerprint.of(a).to_dict(), scheme=3))
    with pytest.raises(ValueError, match="unknown fingerprint scheme"):
        row_hashes(a, 3)


def test_scheme_2_tells_rows_apart_that_differ_in_round_counts_only():
    """Weights 1..300 as TP and FP weights of rows of one class and score: floats that differ in
    their high bits only; a plain key-weighted sum of their bits would collide (their low 44 bits
    are zero)."""
    tp, fp = (v.ravel() * 1.0 for v in np.meshgrid(np.arange(1, 301), np.arange(1, 301)))
    n = tp.size
    d = TopLabelData(
        ("a", "b"), np.zeros(n, dtype=np.int64), np.full(n, 0.7), (0.0, 1.0), tp=tp, fp=fp
    )
    assert np.unique(row_hashes(d)).size == n


def test_scheme_2_tells_vectors_apart_that_differ_in_round_entries_only():
    """Rows of 100 classes alike but for where two entries of 0.25 sit: their bits differ in the
    high bits only; a key-weighted sum of the plain bits collides for about 1 in 4,096 pairs of
    classes (1,856 distinct sums of 4,851 rows)."""
    k = 100
    pairs = [(i, j) for i in range(1, k) for j in range(i + 1, k)]
    p = np.zeros((len(pairs), k))
    p[:, 0] = 0.5
    for r, (i, j) in enumerate(pairs):
        p[r, [i, j]] = 0.25
    d = TopLabelData.from_probs(p, np.zeros(len(pairs), dtype=int))
    assert np.unique(row_hashes(d)).size == len(pairs)
