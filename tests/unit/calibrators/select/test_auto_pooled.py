"""Pooled and hierarchical candidates, and auto's noise-aware choice (issue 22)."""

import json
import sys
import warnings
from pathlib import Path

import numpy as np

from topcal.describe.summary import describe_text
import pytest
from scipy.special import expit, logit

import topcal
from topcal import persist
from topcal.calibrators.select.rules import choose, paired_se, tier
from topcal.data import TopLabelData
from topcal.metrics import nll

from _sim import zipf_top_scores

BENCH = Path(__file__).resolve().parents[4] / "benchmarks"
POOLED = ["pooled-platt", "pooled-beta", "pooled-hist", "pooled-kde-mon2"]


def _quiet(f):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return f()


def _top(seed, k, per_class, *, a=None, b=None, sizes=None):
    """Top-score data: class c's P(right | s) = sigmoid(a_c logit(s) + b_c) (a = 1, b = 0:
    calibrated)."""
    rng = np.random.default_rng(seed)
    sizes = np.full(k, per_class) if sizes is None else np.asarray(sizes)
    pred = np.repeat(np.arange(k), sizes)
    s = np.clip(rng.beta(5, 1.5, pred.size), 0.02, 0.999)
    a = np.ones(k) if a is None else np.broadcast_to(a, (k,))
    b = np.zeros(k) if b is None else np.broadcast_to(b, (k,))
    right = rng.random(pred.size) < expit(a[pred] * logit(s) + b[pred])
    labels = np.where(right, pred, (pred + 1 + rng.integers(0, k - 1, pred.size)) % k)
    return TopLabelData.from_scores(
        pred, s, labels=labels, classes=[f"c{i}" for i in range(k)], score_range=(0.0, 1.0)
    )


# ------------------------------------------------------------------ choice
@pytest.mark.slow
def test_many_small_classes_sharing_one_miscalibration_get_a_pooled_or_hierarchical_fit():
    d = _top(1, 120, 25, a=0.5, b=-0.3)  # every class equally over-confident; 25 rows a class
    m = _quiet(lambda: topcal.calibrator("auto").fit(d))
    assert m.method_ in POOLED + ["hier-platt"], m.cv_table()
    # and it is a real improvement on fresh data from the same classifier
    new = _top(2, 120, 25, a=0.5, b=-0.3)
    raw = topcal.calibrator("uncalibrated").fit(d).predict(new)
    assert nll(new, m.predict(new)).overall < nll(new, raw).overall - 0.02


def test_few_large_classes_that_differ_get_per_class_curves():
    d = _top(3, 3, 3000, a=np.array([0.4, 1.0, 2.5]), b=np.array([0.5, -1.0, 0.0]))
    m = _quiet(lambda: topcal.calibrator("auto", folds=3).fit(d))
    assert tier(m.method_) >= 2, m.cv_table()  # per-class curves (shrunk or not), not one curve
    s = np.linspace(0.3, 0.95, 5)
    curves = np.array([m.curve(k, s).confidence for k in range(3)])
    assert np.abs(curves[0] - curves[2]).max() > 0.1  # the classes really got their own curves


@pytest.mark.heavy
@pytest.mark.slow
def test_calibrated_scores_with_tiny_classes_come_back_unchanged():
    d = _top(4, 300, 6)  # calibrated by construction, 6 rows a class
    m = _quiet(lambda: topcal.calibrator("auto").fit(d))
    new = _top(5, 300, 6)
    raw = topcal.calibrator("uncalibrated").fit(d)
    for x in (d, new):
        assert abs(nll(x, m.predict(x)).overall - nll(x, raw.predict(x)).overall) <= 1e-3, (
            m.cv_table()
        )


