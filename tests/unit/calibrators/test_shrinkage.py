"""Shrinkage toward the pooled curve, the auto method, and held-out safety (issue: safe out of
sample)."""

import hashlib
import json
import warnings

import numpy as np
import pytest

import topcal
from topcal import persist
from topcal.calibrators import shrinkage as shr
from topcal.data import TopLabelData, kfold_split
from topcal.errors import DegenerateClassWarning, ParameterError
from topcal.metrics import nll

from _sim import simulate_probs

SHRINKABLE = [
    "hist",
    "cum",
    "cum-median",
    "cum-opt",
    "kde",
    "kde-mon",
    "kde-mon2",
    "kde-mon4",
    "kde-opt",
]


def _quiet(fn, *a, **k):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return fn(*a, **k)


def logistic_classes(sizes, dev, seed):
    """Top-score data: class k's accuracy at score s is sigmoid(4 (s - 0.6) + dev * z_k)."""
    rng = np.random.default_rng(seed)
    pred, score, ok = [], [], []
    for k, n in enumerate(sizes):
        s = rng.uniform(0.3, 1.0, n)
        p = 1 / (1 + np.exp(-(4 * (s - 0.6) + dev * rng.normal())))
        pred += [k] * n
        score += list(s)
        ok += list(rng.uniform(size=n) < p)
    pred, ok = np.array(pred), np.array(ok)
    labels = np.where(ok, pred, (pred + 1) % len(sizes))
    return TopLabelData.from_scores(
        pred, np.array(score), labels=labels, classes=[str(i) for i in range(len(sizes))]
    )


def heldout_nll(method, data, folds=2, seed=0, **params):
    parts = kfold_split(data, folds, seed=seed)
    conf = []
    for f in range(folds):
        train = TopLabelData.concat([parts[g] for g in range(folds) if g != f])
        conf.append(
            _quiet(lambda: topcal.calibrator(method, **params).fit(train).predict(parts[f]))
        )
    return nll(TopLabelData.concat(parts), np.concatenate(conf)).overall


# ------------------------------------------------------------- the formula
def test_loo_grid_matches_a_direct_leave_one_out():
    rng = np.random.default_rng(1)
    s = rng.uniform(size=40)
    y = rng.uniform(size=40) < s
    edges = np.linspace(0, 1, 5)
    b = np.clip(np.searchsorted(edges, s) - 1, 0, 3)
    t = np.bincount(b, y, 4)[b]
    n = np.bincount(b, minlength=4)[b].astype(float)
    r = 0.3 + 0.4 * s
    grid = np.array([1.0, 3.0, 50.0])
    got = shr.loo_nll_grid(t, n, y.astype(float), (~y).astype(float), r, grid)
    for j, m in enumerate(grid):
        loss = 0.0
        for i in range(40):
            keep = (b == b[i]) & (np.arange(40) != i)
            c = (y[keep].sum() + m * r[i]) / (keep.sum() + m)
            loss -= np.log(c if y[i] else 1 - c)
        assert got[j] == pytest.approx(loss, rel=1e-12)


@pytest.mark.parametrize("method", SHRINKABLE)
def test_shrinkage_zero_is_the_paper_and_small_m_tends_to_it(method):
    p, lab = simulate_probs(3000, 3, 4, sharpen=[1.6, 0.7, 1.0, 1.3])
    data = TopLabelData.from_probs(p, lab)
    paper = _quiet(lambda: topcal.paper_calibrator(method).fit(data))
    zero = _quiet(lambda: topcal.calibrator(method, shrinkage=0).fit(data))
    np.testing.assert_array_equal(
        zero.predict(data), paper.predict(data)
    )  # the very same estimator
    assert "shrinkage" not in zero.to_dict()["state"]
    tiny = _quiet(lambda: topcal.calibrator(method, shrinkage=1e-9).fit(data))
    np.testing.assert_allclose(tiny.predict(data), paper.predict(data), atol=1e-6)


