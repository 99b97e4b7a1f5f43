"""auto on large data: its choice made on a stratified subsample of ``cv_rows`` rows (issue 26)."""

import json
import warnings
from pathlib import Path

import numpy as np

from topcal.describe.summary import describe_text
import pytest

import topcal
from topcal import persist
from topcal.data import TopLabelData, kfold_split, stratified_subsample
from topcal.datasets import load_phanns
from topcal.errors import DataError, ParameterError

from _sim import many_small_classes, simulate_probs

#: model files of format 3 and the rows they were saved with (tests/unit/persist/test_migrate.py)
V3 = Path(__file__).parents[3] / "data" / "model_v3"
_Z = np.load(V3 / "rows.npz")
V3_ROWS = TopLabelData.from_probs(_Z["probs"], _Z["labels"])

FEW = ["uncalibrated", "pooled-platt", "hist"]


def _quiet(f):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return f()


def _data(n=1500, seed=3, k=4):
    p, y = simulate_probs(n, seed, k, sharpen=np.linspace(0.6, 1.8, k))
    return TopLabelData.from_probs(p, y)


# ------------------------------------------------------------------ the subsample
def test_subsample_keeps_each_class_share_within_one_row_and_exactly_rows_rows():
    data = many_small_classes(5, 40, 6000)
    sub = stratified_subsample(data, 1000, seed=2)
    assert sub.n_rows == 1000
    share = np.bincount(data.pred, minlength=data.n_classes) * (1000 / data.n_rows)
    got = np.bincount(sub.pred, minlength=data.n_classes)
    assert np.all(np.abs(got - share) < 1.0)
    assert sub.classes == data.classes and sub.score_range == data.score_range


def test_subsample_rows_are_the_data_rows_in_order_and_seeded():
    data = _data()
    sub = stratified_subsample(data, 500, seed=1)
    # every row of the subsample is a row of the data, in the data's order
    pos = np.flatnonzero(np.isin(data.score, sub.score))
    assert pos.size == 500
    np.testing.assert_array_equal(data.score[pos], sub.score)
    np.testing.assert_array_equal(data.pred[pos], sub.pred)
    np.testing.assert_array_equal(data.full[pos], sub.full)
    np.testing.assert_array_equal(data.labels[pos], sub.labels)
    again = stratified_subsample(data, 500, seed=1)
    np.testing.assert_array_equal(again.score, sub.score)
    other = stratified_subsample(data, 500, seed=2)
    assert not np.array_equal(other.score, sub.score)


def test_subsample_of_all_rows_or_more_is_the_data_itself():
    data = _data(n=300)
    assert stratified_subsample(data, 300) is data
    assert stratified_subsample(data, 10**9) is data


@pytest.mark.parametrize("rows", [0, -1, 2.5, True, "100"])
def test_subsample_rejects_bad_row_counts(rows):
    with pytest.raises(ParameterError, match="rows must be an integer >= 1"):
        stratified_subsample(_data(n=300), rows)


def test_subsample_rejects_bad_seeds_and_binned_data():
    with pytest.raises(ParameterError, match="seed"):
        stratified_subsample(_data(n=300), 100, seed=-1)
    with pytest.raises(DataError, match="binned data"):
        stratified_subsample(load_phanns(), 100)


# ------------------------------------------------------------------ auto
def test_auto_chooses_on_the_subsample_and_fits_the_choice_on_all_rows():
    data = _data()
    cal = _quiet(lambda: topcal.calibrator("auto", candidates=FEW, cv_rows=600).fit(data))
    assert cal.cv_samples_ == 600 and cal.fit_samples_ == data.n_samples
    # its table is exactly that of auto run on the subsample itself
    sub = stratified_subsample(data, 600, seed=0)
    ref = _quiet(lambda: topcal.calibrator("auto", candidates=FEW, cv_rows=None).fit(sub))
    assert cal.cv_ == ref.cv_ and cal.method_ == ref.method_ and cal.blend_ == ref.blend_
    # the chosen model is fitted on all the rows
    np.testing.assert_array_equal(
        cal.n_tp_ + cal.n_fp_, np.bincount(data.pred, minlength=data.n_classes)
    )
    whole = _quiet(lambda: topcal.calibrator(cal.method_).fit(data)) if cal.blend_ is None else None
    if whole is not None:
        np.testing.assert_array_equal(cal.predict(data), whole.predict(data))
    assert "stratified subsample of 600 of its 1500 samples" in cal.summary_line()
    assert "on a stratified subsample of 600 of the 1500 samples" in describe_text(cal)
    assert "updated since" not in describe_text(cal)


