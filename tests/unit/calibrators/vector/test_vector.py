"""Whole-vector scalings ``vs`` and ``sms`` (issue 35): objective, fit, the original top label,
intervals, persistence, update, describe, and their place among auto's candidates."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from scipy.optimize import minimize, minimize_scalar
from scipy.special import log_softmax, softmax

import topcal
from topcal.calibrators.context import FitContext
from topcal.describe.summary import describe_text
from topcal import TopLabelData, persist
from topcal.calibrators.vector import COV_MAX_PARAMS
from topcal.calibrators.vector._core import Layout, VectorObjective, features
from topcal.errors import DataError, ParameterError

pytestmark = pytest.mark.filterwarnings("ignore::topcal.errors.DegenerateClassWarning")

METHODS = ["vs", "sms"]
#: the maps with a top-label curve on their confidence (issue 35, item 2)
CORRECTED = ["vs-hier-platt", "sms-pooled-beta"]


def _sim(n=3000, k=4, seed=0):
    """Class-dependently miscalibrated probabilities with class confusions (a matrix can fix)."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, k, n)
    z = rng.normal(0.0, 1.5, (n, k))
    z[np.arange(n), y] += 2.0
    z[:, 1] += 0.8 * z[:, 0]  # class 1's score leaks class 0's evidence
    z *= np.linspace(0.6, 2.2, k)[None, :]  # per-class over- and underconfidence
    return softmax(z, axis=1), y


@pytest.fixture(scope="module")
def data():
    p, y = _sim()
    return TopLabelData.from_probs(p, y)


