"""Hand-worked examples and invariances for uncalibrated, conf1, hist, cum, cum-median, cum-opt."""

import warnings

import numpy as np
import pytest

import topcal
from topcal import TopLabelData
from topcal.errors import DegenerateClassWarning, NotFittedError, ParameterError, TopcalError
from topcal.metrics import nll

# One class "A" with 8 positives (T = true positive, F = false positive):
#   score: 0.15 0.25 0.35 0.55 0.65 0.85 0.95 0.95
#   truth:  T    F    T    F    T    T    T    F
# plus one sample predicted "B" (a TP) so there are two classes.
SCORES = [0.15, 0.25, 0.35, 0.55, 0.65, 0.85, 0.95, 0.95, 0.5]
PRED = ["A"] * 8 + ["B"]
LABEL = ["A", "B", "A", "B", "A", "A", "A", "B", "B"]


@pytest.fixture
def toy():
    return TopLabelData.from_scores(PRED, SCORES, LABEL)


def conf_a(model, s):
    return model.curve("A", np.atleast_1d(np.asarray(s, float))).confidence


def test_uncalibrated_rescales_by_declared_range():
    d = TopLabelData.from_scores([0, 0, 1], [2.5, 10.0, 5.0], [0, 1, 1], score_range=(0, 10))
    m = topcal.calibrator("uncalibrated").fit(d)
    np.testing.assert_allclose(m.predict(d), [0.25, 1.0, 0.5])


def test_conf1_is_tp_over_positives(toy):
    m = topcal.calibrator("conf1").fit(toy)
    # A: 5 TP of 8 positives; B: 1 of 1
    np.testing.assert_allclose(conf_a(m, [0.0, 0.5, 1.0]), 5 / 8)
    np.testing.assert_allclose(m.predict(toy)[-1], 1.0)


def test_hist_two_bins_by_hand(toy):
    m = topcal.paper_calibrator("hist", n_bins=2).fit(toy)
    # (0, 0.5]: 0.15T 0.25F 0.35T -> 2/3 ; (0.5, 1]: 0.55F 0.65T 0.85T 0.95T 0.95F -> 3/5
    np.testing.assert_allclose(
        conf_a(m, [0.0, 0.2, 0.5, 0.500001, 1.0]), [2 / 3, 2 / 3, 2 / 3, 3 / 5, 3 / 5]
    )


def test_hist_ten_bins_with_empty_bin_rule(toy):
    m = topcal.paper_calibrator("hist").fit(toy)
    st = m.class_state_[0]
    # filled bins: (.1,.2]=1 (.2,.3]=0 (.3,.4]=1 (.5,.6]=0 (.6,.7]=1 (.8,.9]=1 (.9,1]=1/2
    # empty: (0,.1] -> nearest (.1,.2] = 1; (.4,.5] -> tie between 1 and 0 = 0.5;
    #        (.7,.8] -> tie between 1 and 1 = 1
    np.testing.assert_allclose(st["values"], [1, 1, 0, 1, 0.5, 0, 1, 1, 1, 0.5])
    np.testing.assert_array_equal(st["tp"], [0, 1, 0, 1, 0, 0, 1, 0, 1, 1])
    np.testing.assert_array_equal(st["fp"], [0, 0, 1, 0, 0, 1, 0, 0, 0, 1])
    # half-open bins: 0.2 belongs to (0.1, 0.2]
    np.testing.assert_allclose(conf_a(m, [0.2, 0.2000001]), [1.0, 0.0])


def test_hist_quantile_bins_hold_equal_mass(toy):
    m = topcal.paper_calibrator("hist", n_bins=2, strategy="quantile").fit(toy)
    st = m.class_state_[0]
    # weighted median of the 8 scores is 0.55: bins [0, .55] (4 samples), (.55, 1] (4)
    np.testing.assert_allclose(st["edges"], [0.0, 0.55, 1.0])
    np.testing.assert_allclose(st["values"], [2 / 4, 3 / 4])


def test_cum_by_hand(toy):
    m = topcal.paper_calibrator("cum").fit(toy)
    # Conf_Cum(S) = TP(score >= S) / P(score >= S)
    s = [0.0, 0.15, 0.2, 0.5, 0.6, 0.9, 0.95, 1.0]
    expected = [
        5 / 8,
        5 / 8,
        4 / 7,
        3 / 5,
        3 / 4,
        1 / 2,
        1 / 2,
        1 / 2,
    ]  # above max: hold 0.95's value
    np.testing.assert_allclose(conf_a(m, s), expected)


