"""compare_methods under its three protocols, on data where the answer is known."""

from __future__ import annotations

import csv
import io
import json
import warnings

import numpy as np
import pytest

from topcal import TopLabelData
from topcal.cli import main
from topcal.datasets import load_phanns
from topcal.errors import DataError, ParameterError
from topcal.evaluate import compare_methods, kfold_split

from _sim import simulate_probs

CLASSES = ["ant", "bee", "cow", "dog", "eel"]


def simulate(n, seed, *, sharpen=None):
    """A perfectly calibrated classifier (or, with ``sharpen``, per-class miscalibrated): see
    _sim."""
    p, labels = simulate_probs(n, seed, len(CLASSES), sharpen=sharpen)
    return TopLabelData.from_probs(p, labels, classes=CLASSES)


CALIBRATED_METHODS = ["uncalibrated", "conf1", "hist", "kde-mon2", "csts", "tswa", "btswa"]


@pytest.fixture(scope="module")
def calibrated():
    return simulate(12_000, 1), simulate(12_000, 2)


def _overall(res, metric):
    return {m: v[metric]["overall"] for m, v in res["methods"].items()}


def test_same_data_protocol_flatters_flexible_methods(calibrated):
    data, _ = calibrated
    res = compare_methods(data, ["uncalibrated", "hist"], params={"hist": {"shrinkage": 0}})
    assert res["protocol"] == "same" and res["folds"] is None
    ece = _overall(res, "ece1")
    # in-sample, the histogram reproduces its own bins' accuracies: ECE ~ 0, below the truth's noise
    assert ece["hist"] < 0.005 < ece["uncalibrated"]
    cv = compare_methods(data, ["hist"], folds=4, params={"hist": {"shrinkage": 0}})
    assert _overall(cv, "ece1")["hist"] > 2 * ece["hist"]
    assert _overall(cv, "nll")["hist"] > _overall(res, "nll")["hist"]


# kfold: the fast lane's k-fold comparison is test_kfold_finds_miscalibration
@pytest.mark.parametrize("protocol", ["holdout", pytest.param("kfold", marks=pytest.mark.slow)])
def test_out_of_sample_perfectly_calibrated(calibrated, protocol):
    data, second = calibrated
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if protocol == "holdout":
            res = compare_methods(data, CALIBRATED_METHODS, eval_data=second)
        else:
            res = compare_methods(data, CALIBRATED_METHODS, folds=4, seed=3)
    assert res["protocol"] == protocol
    ece = _overall(res, "ece1")
    nll = _overall(res, "nll")
    for m in CALIBRATED_METHODS:
        if m != "conf1":  # conf1 is calibrated on average but blind to the score
            assert ece[m] < 0.03, (m, ece[m])
    # the truth is best, or tied within sampling noise (0.3 % of the NLL)
    best_other = min(v for m, v in nll.items() if m != "uncalibrated")
    assert nll["uncalibrated"] <= best_other * 1.003, nll
    # and a score-blind method is clearly worse
    assert nll["conf1"] > nll["uncalibrated"] * 1.05


def test_kfold_finds_miscalibration():
    data = simulate(8_000, 5, sharpen=[0.5, 0.7, 1.0, 1.6, 2.2])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = compare_methods(data, ["uncalibrated", "hist", "kde-mon2", "csts"], folds=5)
    nll, ece = _overall(res, "nll"), _overall(res, "ece1")
    for m in ("hist", "kde-mon2", "csts"):
        assert nll[m] < nll["uncalibrated"] and ece[m] < ece["uncalibrated"] / 2, (m, nll, ece)


def test_kfold_split_per_sample_is_stratified_disjoint_and_seeded(calibrated):
    data, _ = calibrated
    folds = kfold_split(data, 4, seed=7)
    assert sum(f.n_rows for f in folds) == data.n_rows
    # every row in exactly one fold: compare sorted (score, pred, label) triples
    key = lambda d: np.sort(d.score * 10 + d.pred + 0.001 * d.labels)  # noqa: E731
    np.testing.assert_array_equal(key(TopLabelData.concat(folds)), key(data))
    counts = np.array([np.bincount(f.pred, minlength=data.n_classes) for f in folds])
    assert np.all(counts.max(0) - counts.min(0) <= 1)  # stratified by predicted class
    again = kfold_split(data, 4, seed=7)
    np.testing.assert_array_equal(folds[2].score, again[2].score)
    other = kfold_split(data, 4, seed=8)
    assert not np.array_equal(folds[2].score, other[2].score)