def _fit(name, d, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return topcal.calibrator(name, **kw).fit(d)


@pytest.mark.parametrize("off", [False, True])
def test_gradient_and_hessian_match_finite_differences(data, off):
    lay = Layout(data.n_classes, off)
    obj = VectorObjective(features(data, 0.7), data.labels, data.tp + data.fp, lay, 1.0)
    rng = np.random.default_rng(1)
    th = lay.start() + 0.05 * rng.normal(size=lay.size)
    f, g = obj.value_grad(th)
    h = obj.hessian(th)
    for j in (0, 2, lay.size - 1):
        e = np.zeros(lay.size)
        e[j] = 1e-6
        fd = (obj.value_grad(th + e)[0] - obj.value_grad(th - e)[0]) / 2e-6
        assert fd == pytest.approx(g[j], rel=1e-6, abs=1e-9)
        e[j] = 1e-5
        hd = (obj.value_grad(th + e)[1] - obj.value_grad(th - e)[1]) / 2e-5
        np.testing.assert_allclose(h[:, j], hd, rtol=1e-5, atol=1e-8)


@pytest.mark.parametrize("k", [2, 5])
def test_sms_hessian_is_the_row_sum_of_kronecker_products(k):
    """sms's Hessian (assembled from the class pairs' weighted moments, issue 36) equals its
    definition written here: sum_i w_i (diag(p_i) - p_i p_i^T) kron (xt_i xt_i^T) in vec(M | b),
    mapped to theta by the Jacobian R, over n, plus the penalty; to rounding, with unequal weights
    and every Hessian block (more rows than one block of the assembly)."""
    rng = np.random.default_rng(k)
    p, y = _sim(n=700, k=k, seed=k)
    d = TopLabelData.from_probs(p, y)
    lay = Layout(k, True)
    x = features(d, 0.8, 1e-3)
    obj = VectorObjective(x, d.labels, rng.uniform(0.2, 3.0, 700), lay, 1.0)
    th = lay.start() + 0.1 * rng.normal(size=lay.size)
    q = softmax(lay.scores(x, th), axis=1)
    xt = np.concatenate([x, np.ones((700, 1))], axis=1)
    hm = sum(
        wi * np.kron(np.diag(qi) - np.outer(qi, qi), np.outer(xi, xi))
        for wi, qi, xi in zip(obj.w, q, xt)
    )
    jac = lay.jacobian()
    want = jac.T @ hm @ jac / obj.n + np.diag(2.0 * obj.r)
    np.testing.assert_allclose(obj.hessian(th), want, rtol=1e-12, atol=1e-13 * np.abs(want).max())
    # the covariance's form (summed) and a strided Hessian are the same sums
    np.testing.assert_allclose(obj.hessian(th, summed=True), want * obj.n, rtol=1e-12, atol=1e-9)


def test_first_stage_temperature_converges_without_wasted_passes(data):
    """The first stage's Newton stops at a step below 1e-6 (the next would be ~1e-12) instead of
    line-searching at the optimum, where the losses compared are equal to their rounding (it
    backtracked 23 times there: 29 passes of which 6 did the work): the optimum of an independent
    solver, in at most 8 passes over the rows (one block of rows a pass here)."""
    from topcal.calibrators.vector import _core

    class Rows(np.ndarray):
        """Counts the row blocks read (the passes: 3,000 rows x 4 classes are one block)."""

        reads = 0

        def __getitem__(self, key):
            if isinstance(key, slice):
                Rows.reads += 1
            return np.asarray(self)[key]

    x = np.log(np.maximum(data.full, topcal.data.LOG_PROB_FLOOR)).view(Rows)
    beta = _core.temperature(x, data.labels, data.tp + data.fp)
    assert 3 <= Rows.reads <= 8
    assert beta == pytest.approx(_independent_ts(np.asarray(x), data.labels), rel=1e-8)
    # from a start near the optimum: fewer passes, the same optimum
    Rows.reads = 0
    assert _core.temperature(x, data.labels, data.tp + data.fp, start=1.01 * beta) == (
        pytest.approx(beta, rel=1e-10)
    )
    assert Rows.reads <= 4


@pytest.mark.parametrize("off", [False, True])
@pytest.mark.parametrize("lbfgs", [False, True])
def test_a_subsample_first_reaches_the_same_penalised_optimum(data, off, lbfgs, monkeypatch):
    """From 4 x SUBSAMPLE_ROWS rows, solve fits every stride-th row first, then all rows from there:
    the same optimum as the solve on all rows alone (penalised NLL within 1e-9 relative, parameters
    within 1e-4 of the largest; both stop at a Newton decrement of 1e-10)."""
    from topcal.calibrators.vector import _solve

    lay = Layout(data.n_classes, off)
    x, w = features(data, 0.7), data.tp + data.fp
    if lbfgs:
        monkeypatch.setattr(_solve, "NEWTON_MAX_PARAMS", 0)
        monkeypatch.setattr(_solve, "NEWTON_MAX_CLASSES_VS", 0)
    monkeypatch.setattr(_solve, "SUBSAMPLE_ROWS", 10**9)  # all rows alone
    whole = VectorObjective(x, data.labels, w, lay, 1.0)
    t0, f0, _, ok0 = _solve.solve(whole, lay.start(), 500)
    part = whole.rows(6)
    tp_, _, _, _ = _solve.solve(part, lay.start(), 500)
    monkeypatch.setattr(_solve, "SUBSAMPLE_ROWS", 500)  # 3,000 rows: stride 6
    sub = VectorObjective(x, data.labels, w, lay, 1.0)
    t1, f1, _, ok1 = _solve.solve(sub, lay.start(), 500)
    assert ok0 and ok1
    assert f1 == pytest.approx(f0, rel=1e-9)
    np.testing.assert_allclose(t1, t0, rtol=0, atol=1e-4 * np.abs(t0).max())
    assert not np.allclose(t0, lay.start(), atol=1e-2)  # the optimum is away from the start
    # passes over all rows: no more here (3,000 rows; fewer at 10^6: docs/vector.md)
    assert sub.n_eval <= whole.n_eval
    # the subsample's optimum alone is not the full one: the finish on all rows is what agrees
    assert np.abs(tp_ - t0).max() > 10 * np.abs(t1 - t0).max()


def _independent_ts(x, labels):
    """Multinomial temperature scaling written here: scipy's bounded minimiser on log beta."""
    n = x.shape[0]

    def loss(t):
        return -log_softmax(x * np.exp(t), axis=1)[np.arange(n), labels].mean()

    return float(
        np.exp(minimize_scalar(loss, bounds=(-5, 5), method="bounded", options={"xatol": 1e-10}).x)
    )


@pytest.mark.parametrize(
    # sms: BFGS with numeric gradients over k (k - 1) more parameters, seconds (the slow lane)
    "name",
    ["vs", pytest.param("sms", marks=pytest.mark.slow)],
)
def test_fit_is_the_penalised_multinomial_optimum_of_an_independent_solver(name, data):
    """The two stages written here (temperature scaling and the mixture, then the penalised map by
    scipy's BFGS with numeric gradients): the same temperature, parameters and predictions."""
    m = _fit(name, data)
    k, off = data.n_classes, name == "sms"
    x = np.log(np.maximum(data.full, topcal.data.LOG_PROB_FLOOR))
    beta = _independent_ts(x, data.labels)
    assert m.beta_ == pytest.approx(beta, rel=1e-6)
    eps = 1.0 / (data.n_rows + 1.0)  # the mixture with the uniform distribution (docs/vector.md)
    x = np.log((1 - eps) * softmax(beta * x, axis=1) + eps / k)
    assert m.mix_ == eps
    n = data.n_rows
    mask = ~np.eye(k, dtype=bool)

    def loss(t):
        a, v, b = t[0], t[1 : 1 + k], t[1 + k : 1 + 2 * k]
        u = x * (a + v) + b
        pen = k / n * (v @ v + b @ b)
        if off:
            w = np.zeros((k, k))
            w[mask] = t[1 + 2 * k :]
            u = u + x @ w.T
            pen += k * (k - 1) / n * (w * w).sum()
        return -log_softmax(u, axis=1)[np.arange(n), data.labels].mean() + pen

    t0 = np.zeros(m.theta_.size)
    t0[0] = 1.0
    r = minimize(loss, t0, method="BFGS", options={"gtol": 1e-9})
    assert loss(m.theta_) <= r.fun + 1e-9
    np.testing.assert_allclose(m.theta_, r.x, atol=2e-3)
    u = x * (r.x[0] + r.x[1 : 1 + k]) + r.x[1 + k : 1 + 2 * k]
    if off:
        w = np.zeros((k, k))
        w[mask] = r.x[1 + 2 * k :]
        u = u + x @ w.T
    want = softmax(u, axis=1)[np.arange(n), data.pred]
    np.testing.assert_allclose(m.predict(data), want, atol=1e-4)


@pytest.mark.parametrize("name", METHODS)
def test_confidence_is_that_of_the_original_top_label(name):
    """Where the map moves the argmax, the confidence is still the original top class's entry."""
    rng = np.random.default_rng(3)
    n, k = 2000, 3
    y = rng.integers(0, k, n)
    z = rng.normal(0, 1, (n, k))
    z[np.arange(n), y] += 1.5
    z[:, 2] += 1.0  # class 2 is over-predicted: the fit lowers its bias, moving some argmaxes
    d = TopLabelData.from_logits(z, y)
    m = _fit(name, d)
    lay = Layout(k, name == "sms")
    u = lay.scores(features(d, m.beta_, m.mix_), m.theta_)
    moved = u.argmax(axis=1) != d.pred
    assert moved.any()
    want = softmax(u, axis=1)[np.arange(n), d.pred]
    np.testing.assert_allclose(m.predict(d), want, rtol=1e-10)
    assert np.all(m.predict(d)[moved] < 0.5 + 1e-12)


@pytest.mark.parametrize("name", METHODS + CORRECTED)
def test_beats_temperature_scaling_out_of_sample_on_class_dependent_miscalibration(name, data):
    test = TopLabelData.from_probs(*_sim(3000, seed=1))
    nll = {n: topcal.metrics.nll(test, _fit(n, data).predict(test)).overall for n in ("sts", name)}
    assert nll[name] < nll["sts"] - 0.01, nll


def test_logits_and_their_probabilities_fit_alike():
    rng = np.random.default_rng(5)
    z = rng.normal(0, 2, (1500, 4))
    y = rng.integers(0, 4, 1500)
    a = _fit("vs", TopLabelData.from_logits(z + 7.0, y))  # a row shift: log-softmax removes it
    b = _fit("vs", TopLabelData.from_probs(softmax(z, axis=1), y))
    np.testing.assert_allclose(a.theta_, b.theta_, rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("name", METHODS + CORRECTED)
def test_round_trip_is_bit_for_bit_with_intervals(name, data, tmp_path):
    m = _fit(name, data)
    path = tmp_path / "m.json"
    m.save(path)
    got = topcal.load(path)
    assert type(got) is type(m) and got.get_params() == m.get_params()
    assert got.predict(data).tobytes() == m.predict(data).tobytes()
    for a, b in zip(got.predict_interval(data), m.predict_interval(data)):
        assert a.tobytes() == b.tobytes()
    assert persist.dumps(got) == persist.dumps(m)


def test_a_malformed_model_file_is_rejected(data):
    doc = m = _fit("vs", data).to_dict()
    doc["state"]["theta"] = doc["state"]["theta"][:-1]
    with pytest.raises(topcal.errors.ModelFileError, match="theta"):
        type(_fit("vs", data)).from_dict(m)


@pytest.mark.parametrize("name", METHODS + CORRECTED)
def test_intervals_hold_the_confidence_and_narrow_with_more_data(name):
    small = TopLabelData.from_probs(*_sim(600, seed=2))
    large = TopLabelData.from_probs(*_sim(6000, seed=2))
    test = TopLabelData.from_probs(*_sim(500, seed=9))
    widths = []
    for d in (small, large):
        m = _fit(name, d)
        lo, hi = m.predict_interval(test, 0.9)
        conf = m.predict(test)
        assert np.all(lo <= conf) and np.all(conf <= hi) and np.all(lo > 0) and np.all(hi < 1)
        widths.append(np.median(hi - lo))
    assert widths[1] < 0.6 * widths[0], widths


@pytest.mark.parametrize("name", METHODS)
def test_the_covariance_from_every_stride_th_row_moves_intervals_little(name, monkeypatch):
    """Above COV_ROWS rows the covariance is the inverse information on every stride-th row: at
    20,000 rows from 5,000 the 90% intervals' half-widths within 5% of the all-row ones (median
    within 1%), the fit itself unchanged."""
    from topcal.calibrators.vector import calibrator as vc

    d = TopLabelData.from_probs(*_sim(20_000, seed=4))
    test = TopLabelData.from_probs(*_sim(500, seed=9))
    fits = []
    for rows in (10**9, 5_000):
        monkeypatch.setattr(vc, "COV_ROWS", rows)
        m = _fit(name, d)
        lo, hi = m.predict_interval(test, 0.9)
        fits.append((m, hi - lo))
    (a, wa), (b, wb) = fits
    np.testing.assert_array_equal(a.theta_, b.theta_)
    r = np.abs(wb / wa - 1)
    assert r.max() < 0.05 and np.median(r) < 0.01, (r.max(), np.median(r))
    assert r.max() > 0  # the strided path was taken


def test_many_parameters_have_no_interval_and_say_so():
    rng = np.random.default_rng(0)
    k = 16  # sms: 16 * 17 + 1 = 273 parameters > COV_MAX_PARAMS
    assert k * (k + 1) + 1 > COV_MAX_PARAMS
    z = rng.normal(0, 2, (800, k))
    d = TopLabelData.from_logits(z, rng.integers(0, k, 800))
    m = _fit("sms", d, max_iter=30)
    with pytest.raises(ParameterError, match="covariance is kept up to"):
        m.predict_interval(d)


@pytest.mark.parametrize("name", METHODS + CORRECTED)
def test_update_asks_for_a_refit(name, data):
    m = _fit(name, data)
    with pytest.raises(ParameterError, match="refit"):
        m.update(data)


@pytest.mark.parametrize("name", METHODS)
def test_describe_lists_scales_biases_and_the_fit(name, data):
    m = _fit(name, data)
    d = m.describe()
    assert d["method"] == name and d["fit"]["n_params"] == m.n_params_ and d["fit"]["converged"]
    row = d["classes"][data.classes[0]]
    assert {"scale", "bias", "nll", "n_tp", "n_fp"} <= set(row)
    assert ("off_diagonal_max" in d["fit"]) == (name == "sms")
    assert "scale" in describe_text(m)
    assert sum(r["nll"] for r in d["classes"].values()) == pytest.approx(m.nll_)


def test_bad_input_fails_with_a_fix():
    d = TopLabelData.from_scores([0, 1, 0], [0.9, 0.8, 0.7], labels=[0, 1, 1], classes=["a", "b"])
    with pytest.raises(DataError, match="bts"):
        topcal.calibrator("vs").fit(d)
    p, y = _sim(200)
    with pytest.raises(ParameterError, match="reg"):
        topcal.calibrator("sms", reg=-1.0).fit(p, y)


def test_auto_runs_them_on_full_vectors_and_sms_up_to_its_class_limit(data):
    from topcal.calibrators.vector import StructuredMatrixScaling

    m = _fit("auto", data)
    assert {"vs", "sms"} <= set(m.cv_) and "sms-pooled-beta" not in m.cv_
    assert m.cv_["vs"]["nll"] is not None and m.cv_["sms"]["nll"] is not None
    rng = np.random.default_rng(0)
    k = StructuredMatrixScaling.auto_max_classes + 1
    z = rng.normal(0, 2, (600, k))
    wide = TopLabelData.from_logits(z, rng.integers(0, k, 600))
    names = topcal.calibrator("auto")._names(wide)
    assert "vs" in names and "sms" not in names and "sms-pooled-beta" not in names
    assert "vs-hier-platt" in names and "vs-hier-platt" not in set(m.cv_)  # above sms's limit only
    assert "sms" in topcal.calibrator("auto", candidates=["sts", "sms"])._names(
        wide
    )  # asked for: runs


def test_auto_chooses_a_whole_vector_map_where_it_wins_clearly():
    """On 6,000 rows of class-confused outputs the whole-vector maps win far beyond their noise."""
    d = TopLabelData.from_probs(*_sim(6000, seed=4))
    m = _fit("auto", d)
    assert m.method_ in ("vs", "sms"), m.cv_table()[:3]
    test = TopLabelData.from_probs(*_sim(3000, seed=5))
    ref = _fit("sts", d)
    assert (
        topcal.metrics.nll(test, m.predict(test)).overall
        < topcal.metrics.nll(test, ref.predict(test)).overall
    )


@pytest.mark.parametrize("name", CORRECTED)
def test_corrected_is_its_curve_on_the_maps_confidence_of_the_fitting_rows(name, data):
    m = _fit(name, data)
    base, curve = name.split("-", 1)
    ref = _fit(base, data)
    assert m.map_.theta_.tobytes() == ref.theta_.tobytes()

    def scores(d, c):
        return TopLabelData.from_scores(d.pred, c, labels=d.labels, classes=list(d.classes))

    cur = _fit(curve, scores(data, ref.predict(data)))
    test = TopLabelData.from_probs(*_sim(800, seed=7))
    want = cur.predict(scores(test, ref.predict(test)))
    np.testing.assert_allclose(m.predict(test), want, rtol=1e-12)
    assert not np.allclose(want, ref.predict(test), atol=1e-3)  # the curve moves the confidence
    d = m.describe()
    assert d["method"] == name and d["curve"]["method"] == curve
    assert d["fit"]["n_params"] == m.map_.n_params_ < m.n_params_
    assert {"scale", "bias"} <= set(d["classes"][data.classes[0]])


def test_auto_fits_the_map_once_per_fold_for_it_and_its_corrected_form(data, monkeypatch):
    from topcal.calibrators.vector import calibrator as vc

    calls = []
    real = vc.solve
    monkeypatch.setattr(
        vc, "solve", lambda obj, *a, **kw: calls.append(obj.layout.off) or real(obj, *a, **kw)
    )
    m = _fit("auto", data, candidates=["sts", "vs", "vs-hier-platt", "sms", "sms-pooled-beta"])
    assert {"vs-hier-platt", "sms-pooled-beta"} <= set(m.cv_)
    # the all-data vs and sms fits that start the folds, 5 folds: one vs and one sms solve each,
    # then the all-data fit of the choice (its map)
    assert calls[:2] == [False, True]
    assert sorted(calls[2:12]) == [False] * 5 + [True] * 5 and len(calls) <= 13


def test_one_blas_thread_limits_every_blas_and_scans_again_after_an_import(monkeypatch):
    """The vector and temperature fits' one-thread BLAS context (a kept threadpoolctl controller,
    issue 36): one thread inside, the previous count after; the library scan is reused while no
    module is imported and made again after one (which may bring a BLAS of its own)."""
    import sys
    import types

    import threadpoolctl
    from threadpoolctl import threadpool_info

    from topcal._numeric import one_blas_thread

    def blas():
        return [i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"]

    before = blas()
    with one_blas_thread():
        assert blas() == [1] * len(before)
    assert blas() == before
    scans = []
    real = threadpoolctl.ThreadpoolController
    monkeypatch.setattr(threadpoolctl, "ThreadpoolController", lambda: scans.append(1) or real())
    monkeypatch.setitem(sys.modules, "_topcal_test_new_module", types.ModuleType("x"))
    for _ in range(3):
        with one_blas_thread():
            pass
    assert scans == [1]  # (threadpool_info makes a controller of its own: not called here)


@pytest.mark.parametrize("name", METHODS)
def test_a_warm_started_fit_reaches_the_cold_fits_optimum(name, data, monkeypatch):
    """A fold's fit from the all-data fit (its parameters, first-stage temperature and Hessian;
    issue 36) approximates the cold fit (docs/vector.md#fold-fits): its temperature one unchecked
    Newton step from the all-data one (within 1e-4 relative: about the square of that 0.9% step),
    its solve stopped at a Newton decrement of FOLD_TOL of the loss without the last step (the loss
    within 1e-6, the confidences within 1e-4 relative), in at most 4 gradient passes (the cold fit:
    6) and without a Hessian. auto's final fit from it on its very rows
    (``FitContext(same_rows=True)``) takes its optimum without a pass (the cold fit's: loss
    within 1e-9); not told so, it solves from there (at most 2 iterations)."""

    fold = data.subset(np.flatnonzero(np.arange(data.n_rows) % 5 != 0))
    whole = topcal.calibrator(name).fit(data, keep="predictions")
    assert whole._nll_hessian is not None  # a scratch fit keeps it for the folds
    hessians = _count_hessians(monkeypatch)
    passes = _count_passes(monkeypatch)
    as_fold = FitContext(fold=True)
    warm = topcal.calibrator(name).fit(fold, keep="predictions", warm=whole, context=as_fold)
    assert hessians == [] and len(passes) <= 4
    passes.clear()
    cold = topcal.calibrator(name).fit(fold, keep="predictions")
    assert len(hessians) >= 1 and len(passes) >= 6
    assert warm.beta_ != cold.beta_ and warm.beta_ == pytest.approx(cold.beta_, rel=1e-4)
    assert abs(whole.beta_ / cold.beta_ - 1) > 1e-3  # the step it took
    assert warm.loss_ == pytest.approx(cold.loss_, rel=1e-6)
    np.testing.assert_allclose(warm.predict(data), cold.predict(data), rtol=1e-4)
    # auto's final fit on the very rows of the warm start: that fit's optimum, no gradient pass
    passes.clear()
    same_rows = FitContext(same_rows=True)
    final = topcal.calibrator(name).fit(data, keep="model", warm=whole, context=same_rows)
    assert passes == [] and np.array_equal(final.theta_, whole.theta_)
    assert final.n_iter_ == whole.n_iter_ and final.beta_ == whole.beta_
    ref = topcal.calibrator(name).fit(data, keep="model")
    assert final.loss_ == pytest.approx(ref.loss_, rel=1e-9)
    assert final.nll_ == pytest.approx(ref.nll_, rel=1e-9)
    np.testing.assert_allclose(final.class_nll_, ref.class_nll_, rtol=1e-9)
    np.testing.assert_allclose(final.param_cov_, ref.param_cov_, rtol=1e-3, atol=1e-8)
    # not told the rows are the same: solved from the warm start, near the optimum at once
    again = topcal.calibrator(name).fit(data, keep="model", warm=whole)
    assert passes and again.loss_ == pytest.approx(ref.loss_, rel=1e-9)
    assert again.n_iter_ <= 2 < ref.n_iter_
    # a start of another method (or none kept) is ignored
    other = topcal.calibrator("vs" if name == "sms" else "sms").fit(data, keep="predictions")
    assert topcal.calibrator(name).fit(fold, warm=other).n_iter_ == cold.n_iter_


def test_a_fit_from_a_sibling_folds_fit_is_a_fold_fit(data):
    """A scratch fit started from a fit on as many samples (a sibling fold's: auto's first look as
    the first of its K folds) is a fold fit, approximating the cold fit as one from the all-data
    fit does (loss within 1e-6, confidences within 1e-4); from a fit on fewer samples it is not."""
    m = data.n_rows * 4 // 5
    a, b = data.subset(np.arange(m)), data.subset(np.arange(data.n_rows - m, data.n_rows))
    assert a.n_samples == b.n_samples
    sibling = topcal.calibrator("vs").fit(a, keep="predictions")
    as_fold = FitContext(fold=True)
    warm = topcal.calibrator("vs").fit(b, keep="predictions", warm=sibling, context=as_fold)
    cold = topcal.calibrator("vs").fit(b, keep="predictions")
    assert warm._fold and not cold._fold
    assert warm.loss_ == pytest.approx(cold.loss_, rel=1e-6)
    np.testing.assert_allclose(warm.predict(data), cold.predict(data), rtol=1e-4)
    small = topcal.calibrator("vs").fit(data.subset(np.arange(m // 2)), keep="predictions")
    assert not topcal.calibrator("vs").fit(b, keep="predictions", warm=small, context=as_fold)._fold
    # not told it is a fold's (a user's scratch fit from a warm start): solved to its optimum
    assert not topcal.calibrator("vs").fit(b, keep="predictions", warm=sibling)._fold


def test_a_final_fit_takes_the_all_data_fit_only_where_its_caller_says_the_rows_are_the_same(
    data, monkeypatch
):
    """A fit takes a scratch fit's optimum as it is only where its caller says it is made on the
    very rows of that fit (``FitContext(same_rows=True)``: auto's final fit after its K folds on
    all its rows; docs/vector.md#same-rows); told nothing, it is solved from it, and a fold's
    scratch fit keeps no margins."""
    whole = topcal.calibrator("vs").fit(data, keep="predictions")
    assert whole._own is not None
    passes = _count_passes(monkeypatch)
    told = topcal.calibrator("vs").fit(
        data, keep="model", warm=whole, context=FitContext(same_rows=True)
    )
    assert passes == [] and np.array_equal(told.theta_, whole.theta_)
    m = topcal.calibrator("vs").fit(data, keep="model", warm=whole)
    assert passes  # solved from it (its own iterations), not taken
    assert m.n_iter_ <= 2 < whole.n_iter_
    fold = data.subset(np.flatnonzero(np.arange(data.n_rows) % 5 != 0))
    part = topcal.calibrator("vs").fit(
        fold, keep="predictions", warm=whole, context=FitContext(fold=True)
    )
    assert part._own is None


def test_auto_says_same_rows_only_for_an_all_data_fit_made_on_its_rows(data, monkeypatch):
    """auto's final fit is told the rows are the same only where the K folds' all-data fit was
    fitted on all of auto's rows (not one taken from the first look, nor on a subsample)."""
    from topcal.calibrators.select.crossfit import cross_fit

    run = cross_fit(data, ["sts", "sms"], 3)
    assert run.on_data == {"sms"} | ({"sts"} if "sts" in run.warm else set())
    begun = cross_fit(data, ["sms"], 3, begin={"sms": run.warm["sms"]})
    assert begun.on_data == {"sms"}  # begin is a start, the fit is still made on data
    seen = []
    real = topcal.calibrator("sms").__class__._fit

    def spy(self, d, _real=real):
        seen.append(self._context is not None and self._context.same_rows)
        return _real(self, d)

    monkeypatch.setattr(topcal.calibrator("sms").__class__, "_fit", spy)
    _fit("auto", data, candidates=["uncalibrated", "sms"], screen=None)
    assert seen[-1] is True  # the final fit, after the folds' all-data fit on these rows
    seen.clear()
    _fit("auto", data, candidates=["uncalibrated", "sms"], screen=None, cv_rows=data.n_rows // 2)
    assert seen[-1] is False  # the choice was made on a subsample


def test_auto_refits_its_vector_choice_from_the_cross_validations_all_data_fit(data):
    """auto's final fit of a vs/sms choice starts from the cross-validation's all-data fit
    (crossfit.refit_start), which is then dropped; of a method without _warm_refit, never."""
    from topcal.calibrators.select.crossfit import cross_fit, refit_start

    run = cross_fit(data, ["hier-platt", "sms"], 3)
    assert set(run.warm) == {"hier-platt", "sms"}
    assert refit_start("hier-platt", run) is None and run.warm == {}
    run = cross_fit(data, ["sts", "sms"], 3)
    assert isinstance(refit_start("sms", None, run), topcal.calibrator("sms").__class__)
    assert refit_start(None, run) is None and refit_start("sms", None) is None
    m = _fit("auto", data, candidates=["uncalibrated", "sms"], screen=None)
    assert m.method_ == "sms"
    ref = _fit("sms", data)
    # the all-data fit (cold here, as ref: no first look) was made on these very rows: taken as is
    assert m.model_.loss_ == pytest.approx(ref.loss_, rel=1e-9)
    assert np.array_equal(m.model_.theta_, ref.theta_) and m.model_.n_iter_ == ref.n_iter_


def test_auto_decided_at_the_first_look_refits_from_its_fit(monkeypatch):
    """Where the first look decides (the K folds skipped), auto's final fit of its vs/sms choice
    starts from the first look's fit of it (fitted on the first fold's rows): the cold fit's
    optimum (penalised NLL within 1e-9 relative)."""
    from topcal.calibrators.vector import StructuredMatrixScaling as Sms

    p, y = _sim(n=3000, k=4)
    d = TopLabelData.from_probs(p, y)
    starts = []
    real = Sms._fit_single

    def spy(self, data):
        starts.append((data.n_rows, None if self._warm is None else self._warm.beta_))
        return real(self, data)

    monkeypatch.setattr(Sms, "_fit_single", spy)
    m = _fit("auto", d, candidates=["uncalibrated", "sts", "sms"], screen=300)
    assert (m.method_, m.stages_["decided"]) == ("sms", 1)
    (look_rows, _), (final_rows, start) = starts[0], starts[-1]
    assert look_rows == 300 and final_rows == 3000 and start is not None
    assert m.model_.loss_ == pytest.approx(_fit("sms", d).loss_, rel=1e-9)


def _count_logged_rows(monkeypatch) -> list:
    """A list that gets, for each call of ``TopLabelData.log_probs``, the rows it logged."""
    logged = []
    real = TopLabelData.log_probs

    def spy(s, rows=None):
        logged.append(len(range(s.n_rows)[rows]) if rows is not None else s.n_rows)
        return real(s, rows)

    monkeypatch.setattr(TopLabelData, "log_probs", spy)
    return logged


def _count_calls(monkeypatch, method: str) -> list:
    """Wrap ``VectorObjective.<method>`` to append 1 to the returned list per call."""
    calls = []
    real = getattr(VectorObjective, method)
    monkeypatch.setattr(
        VectorObjective, method, lambda s, *a, **k: calls.append(1) or real(s, *a, **k)
    )
    return calls


def _count_hessians(monkeypatch) -> list:
    """The Hessians computed (:func:`_count_calls`)."""
    return _count_calls(monkeypatch, "hessian")


def _count_passes(monkeypatch) -> list:
    """The gradient passes (:func:`_count_calls`)."""
    return _count_calls(monkeypatch, "value_grad")


def _record_warm_starts(monkeypatch, cls, method: str) -> list:
    """Wrap ``cls.method`` (a fit on data) to record, per fit, (its rows, the rows of the fit it
    starts from or None where it starts cold)."""
    fits = []
    real = getattr(cls, method)

    def spy(self, data):
        w = self._warm
        fits.append((data.n_rows, None if w is None else int(w.n_tp_.sum() + w.n_fp_.sum())))
        return real(self, data)

    monkeypatch.setattr(cls, method, spy)
    return fits


def test_auto_starts_the_k_folds_all_data_fit_from_the_first_looks(monkeypatch):
    """Where vs/sms reach the K folds, the all-data fit that starts the folds starts itself from
    the first look's fit (on its first fold's rows), the folds from it, the final fit from it too;
    the choice's model is the cold fit's optimum (penalised NLL within 1e-9 relative)."""
    from topcal.calibrators.vector import StructuredMatrixScaling as Sms

    p, y = _sim(n=3000, k=3)
    d = TopLabelData.from_probs(p, y)
    fits = _record_warm_starts(monkeypatch, Sms, "_fit_single")
    m = _fit("auto", d, candidates=["uncalibrated", "vs", "sms"], screen=300)
    assert (m.method_, m.stages_["decided"]) == ("sms", 2)
    assert fits[0] == (300, None) and fits[1] == (3000, 300)  # first look; all-data from it
    assert fits[2:7] == [(2400, 3000)] * 5 and fits[7] == (3000, 3000)  # folds; final
    assert m.model_.loss_ == pytest.approx(_fit("sms", d).loss_, rel=1e-9)


def test_vs_at_many_classes_is_fitted_by_newton_on_capped_hessian_rows(monkeypatch):
    """vs is fitted by Newton up to NEWTON_MAX_CLASSES_VS classes whatever NEWTON_MAX_PARAMS says
    (issue 36), its Hessian on at most HESSIAN_WORK / K^2 rows (at least _HESSIAN_MIN_ROWS): the
    L-BFGS-B optimum (penalised NLL within 1e-9 relative, parameters within 1e-5)."""
    from topcal.calibrators.vector import _solve

    p, y = _sim(n=2000, k=12, seed=3)
    d = TopLabelData.from_probs(p, y)
    lay = Layout(12, False)
    x, w = features(d, 0.8, 1 / 2001), d.tp + d.fp
    monkeypatch.setattr(_solve, "NEWTON_MAX_PARAMS", 0)  # sms's limit: not vs's
    monkeypatch.setattr(_solve, "HESSIAN_WORK", 500 * 144)  # 500 rows at K = 12 ...
    monkeypatch.setattr(_solve, "_HESSIAN_MIN_ROWS", 100)
    strides = []
    real = VectorObjective.hessian
    monkeypatch.setattr(
        VectorObjective, "hessian", lambda s, th, st=1, **k: strides.append(st) or real(s, th, st)
    )
    newton = VectorObjective(x, d.labels, w, lay, 1.0)
    t0, f0, _, ok0 = _solve.solve(newton, lay.start(), 500)
    assert ok0 and newton.last_hessian is not None and strides and set(strides) == {4}
    monkeypatch.setattr(_solve, "NEWTON_MAX_CLASSES_VS", 0)
    lbfgs = VectorObjective(x, d.labels, w, lay, 1.0)
    t1, f1, _, ok1 = _solve.solve(lbfgs, lay.start(), 500)
    assert ok1 and lbfgs.last_hessian is None
    assert f0 == pytest.approx(f1, rel=1e-9)
    np.testing.assert_allclose(t0, t1, rtol=0, atol=1e-5)
    assert not np.allclose(t0, lay.start(), atol=1e-2)
    monkeypatch.setattr(_solve, "NEWTON_MAX_CLASSES_VS", 2048)
    monkeypatch.setattr(_solve, "_HESSIAN_MIN_ROWS", 1000)  # ... but not under the floor
    strides.clear()
    _solve.solve(VectorObjective(x, d.labels, w, Layout(12, False), 1.0), lay.start(), 500)
    assert set(strides) == {2}
    # sms keeps its parameter limit: L-BFGS-B here
    sms = VectorObjective(x, d.labels, w, Layout(12, True), 1.0)
    _solve.solve(sms, Layout(12, True).start(), 5)
    assert sms.last_hessian is None


@pytest.mark.parametrize("name", CORRECTED)
def test_a_corrected_maps_fold_starts_from_the_all_data_map(name, data, monkeypatch):
    """vs-hier-platt / sms-pooled-beta warm-start their map as vs / sms do (issue 36): a fold's map
    from the all-data fit's, without a Hessian, approximating the cold fit as theirs do (loss
    within 1e-6 relative, confidences within 1e-4); auto's final fit from it on its very rows
    takes its map (the cold fit's optimum: loss within 1e-9); another method's is ignored."""

    fold = data.subset(np.flatnonzero(np.arange(data.n_rows) % 5 != 0))
    whole = topcal.calibrator(name).fit(data, keep="predictions")
    assert whole.map_._nll_hessian is not None
    hessians = _count_hessians(monkeypatch)
    as_fold = FitContext(fold=True)
    warm = topcal.calibrator(name).fit(fold, keep="predictions", warm=whole, context=as_fold)
    assert hessians == []
    cold = topcal.calibrator(name).fit(fold, keep="predictions")
    assert warm.map_.loss_ == pytest.approx(cold.map_.loss_, rel=1e-6)
    assert warm.map_.n_iter_ < cold.map_.n_iter_
    np.testing.assert_allclose(warm.predict(data), cold.predict(data), rtol=1e-4)
    final = topcal.calibrator(name).fit(data, warm=whole, context=FitContext(same_rows=True))
    assert np.array_equal(final.map_.theta_, whole.map_.theta_)
    assert final.map_.n_iter_ == whole.map_.n_iter_
    np.testing.assert_allclose(final.predict(data), _fit(name, data).predict(data), rtol=1e-9)
    assert final.map_.loss_ == pytest.approx(_fit(name, data).map_.loss_, rel=1e-9)
    other = topcal.calibrator("vs").fit(data, keep="predictions")
    assert topcal.calibrator(name).fit(fold, warm=other).map_.n_iter_ == cold.map_.n_iter_


@pytest.mark.parametrize("name", CORRECTED)
def test_a_corrected_fit_reads_the_log_scores_once(name, data, monkeypatch):
    """The curve's input (the map's confidence on its fitting rows) comes from the map's own first
    stage: one n x K log of the scores a fit, not two (issue 36)."""
    calls = _count_logged_rows(monkeypatch)
    m = _fit(name, data)
    assert sum(calls) == data.n_rows
    calls.clear()
    np.testing.assert_allclose(
        m.curve_.predict(
            TopLabelData.from_scores(
                data.pred, m.map_.predict(data), labels=data.labels, classes=list(data.classes)
            )
        ),
        m.predict(data),
        rtol=1e-12,
    )


def test_auto_starts_the_k_folds_all_data_sts_from_the_first_looks(monkeypatch):
    """sts (one convex problem in log T, ``_warm_refit``; issue 36): the all-data fit that starts
    the K folds starts itself from the first look's sts, the folds from it; the cross-validation
    table is the cold path's (within 1e-6 relative)."""
    from topcal.calibrators.select import staging
    from topcal.calibrators.temperature.methods import SharedTemperatureScaling as Sts

    p, y = _sim(n=3000, k=3)
    d = TopLabelData.from_probs(p, y)
    monkeypatch.setattr(staging, "MARGIN", 1e9)  # every candidate to the K folds
    fits = _record_warm_starts(monkeypatch, Sts, "_fit")
    kw = dict(candidates=["uncalibrated", "sts", "vs"], screen=300)
    m = _fit("auto", d, **kw)
    assert m.stages_["decided"] == 2 and "sts" in m.cv_
    assert fits[0] == (300, None) and fits[1] == (3000, 300)
    assert fits[2:7] == [(2400, 3000)] * 5
    monkeypatch.setattr(Sts, "_warm_refit", False)  # the cold all-data fit, as before
    ref = _fit("auto", d, **kw)
    assert ref.cv_["sts"]["nll"] == pytest.approx(m.cv_["sts"]["nll"], rel=1e-6)


def _whole_problem():
    """A 3,000 x 12 vs problem solved cold on all its rows: (data, layout, x, w, objective, its
    optimum, converged), for the fold tests (a fold: every other row)."""
    from topcal.calibrators.vector import _solve

    p, y = _sim(n=3000, k=12, seed=4)
    d = TopLabelData.from_probs(p, y)
    lay = Layout(12, False)
    x, w = features(d, 0.8, 1 / 3001), d.tp + d.fp
    whole = VectorObjective(x, d.labels, w, lay, 1.0)
    t0, _, _, ok = _solve.solve(whole, lay.start(), 500)
    return d, lay, x, w, whole, t0, ok


def test_newton_factors_each_hessian_once_and_reuses_it_for_kept_steps(monkeypatch):
    """A kept Hessian (a warm start's, or one that still converges fast) is factored once: its
    later steps reuse the LU factors (issue 36: at 1,000 classes each fresh solve of the 2,001
    square system cost as much as a pass over the rows). The optimum is the cold solve's."""
    import scipy.linalg

    from topcal.calibrators.vector import _solve

    d, lay, x, w, cold, t0, ok0 = _whole_problem()
    assert ok0
    factored, real_lu = [], scipy.linalg.lu_factor
    monkeypatch.setattr(
        scipy.linalg, "lu_factor", lambda h, **k: factored.append(1) or real_lu(h, **k)
    )
    hessians = _count_hessians(monkeypatch)
    part = VectorObjective(x[::2], d.labels[::2], w[::2], lay, 1.0)  # a fold, from the optimum
    warm_h = cold.hessian(t0, 1) + np.diag(2.0 * part.r)
    hessians.clear()
    t1, f1, it, ok1 = _solve.solve(part, t0, 500, hessian=warm_h)
    assert ok1 and it >= 2  # several steps ...
    assert len(factored) == 1 + len(hessians) < it + 1  # ... on factors made once per Hessian
    ref = VectorObjective(x[::2], d.labels[::2], w[::2], lay, 1.0)
    t2, f2, _, _ = _solve.solve(ref, lay.start(), 500)
    assert f1 == pytest.approx(f2, rel=1e-9)
    np.testing.assert_allclose(t1, t2, rtol=0, atol=1e-5)


@pytest.mark.parametrize("off", [False, True])
def test_a_gradient_pass_keeps_the_rows_top_margins(off):
    """With the rows' predicted classes, a gradient pass keeps what gives every row's top_margin
    at its parameters (issue 36): m = t - log(s - e^t) equal to top_margin's within 1e-12 where
    the top holds less than 1 - 1e-5 of its row, within 1e-9 up to 1 - 1e-6 (the subtraction's
    digits), the rows above that (here: margins of ~1,400, the others underflowing) computed again
    alone; None at other parameters; the value and gradient those of a pass without them, bit
    for bit."""
    from topcal.calibrators.vector._core import top_margin

    p, y = _sim(n=700, k=5, seed=2)
    d = TopLabelData.from_probs(p, y)
    lay = Layout(5, off)
    x = features(d, 0.9, 1 / 701)
    x[:3] = -700.0  # every entry at the floor but the predicted one: the others underflow
    x[np.arange(3), d.pred[:3]] = 0.0
    rng = np.random.default_rng(0)
    th = lay.start() + 0.05 * rng.normal(size=lay.size)
    th[0] = 2.0
    obj = VectorObjective(x, d.labels, d.tp + d.fp, lay, 1.0, pred=d.pred)
    f, g = obj.value_grad(th)
    m = obj.margin_at(th)
    ref = top_margin(lay, th, x, d.pred)
    assert np.all(ref[:3] > 1000) and np.all(ref[3:] < 600)
    np.testing.assert_allclose(m, ref, rtol=0, atol=1e-9)
    low = ref < np.log(1e5)
    assert low.sum() > 600
    np.testing.assert_allclose(m[low], ref[low], rtol=1e-12, atol=1e-12)
    assert obj.margin_at(th + 1e-3) is None
    f0, g0 = VectorObjective(x, d.labels, d.tp + d.fp, lay, 1.0).value_grad(th)
    assert f == f0 and np.array_equal(g, g0)


@pytest.mark.parametrize("name", ["vs", "vs-hier-platt"])
def test_a_fit_takes_its_rows_confidence_from_its_last_gradient_pass(name, data, monkeypatch):
    """A fit's confidence on its own rows (the class NLLs of vs, the curve's input of vs-hier-platt)
    comes from the solve's last gradient pass, not from another pass over the rows (issue 36);
    the numbers are those of that pass (the class NLLs within 1e-12 of top_margin's)."""
    from topcal.calibrators.vector import _core, calibrator as vc

    calls = []
    real = _core.top_margin
    monkeypatch.setattr(vc, "top_margin", lambda *a: calls.append(1) or real(*a))
    model = topcal.calibrator(name).fit(data)
    assert calls == []
    vs = model if name == "vs" else model.map_
    x = features(data, vs.beta_, vs.mix_)
    m = real(Layout(data.n_classes, False), vs.theta_, x, data.pred)
    from topcal._numeric import binary_nll

    rows = binary_nll(data.tp, data.fp, 1.0 / (1.0 + np.exp(-m)))
    expect = np.bincount(data.pred, weights=rows, minlength=data.n_classes)
    np.testing.assert_allclose(vs.class_nll_, expect, rtol=1e-12)


def test_a_folds_solve_stops_where_its_newton_decrement_meets_fold_tol(monkeypatch):
    """solve(fold=True) (a cross-validation fold from the all-data optimum and Hessian;
    docs/vector.md#fold-fits) returns the first point whose Newton decrement is within FOLD_TOL
    of the loss, without the step from it: fewer passes than the warm solve to WARM_TOL x tol,
    the same optimum to about sqrt(FOLD_TOL) (the loss within 1e-9 relative). A start already
    within it is returned untouched (a mutant that takes the last step anyway fails that)."""
    from topcal.calibrators.vector import _solve

    d, lay, x, w, whole, t0, _ = _whole_problem()
    part = VectorObjective(x[::2], d.labels[::2], w[::2], lay, 1.0)
    warm_h = whole.hessian(t0, 1) + np.diag(2.0 * part.r)
    passes = _count_passes(monkeypatch)
    t1, f1, _, ok1 = _solve.solve(part, t0, 500, hessian=warm_h, fold=True)
    n_fold = len(passes)
    passes.clear()
    t2, f2, _, ok2 = _solve.solve(part, t0, 500, hessian=warm_h)
    assert ok1 and ok2 and n_fold < len(passes)
    f, g = part.value_grad(t1)
    dec = float(g @ np.linalg.solve(warm_h, g))
    assert dec / 2 <= _solve.FOLD_TOL * max(1.0, abs(f))
    assert f1 == f and f1 == pytest.approx(f2, rel=1e-9)
    np.testing.assert_allclose(t1, t2, rtol=0, atol=1e-4)
    # a start already within the tolerance is returned as it is, after one pass (no step from it)
    monkeypatch.setattr(_solve, "FOLD_TOL", 1.0)
    passes.clear()
    t3, _, it3, _ = _solve.solve(part, t0, 500, hessian=warm_h, fold=True)
    assert len(passes) == 1 and it3 == 0 and np.array_equal(t3, t0)


@pytest.mark.parametrize("kind", ["probs", "logits"])
def test_a_prediction_reads_the_scores_block_by_block_bit_for_bit(kind, monkeypatch):
    """Issue 36: a vs prediction makes no n x K array (the map's input and its margin block by
    block from the scores, each row logged once); every number is the whole-array steps' (the
    log of every row, rescaled in place, then the margins), bit for bit."""
    from topcal.calibrators.vector import _core

    p, y = _sim(n=3000, k=6, seed=2)
    d = TopLabelData.from_probs(p, y) if kind == "probs" else TopLabelData.from_logits(np.log(p), y)
    m = _fit("vs", d)
    monkeypatch.setattr(_core, "_BLOCK", 600)  # 100 rows a block: many blocks
    logged = _count_logged_rows(monkeypatch)
    got = m._margin(d)
    assert logged == [100] * 30
    lay = Layout(6, False)
    ref = _core.top_margin(lay, m.theta_, _core.features(d, m.beta_, m.mix_), d.pred)
    assert np.array_equal(got, ref)
    assert np.array_equal(m.predict(d), _core.conf_from_margin(ref))


def test_a_folds_vs_and_vs_hier_platt_predict_its_rows_once(monkeypatch):
    """In a cross-validation fold (and the first look), vs and the map of vs-hier-platt are one
    solve: their margins on the fold's test rows are computed once (issue 36), the same numbers
    as each model's own prediction outside the fold."""
    from topcal.calibrators.select import crossfit
    from topcal.calibrators.vector import calibrator

    p, y = _sim(n=1500, k=5, seed=3)
    d = TopLabelData.from_probs(p, y)
    calls = []
    real = calibrator.data_margin
    monkeypatch.setattr(calibrator, "data_margin", lambda *a: calls.append(1) or real(*a))
    run = crossfit.cross_fit(d, ["vs", "vs-hier-platt"], 3)
    assert len(calls) == 3  # one per fold, not two
    calls.clear()
    run2 = crossfit.cross_fit(d, ["vs", "vs-hier-platt", "sms"], 3)
    assert len(calls) == 6  # sms has its own map
    for n in ("vs", "vs-hier-platt"):
        assert np.array_equal(run.confidence[n], run2.confidence[n])
    monkeypatch.setattr(  # each model's margins its own, as before
        calibrator.VectorScaling,
        "_margin",
        lambda m, data: real(m._layout(), m.theta_, data, m.beta_, m.mix_),
    )
    ref = crossfit.cross_fit(d, ["vs", "vs-hier-platt"], 3)
    for n in ("vs", "vs-hier-platt"):
        assert np.array_equal(run.confidence[n], ref.confidence[n])


def test_vs_at_many_classes_holds_no_class_by_class_matrix():
    # without the off-diagonal part nothing of vs is K x K: at 10^4 classes a dense diagonal of the
    # gradient (800 MB) and a mask (100 MB) made auto's peak 9.5 x its input (issue 37: <= 6 x)
    import tracemalloc

    rng = np.random.default_rng(0)
    n, k = 200, 3000
    z = rng.normal(0.0, 2.0, size=(n, k))
    y = rng.integers(0, k, n)
    d = TopLabelData.from_logits(z, y)
    x = features(d, 1.0)  # n x K: 4.8 MB
    tracemalloc.start()
    try:
        obj = VectorObjective(x, d.labels, np.ones(n), Layout(k, False), 1.0)
        f, g = obj.value_grad(obj.layout.start())
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert g.shape == (1 + 2 * k,) and np.isfinite(f)
    assert peak < 4e6  # blocks of rows; a K x K float64 matrix is 72 MB here, a mask 9 MB
