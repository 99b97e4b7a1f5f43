"""Regression tests of issue 10 (hardening): every reproducer of the issue.

Each test states the defect it guards. A run must end with the right answer, or exit 2 with one
``error:`` line and no traceback, and must leave every pre-existing file as it was. The errors,
the writes that must leave files as they were and the killed runs go through the real ``topcal``
console script; runs that make a test's model or whose answer (numbers, pages, warnings) is
checked run the command in process (``call`` of _cli.py).
"""

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import topcal
from topcal import TopLabelData

from _cli import TOPCAL, assert_error, assert_ok, call, cli, snapshot

pytestmark = pytest.mark.e2e


def metrics_json(path, *extra, cwd=None):
    return json.loads(assert_ok(call("metrics", path, "--json", *extra, cwd=cwd)).stdout)


@pytest.fixture
def top_csv(tmp_path):
    """Top-score data on (0, 1): three classes, labels as names."""
    rng = np.random.default_rng(0)
    n = 300
    pred = rng.choice(["coat", "shirt", "dress"], n)
    score = rng.uniform(0.3, 1.0, n)
    right = rng.uniform(size=n) < score
    label = np.where(right, pred, np.where(pred == "coat", "shirt", "coat"))
    path = tmp_path / "top.csv"
    pd.DataFrame({"pred": pred, "score": score, "label": label}).to_csv(path, index=False)
    return path


# ------------------------------------------------------------ 1. class names, not positions
def test_numeric_class_names_are_names_not_column_positions(tmp_path):
    (tmp_path / "n.csv").write_text("p_1,p_0,label\n0.9,0.1,1\n0.2,0.8,0\n0.7,0.3,1\n")
    s = metrics_json(tmp_path / "n.csv")
    assert s["counts"]["tp"] == 3 and s["counts"]["fp"] == 0  # was: accuracy 0

    # columns sorted as strings (p_0, p_1, p_10, p_11, p_2, ...) and a perfect classifier: accuracy
    # 1
    k, n = 12, 240
    names = sorted(str(i) for i in range(k))
    lab = np.arange(n) % k
    probs = np.full((n, k), 0.01)
    for i, c in enumerate(names):
        probs[lab == int(c), i] = 1 - 0.01 * (k - 1)
    frame = pd.DataFrame(probs, columns=[f"p_{c}" for c in names])
    frame["label"] = lab
    frame.to_csv(tmp_path / "sorted.csv", index=False)
    s = metrics_json(tmp_path / "sorted.csv")
    assert s["counts"]["tp"] == n and s["counts"]["fp"] == 0

    # labels 1..K with columns p_1..p_K are accepted
    (tmp_path / "one.csv").write_text(
        "p_1,p_2,p_3,label\n0.8,0.1,0.1,1\n0.1,0.8,0.1,2\n0.1,0.1,0.8,3\n0.5,0.3,0.2,2\n"
    )
    s = metrics_json(tmp_path / "one.csv")
    assert (
        list(s["classes"]) == ["1", "2", "3"]
        and s["counts"]["tp"] == 3
        and s["counts"]["fp"] == 1
    )

    # pred a/b with labels 1/2 is refused, not read as extra classes
    (tmp_path / "ab.csv").write_text("pred,score,label\na,0.9,1\nb,0.8,2\na,0.7,1\n")
    assert_error(cli("metrics", tmp_path / "ab.csv"), "no label", "same class names")

    # named columns and integer labels: refused, and the message says labels are names
    (tmp_path / "named.csv").write_text("p_cat,p_dog,label\n0.9,0.1,0\n0.2,0.8,1\n")
    assert_error(cli("metrics", tmp_path / "named.csv"), "'0'", "matched to the class names")