def test_the_rule_takes_the_simplest_candidate_within_one_standard_error():
    cv = {
        "uncalibrated": {"nll": 0.500, "diff_se": 0.004},
        "pooled-platt": {"nll": 0.4975, "diff_se": 0.003},
        "hier-platt": {"nll": 0.4955, "diff_se": 0.002},
        "btswa": {"nll": 0.495, "diff_se": 0.0},
        "bts": {"nll": None, "diff_se": None},
    }
    # the default, 1 SE: uncalibrated is 0.005 > 1 SE (0.004) worse, pooled-platt's 0.0025 <= 0.003
    assert topcal.calibrator("auto").tolerance == 1.0
    assert choose(cv) == choose(cv, tolerance=1.0) == ("pooled-platt", "btswa")
    # 0.75 SE (the default of 2026-11-25 to 27): pooled-platt's 0.0025 > 0.00225, hier-platt's
    # 0.0005 <= 0.0015
    assert choose(cv, tolerance=0.75) == ("hier-platt", "btswa")
    assert choose(cv, tolerance=0.5)[0] == "hier-platt"  # pooled-platt's 0.0025 > 0.0015
    assert choose(cv, tolerance=0.0)[0] == "btswa"
    cv["uncalibrated"]["diff_se"] = 0.006
    assert choose(cv) == ("uncalibrated", "btswa")
    assert choose(cv, tolerance=0.75) == ("hier-platt", "btswa")  # 0.005 > 0.75 x 0.006


def test_paired_standard_error_is_that_of_the_per_sample_differences():
    rng = np.random.default_rng(0)
    n = 500
    tp = (rng.random(n) < 0.7).astype(float)
    fp = 1.0 - tp
    la, lb, ra, rb = rng.random((4, n))
    d = np.where(tp > 0, la - ra, lb - rb)
    mean, se = paired_se(tp, fp, la, lb, ra, rb)
    assert mean == pytest.approx(d.mean()) and se == pytest.approx(d.std(ddof=1) / np.sqrt(n))
    # binned: a row of weight 3 counts as three samples
    m2, se2 = paired_se(
        np.array([3.0, 0.0]), np.array([0.0, 2.0]), np.array([1.0, 0.0]), np.array([0.0, 2.0])
    )
    x = np.array([1, 1, 1, 2, 2.0])
    assert m2 == pytest.approx(x.mean()) and se2 == pytest.approx(x.std(ddof=1) / np.sqrt(5))


@pytest.mark.slow
def test_cv_table_with_standard_errors_is_saved_shown_and_read_back(tmp_path):
    d = _top(6, 40, 40, a=0.6)
    m = _quiet(lambda: topcal.calibrator("auto", folds=3).fit(d))
    for v in m.cv_.values():
        assert v["se"] > 0 and v["diff_se"] >= 0
    assert m.cv_[m.best_]["diff_se"] == 0.0
    m.save(tmp_path / "a.json")
    back = topcal.load(tmp_path / "a.json")
    assert back.cv_ == m.cv_ and back.best_ == m.best_ and back.method_ == m.method_
    np.testing.assert_array_equal(back.predict(d), m.predict(d))
    desc = back.describe()["cross_validation"]
    assert desc["se"] == {n: v["se"] for n, v in m.cv_.items()} and desc["best"] == m.best_
    text = describe_text(back)
    assert "±" in text and "standard error" in text and m.method_ in text
    # a format-3 file from before the rule (no SE, no best, no rule) still loads and says how
    # it chose
    doc = json.loads((Path(__file__).parents[3] / "data" / "model_v3" / "auto.json").read_text())
    st = doc["model"]["state"]
    for key in ("best", "rule"):
        del st[key]
    for v in st["cv"].values():
        del v["se"], v["diff_se"]
    old = type(m).from_dict(persist.migrate(doc)["model"])  # what topcal.load does with it
    assert old.best_ == old.method_ and "smallest cross-validated NLL" in describe_text(old)


# ---------------------------------------------------------- pooled methods
@pytest.mark.parametrize("name", POOLED + ["hier-platt", "hier-beta"])
def test_pooled_and_hierarchical_models_save_load_predict_and_draw(name, tmp_path):
    d = _top(7, 12, 60, a=0.7, b=-0.2)
    m = _quiet(lambda: topcal.calibrator(name).fit(d))
    c = m.predict(d)
    assert c.shape == (d.n_rows,) and np.all((c > 0) & (c < 1))
    m.save(tmp_path / "m.json")
    back = topcal.load(tmp_path / "m.json")
    np.testing.assert_array_equal(back.predict(d), c)
    s = np.linspace(0.05, 1.0, 30)
    curves = np.array([back.curve(k, s).confidence for k in range(d.n_classes)])
    if name in POOLED:
        assert np.ptp(curves, axis=0).max() == 0.0  # one curve for every class
        assert back.describe()["pooled"]["samples"] == d.n_samples
    assert back.curve(0).support == d.class_support(0)
    assert "c0" in describe_text(back)
    # update refits on old + new data
    more = _top(8, 12, 30, a=0.7, b=-0.2)
    up = _quiet(lambda: back.update(more))
    assert float(up.n_tp_.sum() + up.n_fp_.sum()) == d.n_samples + more.n_samples


