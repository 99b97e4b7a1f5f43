"""The calibrated full vector: ``Calibrator.predict_proba``, its model file, ``apply --full`` and
the full-vector metrics."""

import json
import warnings

import numpy as np
import pandas as pd
import pytest

import topcal
from _cli import assert_error, assert_ok, call, cli, snapshot
from _sim import simulate_probs
from topcal import persist
from topcal.calibrators.fullvector import SMS_MAX_CLASSES, map_name
from topcal.errors import DataError, TopcalWarning

pytestmark = pytest.mark.filterwarnings("ignore::topcal.errors.DegenerateClassWarning")


@pytest.fixture(scope="module")
def sets():
    fit = simulate_probs(2000, seed=1, k=4, sharpen=[2.0, 1.5, 0.7, 1.2])
    new = simulate_probs(800, seed=2, k=4, sharpen=[2.0, 1.5, 0.7, 1.2])
    return fit, new


def _check_vector(model, p_new):
    proba = model.predict_proba(p_new)
    conf = model.predict(p_new)
    rows = np.arange(len(p_new))
    top = p_new.argmax(1)
    assert proba.shape == p_new.shape
    np.testing.assert_allclose(proba.sum(1), 1.0, rtol=0, atol=1e-12)
    np.testing.assert_array_equal(proba[rows, top], conf)  # the confidence, bit for bit
    assert proba.min() >= 0
    return proba


@pytest.mark.parametrize("method", ["hist", "kde-mon2", "sts", "bts", "vs", "sms", "vs-hier-platt"])
def test_every_model_fitted_on_vectors_gives_a_calibrated_vector(sets, method):
    (p, y), (p_new, _) = sets
    model = topcal.calibrator(method).fit(p, y)
    proba = _check_vector(model, p_new)
    vmap = model.vector_map_
    # the model's own map (vs, sms, the corrected forms), else sms fitted beside it (4 classes)
    own = {"vs": "vs", "sms": "sms", "vs-hier-platt": "vs"}.get(method)
    assert vmap.name == (own or "sms")
    assert (model._vector is None) == (own is not None)
    if method in ("vs", "sms"):  # the map's own vector: confidence on top, its softmax elsewhere
        assert vmap is model
    # the model file keeps the map: loaded back, the same vectors bit for bit
    again = persist.loads(persist.dumps(model))
    np.testing.assert_array_equal(again.predict_proba(p_new), proba)
    doc = json.loads(persist.dumps(model))["model"]
    assert ("vector" in doc) == (own is None)
    if own is None:
        assert doc["vector"]["method"] == "sms" and doc["vector"]["classes"] == doc["classes"]


def test_the_rest_is_the_maps_distribution_over_the_other_classes(sets):
    (p, y), (p_new, _) = sets
    model = topcal.calibrator("hist").fit(p, y)
    proba = model.predict_proba(p_new)
    sms = topcal.calibrator("sms").fit(p, y)  # the map fitted beside hist: the same fit
    whole = sms.predict_proba(p_new)
    top = p_new.argmax(1)
    rows = np.arange(len(top))
    rest, map_rest = proba.copy(), whole.copy()
    rest[rows, top] = map_rest[rows, top] = 0
    np.testing.assert_allclose(
        rest / rest.sum(1, keepdims=True), map_rest / map_rest.sum(1, keepdims=True), rtol=1e-10
    )
    # and it beats sharing the rest by the uncalibrated scores on held-out full-vector NLL
    from topcal.calibrators.fullvector import distribute_rest

    data = topcal.TopLabelData.from_probs(*sets[1])
    naive = distribute_rest(p_new, top, model.predict(p_new))
    assert topcal.metrics.vector_nll(data, proba).overall < (
        topcal.metrics.vector_nll(data, naive).overall
    )


def test_the_map_is_sms_up_to_15_classes_then_vs():
    assert map_name(SMS_MAX_CLASSES) == "sms" and map_name(SMS_MAX_CLASSES + 1) == "vs"
    p, y = simulate_probs(1500, seed=3, k=SMS_MAX_CLASSES + 2)
    model = topcal.calibrator("hist").fit(p, y)
    assert model.vector_map_.name == "vs"
    _check_vector(model, p[:300])