def test_npz_without_classes_reads_labels_as_indices_and_with_classes_as_names(tmp_path):
    probs = np.array([[0.9, 0.1], [0.2, 0.8], [0.6, 0.4]])
    np.savez(tmp_path / "idx.npz", probs=probs, labels=np.array([0, 1, 1]))
    s = metrics_json(tmp_path / "idx.npz")
    assert list(s["classes"]) == ["0", "1"] and s["counts"]["tp"] == 2
    np.savez(
        tmp_path / "named.npz",
        probs=probs,
        labels=np.array(["y", "x", "x"]),
        classes=np.array(["y", "x"]),
    )
    s = metrics_json(tmp_path / "named.npz")
    assert s["counts"]["tp"] == 2
    # integer labels beside non-numeric names (scikit-learn's y and classes_) index the classes
    np.savez(
        tmp_path / "sk.npz", probs=probs, labels=np.array([0, 1, 1]), classes=np.array(["y", "x"])
    )
    assert metrics_json(tmp_path / "sk.npz")["counts"]["tp"] == 2
    # beside numeric names they are names: label 1 is class "1", whatever its position
    np.savez(
        tmp_path / "num.npz", probs=probs, labels=np.array([1, 0, 0]), classes=np.array(["1", "0"])
    )
    assert metrics_json(tmp_path / "num.npz")["counts"]["tp"] == 2


def test_integer_pred_codes_add_no_unused_class(tmp_path):
    (tmp_path / "i.csv").write_text("pred,score,label\n1,0.9,1\n2,0.8,2\n2,0.6,1\n")
    s = metrics_json(tmp_path / "i.csv")
    assert list(s["classes"]) == ["1", "2"]  # was: "0", "1", "2"


# ------------------------------------------------------------ 2. apply to a subset of classes
def test_apply_accepts_a_batch_naming_some_classes_and_names_an_unknown_one(top_csv, tmp_path):
    model = tmp_path / "m.json"
    assert_ok(call("fit", top_csv, "--method", "hist", "-o", model))
    pd.DataFrame({"pred": ["coat", "shirt", "coat"], "score": [0.4, 0.9, 0.95]}).to_csv(
        tmp_path / "b.csv", index=False
    )
    assert_ok(call("apply", model, tmp_path / "b.csv", "-o", tmp_path / "out.csv"))
    out = pd.read_csv(tmp_path / "out.csv")
    cal = topcal.load(model)
    ref = cal.predict(
        TopLabelData.from_scores(["coat", "shirt", "coat"], [0.4, 0.9, 0.95], classes=cal.classes_)
    )
    np.testing.assert_allclose(out["confidence"], ref)
    assert list(out["pred"]) == ["coat", "shirt", "coat"]
    pd.DataFrame({"pred": ["coat", "jacket"], "score": [0.4, 0.5]}).to_csv(
        tmp_path / "u.csv", index=False
    )
    assert_error(
        cli("apply", model, tmp_path / "u.csv", "-o", tmp_path / "u_out.csv"),
        "'jacket'",
        "not one of the classes",
    )
    assert not (tmp_path / "u_out.csv").exists()

    # the Python API: data built without classes=
    conf = cal.predict(TopLabelData.from_scores(["shirt"], [0.9]))
    np.testing.assert_allclose(conf, ref[1:2])


def test_apply_takes_the_score_range_from_the_model(tmp_path):
    rng = np.random.default_rng(1)
    n = 200
    score = rng.uniform(2, 10, n)
    pred = rng.choice(["HTJ", "tail"], n)
    label = np.where(rng.uniform(size=n) < score / 10, pred, np.where(pred == "HTJ", "tail", "HTJ"))
    pd.DataFrame({"pred": pred, "score": score, "label": label}).to_csv(
        tmp_path / "ph.csv", index=False
    )
    assert_ok(
        call(
            "fit",
            tmp_path / "ph.csv",
            "--method",
            "hist",
            "--score-range",
            0,
            10,
            "-o",
            tmp_path / "m.json",
        )
    )
    pd.DataFrame({"pred": ["HTJ"], "score": [7.5]}).to_csv(tmp_path / "new.csv", index=False)
    assert_ok(call("apply", tmp_path / "m.json", tmp_path / "new.csv", "-o", tmp_path / "o.csv"))
    assert 0 <= pd.read_csv(tmp_path / "o.csv")["confidence"][0] <= 1
    # a different declared range is an error, shown as plain numbers (not np.float64(...))
    err = assert_error(
        cli(
            "apply",
            tmp_path / "m.json",
            tmp_path / "new.csv",
            "--score-range",
            0,
            5,
            "-o",
            tmp_path / "o2.csv",
        ),
        "7.5",
        "outside",
    )
    assert "np.float64" not in err