def test_hist_with_fixed_m_is_the_pseudo_count_formula_by_hand():
    # class a: bins (0, .5] holds 1 TP + 1 FP, (.5, 1] holds 3 TP; class b: 1 TP, 1 FP at 0.9
    d = TopLabelData.from_scores(
        ["a"] * 5 + ["b"] * 2,
        [0.2, 0.3, 0.6, 0.7, 0.9, 0.9, 0.9],
        ["a", "b", "a", "a", "a", "b", "a"],
    )
    m = topcal.calibrator("hist", n_bins=2, shrinkage=2.0).fit(d)
    ref = m.reference_  # pooled: (0, .5] 1/2, (.5, 1] 4/5; shrunk toward (5 + 1/2) / (7 + 1)
    r0 = 5.5 / 8
    assert m.reference_rate_ == pytest.approx(r0)
    r_hi = (4 + m.reference_m_ * r0) / (5 + m.reference_m_)
    assert ref.class_state_[0]["tp"].tolist() == [1, 4]
    assert m.predict(d)[2] == pytest.approx((3 + 2 * r_hi) / (3 + 2))
    assert m.predict(d)[5] == pytest.approx((1 + 2 * r_hi) / (2 + 2))


# ---------------------------------------------------- no certainty, m's size
@pytest.mark.parametrize("method", SHRINKABLE)
def test_no_curve_reaches_zero_or_one_from_finite_counts(method):
    pred = ["a", "a", "b", "b", "c", "d", "d", "d"] * 3
    score = [0.6, 0.9, 0.4, 0.7, 0.5, 0.8, 0.8, 0.8] * 3
    label = ["a", "a", "a", "a", "c", "d", "a", "d"] * 3
    d = TopLabelData.from_scores(pred, score, label)
    m = _quiet(lambda: topcal.calibrator(method).fit(d))
    for k in "abcd":
        c = m.curve(k).confidence
        assert np.all((c > 0) & (c < 1)), (k, c.min(), c.max())
    assert np.all(m.shrinkage_ >= shr.M_MIN)


def test_pseudo_count_grows_when_classes_agree_and_as_classes_shrink():
    # every class on one curve: the pooled curve is the truth, m runs to the top of the grid
    same = logistic_classes([300] * 6, 0.0, 0)
    assert topcal.calibrator("hist").fit(same).shrinkage_[0] >= 1e5
    # classes that differ: big classes keep their own curve, small ones borrow (per-class rule)
    mixed = logistic_classes([30] * 10 + [3000] * 10, 0.5, 0)
    for method in ("hist", "kde-mon2"):
        m = _quiet(lambda: topcal.calibrator(method, shrinkage="class").fit(mixed)).shrinkage_
        assert np.median(m[:10]) > 10 * np.median(m[10:]), method
    # strongly different classes: little shrinkage
    far = logistic_classes([300] * 10, 3.0, 1)
    assert topcal.calibrator("hist").fit(far).shrinkage_[0] < 50


def test_weight_of_the_reference_is_larger_for_small_classes():
    d = logistic_classes([20, 2000], 0.5, 2)
    m = topcal.calibrator("kde-mon2").fit(d)
    s = np.array([0.5, 0.7, 0.9])
    w = [m.shrinkage_[k] / (m._local_counts(k, s)[1] + m.shrinkage_[k]) for k in range(2)]
    assert np.all(w[0] > w[1])


@pytest.mark.slow
def test_shrunk_methods_beat_doing_nothing_held_out_on_small_classes():
    # 60 classes of ~40 positives, over-confident scores: the regime where the paper's estimators
    # fail
    p, lab = simulate_probs(5000, 5, 60, sharpen=[1.5] * 60)
    data = TopLabelData.from_probs(p, lab)
    base = heldout_nll("uncalibrated", data)
    for method in ("hist", "cum-opt", "kde-mon2"):
        paper = heldout_nll(method, data, shrinkage=0)
        shrunk = heldout_nll(method, data)
        assert shrunk < base and shrunk < paper, (method, shrunk, base, paper)


