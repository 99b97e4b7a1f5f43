"""predict_interval, predict_confidence(X, interval=...) and ``topcal apply --interval`` (issue 23,
item 1)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy.special import expit, logit

import topcal
from topcal import TopLabelData, persist
from topcal.calibrators import calibrator
from topcal.errors import ModelFileError, ParameterError

from _cli import call
from _frames import probs_frame, write_parts

TOPCAL = Path(sys.executable).with_name("topcal")
COUNT_METHODS = [
    ("hist", {}),
    ("hist", {"shrinkage": 0}),
    ("cum", {}),
    ("cum-opt", {"shrinkage": 0}),
    ("kde-mon2", {}),
    ("kde-opt", {"shrinkage": 0}),
    ("conf1", {}),
]
TEMP_METHODS = ["sts", "csts", "tswa", "cstswa", "bts", "btswa"]
CURVES = [lambda s: s**2, lambda s: s, lambda s: expit(8 * (s - 0.6))]


def score_data(n, seed, curves=CURVES):
    rng = np.random.default_rng(seed)
    pred = np.repeat(np.arange(len(curves)), n)
    s = np.clip(rng.beta(4, 2, pred.size), 1e-4, 1 - 1e-4)
    p = np.empty(pred.size)
    for k, c in enumerate(curves):
        p[pred == k] = c(s[pred == k])
    labels = np.where(rng.random(pred.size) < p, pred, (pred + 1) % len(curves))
    return TopLabelData.from_scores(
        pred, s, labels, classes=[f"c{k}" for k in range(len(curves))], score_range=(0.0, 1.0)
    )


def grid(k, s, n_classes=3):
    return TopLabelData.from_scores(
        np.full(s.size, k),
        s,
        None,
        classes=[f"c{i}" for i in range(n_classes)],
        score_range=(0.0, 1.0),
    )


def fit(name, data, *, compact=True, **params):
    """``name`` fitted on ``data``; ``compact=False``: a kde model with its full tables, the layout
    of files before 2026-11-27 (those whose older versions had no interval statistics)."""
    model = calibrator(name, **params)
    if not compact:
        model.compact = False
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return model.fit(data)


def coverage(name, params, curves, n, seeds, truth=None):
    """Pointwise coverage of the 0.9 intervals averaged over scores, classes and seeds, and the mean
    width."""
    hits, widths = [], []
    s = np.linspace(0.45, 0.95, 21)
    for seed in range(seeds):
        model = fit(name, score_data(n, seed, curves), **params)
        for k, c in enumerate(curves):
            lo, hi = model.predict_interval(grid(k, s, len(curves)), 0.9)
            t = c(s) if truth is None else truth(k, s)
            hits.append((lo <= t) & (t <= hi))
            widths.append(hi - lo)
    return np.mean(np.concatenate(hits)), np.mean(np.concatenate(widths))


@pytest.mark.slow
@pytest.mark.parametrize(
    "name,params",
    [("hist", {"shrinkage": 0}), ("hist", {}), ("kde-mon2", {}), ("kde-opt", {"shrinkage": 0})],
)
def test_count_intervals_cover_the_true_curve_and_shrink_with_class_size(name, params):
    cov, width = coverage(name, params, CURVES, 1500, 6)
    assert 0.8 <= cov <= 0.99, cov
    cov_small, width_small = coverage(name, params, CURVES, 100, 6)
    assert cov_small >= 0.6, cov_small
    assert width < 0.6 * width_small, (width, width_small)


def test_a_too_narrow_interval_would_fail_the_coverage_check():
    """The check above can fail: the same intervals shrunk to a fifth cover far less."""
    model = fit("hist", score_data(1500, 0), shrinkage=0)
    s = np.linspace(0.45, 0.95, 21)
    lo, hi = model.predict_interval(grid(1, s), 0.9)
    c = model.predict(grid(1, s))
    lo, hi = c - (c - lo) / 5, c + (hi - c) / 5
    assert np.mean((lo <= s) & (s <= hi)) < 0.7


def test_cum_interval_covers_the_cumulative_precision():
    dens = np.linspace(0, 1, 20001)[1:-1]
    w = dens**3 * (1 - dens)

    def truth(k, s):
        num = np.cumsum((w * CURVES[k](dens))[::-1])[::-1]
        return np.interp(s, dens, num / np.cumsum(w[::-1])[::-1])

    cov, _ = coverage("cum", {"shrinkage": 0}, CURVES, 1500, 6, truth)
    assert 0.8 <= cov <= 1.0, cov


@pytest.mark.slow
@pytest.mark.parametrize("name", ["bts", "btswa"])
def test_binary_temperature_intervals_cover_in_model_truth(name):
    Ts = [(0.6, 0.4), (1.0, 0.0), (2.0, -0.5)]
    curves = [
        lambda s, T=T, A=A: expit((logit(s) + (A if name == "btswa" else 0.0)) / T) for T, A in Ts
    ]
    cov, width = coverage(name, {}, curves, 400, 30)
    assert 0.8 <= cov <= 0.98, cov
    _, width_big = coverage(name, {}, curves, 4000, 3)
    assert width_big < 0.5 * width


@pytest.mark.parametrize("name", ["sts", "csts", "tswa", "cstswa"])
def test_full_vector_temperature_intervals_cover_in_model_truth(name):
    T = 1.5
    hits, widths = [], []
    for seed in range(30):
        rng = np.random.default_rng(seed)
        z = rng.normal(0, 1, (1200, 3))
        z[np.arange(1200), rng.integers(3, size=1200)] += rng.gamma(2.0, 1.0, 1200)
        p = np.exp(z / T - (z / T).max(1, keepdims=True))
        p /= p.sum(1, keepdims=True)
        y = (p.cumsum(1) > rng.random(1200)[:, None]).argmax(1)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model = calibrator(name).fit(z[:900], y[:900], kind="logits")
        lo, hi = model.predict_interval(z[900:], 0.9, kind="logits")
        truth = p[900:].max(1)
        hits.append(np.mean((lo <= truth) & (truth <= hi)))
        widths.append(np.mean(hi - lo))
    assert 0.75 <= np.mean(hits) <= 1.0, np.mean(hits)
    assert 0 < np.mean(widths) < 0.2


@pytest.mark.slow
@pytest.mark.parametrize(
    "name,params", COUNT_METHODS + [(m, {}) for m in TEMP_METHODS] + [("auto", {})]
)
def test_intervals_hold_the_point_never_reach_0_or_1_and_round_trip_bit_for_bit(
    name, params, tmp_path
):
    frame = probs_frame(1500, K=3, seed=3)
    p = (
        frame[[f"p_c{j}" for j in range(3)]].to_numpy() ** 2
    )  # overconfident: auto chooses a fitted method
    p /= p.sum(1, keepdims=True)
    y = frame["label"].str[1:].astype(int).to_numpy()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = calibrator(name, **params).fit(p, y)
    assert name != "auto" or model.method_ != "uncalibrated"
    conf = model.predict(p)
    lo, hi = model.predict_interval(p, 0.9)
    assert np.all(lo > 0) and np.all(hi < 1), (lo.min(), hi.max())
    inside = (conf > 0) & (conf < 1)
    assert np.all(lo[inside] <= conf[inside]) and np.all(conf[inside] <= hi[inside])
    lo8, hi8 = model.predict_interval(p, 0.8)
    assert np.all(lo8 >= lo) and np.all(hi8 <= hi) and np.any(hi8 - lo8 < hi - lo)
    model.save(tmp_path / "m.json")
    back = persist.load(tmp_path / "m.json")
    lo2, hi2 = back.predict_interval(p, 0.9)
    np.testing.assert_array_equal(lo2, lo)
    np.testing.assert_array_equal(hi2, hi)


def test_uncalibrated_interval_is_the_point_itself():
    data = score_data(200, 0)
    model = fit("uncalibrated", data)
    lo, hi = model.predict_interval(data)
    np.testing.assert_array_equal(lo, model.predict(data))
    np.testing.assert_array_equal(hi, lo)


def test_unshrunk_zero_count_interval_stays_off_0_and_1():
    """A class with only true positives: the paper's estimate is 1, the Jeffreys interval stays
    below it."""
    s = np.linspace(0.5, 0.9, 30)
    data = TopLabelData.from_scores(
        np.zeros(30, int), s, np.zeros(30, int), classes=["a", "b"], score_range=(0.0, 1.0)
    )
    model = fit("hist", data, shrinkage=0)
    lo, hi = model.predict_interval(data)
    assert np.all(model.predict(data) == 1.0)
    assert np.all(hi < 1) and np.all(lo > 0) and np.all(hi - lo > 0.0002)


def test_adapted_model_interval_moves_with_its_confidence():
    frame = probs_frame(3000, K=3, seed=5)
    p = frame[[f"p_c{j}" for j in range(3)]].to_numpy()
    y = frame["label"].str[1:].astype(int).to_numpy()
    model = calibrator("hist").fit(p, y)
    ad = model.adapt(priors=[0.6, 0.3, 0.1])
    conf = ad.predict(p)
    lo, hi = ad.predict_interval(p, 0.9)
    assert np.all(lo <= conf) and np.all(conf <= hi) and np.all(lo > 0) and np.all(hi < 1)
    assert not np.allclose(lo, model.predict_interval(p, 0.9)[0])


@pytest.mark.parametrize("level", [0, 1, 1.5, -0.1, float("nan"), "0.9", True])
def test_bad_level_is_a_one_line_parameter_error(level):
    model = fit("hist", score_data(100, 0))
    with pytest.raises(ParameterError, match="level") as e:
        model.predict_interval(score_data(10, 1), level)
    assert "\n" not in str(e.value)


def _strip(doc, drop):
    """A saved model file with keys removed from its state (what an older topcal wrote)."""
    import hashlib

    from topcal.persist import canonical_json

    drop(doc["model"]["state"])
    doc["sha256"] = hashlib.sha256(canonical_json(doc["model"]).encode()).hexdigest()  # re-signed
    return doc


@pytest.mark.parametrize(
    "name,drop,what",
    [
        ("csts", lambda st: st.pop("param_cov"), "parameter covariance"),
        (
            "cum",
            lambda st: [c.pop("n_above") or c.pop("n_below") for c in st["class_state"] if c],
            "local counts",
        ),
        ("kde-mon2", lambda st: [c.pop("table_n") for c in st["class_state"] if c], "local counts"),
    ],
)
def test_old_model_files_without_interval_statistics_load_and_say_refit(name, drop, what, tmp_path):
    data = score_data(300, 0)
    frame = probs_frame(1500, K=3, seed=3)
    p = frame[[f"p_c{j}" for j in range(3)]].to_numpy()
    y = frame["label"].str[1:].astype(int).to_numpy()
    params = {} if name == "csts" else {"shrinkage": 0}
    if name == "csts":
        model = calibrator(name).fit(p, y)
    else:  # a kde model as files before 2026-11-27 hold it: the full tables
        model = fit(name, data, compact=name != "kde-mon2", **params)
    path = tmp_path / "m.json"
    model.save(path)
    doc = _strip(json.loads(path.read_text()), drop)
    old = tmp_path / "old.json"
    old.write_text(json.dumps(doc))
    back = persist.load(old)
    x = data if name != "csts" else p
    np.testing.assert_array_equal(back.predict(x), model.predict(x))  # still loads and predicts
    with pytest.raises(ModelFileError, match=f"no {what}.*refit it with topcal >= ") as e:
        back.predict_interval(x)
    assert "\n" not in str(e.value)


def test_estimator_predict_confidence_with_interval():
    from sklearn.linear_model import LogisticRegression

    rng = np.random.default_rng(0)
    X = rng.normal(size=(3000, 4))
    y = (X[:, 0] + 0.5 * X[:, 1] + rng.normal(size=3000) > 0).astype(int) + (X[:, 2] > 1)
    clf = LogisticRegression(max_iter=500).fit(X[:1000], y[:1000])
    est = topcal.TopLabelCalibratedClassifier(clf, method="hist").fit(X[1000:2500], y[1000:2500])
    conf = est.predict_confidence(X[2500:])
    c2, lo, hi = est.predict_confidence(X[2500:], interval=0.9)
    np.testing.assert_array_equal(conf, c2)
    assert np.all((lo <= conf) & (conf <= hi)) and np.all(lo > 0) and np.all(hi < 1)
    with pytest.raises(ParameterError, match="level"):
        est.predict_confidence(X[2500:], interval=2)


# ------------------------------------- CLI: answers in process (_cli.call), errors as the script
def cli(*args):
    return subprocess.run(
        [str(TOPCAL), *map(str, args)], capture_output=True, text=True, timeout=300
    )


def assert_one_line_error(r, fragment):
    assert r.returncode == 2, (r.stdout, r.stderr)
    lines = [ln for ln in r.stderr.splitlines() if ln.startswith("error:")]
    assert len(lines) == 1 and "Traceback" not in r.stderr and fragment in lines[0], r.stderr


@pytest.fixture(scope="module")
def fitted(tmp_path_factory):
    d = tmp_path_factory.mktemp("cli")
    frame = probs_frame(3000, K=3, seed=4)
    frame.to_csv(d / "data.csv", index=False)
    r = call("fit", d / "data.csv", "--method", "kde-mon2", "-o", d / "m.json")
    assert r.returncode == 0, r.stderr
    return d, frame


@pytest.mark.slow
@pytest.mark.parametrize("chunk", [None, 700])
def test_cli_apply_interval_adds_limits_in_memory_and_streamed(fitted, chunk):
    d, frame = fitted
    out = d / f"out{chunk}.csv"
    extra = [] if chunk is None else ["--chunk-rows", chunk]
    r = call("apply", d / "m.json", d / "data.csv", "--interval", 0.9, "-o", out, *extra)
    assert r.returncode == 0, r.stderr
    got = pd.read_csv(out)
    model = persist.load(d / "m.json")
    p = frame[[f"p_c{j}" for j in range(3)]].to_numpy()
    lo, hi = model.predict_interval(p, 0.9)
    np.testing.assert_allclose(got["confidence_lo"].to_numpy(), lo, rtol=1e-15)
    np.testing.assert_allclose(got["confidence_hi"].to_numpy(), hi, rtol=1e-15)
    assert np.all(got["confidence_lo"] <= got["confidence"]) and np.all(
        got["confidence"] <= got["confidence_hi"]
    )


@pytest.mark.slow
@pytest.mark.parametrize("level", ["1", "0", "-0.5", "1.2"])
def test_cli_apply_bad_interval_level_is_one_line_error(fitted, level):
    d, _ = fitted
    r = cli("apply", d / "m.json", d / "data.csv", "--interval", level, "-o", d / "bad.csv")
    assert_one_line_error(r, "level must be in (0, 1)")
    assert not (d / "bad.csv").exists()


@pytest.mark.slow
def test_cli_apply_interval_refuses_to_overwrite_an_input_column(fitted, tmp_path):
    d, frame = fitted
    frame.assign(confidence_lo=0.0).to_csv(tmp_path / "x.csv", index=False)
    r = cli("apply", d / "m.json", tmp_path / "x.csv", "--interval", 0.9, "-o", tmp_path / "o.csv")
    assert_one_line_error(r, "'confidence_lo' column")


@pytest.mark.heavy
@pytest.mark.slow
def test_cli_apply_interval_on_dask_local_cluster(tmp_path, cluster_address):
    frame = probs_frame(3000, K=3, seed=6)
    parts = write_parts(tmp_path, frame, 3)
    frame.to_csv(tmp_path / "all.csv", index=False)
    assert (
        call("fit", tmp_path / "all.csv", "--method", "sts", "-o", tmp_path / "m.json").returncode
        == 0
    )
    r = call(
        "apply",
        tmp_path / "m.json",
        parts,
        "--engine",
        "dask",
        "--scheduler",
        cluster_address,
        "--interval",
        0.8,
        "-o",
        tmp_path / "out",
    )
    assert r.returncode == 0, r.stderr
    got = pd.read_parquet(tmp_path / "out")
    model = persist.load(tmp_path / "m.json")
    p = frame[[f"p_c{j}" for j in range(3)]].to_numpy()
    lo, hi = model.predict_interval(p, 0.8)
    np.testing.assert_allclose(got["confidence_lo"].to_numpy(), lo, rtol=1e-15)
    np.testing.assert_allclose(got["confidence_hi"].to_numpy(), hi, rtol=1e-15)


# ----------------------------------------------------------------- the band in the figures and the
# notebook view
def _old_file(model, tmp_path, drop):
    """``model`` saved, then loaded back from a file stripped of its interval statistics."""
    path = tmp_path / "m.json"
    model.save(path)
    old = tmp_path / "old.json"
    old.write_text(json.dumps(_strip(json.loads(path.read_text()), drop)))
    return persist.load(old)


@pytest.mark.slow
def test_curve_figure_data_has_a_band_that_brackets_each_curve_and_narrows_with_class_size():
    from topcal import plots

    rng = np.random.default_rng(5)
    sizes = np.array([60, 3000])
    pred = np.repeat([0, 1], sizes)
    s = rng.beta(4, 2, pred.size)
    labels = np.where(rng.random(pred.size) < s, pred, 1 - pred)
    data = TopLabelData.from_scores(
        pred, s, labels, classes=["small", "large"], score_range=(0.0, 1.0)
    )
    models = {"hist": fit("hist", data), "kde-mon2": fit("kde-mon2", data), "bts": fit("bts", data)}
    grid = plots.calibration_curves(data, models)
    assert grid.band_level == 0.9 and grid.no_band == ()
    widths = []
    for p in grid.panels:
        assert set(p.bands) == set(models)
        for name, (g, lo, hi) in p.bands.items():
            c = p.curves[name][1]
            np.testing.assert_array_equal(g, p.curves[name][0])
            assert np.all(lo <= c) and np.all(c <= hi) and np.all(lo > 0) and np.all(hi < 1), name
            assert np.mean(hi - lo) > 0.01, name
        widths.append(np.mean(p.bands["kde-mon2"][2] - p.bands["kde-mon2"][1]))
    # 60 positives vs 3000 (the small class borrows from the reference: narrower than its own
    # counts would give, still wider than the large class)
    assert widths[0] > 1.2 * widths[1]
    fig = plots.plot_calibration_curves(grid)
    bands = [
        a for ax in fig.axes for a in ax.collections if (a.get_gid() or "").startswith("band:")
    ]
    assert (
        sorted({b.get_gid() for b in bands}) == ["band:bts", "band:hist", "band:kde-mon2"]
        and len(bands) == 6
    )
    # the drawn fill is the computed band: its outline spans lower to upper at every grid score
    verts = next(b for b in bands if b.get_gid() == "band:kde-mon2").get_paths()[0].vertices
    lo, hi = grid.panels[0].bands["kde-mon2"][1:]
    assert verts[:, 1].min() == pytest.approx(lo.min()) and verts[:, 1].max() == pytest.approx(
        hi.max()
    )
    assert all(not p.bands for p in plots.calibration_curves(data, models, band=None).panels)


@pytest.mark.slow
def test_old_model_without_interval_statistics_draws_no_band_and_says_so(tmp_path):
    from topcal import plots

    data = score_data(300, 0)
    old = _old_file(
        fit("kde-mon2", data, shrinkage=0, compact=False),
        tmp_path,
        lambda st: [c.pop("table_n") for c in st["class_state"] if c],
    )
    grid = plots.calibration_curves(data, {"kde-mon2": old, "hist": fit("hist", data)})
    assert grid.no_band == ("kde-mon2",)
    assert all(set(p.bands) == {"hist"} and "kde-mon2" in p.curves for p in grid.panels)
    fig = plots.plot_calibration_curves(grid)
    assert {a.get_gid() for ax in fig.axes for a in ax.collections if a.get_gid()} >= {"band:hist"}
    shown = old._repr_html_()
    assert (
        "<img src='data:image/png;base64," in shown
        and "no interval band" in shown
        and "older topcal" in shown
    )


@pytest.mark.slow
def test_notebook_view_draws_the_band_and_says_what_it_is(monkeypatch):
    from topcal import plots

    model = fit("hist", score_data(400, 1))
    drawn = []
    real = plots.plot_calibration_curves

    def keep(curves, **kw):  # the view's figure, kept to look at what it drew
        fig = real(curves, **kw)
        drawn.append((curves, fig))
        return fig

    monkeypatch.setattr(plots, "plot_calibration_curves", keep)
    shown = model._repr_html_()
    assert (
        "shaded: the 90% interval on each fitted curve" in shown and "no interval band" not in shown
    )
    ((curves, fig),) = drawn
    assert len([a for ax in fig.axes for a in ax.collections if a.get_gid() == "band:hist"]) == 3
    for k, p in enumerate(curves.panels):
        g, lo, hi = p.bands["hist"]
        want = model.predict_interval(grid(k, g), 0.9)
        np.testing.assert_array_equal(lo, want[0])
        np.testing.assert_array_equal(hi, want[1])


# ----------------------------------------------------------------- describe: the per-class width
def _uneven_scores_csv(path, seed=2):
    rng = np.random.default_rng(seed)
    pred = np.repeat(np.array(["big", "small"]), [3000, 80])
    s = rng.beta(4, 2, pred.size)
    other = np.where(pred == "big", "small", "big")
    pd.DataFrame(
        {"pred": pred, "score": s, "label": np.where(rng.random(pred.size) < s, pred, other)}
    ).to_csv(path, index=False)


@pytest.mark.slow
@pytest.mark.parametrize(
    "method,param",
    [("hist", "shrinkage=0"), ("kde-mon2", "shrinkage=0"), ("kde-mon2", None), ("bts", None)],
)
def test_describe_shows_the_per_class_interval_width_in_the_console_script_and_the_api(
    method, param, tmp_path
):
    _uneven_scores_csv(tmp_path / "d.csv")
    extra = [] if param is None else ["--param", param]
    r = call("fit", tmp_path / "d.csv", "--method", method, *extra, "-o", tmp_path / "m.json")
    assert r.returncode == 0, r.stderr
    model = persist.load(tmp_path / "m.json")
    api = model.describe()["classes"]
    for k, c in enumerate(
        model.classes_
    ):  # the API's value: the mean 90% width over 21 scores of the support
        s = np.linspace(*model.support_[k], 21)
        lo, hi = model.predict_interval(
            TopLabelData.from_scores(
                np.full(21, k), s, None, classes=model.classes_, score_range=model.score_range_
            ),
            0.9,
        )
        assert api[c]["interval_width_90"] == pytest.approx(np.mean(hi - lo), rel=1e-12)
    # 80 vs 3000 rows: wider for the small class (a shrunk one borrows from the pooled curve, so by
    # less)
    factor = 1.0 if param is None and method != "bts" else 1.5
    assert api["small"]["interval_width_90"] > factor * api["big"]["interval_width_90"] > 0
    r = cli("describe", tmp_path / "m.json", "--full")
    assert r.returncode == 0, r.stderr
    blocks = dict(re.findall(r"\[(\w+)\][^\n]*\n((?:  .*\n?)*)", r.stdout))
    for c in model.classes_:
        shown = float(re.search(r"  interval_width_90: (\S+)", blocks[c]).group(1))
        assert shown == pytest.approx(api[c]["interval_width_90"], rel=1e-5)
    r = cli("describe", tmp_path / "m.json", "--json")
    assert (
        json.loads(r.stdout)["classes"]["small"]["interval_width_90"]
        == api["small"]["interval_width_90"]
    )


@pytest.mark.slow
def test_describe_shows_the_temperature_interval_and_no_width_for_an_old_file(tmp_path):
    frame = probs_frame(2000, K=3, seed=7)
    frame.to_csv(tmp_path / "p.csv", index=False)
    assert (
        call("fit", tmp_path / "p.csv", "--method", "csts", "-o", tmp_path / "t.json").returncode
        == 0
    )
    r = cli("describe", tmp_path / "t.json", "--full")
    assert r.returncode == 0, r.stderr
    model = persist.load(tmp_path / "t.json")
    for c, info in model.describe()["classes"].items():
        lo, hi = info["temperature_90"]
        assert 0 < lo < info["temperature"] < hi
        assert f"  temperature_90: [{lo:.4g}, {hi:.4g}]" in r.stdout
    # a file written before intervals existed: describe still works and shows no width
    _old_file(
        fit("kde-mon2", score_data(300, 0), shrinkage=0, compact=False),
        tmp_path,
        lambda st: [c.pop("table_n") for c in st["class_state"] if c],
    )
    r = cli("describe", tmp_path / "old.json", "--full")
    assert r.returncode == 0 and "[c0]" in r.stdout and "bandwidth" in r.stdout, r.stderr
    assert "interval_width_90" not in r.stdout
    assert (
        "interval_width_90" in cli("describe", tmp_path / "m.json", "--full").stdout
    )  # the same model, as saved


# ----------------------------------------------------------------- coverage bands at small class
# sizes
SHAPES4 = [lambda s: s, lambda s: s**2.5, lambda s: s**0.4, lambda s: expit(10 * (s - 0.7))]


def _cumulative_truth(curve, s, theta=None):
    """P(correct | S' >= s) under Beta(4, 2) scores; below a cut-off theta, P(correct | S' <=
    theta)."""
    g = np.linspace(0, 1, 20001)[1:-1]
    dens = g**3 * (1 - g)
    out = np.interp(s, g, np.cumsum((dens * curve(g))[::-1])[::-1] / np.cumsum(dens[::-1])[::-1])
    if theta is not None:
        low = g <= theta
        out = np.where(
            s < theta,
            (dens[low] @ curve(g[low])) / dens[low].sum() if low.any() else curve(theta),
            out,
        )
    return out


def random_score_coverage(name, params, n, seeds, level=0.9):
    """benchmarks/bench_intervals.py in small: four classes of ``n`` rows with the curves SHAPES4,
    coverage of the quantity each method estimates at 100 fresh scores per class, averaged."""
    hits = []
    for seed in range(seeds):
        rng = np.random.default_rng(1000 * seed + n)
        model = fit(name, score_data(n, 10_000 + seed, SHAPES4), **params)
        for k, c in enumerate(SHAPES4):
            s = np.clip(rng.beta(4, 2, 100), 1e-4, 1 - 1e-4)
            lo, hi = model.predict_interval(grid(k, s, 4), level)
            theta = model.class_state_[k].get("theta") if name.startswith("cum-") else None
            t = _cumulative_truth(c, s, theta) if name.startswith("cum") else c(s)
            hits.append((lo <= t) & (t <= hi))
    return float(np.mean(np.concatenate(hits)))


@pytest.mark.slow
@pytest.mark.parametrize(
    "name,params,n",
    [
        ("hist", {}, 20),
        ("hist", {"shrinkage": 0}, 20),
        ("cum", {}, 20),
        ("cum", {}, 500),
        ("cum-opt", {}, 100),
        ("kde-opt", {}, 20),
        ("kde-mon2", {}, 20),
    ],
)
def test_count_intervals_cover_within_three_points_of_nominal_on_small_classes(name, params, n):
    """Issue 23's band, 0.87-0.93 at level 0.9, where the earlier empirical-Bayes interval (the
    pseudo-counts read as a prior's concentration) covered 0.78-0.86 for shrunk models. ``kde-opt``
    at
    20 rows covered 0.85 here before its wide-bandwidth terms (the Taylor bias of a curve flattened
    by a kernel spanning the class, and a sqrt(2) count scale); ``kde-mon2`` must stay in the
    band."""
    cov = random_score_coverage(name, params, n, 25)
    assert 0.87 <= cov <= 0.93, cov


def test_local_linear_sums_recover_a_line_and_the_kernel_effective_sample_size():
    """The wide-bandwidth terms of the kde interval: on labels that are a line in the score the
    local-linear value is the line while Nadaraya-Watson is pulled toward the mean; the effective
    sample size per unit of count is 1 for a kernel far wider than the scores (equal weights) and
    sqrt(2) for one far narrower than their spacing-free spread (the small-bandwidth rule)."""
    from topcal.calibrators.kde import _engine as eng

    pts = np.linspace(0.2, 0.8, 601)
    tp, fp = pts, 1.0 - pts  # rate at s is s: P(correct | s) = s
    x = np.array([0.3, 0.5, 0.7])
    nw, ll, ratio = eng.local_linear_sums(x, pts, tp, fp, 10.0)
    np.testing.assert_allclose(ll, x, atol=1e-9)
    assert abs(nw[0] - 0.5) < 0.01 and abs(nw[2] - 0.5) < 0.01
    np.testing.assert_allclose(ratio, 1.0, atol=1e-3)
    _, ll, ratio = eng.local_linear_sums(x, pts, tp, fp, 0.01)
    np.testing.assert_allclose(ll, x, atol=1e-6)
    np.testing.assert_allclose(ratio, np.sqrt(2.0), rtol=0.01)


def test_kde_interval_replaces_the_small_bandwidth_terms_only_for_a_bandwidth_spanning_the_class():
    """A class whose kernel spans its scores gets the exact effective sample size (about 1 per count
    unit, not sqrt(2)) and a bias from |Nadaraya-Watson - local linear|; a narrow one keeps
    sqrt(2)."""
    data = score_data(400, 5)
    wide = fit("kde", data, bandwidth=1.0, shrinkage=0)
    narrow = fit("kde", data, bandwidth=0.02, shrinkage=0)
    s = np.linspace(0.4, 0.9, 11)
    pred = np.zeros(s.size, dtype=np.int64)
    assert np.all(np.abs(wide._interval_scale(pred, s) - 1.0) < 0.1)
    np.testing.assert_allclose(narrow._interval_scale(pred, s), np.sqrt(2.0))
    # class 0's curve is s^2: the wide kernel flattens it, and the extra bias term sees the slope
    assert wide._wide_terms(pred, s)[1].max() > 0.1
    assert np.all(narrow._wide_terms(pred, s)[1] == 0.0)
    lo, hi = wide.predict_interval(grid(0, s))
    assert np.all((lo > 0) & (hi < 1)) and np.mean((lo <= s**2) & (s**2 <= hi)) >= 0.7


# ----------------------------------------------------------------- a smooth truth at every size
def _three_sizes(seed, sizes=(300, 1000, 3000)):
    """Issue 52's simulation: three classes of 300 / 1,000 / 3,000 rows, scores uniform on
    [0.3, 1], P(correct | s) = s^2 for every class."""
    rng = np.random.default_rng(seed)
    pred = np.repeat(np.arange(len(sizes)), sizes)
    s = rng.uniform(0.3, 1.0, pred.size)
    labels = np.where(rng.random(pred.size) < s**2, pred, (pred + 1) % len(sizes))
    return TopLabelData.from_scores(
        pred, s, labels, classes=[f"c{k}" for k in range(len(sizes))], score_range=(0.0, 1.0)
    )


@pytest.mark.slow
@pytest.mark.parametrize("name, band, least", [("hist", 0.93, 0.8), ("kde-mon2", 0.95, 0.88)])
def test_count_intervals_cover_a_smooth_truth_at_every_class_size(name, band, least):
    """The step's bias at a score belongs in hist's interval at every class size: before, the
    interval narrowed with n around the bin's rate while the truth at the score stayed a slope x
    (score - bin midpoint) away (0.68 in all, 0.51 for the 3,000-row class; now 0.91, 0.84).
    ``kde-mon2`` covers 0.94 (unchanged): its 300-row class 0.98, as hist's 0.97, since the
    shrunk interval's pseudo-count of three agreeing classes is the slack's weakest
    (docs/intervals.md)."""
    s = np.linspace(0.35, 0.95, 61)
    hits = np.zeros((3, s.size))
    for seed in range(20):
        model = fit(name, _three_sizes(seed))
        for k in range(3):
            lo, hi = model.predict_interval(grid(k, s), 0.9)
            hits[k] += (lo <= s**2) & (s**2 <= hi)
    per_class = hits.mean(axis=1) / 20
    assert 0.87 <= per_class.mean() <= band, per_class
    assert per_class.min() >= least, per_class  # the largest class too
