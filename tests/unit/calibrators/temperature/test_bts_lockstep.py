"""bts and btswa solve their classes in lockstep (issue 26): the same fit as one Newton solve per
class.

Each fit is made both ways, the lockstep solve (the default) and the per-class loop it replaced
(``TemperatureBase._lockstep = False``), and must agree to the documented tolerance
(docs/temperature.md): temperatures and awards within 1e-8 relative (absolute near 0), the summed
loss within 1e-10 relative, and the same warnings (a class whose Newton solve fails goes through the
per-class fallback either way).
"""

import warnings

import numpy as np
import pytest
from _sim import many_small_classes

import topcal
from topcal import TopLabelData
from topcal.calibrators.temperature.calibrator import TemperatureBase
from topcal.calibrators.select.crossfit import cross_fit
from topcal.calibrators.temperature._core import TopLabelObjective
from topcal.calibrators.temperature._lockstep import BinaryClassesObjective

RTOL = 1e-8
LOSS_RTOL = 1e-10


def fit(method, data, lockstep, monkeypatch, **params):
    monkeypatch.setattr(TemperatureBase, "_lockstep", lockstep)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        cal = topcal.calibrator(method, **params).fit(data)
    return cal, sorted(str(w.message) for w in caught)


def assert_same_fit(method, data, monkeypatch, **params):
    old, old_warned = fit(method, data, False, monkeypatch, **params)
    new, new_warned = fit(method, data, True, monkeypatch, **params)
    np.testing.assert_allclose(new.temperature_, old.temperature_, rtol=RTOL, atol=0)
    np.testing.assert_allclose(new.awards_, old.awards_, rtol=RTOL, atol=RTOL)
    np.testing.assert_array_equal(new.fitted_classes_, old.fitted_classes_)
    assert new.loss_ == pytest.approx(old.loss_, rel=LOSS_RTOL)
    assert new.nll_ == pytest.approx(old.nll_, rel=LOSS_RTOL)
    np.testing.assert_allclose(new.class_nll_, old.class_nll_, rtol=1e-8, atol=1e-10)
    assert new_warned == old_warned
    np.testing.assert_allclose(new.predict(data), old.predict(data), rtol=1e-8, atol=1e-12)
    return old, new


def separated_classes(seed, k=40):
    """Per-sample data of small classes (1-12 rows) whose right answers all score above (or below)
    the
    wrong ones: quasi-separated classes whose loss falls toward a bound, and tiny ones with 1-3
    rows."""
    rng = np.random.default_rng(seed)
    pred, score, right = [], [], []
    for c in range(k):
        n = int(rng.integers(1, 13))
        s = np.sort(rng.uniform(0.05, 0.999, n))
        cut = int(rng.integers(0, n + 1))
        r = np.arange(n) >= cut if c % 3 else np.arange(n) < cut  # right above the cut, or below it
        if c % 5 == 0 and n > 2:  # ties at the cut: quasi-separated
            s[max(cut - 1, 0) : cut + 1] = s[max(cut - 1, 0)]
        pred.append(np.full(n, c))
        score.append(s)
        right.append(r)
    pred, score, right = np.concatenate(pred), np.concatenate(score), np.concatenate(right)
    labels = np.where(right, pred, (pred + 1) % k)
    return TopLabelData.from_scores(pred, score, labels, classes=[f"c{i}" for i in range(k)])


def weighted_binned(seed, k=60):
    """Binned rows with fractional weights: per class 1-10 bins of a score scale (0, 10)."""
    rng = np.random.default_rng(seed)
    cls, lo, hi, tp, fp = [], [], [], [], []
    for c in range(k):
        edges = np.sort(rng.choice(np.arange(11), size=int(rng.integers(2, 12)), replace=False))
        for a, b in zip(edges[:-1], edges[1:]):
            cls.append(f"c{c}")
            lo.append(float(a))
            hi.append(float(b))
            p = (a + b) / 20.0
            w = rng.gamma(1.0, 5.0)
            tp.append(w * p * rng.uniform(0.5, 1.5) if rng.random() > 0.1 else 0.0)
            fp.append(w * (1 - p) * rng.uniform(0.5, 1.5) if rng.random() > 0.1 else 0.0)
    tp, fp = np.array(tp), np.array(fp)
    tp[0] += 1.0  # some sample in the data
    return TopLabelData.from_binned(cls, lo, hi, tp, fp, score_range=(0.0, 10.0))


