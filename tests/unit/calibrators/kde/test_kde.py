"""Kernel-density-ratio calibrators: the PhANNs results, engines, edges, persistence, CLI."""

import json
import warnings

import numpy as np
import pandas as pd
import pytest

import topcal
from topcal.calibrators import available_methods
from topcal.calibrators import (
    paper_calibrator as calibrator,
)  # the paper's estimators (shrinkage=0)
from topcal.calibrators.kde import (
    KDE,
    BandwidthWarning,
    count_sign_changes,
    kde_confidence,
)
from topcal.calibrators.kde import _engine as eng
from topcal.calibrators.kde import _rules as rules
from topcal.cli import main
from topcal.data import TopLabelData
from topcal.errors import DataError, DegenerateClassWarning, ParameterError
from topcal.persist import dumps, loads

RULES = ["kde-mon", "kde-mon2", "kde-mon4", "kde-opt"]


@pytest.fixture(scope="module")
def phanns_fits(phanns):
    return {m: calibrator(m).fit(phanns) for m in ["kde"] + RULES}


def _two_class_data(seed=0, n=3000, shift=0.0):
    """Per-sample data, 2 classes, scores in (0, 1), class-dependent miscalibration."""
    rng = np.random.default_rng(seed)
    pred = rng.integers(0, 2, n)
    score = np.clip(rng.beta(5, 2, n) + shift, 1e-6, 1.0)
    p_right = np.where(pred == 0, score**2, 0.3 + 0.6 * score)
    labels = np.where(rng.uniform(size=n) < p_right, pred, 1 - pred)
    return TopLabelData.from_scores(pred, score, labels, classes=["a", "b"])


def _class_curve_on_support(model, k, n=4001):
    lo, hi = model.support_[k]
    s = np.linspace(lo, hi, n)
    return s, model.curve(k, s).confidence


# ------------------------------------------------------------------ PhANNs


def test_registry_has_every_rule():
    for m in ["kde"] + RULES:
        assert m in available_methods()
        assert calibrator(m).name == m


@pytest.mark.slow
def test_phanns_kde_mon_curves_are_monotone(phanns_fits):
    model = phanns_fits["kde-mon"]
    for k in range(len(model.classes_)):
        s, c = _class_curve_on_support(model, k)
        assert count_sign_changes(c) == 0, model.classes_[k]
        assert model.class_state_[k]["sign_changes"] == 0


def test_phanns_kde_mon2_and_mon4_respect_their_limits(phanns_fits):
    for name, limit in (("kde-mon2", 2), ("kde-mon4", 4)):
        model = phanns_fits[name]
        for k in range(len(model.classes_)):
            _, c = _class_curve_on_support(model, k)
            assert count_sign_changes(c) <= limit, (name, model.classes_[k])


def test_phanns_bandwidth_order(phanns_fits):
    b = {m: phanns_fits[m].bandwidth_ for m in RULES}
    assert np.all(np.isfinite(b["kde-mon"]))
    assert np.all(b["kde-mon4"] <= b["kde-mon2"])
    assert np.all(b["kde-mon2"] <= b["kde-mon"])
    # b_mon2 is not the trivial end of the candidate range
    for st, bw in zip(phanns_fits["kde-mon2"].class_state_, b["kde-mon2"]):
        lo, hi = st["b_range"]
        assert lo < bw < hi


def test_phanns_curves_stay_near_the_histogram_where_bins_are_full(phanns, phanns_fits):
    """In each of the 10 equal-width bins with >= 200 samples, the mean KDE
    confidence over the bin's samples is within 3.5 binomial standard errors
    (at least 0.02) of the bin's TP fraction (the 10-bin histogram's value).

    One documented exception (docs/kde.md): kde-mon on HTJ, whose monotone
    curve needs b_mon = 1.69 because of the 17-sample bin at scores 1-2, and
    so misses the steep rise in the top bin (0.87 against 0.96).
    """
    edges = np.linspace(0, 10, 11)
    checked = 0
    for name, model in phanns_fits.items():
        pred = model.predict(phanns)
        for k in range(phanns.n_classes):
            if (name, phanns.classes[k]) == ("kde-mon", "HTJ"):
                continue
            v = phanns.class_view(k)
            conf = pred[v.index]
            w = v.tp + v.fp
            b = np.clip(np.searchsorted(edges, v.score) - 1, 0, 9)
            for j in range(10):
                m = b == j
                n = w[m].sum()
                if n < 200:
                    continue
                mean_kde = np.sum(w[m] * conf[m]) / n
                frac = v.tp[m].sum() / n
                se = np.sqrt(max(frac * (1 - frac), 0.01) / n)
                assert abs(mean_kde - frac) < max(3.5 * se, 0.02), (
                    name,
                    phanns.classes[k],
                    j,
                    mean_kde,
                    frac,
                )
                checked += 1
        assert np.all((pred >= 0) & (pred <= 1))
    assert checked > 100