# ------------------------------------------------------------ 3. binned data: declared range
def test_binned_data_uses_the_declared_score_range(tmp_path):
    pd.DataFrame(
        {
            "predicted_class": ["a", "a", "b"],
            "bin_lo": [0.5, 0.75, 0.5],
            "bin_hi": [0.75, 1.0, 1.0],
            "tp": [3, 5, 4],
            "fp": [2, 1, 2],
        }
    ).to_csv(tmp_path / "bins.csv", index=False)
    assert_ok(call("fit", tmp_path / "bins.csv", "--method", "hist", "-o", tmp_path / "m.json"))
    assert topcal.load(tmp_path / "m.json").score_range_ == (0.0, 1.0)  # was (0.5, 1.0)
    # the uncalibrated baseline is the score itself on (0, 1): class a's bin midpoints 0.625 and
    # 0.875
    # (with the range (0.5, 1.0) taken from the bins it was 0.25 and 0.75)
    s = metrics_json(tmp_path / "bins.csv")
    nll_a = -(3 * np.log(0.625) + 2 * np.log(0.375) + 5 * np.log(0.875) + 1 * np.log(0.125)) / 11
    assert s["classes"]["a"]["nll"] == pytest.approx(nll_a)
    pd.DataFrame({"pred": ["a", "b"], "score": [0.2, 0.9]}).to_csv(tmp_path / "s.csv", index=False)
    assert_ok(call("apply", tmp_path / "m.json", tmp_path / "s.csv", "-o", tmp_path / "o.csv"))
    # PhANNs-style bins on 0-10 need the range declared
    phanns = Path(topcal.__file__).parent / "_data" / "phanns_test_binned.csv"
    assert_error(cli("metrics", phanns), "outside the declared score range", "--score-range")


# ------------------------------------------------------------ 4. no writer overwrites its input
def test_writers_refuse_to_overwrite_their_input(top_csv, tmp_path):
    before = snapshot(tmp_path)
    assert_error(cli("fit", top_csv, "--method", "hist", "-o", top_csv), "is the input file")
    os.link(top_csv, tmp_path / "hard.csv")
    before = snapshot(tmp_path)
    assert_error(
        cli("fit", top_csv, "--method", "hist", "-o", tmp_path / "hard.csv"), "is the input file"
    )
    assert_ok(cli("fit", top_csv, "--method", "hist", "-o", tmp_path / "m.json"))
    after_fit = snapshot(tmp_path)
    assert {k: v for k, v in after_fit.items() if k != "m.json"} == before
    assert_error(
        cli("apply", tmp_path / "m.json", top_csv, "-o", tmp_path / "hard.csv"), "is the input file"
    )
    assert_error(
        cli("apply", tmp_path / "m.json", top_csv, "-o", tmp_path / "m.json"), "is the input file"
    )
    assert_error(cli("report", top_csv, "--methods", "hist", "-o", top_csv), "report folder")
    assert snapshot(tmp_path) == after_fit


# ------------------------------------------------------------ 5. report folder ownership
def test_report_writes_only_into_a_new_empty_or_topcal_made_folder(top_csv, tmp_path):
    out = tmp_path / "rep"
    (out / "figures").mkdir(parents=True)
    (out / "figures" / "01-mine.png").write_bytes(b"not topcal's")
    (out / "index.html").write_text("<p>my page</p>")
    before = snapshot(tmp_path)
    assert_error(
        cli("report", top_csv, "--methods", "hist", "--in-sample", "-o", out),
        "did not write",
        "--force",
    )
    assert snapshot(tmp_path) == before

    # --force writes topcal's files and keeps the others
    assert_ok(cli("report", top_csv, "--methods", "hist", "--in-sample", "--force", "-o", out))
    assert (out / "figures" / "01-mine.png").read_bytes() == b"not topcal's"
    assert "my page" not in (out / "index.html").read_text()

    # a topcal-made folder is replaced as a whole, and no staging folder is left beside it
    fresh = tmp_path / "fresh"
    assert_ok(cli("report", top_csv, "--methods", "hist", "--in-sample", "-o", fresh))
    first = {p for p in snapshot(fresh)}
    assert "index.html" in first and ".topcal-report" in first
    assert_ok(cli("report", top_csv, "--methods", "hist,cum", "--in-sample", "-o", fresh))
    assert "index.html" in snapshot(fresh)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fresh", "rep", "top.csv"]


