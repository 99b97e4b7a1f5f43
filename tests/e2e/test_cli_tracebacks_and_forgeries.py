"""Regression tests of issue 37 (hardening, round three): each case ran into a traceback, a forged
file accepted, lost work or raw terminal escapes before the fix. Runs go through the real ``topcal``
console script where the finding was on the command line (errors, partial files, signals, what a
terminal is sent); models made for a test and runs whose output files are checked run the command
in process (``call`` of _cli.py). The timings of issue 37's slow paths
are measured side by side in benchmarks/bench_hostile_scale.py, not here; these tests check the
answers at many classes.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import warnings

import numpy as np
import pandas as pd
import pytest

import topcal
from topcal.errors import ModelFileError
from topcal.persist import canonical_json

from _cli import TOPCAL, assert_error, assert_ok, call, cli, snapshot

pytestmark = pytest.mark.slow  # most tests run the console script (about 1.5 CPU-s a run)


def _probs(names, n=600, seed=0):
    rng = np.random.default_rng(seed)
    p = rng.dirichlet(np.ones(len(names)), n)
    lab = np.array(names, dtype=object)[[rng.choice(len(names), p=r) for r in p]]
    frame = pd.DataFrame({f"p_{c}": p[:, i] for i, c in enumerate(names)})
    frame["label"] = lab
    return frame


def _two_halves(tmp_path, names, stem="d"):
    """stem1.csv (to fit), stem2.csv (held out) and stem.json (hist on stem1, made in process)."""
    frame = _probs(names)
    frame.iloc[:300].to_csv(tmp_path / f"{stem}1.csv", index=False)
    frame.iloc[300:].to_csv(tmp_path / f"{stem}2.csv", index=False)
    model = tmp_path / f"{stem}.json"
    assert_ok(call("fit", tmp_path / f"{stem}1.csv", "--method", "hist", "-o", model))
    return tmp_path / f"{stem}1.csv", tmp_path / f"{stem}2.csv", model


def _resign(path, key, edit, out):
    """Edit the payload under ``key`` of a topcal JSON file, recompute its checksum, write to
    ``out``."""
    doc = json.loads(path.read_text())
    edit(doc[key])
    doc["sha256"] = hashlib.sha256(canonical_json(doc[key]).encode()).hexdigest()
    out.write_text(json.dumps(doc))
    return out


# ======================================================== 1. partial files of other namespaces
def _temps(folder):
    return sorted(p.name for p in folder.iterdir() if "topcal-partial" in p.name)


def test_partial_files_not_provably_ours_and_dead_are_left_alone(tmp_path):
    _, use, model = _two_halves(tmp_path, ["a", "b", "c"])
    dead = 4_000_000  # above Linux's pid_max: no such process here
    foreign = {
        # another PID namespace (container) or host sharing the folder: another owner token, and
        # a pid that is dead here
        f".out.csv.topcal-partial-{dead}-12345-0123456789ab-x1y2z3.tmp": "another container's work",
        ".out.csv.topcal-partial-7-0-fedcba987654-q.tmp": "another host's work",
        # the name an older topcal gave (no owner): not provably ours
        f".out.csv.topcal-partial-{dead}-abcdefgh.tmp": "an older run's work",
    }
    for name, text in foreign.items():
        (tmp_path / name).write_text(text)
    (tmp_path / f".out.csv.topcal-partial-{dead}-0-0123456789ab-d").mkdir()  # a folder, too
    before = snapshot(tmp_path)
    assert_ok(cli("apply", model, use, "-o", tmp_path / "out.csv"))
    after = snapshot(tmp_path)
    assert {k: v for k, v in after.items() if k != "out.csv"} == before
    assert (tmp_path / f".out.csv.topcal-partial-{dead}-0-0123456789ab-d").is_dir()
    # (a dead run of this namespace is still removed: the killed-apply test, test_hostile_data_loss)


def test_long_output_names_get_a_short_temporary_name(tmp_path):
    _, use, model = _two_halves(tmp_path, ["a", "b", "c"])
    name = "r" * 230 + ".csv"  # 234 bytes: within the 255-byte limit, its temporary's name too
    assert_ok(cli("apply", model, use, "-o", tmp_path / name))
    assert (tmp_path / name).is_file() and not _temps(tmp_path)


def _unshare_works() -> bool:
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        return False
    r = subprocess.run(
        ["unshare", "-p", "-f", "--mount-proc", "true"], capture_output=True, timeout=30
    )
    return r.returncode == 0


@pytest.mark.heavy
@pytest.mark.skipif(not _unshare_works(), reason="needs root and unshare -p (a new PID namespace)")
def test_a_run_in_another_pid_namespace_keeps_its_partial_file(tmp_path):
    """The issue's reproducer: `unshare -p -f --mount-proc topcal apply ... -o out.csv` beside a
    run in this namespace writing the same output; the second used to delete the first's
    temporary."""
    _, use, model = _two_halves(tmp_path, ["a", "b", "c"])
    big = pd.concat([pd.read_csv(use)] * 100, ignore_index=True)  # 30,000 rows, streamed in 50s
    big.to_csv(tmp_path / "big.csv", index=False)
    # enough processes first that the namespace's pid of topcal is no process out here
    script = (
        "i=0; while [ $i -lt 300 ]; do /bin/true; i=$((i+1)); done; "
        f'"{TOPCAL}" apply "{model}" "{tmp_path / "big.csv"}" -o "{tmp_path / "out.csv"}" '
        "--chunk-rows 50"
    )
    inner = subprocess.Popen(
        ["unshare", "-p", "-f", "--mount-proc", "sh", "-c", script],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.time() + 120
        while time.time() < deadline and inner.poll() is None and not _temps(tmp_path):
            time.sleep(0.02)
        (temp,) = _temps(tmp_path)
        pid = int(temp.split("topcal-partial-")[1].split("-")[0])
        try:
            os.kill(pid, 0)
            pytest.skip(f"pid {pid} of the other namespace is a live process here too")
        except ProcessLookupError:
            pass
        assert_ok(cli("apply", model, use, "-o", tmp_path / "out.csv"))
        assert temp in _temps(tmp_path), "the other namespace's partial file was deleted"
        out, err = inner.communicate(timeout=300)
    finally:
        if inner.poll() is None:
            inner.kill()
            inner.wait()
    assert inner.returncode == 0, err[-2000:]
    assert len(pd.read_csv(tmp_path / "out.csv")) == 30_000 and not _temps(tmp_path)


# ================================================================ 2. tracebacks
def test_report_acceptance_panel_with_dollar_class_names(tmp_path):
    fit, held, model = _two_halves(tmp_path, ["$\\alpha_{q$", "$x$", "c"])
    th = tmp_path / "th.json"
    assert_ok(call("threshold", held, "--model", model, "--precision", 0.5, "-o", th))
    assert_ok(
        call(
            "report",
            held,
            "--methods",
            "hist",
            "--in-sample",
            "--thresholds",
            th,
            "--model",
            model,
            "-o",
            tmp_path / "rep",
        )
    )
    assert (tmp_path / "rep" / "index.html").is_file()


def test_duplicate_columns_in_parquet_are_one_error_streamed_or_not(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    frame = _probs(["a", "b", "c"])
    arrays = [pa.array(frame[c]) for c in frame.columns] + [pa.array(frame["label"].astype(str))]
    table = pa.Table.from_arrays(arrays, names=[*frame.columns, "label"])
    pq.write_table(table, tmp_path / "dup.parquet")
    for extra in ((), ("--chunk-rows", 100)):
        assert_error(
            cli("fit", tmp_path / "dup.parquet", *extra, "-o", tmp_path / "m.json"),
            "has the column 'label' twice",
        )
    with pytest.raises(topcal.errors.DataError, match="'label' twice"):  # a DataFrame of the caller
        topcal.calibrator("hist").fit(pq.ParquetFile(tmp_path / "dup.parquet").read().to_pandas())
    assert not (tmp_path / "m.json").exists()


def test_forged_support_is_refused_at_load(tmp_path):
    rng = np.random.default_rng(1)
    n = 400
    pred = rng.choice(["a", "b"], n)
    score = np.where(pred == "b", 0.7, rng.uniform(0.3, 1, n))  # class b: one score value
    label = np.where(rng.uniform(size=n) < score, pred, np.where(pred == "a", "b", "a"))
    data = topcal.TopLabelData.from_scores(pred, score, label)
    for method in ("hist", "kde-mon2", "cum-opt", "hier-beta"):
        model = tmp_path / f"{method}.json"
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            topcal.calibrator(method).fit(data).save(model)
        assert topcal.load(model).describe()["classes"]["b"]  # one support value, as fitted: fine
        for i, support in enumerate([[0.7], [0.9, 0.1], ["a", "b"], [0.1, 0.5, 0.9], 3, [None, 1]]):

            def edit(m, support=support):
                m["state"]["support"][1] = support

            bad = _resign(model, "model", edit, tmp_path / f"bad-{method}-{i}.json")
            with pytest.raises(ModelFileError, match="support"):
                topcal.load(bad)
    assert_error(cli("describe", tmp_path / "bad-hist-0.json"), "malformed", "support")


def test_ctrl_c_while_the_command_is_still_importing(tmp_path, signals_as_from_a_terminal):
    fit, _, _ = _two_halves(tmp_path, ["a", "b", "c"])
    for _ in range(3):
        proc = subprocess.Popen(
            [str(TOPCAL), "fit", str(fit), "-o", str(tmp_path / "m2.json")],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        deadline = time.time() + 60
        while time.time() < deadline:  # numpy is loaded: topcal's imports are under way
            try:
                with open(f"/proc/{proc.pid}/maps") as fh:
                    if "_multiarray_umath" in fh.read():
                        break
            except OSError:
                break
            time.sleep(0.002)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 130 and "Traceback" not in err, err[-2000:]
        assert err.strip().splitlines()[-1] == "error: interrupted"
    assert not (tmp_path / "m2.json").exists()


def test_importing_topcal_sets_no_signal_handler(signals_as_from_a_terminal):
    code = (
        "import signal, topcal; "
        "print(signal.getsignal(signal.SIGINT) is signal.default_int_handler)"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.stdout.strip() == "True", r.stderr[-2000:]


# ================================================================ 3. forged thresholds files
FORGED_CUTOFFS = [-1e308, "-inf", 2.0, True, "nan", "0.5", [0.5], -0.01]


@pytest.fixture
def thresholds(tmp_path):
    fit, held, model = _two_halves(tmp_path, ["a", "b", "c"])
    th = tmp_path / "th.json"
    assert_ok(call("threshold", held, "--model", model, "--precision", 0.5, "-o", th))
    return held, model, tmp_path / "th.json"


def test_forged_thresholds_are_refused(thresholds, tmp_path):
    held, model, th = thresholds
    assert_ok(call("apply", model, held, "--thresholds", th, "-o", tmp_path / "ok.csv"))
    edits = {
        f"cutoff {v!r}": (lambda t, v=v: t["per_class"][0].__setitem__("cutoff", v))
        for v in FORGED_CUTOFFS
    }
    edits.update(
        {
            "overall cutoff -inf": lambda t: t["overall"].__setitem__("cutoff", "-inf"),
            "renamed class": lambda t: t["per_class"][0].__setitem__("name", "zzz"),
            "reordered classes": lambda t: t.__setitem__("per_class", t["per_class"][::-1]),
            "classes not names": lambda t: t.__setitem__("classes", [1, 2, 3]),
            "precision as text": lambda t: t.__setitem__("precision", "0.5"),
            "counts out of order": lambda t: t["per_class"][1].__setitem__("n_accepted", 1e9),
            "level 0": lambda t: t["per_class"][1].__setitem__("level", 0),
            "huge integer": lambda t: t.__setitem__("n_samples", 10**400),
            "missing field": lambda t: t["per_class"][2].pop("n_correct"),
            "entry not an object": lambda t: t["per_class"].__setitem__(2, 0.5),
            "digest not hex": lambda t: t["model"].__setitem__("sha256", "x" * 64),
            # issue 33: what a cut-off is on
            "on bogus": lambda t: t["overall"].__setitem__("on", "bogus"),
            "on a number": lambda t: t["overall"].__setitem__("on", 1),
            "on score with a tie score": lambda t: t["per_class"][0].update(
                on="score", score_cutoff=0.5
            ),
            "on score, a string": lambda t: t["overall"].update(on="score", cutoff="-inf"),
        }
    )
    for i, (what, edit) in enumerate(edits.items()):
        bad = _resign(th, "thresholds", edit, tmp_path / f"bad{i}.json")
        with pytest.raises(ModelFileError, match="malformed"):
            topcal.load_thresholds(bad)
        if i < 3:  # through the command line: one error line, nothing written
            r = cli("apply", model, held, "--thresholds", bad, "-o", tmp_path / "out.csv")
            assert_error(r, "malformed", "cutoff")
    assert not (tmp_path / "out.csv").exists()
    # -Infinity / NaN as JSON constants (not strings): not valid topcal JSON
    text = re.sub(r'"cutoff": [0-9.e-]+', '"cutoff": -Infinity', th.read_text(), count=1)
    (tmp_path / "const.json").write_text(text)
    with pytest.raises(ModelFileError, match="not valid JSON"):
        topcal.load_thresholds(tmp_path / "const.json")


# ======================================================== 4. formula injection in CSV output
def test_apply_csv_neutralises_formulas_and_keeps_numbers(tmp_path):
    names = ['=HYPERLINK("http://x","y")', "+cmd", "-1", "@SUM(A1)", "\tx", "ok"]
    frame = _probs(names)
    frame["=note"] = ["-2+3", "-2.5"] * 300
    frame.to_csv(tmp_path / "inj.csv", index=False)
    assert_ok(call("fit", tmp_path / "inj.csv", "--method", "hist", "-o", tmp_path / "m.json"))
    for extra in ((), ("--chunk-rows", 100)):
        assert_ok(
            call(
                "apply",
                tmp_path / "m.json",
                tmp_path / "inj.csv",
                *extra,
                "-o",
                tmp_path / "out.csv",
            )
        )
        out = pd.read_csv(tmp_path / "out.csv", dtype=str, keep_default_na=False)
        # only a cell's first character counts: p_+cmd is no formula; a sign without a function
        # call, DDE command or reference ("+cmd", "-2+3") is the user's text, left as it is
        assert "'=note" in out.columns and "p_+cmd" in out.columns
        risky = [
            v
            for c in ("pred", "label", "'=note")
            for v in out[c]
            if v[:1] in ("=", "@", "\t", "\r") or (v[:1] in "+-" and set(v) & set("(|!"))
        ]
        assert not risky, risky[:5]
        assert set(out["pred"]) <= {"'" + n if n[0] in "=@\t" else n for n in names}
        assert {"-1", "-2.5", "-2+3", "+cmd"} <= set(out["label"]) | set(out["'=note"])
    # compare --csv: class names neutralised there too
    r = assert_ok(call("compare", tmp_path / "inj.csv", "--methods", "hist", "--csv"))
    cells = [line.split(",")[2] for line in r.stdout.splitlines()[1:]]
    assert "'@SUM(A1)" in cells and "@SUM(A1)" not in cells and "-1" in cells and "+cmd" in cells


# ======================================================== 5. terminal escapes in class names
ANSI = ["\x1b]0;pwned\x07a", "b\x1b[2J", "c\u202eevil", "d\x9b31m"]


def test_class_names_with_control_characters_are_printed_escaped(tmp_path):
    fit, held, model = _two_halves(tmp_path, ANSI)
    raw = ("\x1b", "\x07", "\x9b", "\u202e", "\r")
    runs = {
        "describe": cli("describe", model),
        "metrics": cli("metrics", held, "--model", model, "--full"),
        "threshold": cli(
            "threshold", held, "--model", model, "--precision", 0.4, "-o", tmp_path / "t.json"
        ),
        "compare": cli("compare", held, "--methods", "hist"),
        "compare --csv": cli("compare", held, "--methods", "hist", "--csv"),
        "adapt": cli("adapt", model, held, "--bootstrap", 0, "-o", tmp_path / "a.json"),
    }
    for what, r in runs.items():
        assert_ok(r)
        text = r.stdout + r.stderr
        assert not [c for c in raw if c in text], (what, text[:500])
    assert "\\x1b]0;pwned\\x07a" in runs["describe"].stdout
    assert "b\\x1b[2J" in runs["metrics"].stdout
    assert "c\\u202eevil" in runs["threshold"].stdout
    # an error naming such a class is one escaped line too
    bad = held.read_text().replace("d\x9b31m", "zz\x1b[5m")
    (tmp_path / "bad.csv").write_text(bad)
    err = assert_error(cli("apply", model, tmp_path / "bad.csv", "-o", tmp_path / "x.csv"))
    assert "\x1b" not in err


# ======================================================== 6. slow paths (timings: benchmarks/)
def test_report_of_10000_character_class_names_takes_seconds(tmp_path):
    from topcal.plots.primitives import MAX_DRAWN, plain

    _probs([c * 10_000 for c in "abc"]).to_csv(tmp_path / "long.csv", index=False)
    # 90 s before (matplotlib laid out every character of every tick label and title)
    r = cli(
        "report", tmp_path / "long.csv", "--methods", "hist", "-o", tmp_path / "rep", timeout=60
    )
    assert_ok(r)
    assert "a" * 10_000 in (tmp_path / "rep" / "index.html").read_text()  # the page keeps the names
    short = plain("$" + "a" * 10_000 + "z")
    assert len(short.replace("\\$", "$")) == MAX_DRAWN
    assert short.startswith("\\$a") and short.endswith("az")


def _many_classes(k=300, n=6000, seed=0):
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, k, n)
    z = rng.normal(0.0, 2.0, size=(n, k))
    z[np.arange(n), labels] += 3.0
    p = np.exp(z - z.max(axis=1, keepdims=True))
    return p / p.sum(axis=1, keepdims=True), labels


@pytest.mark.parametrize("method", ["hist", "kde-mon2", "cum-opt", "hier-beta"])
def test_describe_interval_widths_at_many_classes_equal_the_per_class_ones(method):
    p, y = _many_classes()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = topcal.calibrator(method).fit(p, y)
    shown = model.describe()["classes"]
    for k, c in enumerate(model.classes_):
        sup = model.support_[k]
        if sup is None:
            assert "interval_width_90" not in shown[c]
            continue
        s = np.linspace(sup[0], sup[1], 21)
        classes, lo_hi = tuple(model.classes_), tuple(model.score_range_)
        grid = topcal.TopLabelData(classes, np.full(21, k), s, lo_hi)
        lo, hi = model.predict_interval(grid, level=0.9)
        width = pytest.approx(np.mean(hi - lo), rel=1e-12, abs=1e-15)
        assert shown[c]["interval_width_90"] == width


def test_em_priors_at_many_classes_equal_the_dense_posteriors():
    from topcal.labelshift.estimates import estimate_priors, source_posteriors
    from topcal.labelshift.estimators import PRIOR_STRENGTH, em_priors

    p, y = _many_classes()
    use, _ = _many_classes(n=3000, seed=1)
    model = topcal.calibrator("hist").fit(p, y)
    use = topcal.TopLabelData.from_probs(use, classes=model.classes_)
    fast = estimate_priors(model, use, n_bootstrap=0, shrink=1.0).priors
    dense = em_priors(
        source_posteriors(model, use),
        model.evidence_.confusion.source_priors(),
        prior_strength=PRIOR_STRENGTH["em"],
    )
    np.testing.assert_allclose(fast, dense, rtol=0, atol=1e-8)  # EM's own tolerance


# ======================================================== 8. memory at many classes
def test_label_shift_counts_of_classes_without_rows_take_no_memory():
    import tracemalloc

    from topcal.evidence.confusion import ConfusionStats

    rng = np.random.default_rng(0)
    n, k = 200, 3000  # most classes never predicted: their K counts each were 9 x the input
    p = rng.dirichlet(np.full(k, 0.05), n)
    y = rng.integers(0, k, n)
    data = topcal.TopLabelData.from_probs(p, y)
    tracemalloc.start()
    stats = ConfusionStats.from_data(data)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 1.5 * p.nbytes, peak / p.nbytes
    dense = np.zeros((k, k))  # the counts as they were: every row of the data in its cell
    np.add.at(dense, (data.pred, data.labels), 1.0)
    np.testing.assert_array_equal(stats.confusion(), dense)
    np.testing.assert_array_equal(stats.source_priors(), dense.sum(axis=0) / n)
    back = ConfusionStats.from_dict(json.loads(json.dumps(stats.to_dict())), data.classes)
    np.testing.assert_array_equal(back.confusion(), dense)
    merged = stats.merge(stats)
    np.testing.assert_array_equal(merged.confusion(), 2 * dense)


# ======================================================== beyond the list: Python entry points
@pytest.mark.parametrize("bad", [np.zeros((3, 3)), 5, None, pd.DataFrame({"p_a": [1.0]})])
def test_readers_given_no_path_raise_one_data_error(bad):
    with pytest.raises(topcal.errors.DataError, match="read from its path"):
        topcal.read_data(bad)
    with pytest.raises(topcal.errors.DataError, match="read from its path"):
        topcal.read_stats(bad)


# ======================================================== 7. the scikit-learn wrapper
def test_sklearn_wrapper_says_which_class_it_calibrates_also_frozen_or_cross_fitted():
    """Fixed in an earlier round (a prefit SVC, test_hostile_wrong_answers); the other two ways."""
    from sklearn.datasets import make_classification
    from sklearn.frozen import FrozenEstimator
    from sklearn.svm import SVC

    X, y = make_classification(1200, n_features=8, n_informative=5, n_classes=4, random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # scikit-learn 1.9: probability=True
        svc = SVC(probability=True, random_state=0).fit(X[:600], y[:600])
    for est, cv in ((FrozenEstimator(svc), None), (SVC(probability=True, random_state=0), 3)):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)
            with pytest.warns(topcal.errors.TopcalWarning, match="calibrate the argmax class"):
                cal = topcal.TopLabelCalibratedClassifier(est, method="hist", cv=cv)
                cal.fit(X[600:], y[600:])
        assert 0 < cal.argmax_disagreement_ < 0.2


def test_csv_neutralising_leaves_columns_without_text_alone(tmp_path):
    from topcal.io import write_frames

    frame = pd.DataFrame(
        {
            "n": pd.Series([1, 2], dtype=object),
            "b": pd.Series([True, None], dtype=object),
            "s": pd.Series(["=a", "-3"], dtype="string"),
        }
    )
    write_frames([frame], tmp_path / "x.csv")
    back = pd.read_csv(tmp_path / "x.csv", dtype=str, keep_default_na=False)
    assert back.to_dict("list") == {"n": ["1", "2"], "b": ["True", ""], "s": ["'=a", "-3"]}


def test_a_none_parameter_error_says_how_to_write_none_on_the_command_line(tmp_path):
    fit, _, _ = _two_halves(tmp_path, ["a", "b", "c"])
    assert_error(call("fit", fit, "--param", "screen=None", "-o", tmp_path / "m.json"), "null")
    assert_ok(call("fit", fit, "--param", "screen=null", "-o", tmp_path / "m.json"))
    assert topcal.load(tmp_path / "m.json").get_params()["screen"] is None