def test_phanns_kde_beats_uncalibrated_nll(phanns, phanns_fits):
    from topcal.metrics import nll

    base = nll(phanns, calibrator("uncalibrated").fit(phanns).predict(phanns)).overall
    for model in phanns_fits.values():
        assert nll(phanns, model.predict(phanns)).overall < base


# ----------------------------------------------------------------- formula


def test_kde_confidence_matches_direct_formula():
    rng = np.random.default_rng(1)
    s = rng.uniform(0, 1, 40)
    t = rng.integers(0, 3, 40).astype(float)
    f = rng.integers(0, 3, 40).astype(float)
    x = np.linspace(-0.2, 1.2, 57)
    b = 0.07
    phi = np.exp(-0.5 * ((x[:, None] - s[None, :]) / b) ** 2)
    direct = (phi @ t) / (phi @ (t + f))
    np.testing.assert_allclose(kde_confidence(x, s, t, f, b), direct, rtol=1e-12)


def test_kde_confidence_defined_where_both_sums_underflow():
    s = np.array([0.0, 1.0])
    x = np.array([50.0, -50.0, 0.5])
    c = kde_confidence(x, s, [1.0, 0.0], [0.0, 1.0], 0.01)
    # far right the nearest centre (FP at 1) dominates, far left the TP at 0
    assert np.all(np.isfinite(c))
    assert c[0] == pytest.approx(0.0, abs=1e-12)
    assert c[1] == pytest.approx(1.0, abs=1e-12)
    assert c[2] == pytest.approx(0.5, abs=1e-12)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(bandwidth=0.0), "bandwidth"),
        (dict(bandwidth=float("nan")), "bandwidth"),
        (dict(tp_weight=[1.0, -1.0]), "tp_weight"),
        (dict(boundary=(1.0, 0.0)), "boundary"),
        (dict(scores=[0.1, float("inf")]), "scores"),
    ],
)
def test_kde_confidence_rejects_bad_input(kwargs, match):
    args = dict(
        eval_scores=[0.5],
        scores=[0.2, 0.8],
        tp_weight=[1.0, 0.0],
        fp_weight=[0.0, 1.0],
        bandwidth=0.1,
    )
    args.update(kwargs)
    with pytest.raises((DataError, ParameterError), match=match):
        kde_confidence(**args)


def test_bad_parameters_are_named():
    data = _two_class_data()
    with pytest.raises(ParameterError, match="'engine'.*'auto', 'exact', 'binned'.*'fast'"):
        calibrator("kde-mon2", engine="fast").fit(data)
    with pytest.raises(ParameterError, match="'bandwidth'.*> 0.*-1"):
        calibrator("kde", bandwidth=-1).fit(data)
    with pytest.raises(ParameterError, match="'boundary'"):
        calibrator("kde", boundary="mirror").fit(data)
    with pytest.raises(ParameterError, match="no parameter"):
        calibrator("kde-mon2", bandwidth=0.1)


# ----------------------------------------------------------------- engines


@pytest.mark.slow
@pytest.mark.parametrize("b", [0.004, 0.01, 0.03, 0.1])
@pytest.mark.parametrize("boundary", [None, "reflect"])
def test_exact_and_binned_engines_agree(b, boundary):
    """b spans >= 16 fine-grid cells here (support < 1, 4096 cells)."""
    data = _two_class_data(seed=2)
    ex = KDE(shrinkage=0, bandwidth=b, engine="exact", boundary=boundary).fit(data)
    bi = KDE(shrinkage=0, bandwidth=b, engine="binned", boundary=boundary).fit(data)
    assert ex.class_state_[0]["engine"] == "exact" and bi.class_state_[0]["engine"] == "binned"
    for k in range(2):
        _, ce = _class_curve_on_support(ex, k)
        _, cb = _class_curve_on_support(bi, k)
        assert np.max(np.abs(ce - cb)) < 1e-3
        x = np.linspace(*ex.support_[k], 50)
        te, fe = ex.densities(k, x)
        tb, fb = bi.densities(k, x)
        np.testing.assert_allclose(tb, te, rtol=2e-3, atol=1e-6 * te.max())
        np.testing.assert_allclose(fb, fe, rtol=2e-3, atol=1e-6 * fe.max())


@pytest.mark.slow
def test_engines_agree_on_selected_bandwidths():
    data = _two_class_data(seed=4, n=1000)
    for m in ["kde-mon2", "kde-opt"]:
        ex = calibrator(m, engine="exact").fit(data)
        bi = calibrator(m, engine="binned").fit(data)
        np.testing.assert_allclose(bi.bandwidth_, ex.bandwidth_, rtol=0.03)


def test_binned_loo_matches_exact_loo():
    data = _two_class_data(seed=5)
    v = data.class_view(0)
    lo, hi = v.score.min(), v.score.max()
    u, inv = np.unique(v.score, return_inverse=True)
    ex = eng.ExactEngine(u, np.bincount(inv, v.tp), np.bincount(inv, v.fp), lo, hi)
    T, F = eng.linear_bin(
        np.zeros(v.score.size, dtype=np.int64),
        v.score,
        v.tp,
        v.fp,
        np.array([lo]),
        np.array([hi]),
        1,
    )
    bi = eng.BinnedEngine(T[0], F[0], lo, hi)
    bs = np.array([0.01, 0.03, 0.1])
    np.testing.assert_allclose(bi.loo_nll(bs), ex.loo_nll(bs), rtol=1e-3)