@pytest.mark.slow  # two 5-fold held-out runs on the whole PhANNs set
def test_phanns_shrunk_kde_mon2_within_one_percent_of_the_paper_held_out():
    data = topcal.datasets.load_phanns()
    paper = heldout_nll("kde-mon2", data, folds=5, shrinkage=0)
    shrunk = heldout_nll("kde-mon2", data, folds=5)
    assert shrunk <= 1.01 * paper


def test_shrinkage_parameter_is_checked():
    d = logistic_classes([50, 50], 0.0, 0)
    for bad in (-1, "yes", True, float("nan")):
        with pytest.raises(ParameterError, match="'shrinkage' must be"):
            topcal.calibrator("hist", shrinkage=bad).fit(d)


# --------------------------------------------------------------- persistence
@pytest.mark.slow
@pytest.mark.parametrize("method", ["hist", "cum-opt", "kde-mon2", "kde-opt"])
def test_shrunk_models_round_trip_bit_for_bit(method, tmp_path):
    p, lab = simulate_probs(2000, 7, 5, sharpen=[1.5, 0.8, 1, 1.2, 1])
    data = TopLabelData.from_probs(p, lab)
    m = _quiet(lambda: topcal.calibrator(method).fit(data))
    m.save(tmp_path / "m.json")
    back = topcal.load(tmp_path / "m.json")
    np.testing.assert_array_equal(back.predict(data), m.predict(data))
    np.testing.assert_array_equal(back.shrinkage_, m.shrinkage_)
    assert back.describe()["classes"]["0"]["pseudo_count"] == m.shrinkage_[0]


@pytest.mark.parametrize("method", ["hist", "kde-mon2"])
def test_the_reference_keeps_no_statistics_and_the_model_still_updates(method):
    # the pooled reference is saved without statistics and refitted with its model: its fit
    # skips them; the model's own statistics and update are as before
    p, lab = simulate_probs(2000, 7, 5, sharpen=[1.5, 0.8, 1, 1.2, 1])
    data = TopLabelData.from_probs(p, lab)
    m = _quiet(lambda: topcal.calibrator(method).fit(data))
    assert m.reference_.evidence_.is_empty and m.evidence_.stats is not None
    assert m.to_dict()["state"]["shrinkage"]["reference"] == m.reference_.to_dict()
    first, second = kfold_split(data, 2, seed=1)
    updated = _quiet(lambda: topcal.calibrator(method).fit(first).update(second))
    assert updated.reference_.evidence_.stats is None
    np.testing.assert_allclose(
        updated.predict(data),
        _quiet(lambda: topcal.calibrator(method).fit(updated.evidence_.stats.to_data())).predict(
            data
        ),
    )


@pytest.mark.slow
@pytest.mark.parametrize("method", SHRINKABLE)
def test_shrunk_fit_leaves_the_data_unchanged(method):
    # the pseudo-count's rows are the data's own arrays when every row has weight (no copies)
    p, lab = simulate_probs(1500, 3, 4, sharpen=[1.5, 0.8, 1, 1.2])
    data = TopLabelData.from_probs(p, lab)
    before = [a.copy() for a in (data.score, data.tp, data.fp, data.pred)]
    m = _quiet(lambda: topcal.calibrator(method).fit(data))
    for a, b in zip(before, (data.score, data.tp, data.fp, data.pred)):
        np.testing.assert_array_equal(a, b)
    # the one-class reference reads its own table's scalars: the same counts as through the class
    # array
    t0, n0 = m.reference_._local_counts(0, data.score)
    t1, n1 = m.reference_._local_counts_rows(np.zeros(data.n_rows, dtype=np.int64), data.score)
    np.testing.assert_array_equal(t0, t1)
    np.testing.assert_array_equal(n0, n1)


