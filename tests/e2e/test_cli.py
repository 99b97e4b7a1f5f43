"""The topcal command line: the workflow, and exit code 2 + one line for every user mistake."""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import topcal

from _frames import run

pytestmark = pytest.mark.e2e


@pytest.fixture
def prob_csv(tmp_path):
    rng = np.random.default_rng(3)
    n = 600
    probs = rng.dirichlet([1, 1, 1], n)
    labels = np.where(rng.uniform(size=n) < probs.max(1), probs.argmax(1), rng.integers(0, 3, n))
    names = np.array(["cat", "dog", "emu"])
    frame = pd.DataFrame({f"p_{c}": probs[:, i] for i, c in enumerate(names)})
    frame.insert(0, "id", np.arange(n))
    frame["label"] = names[labels]
    path = tmp_path / "test.csv"
    frame.to_csv(path, index=False)
    return path


def test_fit_apply_describe_metrics_workflow(prob_csv, tmp_path, capsys):
    model = tmp_path / "m.json"
    code, out, err = run(
        ["fit", prob_csv, "--method", "hist", "--param", "n_bins=5", "-o", model], capsys
    )
    assert code == 0, err
    assert json.loads(model.read_text())["model"]["params"] == {
        "n_bins": 5,
        "strategy": "uniform",
        "shrinkage": "auto",
    }

    # apply needs no label column; output = input columns + pred + confidence
    new = pd.read_csv(prob_csv).drop(columns=["label"])
    new_path = tmp_path / "new.csv"
    new.to_csv(new_path, index=False)
    out_path = tmp_path / "out.csv"
    code, out, err = run(["apply", model, new_path, "-o", out_path], capsys)
    assert code == 0, err
    res = pd.read_csv(out_path)
    assert list(res.columns) == list(new.columns) + ["pred", "confidence"]
    pd.testing.assert_frame_equal(res[new.columns], new)
    data = topcal.read_data(prob_csv)
    expected = topcal.load(model).predict(data)
    np.testing.assert_allclose(res["confidence"], expected, rtol=0, atol=0)
    assert list(res["pred"]) == list(np.array(data.classes)[data.pred])

    code, out, err = run(["describe", model, "--full"], capsys)
    assert code == 0 and "method: hist" in out and "[dog]" in out and "edges" in out
    code, out, err = run(["describe", model, "--json"], capsys)
    d = json.loads(out)
    assert d["classes"]["cat"]["values"] == topcal.load(model).class_state_[0]["values"].tolist()

    code, out, err = run(["metrics", prob_csv, "--model", model, "--json"], capsys)
    assert code == 0
    s = json.loads(out)
    assert s["method"] == "hist"
    nll = s["overall"]["nll"]
    assert nll["value"] == pytest.approx(topcal.metrics.nll(data, expected).overall)
    assert nll["lo"] < nll["value"] < nll["hi"]
    want = {"nll", "brier", "ece15", "smece", "ece_debiased", "calibration_loss", "ece_top_label"}
    assert want | {"nll_improvement", "brier_improvement"} <= set(s["overall"])
    assert set(s["classes"]) == set(data.classes)
    args = ["metrics", prob_csv, "--model", model, "--reference", model, "--json"]
    code, out, err = run(args, capsys)
    again = json.loads(out)
    assert again["reference"] == "hist" and again["overall"]["nll_improvement"]["value"] == 0
    code, out, err = run(["metrics", prob_csv, "--reference", model], capsys)
    assert code != 0 and "give --model too" in err
    code, out, err = run(["metrics", prob_csv], capsys)
    assert code == 0 and "uncalibrated" in out and "ece15" in out and "improvement" not in out


