"""The scikit-learn side: estimator contract of calibrators, array inputs, the meta-estimator."""

import warnings

import numpy as np
import pandas as pd
import pytest
from sklearn.base import clone
from sklearn.datasets import make_classification
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import GridSearchCV, cross_val_score
from sklearn.pipeline import make_pipeline, Pipeline
from sklearn.preprocessing import StandardScaler
from sklearn.naive_bayes import GaussianNB
from sklearn.svm import LinearSVC
from sklearn.tree import DecisionTreeClassifier
from sklearn.utils.estimator_checks import check_estimator

import topcal
from _sim import simulate_probs
from topcal import TopLabelCalibratedClassifier
from topcal.errors import DataError, NotFittedError, ParameterError
from topcal.calibrators.fullvector import distribute_rest

pytestmark = pytest.mark.filterwarnings("ignore::topcal.errors.DegenerateClassWarning")


@pytest.fixture(scope="module")
def probs():
    return simulate_probs(3000, seed=4, k=4)


# ------------------------------------------------------- calibrator contract
@pytest.mark.parametrize("name", topcal.available_methods())
def test_every_calibrator_clones_and_sets_params(name):
    cal = topcal.calibrator(name)
    twin = clone(cal)
    assert type(twin) is type(cal) and twin is not cal
    assert twin.get_params(deep=True) == cal.get_params()
    params = cal.get_params()
    if params:
        key = next(iter(params))
        assert cal.set_params(**{key: params[key]}) is cal
    with pytest.raises(ParameterError, match="no parameter"):
        cal.set_params(no_such_param=1)


def test_set_params_is_checked_at_fit(probs):
    p, y = probs
    cal = topcal.calibrator("hist").set_params(n_bins=0)
    with pytest.raises(ParameterError, match="n_bins"):
        cal.fit(p, y)
    cal.set_params(n_bins=5).fit(p, y)
    assert cal.describe()["params"]["n_bins"] == 5


@pytest.mark.slow
def test_arrays_frames_and_tensors_give_the_same_fit(probs):
    p, y = probs
    ref = topcal.calibrator("kde-mon2").fit(topcal.TopLabelData.from_probs(p, y))
    want = ref.predict(topcal.TopLabelData.from_probs(p))
    from_array = topcal.calibrator("kde-mon2").fit(p, y)
    np.testing.assert_array_equal(from_array.predict(p), want)
    frame = pd.DataFrame(p, columns=[f"p_{c}" for c in ref.classes_])
    from_frame = topcal.calibrator("kde-mon2").fit(frame, y)
    np.testing.assert_array_equal(from_frame.predict(frame), want)
    np.testing.assert_array_equal(from_frame.predict(frame.assign(label=y)), want)  # labels ignored
    import torch  # in the experiments extra, which `make test` installs

    t = torch.tensor(p, requires_grad=True)
    from_tensor = topcal.calibrator("kde-mon2").fit(t, torch.tensor(y))
    np.testing.assert_array_equal(from_tensor.predict(t), want)


def test_logits_are_detected_and_named_classes(probs):
    p, y = probs
    z = np.log(p) + 3.0  # logits: same softmax
    names = ["cat", "dog", "eel", "fox"]
    a = topcal.calibrator("sts").fit(z, np.asarray(names)[y], classes=names)
    b = topcal.calibrator("sts").fit(topcal.TopLabelData.from_logits(z, y, classes=names))
    assert a.classes_ == tuple(names)
    np.testing.assert_allclose(
        a.predict(z), b.predict(topcal.TopLabelData.from_logits(z, classes=names))
    )
    np.testing.assert_allclose(a.predict(p, kind="probs"), a.predict(z), atol=1e-9)


