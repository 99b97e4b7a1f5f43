"""Regression tests of issue 52 (hardening, round four): each case gave a wrong answer, a traceback,
an unreadable output or a message too long to read before the fix. Commands run in process
(``call`` of _cli.py); the files are small simulated sets, the 1,000-class cases included.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import topcal
from topcal.errors import TopcalError

from _cli import assert_error, assert_ok, call

#: The longest one-line error message a user should have to read.
MAX_ERROR_CHARS = 300


def _scores(k, n, seed=0, *, prefix="class_"):
    """A top-score frame over ``k`` classes: pred, score, label (correct with probability s)."""
    rng = np.random.default_rng(seed)
    names = np.array([f"{prefix}{i:04d}" for i in range(k)], dtype=object)
    pred = rng.integers(0, k, n)
    score = rng.uniform(0.3, 1.0, n)
    right = rng.random(n) < score
    other = (pred + rng.integers(1, k, n)) % k
    return pd.DataFrame(
        {"pred": names[pred], "score": score, "label": names[np.where(right, pred, other)]}
    )


@pytest.fixture(scope="module")
def many(tmp_path_factory):
    """A 1,000-class hist model (fit.csv) and a use set (use.csv) in which 55 classes are never
    predicted."""
    d = tmp_path_factory.mktemp("many")
    fit = _scores(1000, 20_000)
    fit.to_csv(d / "fit.csv", index=False)
    use = _scores(1000, 20_000, seed=1)
    gone = {f"class_{i:04d}" for i in range(0, 1000, 18)[:55]}
    use = use[~use["pred"].isin(gone)]
    assert use["pred"].nunique() == 945  # every other class is predicted
    use[["pred", "score"]].to_csv(d / "use.csv", index=False)
    assert_ok(call("fit", d / "fit.csv", "--method", "hist", "-o", d / "m.json"))
    return d


@pytest.mark.slow  # the command at 1,000 classes; the fast lane adapts the same model in Python
def test_adapt_on_a_use_set_lacking_classes_command_line(many):
    r = assert_ok(call("adapt", many / "m.json", many / "use.csv", "-o", many / "a.json"))
    assert "adapted hist" in r.stdout
    adapted = topcal.load(many / "a.json")
    assert len(adapted.classes_) == 1000
    use = topcal.read_data(many / "use.csv")
    c = adapted.predict(use)
    assert c.shape == (use.n_rows,) and np.all((c >= 0) & (c <= 1))


def test_adapt_on_a_use_set_lacking_classes_python(many):
    model = topcal.load(many / "m.json")
    use = topcal.read_data(many / "use.csv")  # its classes: the 945 it predicts
    assert use.n_classes == 945
    adapted = model.adapt(use, n_bootstrap=0)
    assert adapted.classes_ == model.classes_
    est = topcal.labelshift.estimate_priors(model, use, n_bootstrap=0)
    assert len(est.priors) == 1000 and abs(est.priors.sum() - 1) < 1e-9


def test_adapt_use_set_with_an_unknown_class_is_one_short_line(many, tmp_path):
    use = pd.read_csv(many / "use.csv")
    use.loc[:3, "pred"] = ["x" * 500, "y" * 80, "z", "w"]
    use.to_csv(tmp_path / "bad.csv", index=False)
    line = assert_error(
        call("adapt", many / "m.json", tmp_path / "bad.csv", "-o", tmp_path / "a.json"),
        "does not know",
    )
    assert len(line) <= MAX_ERROR_CHARS, len(line)
    assert not (tmp_path / "a.json").exists()


def test_python_class_mismatch_messages_are_capped(many):
    model = topcal.load(many / "m.json")
    probs = np.full((4, 999), 1 / 999)
    data = topcal.TopLabelData.from_probs(probs, classes=[f"q{i}" * 20 for i in range(999)])
    for call_it in (lambda: model.adapt(data), lambda: model.predict(data)):
        with pytest.raises(TopcalError) as info:
            call_it()
        assert len(str(info.value)) <= MAX_ERROR_CHARS, len(str(info.value))


# ============================================== R9: outputs round-trip, formulas still neutralised
def test_csv_quote_rule_round_trips():
    from topcal._tables import csv_text, csv_untext, is_formula

    kept = ["-", "+ve", "-1", "+0.5", "-2e-3", "-2+3", "a=b", "'", "'-", "'+ve", "x'"]
    quoted = ["=1+1", "@a", "\tx", "\rx", "+HYPERLINK(1)", "-2+3+cmd|' /C calc'!A0", "-A1!B2"]
    for t in kept:
        assert not is_formula(t) and csv_text(t) == t, t
    for t in quoted:
        assert is_formula(t) and csv_text(t) == "'" + t, t
    for t in kept + quoted + ["'=x", "''@a", "'@", "''", "'+f(x)"]:
        assert csv_untext(csv_text(t)) == t, t
    assert csv_text("'=x") == "''=x"  # the user's own quote before a formula is kept on reading


@pytest.fixture(scope="module")
def quoted_classes(tmp_path_factory):
    """A top-score set whose classes and copied-through column hold signs, quotes and formulas."""
    d = tmp_path_factory.mktemp("quoted")
    rng = np.random.default_rng(5)
    names = np.array(["@a", "-", "+ve", "=1+1", "'=x", "ok"], dtype=object)
    n = 1200
    pred = rng.integers(0, len(names), n)
    score = rng.uniform(0.3, 1.0, n)
    label = np.where(rng.random(n) < score, pred, (pred + 1) % len(names))
    note = np.array(["-", "+ve", "-2+3", "=SUM(A1)", "'=y", "plain"], dtype=object)
    frame = pd.DataFrame(
        {"pred": names[pred], "score": score, "label": names[label], "note": note[pred]}
    )
    frame.to_csv(d / "in.csv", index=False)
    assert_ok(call("fit", d / "in.csv", "--method", "hist", "-o", d / "m.json"))
    return d, frame


@pytest.mark.parametrize("extra", [(), ("--chunk-rows", "250")])
def test_apply_keeps_the_users_text_and_reads_its_output_back(quoted_classes, tmp_path, extra):
    d, frame = quoted_classes
    out = tmp_path / "o.csv"
    assert_ok(call("apply", d / "m.json", d / "in.csv", *extra, "-o", out))
    raw = pd.read_csv(out, dtype=str, keep_default_na=False)
    # the user's text, except where a spreadsheet would run it
    assert set(raw["note"]) == {"-", "+ve", "-2+3", "'=SUM(A1)", "'=y", "plain"}
    # a CSV's "'=x" reads as "=x" (the quote before a formula is a spreadsheet's, docs/cli.md)
    assert set(raw["label"]) == {"'@a", "-", "+ve", "'=1+1", "'=x", "ok"}
    model = topcal.load(d / "m.json")
    assert set(model.classes_) == {"@a", "-", "+ve", "=1+1", "=x", "ok"}
    # topcal reads back what it wrote: the classes are the model's, the metrics those of the input
    back = topcal.read_data(out)
    assert set(back.classes) == set(model.classes_)
    r1 = assert_ok(call("metrics", out, "--model", d / "m.json"))
    r2 = assert_ok(call("metrics", d / "in.csv", "--model", d / "m.json"))
    assert r1.stdout == r2.stdout.replace(str(d / "in.csv"), str(out))
    # read in chunks too (the streamed reader's names and cells)
    assert_ok(
        call("fit", out, "--method", "hist", "--chunk-rows", "100", "-o", tmp_path / "s.json")
    )
    assert set(topcal.load(tmp_path / "s.json").classes_) == set(model.classes_)


# ============================================== R8: a model's digest does not change on load
def _resigned(path, edit, out):
    import hashlib
    import json

    from topcal.persist import canonical_json

    doc = json.loads(path.read_text())
    edit(doc)
    key = "model" if "model" in doc and "method" in doc["model"] else "thresholds"
    payload = doc[key] if key in doc else {k: v for k, v in doc.items() if k != "sha256"}
    doc["sha256"] = hashlib.sha256(canonical_json(payload).encode()).hexdigest()
    out.write_text(json.dumps(doc))
    return doc["sha256"]


def test_an_old_auto_model_keeps_its_digest_and_its_thresholds(tmp_path):
    from topcal.thresholds.cutoffs import model_digest

    frame = _scores(4, 3000, seed=3)
    frame.iloc[:2000].to_csv(tmp_path / "fit.csv", index=False)
    frame.iloc[2000:].to_csv(tmp_path / "held.csv", index=False)
    m = tmp_path / "m.json"
    assert_ok(
        call(
            "fit",
            tmp_path / "fit.csv",
            "--param",
            'candidates=["hist","kde-mon2"]',
            "--param",
            "folds=2",
            "-o",
            m,
        )
    )

    def drop_new_params(doc):  # as written before auto's `screen` existed
        del doc["model"]["params"]["screen"]

    old = tmp_path / "old.json"
    digest = _resigned(m, drop_new_params, old)
    model = topcal.load(old)
    assert model_digest(model) == digest  # loading added the defaults, and the digest is the file's
    assert model_digest(topcal.persist.loads(topcal.persist.dumps(model))) == digest
    assert model.screen == topcal.calibrator("auto").screen  # the default, in memory
    # a thresholds file chosen with the old topcal names the old file's digest
    thr = tmp_path / "thr.json"
    assert_ok(
        call("threshold", tmp_path / "held.csv", "--model", old, "--precision", "0.6", "-o", thr)
    )
    import json

    assert json.loads(thr.read_text())["thresholds"]["model"]["sha256"] == digest
    assert_ok(
        call("apply", old, tmp_path / "held.csv", "--thresholds", thr, "-o", tmp_path / "out.csv")
    )


# ============================================== public functions: one clear error, never a bare one
def test_public_functions_raise_project_errors():
    from topcal.data import kfold_split
    from topcal.errors import DataError, ParameterError

    d = topcal.datasets.load_phanns()
    with pytest.raises(ParameterError, match="groups must be a list of lists"):
        kfold_split(d, 5, groups=5)
    with pytest.raises(DataError, match="needs a TopLabelData, got NoneType"):
        kfold_split(None, 5)
    for bad, what in (
        ([0.5], "integer row indices"),
        (np.array([[0, 1]]), "shape"),
        ([10**9], "out of range"),
        (np.ones(3, bool), "one entry per row"),
    ):
        with pytest.raises(DataError, match=what):
            d.subset(bad)


def test_thresholds_accept_checks_its_rows(tmp_path):
    from topcal.errors import DataError

    data = topcal.io.read_frame(_scores(3, 3000, seed=4))
    fit, held = data.subset(np.arange(1500)), data.subset(np.arange(1500, 3000))
    model = topcal.calibrator("hist").fit(fit)
    th = topcal.fit_thresholds(model, held, precision=0.6)
    conf = model.predict(held)
    codes = held.pred
    ok = th.accept(codes, conf, held.score)
    assert ok.shape == (held.n_rows,)
    with pytest.raises(DataError, match="one length"):
        th.accept(codes[:1], conf, held.score)  # numpy broadcast it silently
    with pytest.raises(DataError, match="not a class index 0..2"):
        th.accept(np.full(held.n_rows, 3), conf, held.score)
    with pytest.raises(DataError, match="not a class index"):
        th.accept(np.full(held.n_rows, -1), conf, held.score)


def test_dask_engine_on_a_csv_says_it_reads_parquet(tmp_path):
    pytest.importorskip("dask")
    from topcal.dask import read_parquet

    frame = _scores(3, 100)
    frame.to_csv(tmp_path / "x.csv", index=False)
    with pytest.raises(TopcalError, match="reads Parquet data, and .* is a .csv file"):
        read_parquet(tmp_path / "x.csv")


def test_precision_is_echoed_as_given(tmp_path):
    frame = _scores(3, 4000, seed=6)
    frame.iloc[:2000].to_csv(tmp_path / "fit.csv", index=False)
    frame.iloc[2000:].to_csv(tmp_path / "held.csv", index=False)
    assert_ok(call("fit", tmp_path / "fit.csv", "--method", "hist", "-o", tmp_path / "m.json"))
    r = call(
        "threshold",
        tmp_path / "held.csv",
        "--model",
        tmp_path / "m.json",
        "--precision",
        "0.9999999999",
        "-o",
        tmp_path / "t.json",
    )
    text = r.stdout + r.stderr
    assert ">= 1 " not in text and ">= 1\n" not in text
    assert "0.9999999999" in text, text[-500:]


# ============================================== hand-edited (re-signed) model files: one line each
@pytest.fixture(scope="module")
def edited_models(tmp_path_factory):
    d = tmp_path_factory.mktemp("edited")
    small, big = _scores(3, 90, seed=1), _scores(3, 3000, seed=1)
    big.to_csv(d / "big.csv", index=False)
    small.to_csv(d / "small.csv", index=False)
    for name, frame, cal in (
        ("kde-table", big, topcal.calibrator("kde-mon2")),
        ("kde-centres", small, topcal.calibrator("kde-mon2")),
        ("auto", big, topcal.calibrator("auto", candidates=["hist", "kde-mon2"], folds=2)),
    ):
        cal.fit(topcal.io.read_frame(frame)).save(d / f"{name}.json")
    return d


def _edit_model(doc, how):
    st = doc["model"]["state"]
    if how == "huge count":
        for cs in st["class_state"]:
            cs["count"] = [1e308] * len(cs["count"])
    elif how == "negative tp":
        for cs in st["class_state"]:
            cs["tp"] = [-1.0 - abs(v) for v in cs["tp"]]
    elif how == "nll text":
        next(iter(doc["model"]["evidence"]["cv"].values()))["nll"] = "x"
    elif how == "short per_class":
        for v in doc["model"]["evidence"]["cv"].values():
            v["per_class"] = [0.5, 0.5]


@pytest.mark.parametrize(
    "source, how, fragment",
    [
        ("kde-table", "huge count", "count must hold sample counts"),
        ("kde-centres", "negative tp", "tp and fp must hold weights >= 0"),
        ("auto", "nll text", "must be numbers or null"),
        ("auto", "short per_class", "must be null or 3 numbers"),
    ],
)
def test_edited_model_files_are_one_line_errors(edited_models, tmp_path, source, how, fragment):
    from topcal.errors import ModelFileError

    bad = tmp_path / "bad.json"
    _resigned(edited_models / f"{source}.json", lambda doc: _edit_model(doc, how), bad)
    with pytest.raises(ModelFileError, match=fragment):
        topcal.load(bad)
    data = edited_models / ("small.csv" if source == "kde-centres" else "big.csv")
    for argv in (
        ("apply", bad, data, "--interval", "0.9", "-o", tmp_path / "o.csv"),
        ("describe", bad),
        ("describe", bad, "--full"),
    ):
        line = assert_error(call(*argv), "malformed", fragment)
        assert len(line) <= MAX_ERROR_CHARS
    assert not (tmp_path / "o.csv").exists()


# ============================================== tables: one format per column, stopped != failed
def test_table_columns_are_formatted_alike():
    from topcal._tables import format_table

    text = format_table(
        ["class", "accepted", "tier", "precision"],
        [["a", 0.0, 1.0, 1.0], ["b", 12.0, 1.5, 0.95], ["c", 3, 2, None]],
    )
    rows = {line.split()[0]: line.split()[1:] for line in text.splitlines()[2:]}
    assert rows["a"] == ["0", "1.0000", "1.0000"]  # a zero count is 0, not 0.0000
    assert rows["b"] == ["12", "1.5000", "0.9500"]
    assert rows["c"] == ["3", "2.0000", "-"]


@pytest.mark.slow
def test_compare_shows_first_look_stops_as_stopped_and_tiers_as_given(tmp_path):
    _scores(5, 8000, seed=2).to_csv(tmp_path / "d.csv", index=False)
    r = assert_ok(call("compare", tmp_path / "d.csv", "--methods", "auto", "--folds", "2"))
    table = r.stdout.split("\ncandidate ")[1].split("\n(")[0].splitlines()[2:]
    cells = {line.split()[0]: line.split()[1:] for line in table}
    stopped = [n for n, c in cells.items() if "stopped" in c]
    assert stopped and "failed" not in r.stdout  # no candidate failed here; some were set aside
    assert "stopped: set aside by the first look" in r.stdout
    tiers = {c[0] for c in cells.values()}
    assert tiers <= {"0", "1", "1.5", "2", "2.25", "2.5", "2.75", "3"} and "1.5" in tiers


# ============================================== the report: control bytes, headline, advice
@pytest.mark.slow
def test_report_escapes_control_bytes_and_points_to_its_warnings(tmp_path):
    import re

    from topcal.report import build_report

    frame = _scores(4, 400, seed=7)
    names = {"class_0000": "\x1b]0;pwned\x07a", "class_0001": "b\x00c", "class_0002": "d\u202ee"}
    frame = frame.replace({"pred": names, "label": names})
    data = topcal.io.read_frame(frame)
    import warnings

    with warnings.catch_warnings():  # a figure drew no missing glyph either
        warnings.filterwarnings("error", message="Glyph .* missing")
        res = build_report(data, tmp_path / "r", methods=["hist"], dpi=30)
    page = (tmp_path / "r" / "index.html").read_text(encoding="utf-8")
    assert not re.search("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e]", page)
    assert "\\x1b]0;pwned\\x07a" in page and "b\\x00c" in page and "d\\u202ee" in page
    assert res.findings and 'id="warnings"' in page
    head = page.split("class='headline'")[1].split("</div>")[0]
    mine = [f for f in res.findings if f.method in (None, "hist", "uncalibrated")]
    assert f"<a href='#warnings'>{len(mine):,} warning" in head


def test_wiggle_advice_names_kde_mon2_only_where_it_was_not_weighed():
    from topcal.report.checks import smoother_advice

    data = topcal.io.read_frame(_scores(3, 1500, seed=8))
    hist = topcal.calibrator("hist").fit(data)
    auto = topcal.calibrator("auto", candidates=["hist", "kde-mon2"], folds=2).fit(data)
    assert smoother_advice(hist) == "compare kde-mon2"
    assert "compare kde-mon2" not in smoother_advice(auto)
    assert "chosen by cross-validated NLL" in smoother_advice(auto)


def test_thresholds_page_states_the_pool_size_the_code_uses():
    from pathlib import Path

    held = topcal.io.read_frame(_scores(3, 3000, seed=11))
    model = topcal.calibrator("hist").fit(topcal.io.read_frame(_scores(3, 3000, seed=12)))
    size = topcal.fit_thresholds(model, held, precision=0.9, delta=0.05).pool_below
    docs = Path(__file__).resolve().parents[2] / "docs"
    page = (docs / "thresholds.md").read_text(encoding="utf-8")
    assert f"fewest its test can use: {size:.0f} at precision 0.9 and δ = 0.05" in page


# ============================================== R1: every route of an update checks the overlap
@pytest.fixture(scope="module")
def fitted_hist(tmp_path_factory):
    d = tmp_path_factory.mktemp("update")
    frame = _scores(3, 6000, seed=9)
    frame.iloc[:3000].to_csv(d / "fit.csv", index=False)
    frame.iloc[3000:].to_csv(d / "new.csv", index=False)
    # 80% fitting rows (the sketches estimate a share to about +-6 points here)
    pd.concat([frame.iloc[:2400], frame.iloc[3000:3600]]).to_csv(d / "mixed.csv", index=False)
    assert_ok(call("fit", d / "fit.csv", "--method", "hist", "-o", d / "m.json"))
    return d


@pytest.mark.parametrize("extra", [(), ("--chunk-rows", "500")])
def test_update_refuses_the_fitting_rows_on_every_route(fitted_hist, tmp_path, extra):
    d = fitted_hist
    for name, what in (("fit.csv", "same as data already in"), ("mixed.csv", "of these rows are")):
        r = call("update", d / "m.json", d / name, *extra, "-o", tmp_path / "u.json")
        assert_error(r, what, "count them twice")  # chunked, mixed.csv passed before
    assert not (tmp_path / "u.json").exists()
    r = assert_ok(call("update", d / "m.json", d / "new.csv", *extra, "-o", tmp_path / "u.json"))
    assert "warning" not in r.stderr


def test_update_from_evidence_checks_the_overlap(fitted_hist):
    from topcal.errors import DataError

    model = topcal.load(fitted_hist / "m.json")
    fit = topcal.read_data(fitted_hist / "fit.csv", classes=list(model.classes_))
    with pytest.raises(DataError, match="count them twice"):
        model.update(model.evidence_of(fit))
    mixed = topcal.read_data(fitted_hist / "mixed.csv", classes=list(model.classes_))
    with pytest.raises(DataError, match="about [7-9][0-9]% of these rows are rows the model"):
        model.update(model.evidence_of(mixed))
    new = topcal.read_data(fitted_hist / "new.csv", classes=list(model.classes_))
    model.update(model.evidence_of(new))  # honest rows pass
    assert model.evidence_.fingerprint.n_rows == 6000


# ============================================== R7: honest data on discrete scores is not refused
def _votes(n, seed, trees=200, k=3):
    """A forest's outputs: each row's probabilities are votes / trees, so values recur."""
    rng = np.random.default_rng(seed)
    p = rng.dirichlet(np.full(k, 0.3), n)
    counts = rng.multinomial(trees, p)  # a row's votes from its own probabilities
    y = np.minimum((p.cumsum(axis=1) < rng.random((n, 1))).sum(axis=1), k - 1)
    return topcal.TopLabelData.from_probs(counts / trees, y, classes=["a", "b", "c"])


def test_honest_vote_data_is_not_taken_for_fitting_rows():
    import warnings

    from topcal.errors import DataError
    from topcal.thresholds.core import check_not_fitting_data

    for seed in range(3):
        fit, held = _votes(3000, 2 * seed), _votes(3000, 2 * seed + 1)
        model = topcal.calibrator("hist").fit(fit)
        ov = model.evidence_.fingerprint.overlap(held)
        assert ov.of_fit == 0.0 and ov.of_data == 0.0, ov  # 0.22-0.33 of recurring values before
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            check_not_fitting_data(model, held)
        with pytest.raises(DataError, match="rows the model was fitted on"):
            check_not_fitting_data(model, fit.subset(np.arange(2500)))  # a re-use still is


@pytest.mark.slow
@pytest.mark.parametrize("trees", [20, 50, 100, 150, 200])
def test_honest_votes_on_20_to_200_levels_are_never_refused(trees):
    """Issue 52's target, 0 of 50 seeds: neither the exact rows, nor the coarse keys, nor the
    rough keys (top and second score on a 1e-3 grid, where votes of 100-200 trees sit on
    their own lattice points) take honest held-out votes for fitting rows."""
    from topcal.evidence.fingerprint import Fingerprint

    shares = []
    for seed in range(50):
        fp = Fingerprint.of(_votes(3000, 2 * seed, trees))
        shares.append(fp.overlap(_votes(3000, 2 * seed + 1, trees)).of_data)
    assert max(shares) < 0.1, shares  # not even a warning


# -- one command, disjoint parts: threshold DATA --fit METHOD --------------------------------------


@pytest.fixture(scope="module")
def one_file(tmp_path_factory):
    d = tmp_path_factory.mktemp("split")
    _scores(3, 3000).to_csv(d / "all.csv", index=False)
    return d


def _threshold_fit(data, out, model_out, *extra):
    """``topcal threshold DATA --fit hist -o OUT --model-out MODEL_OUT`` and ``extra``."""
    return call("threshold", data, "--fit", "hist", "-o", out, "--model-out", model_out, *extra)


def test_threshold_fit_splits_one_file_and_apply_uses_it(one_file):
    d = one_file
    split = ("--fit-fraction", "0.4", "--seed", "7", "--precision", "0.8")
    r = assert_ok(_threshold_fit(d / "all.csv", d / "th.json", d / "m.json", *split))
    assert "of 3000 rows" in r.stdout and "seed 7" in r.stdout
    th, model = topcal.load_thresholds(d / "th.json"), topcal.load(d / "m.json")
    s = th.split
    assert (s.fraction, s.seed, s.n_fit + s.n_cutoff) == (0.4, 7, 3000)
    assert abs(s.n_fit - 1200) <= 3  # stratified: each class's share rounded once
    assert th.n_samples == s.n_cutoff
    assert model.evidence_.stats.n_samples == s.n_fit
    th.check_model(model)
    assert_ok(
        call(
            "apply", d / "m.json", d / "all.csv", "--thresholds", d / "th.json", "-o", d / "out.csv"
        )
    )
    # the same command gives the same split, a different seed another one
    assert_ok(_threshold_fit(d / "all.csv", d / "th2.json", d / "m2.json", *split))
    assert topcal.load_thresholds(d / "th2.json").split == s
    assert_ok(_threshold_fit(d / "all.csv", d / "th3.json", d / "m3.json", "--seed", "8"))
    assert topcal.load_thresholds(d / "th3.json").split.rows_sha256 != s.rows_sha256


@pytest.mark.parametrize(
    "extra, fragment",
    [
        (["--fit-fraction", "0"], "fit_fraction must be a number in (0, 1)"),
        (["--fit-fraction", "1"], "fit_fraction must be a number in (0, 1)"),
        (["--fit-fraction", "nan"], "fit_fraction must be a number in (0, 1)"),
        (["--fit-fraction", "0.001"], "leaves the fitting part empty"),
        (["--seed", "-1"], "seed must be an integer >= 0"),
        (["--param", "nope=3"], "nope"),
    ],
)
def test_threshold_fit_refuses_bad_settings(one_file, tmp_path, extra, fragment):
    small = tmp_path / "small.csv"
    _scores(3, 300).to_csv(small, index=False)
    line = assert_error(
        _threshold_fit(small, tmp_path / "t.json", tmp_path / "m.json", *extra), fragment
    )
    assert len(line) <= MAX_ERROR_CHARS
    assert not (tmp_path / "t.json").exists() and not (tmp_path / "m.json").exists()


def test_threshold_fit_never_overwrites_its_input_or_mixes_options(one_file, tmp_path):
    d = one_file
    before = (d / "all.csv").read_bytes()
    assert_error(_threshold_fit(d / "all.csv", d / "all.csv", tmp_path / "m.json"), "input file")
    assert_error(_threshold_fit(d / "all.csv", tmp_path / "t.json", d / "all.csv"), "input file")
    assert_error(
        _threshold_fit(d / "all.csv", tmp_path / "t.json", tmp_path / "t.json"), "two paths"
    )
    assert_error(
        call("threshold", d / "all.csv", "--fit", "hist", "-o", tmp_path / "t.json"), "--model-out"
    )
    assert_error(
        call(
            "threshold",
            d / "all.csv",
            "--fit",
            "hist",
            "--model",
            tmp_path / "x.json",
            "-o",
            tmp_path / "t.json",
        ),
        "not allowed with",
    )
    assert_ok(call("fit", d / "all.csv", "--method", "hist", "-o", tmp_path / "m.json"))
    assert_error(
        call(
            "threshold",
            d / "all.csv",
            "--model",
            tmp_path / "m.json",
            "--seed",
            "0",
            "-o",
            tmp_path / "t.json",
        ),
        "--seed goes with --fit",
    )
    assert (d / "all.csv").read_bytes() == before
    assert not (tmp_path / "t.json").exists()


# ============================ R6: a model file whose fingerprint cannot be checked says so, once
def _old_model(tmp_path, drop):
    """A hist model file as an older topcal wrote it: without its fingerprint's coarse keys
    (``drop="coarse"``) or without a fingerprint (``drop="all"``), signed again."""
    frame = _scores(3, 3000, seed=5)
    frame.to_csv(tmp_path / "fit.csv", index=False)
    assert_ok(call("fit", tmp_path / "fit.csv", "--method", "hist", "-o", tmp_path / "m.json"))

    def edit(doc):
        fp = doc["model"]["evidence"]["fingerprint"]
        if drop == "all":
            doc["model"]["evidence"]["fingerprint"] = None
        else:
            del fp["coarse"], fp["n_coarse"]

    _resigned(tmp_path / "m.json", edit, tmp_path / "old.json")
    return frame


@pytest.mark.parametrize("drop, fragment", [("coarse", "bit for bit only"), ("all", "could not")])
def test_an_unchecked_fingerprint_warns_once_in_threshold(tmp_path, drop, fragment):
    frame = _old_model(tmp_path, drop)
    rounded = frame.assign(score=frame["score"].round(4))  # the fitting rows, re-encoded
    rounded.to_csv(tmp_path / "r.csv", index=False)
    r = assert_ok(
        call(
            "threshold",
            tmp_path / "r.csv",
            "--model",
            tmp_path / "old.json",
            "--precision",
            "0.8",
            "-o",
            tmp_path / "t.json",
        )
    )
    lines = [ln for ln in r.stderr.splitlines() if fragment in ln]
    assert len(lines) == 1 and len(lines[0]) <= MAX_ERROR_CHARS, r.stderr
    # a model file with its whole fingerprint says nothing of the kind on held-out rows
    _scores(3, 3000, seed=6).to_csv(tmp_path / "h.csv", index=False)
    r = assert_ok(
        call(
            "threshold",
            tmp_path / "h.csv",
            "--model",
            tmp_path / "m.json",
            "--precision",
            "0.8",
            "-o",
            tmp_path / "t2.json",
        )
    )
    assert "fingerprint" not in r.stderr


def test_an_unchecked_fingerprint_warns_in_update(tmp_path):
    from topcal.errors import TopcalWarning

    _old_model(tmp_path, "coarse")
    model = topcal.load(tmp_path / "old.json")
    _scores(3, 500, seed=9).to_csv(tmp_path / "new.csv", index=False)
    with pytest.warns(TopcalWarning, match="bit for bit only"):
        model.update(topcal.read_data(tmp_path / "new.csv"))


# ===================== R4/R5: a superset of the fitting rows, a part of them repeated, as they are
@pytest.fixture()
def fit3(tmp_path):
    frame = _scores(3, 3000, seed=11)
    frame.to_csv(tmp_path / "fit.csv", index=False)
    assert_ok(call("fit", tmp_path / "fit.csv", "--method", "hist", "-o", tmp_path / "m.json"))
    return tmp_path, frame


def test_update_with_a_superset_of_the_fitting_rows_is_refused(fit3):
    d, frame = fit3
    superset = pd.concat([frame, _scores(3, 3200, seed=12)]).sample(frac=1, random_state=0)
    superset.to_csv(d / "super.csv", index=False)
    line = assert_error(
        call("update", d / "m.json", d / "super.csv", "-o", d / "u.json"), "superset", "count"
    )
    assert len(line) <= MAX_ERROR_CHARS and not (d / "u.json").exists()
    # new rows alone are still welcome
    _scores(3, 3200, seed=12).to_csv(d / "new.csv", index=False)
    assert_ok(call("update", d / "m.json", d / "new.csv", "-o", d / "u.json"))


def test_a_part_of_the_fitting_rows_repeated_counts_as_fitting_rows(fit3):
    d, frame = fit3
    part = frame.sample(frac=0.3, random_state=1)
    pd.concat([part, part, part]).to_csv(d / "rep.csv", index=False)
    assert_error(
        call("threshold", d / "rep.csv", "--model", d / "m.json", "-o", d / "t.json"),
        "about 100% of the labelled rows",
    )
    assert_error(
        call("update", d / "m.json", d / "rep.csv", "-o", d / "u.json"), "about 100% of these"
    )