def test_model_files_from_before_shrinkage_load_as_the_paper_estimator(tmp_path):
    p, lab = simulate_probs(1000, 8, 3)
    data = TopLabelData.from_probs(p, lab)
    m = topcal.calibrator("hist", shrinkage=0).fit(data)
    d = m.to_dict()
    d = {**{k: v for k, v in d.items() if k != "evidence"}, **d["evidence"]}  # format 3's layout
    del d["params"]["shrinkage"]  # what version 0.1.0 wrote
    doc = {
        "format": "topcal-model",
        "format_version": 3,
        "topcal_version": "0.1.0",
        "model": d,
        "sha256": hashlib.sha256(persist.canonical_json(d).encode()).hexdigest(),
    }
    old = persist.loads(json.dumps(doc))
    assert old.shrinkage == 0
    np.testing.assert_array_equal(old.predict(data), m.predict(data))


# ------------------------------------------------------------------- auto
@pytest.mark.slow
def test_auto_picks_temperature_scaling_when_the_truth_is_a_temperature():
    p, lab = simulate_probs(4000, 11, 10, sharpen=[1.8] * 10)  # one global over-confidence
    m = _quiet(lambda: topcal.calibrator("auto", folds=3).fit(TopLabelData.from_probs(p, lab)))
    assert m.method_ in ("sts", "csts", "tswa"), m.cv_
    # the one-standard-error rule: the choice is within tolerance of the smallest mean (issue 22)
    best = min(v["nll"] for v in m.cv_.values() if v["nll"] is not None)
    assert m.cv_[m.method_]["nll"] - best <= m.cv_[m.method_]["diff_se"], m.cv_


@pytest.mark.slow
def test_auto_picks_a_score_method_when_the_curve_is_not_a_sigmoid():
    # accuracy 0.9 below score 0.5 and 0.4 above: no monotone rescaling can express it
    rng = np.random.default_rng(3)
    n = 6000
    s = rng.uniform(0.2, 1.0, n)
    pred = rng.integers(3, size=n)
    ok = rng.uniform(size=n) < np.where(s < 0.5, 0.9, 0.4)
    lab = np.where(ok, pred, (pred + 1) % 3)
    d = TopLabelData.from_scores(pred, s, labels=lab, classes=["0", "1", "2"])
    m = _quiet(lambda: topcal.calibrator("auto", folds=3).fit(d))
    assert m.method_ in ("kde-mon2", "hist", "cum-opt"), m.cv_
    assert "sts" not in m.cv_  # full-vector candidates cannot run on top scores


def test_auto_keeps_the_raw_score_when_it_is_calibrated_and_data_are_few():
    p, lab = simulate_probs(300, 12, 30)  # calibrated by construction, ~10 per class
    m = _quiet(
        lambda: topcal.calibrator("auto", candidates=["uncalibrated", "hist", "cum-opt"]).fit(
            TopLabelData.from_probs(p, lab)
        )
    )
    assert m.method_ == "uncalibrated", m.cv_
    with pytest.warns(DegenerateClassWarning, match="too few"):
        with warnings.catch_warnings():  # 6 rows leave most of the 12 classes never predicted
            warnings.filterwarnings(
                "ignore", message=".*never predicted", category=DegenerateClassWarning
            )
            tiny = topcal.calibrator("auto").fit(TopLabelData.from_probs(p[:6], lab[:6]))
    assert tiny.method_ == "uncalibrated"


