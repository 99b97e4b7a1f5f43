"""``topcal describe`` for people (issue 34, item 2): a summary that fits a screen at 1,000
classes, ``--class`` for one class in full, ``--full``, ``--json`` with the summary's keys, a
blend's members with their fitted parameters, and ``model.describe()`` shown as the summary in
Jupyter."""

from __future__ import annotations

import json
import re
import warnings

import pytest

import topcal
from topcal.cli import main
from topcal.describe.summary import EVERY_CLASS, LISTED, class_text, summary, summary_text

from _sim import many_small_classes

#: Every candidate auto may tabulate (the longest CV table the summary can hold).
ALL_CANDIDATES = list(topcal.calibrators.select.rules.DEFAULT_CANDIDATES)


@pytest.fixture(scope="module")
def thousand(tmp_path_factory):
    """A 1,000-class auto model fitted in about 2 s (4 candidates, 3 folds, a blend), saved."""
    data = many_small_classes(3, 1000, 12_000)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = topcal.calibrator(
            "auto",
            candidates=["uncalibrated", "pooled-platt", "hier-platt", "pooled-hist"],
            blend=0.0,
            folds=3,
            screen=None,  # every candidate to the K folds: the blend's members come from them
        ).fit(data)
    assert model.blend_ is not None
    path = tmp_path_factory.mktemp("describe") / "m.json"
    model.save(path)
    return model, path


def _run(args, capsys):
    code = main([str(a) for a in args])
    out, err = capsys.readouterr()
    assert code == 0, err
    return out


def _widest_table(model):
    """``model`` with its CV table grown to every default candidate (copies of a real row)."""
    row = next(v for n, v in model.cv_.items() if n != model.method_)
    model.cv_ = {**{n: dict(row) for n in ALL_CANDIDATES}, **model.cv_}
    return model


def test_the_default_fits_a_screen_at_1000_classes(thousand, capsys):
    model, path = thousand
    out = _run(["describe", path], capsys)
    lines = out.rstrip("\n").splitlines()
    assert len(lines) <= 60 and max(map(len, lines)) <= 100, (len(lines), out)
    # what was chosen and why, and what it gains out of fold over the uncalibrated score
    assert lines[0].startswith(f"method: auto (chose {model.method_})")
    assert "simplest candidate within 1 standard error" in out
    raw = model.cv_["uncalibrated"]["nll"]
    assert f"NLL {model.blend_['nll']:.4f} vs {raw:.4f} uncalibrated" in out
    for name, r in model.cv_.items():  # the candidates' CV table
        assert re.search(rf"^  {re.escape(name)} +[\d.]+ +{r['nll']:.4f}", out, re.M), name
    # the spread over classes, the worst and the smallest classes, a few each
    assert "spread over the 1,000 classes" in out and "samples (TP + FP)" in out
    assert sum(ln.startswith("  worst ") for ln in lines) == LISTED
    assert sum(ln.startswith("  smallest ") for ln in lines) == LISTED
    # counts are integers: no "25.0" or "0.0000" beside them
    rows = [ln.split() for ln in lines if ln.startswith(("  worst ", "  smallest "))]
    assert all(re.fullmatch(r"[\d,]+", x) for r in rows for x in r[2:5]), rows
    assert "cv_nll_" not in out and "e-1" not in out


def test_the_summary_stays_on_a_screen_with_every_default_candidate_tabulated(thousand):
    model = _widest_table(thousand[0])
    try:
        text = summary_text(model)
    finally:
        model.cv_ = {n: v for n, v in model.cv_.items() if n in model.candidates}
    lines = text.splitlines()
    assert sum(ln.startswith("  " + n + " ") for n in ALL_CANDIDATES for ln in lines) == len(
        ALL_CANDIDATES
    )
    assert len(lines) <= 60 and max(map(len, lines)) <= 100, (len(lines), text)


def test_blend_members_are_shown_with_their_fitted_parameters(thousand, capsys):
    model, path = thousand
    out = _run(["describe", path], capsys)
    b = model.blend_
    assert f"{b['weights'][0]:.3f} {b['methods'][0]} + {b['weights'][1]:.3f} {b['methods'][1]}" in (
        " ".join(out.split())
    )
    members = [ln for ln in out.splitlines() if ln.startswith("  member ")]
    assert [ln.split()[2].rstrip(":") for ln in members] == b["methods"]
    hier = model.model_.models_[0]  # hier-platt: its pooled curve and its prior strength
    flat = " ".join(out.split())
    assert f"pooled_slope={hier.describe()['hierarchical']['pooled_slope']:.4g}" in flat
    assert "per class, median (10% to 90%): slope" in flat