@pytest.mark.parametrize("bounds", [None, (0.0, 1.0)])
def test_binned_kernel_reach_gives_the_fully_sampled_kernel(bounds, monkeypatch):
    # the kernel is evaluated only at offsets below KERNEL_REACH b; the sums are the same
    # arrays, bit for bit, as with the kernel sampled at every offset
    rng = np.random.default_rng(3)
    for level in range(4):
        cells = eng.FINE_CELLS >> level
        m, nfft = cells + 1, (2 if bounds is None else 4) * cells
        lo, hi = 0.2, 0.2 + rng.uniform(0.01, 0.7)
        step = (hi - lo) / eng.FINE_CELLS * (1 << level)
        b = 16 * step * 2.0 ** rng.uniform(-0.3, 1.0 if level < 3 else 8.0, 6)
        w = rng.random((2, m))
        ft_t, ft_p = np.fft.rfft(w[0], nfft)[None], np.fft.rfft(w[0] + w[1], nfft)[None]
        assert eng.kernel_reach(b[:, None], step, m) < m or level >= 2
        got = eng.binned_sums(ft_t, ft_p, b, step, m, nfft, lo, bounds)
        with monkeypatch.context() as mp:
            mp.setattr(eng, "kernel_reach", lambda b, step, m: m)
            want = eng.binned_sums(ft_t, ft_p, b, step, m, nfft, lo, bounds)
        for g, w_ in zip(got, want):
            np.testing.assert_array_equal(g, w_)


def test_one_class_data_fits_as_that_class_among_others():
    # one class (the pooled reference's case) takes its support from plain min / max, not the
    # per-class reductions: the same support, bandwidth and table as the class fitted with another
    data = _two_class_data(seed=8, n=2400)
    both, alone = calibrator("kde-mon2"), calibrator("kde-mon2")
    both.compact = alone.compact = False  # the full tables, to compare
    both.fit(data)
    v = data.class_view(0)
    one = TopLabelData(
        ("a",), np.zeros(v.score.size, dtype=np.int64), v.score, data.score_range, tp=v.tp, fp=v.fp
    )
    alone.fit(one)
    assert alone.support_[0] == both.support_[0] == (v.score.min(), v.score.max())
    assert alone.bandwidth_[0] == both.bandwidth_[0]
    np.testing.assert_array_equal(alone.class_state_[0]["table"], both.class_state_[0]["table"])


def test_auto_engine_choice_and_override():
    tiny = _two_class_data(n=200)  # ~100 rows a class: exact for every rule
    small = _two_class_data(
        n=400
    )  # ~200: exact for kde and kde-opt, binned for kde-mon* (lockstep scan)
    big = _two_class_data(n=1200)
    assert {s["engine"] for s in calibrator("kde-mon2").fit(tiny).class_state_} == {"exact"}
    assert {s["engine"] for s in calibrator("kde-mon2").fit(small).class_state_} == {"binned"}
    assert {s["engine"] for s in calibrator("kde-opt").fit(small).class_state_} == {"exact"}
    assert {s["engine"] for s in calibrator("kde", bandwidth=0.05).fit(small).class_state_} == {
        "exact"
    }
    assert {s["engine"] for s in calibrator("kde-mon2").fit(big).class_state_} == {"binned"}
    assert {s["engine"] for s in calibrator("kde-mon2", engine="exact").fit(big).class_state_} == {
        "exact"
    }


@pytest.mark.slow
def test_prediction_table_is_close_to_the_exact_formula():
    data = _two_class_data(seed=6, n=1000)
    for m in ["kde-mon4", "kde-opt"]:
        model = calibrator(m, engine="exact").fit(data)  # as saved: compact tables
        full = calibrator(m, engine="exact")
        full.compact = False  # the same fit's kernel centres
        full.fit(data)
        for k in range(2):
            st = full.class_state_[k]
            lo, hi = model.support_[k]
            x = np.linspace(lo, hi, 3001)
            exact = kde_confidence(x, st["points"], st["tp"], st["fp"], st["bandwidth"])
            assert np.max(np.abs(model.curve(k, x).confidence - exact)) < 1e-3


@pytest.mark.slow
@pytest.mark.parametrize(
    "method, engine", [("kde-mon2", "auto"), ("kde-mon2", "exact"), ("kde-opt", "binned")]
)
def test_batched_fit_equals_fitting_each_class_alone(method, engine):
    data = _two_class_data(seed=7, n=2000)
    model = calibrator(method, engine=engine)
    model.compact = False  # the full tables, to compare
    model.fit(data)
    for k in range(2):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DegenerateClassWarning)  # the other class is missing
            alone = calibrator(method, engine=engine)
            alone.compact = False
            alone.fit(data.subset(data.pred == k))
        assert alone.class_state_[1 - k] is None
        assert alone.bandwidth_[k] == model.bandwidth_[k]
        assert alone.support_[k] == model.support_[k]
        np.testing.assert_array_equal(
            alone.class_state_[k]["table"], model.class_state_[k]["table"]
        )
        s = np.linspace(0, 1, 301)
        np.testing.assert_array_equal(alone.curve(k, s).confidence, model.curve(k, s).confidence)