def test_auto_records_its_choice_and_round_trips(tmp_path):
    p, lab = simulate_probs(2000, 13, 4, sharpen=[1.5, 1.5, 0.7, 1.0])
    data = TopLabelData.from_probs(p, lab)
    m = _quiet(lambda: topcal.calibrator("auto", folds=3, seed=5).fit(data))
    m.save(tmp_path / "a.json")
    back = topcal.load(tmp_path / "a.json")
    np.testing.assert_array_equal(back.predict(data), m.predict(data))
    d = back.describe()
    assert d["chosen"] == m.method_ and set(d["cross_validation"]["nll"]) == set(m.cv_)
    saved = json.loads((tmp_path / "a.json").read_text())["model"]["state"]
    assert saved["method"] == m.method_ and saved["model"]["method"] == m.method_
    with pytest.raises(ParameterError, match="candidates"):
        topcal.calibrator("auto", candidates=["auto"]).fit(data)


def test_auto_survives_a_failing_candidate():
    p, lab = simulate_probs(1500, 14, 3)
    data = TopLabelData.from_probs(p, lab)
    m = _quiet(
        lambda: topcal.calibrator("auto", folds=3, candidates=["uncalibrated", "csts", "hist"]).fit(
            data.subset(np.flatnonzero(data.pred != 2))
        )
    )  # class 2 never predicted: csts still fits
    assert m.method_ in ("uncalibrated", "csts", "hist")


# ------------------------------------------------------- temperature family
def _forest_like(seed=0, n=1500, k=5):
    """Probabilities with exact zeros, as a random forest outputs (vote fractions of 10 trees)."""
    rng = np.random.default_rng(seed)
    lab = rng.integers(k, size=n)
    votes = np.zeros((n, k))
    for i in range(n):
        good = rng.binomial(10, 0.75)
        votes[i, lab[i]] += good
        np.add.at(votes[i], rng.integers(k, size=10 - good), 1)
    return votes / 10, lab


def test_exact_zero_competitors_do_not_set_the_temperature():
    p, lab = _forest_like()
    data = TopLabelData.from_probs(p, lab)
    parts = kfold_split(data, 2, seed=0)
    for method in ("sts", "tswa", "cstswa"):
        m = _quiet(lambda: topcal.calibrator(method).fit(parts[0]))
        assert np.all(m.temperature_ < 20), (method, m.temperature_)  # was ~100 with 1e-300 floors
        held = nll(parts[1], m.predict(parts[1])).overall
        assert np.isfinite(held) and held < 1.0


def test_quasi_separated_class_fits_without_raising():
    # class a: every TP scores above every FP (Platt's slope runs off); the fit must finish
    s = np.r_[np.linspace(0.3, 0.5, 20), np.linspace(0.6, 0.99, 60), np.linspace(0.3, 0.99, 80)]
    pred = np.r_[np.zeros(80, int), np.ones(80, int)]
    ok = np.r_[np.zeros(20, bool), np.ones(60, bool), np.arange(80) % 3 > 0]
    lab = np.where(ok, pred, 1 - pred)
    d = TopLabelData.from_scores(pred, s, labels=lab, classes=["a", "b"])
    for method in ("bts", "btswa"):
        m = _quiet(lambda: topcal.calibrator(method).fit(d))
        c = m.predict(d)
        assert np.all(np.isfinite(c)) and np.all((c >= 0) & (c <= 1))


@pytest.mark.slow
@pytest.mark.parametrize(
    "method", ["sts", "csts", "tswa", "cstswa", "btswa", "kde-mon2", "hist", "auto"]
)
def test_row_order_does_not_change_the_fit(method):
    p, lab = _forest_like(seed=2, n=900, k=4)
    data = TopLabelData.from_probs(p, lab)
    perm = np.random.default_rng(9).permutation(data.n_rows)
    a = _quiet(lambda: topcal.calibrator(method).fit(data))
    b = _quiet(lambda: topcal.calibrator(method).fit(data.subset(perm)))
    np.testing.assert_allclose(a.predict(data), b.predict(data), rtol=1e-7, atol=1e-9)