def test_array_input_errors_are_one_line(probs):
    p, y = probs
    cal = topcal.calibrator("hist")
    with pytest.raises(DataError, match="looks like probabilities .* sums to"):
        cal.fit(p[:, :3], y)
    with pytest.raises(DataError, match="2-d array of scores"):
        cal.fit(p[:, 0], y)
    with pytest.raises(DataError, match="kind must be one of"):
        cal.fit(p, y, kind="probability")
    with pytest.raises(DataError, match="y was given with a TopLabelData"):
        cal.fit(topcal.TopLabelData.from_probs(p, y), y)
    with pytest.raises(DataError, match="needs labelled data"):
        cal.fit(p)
    cal.fit(p, y)
    with pytest.raises(DataError, match="3 columns but 4 class names"):
        cal.predict(p[:, :3] / p[:, :3].sum(1, keepdims=True))


def test_calibrator_is_the_last_step_of_a_pipeline(probs):
    from sklearn.preprocessing import FunctionTransformer

    p, y = probs
    pipe = Pipeline([("log", FunctionTransformer(np.log)), ("cal", topcal.calibrator("sts"))])
    conf = pipe.fit(p, y).predict(p)
    direct = topcal.calibrator("sts").fit(np.log(p), y).predict(np.log(p))
    np.testing.assert_allclose(conf, direct)


# ------------------------------------------------------------ meta-estimator
def _blobs(n=1500, seed=0, k=3):
    return make_classification(
        n_samples=n,
        n_features=8,
        n_informative=5,
        n_classes=k,
        n_clusters_per_class=1,
        class_sep=0.8,
        random_state=seed,
    )


#: Checks scikit-learn itself skips here: the array-API check needs SCIPY_ARRAY_API=1 and
#: array-api-compat,
#: and topcal computes in NumPy (array-API inputs are converted by the classifier, not by topcal).
SKLEARN_SKIPS = {"check_array_api_input"}


def _run_checks(est, expected):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        results = check_estimator(est, on_fail=None, expected_failed_checks=expected)
    bad = [
        (r["check_name"], r["status"], str(r["exception"])[:200])
        for r in results
        if r["status"] != "passed"
        and not (r["status"] == "xfail" and r["check_name"] in expected)
        and not (r["status"] == "skipped" and r["check_name"] in SKLEARN_SKIPS)
    ]
    assert not bad, bad
    assert len(results) > 40
    return {r["check_name"]: r["status"] for r in results}


@pytest.mark.slow
def test_meta_estimator_passes_sklearn_checks_with_temperature_scaling():
    # temperature scaling of a smooth classifier keeps the predicted class on top: every check
    # applies
    status = _run_checks(TopLabelCalibratedClassifier(GaussianNB(), method="sts", cv=3), {})
    assert status["check_classifiers_train"] == "passed"
    assert status["check_fit_idempotent"] == status["check_estimators_nan_inf"] == "passed"


@pytest.mark.heavy
@pytest.mark.slow
@pytest.mark.parametrize("method", ["hist", "auto"])
def test_meta_estimator_passes_every_sklearn_check_with_logistic_regression(method):
    # predict is the argmax of the calibrated vector, so check_classifiers_train's
    # argmax(predict_proba) == predict holds on every row for any method
    status = _run_checks(
        TopLabelCalibratedClassifier(LogisticRegression(), method=method, cv=3), {}
    )
    assert status["check_classifiers_train"] == "passed"


@pytest.mark.slow
def test_meta_estimator_passes_sklearn_checks_with_score_methods():
    status = _run_checks(TopLabelCalibratedClassifier(GaussianNB(), method="hist", cv=3), {})
    assert status["check_classifiers_train"] == "passed"
    # a classifier that takes sparse input: the meta-estimator passes it through
    status = _run_checks(
        TopLabelCalibratedClassifier(
            DecisionTreeClassifier(max_depth=4, random_state=0), method="kde-mon2", cv=3
        ),
        {},
    )
    assert status["check_estimator_sparse_matrix"] == "passed"