def test_top_score_and_binned_and_parquet_and_npz_inputs(tmp_path, capsys):
    frame = pd.DataFrame(
        {"pred": ["a", "b", "a", "a"], "score": [9.0, 3.0, 4.5, 7.0], "label": ["a", "a", "b", "a"]}
    )
    frame.to_parquet(tmp_path / "s.parquet")
    code, out, err = run(
        [
            "fit",
            tmp_path / "s.parquet",
            "--score-range",
            0,
            10,
            "--method",
            "cum",
            "-o",
            tmp_path / "m.json",
        ],
        capsys,
    )
    assert code == 0, err
    assert topcal.load(tmp_path / "m.json").score_range_ == (0.0, 10.0)

    phanns = Path(topcal.__file__).parent / "_data" / "phanns_test_binned.csv"
    code, out, err = run(
        ["fit", phanns, "--method", "cum-opt", "--score-range", 0, 10, "-o", tmp_path / "p.json"],
        capsys,
    )
    assert code == 0, err
    code, out, err = run(["describe", tmp_path / "p.json", "--class", "HTJ"], capsys)
    assert "theta" in out and "[HTJ]" in out

    np.savez(
        tmp_path / "d.npz",
        probs=np.array([[0.8, 0.2], [0.3, 0.7], [0.6, 0.4]]),
        labels=np.array(["u", "v", "v"]),
        classes=np.array(["u", "v"]),
    )
    code, out, err = run(["fit", tmp_path / "d.npz", "-o", tmp_path / "n.json"], capsys)
    assert code == 0, err
    assert topcal.load(tmp_path / "n.json").classes_ == ("u", "v")


def test_logits_flag(tmp_path, capsys):
    frame = pd.DataFrame(
        {"p_a": [2.0, -1.0, 0.5], "p_b": [0.0, 1.0, 0.2], "label": ["a", "b", "b"]}
    )
    frame.to_csv(tmp_path / "l.csv", index=False)
    code, out, err = run(["fit", tmp_path / "l.csv", "-o", tmp_path / "m.json"], capsys)
    assert code == 2 and "negative value" in err and "--logits" in err
    code, out, err = run(["fit", tmp_path / "l.csv", "--logits", "-o", tmp_path / "m.json"], capsys)
    assert code == 0, err


def _csv(tmp_path, name, text):
    p = tmp_path / name
    p.write_text(text)
    return p


BAD_FILES = [
    ("nan.csv", "p_a,p_b,label\n0.5,,a\n0.2,0.8,b\n", "empty \\(NaN\\) at row 1"),
    ("inf.csv", "p_a,p_b,label\n0.5,inf,a\n", "non-finite"),
    ("neg.csv", "p_a,p_b,label\n1.2,-0.2,a\n", "negative value"),
    ("sum.csv", "p_a,p_b,label\n0.5,0.2,a\n", "sums to 0.7.*--renormalize"),
    ("lab.csv", "p_a,p_b,label\n0.5,0.5,zebra\n", "'zebra' at row 1, which is not one of"),
    ("empty.csv", "p_a,p_b,label\n", "has no rows"),
    ("blank.csv", "", "empty"),
    ("dup.csv", "p_a,p_a,label\n0.5,0.5,a\n", "column 'p_a' twice"),
    ("range.csv", "pred,score,label\na,11,a\n", "outside the declared score range"),
    ("text.csv", "p_a,p_b,label\n0.5,abc,a\n", "non-numeric value 'abc' at row 1"),
    ("cols.csv", "x,y\n1,2\n", "cannot find score columns"),
    ("bins.csv", "predicted_class,bin_lo,bin_hi,tp,fp\na,0.5,0.4,1,0\n", "bin_lo 0.5 >= bin_hi"),
    ("ext.xlsx", "whatever", "cannot tell the format"),
]


@pytest.mark.parametrize("name, text, match", BAD_FILES)
def test_bad_data_files_exit_2_with_one_line(name, text, match, tmp_path, capsys):
    import re

    path = _csv(tmp_path, name, text)
    extra = ["--score-range", "0", "10"] if name == "range.csv" else []
    code, out, err = run(["fit", path, *extra, "-o", tmp_path / "m.json"], capsys)
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    assert re.search(match, lines[0]), lines[0]
    assert not (tmp_path / "m.json").exists()