# ------------------------------------------------------------ compare, report
def test_compare_reports_failures_and_warnings_instead_of_aborting():
    from topcal.evaluate import compare_methods

    data = topcal.datasets.load_phanns()
    res = compare_methods(
        data,
        ["uncalibrated", "hist", "btswa"],
        folds=2,
        params={"hist": {"shrinkage": 0}, "btswa": {"max_iter": 500}},
    )
    assert set(res["methods"]) == {"uncalibrated", "hist", "btswa"} and not res["failed"]
    assert any("reaches confidence 0 or 1" in m for m in res["warnings"]["hist"])
    with pytest.raises(ParameterError, match="no parameter"):
        compare_methods(data, ["hist"], params={"hist": {"bins": 3}})


@pytest.mark.heavy
@pytest.mark.slow
def test_cli_fit_tswa_on_forest_outputs_and_compare_top_score_csv(tmp_path, capsys):
    from topcal.cli import main

    p, lab = _forest_like(seed=4, n=800, k=4)
    np.savez(tmp_path / "rf.npz", probs=p, labels=lab, classes=np.array(["a", "b", "c", "d"]))
    assert (
        main(["fit", str(tmp_path / "rf.npz"), "--method", "tswa", "-o", str(tmp_path / "m.json")])
        == 0
    )
    assert np.all(topcal.load(tmp_path / "m.json").temperature_ < 20)
    # the true_label,pred_label,confidence layout of published ImageNet outputs, many small classes
    rng = np.random.default_rng(0)
    n, k = 600, 30
    pred = rng.integers(k, size=n)
    conf = rng.uniform(0.2, 1.0, n)
    true = np.where(rng.uniform(size=n) < conf**2, pred, (pred + 1) % k)
    import pandas as pd

    pd.DataFrame({"true_label": true, "pred_label": pred, "confidence": conf}).to_csv(
        tmp_path / "t.csv", index=False
    )
    capsys.readouterr()
    code = main(
        [
            "compare",
            str(tmp_path / "t.csv"),
            "--label-column",
            "true_label",
            "--pred-column",
            "pred_label",
            "--score-column",
            "confidence",
            "--folds",
            "2",
            "--json",
        ]
    )
    out = capsys.readouterr()
    assert code == 0, out.err
    res = json.loads(out.out)
    assert res["protocol"] == "kfold" and not res["failed"]
    assert "auto" in res["methods"] and "hist" in res["methods"] and "sts" in res["skipped"]
    auto = res["methods"]["auto"]["nll"]["overall"]
    assert auto <= res["methods"]["uncalibrated"]["nll"]["overall"] * 1.02
    assert any("fewer than 30 positives" in m for m in res["warnings"]["data"])


@pytest.mark.parametrize("method", ["kde", "kde-mon2", "kde-opt"])
def test_kde_pseudo_count_on_merged_cells_matches_every_row(method):
    """Many rows per table cell: the m-search runs on one TP and one FP row per cell (merge_cells),
    its summed losses within 1e-5 relative of the per-row losses, the same m and predictions."""
    data = logistic_classes([40_000, 30_000, 20_000], 0.7, 4)
    merged = _quiet(topcal.calibrator(method).fit, data)
    rows = topcal.calibrator(method)
    rows.merge_cells = False
    _quiet(rows.fit, data)
    n_rows = data.n_rows
    s, tp, fp, pred = merged._merged_rows(data.pred, data.score, data.tp, data.fp)
    assert s.size * shr.CELL_MERGE_GAIN <= n_rows  # the merge did happen
    assert tp.sum() == data.tp.sum() and fp.sum() == data.fp.sum()
    np.testing.assert_allclose(merged.shrinkage_loss_, rows.shrinkage_loss_, rtol=1e-5)
    assert merged.reference_m_ == rows.reference_m_
    np.testing.assert_array_equal(merged.shrinkage_, rows.shrinkage_)
    np.testing.assert_array_equal(merged.predict(data), rows.predict(data))