def test_auto_uses_its_choice_s_map_or_fits_one(sets):
    (p, y), (p_new, _) = sets
    auto = topcal.calibrator("auto", candidates=["vs", "hist"], tolerance=0).fit(p, y)
    if auto.method_ == "vs":
        assert auto.vector_map_ is auto.model_ and auto._vector is None
    else:
        assert auto.vector_map_.name == "sms"
    _check_vector(auto, p_new)
    chose_hist = topcal.calibrator("auto", candidates=["hist"]).fit(p, y)
    assert chose_hist.vector_map_.name == "sms" and chose_hist._vector is not None
    again = persist.loads(persist.dumps(chose_hist))
    np.testing.assert_array_equal(again.predict_proba(p_new), chose_hist.predict_proba(p_new))


def test_parts_and_folds_fit_no_map(sets):
    (p, y), _ = sets
    for keep in ("model", "predictions"):
        model = topcal.calibrator("hist").fit(p, y, keep=keep)
        assert model.vector_map_ is None


def test_update_keeps_the_first_fit_s_map(sets):
    (p, y), (p_new, y_new) = sets
    model = topcal.calibrator("hist").fit(p, y)
    vmap = model.vector_map_
    model.update(p_new, y_new)
    assert model.vector_map_ is vmap
    _check_vector(model, p_new)


def test_a_model_fitted_on_top_scores_says_the_rest_is_not_calibrated(sets):
    (p, y), (p_new, _) = sets
    top = topcal.TopLabelData.from_scores(p.argmax(1), p.max(1), labels=y, classes=list("0123"))
    model = topcal.calibrator("hist").fit(top)
    assert model.vector_map_ is None
    with pytest.warns(TopcalWarning, match="not calibrated"):
        proba = model.predict_proba(p_new)
    rows = np.arange(len(p_new))
    np.testing.assert_array_equal(proba[rows, p_new.argmax(1)], model.predict(p_new))
    np.testing.assert_allclose(proba.sum(1), 1.0)
    # data without vectors: no vector to give
    new_top = topcal.TopLabelData.from_scores(p_new.argmax(1), p_new.max(1), classes=list("0123"))
    with pytest.raises(DataError, match="needs the full score vectors"):
        model.predict_proba(new_top)


def test_a_model_file_with_a_bad_vector_map_is_refused(sets, tmp_path):
    (p, y), _ = sets
    d = topcal.calibrator("hist").fit(p, y).to_dict()
    d["vector"]["method"] = "hist"
    with pytest.raises(topcal.errors.ModelFileError, match="vector map"):
        type(topcal.calibrator("hist")).from_dict(d)
    d["vector"]["method"] = "sms"
    d["vector"]["classes"] = ["a", "b", "c", "d"]
    with pytest.raises(topcal.errors.ModelFileError):
        type(topcal.calibrator("hist")).from_dict(d)


# ------------------------------------------------------------------------- metrics
def test_vector_nll_and_brier_against_hand_computed_values():
    data = topcal.TopLabelData.from_probs(
        np.array([[0.7, 0.2, 0.1], [0.1, 0.6, 0.3]]), np.array([0, 2])
    )
    proba = np.array([[0.6, 0.3, 0.1], [0.2, 0.5, 0.3]])
    got = topcal.metrics.vector_nll(data, proba)
    np.testing.assert_allclose(got.overall, -(np.log(0.6) + np.log(0.3)) / 2)
    np.testing.assert_allclose(got.per_class[:2], [-np.log(0.6), -np.log(0.3)])
    brier = topcal.metrics.vector_brier(data, proba)
    want = [0.4**2 + 0.3**2 + 0.1**2, 0.2**2 + 0.5**2 + 0.7**2]
    np.testing.assert_allclose(brier.overall, np.mean(want))
    # scikit-learn's log_loss agrees
    from sklearn.metrics import log_loss

    np.testing.assert_allclose(got.overall, log_loss([0, 2], proba, labels=[0, 1, 2]))
    with pytest.raises(DataError, match="not a probability vector"):
        topcal.metrics.vector_nll(data, proba * 2)
    with pytest.raises(DataError, match="shape"):
        topcal.metrics.vector_brier(data, proba[:, :2])


# ------------------------------------------------------------------------- apply --full
@pytest.fixture
def files(tmp_path, sets):
    (p, y), (p_new, y_new) = sets
    names = np.array(["ant", "bee", "cow", "dog"])
    fit = pd.DataFrame({f"p_{c}": p[:, j] for j, c in enumerate(names)})
    fit["label"] = names[y]
    fit.to_csv(tmp_path / "fit.csv", index=False)
    new = pd.DataFrame({f"p_{c}": p_new[:, j] for j, c in enumerate(names)})
    new.insert(0, "id", np.arange(len(new)))
    new.to_csv(tmp_path / "new.csv", index=False)
    new.to_parquet(tmp_path / "new.parquet")
    assert_ok(call("fit", tmp_path / "fit.csv", "--method", "hist", "-o", tmp_path / "m.json"))
    return tmp_path, new


