"""Temperature methods: sts, csts, tswa, cstswa and the binary variants bts, btswa.

Recovery of known parameters from data simulated with them, analytic
derivatives against finite differences, nesting relations between the
methods, invariances, persistence, errors, and one reference value from
scikit-learn (an independent implementation of classic temperature scaling).
"""

import warnings

import numpy as np
import pytest
from scipy.special import expit, softmax

import topcal
from topcal import TopLabelData
from topcal.calibrators.temperature._core import (
    AWARD_MAX,
    OFFSET_MAX,
    T_MAX,
    T_MIN,
    MultinomialObjective,
    TopLabelObjective,
    split_top,
)
from topcal.errors import DataError, DegenerateClassWarning, ParameterError
from topcal.metrics import nll
from topcal.persist import dumps, loads

FULL = ["sts", "csts", "tswa", "cstswa"]
BINARY = ["bts", "btswa"]


def simulate(n, k, temps, awards, seed, scale=2.0):
    """Probabilities Y, and labels whose top-label correctness follows
    yhat_k = softmax((log Y + A_k e_k) / T_k)_k exactly (k = argmax Y)."""
    rng = np.random.default_rng(seed)
    y = softmax(rng.normal(0.0, scale, size=(n, k)), axis=1)
    pred = y.argmax(axis=1)
    t = np.broadcast_to(np.asarray(temps, float), (k,))[pred]
    a = np.broadcast_to(np.asarray(awards, float), (k,))[pred]
    z = np.log(y)
    z[np.arange(n), pred] += a
    p_right = softmax(z / t[:, None], axis=1)[np.arange(n), pred]
    right = rng.random(n) < p_right
    wrong_label = (pred + 1 + rng.integers(0, k - 1, n)) % k
    return TopLabelData.from_probs(y, np.where(right, pred, wrong_label))


def simulate_binary(n, k, temps, awards, seed):
    """Top scores only; correctness follows sigmoid((logit s + A_k) / T_k)."""
    rng = np.random.default_rng(seed)
    pred = rng.integers(0, k, n)
    s = rng.uniform(0.05, 0.99, n)
    t = np.asarray(temps, float)[pred]
    a = np.asarray(awards, float)[pred]
    right = rng.random(n) < expit((np.log(s / (1 - s)) + a) / t)
    return TopLabelData.from_scores(
        pred, s, np.where(right, pred, (pred + 1) % k), classes=list("abcd")[:k]
    )


def fit(name, data, **params):
    with warnings.catch_warnings():
        warnings.simplefilter("error", DegenerateClassWarning)
        return topcal.calibrator(name, **params).fit(data)


# ------------------------------------------------------------------ recovery
K = 4
TRUE_T = np.array([0.6, 0.9, 1.4, 2.0])
TRUE_A = np.array([0.8, -0.5, 0.0, 1.5])


# Tolerances c / sqrt(n): c is about twice the largest sqrt(n) * error seen over
# 8 seeds at each n (per-class methods see n / K samples per parameter, and
# an award and its temperature are correlated, hence the larger constants).
@pytest.mark.parametrize(
    "name, temps, awards, c_t, c_a",
    [
        ("sts", 0.7, 0.0, 5.0, 0.0),
        ("csts", TRUE_T, 0.0, 14.0, 0.0),
        ("tswa", 0.8, TRUE_A, 10.0, 35.0),
        ("cstswa", TRUE_T, TRUE_A, 40.0, 150.0),
    ],
)
def test_recovers_simulated_parameters_with_error_shrinking_like_root_n(
    name, temps, awards, c_t, c_a
):
    errs = []
    for n in (4_000, 64_000):
        m = fit(name, simulate(n, K, temps, awards, seed=n))
        err_t = np.max(np.abs(np.log(m.temperature_) - np.log(np.broadcast_to(temps, (K,)))))
        err_a = np.max(np.abs(m.awards_ - np.broadcast_to(awards, (K,))))
        assert err_t < c_t / np.sqrt(n), (n, m.temperature_)
        assert err_a <= c_a / np.sqrt(n), (n, m.awards_)
        errs.append(err_t + err_a)
    assert errs[1] < errs[0]