# ------------------------------------------------------------------- edges


def test_curve_is_held_outside_the_support():
    data = _two_class_data(seed=8, n=500, shift=-0.3)
    model = calibrator("kde-mon2").fit(data)
    for k in range(2):
        lo, hi = model.support_[k]
        assert 0.0 < lo < hi <= 1.0
        c = model.curve(k)
        assert c.support == (lo, hi)
        edge = model.curve(k, [lo, hi]).confidence
        assert np.all(c.confidence[c.score <= lo] == edge[0])
        assert np.all(c.confidence[c.score >= hi] == edge[1])


def test_binned_support_uses_bin_edges(phanns_fits, phanns):
    model = phanns_fits["kde-mon2"]
    v = phanns.class_view(0)
    w = v.tp + v.fp
    edges = phanns.bin_edges[v.index[w > 0]]
    assert model.support_[0] == (edges[:, 0].min(), edges[:, 1].max())


@pytest.mark.slow
def test_reflection_keeps_the_mass_inside_the_score_range():
    """Scores piled against the upper limit 1: without reflection about half
    the kernel mass of the top samples falls outside [0, 1]; with it none."""
    rng = np.random.default_rng(9)
    n = 400
    score = np.concatenate(
        [np.clip(1 - rng.exponential(0.03, n - 100), 0.5, 1.0), rng.uniform(0.3, 0.7, 100)]
    )
    correct = rng.uniform(size=n) < 0.2 + 0.7 * (score - 0.3) / 0.7
    data = TopLabelData.from_scores(
        np.zeros(n, dtype=int), score, np.where(correct, 0, 1), classes=["a", "b"]
    )
    b = 0.05
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DegenerateClassWarning)  # class b is never predicted
        plain = KDE(shrinkage=0, bandwidth=b).fit(data)
        refl = KDE(shrinkage=0, bandwidth=b, boundary="reflect").fit(data)
    x = np.linspace(0, 1, 20001)
    dx = x[1] - x[0]
    t_plain, f_plain = plain.densities(0, x)
    t_refl, f_refl = refl.densities(0, x)
    mass_plain = (t_plain + f_plain).sum() * dx
    mass_refl = (t_refl + f_refl).sum() * dx
    assert mass_refl == pytest.approx(n, rel=2e-3)
    assert mass_plain < 0.8 * n
    # at the limit the reflected density is about twice the plain one ...
    assert t_refl[-1] / t_plain[-1] == pytest.approx(2.0, rel=0.05)
    # ... and the confidence curves differ within a few b of the limit, not 8 b away
    near = np.linspace(0.85, 1.0, 31)
    assert np.max(np.abs(plain.curve(0, near).confidence - refl.curve(0, near).confidence)) > 5e-3
    mid = np.linspace(0.45, 0.6, 31)
    assert np.max(np.abs(plain.curve(0, mid).confidence - refl.curve(0, mid).confidence)) < 1e-4
    # the reflected fit persists and reloads with the option
    again = loads(dumps(refl))
    np.testing.assert_array_equal(again.predict(data), refl.predict(data))


def test_degenerate_classes():
    # class a: only TP; b: only FP; c: one positive; d: constant scores; e: never predicted
    pred = np.array([0, 0, 0, 1, 1, 2, 3, 3, 3, 3])
    score = np.array([0.5, 0.7, 0.9, 0.4, 0.6, 0.55, 0.8, 0.8, 0.8, 0.8])
    labels = np.array([0, 0, 0, 0, 2, 2, 3, 3, 1, 1])
    data = TopLabelData.from_scores(pred, score, labels, classes=list("abcde"))
    for m in RULES:
        with pytest.warns(DegenerateClassWarning) as rec:
            model = calibrator(m).fit(data)
        msgs = " ".join(str(r.message) for r in rec)
        for name in "abcd":
            assert f"'{name}'" in msgs
        assert np.all(np.isnan(model.bandwidth_))
        assert model.curve("a", [0.0, 0.6, 1.0]).confidence.tolist() == [1.0, 1.0, 1.0]
        assert model.curve("b", [0.0, 0.6, 1.0]).confidence.tolist() == [0.0, 0.0, 0.0]
        assert model.curve("d", [0.1, 0.8]).confidence.tolist() == [0.5, 0.5]
        # never-predicted class: the uncalibrated score
        assert model.curve("e", [0.25]).confidence.tolist() == [0.25]
        with pytest.raises(ParameterError, match="no fitted bandwidth"):
            model.densities("a", [0.5])
        assert np.array_equal(loads(dumps(model)).predict(data), model.predict(data))
    fixed = calibrator("kde", bandwidth=0.1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DegenerateClassWarning)
        fixed.fit(data)
    np.testing.assert_array_equal(fixed.bandwidth_[:4], [0.1] * 4)
    assert np.isnan(fixed.bandwidth_[4])