@pytest.mark.slow
@pytest.mark.parametrize("method", ["bts", "btswa"])
@pytest.mark.parametrize("seed", [0, 1])
def test_lockstep_matches_per_class_on_many_small_classes(method, seed, monkeypatch):
    data = many_small_classes(seed, 300, 3000)
    old, _ = assert_same_fit(method, data, monkeypatch)
    counts = np.bincount(data.pred, minlength=data.n_classes)
    assert (counts <= 3).sum() > 20 and counts.max() > 50  # tiny classes and large ones
    assert_same_fit(
        method, many_small_classes(seed, 200, 2000, levels=10), monkeypatch
    )  # tied scores


@pytest.mark.slow
@pytest.mark.parametrize("method", ["bts", "btswa"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_lockstep_matches_per_class_on_separated_classes(method, seed, monkeypatch):
    old, _ = assert_same_fit(method, separated_classes(seed), monkeypatch)
    assert np.any(np.isclose(old.temperature_, 1e-3))  # some class ran to the bound


@pytest.mark.parametrize("method", ["bts", "btswa"])
def test_lockstep_matches_per_class_on_weighted_binned_rows(method, monkeypatch):
    assert_same_fit(method, weighted_binned(0), monkeypatch)
    assert_same_fit(method, topcal.datasets.load_phanns(), monkeypatch)


@pytest.mark.slow
@pytest.mark.parametrize("method", ["bts", "btswa"])
def test_lockstep_matches_per_class_with_brier_and_max_iter(method, monkeypatch):
    data = many_small_classes(3, 100, 1500)
    assert_same_fit(method, data, monkeypatch, loss="brier")  # Brier starts from the NLL optimum
    assert_same_fit(
        method, data, monkeypatch, max_iter=3
    )  # classes stopped by max_iter: the fallback


@pytest.mark.slow
@pytest.mark.parametrize("method", ["bts", "btswa"])
@pytest.mark.parametrize("warm", [False, True])
def test_lockstep_matches_per_class_in_cross_fitting(method, warm, monkeypatch):
    # auto's folds (scratch fits on shared fold data); with warm, every fold starts from the
    # all-data optimum
    data = many_small_classes(4, 150, 2500)
    monkeypatch.setattr(topcal.calibrators.registry.get_class(method), "_warm_starts", warm)
    conf = {}
    for lockstep in (False, True):
        monkeypatch.setattr(TemperatureBase, "_lockstep", lockstep)
        conf[lockstep] = cross_fit(data, [method], 5).confidence[method]
    np.testing.assert_allclose(conf[True], conf[False], rtol=1e-8, atol=1e-12)


def test_batched_objective_sums_are_the_per_class_objective():
    rng = np.random.default_rng(5)
    counts = np.array([1, 2, 3, 50, 7])
    heads = np.concatenate([[0], np.cumsum(counts)])
    n = heads[-1]
    d, tp = rng.normal(0, 3, n), rng.random(n)
    fp = 1 - tp
    x = np.column_stack([rng.normal(0, 1, counts.size), rng.normal(0, 2, counts.size)])
    for loss in ("nll", "brier"):
        for n_aw in (0, 1):
            batch = BinaryClassesObjective(d, tp, fp, heads[:-1], counts, loss=loss, n_awards=n_aw)
            f, g, h = batch.evaluate(x[:, : 1 + n_aw], np.arange(counts.size))
            sel = np.array([1, 3])
            fs, gs, hs = batch.evaluate(x[sel, : 1 + n_aw], sel)
            for j in range(counts.size):
                r = slice(heads[j], heads[j + 1])
                one = TopLabelObjective(d[r], None, tp[r], fp[r], loss=loss, n_awards=n_aw)
                g1, h1 = one.grad_hess(x[j, : 1 + n_aw])
                assert f[j] == pytest.approx(one.value(x[j, : 1 + n_aw]), rel=1e-13)
                np.testing.assert_allclose(g[j], g1, rtol=1e-12, atol=1e-13)
                np.testing.assert_allclose(h[j], h1, rtol=1e-12, atol=1e-13)
            np.testing.assert_allclose(fs, f[sel], rtol=1e-15)
            np.testing.assert_allclose(gs, g[sel], rtol=1e-15)