@pytest.mark.parametrize(
    "name, awards", [("bts", np.zeros(3)), ("btswa", np.array([0.7, -0.4, 0.0]))]
)
def test_binary_variants_recover_simulated_parameters(name, awards):
    temps = np.array([0.5, 1.0, 1.8])
    for n in (6_000, 96_000):
        m = fit(name, simulate_binary(n, 3, temps, awards, seed=n))
        assert np.max(np.abs(np.log(m.temperature_) - np.log(temps))) < 20.0 / np.sqrt(n)
        assert np.max(np.abs(m.awards_ - awards)) <= 25.0 / np.sqrt(n)


def test_sts_on_calibrated_data_finds_temperature_one():
    rng = np.random.default_rng(7)
    y = softmax(rng.normal(0, 2.0, size=(40_000, 6)), axis=1)
    labels = (rng.random((40_000, 1)) > np.cumsum(y, axis=1)).sum(axis=1)  # label ~ Categorical(y)
    data = TopLabelData.from_probs(y, labels)
    for params in ({}, {"objective": "multinomial"}, {"loss": "brier"}):
        t = fit("sts", data, **params).temperature_
        assert abs(t[0] - 1.0) < 0.03, params


# ----------------------------------------------------------- derivatives
def _fd_check(obj, x, h=1e-5):
    g, hess = obj.grad_hess(x)
    for i in range(len(x)):
        e = np.zeros(len(x))
        e[i] = h
        num_g = (obj.value(x + e) - obj.value(x - e)) / (2 * h)
        np.testing.assert_allclose(g[i], num_g, rtol=1e-6, atol=1e-6)
        gp, _ = obj.grad_hess(x + e)
        gm, _ = obj.grad_hess(x - e)
        np.testing.assert_allclose(hess[:, i], (gp - gm) / (2 * h), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("loss", ["nll", "brier"])
@pytest.mark.parametrize("awards", [0, 1, 3])
def test_gradient_and_hessian_match_finite_differences(loss, awards):
    rng = np.random.default_rng(1)
    n, k = 300, 5
    z = rng.normal(0, 2, size=(n, k))
    pred = rng.integers(0, k, n)  # not always the argmax: the formulas must not assume it
    d, others = split_top(z, pred)
    tp = (rng.random(n) < 0.6).astype(float)
    groups = pred % 3 if awards == 3 else None
    obj = TopLabelObjective(d, others, tp, 1 - tp, loss=loss, n_awards=awards, groups=groups)
    x = np.array([0.3, 0.5, -0.7, 0.2][: 1 + awards])
    _fd_check(obj, x)
    # binary variant (no other entries)
    obj = TopLabelObjective(d, None, tp, 1 - tp, loss=loss, n_awards=min(awards, 1))
    _fd_check(obj, x[: 1 + min(awards, 1)])


def test_multinomial_gradient_matches_finite_differences():
    rng = np.random.default_rng(2)
    z = rng.normal(0, 2, size=(200, 4))
    obj = MultinomialObjective(z, rng.integers(0, 4, 200), rng.random(200))
    for t in (-1.0, 0.2, 1.5):
        _fd_check(obj, np.array([t]))


def test_split_top_from_probabilities_equals_split_of_logs():
    rng = np.random.default_rng(3)
    p = softmax(rng.normal(size=(70_000, 5)), axis=1)  # more than one 65,536-row block
    p[0, 1] = 0.0  # exact zero: floored at LOG_PROB_FLOOR
    pred = p.argmax(axis=1)
    d1, o1 = split_top(np.log(np.maximum(p, 1e-300)), pred)
    d2, o2 = split_top(p, pred, log_floor=1e-300)
    np.testing.assert_array_equal(d1, d2)
    np.testing.assert_array_equal(o1, o2)
    assert o1.shape == (4, 70_000) and np.all(o1 <= 0) and np.all(o1.max(axis=0) == 0)


# ------------------------------------------------------- nesting relations
@pytest.fixture(scope="module")
def mixed():
    """Class-dependently miscalibrated data: no one method is the true model."""
    rng = np.random.default_rng(11)
    n, k = 20_000, 4
    z = rng.normal(0, 2.0, size=(n, k))
    labels = np.argmax(z * np.array([0.5, 0.9, 1.3, 1.8]) + rng.gumbel(size=(n, k)), axis=1)
    return TopLabelData.from_logits(z, labels)


@pytest.fixture(scope="module")
def fitted(mixed):
    """``fitted(name)``: ``fit(name, mixed)``, once per method in this module (the tests that take
    it only read the models)."""
    cache = {}

    def get(name):
        if name not in cache:
            cache[name] = fit(name, mixed)
        return cache[name]

    return get


def _with_params(model, temps, awards=None):
    """A copy of a fitted model with its temperatures (and awards) replaced."""
    d = model.to_dict()
    d["state"]["temperature"] = [float(t) for t in np.broadcast_to(temps, (len(model.classes_),))]
    if awards is not None:
        d["state"]["awards"] = [float(a) for a in np.broadcast_to(awards, (len(model.classes_),))]
    return type(model).from_dict(d)


def test_csts_with_equal_temperatures_and_tswa_with_zero_awards_match_sts(mixed, fitted):
    sts = fitted("sts")
    t = sts.temperature_[0]
    ref = sts.predict(mixed)
    np.testing.assert_allclose(_with_params(fitted("csts"), t).predict(mixed), ref, rtol=1e-13)
    np.testing.assert_allclose(_with_params(fitted("tswa"), t, 0.0).predict(mixed), ref, rtol=1e-13)
    np.testing.assert_allclose(
        _with_params(fitted("cstswa"), t, 0.0).predict(mixed), ref, rtol=1e-13
    )


def test_richer_models_reach_lower_loss(mixed, fitted):
    loss = {name: fitted(name).loss_ for name in FULL}
    tol = 1e-9 * loss["sts"]
    assert loss["csts"] <= loss["sts"] + tol
    assert loss["tswa"] <= loss["sts"] + tol
    assert loss["cstswa"] <= min(loss["csts"], loss["tswa"]) + tol
    # the miscalibration here is class dependent: one temperature is clearly not enough
    assert loss["csts"] < 0.97 * loss["sts"]


def test_fitted_parameters_are_stationary(mixed, fitted):
    """At the reported optimum no small change of any parameter lowers the loss."""
    m = fitted("tswa")
    base = m.loss_
    for i in range(5):
        for step in (1e-4, -1e-4):
            t = m.temperature_[0] * (np.exp(step) if i == 0 else 1.0)
            a = m.awards_.copy()
            if i:
                a[i - 1] += step
            moved = _with_params(m, t, a)
            assert nll(mixed, moved.predict(mixed)).overall * mixed.n_rows >= base - 1e-7 * base


def test_logits_and_probabilities_give_the_same_fit(mixed, fitted):
    probs = TopLabelData.from_probs(softmax(mixed.full, axis=1), mixed.labels)
    for name in FULL:
        a, b = fitted(name), fit(name, probs)
        np.testing.assert_allclose(a.temperature_, b.temperature_, rtol=1e-7)
        np.testing.assert_allclose(a.awards_, b.awards_, atol=1e-7)


def test_bts_equals_csts_for_two_classes():
    rng = np.random.default_rng(5)
    y = softmax(rng.normal(0, 2, size=(5_000, 2)), axis=1)
    labels = np.where(
        rng.random(5_000) < expit(1.6 * np.log(y.max(1) / y.min(1))), y.argmax(1), y.argmin(1)
    )
    data = TopLabelData.from_probs(y, labels)
    for full, binary in (("csts", "bts"), ("cstswa", "btswa")):
        a, b = fit(full, data), fit(binary, data)
        np.testing.assert_allclose(a.temperature_, b.temperature_, rtol=1e-6)
        np.testing.assert_allclose(a.awards_, b.awards_, atol=1e-6)
        np.testing.assert_allclose(a.predict(data), b.predict(data), rtol=1e-6)


def test_multinomial_sts_matches_scikit_learn(mixed, fitted):
    """Reference: scikit-learn's own temperature fit (Brent on log(1/T), multinomial NLL)."""
    from sklearn.calibration import _TemperatureScaling

    beta = float(_TemperatureScaling().fit(mixed.full, mixed.labels).beta_)
    m = fit("sts", mixed, objective="multinomial")
    np.testing.assert_allclose(1.0 / m.temperature_[0], beta, rtol=1e-6)
    assert m.nll_ >= fitted("sts").loss_  # the top-label fit is best at the top-label loss


# ------------------------------------------------------------- invariances
def test_shuffling_samples_changes_nothing(mixed, fitted):
    perm = np.random.default_rng(0).permutation(mixed.n_rows)
    shuffled = mixed.subset(perm)
    for name in FULL + BINARY:
        a, b = fitted(name), fit(name, shuffled)
        np.testing.assert_allclose(b.temperature_, a.temperature_, rtol=1e-9)
        np.testing.assert_allclose(b.awards_, a.awards_, rtol=1e-9, atol=1e-12)
        np.testing.assert_allclose(b.predict(shuffled), a.predict(mixed)[perm], rtol=1e-9)


def test_prediction_keeps_the_original_predicted_class():
    """A negative award can move the argmax of yhat; the confidence stays that of k(X)."""
    y = np.array([[0.5, 0.4, 0.1], [0.2, 0.7, 0.1]])
    data = TopLabelData.from_probs(y, [0, 1], classes=["a", "b", "c"])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DegenerateClassWarning)  # two samples: one-sided classes
        m = topcal.calibrator("cstswa").fit(data)
    m = _with_params(m, [2.0, 0.5, 1.0], [-1.0, 0.3, 0.0])
    z = np.log(y)
    z[0, 0] -= 1.0
    z[1, 1] += 0.3
    expect = [softmax(z[0] / 2.0)[0], softmax(z[1] / 0.5)[1]]
    assert softmax(z[0] / 2.0).argmax() != 0  # the award moved the argmax
    np.testing.assert_allclose(m.predict(data), expect, rtol=1e-12)