def _check_full_output(frame, classes):
    cols = [f"calibrated_{c}" for c in classes]
    v = frame[cols].to_numpy()
    np.testing.assert_allclose(v.sum(1), 1.0, rtol=0, atol=1e-12)
    pred = frame["pred"].astype(str).to_numpy()
    at_pred = v[np.arange(len(v)), [classes.index(c) for c in pred]]
    np.testing.assert_array_equal(at_pred, frame["confidence"].to_numpy())
    return v


def test_apply_full_writes_the_models_vectors_in_every_path(files):
    tmp, new = files
    classes = ["ant", "bee", "cow", "dog"]
    outs = {}
    for src, out, extra in [
        ("new.csv", "a.csv", ()),
        ("new.parquet", "b.parquet", ()),
        ("new.csv", "c.csv", ("--chunk-rows", "97")),
        ("new.parquet", "d.parquet", ("--chunk-rows", "100")),
    ]:
        r = assert_ok(call("apply", tmp / "m.json", tmp / src, "-o", tmp / out, "--full", *extra))
        assert "with full vectors" in r.stdout
        frame = pd.read_csv(tmp / out) if out.endswith(".csv") else pd.read_parquet(tmp / out)
        outs[out] = _check_full_output(frame, classes)
        assert list(frame.columns[: len(new.columns)]) == list(new.columns)
    for v in outs.values():
        np.testing.assert_array_equal(v, outs["b.parquet"])
    # the rows whose calibrated vector ranks another class first are counted and said
    pred = pd.read_csv(tmp / "a.csv")["pred"].map(classes.index).to_numpy()
    moved = int(np.count_nonzero(outs["a.csv"].argmax(1) != pred))
    assert 0 < moved < len(pred) / 5
    assert f"{moved} of {len(pred)} rows" in r.stdout and "ranks another class above pred" in (
        r.stdout
    )
    model = persist.load(tmp / "m.json")
    want = model.predict_proba(new.drop(columns="id"))
    np.testing.assert_array_equal(outs["b.parquet"], want)
    # without --full: the same confidence, no vector columns
    assert_ok(call("apply", tmp / "m.json", tmp / "new.csv", "-o", tmp / "plain.csv"))
    plain = pd.read_csv(tmp / "plain.csv")
    assert not any(c.startswith("calibrated_") for c in plain.columns)
    np.testing.assert_array_equal(plain["confidence"], pd.read_csv(tmp / "a.csv")["confidence"])


def test_apply_full_refuses_top_score_input_and_clashing_columns(files):
    tmp, new = files
    top = pd.DataFrame({"pred": ["ant", "bee"], "score": [0.9, 0.6]})
    top.to_csv(tmp / "top.csv", index=False)
    r = cli("apply", tmp / "m.json", tmp / "top.csv", "-o", tmp / "o.csv", "--full")
    assert_error(r, "--full", "full score vectors", "drop --full")
    r = cli("apply", tmp / "m.json", tmp / "top.csv", "-o", tmp / "o.csv", "--full",
            "--chunk-rows", "1")  # fmt: skip
    assert_error(r, "full score vectors")
    clash = new.assign(calibrated_cow=0.5)
    clash.to_csv(tmp / "clash.csv", index=False)
    before = snapshot(tmp)
    r = cli("apply", tmp / "m.json", tmp / "clash.csv", "-o", tmp / "o.csv", "--full")
    assert_error(r, "'calibrated_cow'", "rename it")
    # the output is never an input, and a refused run leaves every file as it was
    r = cli("apply", tmp / "m.json", tmp / "new.csv", "-o", tmp / "new.csv", "--full")
    assert_error(r, "is the input file")
    assert snapshot(tmp) == before


def test_apply_full_from_a_model_fitted_on_top_scores_warns(files):
    tmp, new = files
    fit = pd.read_csv(tmp / "fit.csv")
    p = fit.filter(like="p_").to_numpy()
    names = np.array(["ant", "bee", "cow", "dog"])
    top = pd.DataFrame({"pred": names[p.argmax(1)], "score": p.max(1), "label": fit["label"]})
    top.to_csv(tmp / "topfit.csv", index=False)
    assert_ok(call("fit", tmp / "topfit.csv", "--method", "hist", "-o", tmp / "t.json"))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        r = call("apply", tmp / "t.json", tmp / "new.csv", "-o", tmp / "o.csv", "--full")
    assert_ok(r)
    said = r.stderr + " ".join(str(w.message) for w in caught)
    assert "not calibrated" in said
    _check_full_output(pd.read_csv(tmp / "o.csv"), ["ant", "bee", "cow", "dog"])


