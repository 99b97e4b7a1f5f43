"""``blend`` (a fixed convex mixture of score methods) and ``auto``'s blend of its candidates (issue
22)."""

from __future__ import annotations

import hashlib
import json
import warnings
from types import SimpleNamespace

import numpy as np

from topcal.describe.summary import describe_text
import pandas as pd
import pytest
from scipy.special import expit

import topcal
from topcal import TopLabelData, persist
from topcal.calibrators import calibrator
from topcal.calibrators.select.rules import BLEND_GATE, paired_se, plan_blend, tabulate_cv
from topcal.calibrators.select.blend import Blend, blend_weights
from topcal.calibrators.select.crossfit import cross_fit
from topcal.errors import ParameterError
from topcal.metrics import nll
from topcal.persist import canonical_json


def truth_curve(s):
    """Half the raw score, half a steep sigmoid: no single pooled family fits it, a blend of two
    comes closer."""
    return 0.5 * s + 0.5 * expit(25 * (s - 0.65))


def mixed_truth(n=1500, seed=0, K=4):
    """Per class ``n`` scores drawn with :func:`truth_curve` as every class's true curve."""
    rng = np.random.default_rng(seed)
    pred = np.repeat(np.arange(K), n)
    s = rng.uniform(0.3, 1.0, pred.size)
    labels = np.where(rng.random(pred.size) < truth_curve(s), pred, (pred + 1) % K)
    return TopLabelData.from_scores(
        pred, s, labels, classes=[f"c{k}" for k in range(K)], score_range=(0.0, 1.0)
    )


def expected_nll(model, s):
    """The NLL of ``model``'s confidences at scores ``s`` (class 0) in expectation over the true
    labels."""
    data = TopLabelData.from_scores(
        np.zeros(s.size, dtype=np.int64),
        s,
        classes=[f"c{k}" for k in range(4)],
        score_range=(0.0, 1.0),
    )
    c, p = np.clip(model.predict(data), 1e-12, 1 - 1e-12), truth_curve(s)
    return float(np.mean(-(p * np.log(c) + (1 - p) * np.log1p(-c))))


def quiet_fit(model, data):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return model.fit(data)


POOLED = ["uncalibrated", "pooled-platt", "pooled-beta", "pooled-hist"]


def test_blend_weights_recover_the_mixture_the_labels_were_drawn_from():
    rng = np.random.default_rng(1)
    n = 200_000
    c1, c2 = rng.uniform(0.05, 0.95, n), rng.uniform(0.05, 0.95, n)
    y = rng.random(n) < 0.3 * c1 + 0.7 * c2
    w = blend_weights(y.astype(float), (~y).astype(float), [c1, c2])
    assert w.sum() == pytest.approx(1.0) and np.all(w >= 0)
    np.testing.assert_allclose(w, [0.3, 0.7], atol=0.02)
    # components that add nothing to the truth get almost no weight
    w3 = blend_weights(
        y.astype(float), (~y).astype(float), [0.3 * c1 + 0.7 * c2, c1, np.full(n, 0.5)]
    )
    assert w3[0] > 0.99 and w3[1] + w3[2] < 0.01


def test_a_blend_predicts_curves_and_intervals_as_the_weighted_sum_of_its_components():
    data = mixed_truth()
    methods, weights = ("pooled-hist", "pooled-platt"), (0.6, 0.4)
    blend = quiet_fit(Blend(methods=methods, weights=weights), data)
    alone = [quiet_fit(calibrator(m), data) for m in methods]
    np.testing.assert_allclose(
        blend.predict(data),
        0.6 * alone[0].predict(data) + 0.4 * alone[1].predict(data),
        rtol=0,
        atol=1e-15,
    )
    c = blend.curve("c1")
    np.testing.assert_allclose(
        c.confidence,
        0.6 * alone[0].curve("c1").confidence + 0.4 * alone[1].curve("c1").confidence,
        atol=1e-15,
    )
    lo, hi = blend.predict_interval(data, 0.9)
    parts = [m.predict_interval(data, 0.9) for m in alone]
    np.testing.assert_allclose(lo, 0.6 * parts[0][0] + 0.4 * parts[1][0], atol=1e-15)
    np.testing.assert_allclose(hi, 0.6 * parts[0][1] + 0.4 * parts[1][1], atol=1e-15)
    p = blend.predict(data)
    assert np.all(lo <= p + 1e-12) and np.all(p <= hi + 1e-12) and np.all(hi > lo)
    d = blend.describe()
    assert d["blend"] == {"methods": list(methods), "weights": list(weights)}
    assert [c["method"] for c in d["components"]] == list(methods)
    assert "blend of pooled-hist (0.600), pooled-platt (0.400)" in describe_text(blend)


