"""Label shift (issue 12): prior estimation, adaptation, persistence, CLI."""

import json
import warnings

import numpy as np
import pandas as pd
import pytest

import topcal
from topcal import metrics, persist
from topcal.evidence.confusion import ConfusionStats
from topcal.data import TopLabelData
from topcal.errors import DataError, ModelFileError, ParameterError, TopcalError
from topcal.labelshift import (
    AdaptedCalibrator,
    PriorEstimate,
    adapt,
    adapt_confidence,
    bbse_priors,
    bcts_probs,
    choose_shrink,
    em_priors,
    estimate_priors,
    fit_bcts,
    source_posteriors,
)
from topcal.labelshift.estimators import FP_PSEUDOCOUNT, PRIOR_STRENGTH, shrunk_fp_mix
from topcal.labelshift.safety import CellMix
from topcal.persist import loads

from _frames import dense_layout, format_4_text, run
from _sim import with_weights

K = 4
NAMES = ["ant", "bee", "cow", "dog"]
SOURCE = np.full(K, 0.25)


def shifted(n, priors, seed, *, sep=1.6, labels=True):
    """A classifier that is exactly calibrated for uniform priors, on data with class priors
    ``priors``.

    x | y ~ N(sep e_y, I) in K dimensions (p(x | y) never changes); the
    probabilities are the Bayes posterior under uniform priors.
    """
    rng = np.random.default_rng(seed)
    y = rng.choice(K, size=n, p=priors)
    x = rng.normal(size=(n, K))
    x[np.arange(n), y] += sep
    logits = sep * x  # x . mu_y - |mu_y|^2 / 2, the last term the same for every class
    p = np.exp(logits - logits.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    return TopLabelData.from_probs(p, y if labels else None, NAMES), y


@pytest.fixture(scope="module")
def source():
    return shifted(20000, SOURCE, 0)[0]


@pytest.fixture(scope="module")
def hist(source):
    return topcal.calibrator("hist").fit(source)


TARGET = np.array([0.55, 0.25, 0.15, 0.05])


# ------------------------------------------------------------ estimators
def test_em_and_bbse_recover_priors_from_exact_inputs():
    rng = np.random.default_rng(1)
    C = rng.uniform(0.1, 1.0, size=(K, K)) + 3 * np.eye(K)  # (prediction, true class) counts
    mu = (C / C.sum(0)) @ TARGET
    np.testing.assert_allclose(bbse_priors(C, mu * 1000, SOURCE), TARGET, atol=1e-10)
    # EM on exact posteriors of a discrete feature with known likelihoods lik[y, v] = p(v | y):
    # the use set holds each feature value v with its exact frequency under TARGET
    lik = np.array(
        [
            [0.8, 0.1, 0.05, 0.05],
            [0.1, 0.7, 0.1, 0.1],
            [0.05, 0.1, 0.8, 0.05],
            [0.05, 0.1, 0.05, 0.8],
        ]
    )
    freq = TARGET @ lik
    counts = np.round(20000 * freq).astype(int)
    post = (lik * SOURCE[:, None]).T
    post /= post.sum(1, keepdims=True)  # post[v, y] = P_s(y | v)
    est = em_priors(post[np.repeat(np.arange(K), counts)], SOURCE)
    assert np.abs(est - TARGET).max() < 2e-3
    # MAP with a Dirichlet pull towards the source lands between the two
    pulled = em_priors(post[np.repeat(np.arange(K), counts)], SOURCE, prior_strength=2000)
    assert np.abs(pulled - SOURCE).sum() < 0.7 * np.abs(est - SOURCE).sum()
    assert np.all(np.sign(pulled - SOURCE)[[0, 2, 3]] == np.sign(TARGET - SOURCE)[[0, 2, 3]])


@pytest.mark.slow
def test_estimates_converge_as_n_grows(hist):
    for estimator in ("em", "bbse"):
        errs = {}
        for n in (300, 30000):
            e = [
                np.abs(
                    estimate_priors(
                        hist,
                        shifted(n, TARGET, s, labels=False)[0],
                        estimator=estimator,
                        n_bootstrap=0,
                        prior_strength=0,
                    ).priors
                    - TARGET
                ).max()
                for s in (11, 12, 13)
            ]
            errs[n] = np.mean(e)
        assert errs[30000] < errs[300] / 3, (estimator, errs)
        assert errs[30000] < 0.02, (estimator, errs)


@pytest.mark.slow
def test_bootstrap_interval_brackets_estimate_and_truth(hist):
    use = shifted(4000, TARGET, 21, labels=False)[0]
    est = estimate_priors(hist, use, n_bootstrap=30, seed=3)
    assert (
        est.lower is not None
        and np.all(est.lower <= est.priors + 1e-12)
        and np.all(est.priors <= est.upper + 1e-12)
    )
    assert np.all(est.lower < TARGET + 0.01) and np.all(TARGET - 0.01 < est.upper)
    assert np.all(est.upper - est.lower > 0)
    again = estimate_priors(hist, use, n_bootstrap=30, seed=3)
    np.testing.assert_array_equal(again.lower, est.lower)  # seeded


def test_no_shift_means_no_change(hist, source):
    use = shifted(30000, SOURCE, 5)[0]
    est = estimate_priors(hist, use.without_labels(), n_bootstrap=0)
    assert np.abs(est.priors - SOURCE).max() < 0.02  # 10-bin histograms are not exactly calibrated
    same = adapt(hist, priors=hist.evidence_.confusion.source_priors())
    np.testing.assert_allclose(same.predict(use), hist.predict(use), rtol=0, atol=1e-12)
    np.testing.assert_array_equal(same.weights_, np.ones(K))


def test_no_shift_by_default_changes_confidences_little(hist, source):
    use = shifted(30000, SOURCE, 5)[0]
    ad = adapt(hist, use.without_labels(), n_bootstrap=0)  # estimated priors, safety step "auto"
    raw = adapt(hist, use.without_labels(), n_bootstrap=0, shrink=1.0)
    moved = np.abs(ad.predict(use) - hist.predict(use))
    assert (
        moved.max() < 0.03 and moved.mean() < 0.01
    )  # estimates within ~0.02 of the truth, see above
    assert moved.mean() <= np.abs(raw.predict(use) - hist.predict(use)).mean()
    assert np.abs(ad.weights_ - 1.0).max() < 0.08


# ------------------------------------------------------------ safety step
def test_safety_step_keeps_an_unreliable_estimate_from_doing_harm():
    """A weak classifier (sep 0.3): the raw estimates raise the use set's NLL; the safety step sees
    it
    in simulation and leaves the model as it is, saying why."""
    src = shifted(2000, SOURCE, 0, sep=0.3)[0]
    model = topcal.calibrator("hist", n_bins=5).fit(src)
    use = shifted(100, TARGET, 8, sep=0.3)[0]
    before = metrics.nll(use, model.predict(use)).overall
    for estimator in ("em", "bbse"):
        raw = adapt(model, use.without_labels(), estimator=estimator, n_bootstrap=0, shrink=1.0)
        assert metrics.nll(use, raw.predict(use)).overall > before + 0.1
        safe = adapt(model, use.without_labels(), estimator=estimator, n_bootstrap=0)
        assert safe.estimate_.shrink == 0.0 and "not adapted" in safe.estimate_.shrink_reason
        np.testing.assert_array_equal(safe.predict(use), model.predict(use))
        np.testing.assert_array_equal(safe.estimate_.estimated, raw.estimate_.priors)
        assert safe.describe()["label_shift"]["shrink"] == 0.0


def test_safety_step_trusts_a_good_estimate(hist):
    use = shifted(3000, TARGET, 8)[0]
    before = metrics.nll(use, hist.predict(use)).overall
    for estimator in ("em", "bbse"):
        ad = adapt(hist, use.without_labels(), estimator=estimator, n_bootstrap=0)
        assert ad.estimate_.shrink >= 0.8, ad.estimate_.shrink_reason
        assert metrics.nll(use, ad.predict(use)).overall < before - 0.05


@pytest.mark.parametrize("K_, m, all_fp_one_class", [(2, 3, True), (5, 9, False), (50, 120, False)])
def test_sparse_cell_mix_and_em_equal_the_dense_ones(K_, m, all_fp_one_class):
    """The simulation's sparse-plus-shared-vector false-positive mix is shrunk_fp_mix's, and EM on
    it
    gives the dense posteriors' estimate (rows with no FPs, and rows whose class holds every FP of
    the test set, included)."""
    rng = np.random.default_rng(K_)
    cell_class = np.sort(rng.integers(0, K_, m))
    N = rng.poisson(0.7, (m, K_)).astype(float)
    if all_fp_one_class:
        N[:, 1] = 0.0
    N[0, :] = 0.0
    N[0, cell_class[0]] = 3.0  # a cell with no false positives
    conf = np.zeros((K_, K_))
    np.add.at(conf, cell_class, N)
    dense = shrunk_fp_mix(N, cell_class, conf, FP_PSEUDOCOUNT)
    i, j = np.nonzero(N)
    fp = j != cell_class[i]
    mix = CellMix.of(i[fp], j[fp], N[i[fp], j[fp]], cell_class, K_, N.sum(axis=0), FP_PSEUDOCOUNT)
    np.testing.assert_allclose(mix.toarray(), dense, rtol=0, atol=1e-15)
    B = rng.uniform(size=(K_, 7))
    np.testing.assert_allclose(mix.dot(B), dense @ B, rtol=1e-13)
    c = rng.uniform(0.1, 0.9, m)
    post = dense * (1.0 - c)[:, None]
    post[np.arange(m), cell_class] = c
    sparse_post = mix.posteriors(c)
    np.testing.assert_allclose(sparse_post.toarray(), post, rtol=0, atol=1e-15)
    ps = N.sum(axis=0) / N.sum()
    w = rng.integers(0, 5, m).astype(float)
    np.testing.assert_allclose(
        em_priors(sparse_post, ps, prior_strength=0.1, weights=w),
        em_priors(post, ps, prior_strength=0.1, weights=w),
        rtol=0,
        atol=1e-12,
    )


@pytest.mark.parametrize(
    "sep, n_bins, n_src, n_use, seed, estimator, factor, full",
    [
        # choose_shrink's figures before the simulation went sparse (dense (cells x classes) arrays)
        (1.6, 10, 20000, 300, 9, "em", 1.0, -0.11188651241513059),
        (1.6, 10, 20000, 300, 9, "bbse", 1.0, -0.10041509736601499),
        (
            0.3,
            5,
            2000,
            100,
            8,
            "em",
            0.0,
            None,
        ),  # dense: error 0.59 > spread 0.401; now stops after round 1
        (0.3, 5, 2000, 100, 8, "bbse", 0.0, 0.2872858023635636),
    ],
)
def test_safety_simulation_gives_the_dense_version_figures(
    sep, n_bins, n_src, n_use, seed, estimator, factor, full
):
    model = topcal.calibrator("hist", n_bins=n_bins).fit(shifted(n_src, SOURCE, 0, sep=sep)[0])
    use = shifted(n_use, TARGET, seed, sep=sep, labels=False)[0]
    est = estimate_priors(model, use, estimator=estimator, n_bootstrap=0, shrink=1.0)
    got = choose_shrink(
        model.evidence_.confusion,
        est.priors,
        n_use,
        estimator=estimator,
        prior_strength=PRIOR_STRENGTH[estimator],
        fp_pseudocount=FP_PSEUDOCOUNT,
        seed=3,
    )
    assert got.factor == factor
    if full is None:
        assert "spread of the estimate 0.401 is within the simulated error 0.59" in got.reason
    else:
        assert got.nll_change_full == pytest.approx(
            full, rel=1e-8
        )  # EM's path may differ by rounding


def test_moment_reading_adapts_where_the_error_at_the_estimate_sees_only_noise():
    """bbse's safety step reads the estimator's error at the moment-consistent truth (simulated with
    no
    shift and at the estimate, A = t^2 A + e(t)). On this weak classifier the error read at the
    estimate alone overstates it (the shift it simulates is too small to pay: not adapted), while
    the
    moment reading moves part of the way and lowers the use set's NLL; the rounds use common random
    numbers, so it is reproducible."""
    model = topcal.calibrator("hist", n_bins=5).fit(shifted(2000, SOURCE, 0, sep=0.6)[0])
    use = shifted(300, TARGET, 3, sep=0.6)[0]
    est = estimate_priors(model, use.without_labels(), estimator="bbse", n_bootstrap=0, shrink=1.0)
    kw = dict(
        estimator="bbse", prior_strength=PRIOR_STRENGTH["bbse"], fp_pseudocount=FP_PSEUDOCOUNT
    )
    old = choose_shrink(model.evidence_.confusion, est.priors, 300, truth="estimate", **kw)
    new = choose_shrink(model.evidence_.confusion, est.priors, 300, truth="moment", **kw)
    assert old.factor == 0.0 and "not adapted" in old.reason
    assert 0.0 < new.factor < 1.0 and "with no shift and" in new.reason
    assert choose_shrink(model.evidence_.confusion, est.priors, 300, truth="moment", **kw) == new
    ad = adapt(
        model, use.without_labels(), estimator="bbse", n_bootstrap=0
    )  # bbse's default reading
    assert ad.estimate_.shrink == new.factor
    before = metrics.nll(use, model.predict(use)).overall
    assert metrics.nll(use, ad.predict(use)).overall < before - 0.01
    with pytest.raises(ParameterError, match="truth must be one of"):
        choose_shrink(model.evidence_.confusion, est.priors, 300, truth="median", **kw)


def test_safety_step_does_not_adapt_when_the_estimate_is_within_its_noise(hist):
    """No shift: the estimate's spread is the estimator's noise, so the simulated truth is no shift
    and
    lam is 0 (before that rule, round 2 could still pick lam 0.05-0.1 for the gain of moving the
    resample's own noisy frequencies towards the truth)."""
    use = shifted(400, SOURCE, 11, labels=False)[0]
    for estimator in ("em", "bbse"):
        ad = adapt(hist, use, estimator=estimator, n_bootstrap=0)
        assert ad.estimate_.shrink == 0.0
        assert "no shift to adapt to" in ad.estimate_.shrink_reason
        np.testing.assert_array_equal(ad.predict(use), hist.predict(use))


def test_not_adapting_skips_the_bootstrap_its_interval_would_not_use(hist, monkeypatch):
    """Where the safety step chooses 0 the interval is the source priors whatever the
    resamples say ((1 - 0) ps + 0 x lower), so no resample is run; where it adapts, they are."""
    from topcal.labelshift import estimates as est_mod

    use = shifted(400, SOURCE, 11, labels=False)[0]
    ps = hist.evidence_.confusion.source_priors()
    calls = []
    real = est_mod.bootstrap
    monkeypatch.setattr(est_mod, "bootstrap", lambda *a: calls.append(1) or real(*a))
    for shrink in ("auto", 0.0):
        e = estimate_priors(hist, use, n_bootstrap=20, shrink=shrink)
        assert e.shrink == 0.0 and e.n_bootstrap == 20
        np.testing.assert_array_equal(e.lower, ps)
        np.testing.assert_array_equal(e.upper, ps)
        np.testing.assert_array_equal(e.priors, ps)
    assert calls == []
    ad = adapt(hist, use, n_bootstrap=20)
    assert "no resample" in ad.describe()["label_shift"]["interval"]
    half = estimate_priors(hist, use, n_bootstrap=20, shrink=0.5)
    assert calls == [1] and np.any(half.lower != half.upper)


def test_shrink_moves_priors_and_intervals_linearly(hist):
    use = shifted(1000, TARGET, 9, labels=False)[0]
    raw = estimate_priors(hist, use, n_bootstrap=10, shrink=1.0)
    half = estimate_priors(hist, use, n_bootstrap=10, shrink=0.5)
    ps = hist.evidence_.confusion.source_priors()
    assert raw.shrink == 1.0 and raw.estimated is None
    np.testing.assert_allclose(half.priors, (ps + raw.priors) / 2, rtol=1e-12)
    np.testing.assert_allclose(half.lower, (ps + raw.lower) / 2, rtol=1e-12)
    np.testing.assert_array_equal(half.estimated, raw.priors)
    none = adapt(hist, use, n_bootstrap=0, shrink=0)
    np.testing.assert_array_equal(none.predict(use), hist.predict(use))


def test_shrink_parameter_errors(hist):
    use = shifted(200, TARGET, 9, labels=False)[0]
    for bad in (1.5, -0.1, "yes", True, float("nan"), None):
        with pytest.raises(ParameterError, match="shrink"):
            adapt(hist, use, shrink=bad)
    with pytest.raises(ParameterError, match="given priors"):
        adapt(hist, priors=TARGET, shrink=0.5)


def test_user_priors_reproduce_the_closed_form():
    data = shifted(400, SOURCE, 2)[0]  # few false positives per class: one score region each
    model = topcal.calibrator("hist", n_bins=5).fit(data)
    assert all(e.size == 0 for e in model.evidence_.confusion.edges)
    pri = {"ant": 0.4, "bee": 0.3, "cow": 0.2, "dog": 0.1}
    ad = adapt(model, priors=pri, fp_pseudocount=0)
    cm = np.zeros((K, K))
    np.add.at(cm, (data.pred, data.labels), 1.0)  # predicted x true, counted here independently
    ps = cm.sum(0) / cm.sum()
    w = np.array(list(pri.values())) / ps
    c = model.predict(data)
    fp = cm.copy()
    np.fill_diagonal(fp, 0.0)
    wbar = (fp @ w) / fp.sum(1)
    k = data.pred
    expected = w[k] * c / (w[k] * c + wbar[k] * (1 - c))
    np.testing.assert_allclose(ad.predict(data), expected, rtol=1e-13, atol=0)
    np.testing.assert_allclose(ad.weights_, w, rtol=1e-13)


def test_adapted_confidence_lowers_nll_under_shift(hist):
    use = shifted(6000, TARGET, 8)[0]
    ad = adapt(hist, use.without_labels(), n_bootstrap=0)
    before = metrics.nll(use, hist.predict(use)).overall
    after = metrics.nll(use, ad.predict(use)).overall
    oracle = metrics.nll(use, adapt(hist, priors=TARGET).predict(use)).overall
    assert after < before - 0.01 and oracle < before - 0.01
    new, prob = ad.redecide(use)
    assert np.mean(new == use.labels) >= np.mean(use.pred == use.labels)
    assert np.all((prob >= 0) & (prob <= 1))
    post = ad.posterior(use)
    np.testing.assert_allclose(post.sum(1), 1.0, atol=1e-12)
    np.testing.assert_allclose(post[np.arange(use.n_rows), use.pred], ad.predict(use), atol=1e-15)


def test_adapt_confidence_edges():
    np.testing.assert_allclose(
        adapt_confidence([0.0, 1.0, 0.5, 0.5], [2.0, 2.0, 0.0, 0.0], [1.0, 1.0, 1.0, 0.0]),
        [0.0, 1.0, 0.0, 0.5],
    )


def test_bcts_recovers_temperature_and_em_on_vectors():
    rng = np.random.default_rng(4)
    n = 20000
    z = rng.normal(0, 2.0, size=(n, K))
    b0 = np.array([0.3, -0.2, 0.0, -0.1])
    true_p = np.exp(z / 2.0 + b0)
    true_p /= true_p.sum(1, keepdims=True)
    y = (true_p.cumsum(1) > rng.random(n)[:, None]).argmax(1)
    data = TopLabelData.from_logits(z, y, NAMES)
    T, b = fit_bcts(data)
    assert abs(T - 2.0) < 0.1
    assert np.abs((b - b.mean()) - (b0 - b0.mean())).max() < 0.08
    np.testing.assert_allclose(bcts_probs(data, T, b).mean(0), np.bincount(y) / n, atol=1e-4)


def test_em_with_source_data_runs_on_bcts_vectors(hist, source):
    use = shifted(8000, TARGET, 9, labels=False)[0]
    est = estimate_priors(hist, use, source_data=source, n_bootstrap=0, prior_strength=0)
    assert est.basis == "BCTS full vectors"
    assert np.abs(est.priors - TARGET).max() < 0.02
    with pytest.raises(ParameterError, match="em"):
        estimate_priors(hist, use, estimator="bbse", source_data=source)


def test_temperature_model_uses_its_full_vectors(source):
    sts = topcal.calibrator("sts").fit(source)
    use = shifted(3000, TARGET, 10, labels=False)[0]
    P = source_posteriors(sts, use)
    np.testing.assert_allclose(P[np.arange(use.n_rows), use.pred], sts.predict(use), atol=1e-12)
    assert estimate_priors(sts, use, n_bootstrap=0).basis == "temperature-scaled full vectors"


def test_top_score_only_model_adapts(source):
    top = TopLabelData.from_scores(source.pred, source.score, source.labels, NAMES)
    model = topcal.calibrator("hist").fit(top)
    use_full = shifted(8000, TARGET, 14)[0]
    use = TopLabelData.from_scores(use_full.pred, use_full.score, use_full.labels, NAMES)
    for estimator in ("em", "bbse"):
        ad = adapt(model, use.without_labels(), estimator=estimator, n_bootstrap=0)
        assert np.abs(ad.estimate_.priors - TARGET).max() < 0.05
        assert (
            metrics.nll(use, ad.predict(use)).overall < metrics.nll(use, model.predict(use)).overall
        )


def test_calibrator_adapt_method_leaves_model_unchanged(hist):
    use = shifted(2000, TARGET, 15, labels=False)[0]
    before = hist.to_dict()
    ad = hist.adapt(use, n_bootstrap=0)
    assert isinstance(ad, AdaptedCalibrator) and ad.base_ is hist
    assert hist.to_dict() == before
    again = adapt(ad, priors=SOURCE)  # re-adapting starts from the source model
    assert again.base_ is hist


# ---------------------------------------------------------------- errors
def test_use_set_with_unseen_class_is_an_error_naming_it(hist):
    p = np.full((5, K + 1), 0.1)
    p[:, 0] = 0.6
    use = TopLabelData.from_probs(p, classes=NAMES + ["emu"])
    with pytest.raises(DataError, match="'emu'"):
        adapt(hist, use)
    with pytest.raises(DataError, match="'emu'"):
        adapt(hist, priors={"ant": 0.5, "emu": 0.5})


def test_prior_errors(hist):
    with pytest.raises(DataError, match="miss"):
        adapt(hist, priors={"ant": 1.0})
    with pytest.raises(DataError, match="sum to"):
        adapt(hist, priors=[0.5, 0.5, 0.5, 0.5])
    with pytest.raises(DataError, match="'bee'"):
        adapt(hist, priors=[0.5, -0.1, 0.3, 0.3])
    with pytest.raises(ParameterError, match="exactly one"):
        adapt(hist)
    with pytest.raises(ParameterError, match="estimator"):
        adapt(hist, shifted(50, SOURCE, 1, labels=False)[0], estimator="rlls")
    never = shifted(300, [0.5, 0.5, 0.0, 0.0], 3)[0]
    m = topcal.calibrator("hist").fit(never)
    with pytest.raises(DataError, match=r"\['cow'\]"):
        adapt(m, priors=[0.4, 0.4, 0.2, 0.0])


def test_binned_model_cannot_adapt():
    model = topcal.calibrator("hist").fit(topcal.datasets.load_phanns())
    assert model.evidence_.confusion is None
    with pytest.raises(DataError, match="binned"):
        adapt(model, priors=np.full(11, 1 / 11))


def test_adapted_model_refuses_fit(hist, source):
    with pytest.raises(TopcalError, match="not refitted"):
        adapt(hist, priors=TARGET).fit(source)


# ------------------------------------------------------------ persistence
def test_adapted_model_round_trips(hist, tmp_path):
    use = shifted(2000, TARGET, 16)[0]
    ad = adapt(hist, use.without_labels(), n_bootstrap=20)
    path = tmp_path / "a.json"
    ad.save(path)
    back = topcal.load(path)
    assert isinstance(back, AdaptedCalibrator)
    np.testing.assert_array_equal(back.predict(use), ad.predict(use))
    np.testing.assert_array_equal(back.estimate_.lower, ad.estimate_.lower)
    d = back.describe()
    assert d["method"] == "hist" and d["label_shift"]["estimator"] == "em"
    info = d["classes"]["ant"]
    assert info["source_prior"] == pytest.approx(hist.evidence_.confusion.source_priors()[0])
    assert len(info["use_prior_interval"]) == 2
    curve = back.curve("ant")
    assert curve.confidence.shape == curve.score.shape
    half = adapt(hist, use.without_labels(), n_bootstrap=0, shrink=0.5)
    half.save(tmp_path / "h.json")
    again = topcal.load(tmp_path / "h.json")
    np.testing.assert_array_equal(again.predict(use), half.predict(use))
    np.testing.assert_array_equal(again.estimate_.estimated, half.estimate_.estimated)
    assert (
        again.estimate_.shrink == 0.5
        and again.describe()["label_shift"]["shrink_reason"] == "given (shrink=0.5)"
    )
    assert "estimated_prior" in again.describe()["classes"]["ant"]


def test_adapted_file_from_before_the_safety_step_loads(hist):
    use = shifted(500, TARGET, 16)[0]
    ad = adapt(hist, use.without_labels(), n_bootstrap=0, shrink=1.0)
    d = json.loads(json.dumps(ad.to_dict()))
    for key in ("shrink", "shrink_reason", "estimated"):
        del d["state"]["estimate"][key]
    old = AdaptedCalibrator.from_dict(d)
    assert old.estimate_.shrink == 1.0 and old.estimate_.estimated is None
    np.testing.assert_array_equal(old.predict(use), ad.predict(use))
    d["state"]["estimate"]["shrink"] = 2.0
    with pytest.raises(ModelFileError):
        AdaptedCalibrator.from_dict(d)


def test_old_model_file_without_confusion_still_loads(hist, tmp_path):
    d = hist.to_dict()
    assert "confusion" in d["evidence"]
    del d["evidence"]["confusion"]
    old = type(hist).from_dict(d)
    np.testing.assert_array_equal(
        old.predict(shifted(100, SOURCE, 1)[0]), hist.predict(shifted(100, SOURCE, 1)[0])
    )
    assert old.evidence_.confusion is None
    with pytest.raises(DataError, match="true classes"):
        adapt(old, priors=TARGET)


def test_malformed_confusion_is_a_model_file_error(hist):
    d = json.loads(json.dumps(hist.to_dict()))
    good = d["evidence"]["confusion"]
    bad = [
        {"class": [99] + good["class"][1:]},  # a class index out of range
        {"count": [-1.0] + good["count"][1:]},
        {"count": [float("nan")] + good["count"][1:]},
        {"class": [0.5] + good["class"][1:]},
        {"cell": [10**6] + good["cell"][1:]},  # a cell no class has
        {"cell": good["cell"][::-1], "class": good["class"][::-1]},  # out of order
        {"count": good["count"][1:]},  # lists of different lengths
        {"edged": [0], "edges": [[0.5, 0.4]]},  # decreasing edges
        {"layout": "dense-v9"},
    ]
    for change in bad:
        d["evidence"]["confusion"] = {**good, **change}
        with pytest.raises(ModelFileError):
            type(hist).from_dict(d)
    # the older dense layout, in a file of an earlier format: checked as before by its migration
    old = dense_layout(hist.evidence_.confusion)
    n_regions = len(hist.evidence_.confusion.edges[0]) + 1
    changes = [
        *(
            [[[pair]] + [[]] * (n_regions - 1)]
            for pair in ([99, 1.0], [0, -1.0], [0.5, 1.0], [1, "x"], [True, 1.0])
        ),
        [[[]] * (n_regions + 1)],  # one region too many
    ]
    for counts in changes:
        bad = json.loads(json.dumps(old))
        bad["counts"][0] = counts[0]
        with pytest.raises(ModelFileError):
            loads(format_4_text(hist, bad))
    with pytest.raises(ModelFileError):  # a class too few
        loads(format_4_text(hist, {"edges": old["edges"][1:], "counts": old["counts"][1:]}))
    with pytest.raises(ModelFileError):  # decreasing edges
        loads(format_4_text(hist, {**old, "edges": [[0.5, 0.4]] + old["edges"][1:]}))


def test_confusion_stats_sparse_round_trip(source):
    stats = ConfusionStats.from_data(source)
    d = json.loads(json.dumps(stats.to_dict()))
    back = ConfusionStats.from_dict(d, stats.classes)
    for a, b in zip(stats.counts, back.counts):
        np.testing.assert_array_equal(a, b)
    assert len(d["count"]) == sum(int((c > 0).sum()) for c in stats.counts)


def test_old_dense_confusion_in_a_model_file_still_loads(hist, source):
    """A format-4 file whose counts are in the dense per-class layout (a model loaded from an
    older file and saved again) loads through persist.migrate: the same counts, the same
    adapted predictions, and thresholds chosen for the file still name the model."""
    text = format_4_text(hist, dense_layout(hist.evidence_.confusion))
    old = loads(text)
    assert persist.digests(old) == (persist.digests(hist)[0], json.loads(text)["sha256"])
    np.testing.assert_array_equal(
        old.evidence_.confusion.confusion(), hist.evidence_.confusion.confusion()
    )
    use = shifted(500, TARGET, 3, labels=False)[0]
    a = adapt(old, use, n_bootstrap=0, shrink=1.0).predict(use)
    np.testing.assert_array_equal(a, adapt(hist, use, n_bootstrap=0, shrink=1.0).predict(use))


def test_confusion_stats_regions(source):
    stats = ConfusionStats.from_data(source, min_fp_per_region=100, max_regions=3)
    conf = stats.confusion()
    cm = np.zeros((K, K))
    np.add.at(cm, (source.pred, source.labels), 1.0)
    np.testing.assert_array_equal(conf, cm)
    assert any(e.size == 2 for e in stats.edges)  # enough FPs for three regions somewhere
    for k in range(K):
        fp = stats.counts[k].sum(1) - stats.counts[k][:, k]
        assert np.all(fp > 0)


@pytest.mark.parametrize("weighted", [False, True])
def test_confusion_counts_equal_a_class_by_class_count(source, weighted):
    """from_data counts all rows in one pass; the naive reading, class by class with
    searchsorted over that class's rows, gives the same edges and counts bit for bit."""
    from topcal.evidence.confusion import class_region_edges

    data = source
    if weighted:  # non-unit weights: the weighted-quantile path and float sums
        data = with_weights(data, np.random.default_rng(3).uniform(0.1, 3.0, data.n_rows))
    stats = ConfusionStats.from_data(data, min_fp_per_region=60, max_regions=4)
    w = data.tp + data.fp
    for k in range(data.n_classes):
        rows = np.flatnonzero(data.pred == k)
        s, lab, wk = data.score[rows], data.labels[rows], w[rows]
        e = class_region_edges(s[lab != k], wk[lab != k], 60, 4)
        np.testing.assert_array_equal(stats.edges[k], e)
        region = np.searchsorted(e, s, side="left")
        want = np.zeros((e.size + 1, data.n_classes))
        for r, j, x in zip(region, lab, wk):  # in row order, as bincount adds
            want[r, j] += x
        np.testing.assert_array_equal(stats.counts[k], want)
    again = stats.count(data)
    for a, b in zip(stats.counts, again.counts):
        np.testing.assert_array_equal(a, b)


def test_prior_estimate_reuse_across_models(hist, source):
    kde = topcal.calibrator("cum").fit(source)
    use = shifted(2000, TARGET, 17, labels=False)[0]
    est = estimate_priors(hist, use, n_bootstrap=10)
    ad = adapt(kde, priors=est)
    assert ad.estimate_ is est
    other = topcal.calibrator("hist").fit(shifted(500, SOURCE, 99)[0])
    with pytest.raises(DataError, match="other test data"):
        adapt(other, priors=est)
    assert isinstance(est, PriorEstimate)


# ---------------------------------------------------------------------- CLI
@pytest.fixture
def files(tmp_path):
    src, _ = shifted(3000, SOURCE, 30)
    use, _ = shifted(1500, TARGET, 31)
    names = np.array(NAMES)

    def frame(d, labels):
        f = pd.DataFrame({f"p_{c}": d.full[:, i] for i, c in enumerate(NAMES)})
        if labels:
            f["label"] = names[d.labels]
        return f

    frame(src, True).to_csv(tmp_path / "test.csv", index=False)
    frame(use, False).to_csv(tmp_path / "use.csv", index=False)
    pd.DataFrame({"class": NAMES, "prior": TARGET}).to_csv(tmp_path / "P.csv", index=False)
    return tmp_path


@pytest.mark.slow
def test_cli_adapt_describe_apply(files, capsys):
    t = files
    assert run(["fit", t / "test.csv", "--method", "hist", "-o", t / "m.json"], capsys)[0] == 0
    code, out, err = run(
        ["adapt", t / "m.json", t / "use.csv", "-o", t / "a.json", "--bootstrap", "20"], capsys
    )
    assert code == 0, err
    assert "em on 1500 rows" in out and "lower" in out and "safety step: moved" in out
    code, out, _ = run(["describe", t / "a.json", "--full"], capsys)  # the full text (issue 34)
    assert code == 0 and "label_shift:" in out and "use_prior_interval" in out
    code, out, err = run(["apply", t / "a.json", t / "use.csv", "-o", t / "out.csv"], capsys)
    assert code == 0, err
    conf = pd.read_csv(t / "out.csv")["confidence"].to_numpy()
    model = topcal.load(t / "a.json")
    use = topcal.read_data(t / "use.csv", label_column=None)
    np.testing.assert_allclose(conf, model.predict(use), rtol=1e-12)
    code, out, _ = run(
        [
            "adapt",
            t / "m.json",
            t / "use.csv",
            "-o",
            t / "s.json",
            "--shrink",
            "0.25",
            "--bootstrap",
            "0",
        ],
        capsys,
    )
    assert code == 0 and "moved 25%" in out and topcal.load(t / "s.json").estimate_.shrink == 0.25
    code, out, err = run(
        ["adapt", t / "m.json", "-o", t / "g.json", "--priors", t / "P.csv"], capsys
    )
    assert code == 0, err
    np.testing.assert_allclose(topcal.load(t / "g.json").estimate_.priors, TARGET)
    code, out, err = run(
        [
            "adapt",
            t / "m.json",
            t / "use.csv",
            "-o",
            t / "b.json",
            "--estimator",
            "bbse",
            "--test",
            t / "test.csv",
        ],
        capsys,
    )
    assert code == 2 and err.startswith("error:") and "em" in err
    code, out, err = run(
        [
            "adapt",
            t / "m.json",
            t / "use.csv",
            "-o",
            t / "c.json",
            "--test",
            t / "test.csv",
            "--bootstrap",
            "0",
        ],
        capsys,
    )
    assert code == 0 and "BCTS" in out


@pytest.mark.slow
def test_describe_of_an_adapted_auto_model_shows_the_priors(files, capsys):
    """auto's text switches to the chosen model; the adaptation wrapped around it must not
    vanish."""
    t = files
    assert run(["fit", t / "test.csv", "--method", "auto", "-o", t / "m.json"], capsys)[0] == 0
    assert run(["adapt", t / "m.json", "-o", t / "a.json", "--priors", t / "P.csv"], capsys)[0] == 0
    code, out, _ = run(["describe", t / "a.json", "--full"], capsys)  # the full text (issue 34)
    assert code == 0 and "chosen model:" in out and "label_shift: adapted=True" in out
    assert out.count("use_prior:") == len(NAMES) and out.count("cv_nll_uncalibrated:") == len(NAMES)


def test_cli_adapt_errors(files, capsys):
    t = files
    run(["fit", t / "test.csv", "--method", "hist", "-o", t / "m.json"], capsys)
    f = pd.read_csv(t / "use.csv")
    f["p_emu"] = 0.0
    f.to_csv(t / "bad.csv", index=False)
    code, _, err = run(["adapt", t / "m.json", t / "bad.csv", "-o", t / "x.json"], capsys)
    assert code == 2 and "'emu'" in err and "Traceback" not in err
    code, _, err = run(["adapt", t / "m.json", "-o", t / "x.json"], capsys)
    assert code == 2 and "--priors" in err
    code, _, err = run(
        ["adapt", t / "m.json", t / "use.csv", "-o", t / "x.json", "--bootstrap", "-1"], capsys
    )
    assert code == 2 and "--bootstrap" in err
    for bad in ("x", "1.5"):
        code, _, err = run(
            ["adapt", t / "m.json", t / "use.csv", "-o", t / "x.json", "--shrink", bad], capsys
        )
        assert code == 2 and "shrink" in err and "Traceback" not in err
    (t / "Q.csv").write_text("class,prior\nant,0.5\nant,0.5\n")
    code, _, err = run(["adapt", t / "m.json", "-o", t / "x.json", "--priors", t / "Q.csv"], capsys)
    assert code == 2 and "twice" in err


# ------------------------------------------------------------------- report
@pytest.mark.slow
def test_label_shift_view_and_plot(hist):
    from topcal.labelshift.plots import label_shift_view, plot_label_shift

    use = shifted(3000, TARGET, 40, labels=False)[0]
    ad = adapt(hist, use, n_bootstrap=10)
    view = label_shift_view(ad, max_curves=3)
    np.testing.assert_allclose(view.priors, ad.estimate_.priors)
    assert len(view.curves) == 3 and view.lower is not None
    name, s, before, after = view.curves[0]
    assert np.mean(np.abs(after - before)) > 0.01  # the most-moved curve really moved
    fig = plot_label_shift(view)
    gids = {a.get_gid() for ax in fig.axes for a in ax.get_children()}
    assert {"priors:source", "priors:use", f"curve-after:{name}"} <= gids
    with pytest.raises(TopcalError, match="adapted"):
        label_shift_view(hist)


@pytest.mark.slow
def test_report_with_adapted_panel(files, capsys):
    t = files
    run(["fit", t / "test.csv", "--method", "hist", "-o", t / "m.json"], capsys)
    run(["adapt", t / "m.json", t / "use.csv", "-o", t / "a.json", "--bootstrap", "5"], capsys)
    code, out, err = run(
        ["report", t / "test.csv", "--methods", "hist", "--adapted", t / "a.json", "-o", t / "rep"],
        capsys,
    )
    assert code == 0, err
    assert "Label shift: hist adapted" in (t / "rep" / "index.html").read_text()
    assert any("label-shift" in p.name for p in (t / "rep" / "figures").iterdir())
    code, out, err = run(
        [
            "report",
            t / "test.csv",
            "--methods",
            "hist",
            "--adapted",
            t / "m.json",
            "-o",
            t / "rep2",
        ],
        capsys,
    )
    assert code == 2 and "topcal adapt" in err


def test_region_edges_same_by_partition_and_by_weighted_sort():
    from topcal.evidence.confusion import fp_region_edges as edges

    rng = np.random.default_rng(5)
    for _ in range(300):
        m = int(rng.integers(1, 200))
        s = np.round(rng.random(m), 2)  # many ties
        n = int(rng.integers(1, 6))
        np.testing.assert_array_equal(edges(s, np.ones(m), n), edges(s, np.full(m, 2.0), n))


def test_em_reaches_the_fixed_point_of_plain_em():
    rng = np.random.default_rng(6)
    k = 12
    P = rng.dirichlet(np.full(k, 0.3), 1500)
    P = P[rng.random(1500) < P @ rng.dirichlet(np.full(k, 0.2)) * k / 2]  # a shifted use set
    ps = np.full(k, 1 / k)
    for strength in (0.0, 0.1):
        pi = ps.copy()
        pseudo = strength * k * ps
        for _ in range(20000):  # textbook EM (Saerens et al. 2002), run to convergence
            r = P / ps * pi
            new = (r / r.sum(1, keepdims=True)).sum(0) + pseudo
            new /= new.sum()
            if np.abs(new - pi).max() < 1e-12:
                break
            pi = new
        np.testing.assert_allclose(em_priors(P, ps, prior_strength=strength), new, atol=1e-6)


def test_auto_model_adapts_and_uses_its_choice(source):
    small = source.subset(np.arange(3000))
    auto = topcal.calibrator("auto", candidates=["hist", "sts"], folds=2).fit(small)
    use = shifted(3000, TARGET, 18, labels=False)[0]
    ad = auto.adapt(use, n_bootstrap=0)
    assert np.abs(ad.estimate_.priors - TARGET).max() < 0.05
    P = source_posteriors(auto, use)
    np.testing.assert_allclose(P[np.arange(use.n_rows), use.pred], auto.predict(use), atol=1e-12)
    expected = "temperature-scaled full vectors" if auto.method_ == "sts" else "top-label posterior"
    assert ad.estimate_.basis == expected


def test_estimates_from_an_adapted_model_and_class_order(hist):
    use, _ = shifted(2000, TARGET, 19, labels=False)
    ad = adapt(hist, priors=TARGET)
    a = estimate_priors(ad, use, n_bootstrap=0)
    b = estimate_priors(hist, use, n_bootstrap=0)
    np.testing.assert_array_equal(a.priors, b.priors)
    p = use.full[:, [1, 0, 2, 3]]
    swapped = TopLabelData.from_probs(p, classes=["bee", "ant", "cow", "dog"])
    # columns named by the model's classes in another order are read by name, as predict does
    np.testing.assert_allclose(estimate_priors(hist, swapped, n_bootstrap=0).priors, b.priors)
    other = TopLabelData.from_probs(p, classes=["bee", "ant", "cow", "eel"])
    with pytest.raises(DataError, match="not the model's"):
        estimate_priors(hist, other)


def test_source_data_must_be_the_fitting_set(hist):
    other = shifted(2000, TARGET, 20)[0]
    use = shifted(500, TARGET, 21, labels=False)[0]
    with pytest.raises(DataError, match="fitted on"):
        estimate_priors(hist, use, source_data=other)


def test_label_shift_view_of_a_method_without_curves(source):
    from topcal.labelshift.plots import label_shift_view, plot_label_shift

    sts = topcal.calibrator("sts").fit(source)
    view = label_shift_view(adapt(sts, priors=TARGET))
    assert view.curves == [] and view.lower is None
    assert len(plot_label_shift(view).axes) == 1


def test_em_on_a_batch_of_weights_equals_em_on_each():
    """The bootstrap's EM runs its resamples as columns of one matrix product (issue 37): each
    column stops on its own, at the estimate EM gives for those weights alone."""
    rng = np.random.default_rng(5)
    n, K_ = 300, 6
    post = rng.dirichlet(np.full(K_, 0.4), n)
    ps = rng.dirichlet(np.full(K_, 5.0))
    W = rng.multinomial(n, np.full(n, 1 / n), size=9).astype(float)
    W[3] = 0.0
    W[3, :5] = 1.0  # a resample of five rows: converges far from the others
    batch = em_priors(post, ps, prior_strength=0.1, weights=W, init=ps[::-1] / ps.sum())
    assert batch.shape == (9, K_)
    for wb, got in zip(W, batch):
        one = em_priors(post, ps, prior_strength=0.1, weights=wb, init=ps[::-1] / ps.sum())
        # within EM's tolerance (1e-8 per step): the matrix product rounds differently from the
        # vector one, which can stop a column a step earlier or later
        np.testing.assert_allclose(got, one, rtol=0, atol=1e-7)
        tight = em_priors(post, ps, prior_strength=0.1, weights=wb, tol=1e-14)
        np.testing.assert_allclose(got, tight, rtol=0, atol=1e-6)
    assert np.ptp(batch[:, 0]) > 0.01  # the resamples do differ


def test_bootstrap_in_batches_equals_one_resample_at_a_time(hist, monkeypatch):
    from topcal.labelshift import estimates

    use = shifted(500, TARGET, 4, labels=False)[0]
    kw = dict(n_bootstrap=13, shrink=1.0)
    batched = estimate_priors(hist, use, **kw)
    monkeypatch.setattr(estimates, "BOOTSTRAP_BATCH_CELLS", 1)  # one resample per pass
    single = estimate_priors(hist, use, **kw)
    np.testing.assert_allclose(batched.lower, single.lower, rtol=0, atol=1e-7)
    np.testing.assert_allclose(batched.upper, single.upper, rtol=0, atol=1e-7)
    assert np.all(batched.upper - batched.lower > 0)


def test_safety_draws_are_multinomial_and_sparse():
    """Small tables keep the multinomial sampler's stream (the safety step's figures unchanged);
    a table with far more categories than draws inverts the cumulative distribution instead."""
    from topcal.labelshift.safety import INVERSION_RATIO, draw_counts

    p = np.array([0.5, 0.0, 0.2, 0.3])
    idx, counts = draw_counts(np.random.default_rng(1), p, 40)
    full = np.random.default_rng(1).multinomial(40, p)
    assert idx.tolist() == np.flatnonzero(full).tolist() and counts.tolist() == full[idx].tolist()
    rng = np.random.default_rng(2)
    p = rng.dirichlet(np.full(20_000, 0.3))
    p[::7] = 0.0
    p /= p.sum()
    n = 50
    assert p.size > INVERSION_RATIO * n
    total = np.zeros(p.size)
    for _ in range(2000):
        idx, counts = draw_counts(rng, p, n)
        assert counts.sum() == n and np.all(np.diff(idx) > 0) and np.all(counts > 0)
        total[idx] += counts
    assert total[::7].sum() == 0  # a category of probability 0 is never drawn
    # the mean count per decile of categories is n p (within 5 binomial standard errors)
    groups = np.array_split(np.argsort(p), 10)
    for g in groups:
        expect = 2000 * n * p[g].sum()
        assert abs(total[g].sum() - expect) <= 5 * np.sqrt(expect) + 1, (total[g].sum(), expect)


@pytest.mark.parametrize("estimator", ["em", "bbse"])
def test_sparse_safety_simulation_does_not_depend_on_its_threads(monkeypatch, estimator):
    """The sparse population's use sets run on threads; the figures are those of one thread,
    bit for bit."""
    from topcal.labelshift import safety

    model = topcal.calibrator("hist", n_bins=5).fit(shifted(3000, SOURCE, 0, sep=1.0)[0])
    use = shifted(200, TARGET, 4, sep=1.0, labels=False)[0]
    est = estimate_priors(model, use, estimator=estimator, n_bootstrap=0, shrink=1.0)
    monkeypatch.setattr(safety, "SIM_DENSE_CELLS", 0)  # the sparse population, as at 10^5
    got = {}
    for threads in (1, 2):
        monkeypatch.setattr(safety, "available_cpus", lambda: threads)
        for truth in ("estimate", "moment"):
            got[threads, truth] = choose_shrink(
                model.evidence_.confusion,
                est.priors,
                200,
                estimator=estimator,
                prior_strength=PRIOR_STRENGTH[estimator],
                fp_pseudocount=FP_PSEUDOCOUNT,
                seed=3,
                truth=truth,
            )
    for truth in ("estimate", "moment"):
        assert got[1, truth] == got[2, truth]
    assert any(g.n_sim == safety.SAFETY_SIMULATIONS for g in got.values())


@pytest.mark.slow
@pytest.mark.heavy
def test_safety_step_at_two_hundred_thousand_classes():
    """The safety simulation's flat (cell, class) keys pass 2^31 when cells x classes does
    (scipy's sparse indices are int32: the keys wrapped negative and adapt failed at 10^6 rows
    x 10^5 classes)."""
    K = 200_000
    rng = np.random.default_rng(0)
    cdf = np.cumsum(1.0 / np.arange(1, K + 1) ** 1.1)
    cdf /= cdf[-1]

    def rows(n):
        pred = np.searchsorted(cdf, rng.random(n))
        score = rng.beta(5, 1.5, n)
        return pred, score, np.where(rng.random(n) < score**1.3, pred, (pred + 1) % K)

    names = np.char.add("t", np.arange(K).astype(str)).tolist()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = topcal.calibrator("hist").fit(TopLabelData.from_scores(*rows(6000), classes=names))
        assert model.evidence_.confusion.table.shape[0] * K > 2**31
        pred, score, _ = rows(3000)
        est = estimate_priors(
            model, TopLabelData.from_scores(pred, score, None, classes=names), n_bootstrap=0
        )
    assert 0.0 <= est.shrink <= 1.0 and np.isclose(est.priors.sum(), 1.0)
