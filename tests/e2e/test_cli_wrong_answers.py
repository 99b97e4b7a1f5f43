"""Regression tests of issue 24 (hardening, round two), part B: wrong answers with exit 0, friction,
and following the README as a new user. CLI cases check the answers of commands run in process
(``call`` of _cli.py) and the errors (exit 2, one ``error:`` line) through the real ``topcal``
console script (``cli``/``assert_error``); API cases through the API, Dask cases on a real
``dask.distributed.LocalCluster``.
"""

from __future__ import annotations

import json
import warnings

import numpy as np
import pandas as pd
import pytest

import topcal
from _cli import assert_error, assert_ok, call, cli

pytestmark = pytest.mark.e2e


def _probs_csv(path, n=600, seed=0):
    """Columns p_a,p_b,p_c,label (the issue's base.csv)."""
    rng = np.random.default_rng(seed)
    P = rng.dirichlet([1, 1, 1], n)
    y = np.array([rng.choice(3, p=p) for p in P])
    frame = pd.DataFrame(P, columns=["p_a", "p_b", "p_c"])
    frame["label"] = np.array(list("abc"))[y]
    frame.to_csv(path, index=False)
    return frame


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    """(base.csv, M = a hist model fitted on it), made once: the tests only read them."""
    tmp_path = tmp_path_factory.mktemp("base")
    data = tmp_path / "base.csv"
    _probs_csv(data)
    model = tmp_path / "M.json"
    assert_ok(call("fit", data, "--method", "hist", "-o", model))
    return data, model


# ----------------------------------------------------------------- wrong answers with exit 0
# rows whose top class is c, a, b (so a label read by column position would be wrong)
_ROWS = {"p_c": [0.9, 0.1, 0.2], "p_a": [0.05, 0.8, 0.1], "p_b": [0.05, 0.1, 0.7]}


def _reordered_inputs(tmp_path):
    """The same three rows as CSV, Parquet and npz with columns c, a, b; and a subset a, c."""
    frame = pd.DataFrame(_ROWS)
    frame.to_csv(tmp_path / "re.csv", index=False)
    frame.to_parquet(tmp_path / "re.parquet", index=False)
    np.savez(tmp_path / "re.npz", probs=frame.to_numpy(), classes=np.array(["c", "a", "b"]))
    pd.DataFrame({"p_a": [0.1, 0.6], "p_c": [0.9, 0.4]}).to_csv(tmp_path / "sub.csv", index=False)
    return ["c", "a", "b"], ["c", "a"]


def test_apply_names_pred_by_column_name_when_columns_are_reordered_or_a_subset(base, tmp_path):
    _, model = base
    want, want_sub = _reordered_inputs(tmp_path)
    m = topcal.load(model)
    for src, extra in [
        ("re.csv", ()),
        ("re.parquet", ()),
        ("re.npz", ()),
        ("re.csv", ("--chunk-rows", "1")),
        ("re.parquet", ("--chunk-rows", "2")),
    ]:
        out = tmp_path / f"out-{src}-{len(extra)}.csv"
        assert_ok(call("apply", model, tmp_path / src, "-o", out, *extra))
        got = pd.read_csv(out)
        assert list(got["pred"]) == want, (src, extra)
        # the confidence is that of the named class's curve at the top score
        top = pd.DataFrame(_ROWS).max(axis=1).to_numpy()
        idx = [m.classes_.index(c) for c in want]
        expect = [float(m.curve(k, [s]).confidence[0]) for k, s in zip(idx, top)]
        np.testing.assert_allclose(got["confidence"], expect)
    for extra in [(), ("--chunk-rows", "1")]:
        out = tmp_path / f"sub-{len(extra)}.csv"
        assert_ok(call("apply", model, tmp_path / "sub.csv", "-o", out, *extra))
        assert list(pd.read_csv(out)["pred"]) == want_sub


def test_dask_apply_names_pred_by_column_name(base, tmp_path, cluster):
    _, model = base
    want, _ = _reordered_inputs(tmp_path)
    out = tmp_path / "dk.csv"
    assert_ok(
        call(
            "apply",
            model,
            tmp_path / "re.parquet",
            "--engine",
            "dask",
            "--scheduler",
            cluster.scheduler.address,
            "-o",
            out,
        )
    )
    assert list(pd.read_csv(out)["pred"]) == want