def test_kfold_split_binned_deals_integer_counts():
    data = load_phanns()
    folds = kfold_split(data, 3, seed=0)
    tp = np.stack([f.tp for f in folds])
    fp = np.stack([f.fp for f in folds])
    np.testing.assert_array_equal(tp.sum(0), data.tp)
    np.testing.assert_array_equal(fp.sum(0), data.fp)
    assert np.all(tp == np.round(tp)) and np.all(fp == np.round(fp))
    assert all(f.is_binned and np.array_equal(f.bin_edges, data.bin_edges) for f in folds)
    # each fold holds about a third of each class
    share = np.array([f.class_counts()[0] for f in folds]) / data.class_counts()[0]
    assert np.all(np.abs(share - 1 / 3) < 0.08)


@pytest.mark.slow
def test_kfold_on_binned_is_more_pessimistic_than_same_data():
    data = load_phanns()
    same = _overall(compare_methods(data, ["hist", "kde-mon2"]), "nll")
    cv = _overall(compare_methods(data, ["hist", "kde-mon2"], folds=5), "nll")
    for m in same:
        assert cv[m] > same[m]


def test_protocol_errors(calibrated):
    data, second = calibrated
    with pytest.raises(ParameterError, match="not both"):
        compare_methods(data, ["hist"], eval_data=second, folds=3)
    with pytest.raises(ParameterError, match="folds"):
        kfold_split(data, 1)
    frac = TopLabelData.from_binned(["a", "a"], [0, 0.5], [0.5, 1], [1.5, 2], [1, 0.25])
    with pytest.raises(DataError, match="integer"):
        kfold_split(frac, 2)
    with pytest.raises(ParameterError, match="unknown method"):
        compare_methods(data, ["nope"])


def test_full_vector_methods_skipped_on_binned():
    res = compare_methods(load_phanns(), ["hist", "tswa"], folds=2)
    assert res["skipped"] == ["tswa"] and list(res["methods"]) == ["hist"]


# ---------------------------------------------------------------- CLI
@pytest.fixture(scope="module")
def npz_files(tmp_path_factory):
    d = tmp_path_factory.mktemp("cmp")
    out = []
    for seed in (11, 12):
        data = simulate(3_000, seed)
        path = d / f"s{seed}.npz"
        np.savez(
            path,
            probs=data.full,
            labels=np.asarray(CLASSES)[data.labels],
            classes=np.asarray(CLASSES),
        )
        out.append(str(path))
    return out