def test_cum_median_by_hand(toy):
    m = topcal.paper_calibrator("cum-median").fit(toy)
    st = m.class_state_[0]
    # 8 equal weights: the 4th smallest score, 0.55, is where half the weight is reached
    assert st["theta"] == 0.55
    # below theta: Hist([0, 0.55]) = 2 TP of 4
    assert st["below"] == 0.5
    np.testing.assert_allclose(
        conf_a(m, [0.1, 0.54, 0.55, 0.6, 0.9]), [0.5, 0.5, 3 / 5, 3 / 4, 1 / 2]
    )


def test_cum_opt_minimises_class_nll_over_all_cutoffs(toy):
    m = topcal.paper_calibrator("cum-opt").fit(toy)
    theta = m.class_state_[0]["theta"]
    view = toy.class_view(0)
    cum = topcal.paper_calibrator("cum").fit(toy)

    def loss(th):  # independent brute force: build the curve for cutoff th, score with metrics.nll
        below = view.tp[view.score <= th].sum() / (view.score <= th).sum()
        c = np.where(view.score >= th, conf_a(cum, view.score), below)
        sub = toy.subset(view.index)
        return nll(sub, c).overall

    losses = {th: loss(th) for th in np.unique(view.score)}
    best = min(losses, key=lambda t: (losses[t], t))
    # Here no cut-off wins. By hand, plain cum costs
    #   -[ln 5/8 + ln 3/7 + ln 4/6 + ln 2/5 + ln 3/4 + ln 2/3 + 2 ln 1/2] / 8 = 0.58981
    # while theta = 0.55 (one bin of 2/4 below) costs (3 ln 2 + 2.99573) / 8 = 0.63440.
    assert losses[0.15] == pytest.approx(0.58981, abs=1e-5)
    assert losses[0.55] == pytest.approx(0.63440, abs=1e-5)
    assert best == 0.15
    assert theta == 0.0  # no cut-off is reported as the lower end of the score range
    np.testing.assert_allclose(conf_a(m, view.score), conf_a(cum, view.score))


def test_cum_opt_finds_a_cutoff_when_low_scores_are_flat():
    # low scores: accuracy 1/2 regardless of score; high scores: accurate. Conf_Cum is
    # dragged up at low scores by the accurate top, so a cut-off must pay off.
    lo = np.linspace(0.05, 0.5, 40)
    hi = np.linspace(0.55, 1.0, 40)
    score = np.concatenate([lo, hi])
    label = np.concatenate([np.tile([0, 1], 20), np.zeros(40, int)])
    d = TopLabelData.from_scores(np.zeros(80, int), score, label, classes=["0", "1"])
    d = TopLabelData.concat([d, TopLabelData.from_scores([1], [0.9], [1], classes=["0", "1"])])
    m = topcal.paper_calibrator("cum-opt").fit(d)
    st = m.class_state_[0]
    assert 0.4 <= st["theta"] <= 0.6
    cum = topcal.paper_calibrator("cum").fit(d)
    assert nll(d, m.predict(d)).overall < nll(d, cum.predict(d)).overall


def test_curve_reports_support_and_class_names(toy):
    m = topcal.paper_calibrator("hist").fit(toy)
    c = m.curve("A")
    assert c.class_name == "A" and c.support == (0.15, 0.95)
    assert c.score.shape == c.confidence.shape == (401,)
    with pytest.raises(TopcalError, match="unknown class 'Z'"):
        m.curve("Z")


@pytest.mark.parametrize(
    "method", ["uncalibrated", "conf1", "hist", "cum", "cum-median", "cum-opt"]
)
def test_shuffling_samples_changes_nothing(method, toy):
    rng = np.random.default_rng(0)
    n = 500
    d = TopLabelData.from_scores(rng.integers(0, 3, n), rng.uniform(0, 1, n), rng.integers(0, 3, n))
    perm = rng.permutation(n)
    a = topcal.calibrator(method).fit(d)
    b = topcal.calibrator(method).fit(d.subset(perm))
    np.testing.assert_array_equal(a.predict(d)[perm], b.predict(d.subset(perm)))