def test_no_bandwidth_is_nan_in_memory_and_null_in_json():
    pred = np.array([0, 0, 0, 1, 1, 1, 1])
    score = np.array([0.5, 0.7, 0.9, 0.2, 0.4, 0.6, 0.8])
    labels = np.array([0, 0, 0, 1, 0, 1, 0])  # class a: only TP
    data = TopLabelData.from_scores(pred, score, labels, classes=["a", "b", "c"])
    for m, params in [("kde-mon2", {}), ("kde", {"bandwidth": "scott"})]:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DegenerateClassWarning)
            model = calibrator(m, **params).fit(data)
        assert np.isnan(model.class_state_[0]["bandwidth"]) and np.isnan(model.bandwidth_[0])
        assert model.class_state_[1]["bandwidth"] == model.bandwidth_[1] > 0
        assert np.isnan(model.bandwidth_[2]) and model.class_state_[2] is None
        saved = json.loads(dumps(model))["model"]["state"]["class_state"]
        assert saved[0]["bandwidth"] is None and saved[1]["bandwidth"] == model.bandwidth_[1]
        described = model.describe()["classes"]
        assert described["a"]["bandwidth"] is None and described["c"]["bandwidth"] is None
        again = loads(dumps(model))
        assert np.isnan(again.class_state_[0]["bandwidth"])
        np.testing.assert_array_equal(again.bandwidth_, model.bandwidth_)


def test_no_admissible_bandwidth_warns_and_uses_the_largest():
    """TP on both sides of a central FP cluster, symmetric: Conf is U-shaped
    (one sign change) for every b, so no b is monotone."""
    s = np.concatenate(
        [np.linspace(0.0, 0.2, 20), np.linspace(0.8, 1.0, 20), np.linspace(0.4, 0.6, 20)]
    )
    labels = np.array([0] * 40 + [1] * 20)
    data = TopLabelData.from_scores(np.zeros(60, dtype=int), s, labels, classes=["a", "b"])
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*never predicted")  # class b
        with pytest.warns(BandwidthWarning, match="class 'a'.*no bandwidth"):
            model = calibrator("kde-mon").fit(data)
    st = model.class_state_[0]
    assert not st["admissible"]
    assert model.bandwidth_[0] == st["b_range"][1]
    assert "note" in model.describe()["classes"]["a"]
    with warnings.catch_warnings():
        warnings.simplefilter("error", BandwidthWarning)
        warnings.simplefilter("ignore", DegenerateClassWarning)
        assert calibrator("kde-mon2").fit(data).class_state_[0]["admissible"]


def test_discrete_scores_set_the_smallest_candidate():
    """Vote fractions of 20 trees: scores on a 0.05 grid; the scan starts at half of that."""
    rng = np.random.default_rng(10)
    n = 3000
    votes = rng.binomial(20, 0.7, n) / 20
    labels = np.where(rng.uniform(size=n) < votes, 0, 1)
    data = TopLabelData.from_scores(np.zeros(n, dtype=int), votes, labels, classes=["a", "b"])
    for engine in ["exact", "binned"]:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DegenerateClassWarning)  # class b is never predicted
            model = calibrator("kde-mon2", engine=engine).fit(data)
        assert model.class_state_[0]["b_range"][0] == pytest.approx(0.025, rel=1e-6)


# ------------------------------------------------------------- persistence


@pytest.mark.parametrize("method", ["kde"] + RULES)
def test_json_round_trip_is_exact(method, phanns, phanns_fits, tmp_path):
    model = phanns_fits[method]
    path = tmp_path / "m.json"
    model.save(path)
    again = topcal.persist.load(path)
    np.testing.assert_array_equal(again.predict(phanns), model.predict(phanns))
    np.testing.assert_array_equal(again.bandwidth_, model.bandwidth_)
    s = np.linspace(-1, 11, 777)
    for k in range(phanns.n_classes):
        np.testing.assert_array_equal(again.curve(k, s).confidence, model.curve(k, s).confidence)
        np.testing.assert_array_equal(again.densities(k, s)[0], model.densities(k, s)[0])
    assert again.describe() == json.loads(json.dumps(model.describe()))


def test_tampered_table_is_rejected(phanns, phanns_fits):
    from topcal.errors import ModelFileError

    full = calibrator("kde-mon2")
    full.compact = False  # a full table, as files before 2026-11-27 hold
    full.fit(phanns)
    for model, key, value in ((full, "table", 1.5), (phanns_fits["kde-mon2"], "table_stride", 3)):
        doc = json.loads(dumps(model))
        st = doc["model"]["state"]["class_state"][0]
        if key == "table":
            st["table"][3] = value
        else:  # kernel centres on a grid that is no power-of-2 share of the fine one
            st[key] = value
        with pytest.raises(ModelFileError):
            loads(json.dumps(doc))


