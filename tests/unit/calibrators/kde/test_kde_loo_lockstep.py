"""kde-opt's lockstep search (issue 15): the batched leave-one-out losses and the chosen bandwidths.

``ExactLooBatch`` evaluates many exact-engine classes' leave-one-out NLL in one call; it must
give what ``ExactEngine.loo_nll`` gives per class bit for bit, because b_opt's refinement
re-evaluates its best point (up to round-off) and keeps whichever loss is smaller: a
last-bit difference would change the bandwidth. The calibrator's lockstep path
(``batch_classes``) must then choose the per-class bandwidths exactly.
"""

import warnings

import numpy as np
import pytest

from topcal.calibrators.kde import _engine as eng
from topcal.calibrators import paper_calibrator
from topcal.datasets import load_phanns
from topcal.errors import DegenerateClassWarning
from topcal.persist import canonical_json

from _sim import many_small_classes


def _engine(score, tp, fp, bounds):
    """An exact engine as the calibrator builds it (equal scores merged)."""
    u, inv = np.unique(score, return_inverse=True)
    t = np.bincount(inv, tp, minlength=u.size)
    f = np.bincount(inv, fp, minlength=u.size)
    return eng.ExactEngine(u, t, f, float(u[0]), float(u[-1]), bounds)


def _engines(bounds, seed=7):
    """Classes of very different sizes and kinds, and nearly degenerate ones."""
    rng = np.random.default_rng(seed)
    out = []
    for i, n in enumerate([2, 3, 5, 9, 17, 40, 90, 160, 300, 480]):
        s = np.clip(rng.beta(4, 2, n), 1e-6, 1.0)
        if i % 3 == 1:
            s = np.round(s * 20) / 20  # discrete scores: merged centres with weights > 1
        right = rng.random(n) < s ** (0.5 + 2.0 * rng.random())
        right[0], right[-1] = True, False  # both groups present
        out.append(_engine(s, right.astype(float), (~right).astype(float), bounds))
    # two distinct scores, one TP and one FP (each sample's other group is empty when left out)
    out.append(_engine(np.array([0.3, 0.8]), np.array([1.0, 0.0]), np.array([0.0, 1.0]), bounds))
    # weights below 1 (the whole weight is left out) and a lone TP among FPs
    s = rng.random(12)
    out.append(
        _engine(s, np.r_[0.4, np.zeros(11)], np.r_[0.0, rng.random(11) * 0.9 + 0.05], bounds)
    )
    # binned counts: the PhANNs classes (bin midpoints, TP and FP weight on one row)
    d = load_phanns()
    for k in range(d.n_classes):
        sel = d.pred == k
        out.append(_engine(d.score[sel], d.tp[sel], d.fp[sel], bounds))
    return out


def _bandwidths(e, m, seed):
    r = e.hi - e.lo
    rng = np.random.default_rng(seed)
    return r / 256 * 2.0 ** (rng.random(m) * 10.0)  # from the smallest candidate to 4 R


@pytest.mark.slow
@pytest.mark.parametrize("bounds", [None, (0.0, 1.0), (0.0, 10.0)])
@pytest.mark.parametrize("small_chunks", [False, True])
def test_batched_loo_equals_the_per_class_loo(bounds, small_chunks, monkeypatch):
    """Runs of 41 and 7 bandwidths per class (the candidates, a refinement round), in one call.

    Reflection at (0, 1) is the simulated scores' range, at (0, 10) PhANNs'.
    """
    if small_chunks:  # many buffer flushes, pieces of one pair, a class's run split over buffers
        monkeypatch.setattr(eng, "CHUNK_ELEMENTS", 300_000)
        monkeypatch.setattr(eng, "CACHE_ELEMENTS", 5_000)
    engines = _engines(bounds)
    batch = eng.ExactLooBatch(engines)
    for m in (41, 7):
        bws = [_bandwidths(e, m, i) for i, e in enumerate(engines)]
        rows = np.repeat(np.arange(len(engines)), m)
        got = batch.loo_nll(rows, np.concatenate(bws)).reshape(len(engines), m)
        for i, (e, b) in enumerate(zip(engines, bws)):
            want = e.loo_nll(b)
            np.testing.assert_allclose(got[i], want, rtol=1e-12, atol=0)
            np.testing.assert_array_equal(got[i], want)  # bit for bit (see the module docstring)
    # any subset and order of classes
    sub = [len(engines) - 1, 0, 3]
    bws = [_bandwidths(engines[i], 5, 100 + i) for i in sub]
    got = batch.loo_nll(np.repeat(sub, 5), np.concatenate(bws))
    np.testing.assert_array_equal(
        got, np.concatenate([engines[i].loo_nll(b) for i, b in zip(sub, bws)])
    )


def _many_small_classes(seed, k=60, n=5000, discrete=False):
    """Per-sample data with k classes of a few to a few hundred positives (tests/_sim.py)."""
    return many_small_classes(seed, k, n, concentration=0.6, levels=50 if discrete else None)


def _fit_both(data, **params):
    fits = {}
    for batched in (True, False):
        cal = paper_calibrator("kde-opt", **params)
        cal.batch_classes = batched
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DegenerateClassWarning)
            fits[batched] = cal.fit(data)
    return fits[True], fits[False]


@pytest.mark.slow
@pytest.mark.parametrize(
    "boundary, discrete", [(None, False), ("reflect", False), (None, True), ("reflect", True)]
)
def test_lockstep_b_opt_is_the_per_class_b_opt(boundary, discrete):
    """The same bandwidth for every class, and so the same model, byte for byte."""
    data = _many_small_classes(seed=4, discrete=discrete)
    a, b = _fit_both(data, boundary=boundary)
    exact = [st for st in a.class_state_ if st is not None and st["engine"] == "exact"]
    assert len(exact) > 40  # the lockstep path was exercised
    np.testing.assert_array_equal(a.bandwidth_, b.bandwidth_)
    assert canonical_json(a.to_dict()) == canonical_json(b.to_dict())


@pytest.mark.slow
def test_lockstep_b_opt_on_binned_counts():
    """PhANNs: binned counts, every class on the exact engine; the binned engine's classes
    (engine="binned") are searched one by one and are unaffected."""
    data = load_phanns()
    for params in ({}, {"boundary": "reflect"}, {"engine": "binned"}):
        a, b = _fit_both(data, **params)
        np.testing.assert_array_equal(a.bandwidth_, b.bandwidth_)
        assert canonical_json(a.to_dict()) == canonical_json(b.to_dict())