@pytest.mark.parametrize("method", ["conf1", "hist", "cum", "cum-median", "cum-opt"])
def test_binned_input_fits_like_per_sample_input(method):
    """Counts at bin midpoints give the same fit as the expanded samples."""
    rng = np.random.default_rng(1)
    lo = np.repeat(np.arange(0, 10) / 10, 2)
    cls = np.tile(["a", "b"], 10)
    tp = rng.integers(0, 6, 20)
    fp = rng.integers(0, 6, 20)
    binned = TopLabelData.from_binned(cls, lo, lo + 0.1, tp, fp, score_range=(0, 1))
    mid = lo + 0.05
    pred = np.concatenate([np.repeat(cls, tp), np.repeat(cls, fp)])
    score = np.concatenate([np.repeat(mid, tp), np.repeat(mid, fp)])
    other = {"a": "b", "b": "a"}
    label = np.concatenate([np.repeat(cls, tp), [other[c] for c in np.repeat(cls, fp)]])
    samples = TopLabelData.from_scores(pred, score, label, classes=["a", "b"])
    grid = np.linspace(0, 1, 57)
    mb = topcal.calibrator(method).fit(binned)
    ms = topcal.calibrator(method).fit(samples)
    for k in ("a", "b"):
        np.testing.assert_allclose(
            mb.curve(k, grid).confidence, ms.curve(k, grid).confidence, rtol=0, atol=1e-12
        )


# ------------------------------------------------------- degenerate cases
def test_class_never_predicted_falls_back_to_uncalibrated_with_warning():
    d = TopLabelData.from_scores(["a", "a"], [0.3, 0.9], ["a", "b"], classes=["a", "b", "c"])
    with pytest.warns(DegenerateClassWarning, match=r"\['b', 'c'\] are never predicted"):
        m = topcal.paper_calibrator("hist").fit(d)
    np.testing.assert_allclose(m.curve("c", [0.2, 0.8]).confidence, [0.2, 0.8])
    assert m.curve("c").support is None
    assert "fallback" in m.describe()["classes"]["c"]


@pytest.mark.parametrize("method", ["conf1", "hist", "cum", "cum-median", "cum-opt"])
def test_only_tp_only_fp_single_positive_and_constant_scores(method):
    # class a: only TP; class b: only FP; class c: a single positive; class d: constant scores
    pred = ["a", "a", "b", "b", "c", "d", "d", "d"]
    score = [0.6, 0.9, 0.4, 0.7, 0.5, 0.8, 0.8, 0.8]
    label = ["a", "a", "a", "a", "c", "d", "a", "d"]
    d = TopLabelData.from_scores(pred, score, label)
    m = topcal.paper_calibrator(method).fit(d)
    grid = np.linspace(0, 1, 11)
    np.testing.assert_allclose(m.curve("a", grid).confidence, 1.0)
    np.testing.assert_allclose(m.curve("b", grid).confidence, 0.0)
    np.testing.assert_allclose(m.curve("c", grid).confidence, 1.0)
    np.testing.assert_allclose(m.curve("d", [0.8]).confidence, 2 / 3)
    assert np.isfinite(nll(d, m.predict(d)).overall)


def test_unknown_method_and_parameters_are_rejected_with_options():
    with pytest.raises(ParameterError, match="unknown method 'histo'. Options are: .*hist"):
        topcal.calibrator("histo")
    with pytest.raises(ParameterError, match="no parameter.*'bins'.*n_bins, strategy"):
        topcal.calibrator("hist", bins=5)
    d = TopLabelData.from_scores([0], [0.5], [0])
    with pytest.raises(
        ParameterError, match="'n_bins' must be an integer in \\[1, 100000\\], got 0"
    ):
        topcal.calibrator("hist", n_bins=0).fit(d)
    with pytest.raises(
        ParameterError, match="'strategy' must be one of 'uniform', 'quantile', got 'mass'"
    ):
        topcal.calibrator("hist", strategy="mass").fit(d)


def test_predict_before_fit_and_on_mismatched_data():
    d = TopLabelData.from_scores([0], [0.5], [0])
    with pytest.raises(NotFittedError, match="call fit"):
        topcal.calibrator("hist").predict(d)
    m = topcal.calibrator("hist").fit(d)
    other = TopLabelData.from_scores([0], [0.5], [0], classes=["x"])
    with pytest.raises(TopcalError, match="classes"):
        m.predict(other)
    wide = TopLabelData.from_scores([0], [0.5], [0], score_range=(0, 10))
    with pytest.raises(TopcalError, match="score range"):
        m.predict(wide)


def test_params_are_stored_untouched_and_fit_returns_self():
    cal = topcal.calibrator("hist", n_bins=7, strategy="quantile")
    assert cal.get_params() == {"n_bins": 7, "strategy": "quantile", "shrinkage": "auto"}
    d = TopLabelData.from_scores([0, 0], [0.2, 0.8], [0, 0])
    assert cal.fit(d) is cal
    assert cal.get_params() == {"n_bins": 7, "strategy": "quantile", "shrinkage": "auto"}