def test_predict_equals_per_class_curve(phanns, phanns_fits):
    model = phanns_fits["kde-mon2"]
    out = model.predict(phanns)
    for k in range(phanns.n_classes):
        rows = phanns.pred == k
        np.testing.assert_array_equal(out[rows], model.curve(k, phanns.score[rows]).confidence)


# --------------------------------------------------------------------- CLI


def test_cli_fit_describe_apply_methods(tmp_path, capsys):
    rng = np.random.default_rng(11)
    n = 800
    probs = rng.dirichlet([1, 1, 1], n)
    labels = np.where(
        rng.uniform(size=n) < probs.max(1) ** 2, probs.argmax(1), rng.integers(0, 3, n)
    )
    names = np.array(["cat", "dog", "emu"])
    frame = pd.DataFrame({f"p_{c}": probs[:, i] for i, c in enumerate(names)})
    frame["label"] = names[labels]
    csv = tmp_path / "d.csv"
    frame.to_csv(csv, index=False)
    model = tmp_path / "m.json"
    assert main(["fit", str(csv), "--method", "kde-mon2", "-o", str(model)]) == 0
    assert main(["describe", str(model), "--full"]) == 0
    out = capsys.readouterr().out
    assert out.count("bandwidth:") == 3 and "slope_sign_changes" in out
    fitted = topcal.persist.load(model)
    for line, b in zip([ln for ln in out.splitlines() if "bandwidth:" in ln], fitted.bandwidth_):
        assert float(line.split(":")[1]) == pytest.approx(b, rel=1e-5)
    out_csv = tmp_path / "o.csv"
    assert main(["apply", str(model), str(csv), "-o", str(out_csv)]) == 0
    got = pd.read_csv(out_csv)["confidence"].to_numpy()
    data = TopLabelData.from_probs(probs, names[labels], classes=list(names))
    np.testing.assert_allclose(got, fitted.predict(data), rtol=1e-12)
    assert (
        main(["fit", str(csv), "--method", "kde-mon2", "--param", "engine=fast", "-o", str(model)])
        == 2
    )
    err = capsys.readouterr().err
    assert "'engine'" in err and "'fast'" in err
    assert main(["methods"]) == 0
    out = capsys.readouterr().out
    for m in ["kde"] + RULES:
        assert f"\n{m} " in "\n" + out


@pytest.mark.slow
def test_demo_table_includes_every_kde_rule(phanns):
    from topcal.evaluate import compare_methods, evaluate

    table = compare_methods(phanns, ["uncalibrated", "kde"] + RULES)
    raw = table["methods"]["uncalibrated"]["nll"]["overall"]
    for m in ["kde"] + RULES:
        row = table["methods"][m]
        # the table's numbers are the metrics of the method fitted and scored on the data
        # (in-sample) ...
        assert row == evaluate(phanns, topcal.calibrator(m).fit(phanns).predict(phanns)), m
        # ... every rule calibrates the PhANNs scores: lower NLL and ECE1 than the raw score
        assert row["nll"]["overall"] < min(raw, 0.2), m
        assert row["ece1"]["overall"] < table["methods"]["uncalibrated"]["ece1"]["overall"], m


def test_rules_of_thumb_are_silverman_and_scott_on_the_class_scores():
    rng = np.random.default_rng(4)
    n = 300  # exact engine (<= 512 rows): the kernel centres are the distinct scores, weight 1 each
    score = np.sort(rng.beta(4, 2, n))
    labels = np.where(rng.uniform(size=n) < score, 0, 1)  # right (class a) with probability = score
    data = TopLabelData.from_scores(np.zeros(n, dtype=int), score, labels, classes=["a", "b"])
    sd = np.std(score)
    q1, q3 = np.interp([0.25, 0.75], np.arange(1, n + 1) / n, score)
    want = {"scott": 1.06 * sd * n**-0.2, "silverman": 0.9 * min(sd, (q3 - q1) / 1.34) * n**-0.2}
    assert want["scott"] != pytest.approx(want["silverman"], rel=1e-3)
    for rule, b in want.items():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DegenerateClassWarning)  # class b is never predicted
            model = calibrator("kde", bandwidth=rule).fit(data)
        assert model.class_state_[0]["engine"] == "exact"
        assert model.bandwidth_[0] == pytest.approx(b, rel=1e-12)


@pytest.mark.parametrize("shrinkage", [0, 3.3, "class"])
def test_predict_equals_the_curve_bit_for_bit_on_every_row(shrinkage):
    # the batched prediction (one gather over all rows) and the per-class curve agree exactly,
    # also for a class never predicted in the fitting data (uncalibrated / the reference curve)
    rng = np.random.default_rng(9)
    n = 3000
    pred = rng.integers(0, 3, n)
    score = rng.uniform(0.2, 1.0, n)
    labels = np.where(rng.uniform(size=n) < score, pred, (pred + 1) % 4)
    data = TopLabelData.from_scores(pred, score, labels, classes=list("abcd"))
    test = TopLabelData.from_scores(
        rng.integers(0, 4, 500), rng.uniform(0, 1, 500), classes=list("abcd")
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DegenerateClassWarning)
        model = topcal.calibrator("kde-mon2", shrinkage=shrinkage).fit(data)
    got = model.predict(test)
    for k in range(4):
        rows = test.pred == k
        assert rows.any()
        np.testing.assert_array_equal(got[rows], model.curve(k, test.score[rows]).confidence)