@pytest.fixture
def top_model(tmp_path):
    """A hist model on top-score data of classes a, b, c, on the score range (0, 10)."""
    rng = np.random.default_rng(1)
    n = 3000
    pred = rng.choice(list("abc"), n)
    score = rng.uniform(0.4, 1, n)
    right = rng.uniform(size=n) < score
    other = {"a": "b", "b": "c", "c": "a"}
    label = np.where(right, pred, [other[p] for p in pred])
    pd.DataFrame({"pred": pred, "score": 10 * score, "label": label}).to_csv(
        tmp_path / "top10.csv", index=False
    )
    model = tmp_path / "M10.json"
    assert_ok(
        call(
            "fit",
            tmp_path / "top10.csv",
            "--score-range",
            "0",
            "10",
            "--method",
            "hist",
            "-o",
            model,
        )
    )
    return model


def _adapted_priors(path):
    return json.loads(path.read_text())["model"]["state"]["estimate"]["priors"]


def test_adapt_weighs_binned_use_rows_by_their_counts_and_takes_the_model_score_range(
    top_model, tmp_path
):
    # one bin of 1,000 'a' and one each of b, c; the same 1,002 samples row by row
    pd.DataFrame(
        {
            "predicted_class": list("abc"),
            "bin_lo": [9.0] * 3,
            "bin_hi": [10.0] * 3,
            "tp": [1000, 1, 1],
            "fp": [0, 0, 0],
        }
    ).to_csv(tmp_path / "usebin.csv", index=False)
    # no --score-range: the use set is read on the model's range (0, 10)
    pd.DataFrame({"pred": ["a"] * 1000 + ["b", "c"], "score": [9.5] * 1002}).to_csv(
        tmp_path / "rows.csv", index=False
    )
    for est in ("em", "bbse"):
        a, b = tmp_path / f"bin-{est}.json", tmp_path / f"rows-{est}.json"
        for use, out in ((tmp_path / "usebin.csv", a), (tmp_path / "rows.csv", b)):
            assert_ok(
                call(
                    "adapt", top_model, use, "-o", out, "--shrink", "1", "--bootstrap", "5",
                    "--estimator", est,
                )
            )
        pa, pb = _adapted_priors(a), _adapted_priors(b)
        np.testing.assert_allclose(pa, pb, atol=1e-9)
        assert pa[0] > 0.95, pa  # not ~1/3 each, as when each bin counted once
        assert json.loads(a.read_text())["model"]["state"]["estimate"]["n_use"] == 1002


def test_priors_csv_with_a_byte_order_mark_is_read(top_model, tmp_path):
    pri = tmp_path / "p.csv"
    pri.write_bytes("class,prior\na,0.5\nb,0.25\nc,0.25\n".encode("utf-8-sig"))
    out = tmp_path / "A.json"
    assert_ok(call("adapt", top_model, "--priors", pri, "-o", out))
    assert _adapted_priors(out) == [0.5, 0.25, 0.25]


def _lattice_data(n=3000, seed=0):
    """Three-class probabilities on a 0.01 lattice (a random forest's outputs): many scores on bin
    edges."""
    rng = np.random.default_rng(seed)
    P = rng.dirichlet([1, 1, 1], n)
    P[:, :2] = np.round(P[:, :2] * 100) / 100
    P[:, 2] = 1.0 - P[:, :2].sum(axis=1)
    P = np.clip(np.round(P, 2), 0, 1)
    P /= P.sum(axis=1, keepdims=True)
    y = (rng.random(n)[:, None] > np.cumsum(P, axis=1)).sum(axis=1).clip(0, 2)
    return P, y