def test_auto_below_cv_rows_and_with_none_uses_every_row():
    data = _data(n=800)
    for kw in ({"cv_rows": 800}, {"cv_rows": None}):
        cal = _quiet(lambda: topcal.calibrator("auto", candidates=FEW, **kw).fit(data))
        assert cal.cv_samples_ == cal.fit_samples_ == 800
        assert "subsample" not in cal.summary_line() and "subsample" not in describe_text(cal)
    a = _quiet(lambda: topcal.calibrator("auto", candidates=FEW).fit(data))
    b = _quiet(lambda: topcal.calibrator("auto", candidates=FEW, cv_rows=None).fit(data))
    assert a.cv_ == b.cv_ and a.method_ == b.method_


def test_auto_on_binned_data_always_uses_every_bin():
    data = load_phanns()
    cal = _quiet(lambda: topcal.calibrator("auto", candidates=FEW, cv_rows=100).fit(data))
    assert data.n_rows > 100 and cal.cv_samples_ == cal.fit_samples_ == data.n_samples


@pytest.mark.parametrize("bad", [99, 1000.5, "many", True, -5])
def test_auto_rejects_bad_cv_rows(bad):
    with pytest.raises(ParameterError, match="cv_rows"):
        topcal.calibrator("auto", cv_rows=bad).fit(_data(n=300))


def test_subsampled_auto_round_trips_and_older_files_load(tmp_path):
    data = _data()
    cal = _quiet(lambda: topcal.calibrator("auto", candidates=FEW, cv_rows=600).fit(data))
    again = persist.loads(persist.dumps(cal))
    assert again.cv_samples_ == 600 and again.fit_samples_ == 1500
    assert again.summary_line() == cal.summary_line()
    np.testing.assert_array_equal(again.predict(data), cal.predict(data))
    # a format-3 file from before cv_rows (no fit_samples): the cross-validation ran on all
    # the data the choice was made for
    doc = json.loads((V3 / "auto.json").read_text())
    del doc["model"]["state"]["fit_samples"]
    doc["sha256"] = persist.hashlib.sha256(
        persist.canonical_json(doc["model"]).encode()
    ).hexdigest()
    old = persist.loads(json.dumps(doc))
    assert old.fit_samples_ == old.cv_samples_ == 600
    assert old.predict(V3_ROWS).tolist() == persist.load(V3 / "auto.json").predict(V3_ROWS).tolist()
    # fit_samples below cv_samples is a malformed file
    doc = json.loads(persist.dumps(cal))
    doc["model"]["evidence"]["fit_samples"] = 10
    doc["sha256"] = persist.hashlib.sha256(
        persist.canonical_json(doc["model"]).encode()
    ).hexdigest()
    with pytest.raises(topcal.errors.ModelFileError):
        persist.loads(json.dumps(doc))


def test_subsampled_auto_says_updated_only_after_an_update():
    data = _data(n=2000)
    first = data.subset(np.arange(1500))
    cal = _quiet(lambda: topcal.calibrator("auto", candidates=FEW, cv_rows=600).fit(first))
    assert "kept its choice" not in cal.summary_line()
    _quiet(lambda: cal.update(data.subset(np.arange(1500, 2000))))
    assert "kept its choice" in cal.summary_line() and "on 600 samples" in cal.summary_line()
    assert "updated since" in describe_text(cal)


def test_fold_split_of_a_subsample_still_holds_every_sample_once():
    sub = stratified_subsample(_data(), 600, seed=4)
    folds = kfold_split(sub, 5, seed=0)
    assert sum(f.n_rows for f in folds) == 600


def test_cli_fit_with_cv_rows_and_its_hostile_values(tmp_path, capsys):
    from _frames import run

    p, y = simulate_probs(900, 8, 3, sharpen=[0.7, 1.0, 1.6])
    names = np.array(["cat", "dog", "emu"])
    lines = ["p_cat,p_dog,p_emu,label"] + [f"{a},{b},{c},{names[t]}" for (a, b, c), t in zip(p, y)]
    csv = tmp_path / "in.csv"
    csv.write_text("\n".join(lines) + "\n")
    before = csv.read_bytes()
    model = tmp_path / "m.json"
    code, out, err = run(
        [
            "fit",
            csv,
            "--param",
            "cv_rows=300",
            "--param",
            f"candidates={json.dumps(FEW)}",
            "-o",
            model,
        ],
        capsys,
    )
    assert code == 0, err
    doc = json.loads(model.read_text())
    assert doc["model"]["params"]["cv_rows"] == 300
    kept = doc["model"]["evidence"]
    assert kept["cv_samples"] == 300 and kept["fit_samples"] == 900
    code, out, err = run(["describe", model], capsys)
    assert code == 0 and "a stratified subsample of 300 of the 900 samples" in out
    for bad in ("cv_rows=5", "cv_rows=2.5", 'cv_rows="all"'):
        code, out, err = run(["fit", csv, "--param", bad, "-o", tmp_path / "bad.json"], capsys)
        assert code == 2 and "cv_rows" in err and len(err.strip().splitlines()) == 1, err
        assert not (tmp_path / "bad.json").exists()
    assert csv.read_bytes() == before