def test_exact_sums_equal_the_naive_arithmetic_bit_for_bit():
    """exact_sums takes its shift from the two centres around each point and skips the exponent
    floor where no exponent reaches it; the naive reading (row minimum of the full squared
    distance matrix, floor everywhere) gives the same sums bit for bit."""
    rng = np.random.default_rng(5)
    for trial in range(120):
        u = int(rng.integers(1, 200))
        scale = float(rng.choice([1.0, 10.0, 1e-3]))
        p = rng.random(u) * scale  # unsorted centres; ties and neighbours one ulp apart below
        if trial % 4 == 0:
            p = np.concatenate([p, p[:3], np.nextafter(p[:3], 2 * scale)])
        t = rng.integers(0, 3, p.size).astype(float)
        f = rng.integers(0, 3, p.size).astype(float)
        if (t + f).sum() == 0:
            t[0] = 1.0
        x = np.linspace(p.min(), p.max(), int(rng.choice([33, 257, 1025])))
        x = np.concatenate([x, p[:5]])  # points on centres (shift 0)
        b = float(rng.choice([1e-4, 0.01, 0.05, 0.3, 3.0])) * scale
        bounds = (0.0, scale) if trial % 3 == 0 else None
        num, den, shift = eng.exact_sums(x, p, t, f, b, bounds)
        if bounds is None:
            pp, tt, ff = p, t, f
        else:
            pp = np.concatenate([p, -p, 2 * scale - p])
            tt, ff = np.tile(t, 3), np.tile(f, 3)
        w = tt + ff
        pp, tt, w = pp[w > 0], tt[w > 0], w[w > 0]
        d2 = (x[:, None] - pp[None, :]) ** 2
        m = d2.min(axis=1)
        e = np.exp(np.maximum(-(d2 - m[:, None]) * (0.5 / (b * b)), eng.EXP_FLOOR))
        np.testing.assert_array_equal(shift, m)
        np.testing.assert_array_equal(num, e @ tt)
        np.testing.assert_array_equal(den, e @ w)


# ---------------------------------------------------------------- the doubling-first upward scan
class _CountEngine:
    """An engine whose curve at bandwidth b has exactly ``count(b)`` slope sign changes (a cosine
    with count(b) interior extrema on the scan grid), for the search alone."""

    def __init__(self, count):
        self.count = count
        self.evaluated = []

    def scan(self, bandwidths):
        x = np.linspace(0.0, 1.0, 513)
        self.evaluated.extend(float(b) for b in bandwidths)
        conf = np.array([0.5 + 0.3 * np.cos(np.pi * (self.count(b) + 1) * x) for b in bandwidths])
        return conf, np.ones(conf.shape, dtype=bool)


class _CountBatch:
    """The same counts in the interface of a lockstep batch, one count function per class."""

    def __init__(self, counts):
        self.counts = counts

    def sign_changes(self, rows, bandwidths, at_most=None):
        return np.array([self.counts[r](b) for r, b in zip(rows, bandwidths)])


def _full_upward_scan(count, cand, n):
    """The search before the doubling-first order: every candidate from the smallest up."""
    good = [count(b) <= n for b in cand]
    if not any(good):
        return float(cand[-1]), False
    j = good.index(True)
    if j == 0:
        return float(cand[0]), True
    lo, hi = np.log(cand[j - 1]), np.log(cand[j])
    best = float(cand[j])
    for _ in range(rules.REFINE_ROUNDS):
        pts = lo + (hi - lo) * np.arange(1, rules.REFINE_POINTS + 1) / (rules.REFINE_POINTS + 1)
        g = [count(b) <= n for b in np.exp(pts)]
        if any(g):
            i = g.index(True)
            hi, best = pts[i], float(np.exp(pts[i]))
            lo = pts[i - 1] if i > 0 else lo
        else:
            lo = pts[-1]
    return best, True


def _step_counts(rng, cand, monotone):
    """A random count function of b: non-increasing steps (monotone) or any steps."""
    edges = np.sort(rng.uniform(np.log(cand[0]) - 0.1, np.log(cand[-1]) + 0.1, 6))
    levels = rng.integers(0, 9, edges.size + 1)
    if monotone:
        levels = np.sort(levels)[::-1]
    return lambda b: int(levels[np.searchsorted(edges, np.log(b))])