@pytest.mark.slow
def test_pipeline_gridsearch_over_method_and_cross_val_score():
    X, y = _blobs(600)
    pipe = make_pipeline(
        StandardScaler(), TopLabelCalibratedClassifier(LogisticRegression(), cv=3, method="hist")
    )
    grid = GridSearchCV(
        pipe,
        {"toplabelcalibratedclassifier__method": ["hist", "kde-mon2", "sts"]},
        scoring="neg_log_loss",
        cv=3,
    )
    grid.fit(X, y)
    assert grid.best_params_["toplabelcalibratedclassifier__method"] in ("hist", "kde-mon2", "sts")
    assert set(grid.cv_results_["param_toplabelcalibratedclassifier__method"]) == {
        "hist",
        "kde-mon2",
        "sts",
    }
    assert np.all(np.isfinite(grid.cv_results_["mean_test_score"]))
    scores = cross_val_score(
        TopLabelCalibratedClassifier(LogisticRegression(), method="kde-mon2", cv=3), X, y, cv=3
    )
    assert scores.shape == (3,) and scores.min() > 0.5


@pytest.mark.slow
def test_method_params_are_estimator_params():
    X, y = _blobs()
    est = TopLabelCalibratedClassifier(LogisticRegression(), method="hist", cv=3, n_bins=4)
    assert est.get_params()["n_bins"] == 4
    twin = clone(est)
    assert {k: v for k, v in twin.get_params(deep=False).items() if k != "estimator"} == {
        "method": "hist",
        "cv": 3,
        "n_bins": 4,
    }
    twin.set_params(n_bins=7, strategy="quantile")
    got = twin.fit(X, y).calibrator_.get_params()
    assert (got["n_bins"], got["strategy"]) == (7, "quantile")
    grid = GridSearchCV(est, {"n_bins": [3, 12]}, cv=2).fit(X, y)
    assert grid.best_estimator_.calibrator_.n_bins in (3, 12)
    with pytest.raises(ParameterError, match="no parameter"):
        TopLabelCalibratedClassifier(LogisticRegression(), method="sts", cv=3, n_bins=4).fit(X, y)
    with pytest.raises(ParameterError, match="unknown method"):
        TopLabelCalibratedClassifier(LogisticRegression(), method="platt", cv=3).fit(X, y)


def test_prefit_estimator_is_not_refitted():
    X, y = _blobs(2400)
    clf = LogisticRegression().fit(X[:1200], y[:1200])
    coef = clf.coef_.copy()
    cal = TopLabelCalibratedClassifier(clf, method="kde-mon2").fit(X[1200:1800], y[1200:1800])
    assert cal.estimator_ is clf
    np.testing.assert_array_equal(clf.coef_, coef)
    _assert_predict_is_the_vectors_argmax(cal, X[1800:], clf.predict(X[1800:]))
    # the calibrator is exactly kde-mon2 fitted on the classifier's held-out probabilities
    direct = topcal.calibrator("kde-mon2").fit(clf.predict_proba(X[1200:1800]), y[1200:1800])
    np.testing.assert_allclose(
        cal.predict_confidence(X[1800:]), direct.predict(clf.predict_proba(X[1800:]))
    )
    from sklearn.exceptions import NotFittedError as SklearnNotFittedError

    for caught in (NotFittedError, SklearnNotFittedError):
        with pytest.raises(
            caught,
            match=r"^This LogisticRegression instance is not fitted yet.*"
            r"cv=5.*FrozenEstimator",
        ):
            TopLabelCalibratedClassifier(LogisticRegression(), method="hist").fit(X, y)


def _assert_predict_is_the_vectors_argmax(cal, X, own):
    """predict == classes_[argmax(predict_proba)] on every row, and the classifier's own
    prediction ``own`` on nearly all."""
    proba = cal.predict_proba(X)
    pred = cal.predict(X)
    np.testing.assert_array_equal(pred, cal.classes_[proba.argmax(1)])
    np.testing.assert_allclose(proba.sum(1), 1.0, rtol=0, atol=1e-12)
    assert np.mean(pred == own) > 0.9