def test_pooled_platt_is_platt_scaling_of_the_logit():
    from sklearn.linear_model import LogisticRegression

    d = _top(9, 20, 50, a=0.6, b=0.4)
    m = _quiet(lambda: topcal.calibrator("pooled-platt").fit(d))
    z = logit(np.clip(d.score, 1e-12, 1 - 1e-12))
    lr = LogisticRegression(C=1e10, max_iter=1000, tol=1e-10).fit(
        z[:, None], (d.tp > 0).astype(int)
    )
    assert m.slope_ == pytest.approx(lr.coef_[0, 0], rel=1e-4)
    assert m.intercept_ == pytest.approx(lr.intercept_[0], abs=1e-4)


def test_pooled_beta_is_beta_calibration_of_the_pooled_top_score():
    from sklearn.linear_model import LogisticRegression

    d = _top(9, 20, 50, a=0.6, b=0.4)
    m = _quiet(lambda: topcal.calibrator("pooled-beta").fit(d))
    s = np.clip(d.score, 1e-12, 1 - 1e-12)
    f = np.stack([np.log(s), -np.log1p(-s)], axis=1)
    lr = LogisticRegression(C=1e10, max_iter=5000, tol=1e-12).fit(f, (d.tp > 0).astype(int))
    p = m.describe()["pooled"]
    np.testing.assert_allclose(
        [p["a"], p["b"], p["c"]], [*lr.coef_[0], lr.intercept_[0]], rtol=1e-4, atol=1e-4
    )
    # one curve: two rows of different classes with the same score get the same confidence
    conf = m.predict(d)
    i = np.flatnonzero(d.pred == 0)[0]
    probe = TopLabelData.from_scores(
        np.array([0, 1]),
        np.array([d.score[i]] * 2),
        labels=np.array([0, 1]),
        classes=d.classes,
        score_range=(0.0, 1.0),
    )
    out = m.predict(probe)
    assert out[0] == out[1] and 0 < conf.min() and conf.max() < 1


def test_hier_platt_runs_from_per_class_to_pooled_with_its_strength():
    d = _top(10, 6, 200, a=np.array([0.5, 1.5, 0.8, 1.0, 2.0, 0.6]))
    weak = _quiet(lambda: topcal.calibrator("hier-platt", shrinkage=1e-6).fit(d))
    strong = _quiet(lambda: topcal.calibrator("hier-platt", shrinkage=1e12).fit(d))
    per = _quiet(lambda: topcal.calibrator("btswa").fit(d))
    pooled = _quiet(lambda: topcal.calibrator("pooled-platt").fit(d))
    np.testing.assert_allclose(weak.predict(d), per.predict(d), atol=1e-4)
    np.testing.assert_allclose(strong.predict(d), pooled.predict(d), atol=1e-6)
    auto = _quiet(lambda: topcal.calibrator("hier-platt").fit(d))
    assert auto.strength_ < 64  # classes that differ this much keep their own slopes
    same = _quiet(lambda: topcal.calibrator("hier-platt").fit(_top(11, 60, 20, a=0.6)))
    assert same.strength_ >= 256  # classes that share one curve are pulled onto it


# --------------------------------------------------------- beta calibration
def _bench():
    sys.path.insert(0, str(BENCH))
    try:
        import bench_heldout
    finally:
        sys.path.remove(str(BENCH))
    return bench_heldout