def test_a_blend_round_trips_and_updates_its_components_with_its_weights():
    a, b = mixed_truth(800, 1), mixed_truth(800, 2)
    blend = quiet_fit(Blend(methods=("hist", "hier-platt"), weights=(0.25, 0.75)), a)
    back = persist.loads(persist.dumps(blend))
    assert isinstance(back, Blend) and back.get_params() == {
        "methods": ["hist", "hier-platt"],
        "weights": [0.25, 0.75],
    }
    np.testing.assert_array_equal(back.predict(b), blend.predict(b))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        blend.update(b)
        alone = [calibrator(m).fit(a).update(b) for m in ("hist", "hier-platt")]
    assert blend.n_tp_.sum() + blend.n_fp_.sum() == a.n_samples + b.n_samples
    np.testing.assert_allclose(
        blend.predict(b), 0.25 * alone[0].predict(b) + 0.75 * alone[1].predict(b), atol=1e-14
    )


@pytest.mark.parametrize(
    "params, fragment",
    [
        ({"methods": ("hist", "sts"), "weights": (0.5, 0.5)}, "no full-vector method"),
        ({"methods": ("hist",), "weights": (1.0,)}, "2 or more"),
        ({"methods": ("hist", "hist"), "weights": (0.5, 0.5)}, "distinct"),
        ({"methods": ("hist", "kde-mon2"), "weights": (0.7, 0.7)}, "summing to 1"),
        ({"methods": ("hist", "kde-mon2"), "weights": (1.5, -0.5)}, "non-negative"),
        ({"methods": ("hist", "kde-mon2", "cum"), "weights": (0.5, 0.5)}, "one weight per method"),
    ],
)
def test_a_blend_with_bad_parameters_is_refused_in_one_line(params, fragment):
    with pytest.raises(ParameterError) as e:
        Blend(**params).fit(mixed_truth(100))
    assert fragment in str(e.value) and "\n" not in str(e.value)


def fake_run(data, confidence):
    """What plan_blend reads of a cross-fit: the target rows, out-of-fold confidences and their
    losses."""
    return SimpleNamespace(
        target=data,
        confidence=confidence,
        losses=lambda n: (-np.log(confidence[n]), -np.log1p(-confidence[n])),
    )


def test_plan_blend_blends_complementary_candidates_refuses_noise_and_full_vector_choices():
    rng = np.random.default_rng(4)
    n = 20_000
    truth = rng.uniform(0.2, 0.8, n)
    pred = np.zeros(n, dtype=np.int64)
    labels = np.where(rng.random(n) < truth, 0, 1)
    data = TopLabelData.from_scores(pred, truth, labels, classes=["a", "b"], score_range=(0.0, 1.0))
    e = 0.15 * np.where(np.arange(n) % 2 == 0, 1.0, -1.0)
    conf = {
        "hier-platt": truth + e,
        "hist": truth - e,
        "kde-mon2": np.clip(truth + 2 * e, 0.01, 0.99),
    }
    cv = {k: {"nll": nll(data, v).overall} for k, v in conf.items()}
    plan = plan_blend(fake_run(data, conf), cv, "hier-platt")
    assert plan["methods"][:2] == ["hier-platt", "hist"] and plan["methods"][0] == "hier-platt"
    mix = sum(w * conf[m] for m, w in zip(plan["methods"], plan["weights"]))
    assert np.max(np.abs(mix - truth)) < 0.02  # the errors cancel (several weightings do it)
    assert plan["gain"] < -BLEND_GATE * plan["se"]
    gain, se = paired_se(
        data.tp,
        data.fp,
        -np.log(truth),
        -np.log1p(-truth),
        *fake_run(data, conf).losses("hier-platt"),
    )
    assert plan["gain"] == pytest.approx(gain, rel=1e-3)
    # a gate no gain can pass, and a full-vector choice (no score statistics to refit from): no
    # blend
    assert plan_blend(fake_run(data, conf), cv, "hier-platt", gate=1e6) is None
    conf["csts"] = conf.pop("kde-mon2")
    cv = {k: {"nll": nll(data, v).overall} for k, v in conf.items()}
    assert plan_blend(fake_run(data, conf), cv, "csts") is None
    assert "csts" not in plan_blend(fake_run(data, conf), cv, "hier-platt")["methods"]