def test_cross_fitting_uses_out_of_fold_scores():
    from sklearn.model_selection import StratifiedKFold

    X, y = _blobs(900)
    cv = StratifiedKFold(3)
    cal = TopLabelCalibratedClassifier(LogisticRegression(), method="hist", cv=cv).fit(X, y)
    oof = np.empty((len(y), 3))
    for train, test in cv.split(X, y):
        oof[test] = LogisticRegression().fit(X[train], y[train]).predict_proba(X[test])
    direct = topcal.calibrator("hist").fit(oof, y)
    final = LogisticRegression().fit(X, y)
    np.testing.assert_allclose(cal.predict_confidence(X), direct.predict(final.predict_proba(X)))
    _assert_predict_is_the_vectors_argmax(cal, X, final.predict(X))


@pytest.mark.parametrize("k", [2, 4])
def test_decision_function_estimators_are_calibrated_on_logits(k):
    X, y = _blobs(1200, k=k)
    svc = LinearSVC().fit(X[:600], y[:600])
    cal = TopLabelCalibratedClassifier(svc, method="sts").fit(X[600:], y[600:])
    assert cal.score_kind_ == "logits"
    proba = cal.predict_proba(X[:600])
    assert proba.shape == (600, k)
    np.testing.assert_allclose(proba.sum(1), 1.0)
    _assert_predict_is_the_vectors_argmax(cal, X[:600], svc.predict(X[:600]))


def test_predict_proba_top_entry_is_the_confidence_and_strings_work():
    X, y = _blobs(1500, k=4)
    names = np.array(["ant", "bee", "cow", "dog"])[y]
    clf = LogisticRegression().fit(X[:500], names[:500])
    cal = TopLabelCalibratedClassifier(clf, method="hist", n_bins=5).fit(
        X[500:1000], names[500:1000]
    )
    proba = cal.predict_proba(X[1000:])
    conf = cal.predict_confidence(X[1000:])
    top = clf.predict_proba(X[1000:]).argmax(1)
    np.testing.assert_allclose(proba[np.arange(len(top)), top], conf)
    np.testing.assert_allclose(proba.sum(1), 1.0)
    assert list(cal.classes_) == ["ant", "bee", "cow", "dog"]
    # the other entries are the calibrator's vector map's (sms at 4 classes), scaled to 1 - c
    vmap = cal.calibrator_.vector_map_
    assert vmap.name == "sms" and vmap is cal.calibrator_._vector
    rows = np.arange(len(top))
    others = proba.copy()
    others[rows, top] = 0
    expect = vmap._rest(cal.top_label_data(X[1000:])) * (1 - conf)[:, None]
    np.testing.assert_allclose(others, expect, rtol=1e-12, atol=1e-15)
    _assert_predict_is_the_vectors_argmax(cal, X[1000:], clf.predict(X[1000:]))
    with pytest.raises(DataError, match="does not know"):
        cal.fit(X[500:1000], np.where(names[500:1000] == "ant", "elk", names[500:1000]))


def test_distribute_rest_shares_in_proportion_with_a_cap():
    base = np.array(
        [[0.5, 0.3, 0.2, 0.0], [0.4, 0.35, 0.25, 0.0], [1.0, 0.0, 0.0, 0.0], [0.4, 0.3, 0.2, 0.1]]
    )
    top = np.array([0, 0, 0, 0])
    conf = np.array([0.8, 0.4, 0.7, 0.1])
    out = distribute_rest(base, top, conf)
    np.testing.assert_allclose(out.sum(1), 1.0)
    np.testing.assert_allclose(out[:, 0], conf)
    np.testing.assert_allclose(out[0], [0.8, 0.12, 0.08, 0.0])  # plain proportion, below the cap
    np.testing.assert_allclose(
        out[1], [0.4, 0.35, 0.25, 0.0]
    )  # 0.6 in proportion 0.35:0.25, under the cap
    np.testing.assert_allclose(out[2], [0.7, 0.1, 0.1, 0.1])  # no information: equal shares
    np.testing.assert_allclose(
        out[3], [0.1, 0.45, 0.3, 0.15]
    )  # c < 1/K: plain proportion, uncapped
    capped = distribute_rest(np.array([[0.5, 0.45, 0.05]]), np.array([0]), np.array([0.5]))
    np.testing.assert_allclose(capped, [[0.5, 0.45, 0.05]])
    capped = distribute_rest(np.array([[0.4, 0.55, 0.05]]), np.array([1]), np.array([0.45]))
    np.testing.assert_allclose(
        capped, [[0.45, 0.45, 0.10]]
    )  # 0.55 * 0.4/... would exceed 0.45: capped