def test_dirichlet_odir_peer_reaches_its_objectives_optimum():
    """The bench peer ``dirichlet-odir``: analytic derivatives match finite differences, Newton
    reaches the penalised optimum (L-BFGS-B from scipy agrees), and only the diagonal is free."""
    from scipy.optimize import approx_fprime, minimize

    vp = _bench().vector_peer_predict.__globals__
    parts, fit = vp["_odir_parts"], vp["odir_fit"]
    rng = np.random.default_rng(3)
    x = np.log(rng.dirichlet(np.ones(4) * 0.7, 400))
    y = rng.integers(0, 4, 400)
    t = rng.normal(size=20)
    f, g, h = parts(t, x, y, 0.3, 0.2, hessian=True)
    np.testing.assert_allclose(g, approx_fprime(t, lambda u: parts(u, x, y, 0.3, 0.2)[0], 1e-7),
                               atol=1e-5)  # fmt: skip
    fd = np.array(
        [approx_fprime(t, lambda u: parts(u, x, y, 0.3, 0.2)[1][i], 1e-7) for i in (0, 7)]
    )
    np.testing.assert_allclose(h[[0, 7]], fd, atol=1e-5)
    got = fit(x, y, 0.3, 0.2)
    ref = minimize(lambda u: parts(u, x, y, 0.3, 0.2), np.zeros(20), jac=True, method="L-BFGS-B",
                   options={"ftol": 1e-15, "gtol": 1e-10, "maxiter": 10_000}).x  # fmt: skip
    np.testing.assert_allclose(got, ref, atol=1e-4)
    strong = fit(x, y, 1e6, 1e6).reshape(4, 5)
    off = strong[:, :4] - np.diag(np.diag(strong[:, :4]))
    assert np.abs(off).max() < 1e-3 and np.abs(strong[:, 4]).max() < 1e-3
    assert np.abs(np.diag(strong[:, :4]) - 1.0).max() > 1e-3  # the diagonal is fitted, not pinned


def test_beta_calibration_matches_logistic_regression_on_its_features():
    from sklearn.linear_model import LogisticRegression

    bh = _bench()
    rng = np.random.default_rng(12)
    x = rng.beta(4, 2, 3000)
    y = (rng.random(x.size) < expit(1.7 * np.log(x) + 0.6 * -np.log1p(-x) + 0.3)).astype(float)
    w = np.ones(x.size)
    a, b, c = bh.beta_fit(x, y, w)
    f = np.stack([np.log(x), -np.log1p(-x)], axis=1)
    lr = LogisticRegression(C=1e10, max_iter=5000, tol=1e-12).fit(f, y)
    np.testing.assert_allclose([a, b, c], [*lr.coef_[0], lr.intercept_[0]], rtol=1e-3, atol=1e-3)
    # where the unconstrained fit wants a < 0, the constraint holds a at 0: LR on -ln(1 - s) alone
    y2 = (rng.random(x.size) < expit(-1.0 * np.log(x) + 1.2 * -np.log1p(-x) - 0.5)).astype(float)
    a2, b2, c2 = bh.beta_fit(x, y2, w)
    assert a2 == 0.0
    lr2 = LogisticRegression(C=1e10, max_iter=5000, tol=1e-12).fit(f[:, 1:], y2)
    np.testing.assert_allclose([b2, c2], [lr2.coef_[0, 0], lr2.intercept_[0]], rtol=1e-3, atol=1e-3)


def test_benchmark_top_score_version_and_subsample():
    bh = _bench()
    p = np.array([[0.7, 0.2, 0.1], [0.1, 0.3, 0.6], [0.5, 0.4, 0.1], [0.2, 0.5, 0.3]] * 50)
    d = TopLabelData.from_probs(p, np.array([0, 2, 1, 1] * 50))
    t = bh.top_only(d)
    assert not t.has_full and np.array_equal(t.score, d.score) and np.array_equal(t.tp, d.tp)
    s = bh.subsample(d, 50, seed=1)
    assert s.n_rows == 50
    from topcal.datasets import load_phanns

    b = load_phanns()
    sb = bh.subsample(b, 2000, seed=2)
    assert sb.n_samples == 2000 and sb.is_binned
    key = {(int(k), float(v)): (tp, fp) for k, v, tp, fp in zip(b.pred, b.score, b.tp, b.fp)}
    assert all(
        tp <= key[(int(k), float(v))][0] and fp <= key[(int(k), float(v))][1]
        for k, v, tp, fp in zip(sb.pred, sb.score, sb.tp, sb.fp)
    )