# ------------------------------------------- fit summary, AIC, persistence
def test_describe_and_api_report_parameters_loss_and_aic(mixed, fitted):
    for name, n_params in (
        ("sts", 1),
        ("csts", 4),
        ("tswa", 5),
        ("cstswa", 8),
        ("bts", 4),
        ("btswa", 8),
    ):
        m = fitted(name)
        assert m.n_params_ == n_params
        assert m.aic_ == 2 * n_params + 2 * m.nll_
        np.testing.assert_allclose(m.nll_, m.loss_, rtol=1e-10)  # default loss is the top-label NLL
        np.testing.assert_allclose(
            m.nll_ / mixed.n_rows, nll(mixed, m.predict(mixed)).overall, rtol=1e-9
        )
        d = m.describe()
        assert d["fit"]["aic"] == m.aic_ and d["fit"]["n_params"] == n_params
        for i, c in enumerate(m.classes_):
            assert d["classes"][c]["temperature"] == m.temperature_[i]
            assert ("award" in d["classes"][c]) == name.endswith("wa")
        np.testing.assert_allclose(sum(v["nll"] for v in d["classes"].values()), m.nll_, rtol=1e-12)


@pytest.mark.parametrize("name", FULL + BINARY)
def test_models_persist_to_json_exactly(name, mixed):
    m = fit(name, mixed, loss="brier")
    back = loads(dumps(m))
    assert type(back) is type(m) and back.get_params() == m.get_params()
    np.testing.assert_array_equal(back.temperature_, m.temperature_)
    np.testing.assert_array_equal(back.awards_, m.awards_)
    np.testing.assert_array_equal(back.predict(mixed), m.predict(mixed))
    assert back.describe() == m.describe()