def test_one_class_in_full_with_its_blend_members(thousand, capsys):
    model, path = thousand
    c = model.classes_[7]
    out = _run(["describe", path, "--class", c, "--class", model.classes_[9]], capsys)
    assert f"\n[{c}]  TP=" in out and f"\n[{model.classes_[9]}]  TP=" in out
    assert out.count("\n[") == 2
    inner = model.model_.models_[0].describe()["classes"][c]
    assert f"member {model.blend_['weights'][0]:.3f} hier-platt: slope={inner['slope']:.6g}" in (
        " ".join(out.split())
    )
    assert "cv_nll_hier-platt" in out  # the class's own CV entries, in full
    code = main(["describe", str(path), "--class", "nope"])
    assert code == 2 and "no class 'nope' in this model" in capsys.readouterr().err


def test_json_holds_everything_and_the_documented_summary_keys(thousand, capsys):
    model, path = thousand
    d = json.loads(_run(["describe", path, "--json"], capsys))
    assert set(model.describe()) <= set(d) and len(d["classes"]) == 1000  # everything, as before
    s = d["summary"]
    assert set(s) == {
        "method",
        "n_classes",
        "samples",
        "score_range",
        "choice",
        "members",
        "fitted",
        "label_shift",
        "per_class",
        "worst",
        "smallest",
        "rows",
    }
    assert s["choice"]["chosen"] == model.method_ and s["n_classes"] == 1000
    assert s["choice"]["gain"] == pytest.approx(
        model.cv_["uncalibrated"]["nll"] - model.blend_["nll"]
    )
    assert set(s["choice"]["table"][0]) == {
        "method",
        "tier",
        "nll",
        "se",
        "diff_se",
        "error",
        "weight",
        "stage",
        "first_nll",
    }
    assert [m["method"] for m in s["members"]] == model.blend_["methods"]
    assert set(s["per_class"]["samples (TP + FP)"]) == {"min", "q10", "median", "q90", "max"}
    assert len(s["worst"]["classes"]) == LISTED and len(s["smallest"]) == LISTED
    n = model.n_tp_ + model.n_fp_
    assert sorted(n[model.classes_.index(c)] for c in s["smallest"]) == sorted(n)[:LISTED]
    # --class with --json: every per-class table cut to that class, at any depth
    one = json.loads(_run(["describe", path, "--json", "--class", "c5"], capsys))
    assert list(one["classes"]) == ["c5"] and list(one["model"]["classes"]) == ["c5"]
    assert all(list(c["classes"]) == ["c5"] for c in one["model"]["components"])


def test_few_classes_list_every_class_and_full_gives_the_old_text(tmp_path, capsys):
    data = many_small_classes(1, 6, 3000)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = topcal.calibrator("hist").fit(data)
    model.save(tmp_path / "h.json")
    out = _run(["describe", tmp_path / "h.json"], capsys)
    assert len(data.classes) <= EVERY_CLASS and "per class (6):" in out
    for c in data.classes:
        assert re.search(rf"^  {c} +[\d,]+ ", out, re.M)
    assert "bin_" not in out and "\n[" not in out
    full = _run(["describe", tmp_path / "h.json", "--full"], capsys)
    assert all(f"\n[{c}]  TP=" in full for c in data.classes) and "edges" in full
    code = main(["describe", str(tmp_path / "h.json"), "--full", "--class", "c1"])
    assert code == 2 and "give one" in capsys.readouterr().err


def test_a_model_without_auto_ranks_its_worst_classes_by_accuracy():
    data = many_small_classes(2, 40, 2000)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = topcal.calibrator("kde-mon2").fit(data)
    s = summary(model)
    assert s["choice"] is None and "lowest accuracy" in s["worst"]["by"]
    acc = [s["rows"][c]["accuracy"] for c in s["worst"]["classes"]]
    assert acc == sorted(acc) and "bandwidth" in s["per_class"]
    text = summary_text(model)
    assert "spread over the 40 classes" in text and "  bandwidth " in text
    assert class_text(model, ["c3"]).count("\n[c3]  TP=") == 1


def test_jupyter_shows_describe_as_the_summary_and_it_stays_a_dict(thousand):
    model = thousand[0]
    d = model.describe()
    assert isinstance(d, dict) and json.loads(json.dumps(d))["method"] == "auto"
    assert repr(d).startswith("{'method': 'auto'")  # print() and repr() are a dict's

    class Printer:  # what IPython.lib.pretty hands to _repr_pretty_
        text_ = ""

        def text(self, t):
            self.text_ += t

    p = Printer()
    d._repr_pretty_(p, False)
    assert p.text_.startswith(summary_text(model)) and "print(dict(d))" in p.text_
    assert len(p.text_.splitlines()) <= 62
