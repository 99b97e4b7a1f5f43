"""auto's first look (issue 36): every candidate fitted once on a few rows, the K folds only for
the contenders; the stage each reached in the model, describe, the report and the file."""

import dataclasses
import hashlib
import json
import warnings

import numpy as np
import pytest

import topcal
from topcal import persist
from topcal.calibrators.select import crossfit, staging
from topcal.data import TopLabelData, kfold_split
from topcal.describe.summary import summary_text
from topcal.errors import ModelFileError
from topcal.persist import canonical_json
from topcal.report.page import choice_html

from _sim import many_small_classes, simulate_probs

RACE = ["uncalibrated", "pooled-platt", "hier-platt", "hier-beta", "bts"]


def _data(n=1200, seed=3):
    p, y = simulate_probs(n, seed, 4, sharpen=np.linspace(0.4, 2.5, 4))
    return TopLabelData.from_probs(p, y)


def _signed(d: dict) -> str:
    d["sha256"] = hashlib.sha256(canonical_json(d["model"]).encode()).hexdigest()
    return json.dumps(d)


def _fit(data, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return topcal.calibrator("auto", screen=300, **kw).fit(data)


@pytest.fixture(scope="module")
def raced():
    return _fit(_data(), candidates=RACE, folds=2)


def test_first_look_drops_the_clearly_worse_candidates_and_the_k_folds_run_on_the_rest(raced):
    st = raced.stages_
    assert st["decided"] == 2 and st["margin"] == staging.MARGIN
    assert st["rows"] == 300 and st["test"] == 900  # 4 folds of 300: one fits, three score
    stage = {n: v["stage"] for n, v in st["table"].items()}
    # the pooled curve (classes sharpened 0.4 to 2.5) and the unshrunk per-class fit are far
    # behind the shrunk per-class curves on the first look: they stop there
    assert stage == {
        "uncalibrated": 2,
        "pooled-platt": 1,
        "hier-platt": 2,
        "hier-beta": 2,
        "bts": 1,
    }
    best = st["table"][st["best"]]["nll"]
    for n in ("pooled-platt", "bts"):
        v = st["table"][n]
        assert v["nll"] - best > staging.MARGIN * v["diff_se"]
    # the K folds ran on the contenders only, on all the rows
    assert set(raced.cv_) == {"uncalibrated", "hier-platt", "hier-beta"}
    assert raced.cv_samples_ == 1200 and raced.method_ in ("hier-platt", "hier-beta")


def test_contenders_keep_ties_at_the_margin_failures_and_the_baseline():
    t = {
        "uncalibrated": {"nll": 9.0, "diff_se": 0.1},
        "a": {"nll": 1.0, "diff_se": 0.0},
        "b": {"nll": 1.3, "diff_se": 0.1},  # exactly 3 SE behind: kept
        "c": {"nll": 1.31, "diff_se": 0.1},
        "d": {"nll": None, "diff_se": None},  # failed on the first fold: the K folds say
    }
    assert staging.contenders(t, 3.0) == ["uncalibrated", "a", "b", "d"]
    assert not staging.decisive(t, ["uncalibrated", "a", "b"])
    assert staging.decisive(t, ["uncalibrated", "a"])
    near = {**t, "uncalibrated": {"nll": 1.2, "diff_se": 0.1}}
    assert not staging.decisive(near, ["uncalibrated", "a"])  # the baseline is within reach


def test_one_contender_decides_at_the_first_look():
    m = _fit(_data(), candidates=["uncalibrated", "pooled-platt"])
    assert m.stages_["decided"] == 1 and m.method_ == "pooled-platt" and m.blend_ is None
    assert all(v["stage"] == 1 for v in m.stages_["table"].values())
    # its table is the first look's, on the 900 scoring rows
    assert m.cv_samples_ == 900 and m.cv_["pooled-platt"]["nll"] == pytest.approx(
        m.stages_["table"]["pooled-platt"]["nll"]
    )
    assert m.describe()["cross_validation"]["folds"] == 1
    assert "decided there" in m.rule_text() and "one split" in summary_text(m)


def test_stages_in_describe_the_summary_and_the_report(raced):
    cv = raced.describe()["cross_validation"]
    assert cv["stages"]["table"]["bts"]["stage"] == 1
    assert "2 of 5 stopped there" in cv["rule"]
    text = summary_text(raced)
    assert "first look" in text
    line = next(ln for ln in text.splitlines() if ln.strip().startswith("bts"))
    assert f"first look {raced.stages_['table']['bts']['nll']:.4f}" in line
    rows = {r["method"]: r for r in raced.cv_table()}
    assert rows["bts"]["stage"] == 1 and rows["bts"]["nll"] is None
    assert rows["hier-platt"]["stage"] == 2 and rows["hier-platt"]["first_nll"] is not None
    assert [r["method"] for r in raced.cv_table()][-2:] in (
        ["bts", "pooled-platt"],
        ["pooled-platt", "bts"],
    )
    assert "first look only" in choice_html(raced)


def test_saved_model_round_trips_its_stages_and_old_files_load_as_before(raced):
    data = _data(n=400, seed=4)
    text = persist.dumps(raced)
    back = persist.loads(text)
    assert back.stages_ == json.loads(json.dumps(raced.stages_))
    np.testing.assert_array_equal(back.predict(data), raced.predict(data))
    # a file from before the first look: no stages; it loads and predicts the same
    d = json.loads(text)
    del d["model"]["state"]["stages"]
    for n in ("pooled-platt", "bts"):  # its table holds every candidate
        d["model"]["evidence"]["cv"][n] = {"nll": 1.0, "se": 0.1, "diff_se": 0.1, "per_class": None,
                                        "error": None}  # fmt: skip
    old = persist.loads(_signed(d))
    assert old.stages_ is None and "first look" not in old.rule_text()
    np.testing.assert_array_equal(old.predict(data), raced.predict(data))
    # a stage record that does not match the table is a malformed file
    d = json.loads(text)
    d["model"]["state"]["stages"]["table"]["bts"]["stage"] = 2
    with pytest.raises(ModelFileError, match="stage 2"):
        persist.loads(_signed(d))


def test_no_first_look_without_screen_or_on_few_rows():
    data = _data(n=500)
    few = ["uncalibrated", "pooled-platt", "pooled-beta"]
    assert _fit(data, candidates=few, folds=2).stages_ is None  # fewer than 2 x 300 rows
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        m = topcal.calibrator("auto", candidates=few, screen=None, folds=2).fit(_data())
    assert m.stages_ is None and set(m.cv_) == set(few)
    with pytest.raises(topcal.errors.ParameterError, match="screen"):
        topcal.calibrator("auto", screen=10).fit(data)


def test_update_of_a_full_vector_choice_decided_at_the_first_look_refits_its_best_score_method():
    data = _data()
    m = _fit(data, candidates=["uncalibrated", "pooled-platt", "vs"], folds=2)
    assert m.method_ == "vs" and m.stages_["decided"] == 1 and "pooled-platt" not in m.cv_
    with pytest.warns(topcal.errors.TopcalWarning, match="refits 'pooled-platt'"):
        m.update(_data(n=300, seed=5))
    # the first look's best score method, not the baseline (the only other one in the table)
    assert m.method_ == "pooled-platt" and m.refitted_from_ == "vs"
    back = persist.loads(persist.dumps(m))
    assert back.method_ == "pooled-platt"
    np.testing.assert_array_equal(back.predict(data), m.predict(data))


def test_with_few_rows_a_class_the_first_look_fits_on_one_fold_of_the_k_folds():
    data = many_small_classes(2, 50, 1500)  # 20 rows a class would be 1,000 rows: over half
    table, fitted, scored, _ = staging.first_look(
        data, ["uncalibrated", "pooled-platt"], rows=300, seed=1, folds=5
    )
    fold = kfold_split(data, 5, seed=1)[0]  # the K folds' own first fold, scored
    assert scored == fold.n_samples and fitted == data.n_samples - fold.n_samples
    assert table["pooled-platt"]["nll"] is not None


def test_the_k_folds_take_their_first_fold_from_a_first_look_made_on_it(monkeypatch):
    p, y = simulate_probs(1200, 4, 40, sharpen=np.linspace(0.5, 2.0, 40))
    data = TopLabelData.from_probs(p, y)  # 40 classes: 20 rows a class is over half the rows
    # hier-platt's and sts's folds start warm (from an all-data fit; sts: from the look's fit)
    names = ["uncalibrated", "pooled-platt", "hier-platt", "sts"]
    look = staging.first_look(data, names, rows=300, seed=1, folds=5)[3]
    other = staging.first_look(data, names, rows=300, seed=2, folds=5)[3]  # another split
    fits = []
    real = crossfit.scratch_fit

    def counting(name, train, *a, **kw):
        fits.append((name, train.n_samples))
        return real(name, train, *a, **kw)

    monkeypatch.setattr(crossfit, "scratch_fit", counting)
    runs = {}
    unmarked = dataclasses.replace(look, first_of_k=False)  # same fold, fits not on the others
    assert look.first_of_k and not staging.first_look(_data(), names, rows=300)[3].first_of_k
    cases = (("fresh", None), ("reused", look), ("other", other), ("unmarked", unmarked))
    for key, done in cases:
        fits.clear()
        runs[key] = crossfit.cross_fit(data, names, 5, seed=1, done=done, begin=done and done.warm)
        runs[key].n_fits = {n: sum(f[0] == n for f in fits) for n in names}
    # 5 fold fits (and the warm ones' all-data fit) fresh; one fewer where fold 0 is the look's,
    # and no all-data fit where the look's fit (on the other 4 folds) is the start
    fresh = {"uncalibrated": 5, "pooled-platt": 5, "hier-platt": 6, "sts": 6}
    assert runs["fresh"].n_fits == fresh
    assert runs["reused"].n_fits == {
        "uncalibrated": 4,
        "pooled-platt": 4,
        "hier-platt": 5,
        "sts": 4,
    }
    assert runs["reused"].warm["sts"] is look.warm["sts"]
    assert runs["other"].n_fits == runs["unmarked"].n_fits == fresh  # nothing taken
    fold0 = kfold_split(data, 5, seed=1)[0].n_rows
    for n in names:
        a, b = runs["fresh"].confidence[n], runs["reused"].confidence[n]
        if n in ("uncalibrated", "pooled-platt"):  # the same fits on the other folds
            np.testing.assert_array_equal(a[fold0:], b[fold0:])
        np.testing.assert_allclose(a[fold0:], b[fold0:], rtol=1e-6)  # sts: another warm start
        np.testing.assert_allclose(b[:fold0], look.confidence[n])
        np.testing.assert_allclose(a[:fold0], b[:fold0], rtol=1e-6)  # warm vs cold start


def test_auto_appends_its_runs_to_the_fit_context_it_is_given_and_keeps_none_without():
    from topcal.calibrators.context import FitContext

    data = _data()
    context = FitContext()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = topcal.calibrator("auto", candidates=RACE, screen=300).fit(data, context=context)
        plain = topcal.calibrator("auto", candidates=RACE, screen=300).fit(data)
    # the first look's split, then the K folds for its contenders (where it did not decide)
    k_folds = [] if model.stages_["decided"] == 1 else [5]
    assert [len(r.folds) for r in context.runs] == [1] + k_folds
    assert all(isinstance(r, crossfit.CrossFit) for r in context.runs)
    assert set(model.cv_) <= set(context.runs[-1].confidence)
    assert model._context is None  # held during the fit only
    # the context changes nothing the fit computes
    assert model.method_ == plain.method_ and model.cv_ == plain.cv_
    np.testing.assert_array_equal(model.predict(data), plain.predict(data))