def test_phanns_fits_every_core_method_without_warnings():
    data = topcal.datasets.load_phanns()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for name in ["uncalibrated", "conf1", "hist", "cum", "cum-median", "cum-opt"]:
            conf = topcal.calibrator(name).fit(data).predict(data)
            assert conf.shape == (data.n_rows,) and np.all((conf >= 0) & (conf <= 1))
    # the paper's "0.07" for Minor capsid (Conf1)
    m = topcal.calibrator("conf1").fit(data)
    assert round(m.curve("Minor capsid", [5.0]).confidence[0], 2) == 0.07


# ------------------------------------------- properties the classes declare (read instead of their
# names)
def test_exactly_one_registered_method_is_the_baseline_and_it_is_named_baseline():
    from topcal.calibrators.registry import BASELINE, lookup

    baselines = [n for n in topcal.available_methods() if lookup(n).is_baseline]
    assert baselines == [BASELINE]
    assert lookup("no-such-method") is None and lookup(None) is None


@pytest.mark.parametrize(
    "name", [n for n in topcal.available_methods() if topcal.calibrators.get_class(n).step_curve]
)
def test_a_declared_step_curve_is_piecewise_constant(name):
    data = topcal.datasets.load_phanns()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DegenerateClassWarning)
        model = topcal.calibrator(name).fit(data)
    k = int(np.argmax(data.class_counts()[0]))
    grid = np.linspace(*data.score_range, 4001)
    y = model.curve(k, grid).confidence
    jumps = np.count_nonzero(np.abs(np.diff(y)) > 1e-12)
    assert (
        jumps < 0.05 * grid.size
    )  # flat almost everywhere: a smooth curve changes at every grid step


def test_step_curve_constant_and_unranked_declarations():
    get = topcal.calibrators.get_class
    assert {n for n in topcal.available_methods() if get(n).step_curve} >= {
        "hist",
        "cum",
        "cum-median",
        "cum-opt",
        "conf1",
        "pooled-hist",
    }
    assert not get("kde-mon2").step_curve and not get("uncalibrated").step_curve
    assert [n for n in topcal.available_methods() if get(n).constant_per_class] == ["conf1"]
    for n in topcal.available_methods():
        cls = get(n)
        assert cls.unranked_on <= set(topcal.metrics.BUNDLE)
        assert bool(cls.unranked_on) == bool(cls.unranked_note)  # a method left unranked says why
    from topcal.report.page import ranked, unranked_notes

    assert ranked(["uncalibrated", "conf1", "hist", "not-a-method"], "ece1") == [
        "uncalibrated",
        "hist",
        "not-a-method",
    ]
    assert ranked(["conf1", "hist"], "nll") == ["conf1", "hist"]
    assert unranked_notes(["hist", "conf1", "conf1"]) == [get("conf1").unranked_note]
    assert unranked_notes(["hist"]) == []


def test_auto_tiers_come_from_the_classes():
    # auto's simplicity order is each method class's declared tier, not a list of names
    from topcal.calibrators.select.rules import TIERS, tier
    from topcal.calibrators.registry import get_class

    for name in topcal.available_methods():
        assert tier(name) == get_class(name, unlisted=True).tier
    assert (
        tier("uncalibrated") == 0 and tier("pooled-platt") == 1 and tier("sts") == 1
    )
    assert tier("hier-beta") == 2 and tier("kde-mon2") == 2 and tier("btswa") == 3
    assert tier("conf1") == 3 and tier("no-such-method") == 3
    # within one curve for all classes, 2-3 parameters are simpler than bins or a kernel curve
    assert (
        tier("pooled-beta") == 1
        and tier("pooled-hist") == tier("pooled-kde-mon2") == 1.5
    )
    assert dict(TIERS)["hist"] == 2 and "auto" in TIERS


def test_auto_prefers_a_parametric_pooled_curve_within_noise_and_the_data_otherwise():
    from topcal.calibrators.select.rules import choose

    cv = {
        "uncalibrated": {"nll": 0.40, "diff_se": 0.01},
        "pooled-hist": {"nll": 0.3454, "diff_se": 0.0},
        "pooled-platt": {"nll": 0.3464, "diff_se": 0.002},
        "hier-beta": {"nll": 0.3460, "diff_se": 0.003},
    }
    assert choose(cv) == ("pooled-platt", "pooled-hist")  # within one SE: 2 parameters beat 15 bins
    cv["pooled-platt"]["diff_se"] = 0.0005  # now clearly worse: the histogram's advantage is real
    assert choose(cv) == ("pooled-hist", "pooled-hist")