# ------------------------------------------------------------ 6. atomic writes
@pytest.mark.heavy
def test_failed_writes_leave_old_outputs_unchanged_and_no_temporary_files(top_csv, tmp_path):
    assert_ok(call("fit", top_csv, "--method", "hist", "-o", tmp_path / "m.json"))
    (tmp_path / "out.csv").write_text("old output\n")
    before = snapshot(tmp_path)
    # apply whose write fails part-way (file size limit): the old output stays whole
    big = pd.DataFrame({"pred": ["coat"] * 5000, "score": np.linspace(0.3, 1, 5000)})
    big.to_csv(tmp_path / "big.csv", index=False)
    before = snapshot(tmp_path)
    r = cli(
        "apply", tmp_path / "m.json", tmp_path / "big.csv", "-o", tmp_path / "out.csv", fsize=20_000
    )
    assert_error(r, "cannot write", "out.csv")
    assert snapshot(tmp_path) == before
    # fit whose model file cannot be written: no model.json.tmp or other leftovers
    r = cli("fit", top_csv, "--method", "hist", "-o", tmp_path / "m.json", fsize=200)
    assert_error(r, "cannot write")
    assert snapshot(tmp_path) == before
    # report whose figures cannot be written: the old report is untouched, no staging folder left
    rep = tmp_path / "rep"
    assert_ok(call("report", top_csv, "--methods", "hist", "--in-sample", "-o", rep))
    before = snapshot(tmp_path)
    r = cli("report", top_csv, "--methods", "hist,cum", "--in-sample", "-o", rep, fsize=5_000)
    assert_error(r, "cannot write")
    assert snapshot(tmp_path) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "big.csv",
        "m.json",
        "out.csv",
        "rep",
        "top.csv",
    ]