def test_cell_merge_keeps_weights_and_weighted_mean_scores():
    cell = np.array([0, 0, 1, 1, 1, 3])
    score = np.array([0.1, 0.3, 0.5, 0.6, 0.7, 0.9])
    tp = np.array([1.0, 1.0, 0.0, 2.0, 1.0, 0.0])
    fp = np.array([0.0, 0.0, 1.0, 0.0, 0.5, 1.0])
    s, t, f, c = shr.merge_rows_by_cell(cell, score, tp, fp, 4)
    got = np.array(sorted(zip(c, t > 0, s, t, f)), dtype=float)
    want = [
        (0, 1, 0.2, 2.0, 0.0),
        (1, 0, (0.5 + 0.35) / 1.5, 0.0, 1.5),
        (1, 1, (1.2 + 0.7) / 3.0, 3.0, 0.0),
        (3, 0, 0.9, 0.0, 1.0),
    ]
    np.testing.assert_allclose(got, want, rtol=1e-15)


@pytest.mark.parametrize(
    "params", [{}, {"strategy": "quantile", "shrinkage": "class"}, {"n_bins": 37}]
)
@pytest.mark.parametrize("weighted", [False, True])
def test_histogram_pseudo_counts_from_cells_equal_those_from_rows(params, weighted):
    """issue 26: hist chooses its pseudo-counts from per-(bin, reference bin) sums, not per-row
    lookups;
    the losses, pseudo-counts and fitted model are those of the per-row path, bit for bit (a class
    without rows and count weights included)."""
    rng = np.random.default_rng(3)
    n, k = 5000, 6
    pred = rng.integers(0, k - 1, n)  # the last class never predicted
    score = rng.random(n) ** 0.5
    if weighted:  # binned-style weights: counts per row
        tp, fp = rng.integers(0, 5, n).astype(float), rng.integers(0, 3, n).astype(float)
    else:
        tp = (rng.random(n) < score).astype(float)
        fp = 1.0 - tp
    data = TopLabelData(tuple(f"c{i}" for i in range(k)), pred, score, (0.0, 1.0), tp=tp, fp=fp)
    fast = _quiet(topcal.calibrator("hist", **params).fit, data)
    slow = topcal.calibrator("hist", **params)
    slow.cell_sums = False  # the per-row path
    _quiet(slow.fit, data)
    assert np.array_equal(fast.shrinkage_loss_, slow.shrinkage_loss_)
    assert (
        np.array_equal(fast.shrinkage_, slow.shrinkage_) and fast.reference_m_ == slow.reference_m_
    )
    assert json.dumps(fast.to_dict()["state"]) == json.dumps(slow.to_dict()["state"])
    assert np.array_equal(fast.predict(data), slow.predict(data))


def test_count_runs_keep_small_counts_exact_and_large_ones_within_the_width(monkeypatch):
    rng = np.random.default_rng(5)
    group = np.repeat([0, 1, 2], 4000)
    t = np.concatenate([np.cumsum(rng.random(4000) < p)[::-1] for p in (0.9, 0.5, 0.05)]).astype(
        float
    )
    n = np.concatenate([np.arange(4000, 0, -1)] * 3).astype(float)
    run = shr.count_runs(t, n, group, 0.01)
    monkeypatch.setattr(shr, "_RUN_BLOCK", 7)  # block edges everywhere: the same runs
    assert np.array_equal(shr.count_runs(t, n, group, 0.01), run)
    assert run[0] == 0 and np.all(np.diff(run) >= 0)  # consecutive cells, numbered in order
    assert run.max() < 0.5 * run.size  # a real reduction
    for r in np.unique(run):
        i = np.flatnonzero(run == r)
        assert np.unique(group[i]).size == 1  # never across classes
        for x in (t[i], n[i] - t[i]):
            if x.min() < 100:  # small counts: one value per run (exact)
                assert x.min() == x.max()
            else:
                assert x.max() <= x.min() * 1.01 * (1 + 1e-12)