def test_registry_and_needs_full():
    for name in FULL:
        assert name in topcal.available_methods() and topcal.calibrator(name).needs_full
    for name in BINARY:
        assert name in topcal.available_methods() and not topcal.calibrator(name).needs_full


# ------------------------------------------------------------ data errors
def test_full_vector_methods_reject_top_score_data_naming_the_binary_variant(mixed, fitted):
    tops = TopLabelData.from_scores(mixed.pred, mixed.score, mixed.labels, classes=mixed.classes)
    for name, alt in (("sts", "bts"), ("csts", "bts"), ("tswa", "btswa"), ("cstswa", "btswa")):
        with pytest.raises(DataError, match=f"binary variant '{alt}'"):
            topcal.calibrator(name).fit(tops)
        with pytest.raises(DataError, match=f"'{alt}'"):
            fitted(name).predict(tops)
    assert fit("bts", tops).predict(tops).shape == (mixed.n_rows,)


def test_binary_variant_fits_binned_phanns_counts():
    data = topcal.datasets.load_phanns()
    base = nll(data, topcal.calibrator("uncalibrated").fit(data).predict(data)).overall
    for name in BINARY:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DegenerateClassWarning)
            m = topcal.calibrator(name).fit(data)
        c = m.predict(data)
        assert np.all((c >= 0) & (c <= 1))
        assert nll(data, c).overall < base
        # the fit is weighted by the counts: the per-class NLL it reports is the metric's
        np.testing.assert_allclose(m.nll_ / data.n_samples, nll(data, c).overall, rtol=1e-6)