def test_a_killed_report_leaves_the_old_one_whole(top_csv, tmp_path, signals_as_from_a_terminal):
    rep = tmp_path / "rep"
    assert_ok(call("report", top_csv, "--methods", "hist", "--in-sample", "-o", rep))
    before = snapshot(tmp_path)
    proc = subprocess.Popen(
        [str(TOPCAL), "report", str(top_csv), "--in-sample", "-o", str(rep)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.time() + 60
    while time.time() < deadline and not any(
        "topcal-partial" in p.name for p in tmp_path.iterdir()
    ):
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert "Traceback" not in err
    assert snapshot(tmp_path) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rep", "top.csv"]


# ------------------------------------------------------------ 7. tracebacks that are now errors
def test_model_file_defects_are_one_line_errors(top_csv, tmp_path):
    from topcal.persist import FORMAT_VERSION, canonical_json

    assert_ok(call("fit", top_csv, "--method", "hist", "-o", tmp_path / "m.json"))
    text = (tmp_path / "m.json").read_text()
    doc = json.loads(text)
    bad = {
        "inf.json": text.replace('"sha256"', '"x": 1e999, "sha256"'),
        "deep.json": text.replace('"sha256"', '"x": ' + "[" * 1000 + "]" * 1000 + ', "sha256"'),
        "version.json": text.replace(
            f'"format_version": {FORMAT_VERSION}', '"format_version": true'
        ),
    }
    signed = json.loads(text)
    signed["model"]["state"] = "[" * 2000
    import hashlib

    signed["sha256"] = hashlib.sha256(canonical_json(signed["model"]).encode()).hexdigest()
    bad["state.json"] = json.dumps(signed)
    for name, body in bad.items():
        (tmp_path / name).write_text(body)
        assert_error(cli("describe", tmp_path / name), "model")
    assert doc["format_version"] == FORMAT_VERSION


def test_argument_and_data_defects_are_one_line_errors(top_csv, tmp_path):
    d = top_csv
    assert_error(
        cli("compare", d, "--seed", -1, "--folds", 2, "--methods", "hist"), "--seed", ">= 0"
    )
    assert_error(
        cli("fit", d, "--method", "kde", "--param", "bandwidth=1e-300", "-o", tmp_path / "m.json"),
        "bandwidth",
        "score range",
    )
    assert_error(
        cli("fit", d, "--method", "hist", "--score-range", 0, 1e-300, "-o", tmp_path / "m.json"),
        "too narrow",
    )
    assert_error(
        cli(
            "fit",
            d,
            "--method",
            "hist",
            "--param",
            "n_bins=1000000000000",
            "-o",
            tmp_path / "m.json",
        ),
        "n_bins",
        "100000",
    )
    assert_error(cli("metrics", d, "--bins", 1000000000), "--bins")
    pd.DataFrame({"pred": ["a", "b"], "score": [0.9, 0.8], "label": [["a"], ["b"]]}).to_parquet(
        tmp_path / "l.parquet"
    )
    assert_error(cli("metrics", tmp_path / "l.parquet"), "row 1", "one class name")
    pd.DataFrame(
        {
            "predicted_class": ["a", "b"],
            "bin_lo": [0.0, 0.0],
            "bin_hi": [1.0, 1.0],
            "tp": [1e300, 3],
            "fp": [1, 2],
        }
    ).to_csv(tmp_path / "huge.csv", index=False)
    assert_error(
        cli("compare", tmp_path / "huge.csv", "--folds", 3, "--methods", "hist"), "more than 2^53"
    )
    assert not (tmp_path / "m.json").exists()


def test_parquet_output_of_a_mixed_type_column(tmp_path):
    # a CSV column whose first 262,144 rows are numbers and the rest text: pandas used to read it in
    # chunks
    # of different types, and pyarrow refused to write that column (ArrowInvalid traceback)
    n = 262_200
    note = np.arange(n).astype(str)
    note[-5:] = "x"
    pd.DataFrame(
        {"pred": "a", "score": 0.5, "label": np.where(np.arange(n) % 2, "a", "b"), "note": note}
    ).to_csv(tmp_path / "mixed.csv", index=False)
    assert_ok(call("fit", tmp_path / "mixed.csv", "--method", "hist", "-o", tmp_path / "m.json"))
    assert_ok(
        call("apply", tmp_path / "m.json", tmp_path / "mixed.csv", "-o", tmp_path / "o.parquet")
    )
    assert pd.read_parquet(tmp_path / "o.parquet")["note"].iloc[-1] == "x"


def test_parquet_writer_failure_is_an_error_and_leaves_no_file(tmp_path):
    from topcal.errors import TopcalError
    from topcal.io import FrameWriter

    (tmp_path / "o.parquet").write_bytes(b"old")
    with pytest.raises(TopcalError, match="cannot write rows 0.*one type"):
        with FrameWriter(tmp_path / "o.parquet") as w:
            w.write(pd.DataFrame({"x": [1, "a"]}))
    assert [p.name for p in tmp_path.iterdir()] == ["o.parquet"]
    assert (tmp_path / "o.parquet").read_bytes() == b"old"


def test_report_on_many_classes_degrades_to_the_largest_classes(tmp_path):
    rng = np.random.default_rng(2)
    k, n = 400, 4000
    names = np.array([f"c{i:03d}" for i in range(k)])
    pred = names[np.minimum(rng.geometric(0.02, n) - 1, k - 1)]
    score = rng.uniform(0.2, 1, n)
    label = np.where(rng.uniform(size=n) < score, pred, names[rng.integers(0, k, n)])
    pd.DataFrame({"pred": pred, "score": score, "label": label}).to_csv(
        tmp_path / "many.csv", index=False
    )
    r = assert_ok(
        call(
            "report",
            tmp_path / "many.csv",
            "--methods",
            "hist",
            "--in-sample",
            "-o",
            tmp_path / "rep",
        )
    )
    page = (tmp_path / "rep" / "index.html").read_text()
    assert "largest" in page  # the figures say which classes they show
    for line in r.stderr.splitlines():
        assert len(line) < 1000  # warnings about never-predicted classes are summarised


# ------------------------------------------------------------ 8. accepted silently before
def test_silently_accepted_inputs_are_refused(tmp_path):
    pd.DataFrame(
        {
            "predicted_class": ["a", "a"],
            "bin_lo": [0.0, 0.4],
            "bin_hi": [0.5, 1.0],
            "tp": [1, 2],
            "fp": [1, 1],
        }
    ).to_csv(tmp_path / "ovl.csv", index=False)
    assert_error(cli("metrics", tmp_path / "ovl.csv"), "overlap")
    np.savez(
        tmp_path / "c.npz", probs=np.array([[0.9, 0.1], [0.2, 0.8]]) + 0.5j, labels=np.array([0, 1])
    )
    assert_error(cli("metrics", tmp_path / "c.npz"), "complex")
    (tmp_path / "e.csv").write_text("p_,p_a,label\n0.9,0.1,a\n0.2,0.8,a\n")
    assert_error(cli("metrics", tmp_path / "e.csv"), "empty")


# ------------------------------------------------------------ 9. messages
def test_messages(tmp_path):
    r = cli()
    assert_error(r, "no command")
    rng = np.random.default_rng(4)
    n = 300
    probs = rng.dirichlet([1, 1, 1], n)
    frame = pd.DataFrame({f"p_{c}": probs[:, i] for i, c in enumerate("abc")})
    frame["label"] = np.array(list("abc"))[probs.argmax(1)]
    frame.to_csv(tmp_path / "d.csv", index=False)
    # 150 folds on 300 rows: every fold gets rows now
    assert_ok(call("compare", tmp_path / "d.csv", "--folds", 150, "--methods", "hist", "--json"))
    assert_error(
        cli("compare", tmp_path / "d.csv", "--folds", 301, "--methods", "hist"),
        "301 folds exceed",
        "300",
    )
    # a warning about thousands of never-predicted classes is one short line
    k = 3000
    probs = np.full((4, k), 0.1 / (k - 1))
    probs[:, 0] = 0.9
    frame = pd.DataFrame(probs, columns=[f"p_{i}" for i in range(k)])
    frame["label"] = [0, 0, 1, 0]
    frame.to_csv(tmp_path / "wide.csv", index=False)
    r = assert_ok(call("fit", tmp_path / "wide.csv", "--method", "hist", "-o", tmp_path / "m.json"))
    warn = [ln for ln in r.stderr.splitlines() if "never predicted" in ln]
    assert len(warn) == 1 and len(warn[0]) < 300 and "2999" in warn[0]


@pytest.mark.heavy
def test_console_script_answers_as_main(tmp_path):
    """The tests run ``topcal ARGS`` in process (``_cli.cli``) unless a process is what they check:
    the installed console script gives the same exit code, stdout and ``error:`` line as
    ``topcal.cli.main`` on a success and on one-line errors of every kind (a missing file, a bad
    option value, an unknown method, a malformed CSV)."""
    bad = tmp_path / "bad.csv"
    bad.write_text("a,b\n1,2\n")
    cases = [
        ("methods",),
        ("fit", tmp_path / "missing.csv", "-o", tmp_path / "m.json"),
        ("fit", bad, "--method", "no-such-method", "-o", tmp_path / "m.json"),
        ("fit", bad, "-o", tmp_path / "m.json"),
        ("apply", tmp_path / "m.json", bad, "--interval", "1.5"),
    ]
    for args in cases:
        a, b = cli(*args, process=True), call(*args)
        assert a.returncode == b.returncode, args
        assert a.stdout == b.stdout, args
        last = [ln for ln in a.stderr.splitlines() if ln.startswith("error:")]
        assert last == [ln for ln in b.stderr.splitlines() if ln.startswith("error:")], args
        assert "Traceback" not in a.stderr
    assert not (tmp_path / "m.json").exists()