@pytest.mark.parametrize("monotone", [True, False])
def test_doubling_first_scan_per_class_and_in_lockstep_agree(monotone):
    rng = np.random.default_rng(7 + monotone)
    cands = [rules.candidates(0.0, 1.0, rho) for rho in rng.uniform(0.0, 0.05, 40)]
    counts = [_step_counts(rng, c, monotone) for c in cands]
    lock = rules.scan_mon_lockstep(_CountBatch(counts), cands, 2)
    for count, cand, (b, admissible, changes) in zip(counts, cands, lock):
        assert rules.scan_mon(_CountEngine(count), cand, 2) == (b, admissible)
        assert changes == count(b)
        if monotone:  # a count that does not rise again with b: the full upward scan's answer
            assert (b, admissible) == _full_upward_scan(count, cand, 2)
    # b_mon4 <= b_mon2 <= b_mon whatever the counts (admissible ones; an inadmissible rule gives
    # b_hi)
    by_rule = [rules.scan_mon_lockstep(_CountBatch(counts), cands, n) for n in (0, 2, 4)]
    for mon, mon2, mon4 in zip(*by_rule):
        assert mon4[0] <= mon2[0] <= mon[0]


def test_doubling_first_scan_evaluates_fewer_candidates_and_what_it_can_miss():
    cand = rules.candidates(0.0, 1.0, 0.0)  # 41 candidates, doublings at 0, 4, ..., 40
    engine = _CountEngine(lambda b: 0 if b >= cand[21] else 5)
    assert rules.scan_mon(engine, cand, 2) == _full_upward_scan(engine.count, cand, 2)
    # doublings 0..24 (7), candidates 21..23 (one batch of 3), then the refinement
    assert len(engine.evaluated) < 22 + rules.REFINE_ROUNDS * rules.REFINE_POINTS - 10
    # an admissible candidate below an inadmissible doubling is missed (the documented case)
    dip = lambda b: 0 if (np.isclose(b, cand[5]) or b >= cand[21]) else 5
    b, ok = rules.scan_mon(_CountEngine(dip), cand, 2)
    assert ok and b > cand[20] and _full_upward_scan(dip, cand, 2)[0] == cand[5]


@pytest.mark.slow
def test_mon_rules_scan_classes_above_128_rows_with_the_binned_engine_within_its_tolerance():
    """engine="auto" gives kde-mon* classes of more than 128 rows (kde and kde-opt: 512) the binned
    engine; against the exact engine their curves agree within 1e-3 and bandwidths within 1 %
    (measured on the benchmark data: 4.5e-4 and 0.1 %)."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
    from _sim import simulate_probs

    p, y = simulate_probs(1000, 3, 6, sharpen=[2.0, 0.5, 1.0, 1.5, 0.8, 1.2])  # 77-272 rows a class
    data = TopLabelData.from_probs(p, y)
    rows = np.bincount(data.pred, minlength=6)
    assert (rows <= 128).any() and ((rows > 128) & (rows <= 512)).any()
    x = np.linspace(0.0, 1.0, 2001)
    for method in ("kde-mon", "kde-mon2", "kde-mon4"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            auto = calibrator(method).fit(data)
            exact = calibrator(method, engine="exact").fit(data)
        for k in range(6):
            a, e = auto.class_state_[k], exact.class_state_[k]
            if a is None or a["engine"] is None:
                continue
            assert a["engine"] == ("exact" if rows[k] <= 128 else "binned")
            assert abs(a["bandwidth"] / e["bandwidth"] - 1) <= 0.01
            np.testing.assert_allclose(
                auto.curve(k, x).confidence, exact.curve(k, x).confidence, rtol=0, atol=1e-3
            )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        opt = calibrator("kde-opt").fit(data)
    assert all(
        s["engine"] == ("exact" if r <= 512 else "binned")
        for s, r in zip(opt.class_state_, rows)
        if s is not None and s["engine"] is not None
    )


@pytest.mark.parametrize("bounds", [None, (0.0, 1.0)])
def test_binned_engines_built_together_equal_those_built_one_by_one(bounds):
    rng = np.random.default_rng(4)
    n = 5
    pred = np.repeat(np.arange(n), 300)
    score = rng.beta(4, 2, pred.size)
    tp = (rng.uniform(size=pred.size) < score).astype(float)
    lo = np.array([score[pred == k].min() for k in range(n)])
    hi = np.array([score[pred == k].max() for k in range(n)])
    T, F = eng.linear_bin(pred, score, tp, 1.0 - tp, lo, hi, n)
    together = eng.BinnedEngine.many(T, F, lo, hi, bounds)
    alone = [eng.BinnedEngine(T[k], F[k], float(lo[k]), float(hi[k]), bounds) for k in range(n)]
    for a, b in zip(together, alone):
        for la, lb in zip(a._levels, b._levels):
            for key in ("T", "F", "ft_t", "ft_p", "x"):
                np.testing.assert_array_equal(la[key], lb[key])
            assert la["step"] == lb["step"]
        np.testing.assert_array_equal(a.confidence_on_fine(0.05, 2), b.confidence_on_fine(0.05, 2))
    # a lockstep batch of them reads the stacked transforms (no copy) and counts the same
    batch, ref = eng.BinnedScanBatch(together), eng.BinnedScanBatch(alone)
    assert np.shares_memory(batch.levels[0]["ft_t"], together[0]._levels[0]["ft_t"])
    rows, bw = np.arange(n), np.linspace(0.01, 0.2, n)
    np.testing.assert_array_equal(batch.sign_changes(rows, bw), ref.sign_changes(rows, bw))