@pytest.mark.slow
def test_default_method_is_auto():
    # needs the "auto" calibrator of issue 9
    X, y = _blobs(900)
    est = TopLabelCalibratedClassifier(LogisticRegression(), cv=3)
    assert est.get_params()["method"] == "auto"
    est.fit(X, y)
    assert est.calibrator_.name == "auto"
    # the auto calibrator itself takes the classifier's probabilities as an array too
    np.testing.assert_allclose(
        est.calibrator_.predict(est.estimator_.predict_proba(X)), est.predict_confidence(X)
    )
    assert np.all((est.predict_confidence(X) >= 0) & (est.predict_confidence(X) <= 1))


def test_meta_estimator_adapts_to_a_use_set_with_other_class_frequencies():
    from topcal import metrics

    X, y = _blobs(9000, k=3)
    clf = LogisticRegression().fit(X[:3000], y[:3000])
    cal = TopLabelCalibratedClassifier(clf, method="hist").fit(X[3000:6000], y[3000:6000])
    rest = np.arange(6000, 9000)
    use = np.concatenate([rest[y[rest] == 0], rest[y[rest] == 1][:150], rest[y[rest] == 2][:150]])
    true = np.bincount(y[use], minlength=3) / use.size
    for ad in (
        cal.adapt(X[use], n_bootstrap=0),
        cal.adapt(priors={0: true[0], 1: true[1], 2: true[2]}),
    ):
        assert (
            ad is not cal and ad.estimator_ is clf and cal.calibrator_.name == "hist"
        )  # the original is unchanged
        # the vector moves to the new priors too (its other entries times the prior ratios), so
        # the decision follows them: more rows go to the now frequent class 0, more are right
        proba = ad.predict_proba(X[use])
        np.testing.assert_array_equal(ad.predict(X[use]), ad.classes_[proba.argmax(1)])
        assert np.mean(ad.predict(X[use]) == y[use]) >= np.mean(clf.predict(X[use]) == y[use])
        data = ad.top_label_data(X[use], y[use])
        before = metrics.nll(data, cal.predict_confidence(X[use])).overall
        after = metrics.nll(data, ad.predict_confidence(X[use])).overall
        assert after < before
        np.testing.assert_allclose(ad.predict_proba(X[use]).sum(1), 1.0)
    est = cal.adapt(X[use], n_bootstrap=0).calibrator_.estimate_.priors
    assert abs(est[0] - true[0]) < 0.1  # class 0 is three times as frequent as in the test set
    same = cal.adapt(
        X[use], n_bootstrap=0, shrink=0
    )  # the safety step's factor passes through: 0 = unchanged
    assert same.calibrator_.estimate_.shrink == 0.0
    np.testing.assert_array_equal(same.predict_confidence(X[use]), cal.predict_confidence(X[use]))


def test_an_unfitted_meta_estimator_says_so_in_both_libraries_terms():
    from sklearn.exceptions import NotFittedError as SklearnNotFittedError

    est = TopLabelCalibratedClassifier(LogisticRegression(), method="hist", cv=3)
    for method in (est.predict, est.predict_proba, est.predict_confidence):
        for caught in (NotFittedError, SklearnNotFittedError):
            with pytest.raises(caught, match="not fitted yet"):
                method(np.zeros((2, 8)))