# ------------------------------------------------- compare and the report
@pytest.mark.heavy
@pytest.mark.slow
def test_compare_and_the_report_show_autos_cross_validation_table(tmp_path):
    from topcal.evaluate import compare_methods

    d = _top(13, 20, 30, a=0.6)
    res = _quiet(lambda: compare_methods(d, ["uncalibrated", "auto"], folds=2))
    fits = res["choices"]["auto"]
    assert [f["fold"] for f in fits] == [1, 2]
    for f in fits:
        chosen = [r for r in f["table"] if r["chosen"]]
        assert (
            len(chosen) == 1
            and chosen[0]["method"] == f["chosen"]
            and all(r["se"] > 0 for r in f["table"])
        )
    same = _quiet(lambda: compare_methods(d, ["auto"]))
    assert same["choices"]["auto"][0]["fold"] is None
    out = _quiet(lambda: topcal.make_report(d, output=tmp_path / "rep", methods=["auto"], folds=2))
    page = out.read_text()
    assert "SE of the difference to the best" in page and "standard error" in page


@pytest.mark.parametrize("blend", [None, 0.0])
def test_auto_says_once_that_a_class_is_never_predicted(blend):
    """auto's fit warns about a class never predicted; the model it chose (or its blend) does not
    repeat it."""
    rng = np.random.default_rng(2)
    n = 3000
    pred = rng.integers(0, 5, n)
    s = rng.uniform(0.3, 1.0, n)
    lab = np.where(
        rng.uniform(size=n) < s ** (1 + pred / 2), pred, (pred + 1) % 6
    )  # classes differ
    d = TopLabelData.from_scores(pred, s, lab, classes=list(range(6)))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        m = topcal.calibrator(
            "auto",
            candidates=["uncalibrated", "pooled-platt", "pooled-hist", "hier-platt", "hist"],
            blend=blend,
        ).fit(d)
    said = [str(w.message) for w in caught if "never predicted" in str(w.message)]
    assert len(said) == 1 and said[0].startswith("auto: class ['5']")
    assert (m.blend_ is None) == (
        blend is None
    )  # gate 0: hier-platt blended with hist on these data
    # describe's text says the blend once (its head line), not again as a raw entry
    lines = describe_text(m).splitlines()
    assert sum(ln.startswith("blend") for ln in lines) == (0 if blend is None else 1)


def test_auto_on_too_few_samples_says_once_that_classes_are_never_predicted():
    """The few-samples path (nothing to cross-validate: the raw score) does not repeat the warning
    either."""
    d = TopLabelData.from_scores(
        [0, 0, 1, 1, 0, 1],
        [0.6, 0.7, 0.8, 0.9, 0.55, 0.65],
        [0, 1, 1, 1, 0, 2],
        classes=[0, 1, 2, 3],
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        m = topcal.calibrator("auto").fit(d)
    said = [str(w.message) for w in caught if "never predicted" in str(w.message)]
    assert m.method_ == "uncalibrated" and len(said) == 1 and said[0].startswith("auto: ")
    assert any("too few for 5-fold" in str(w.message) for w in caught)


def test_auto_leaves_out_unshrunk_per_class_fits_on_a_sample_or_two_a_class():
    from topcal.calibrators.select.auto import Auto

    few = zipf_top_scores(4000, 3000, 4)  # 1,000+ classes, most predicted once or twice
    names = Auto()._names(few)
    assert "hist" in names and "bts" not in names and "btswa" not in names
    assert "bts" in Auto(candidates=["hist", "bts"])._names(few)  # named, they run
    rng = np.random.default_rng(5)  # 1,200 classes of 10 samples each: kept
    pred = np.repeat(np.arange(1200), 10)
    score = rng.beta(4, 1.5, pred.size)
    label = np.where(rng.random(pred.size) < score, pred, (pred + 1) % 1200)
    many = TopLabelData.from_scores(pred, score, label, classes=[f"c{i}" for i in range(1200)])
    assert {"bts", "btswa"} <= set(Auto()._names(many))
    assert {"bts", "btswa"} <= set(Auto()._names(zipf_top_scores(4000, 800, 6)))