@pytest.mark.heavy
@pytest.mark.slow
def test_apply_full_on_dask_equals_local(files, cluster):
    tmp, new = files
    d = tmp / "parts"
    d.mkdir()
    for i, part in enumerate(np.array_split(np.arange(len(new)), 3)):
        new.iloc[part].to_parquet(d / f"part{i}.parquet")
    new.iloc[:0].to_parquet(d / "part9.parquet")  # an empty partition: the same schema
    addr = cluster.scheduler.address
    assert_ok(call("apply", tmp / "m.json", d, "-o", tmp / "local.csv", "--full"))
    assert_ok(cli("apply", tmp / "m.json", d, "-o", tmp / "dask.csv", "--full",
                  "--engine", "dask", "--scheduler", addr))  # fmt: skip
    assert (tmp / "dask.csv").read_bytes() == (tmp / "local.csv").read_bytes()
    assert_ok(cli("apply", tmp / "m.json", d, "-o", tmp / "folder", "--full",
                  "--engine", "dask", "--scheduler", addr))  # fmt: skip
    got = pd.read_parquet(tmp / "folder")
    _check_full_output(got, ["ant", "bee", "cow", "dog"])
    pd.DataFrame({"pred": ["ant", "bee"], "score": [0.9, 0.6]}).to_parquet(tmp / "top.parquet")
    r = cli("apply", tmp / "m.json", tmp / "top.parquet", "-o", tmp / "x.csv", "--full",
            "--engine", "dask", "--scheduler", addr)  # fmt: skip
    assert_error(r, "full score vectors")


@pytest.mark.slow  # four commands end to end
def test_metrics_command_gives_full_vector_losses_where_vectors_are_given(files):
    tmp, _ = files
    fit = pd.read_csv(tmp / "fit.csv")
    data = topcal.io.read_data(tmp / "fit.csv")
    model = persist.load(tmp / "m.json")
    r = assert_ok(call("metrics", tmp / "fit.csv", "--model", tmp / "m.json", "--json"))
    got = json.loads(r.stdout)["vector"]
    proba = model.predict_proba(data)
    assert got["nll"] == topcal.metrics.vector_nll(data, proba).overall
    assert got["brier"] == topcal.metrics.vector_brier(data, proba).overall
    cw = topcal.overall.classwise_ece(data, proba)  # Kull et al.'s, with its interval
    assert got["classwise_ece"] == cw.to_dict()
    # no model: the raw scores' own vectors
    raw = json.loads(assert_ok(call("metrics", tmp / "fit.csv", "--json")).stdout)["vector"]
    from sklearn.metrics import log_loss

    p = fit.filter(like="p_").to_numpy()
    codes = pd.Categorical(fit["label"], categories=["ant", "bee", "cow", "dog"]).codes
    np.testing.assert_allclose(raw["nll"], log_loss(codes, p, labels=[0, 1, 2, 3]), rtol=1e-9)
    assert got["nll"] < raw["nll"]  # fitted on these rows: the calibrated vector is better
    text = assert_ok(call("metrics", tmp / "fit.csv", "--model", tmp / "m.json")).stdout
    assert f"full vector (predict_proba): NLL {got['nll']:.4f}" in text
    # top scores only: no vector, no line
    top = pd.DataFrame({"pred": fit.filter(like="p_").idxmax(axis=1).str[2:],
                        "score": p.max(1), "label": fit["label"]})  # fmt: skip
    top.to_csv(tmp / "top.csv", index=False)
    r = assert_ok(call("metrics", tmp / "top.csv", "--model", tmp / "m.json", "--json"))
    assert "vector" not in json.loads(r.stdout)


@pytest.mark.slow
def test_the_vector_map_s_memory_and_fit_vector_false():
    """The map is fitted after the model, from the scores: its peak (the n x K features, sms's
    blocks) is the fit's where the method's own is lower; ``vector=False`` fits the model alone."""
    import tracemalloc

    from _sim import bench_probs

    p, y = bench_probs(10_000, 10, 0)
    data = topcal.TopLabelData.from_probs(p, y)
    topcal.calibrator("hist").fit(data)  # imports and caches first
    peaks = {}
    for vector in (True, False):
        tracemalloc.start()
        try:
            model = topcal.calibrator("hist").fit(data, vector=vector)
            peaks[vector] = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert (model.vector_map_ is None) == (not vector)
    assert peaks[False] < peaks[True] <= 4.0 * p.nbytes, peaks