@pytest.mark.slow
def test_demo_runs_the_binary_variants_and_skips_the_full_vector_methods(demo_run, mixed):
    from topcal.evaluate import fit_methods

    # topcal demo, run once for the session (conftest's demo_run): its per-class table's header
    header = [line for line in demo_run[1].splitlines() if line.startswith("class")][0].split()
    assert "bts" in header and "btswa" in header
    assert not set(FULL) & set(header)
    # the library call behind it: full-vector methods are listed as skipped on top-score data ...
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DegenerateClassWarning)
        fitted, skipped = fit_methods(topcal.datasets.load_phanns(), FULL + BINARY)
    assert skipped == FULL and list(fitted) == BINARY
    # ... and run on data with full score vectors
    fitted, skipped = fit_methods(mixed, FULL + BINARY)
    assert skipped == [] and list(fitted) == FULL + BINARY


# ------------------------------------------------------- degenerate cases
def _one_sided():
    """Class a: only true positives; class b: only false positives; class c: both."""
    rng = np.random.default_rng(4)
    y = softmax(rng.normal(0, 2, size=(3_000, 3)), axis=1)
    pred = y.argmax(1)
    labels = np.where(pred == 0, 0, np.where(pred == 1, 2, np.where(rng.random(3_000) < 0.7, 2, 0)))
    return TopLabelData.from_probs(y, labels, classes=list("abc"))


def test_one_sided_classes_warn_and_run_to_the_bounds():
    data = _one_sided()
    with pytest.warns(DegenerateClassWarning, match=r"\['a', 'b'\]"):
        csts = topcal.calibrator("csts").fit(data)
    assert csts.temperature_[0] == pytest.approx(T_MIN) and csts.temperature_[1] == pytest.approx(
        T_MAX
    )
    assert T_MIN < csts.temperature_[2] < T_MAX
    c = csts.predict(data)
    ys = np.sort(data.full, axis=1)
    clear = (data.pred == 0) & (
        np.log(ys[:, -1] / ys[:, -2]) > 0.03
    )  # a top margin 1000x this is decisive
    assert clear.sum() > 900 and np.all(c[clear] > 1 - 1e-9)  # only TP: confidence 1
    np.testing.assert_allclose(c[data.pred == 1], 1 / 3, atol=0.01)  # only FP, no award: ~1/K
    with pytest.warns(DegenerateClassWarning):
        cstswa = topcal.calibrator("cstswa").fit(data)
    np.testing.assert_allclose(cstswa.awards_[:2], [AWARD_MAX, -AWARD_MAX])
    assert np.all(cstswa.predict(data)[data.pred == 1] < 1e-9)  # with an award: confidence 0
    with pytest.warns(DegenerateClassWarning):
        tswa = topcal.calibrator("tswa").fit(data)
    # tswa holds the one-sided classes' offsets A_k / T at the bound
    np.testing.assert_allclose(tswa.awards_[:2] / tswa.temperature_[:2], [OFFSET_MAX, -OFFSET_MAX])
    assert T_MIN < tswa.temperature_[0] < T_MAX
    assert tswa.describe()["classes"]["b"]["degenerate"] == "only false positives"


def test_class_never_predicted_falls_back_to_the_raw_score():
    y = np.array([[0.7, 0.2, 0.1], [0.6, 0.3, 0.1], [0.2, 0.7, 0.1], [0.1, 0.3, 0.6]])
    # rows 0-2 only: class c is never predicted
    data = TopLabelData.from_probs(np.tile(y[:3], (50, 1)), [0, 1, 1] * 50, classes=list("abc"))
    for name in FULL + BINARY:
        with pytest.warns(DegenerateClassWarning):
            m = topcal.calibrator(name).fit(data)
        assert not m.fitted_classes_[2]
        new = TopLabelData.from_probs(y[3:4], [2], classes=list("abc"))
        np.testing.assert_allclose(m.predict(new), [0.6], rtol=1e-12)
        with warnings.catch_warnings():
            warnings.simplefilter(
                "error", RuntimeWarning
            )  # a barely identified T: an unbounded interval, no warning
            described = m.describe()
        assert "fallback" in described["classes"]["c"]
        for row in described["classes"].values():
            if "temperature_90" in row:
                lo, hi = row["temperature_90"]
                assert 0.0 <= lo <= row["temperature"] <= hi