@pytest.mark.slow
def test_auto_returns_its_blend_where_it_wins_out_of_fold_and_its_choice_otherwise():
    data = mixed_truth(1500, 1)
    blended = quiet_fit(calibrator("auto", candidates=POOLED, blend=0), data)
    single = quiet_fit(calibrator("auto", candidates=POOLED, blend=None), data)
    assert single.blend_ is None and single.model_.name == single.method_
    b = blended.blend_
    assert (
        blended.method_ == single.method_
        and b["methods"][0] == blended.method_
        and len(b["methods"]) >= 2
    )
    assert isinstance(blended.model_, Blend) and list(blended.model_.weights) == b["weights"]
    # the plan is the one the same cross-validation gives
    run = cross_fit(data, POOLED, 5, seed=0)
    again = plan_blend(run, tabulate_cv(run, POOLED), single.method_, 0.0)
    assert again["methods"] == b["methods"] and np.allclose(again["weights"], b["weights"])
    test = mixed_truth(1500, 99)
    # the default gate: the blend only where the out-of-fold gain exceeds BLEND_GATE standard errors
    default = quiet_fit(calibrator("auto", candidates=POOLED), data)
    assert (default.blend_ is not None) == (b["gain"] < -BLEND_GATE * b["se"])
    # saved and loaded: the same blend, the same predictions; describe and the summary say it
    back = persist.loads(persist.dumps(blended))
    assert back.blend_ == b
    np.testing.assert_array_equal(back.predict(test), blended.predict(test))
    assert "blended with" in blended.summary_line() and "blend (beats the choice" in describe_text(
        blended
    )
    assert blended.describe()["blend"]["methods"] == b["methods"]
    # the table keeps every candidate's mean and SE, the per-class losses of the blend's members and
    # the baseline only (issue 34: at 1,000 classes every candidate's were most of the file)
    assert set(blended.cv_) == set(POOLED) and all(v["nll"] for v in blended.cv_.values())
    kept = {n for n, v in blended.cv_.items() if v["per_class"] is not None}
    assert kept == set(b["methods"]) | ({"uncalibrated"} & set(POOLED))
    assert back.cv_ == blended.cv_
    lo, hi = blended.predict_interval(test, 0.9)
    assert np.all(lo <= blended.predict(test) + 1e-12)
    # update refits the blend's components from the merged statistics and keeps the weights
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        blended.update(test)
    assert isinstance(blended.model_, Blend) and list(blended.model_.weights) == b["weights"]
    assert (
        blended.model_.n_tp_.sum() + blended.model_.n_fp_.sum() == data.n_samples + test.n_samples
    )


@pytest.mark.slow
def test_auto_s_blend_beats_its_single_choice_in_expectation_where_no_candidate_fits_the_truth():
    """Fresh draws of the same truth: the expected NLL (over the true curve, on a fine score grid)
    of the
    blend (gate 0) against the single choice, five fitting sets: better on average and in most."""
    grid = np.linspace(0.3, 1.0, 2001)
    diffs = []
    for seed in range(5):
        data = mixed_truth(1500, seed)
        blended = quiet_fit(calibrator("auto", candidates=POOLED, blend=0), data)
        single = quiet_fit(calibrator("auto", candidates=POOLED, blend=None), data)
        assert blended.blend_ is not None
        diffs.append(expected_nll(blended, grid) - expected_nll(single, grid))
    assert np.mean(diffs) < 0 and sum(d < 0 for d in diffs) >= 4, diffs


def test_a_blended_auto_file_whose_blend_does_not_match_its_model_is_refused():
    data = mixed_truth(600, 2)
    model = quiet_fit(calibrator("auto", candidates=POOLED, blend=0), data)
    d = json.loads(persist.dumps(model))
    d["model"]["state"]["blend"]["weights"] = d["model"]["state"]["blend"]["weights"][::-1]
    d["sha256"] = hashlib.sha256(canonical_json(d["model"]).encode()).hexdigest()  # re-signed
    with pytest.raises(topcal.errors.ModelFileError) as e:
        persist.loads(json.dumps(d))
    assert "blend" in str(e.value)


@pytest.mark.slow
def test_the_cli_fits_describes_and_compares_a_blended_auto_and_refuses_a_bad_gate(tmp_path):
    from _cli import assert_error, cli

    data = mixed_truth(1500, 1)
    frame = pd.DataFrame(
        {
            "pred": np.asarray(data.classes)[data.pred],
            "score": data.score,
            "label": np.where(data.tp > 0, np.asarray(data.classes)[data.pred], "other"),
        }
    )
    frame.loc[frame.label == "other", "label"] = np.asarray(data.classes)[
        (data.pred[frame.label == "other"] + 1) % 4
    ]
    src = tmp_path / "top.csv"
    frame.to_csv(src, index=False)
    cands = '--param=candidates=["uncalibrated","pooled-platt","pooled-beta","pooled-hist"]'
    r = cli(
        "fit", src, "--method", "auto", cands, "--param", "blend=0", "-o", tmp_path / "m.json", "-q"
    )
    assert r.returncode == 0, r.stderr
    assert "blended with" in r.stdout + r.stderr
    r = cli("describe", tmp_path / "m.json")
    assert r.returncode == 0 and "blend (beats the choice out of fold" in r.stdout, (
        r.stdout + r.stderr
    )
    model = persist.load(tmp_path / "m.json")
    assert isinstance(model.model_, Blend)
    r = cli(
        "compare",
        src,
        "--methods",
        "auto",
        cands.replace("=candidates", "=auto:candidates"),
        "--param",
        "auto:blend=0",
        "--folds",
        "2",
        "-q",
    )
    assert r.returncode == 0, r.stderr
    assert "+ in the blend" in r.stdout and "+" in r.stdout.split("(< chosen")[0], r.stdout
    before = src.read_bytes()
    for bad in ("blend=-1", 'blend="yes"'):
        err = assert_error(cli("fit", src, "--param", bad, "-o", tmp_path / "bad.json"), "blend")
        assert "None" in err or "0" in err
    assert not (tmp_path / "bad.json").exists() and src.read_bytes() == before