@pytest.mark.parametrize(
    "method, atol",
    [
        ("hist", 0),
        ("cum-opt", 0),
        ("cum", 0),
        ("conf1", 0),
        ("bts", 1e-12),
        ("btswa", 1e-12),
        ("kde-mon2", 1e-4),
    ],
)
def test_update_equals_fit_bit_for_bit_on_discrete_scores(method, atol, tmp_path):
    from topcal.evidence.stats import EXACT_SCORES

    P, y = _lattice_data()
    data = topcal.TopLabelData.from_probs(P, y, classes=list("abc"), renormalize=True)
    parts = np.array_split(np.arange(len(y)), 3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        full = topcal.calibrator(method).fit(data)
        inc = topcal.calibrator(method).fit(data.subset(parts[0]))
        for p in parts[1:]:
            inc.update(data.subset(p))
    assert full.evidence_.stats.exact and full.evidence_.stats.equals(inc.evidence_.stats)
    # bit for bit where the fit sums integer counts; Platt's and the kde's sums to their rounding
    # (docs/scale.md)
    np.testing.assert_allclose(full.predict(data), inc.predict(data), rtol=0, atol=atol)
    # the exact scores survive the model file
    inc.save(tmp_path / "m.json")
    back = topcal.load(tmp_path / "m.json")
    assert back.evidence_.stats.equals(inc.evidence_.stats)
    np.testing.assert_array_equal(back.predict(data), inc.predict(data))
    # a class with more distinct scores than the limit goes to the grid, whatever the split
    rng = np.random.default_rng(3)
    cont = topcal.TopLabelData.from_scores(
        rng.integers(0, 2, 4000), rng.random(4000), rng.integers(0, 2, 4000), classes=["a", "b"]
    )
    halves = [topcal.ScoreStats.from_data(cont.subset(np.arange(i, 4000, 2))) for i in (0, 1)]
    whole = topcal.ScoreStats.from_data(cont)
    assert not whole.exact and halves[0].merge(halves[1]).equals(whole)
    assert EXACT_SCORES < 2000


def test_cli_update_equals_fit_on_discrete_scores(tmp_path):
    P, y = _lattice_data()
    frame = pd.DataFrame(P, columns=["p_a", "p_b", "p_c"])
    frame["label"] = np.array(list("abc"))[y]
    for i, part in enumerate(np.array_split(np.arange(len(y)), 3)):
        frame.iloc[part].to_csv(tmp_path / f"part{i}.csv", index=False)
    frame.to_csv(tmp_path / "all.csv", index=False)
    assert_ok(
        call(
            "fit",
            tmp_path / "all.csv",
            "--method",
            "hist",
            "--renormalize",
            "-o",
            tmp_path / "all.json",
        )
    )
    assert_ok(
        call(
            "fit",
            tmp_path / "part0.csv",
            "--method",
            "hist",
            "--renormalize",
            "-o",
            tmp_path / "m1.json",
        )
    )
    assert_ok(
        call(
            "update",
            tmp_path / "m1.json",
            tmp_path / "part1.csv",
            "--renormalize",
            "-o",
            tmp_path / "m2.json",
        )
    )
    assert_ok(
        call(
            "update",
            tmp_path / "m2.json",
            tmp_path / "part2.csv",
            "--renormalize",
            "--chunk-rows",
            "300",
            "-o",
            tmp_path / "m3.json",
        )
    )
    for m in ("all", "m3"):
        assert_ok(
            call(
                "apply",
                tmp_path / f"{m}.json",
                tmp_path / "all.csv",
                "--renormalize",
                "-o",
                tmp_path / f"out-{m}.csv",
            )
        )
    a, b = pd.read_csv(tmp_path / "out-all.csv"), pd.read_csv(tmp_path / "out-m3.csv")
    np.testing.assert_array_equal(a["confidence"].to_numpy(), b["confidence"].to_numpy())
    assert (
        json.loads((tmp_path / "m3.json").read_text())["model"]["state"]
        == json.loads((tmp_path / "all.json").read_text())["model"]["state"]
    )


def test_counts_beyond_2_to_the_53_are_refused_and_models_below_it_load(tmp_path):
    rows = "predicted_class,bin_lo,bin_hi,tp,fp\na,0,0.5,{},1\na,0.5,1,30,2\nb,0,1,10,10\n"
    (tmp_path / "big.csv").write_text(rows.format("1e18"))
    for method in ("hist", "kde-mon2", "cum-opt"):
        r = cli("fit", tmp_path / "big.csv", "--method", method, "-o", tmp_path / "big.json")
        assert_error(r, "more than 2^53", "scale the tp/fp counts down")
        assert not (tmp_path / "big.json").exists()
    (tmp_path / "ok.csv").write_text(rows.format("5e15"))
    for method in ("hist", "kde-mon2", "cum-opt"):
        out = tmp_path / f"ok-{method}.json"
        assert_ok(call("fit", tmp_path / "ok.csv", "--method", method, "-o", out))
        assert_ok(call("describe", out))  # loadable
        # an update that takes the total past 2^53 is refused, and writes nothing (other rows in
        # every bin: rows the model holds are refused as counted twice before the total is read)
        other = rows.format("5e15").replace(",30,2", ",31,2").replace("5e15,1", "5e15,2")
        (tmp_path / "ok2.csv").write_text(other.replace(",10,10", ",11,10"))
        r = cli("update", out, tmp_path / "ok2.csv", "-o", tmp_path / "up.json")
        assert_error(r, "more than 2^53")
        assert not (tmp_path / "up.json").exists()


def test_one_column_in_two_roles_is_an_error(tmp_path):
    (tmp_path / "two.csv").write_text("x,y,s\na,a,0.9\nb,a,0.8\na,b,0.7\n")
    for cmd in (["metrics"], ["fit", "--method", "hist", "-o", tmp_path / "m.json"]):
        r = cli(
            cmd[0],
            tmp_path / "two.csv",
            *cmd[1:],
            "--column",
            "pred=y",
            "--column",
            "label=y",
            "--column",
            "score=s",
        )
        assert_error(r, "column 'y' is given two roles", "'label'", "'pred'")
    roles = ("metrics", tmp_path / "two.csv", "--column", "pred=x", "--column", "label=y")
    assert_error(cli(*roles, "--column", "score=x"), "column 'x' is given two roles")
    assert_ok(call(*roles, "--column", "score=s"))


def _resign(path, edit):
    """Edit a model file's payload and sign it again (a tampered but well-formed file)."""
    import hashlib

    from topcal.persist import canonical_json

    doc = json.loads(path.read_text())
    edit(doc["model"])
    doc["sha256"] = hashlib.sha256(canonical_json(doc["model"]).encode()).hexdigest()
    path.write_text(json.dumps(doc))


def test_resigned_temperature_out_of_range_is_refused_at_load(base, tmp_path):
    data, _ = base
    model = tmp_path / "sts.json"
    assert_ok(call("fit", data, "--method", "sts", "-o", model))
    assert_ok(call("apply", model, data, "-o", tmp_path / "ok.csv"))
    for t, fragment in ((1e-320, "temperatures must lie in"), (1e300, "temperatures must lie in")):
        bad = tmp_path / f"bad-{t:g}.json"
        bad.write_text(model.read_text())

        def edit(m, t=t):
            m["state"]["temperature"] = [t] * len(m["state"]["temperature"])

        _resign(bad, edit)
        r = cli("apply", bad, data, "-o", tmp_path / "out.csv")
        assert_error(r, fragment)
        assert not (tmp_path / "out.csv").exists()
        with pytest.raises(topcal.errors.ModelFileError, match="temperatures must lie in"):
            topcal.load(bad)


def test_temperature_fits_do_not_depend_on_row_order(tmp_path):
    # 17 rows whose top scores tie (0.5, 0.6, 0.7) with different other entries and true classes:
    # rows the old order (class, score, outcome) left in input order
    worst = 0.0
    for seed in range(12):
        rng = np.random.default_rng(seed)
        top = rng.choice([0.5, 0.6, 0.7], 17)
        rest = np.minimum(rng.random(17) * (1 - top), top)
        P = np.array(
            [np.roll(r, rng.integers(0, 3)) for r in np.column_stack([top, rest, 1 - top - rest])]
        )
        y = rng.integers(0, 3, 17)
        for method in ("cstswa", "tswa", "csts"):
            fits = []
            for s in range(4):
                perm = np.random.default_rng(s).permutation(17) if s else np.arange(17)
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    c = topcal.calibrator(method).fit(P[perm], y[perm], classes=list("abc"))
                fits.append(np.r_[c.temperature_, c.awards_])
            worst = max(worst, float(np.abs(np.array(fits) - fits[0]).max()))
    assert worst == 0.0
    # through the console script: a shuffled file gives the same model
    rng = np.random.default_rng(4)
    top = rng.choice([0.5, 0.6, 0.7], 17)
    rest = np.minimum(rng.random(17) * (1 - top), top)
    P = np.array(
        [np.roll(r, rng.integers(0, 3)) for r in np.column_stack([top, rest, 1 - top - rest])]
    )
    frame = pd.DataFrame(P, columns=["p_a", "p_b", "p_c"])
    frame["label"] = rng.choice(list("abc"), 17)
    frame.to_csv(tmp_path / "a.csv", index=False)
    frame.sample(frac=1, random_state=1).to_csv(tmp_path / "b.csv", index=False)
    for f in ("a", "b"):
        assert_ok(
            call("fit", tmp_path / f"{f}.csv", "--method", "cstswa", "-o", tmp_path / f"{f}.json")
        )
    ta, tb = (
        json.loads((tmp_path / f"{f}.json").read_text())["model"]["state"] for f in ("a", "b")
    )
    assert ta["temperature"] == tb["temperature"] and ta["awards"] == tb["awards"]


# ----------------------------------------------------------------- scikit-learn estimator
def test_sklearn_predict_not_argmax_warns_and_records_the_share():
    from sklearn.datasets import make_classification
    from sklearn.linear_model import LogisticRegression
    from sklearn.svm import SVC

    X, y = make_classification(1200, n_features=8, n_informative=5, n_classes=4, random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter(
            "ignore", FutureWarning
        )  # scikit-learn 1.9 deprecates probability=True
        svc = SVC(probability=True, random_state=0).fit(X[:600], y[:600])
    with pytest.warns(
        topcal.errors.TopcalWarning, match=r"SVC.predict\(\) differs from the argmax"
    ):
        cal = topcal.TopLabelCalibratedClassifier(svc, method="hist").fit(X[600:], y[600:])
    own = svc.predict(X[600:])
    top = cal.top_label_data(X[600:])
    argmax = cal.classes_[top.pred]
    assert cal.argmax_disagreement_ == np.mean(own != argmax) > 0
    # predict follows the calibrated vector: the argmax of predict_proba on every row, also on
    # the rows where SVC's one-vs-one vote disagrees with its own probabilities
    for rows in (slice(None, 600), slice(600, None)):
        proba = cal.predict_proba(X[rows])
        np.testing.assert_array_equal(cal.predict(X[rows]), cal.classes_[proba.argmax(1)])
        np.testing.assert_allclose(proba.sum(1), 1.0, rtol=0, atol=1e-12)
    # a classifier whose predict is the argmax: no warning, share 0
    lr = LogisticRegression(max_iter=500).fit(X[:600], y[:600])
    with warnings.catch_warnings():
        warnings.simplefilter("error", topcal.errors.TopcalWarning)
        cal = topcal.TopLabelCalibratedClassifier(lr, method="hist").fit(X[600:], y[600:])
    assert cal.argmax_disagreement_ == 0.0


_GRID_SCRIPT = """
import warnings, json
import numpy as np, topcal
from sklearn.datasets import make_classification
from sklearn.frozen import FrozenEstimator
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import GridSearchCV
X, y = make_classification(900, n_features=8, n_informative=8, n_redundant=0, class_sep=2.5,
                           n_classes=6,
                           n_clusters_per_class=1, random_state=0)
lr = LogisticRegression(max_iter=500).fit(X[:300], y[:300])
with warnings.catch_warnings(record=True) as w:
    warnings.simplefilter("always")
    gs = GridSearchCV(topcal.TopLabelCalibratedClassifier(FrozenEstimator(lr)),
                      {"method": ["hist", "cstswa", "kde-mon2"]}, cv=5,
                      scoring="neg_log_loss").fit(X[300:420], y[300:420])
deg = [str(x.message) for x in w if issubclass(x.category, topcal.errors.DegenerateClassWarning)]
print(json.dumps({"degenerate": deg, "kept": len(gs.best_estimator_.fit_warnings_)}))
"""


def test_sklearn_prefit_error_names_frozen_estimator_and_grid_search_warns_once_per_fit():
    import subprocess
    import sys

    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import GridSearchCV

    X = np.random.default_rng(0).normal(size=(60, 3))
    y = np.arange(60) % 3
    with pytest.raises(topcal.errors.NotFittedError, match="FrozenEstimator"):
        GridSearchCV(
            topcal.TopLabelCalibratedClassifier(LogisticRegression()),
            {"method": ["hist"]},
            cv=3,
            error_score="raise",
        ).fit(X, y)
    # a fresh process: the once-per-kind registry starts empty (11 warnings, one per fold, before)
    r = subprocess.run(
        [sys.executable, "-c", _GRID_SCRIPT], capture_output=True, text=True, timeout=300
    )
    assert r.returncode == 0, r.stderr[-2000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    # 16 fits (3 methods x 5 folds + the refit), two methods that warn: one summary per kind
    assert 1 <= len(out["degenerate"]) <= 2, out
    assert all("shown once per kind" in m for m in out["degenerate"])


# ----------------------------------------------------------------- friction
def test_folds_with_in_sample_or_eval_is_an_error(base, tmp_path):
    data, _ = base
    r = cli("compare", data, "--eval", data, "--folds", "3", "--methods", "hist")
    assert_error(r, "--folds is for K-fold cross-fitting", "--eval")
    r = cli("compare", data, "--in-sample", "--folds", "3", "--methods", "hist")
    assert_error(r, "--folds is for K-fold cross-fitting", "--in-sample")
    r = cli(
        "report", data, "--in-sample", "--folds", "3", "--methods", "hist", "-o", tmp_path / "rep"
    )
    assert_error(r, "--folds is for K-fold cross-fitting", "--in-sample")
    assert not (tmp_path / "rep").exists()
    # --folds alone is honoured; the default is 5
    out = json.loads(
        assert_ok(call("compare", data, "--folds", "3", "--methods", "hist", "--json")).stdout
    )
    assert out["protocol"] == "kfold" and out["folds"] == 3
    out = json.loads(assert_ok(call("compare", data, "--methods", "hist", "--json")).stdout)
    assert out["protocol"] == "kfold" and out["folds"] == 5


def test_docs_name_the_real_describe_keys_and_compare_protocol():
    from pathlib import Path

    docs = Path(__file__).resolve().parents[2] / "docs"
    rep = (docs / "report.md").read_text()
    assert "topcal compare preds.csv                       # 5-fold cross-fitting" in rep
    temp = (docs / "temperature.md").read_text()
    line = next(ln for ln in temp.splitlines() if 'describe()["classes"]' in ln)
    rng = np.random.default_rng(0)
    P = rng.dirichlet([1, 1, 1], 300)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        keys = topcal.calibrator("tswa").fit(P, rng.integers(0, 3, 300)).describe()["classes"]["0"]
    for k in keys:
        assert f'"{k}"' in line, (k, line)


def test_chunked_errors_give_the_rows_of_the_file(base, tmp_path):
    _, model = base
    rows = ["p_a,p_b,p_c,label"] + ["0.2,0.3,0.5,c"] * 8 + ["0.2,x,0.5,c"]
    (tmp_path / "bad.csv").write_text("\n".join(rows) + "\n")
    whole = assert_error(
        cli("fit", tmp_path / "bad.csv", "--method", "hist", "-o", tmp_path / "m.json"), "at row 9"
    )
    for cmd in (
        ["fit", tmp_path / "bad.csv", "--method", "hist", "-o", tmp_path / "m.json"],
        ["apply", model, tmp_path / "bad.csv", "-o", tmp_path / "o.csv"],
        ["update", model, tmp_path / "bad.csv", "-o", tmp_path / "u.json"],
    ):
        err = assert_error(cli(*cmd, "--chunk-rows", "3"), "at row 9")
        assert err == whole
    rows = ["p_a,p_b,p_c"] + ["0.2,0.3,0.5"] * 4 + ["0.2,0.3,0.9"]
    (tmp_path / "sum.csv").write_text("\n".join(rows) + "\n")
    assert_error(
        cli("apply", model, tmp_path / "sum.csv", "-o", tmp_path / "o.csv", "--chunk-rows", "2"),
        "probs row 5 sums to 1.4",
    )


def test_class_names_na_none_null_nan_are_read_from_csv(tmp_path):
    rng = np.random.default_rng(0)
    n = 400
    names = np.array(["NA", "None", "null", "nan"])
    pred = rng.integers(0, 4, n)
    lab = np.where(rng.random(n) < 0.7, pred, rng.integers(0, 4, n))
    pd.DataFrame(
        {"pred": names[pred], "score": rng.uniform(0.3, 1, n), "label": names[lab]}
    ).to_csv(tmp_path / "top.csv", index=False)
    P = rng.dirichlet([1] * 4, n)
    frame = pd.DataFrame(P, columns=["p_" + c for c in names])
    frame["label"] = names[lab]
    frame.to_csv(tmp_path / "vec.csv", index=False)
    for src, extra in (("top.csv", ()), ("vec.csv", ()), ("vec.csv", ("--chunk-rows", "50"))):
        model = tmp_path / f"m-{src}-{len(extra)}.json"
        assert_ok(call("fit", tmp_path / src, "--method", "hist", "-o", model, *extra))
        assert set(topcal.load(model).classes_) == set(names)
        out = tmp_path / f"o-{src}-{len(extra)}.csv"
        assert_ok(call("apply", model, tmp_path / src, "-o", out, *extra))
        got = pd.read_csv(out, keep_default_na=False)
        want = names[P.argmax(axis=1)] if src == "vec.csv" else names[pred]
        assert list(got["pred"]) == list(want)
    m = json.loads(assert_ok(call("metrics", tmp_path / "top.csv", "--json")).stdout)
    assert set(names) <= set(json.dumps(m).replace('"', " ").split())
    # genuinely missing values are still found
    (tmp_path / "miss.csv").write_text("pred,score,label\na,0.9,a\nb,0.5,\n")
    for extra in ((), ("--chunk-rows", "1")):
        assert_error(
            cli(
                "fit", tmp_path / "miss.csv", "--method", "hist", "-o", tmp_path / "x.json", *extra
            ),
            "missing value at row 2",
        )
    (tmp_path / "miss2.csv").write_text("pred,score,label\na,0.9,a\nb,,b\n")
    assert_error(
        cli("fit", tmp_path / "miss2.csv", "--method", "hist", "-o", tmp_path / "x.json"),
        "'score' is empty (NaN) at row 2",
    )


# ----------------------------------------------------------------- following the README
IMAGENET = "/work/shared/data/bench/imagenet-resnet101.csv"


def _imagenet_head(tmp_path, n=2000):
    from pathlib import Path

    src = Path(IMAGENET)
    if src.exists():
        lines = src.read_text().splitlines()[: n + 1]
    else:  # the same layout, simulated
        rng = np.random.default_rng(0)
        lab = rng.integers(0, 50, n)
        pred = np.where(rng.random(n) < 0.8, lab, rng.integers(0, 50, n))
        lines = ["true_label,pred_label,confidence"] + [
            f"{a},{b},{c}" for a, b, c in zip(lab, pred, rng.uniform(0.2, 1, n))
        ]
    path = tmp_path / "inet.csv"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_apply_reads_the_imagenet_layout_fit_reads(tmp_path):
    data = _imagenet_head(tmp_path)
    model = tmp_path / "inet.json"
    assert_ok(call("fit", data, "--method", "hist", "-o", model))
    pd.read_csv(data).to_parquet(tmp_path / "inet.parquet", index=False)
    outs = []
    for src, extra in (
        (data, ()),
        (data, ("--chunk-rows", "300")),
        (tmp_path / "inet.parquet", ()),
    ):
        out = tmp_path / f"o{len(outs)}.csv"
        assert_ok(call("apply", model, src, "-o", out, *extra))
        outs.append(pd.read_csv(out))
    got = outs[0]
    # the input's columns untouched, pred, and the calibrated value beside the input's confidence
    assert list(got.columns) == [
        "true_label",
        "pred_label",
        "confidence",
        "pred",
        "calibrated_confidence",
    ]
    frame = pd.read_csv(data)
    np.testing.assert_array_equal(got["confidence"], frame["confidence"])
    np.testing.assert_array_equal(got["pred"].astype(str), frame["pred_label"].astype(str))
    m = topcal.load(model)
    d = topcal.io.read_data(data)
    np.testing.assert_allclose(got["calibrated_confidence"], m.predict(d))
    for other in outs[1:]:
        pd.testing.assert_frame_equal(other, got)
    # the calibrated column is what metrics reads with --column score=...: the model's own NLL
    a = json.loads(assert_ok(call("metrics", data, "--model", model, "--json")).stdout)
    b = json.loads(
        assert_ok(
            call(
                "metrics",
                tmp_path / "o0.csv",
                "--column",
                "score=calibrated_confidence",
                "--column",
                "label=true_label",
                "--json",
            )
        ).stdout
    )
    assert a["overall"]["nll"]["value"] == pytest.approx(b["overall"]["nll"]["value"], rel=1e-12)


def test_metrics_column_score_wins_over_probability_columns(base, tmp_path):
    data, model = base
    out = tmp_path / "out.csv"
    assert_ok(call("apply", model, data, "-o", out))
    nll = lambda r: json.loads(assert_ok(r).stdout)["overall"]["nll"]["value"]
    calibrated = nll(call("metrics", data, "--model", model, "--json"))
    raw = nll(call("metrics", data, "--json"))
    for flags in (("--column", "score=confidence"), ("--score-column", "confidence")):
        got = nll(call("metrics", out, *flags, "--json"))
        assert got == pytest.approx(calibrated, rel=1e-12) and got != pytest.approx(raw)


def test_update_takes_what_fit_takes_and_adapted_or_unlabelled_give_the_right_message(
    base, tmp_path
):
    data, model = base
    rng = np.random.default_rng(0)
    P = rng.dirichlet([1, 1, 1], 300)
    y = rng.integers(0, 3, 300)
    a = topcal.calibrator("hist").fit(P[:150], y[:150]).update(P[150:], y[150:])
    b = topcal.calibrator("hist").fit(P, y)
    np.testing.assert_array_equal(a.predict(P), b.predict(P))
    names = np.array(list("abc"))[y]
    a = (
        topcal.calibrator("hist")
        .fit(P[:150], names[:150], classes=list("abc"))
        .update(P[150:], names[150:])
    )
    np.testing.assert_array_equal(a.predict(P), b.predict(P))
    frame = pd.DataFrame(P, columns=["p_a", "p_b", "p_c"])
    a = (
        topcal.calibrator("hist")
        .fit(frame.iloc[:150], names[:150])
        .update(frame.iloc[150:], names[150:])
    )
    np.testing.assert_array_equal(a.predict(frame), b.predict(P))
    # an adapted model: not "an old file format"
    adapted = tmp_path / "A.json"
    assert_ok(call("adapt", model, data, "-o", adapted, "--bootstrap", "0"))
    err = assert_error(
        cli("update", adapted, data, "-o", tmp_path / "U.json"),
        "adapted model",
        "update the model it was adapted from",
    )
    assert "format" not in err
    # metrics on unlabelled data
    (tmp_path / "unl.csv").write_text("p_a,p_b,p_c\n0.2,0.3,0.5\n0.6,0.3,0.1\n")
    err = assert_error(
        cli("metrics", tmp_path / "unl.csv"), "metrics", "needs labelled data", "--label-column"
    )
    assert "uncalibrated" not in err


def test_update_right_after_fit_works_when_auto_chose_a_full_vector_method(tmp_path):
    rng = np.random.default_rng(0)
    n, K = 3000, 4
    z = rng.normal(size=(n, K)) * 1.5
    pt = np.exp(z) / np.exp(z).sum(axis=1, keepdims=True)
    y = (rng.random(n)[:, None] > np.cumsum(pt, axis=1)).sum(axis=1).clip(0, K - 1)
    pm = np.exp(3 * z) / np.exp(3 * z).sum(
        axis=1, keepdims=True
    )  # over-confident: a temperature fixes it
    frame = pd.DataFrame(pm, columns=[f"p_{c}" for c in "abcd"])
    frame["label"] = np.array(list("abcd"))[y]
    frame.iloc[:2000].to_csv(tmp_path / "d0.csv", index=False)
    frame.iloc[2000:].to_csv(tmp_path / "d1.csv", index=False)
    r = assert_ok(call("fit", tmp_path / "d0.csv", "-o", tmp_path / "m.json"))
    chose = topcal.load(tmp_path / "m.json").method_
    assert topcal.calibrators.get_class(chose).needs_full, (
        r.stdout
    )  # the case of the issue: auto chose sts/tswa/...
    r = assert_ok(
        call("update", tmp_path / "m.json", tmp_path / "d1.csv", "-o", tmp_path / "u.json")
    )
    assert f"instead of {chose}" in r.stdout and "cannot be updated from statistics" in r.stderr
    m = topcal.load(tmp_path / "u.json")
    assert (
        not topcal.calibrators.get_class(m.method_).needs_full
        and m.evidence_.stats.n_samples == 3000
    )
    best = min(
        (
            k
            for k, v in m.cv_.items()
            if v["nll"] is not None and not topcal.calibrators.get_class(k).needs_full
        ),
        key=lambda k: m.cv_[k]["nll"],
    )
    assert m.method_ == best


def test_update_with_rows_already_in_the_model_is_refused(base, tmp_path):
    """Issue 33: rows the model already holds would be counted twice; refused (was: a warning),
    by the statistics' mark or the rows' fingerprint, whole or chunked, and nothing written."""
    data, model = base
    _probs_csv(tmp_path / "other.csv", seed=5)
    r = assert_ok(call("update", model, tmp_path / "other.csv", "-o", tmp_path / "u1.json"))
    assert "counted twice" not in r.stderr
    for src, extra in ((data, ()), (tmp_path / "other.csv", ("--chunk-rows", "70"))):
        r = cli("update", tmp_path / "u1.json", src, "-o", tmp_path / "u2.json", *extra)
        assert_error(r, "count them twice", "update with rows the model has not seen")
    assert not (tmp_path / "u2.json").exists()
    fps = json.loads((tmp_path / "u1.json").read_text())["model"]["evidence"]["fingerprints"]
    assert len(fps) == 2
    # the API refuses too (a project error class), and the model is unchanged
    m = topcal.load(model)
    before = topcal.persist.dumps(m)
    d = topcal.io.read_data(data)
    with pytest.raises(topcal.errors.DataError, match="count them twice"):
        m.update(d)
    assert topcal.persist.dumps(m) == before