def test_mismatched_lengths_in_npz(tmp_path, capsys):
    np.savez(
        tmp_path / "x.npz",
        pred=np.array(["a", "b"]),
        score=np.array([0.5]),
        label=np.array(["a", "a"]),
    )
    code, out, err = run(["fit", tmp_path / "x.npz", "-o", tmp_path / "m.json"], capsys)
    assert code == 2 and "different lengths" in err


def test_usage_mistakes_exit_2(prob_csv, tmp_path, capsys):
    code, out, err = run(
        ["fit", prob_csv, "--method", "kernel-magic", "-o", tmp_path / "m.json"], capsys
    )
    assert code == 2 and "unknown method 'kernel-magic'. Options are:" in err and "hist" in err
    code, out, err = run(["fit", prob_csv, "--param", "nbins=3", "-o", tmp_path / "m.json"], capsys)
    assert code == 2 and "no parameter(s) 'nbins'" in err
    code, out, err = run(["fit", prob_csv, "--param", "n_bins", "-o", tmp_path / "m.json"], capsys)
    assert code == 2 and "NAME=VALUE" in err
    code, out, err = run(["fit", prob_csv], capsys)
    assert code == 2 and "-o/--output" in err and len(err.strip().splitlines()) == 1
    code, out, err = run(["describe", tmp_path / "nope.json"], capsys)
    assert code == 2 and "does not exist" in err
    code, out, err = run(["frobnicate"], capsys)
    assert code == 2 and "invalid choice" in err


def test_apply_protects_data(prob_csv, tmp_path, capsys):
    model = tmp_path / "m.json"
    assert run(["fit", prob_csv, "-o", model], capsys)[0] == 0
    code, out, err = run(["apply", model, prob_csv, "-o", prob_csv], capsys)
    assert code == 2 and "output file is the input file" in err
    frame = pd.read_csv(prob_csv)
    frame["confidence"] = 0.3
    frame.to_csv(tmp_path / "c.csv", index=False)
    code, out, err = run(["apply", model, tmp_path / "c.csv", "-o", tmp_path / "o.csv"], capsys)
    assert code == 2 and "already has a 'confidence' column" in err
    other = pd.read_csv(prob_csv).rename(columns={"p_cat": "p_cow"})
    other.to_csv(tmp_path / "o2.csv", index=False)
    code, out, err = run(["apply", model, tmp_path / "o2.csv", "-o", tmp_path / "o.csv"], capsys)
    assert code == 2 and "'cow'" in err and "does not know" in err


def test_tampered_model_via_cli(prob_csv, tmp_path, capsys):
    model = tmp_path / "m.json"
    run(["fit", prob_csv, "--method", "hist", "-o", model], capsys)
    model.write_text(model.read_text().replace('"strategy": "uniform"', '"strategy": "quantile"'))
    code, out, err = run(["apply", model, prob_csv, "-o", tmp_path / "o.csv"], capsys)
    assert code == 2 and "modified after it was saved" in err


def test_demo_prints_per_class_table(demo_run):
    report, out, _ = demo_run  # topcal demo -o DIR, run once for the session (conftest)
    assert (report / "index.html").stat().st_size > 0
    assert "Minor capsid" in out and "hist" in out and "cum-opt" in out
    assert "per-class NLL" in out and "per-class ECE1" in out
    assert "not run (need the full score vector" in out and "tswa" in out


def test_console_script_has_no_traceback(tmp_path):
    """The installed entry point itself: exit 2, one line, no traceback."""
    exe = Path(sys.executable).parent / "topcal"
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "topcal.cli"]
    bad = _csv(tmp_path, "bad.csv", "p_a,p_b,label\nnan,0.5,a\n")
    r = subprocess.run(
        cmd + ["fit", str(bad), "-o", str(tmp_path / "m.json")],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONWARNINGS": "ignore"},
    )
    assert r.returncode == 2
    assert (
        "Traceback" not in r.stderr
        and r.stderr.startswith("error: ")
        and len(r.stderr.strip().splitlines()) == 1
    )