def test_cli_compare_json_holdout(npz_files, capsys):
    a, b = npz_files
    assert main(["compare", a, "--eval", b, "--methods", "uncalibrated,hist", "--json"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert res["protocol"] == "holdout" and set(res["methods"]) == {"uncalibrated", "hist"}
    assert set(res["methods"]["hist"]) == {"nll", "brier", "ece1", "ece2"}


def test_cli_compare_csv_kfold_matches_library(npz_files, capsys):
    from topcal import read_data

    a, _ = npz_files
    assert (
        main(["compare", a, "--folds", "3", "--seed", "4", "--methods", "hist,kde-mon2", "--csv"])
        == 0
    )
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert {r["method"] for r in rows} == {"hist", "kde-mon2"}
    got = {(r["method"], r["metric"], r["class"]): r["value"] for r in rows}
    lib = compare_methods(read_data(a), ["hist", "kde-mon2"], folds=3, seed=4)
    assert float(got[("kde-mon2", "nll", "overall")]) == pytest.approx(
        lib["methods"]["kde-mon2"]["nll"]["overall"], rel=1e-12
    )
    assert float(got[("hist", "ece2", "bee")]) == pytest.approx(
        lib["methods"]["hist"]["ece2"]["per_class"]["bee"], rel=1e-12
    )


def test_cli_compare_text_and_errors(npz_files, capsys):
    a, b = npz_files
    assert main(["compare", a, "--methods", "uncalibrated,hist"]) == 0
    out = capsys.readouterr().out
    assert "5-fold cross-fitting" in out and "per-class NLL" in out and "uncalibrated" in out
    assert main(["compare", a, "--methods", "uncalibrated,hist", "--in-sample"]) == 0
    assert "same data" in capsys.readouterr().out
    assert main(["compare", a, "--eval", b, "--in-sample"]) == 2
    assert "exclude each other" in capsys.readouterr().err
    assert main(["compare", a, "--methods", "hist,bogus"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: unknown method 'bogus'") and len(err.strip().splitlines()) == 1


# ------------------------------------------------ the fit-and-score service
def _with_empty_class():
    """Class "b" is never predicted: fitting warns DegenerateClassWarning."""
    rng = np.random.default_rng(5)
    s = rng.uniform(0, 1, 400)
    ok = rng.random(400) < s
    return TopLabelData(
        ("a", "b"),
        np.zeros(400, dtype=np.int64),
        s,
        (0.0, 1.0),
        tp=ok.astype(float),
        fp=(~ok).astype(float),
    )


def test_fit_quietly_collects_warnings_instead_of_printing_them():
    from topcal.calibrators import calibrator
    from topcal.errors import DegenerateClassWarning
    from topcal.evaluate import fit_quietly

    data = _with_empty_class()
    with pytest.warns(DegenerateClassWarning):  # the plain fit warns ...
        plain = calibrator("hist").fit(data)
    notes: dict = {}
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # ... the quiet one prints nothing
        model = fit_quietly("hist", data, notes=notes)
        again = fit_quietly("hist", data, notes=notes)
    assert len(notes["hist"]) == 1 and "b" in notes["hist"][0]  # collected once, not lost
    np.testing.assert_array_equal(model.predict(data), plain.predict(data))
    np.testing.assert_array_equal(again.predict(data), plain.predict(data))
    # an unfitted calibrator is fitted as given; params reach the method
    assert fit_quietly(calibrator("hist", n_bins=3), data, notes={}).n_bins == 3
    assert fit_quietly("hist", data, params={"n_bins": 4}, notes={}).n_bins == 4


def test_fit_quietly_passes_other_warnings_through():
    from topcal.errors import DegenerateClassWarning, TopcalWarning
    from topcal.evaluate import fit_quietly

    data = _with_empty_class()
    with pytest.warns(
        DegenerateClassWarning
    ):  # collecting only another category lets this one through
        fit_quietly("hist", data, notes={}, collect=type("Other", (TopcalWarning,), {}))
    with pytest.raises(ParameterError):
        fit_quietly("hist", data, params={"n_bins": -1})


def test_fit_and_score_is_fit_then_the_metric_bundle(calibrated):
    from topcal.evaluate import METRICS, evaluate, fit_and_score, score_models
    from topcal.metrics import brier, bundle, ece1, nll, summary

    data, second = calibrated
    model, (s1, s2) = fit_and_score("hist", data, [data, second], notes={})
    assert list(s1) == list(METRICS) == ["nll", "brier", "ece1", "ece2"]
    assert s1 == evaluate(data, model.predict(data)) and s2 == evaluate(
        second, model.predict(second)
    )
    assert score_models({"hist": model}, second) == {"hist": s2}
    conf = model.predict(second)
    assert s2["nll"] == nll(second, conf).to_dict() and s2["brier"] == brier(second, conf).to_dict()
    assert s2["ece1"]["overall"] == ece1(second, conf).overall
    # the bundle is the one place: summary shows the same numbers, and a subset keeps its order
    assert summary(second, conf)["overall"]["nll"] == s2["nll"]["overall"]
    assert [m.name for m in bundle(second, conf, names=("ece2", "nll"))] == ["ece2", "nll"]
    with pytest.raises(ParameterError, match="unknown metric 'auc'"):
        bundle(second, conf, names=("auc",))


# ------------------------------------------------------------ the typed result and its old dict
# form
def test_comparison_is_typed_and_still_reads_as_the_old_nested_dict():
    from topcal.evaluate import Comparison, MethodMetrics, MetricValues, evaluate

    data = simulate(3000, 5)
    res = compare_methods(data, ["uncalibrated", "hist", "csts"], folds=3, seed=1)
    assert isinstance(res, Comparison) and res.protocol == "kfold" and res.folds == 3
    assert list(res.methods) == ["uncalibrated", "hist", "csts"]
    hist = res.methods["hist"]
    assert isinstance(hist, MethodMetrics) and isinstance(hist.nll, MetricValues)
    assert list(hist) == ["nll", "brier", "ece1", "ece2"] and hist.nll is hist["nll"]
    # the old indexing, .get, `in`, len and iteration give the same objects and numbers
    assert res["methods"]["hist"]["nll"]["per_class"]["ant"] == hist.nll.per_class["ant"]
    assert res["methods"]["hist"]["nll"]["overall"] == hist.nll.overall > 0
    assert (
        res["protocol"] == "kfold"
        and res.get("folds") == 3
        and "choices" in res
        and "nope" not in res
    )
    head = ["protocol", "folds", "methods", "skipped", "failed", "warnings", "choices"]
    assert list(res)[:7] == head
    assert list(res)[7:] == ["ranking"] and list(res.ranking)[0] in res.methods
    with pytest.raises(KeyError):
        res["nope"]
    with pytest.raises(AttributeError, match="no metric 'auc'"):
        hist.auc
    with pytest.raises(TypeError):
        res["skipped"] = []  # read-only, like every result
    # to_dict is the old plain dict: JSON round trip, equal to the typed result both ways
    plain = json.loads(json.dumps(res.to_dict()))
    assert (
        plain == res
        and res == plain
        and plain["methods"]["hist"]["nll"]["overall"] == hist.nll.overall
    )
    assert type(plain["methods"]["csts"]["ece2"]) is dict
    # the old dict form (hand-built, or read back from JSON) becomes a comparison again
    again = Comparison.of(plain)
    assert (
        again == res and again.methods["csts"].ece2.per_class == res.methods["csts"].ece2.per_class
    )
    assert Comparison.of(res) is res
    minimal = Comparison.of({"methods": {"hist": evaluate(data, np.full(data.pred.size, 0.5))}})
    assert (
        minimal.protocol == "same"
        and minimal.skipped == []
        and minimal.methods["hist"].brier.overall > 0
    )


def test_cli_json_is_the_comparison_as_a_plain_dict(tmp_path, capsys):
    from topcal.evaluate import Comparison

    data = simulate(1500, 6)
    path = tmp_path / "d.npz"
    np.savez(path, probs=data.full, labels=data.labels, classes=np.array(CLASSES))
    assert (
        main(
            ["compare", str(path), "--methods", "uncalibrated,conf1,hist", "--folds", "2", "--json"]
        )
        == 0
    )
    doc = json.loads(capsys.readouterr().out)
    head = ["protocol", "folds", "methods", "skipped", "failed", "warnings", "choices"]
    assert list(doc) == head + ["ranking"]
    rank = doc["ranking"]
    assert [r["rank"] for r in rank.values()] == [1, 2, 3]
    nll = [r["nll"]["value"] for r in rank.values()]
    best = min(m["nll"]["overall"] for m in doc["methods"].values())
    assert nll == sorted(nll) and nll[0] == pytest.approx(best, rel=1e-12)
    second = list(rank.values())[1]["vs_best"]
    assert second["value"] == pytest.approx(nll[1] - nll[0]) and second["lo"] < second["hi"]
    assert rank["uncalibrated"]["vs_baseline"]["value"] == 0
    res = Comparison.of(doc)
    assert res.folds == 2 and set(res.methods) == {"uncalibrated", "conf1", "hist"}
    assert res.methods["conf1"].ece1.overall == doc["methods"]["conf1"]["ece1"]["overall"]