def test_clustered_top_scores_converge_to_the_group_accuracy():
    """70% of the scores are exactly 1 (a vote fraction): only (logit s + A) / T is identified
    there.

    In (log T, A) coordinates this is a curved ridge on which Newton crawls; the
    optimiser works in (log T, A / T), where it is straight.
    """
    rng = np.random.default_rng(9)
    n = 5_000
    s = np.where(rng.random(n) < 0.7, 1.0, rng.uniform(0.3, 0.99, n))
    right = rng.random(n) < np.where(s == 1.0, 0.6, s * 0.8)
    data = TopLabelData.from_scores(np.zeros(n, int), s, np.where(right, 0, 1), classes=["a", "b"])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DegenerateClassWarning)  # class b is never predicted
        m = topcal.calibrator("btswa").fit(data)
    c = m.predict(data)
    # btswa is logistic regression on logit(s): at the MLE the residuals are
    # orthogonal to 1 and to logit(s) (its score equations)
    ls = np.log(np.clip(s, 1e-12, 1 - 1e-12) / np.clip(1 - s, 1e-12, None))
    assert abs(np.sum(right - c)) < 1e-6 * n
    assert abs(np.sum((right - c) * ls)) < 1e-6 * n
    assert m.n_iter_ < 60


def test_brier_fit_on_saturated_scores_moves_the_temperature():
    """From T = 1 on very sharp scores the Brier loss is flat; the fit starts at the NLL optimum."""
    rng = np.random.default_rng(10)
    z = rng.normal(0, 40.0, size=(4_000, 3))
    labels = np.argmax(z / 20.0 + rng.gumbel(size=z.shape), axis=1)  # true temperature 20
    data = TopLabelData.from_logits(z, labels)
    m = fit("sts", data, loss="brier")
    assert 12.0 < m.temperature_[0] < 30.0
    brier = topcal.metrics.brier
    assert brier(data, m.predict(data)).overall < 0.8 * brier(data, data.score).overall


# ------------------------------------------------------- parameter errors
def test_parameter_and_convergence_errors(mixed):
    with pytest.raises(ParameterError, match="'loss' must be one of 'nll', 'brier', got 'log'"):
        topcal.calibrator("csts", loss="log").fit(mixed)
    with pytest.raises(ParameterError, match="needs loss='nll'"):
        topcal.calibrator("sts", objective="multinomial", loss="brier").fit(mixed)
    with pytest.raises(ParameterError, match="max_iter"):
        topcal.calibrator("tswa", max_iter=0).fit(mixed)
    # Newton stopped by max_iter falls back to L-BFGS-B with a warning (never an abort)
    with pytest.warns(DegenerateClassWarning, match="max_iter=1.*L-BFGS-B"):
        short = topcal.calibrator("tswa", max_iter=1).fit(mixed)
    full = topcal.calibrator("tswa").fit(mixed)
    assert short.nll_ <= full.nll_ * (1 + 1e-4)


@pytest.mark.parametrize("method", ["bts", "btswa"])
def test_binary_variants_have_a_curve_that_is_their_prediction(method):
    data = simulate(3000, 4, [0.6, 1.0, 1.6, 2.2], [0.0, 0.3, -0.2, 0.1], seed=8)
    top = TopLabelData.from_scores(
        np.asarray(data.classes)[data.pred],
        data.score,
        np.asarray(data.classes)[data.labels],
        classes=data.classes,
    )
    model = topcal.calibrator(method).fit(top)
    s = np.linspace(0.2, 1.0, 57)
    for k in range(4):
        c = model.curve(k, s)
        rows = TopLabelData.from_scores(np.full(s.size, data.classes[k]), s, classes=data.classes)
        np.testing.assert_array_equal(c.confidence, model.predict(rows))
        assert c.support == top.class_support(k) and c.class_name == data.classes[k]
    assert model.curve(data.classes[1]).score.size == 401
    back = loads(dumps(model))
    assert back.support_ == model.support_
    np.testing.assert_array_equal(back.curve(2, s).confidence, model.curve(2, s).confidence)
    # files saved before the binary curves stored no support: they load, with support unknown
    doc = model.to_dict()
    del doc["state"]["support"]
    old = type(model).from_dict(doc)
    assert old.curve(0, s).support is None
    np.testing.assert_array_equal(old.curve(0, s).confidence, model.curve(0, s).confidence)


def test_full_vector_variants_have_no_curve():
    data = simulate(1500, 3, [1.5, 1.5, 1.5], [0.0, 0.0, 0.0], seed=9)
    model = topcal.calibrator("sts").fit(data)
    with pytest.raises(ParameterError, match="full score vector"):
        model.curve(0)