@pytest.mark.slow
@pytest.mark.parametrize("method", ["cum", "cum-median", "cum-opt"])
@pytest.mark.parametrize("rule", ["auto", "class"])
def test_cumulative_pseudo_counts_from_count_runs_match_the_per_row_loss(method, rule):
    """issue 26: the cum family chooses m on runs of cells with counts within 1% (exact below 100):
    the losses stay within 1e-5 relative of the per-row ones (measured <= 1.3e-6 at 10^4..10^6
    rows), the pseudo-counts are the same, and so are the fitted model and its predictions."""
    probs, labels = simulate_probs(60_000, 11, 4, sharpen=[0.6, 1.0, 1.5, 2.5])
    data = TopLabelData.from_probs(probs, labels)
    fast = _quiet(topcal.calibrator(method, shrinkage=rule).fit, data)
    slow = topcal.calibrator(method, shrinkage=rule)
    slow.cell_sums = False  # every row's own loss
    _quiet(slow.fit, data)
    np.testing.assert_allclose(fast.shrinkage_loss_, slow.shrinkage_loss_, rtol=1e-5)
    assert not np.array_equal(fast.shrinkage_loss_, slow.shrinkage_loss_)  # runs were merged
    assert (
        np.array_equal(fast.shrinkage_, slow.shrinkage_) and fast.reference_m_ == slow.reference_m_
    )
    assert json.dumps(fast.to_dict()["state"]) == json.dumps(slow.to_dict()["state"])
    assert np.array_equal(fast.predict(data), slow.predict(data))


def _rounded_and_binned_sets():
    probs, labels = simulate_probs(20_000, 5, 3, sharpen=[0.7, 1.0, 2.0])
    rounded = np.round(probs, 3)
    d = TopLabelData.from_probs(probs, labels)
    return {
        "continuous": d,
        "rounded": TopLabelData.from_probs(rounded / rounded.sum(axis=1, keepdims=True), labels),
        "binned": topcal.datasets.load_phanns(),
        "fractional": TopLabelData(
            d.classes,
            d.pred,
            np.round(d.score, 2),
            d.score_range,
            tp=0.7 * d.tp,
            fp=1.3 * d.fp + 0.1,
        ),
    }


@pytest.mark.slow
@pytest.mark.parametrize("method", ["cum", "cum-median", "cum-opt"])
def test_cumulative_reference_from_the_class_tables_equals_the_pooled_fit_bit_for_bit(
    method, monkeypatch
):
    """issue 26: a shrunk cum fit makes its pooled reference from the classes' sorted tables (a
    merge
    of K runs) and its cells' sums from the class fits' weights; on continuous, rounded (scores
    shared by classes), binned and fractionally weighted rows (the fit over the rows) the model,
    its saved file, pseudo-counts and predictions are those of the fit over the pooled rows."""

    sets = _rounded_and_binned_sets()
    for rule in ("auto", "class"):
        fast = {
            k: _quiet(topcal.calibrator(method, shrinkage=rule).fit, d) for k, d in sets.items()
        }
        with monkeypatch.context() as mp:
            mp.setattr(
                type(fast["binned"]), "_pooled_seed", lambda self, data: None
            )  # the fit over the rows
            slow = {
                k: _quiet(topcal.calibrator(method, shrinkage=rule).fit, d) for k, d in sets.items()
            }
        for k, d in sets.items():
            assert json.dumps(fast[k].to_dict()) == json.dumps(slow[k].to_dict()), k
            assert np.array_equal(fast[k].shrinkage_loss_, slow[k].shrinkage_loss_), k
            assert np.array_equal(fast[k].predict(d), slow[k].predict(d)), k
            assert (
                fast[k]._fit_counts is None and fast[k]._ref_rank is None
            )  # the fit's scratch: not kept
