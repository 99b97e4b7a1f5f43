"""Mergeable statistics and incremental updates (issue 13).

``update`` over any split of a data set equals one fit from the statistics
of all of it: counts bit for bit, curves within 1e-12.
"""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest

import topcal
from topcal import persist
from topcal.calibrators import ScoreCalibrator
from topcal.evidence.confusion import ConfusionStats, GridConfusion
from topcal.data import TopLabelData
from topcal.datasets import load_phanns
from topcal.errors import DataError, ModelFileError, ParameterError
from topcal.evidence.core import Evidence
from topcal.evidence.stats import DEFAULT_CELLS, ScoreStats, cell_index

from _frames import assert_confusion_equal, on_grid

# every method that can be fitted from score statistics (all but the full-vector temperature
# methods)
COUNT_METHODS = [
    "uncalibrated",
    "conf1",
    "hist",
    "cum",
    "cum-median",
    "cum-opt",
    "kde",
    "kde-mon",
    "kde-mon2",
    "kde-mon4",
    "kde-opt",
]
TEMPERATURE_SCORE_METHODS = ["bts", "btswa"]


def _sim(n=900, K=4, seed=0):
    rng = np.random.default_rng(seed)
    p = rng.dirichlet(np.full(K, 0.6), size=n)
    y = (rng.random(n)[:, None] > np.cumsum(p, axis=1)).sum(axis=1)
    return TopLabelData.from_probs(p, np.minimum(y, K - 1))


def _quiet_fit(cal, data):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return cal.fit(data)


def _updated(name, data, n_parts, seed):
    rng = np.random.default_rng(seed)
    # unequal random parts, every part non-empty
    cuts = np.sort(rng.choice(np.arange(1, data.n_rows), n_parts - 1, replace=False))
    parts = np.split(rng.permutation(data.n_rows), cuts)
    cal = _quiet_fit(topcal.calibrator(name), data.subset(parts[0]))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for idx in parts[1:]:
            cal.update(data.subset(idx))
    return cal


def _whole(name, data):
    return _quiet_fit(topcal.calibrator(name), ScoreStats.from_data(data).to_data())


@pytest.mark.slow
@pytest.mark.parametrize("name", COUNT_METHODS + TEMPERATURE_SCORE_METHODS)
@pytest.mark.parametrize("n_parts", [2, 10])
def test_update_over_any_split_equals_one_fit(name, n_parts):
    data = _sim()
    a = _updated(name, data, n_parts, seed=n_parts)
    b = _whole(name, data)
    assert a.evidence_.stats.equals(b.evidence_.stats)
    np.testing.assert_array_equal(a.n_tp_, b.n_tp_)
    np.testing.assert_array_equal(a.n_fp_, b.n_fp_)
    if isinstance(a, ScoreCalibrator):
        for sa, sb in zip(a.class_state_, b.class_state_):
            assert (sa is None) == (sb is None)
            for key in (
                "tp",
                "fp",
                "n_above",
                "n_below",
            ):  # the counts behind the curves: bit for bit
                if sa is not None and key in sa:
                    np.testing.assert_array_equal(sa[key], sb[key])
        for k in range(len(a.classes_)):
            np.testing.assert_allclose(
                a.curve(k).confidence, b.curve(k).confidence, rtol=0, atol=1e-12
            )
    np.testing.assert_allclose(a.predict(data), b.predict(data), rtol=0, atol=1e-12)


@pytest.mark.parametrize("n_parts", [3, 7])
def test_update_split_sizes_in_between(n_parts):
    data = _sim(seed=n_parts)
    for name in ("hist", "kde-mon2", "cum-opt"):
        a = _updated(name, data, n_parts, seed=1)
        b = _whole(name, data)
        np.testing.assert_allclose(a.predict(data), b.predict(data), rtol=0, atol=1e-12)


def test_merge_is_order_free_and_bit_exact():
    data = _sim(n=2000)
    rng = np.random.default_rng(3)
    parts = np.array_split(rng.permutation(data.n_rows), 6)
    stats = [ScoreStats.from_data(data.subset(p)) for p in parts]
    whole = ScoreStats.from_data(data)
    assert ScoreStats.merge_all(stats).equals(whole)
    assert ScoreStats.merge_all(stats[::-1]).equals(whole)
    assert (stats[0] + stats[1]).merge(*stats[2:]).equals(whole)
    tp, fp = whole.class_counts()
    np.testing.assert_array_equal(tp, data.class_counts()[0])
    np.testing.assert_array_equal(fp, data.class_counts()[1])
    assert whole.n_rows <= len(data.classes) * DEFAULT_CELLS


def test_cells_are_left_open_and_cover_the_range():
    j = cell_index(np.array([0.0, 1e-9, 0.25, 0.2500001, 1.0]), (0.0, 1.0), 4)
    np.testing.assert_array_equal(j, [0, 0, 0, 1, 3])


def test_binned_input_keeps_its_bins_and_fits_as_before():
    data = load_phanns()
    stats = ScoreStats.from_data(data)
    assert stats.n_samples == data.n_samples
    for name in ("hist", "kde-mon2", "cum-opt"):
        raw = _quiet_fit(topcal.calibrator(name), data)
        via = _quiet_fit(topcal.calibrator(name), stats.to_data())
        for k in range(data.n_classes):
            np.testing.assert_allclose(
                raw.curve(k).confidence, via.curve(k).confidence, rtol=0, atol=1e-12
            )


def test_stats_fit_is_close_to_raw_fit():
    # per-sample scores move by at most half a cell: the curves barely change
    data = _sim(n=3000)
    for name in ("hist", "kde-mon2"):
        raw = _quiet_fit(topcal.calibrator(name), data)
        via = _whole(name, data)
        assert np.abs(raw.predict(data) - via.predict(data)).max() < 0.02


def test_update_survives_save_and_load(tmp_path):
    data = _sim()
    half = data.n_rows // 2
    cal = _quiet_fit(topcal.calibrator("kde-mon2"), data.subset(np.arange(half)))
    cal.save(tmp_path / "m.json")
    loaded = persist.load(tmp_path / "m.json")
    assert loaded.evidence_.stats.equals(cal.evidence_.stats)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        loaded.update(data.subset(np.arange(half, data.n_rows)))
    np.testing.assert_allclose(
        loaded.predict(data), _whole("kde-mon2", data).predict(data), rtol=0, atol=1e-12
    )


def test_update_with_statistics_directly():
    data = _sim()
    a = _quiet_fit(topcal.calibrator("hist"), data.subset(np.arange(300)))
    a.update(ScoreStats.from_data(data.subset(np.arange(300, data.n_rows))))
    np.testing.assert_array_equal(a.predict(data), _whole("hist", data).predict(data))


def test_format_1_files_are_refused_and_a_copy_without_stats_asks_for_a_refit(tmp_path):
    data = _sim()
    cal = _quiet_fit(topcal.calibrator("hist"), data)
    doc = json.loads(persist.dumps(cal))
    doc["format_version"] = 1
    (tmp_path / "old.json").write_text(json.dumps(doc))
    with pytest.raises(ModelFileError, match="format version 1.*refit"):
        persist.load(tmp_path / "old.json")
    bare = persist.loads(persist.dumps(cal, stats=False))
    np.testing.assert_array_equal(bare.predict(data), cal.predict(data))
    with pytest.raises(ParameterError, match="holds no statistics"):
        bare.update(data)


def test_corrupt_stats_give_a_model_file_error(tmp_path):
    cal = _quiet_fit(topcal.calibrator("hist"), _sim())
    doc = json.loads(persist.dumps(cal))
    stats = doc["model"]["evidence"]["stats"]
    stats["tp"] = stats["tp"][:-1]
    doc["sha256"] = persist.hashlib.sha256(
        persist.canonical_json(doc["model"]).encode()
    ).hexdigest()
    with pytest.raises(ModelFileError, match="malformed"):
        persist.loads(json.dumps(doc))


@pytest.mark.parametrize("name", ["tswa", "cstswa"])
def test_award_methods_cannot_update(name):
    data = _sim()
    cal = _quiet_fit(topcal.calibrator(name), data)
    assert cal.evidence_.stats is None
    with pytest.raises(ParameterError, match="has an award.*refit it on all the data"):
        cal.update(data)


def test_update_merges_the_label_shift_counts():
    """Per-sample labelled updates add their confusion counts in the first fit's regions; statistics
    drop them."""
    data = _sim(n=3000)
    whole = ConfusionStats.from_data(data)
    rng = np.random.default_rng(5)
    parts = np.array_split(rng.permutation(data.n_rows), 4)
    for name, params in (("hist", {}), ("sts", {"keep_stats": True})):
        cal = _updated_parts(name, data, parts, **params)
        first = ConfusionStats.from_data(data.subset(parts[0]))
        conf = cal.evidence_.confusion
        np.testing.assert_array_equal(conf.confusion(), whole.confusion())  # integer counts: exact
        np.testing.assert_array_equal(conf.source_priors(), whole.source_priors())
        for k in range(data.n_classes):
            np.testing.assert_array_equal(conf.edges[k], first.edges[k])  # regions of the first fit
            r = conf.region(k, data.score[data.pred == k])
            ref = np.zeros_like(conf.counts[k])
            np.add.at(ref, (r, data.labels[data.pred == k]), 1.0)
            np.testing.assert_array_equal(conf.counts[k], ref)
        cal.adapt(priors=np.full(data.n_classes, 1 / data.n_classes))  # adapt works without a refit
    cal = _quiet_fit(topcal.calibrator("hist"), data.subset(parts[0]))
    cal.update(ScoreStats.from_data(data.subset(parts[1])))  # statistics carry no true classes
    assert cal.evidence_.confusion is None
    with pytest.raises(DataError, match="updated with score statistics alone.*refit"):
        cal.adapt(priors=np.full(data.n_classes, 1 / data.n_classes))


def _updated_parts(name, data, parts, **params):
    cal = _quiet_fit(topcal.calibrator(name, **params), data.subset(parts[0]))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for idx in parts[1:]:
            cal.update(data.subset(idx))
    return cal


def test_auto_update_keeps_its_choice_and_refits_the_chosen_method():
    data = _sim(n=1500)
    cal = _quiet_fit(
        topcal.calibrator("auto", candidates=["uncalibrated", "hist", "kde-mon2"]),
        data.subset(np.arange(700)),
    )
    chosen, cv, cv_n = cal.method_, dict(cal.cv_), cal.cv_samples_
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cal.update(data.subset(np.arange(700, data.n_rows)))
    assert cal.method_ == chosen and cal.cv_ == cv and cal.cv_samples_ == cv_n == 700
    np.testing.assert_allclose(
        cal.predict(data), _whole(chosen, data).predict(data), rtol=0, atol=1e-12
    )
    np.testing.assert_array_equal(
        cal.n_tp_ + cal.n_fp_, np.bincount(data.pred, minlength=data.n_classes)
    )
    # the file keeps statistics once, at the top
    doc = cal.to_dict()
    assert "stats" in doc["evidence"] and "stats" not in doc["state"]["model"]["evidence"]
    again = persist.loads(persist.dumps(cal))
    assert again.method_ == chosen and again.cv_samples_ == 700
    np.testing.assert_array_equal(again.predict(data), cal.predict(data))


def test_merge_mismatches_are_clear_errors():
    a = ScoreStats.from_data(_sim(K=4))
    with pytest.raises(DataError, match="classes"):
        a.merge(ScoreStats.from_data(_sim(K=3)))
    with pytest.raises(DataError, match="cells"):
        a.merge(ScoreStats.from_data(_sim(K=4), n_cells=64))
    with pytest.raises(DataError, match="n_cells"):
        ScoreStats.from_data(_sim(), n_cells=0)
    cal = _quiet_fit(topcal.calibrator("hist"), _sim(K=4))
    with pytest.raises(DataError, match="classes"):  # a class the model does not know
        cal.update(_sim(K=5))
    before = cal.evidence_.stats.n_samples
    cal.update(_sim(K=3))  # data naming some of the model's classes is fine
    assert cal.evidence_.stats.n_samples > before and cal.classes_ == _sim(K=4).classes
    with pytest.raises(
        DataError, match="2-d array of scores"
    ):  # what fit says of the same input (issue 24)
        cal.update([1, 2, 3])


# ---------------------------------------------- label-shift counts from statistics
def test_grid_confusion_merges_and_draws_the_regions_of_the_data_on_the_grid():
    """GridConfusion (one pass, regions after it) = ConfusionStats.from_data of the scores at their
    cell midpoints."""
    data = _sim(n=4000, K=5, seed=2)
    whole = GridConfusion.from_data(data)
    rng = np.random.default_rng(1)
    parts = [
        GridConfusion.from_data(data.subset(i))
        for i in np.array_split(rng.permutation(data.n_rows), 9)
    ]
    for merged in (
        GridConfusion.merge_all(parts),
        GridConfusion.merge_all(parts[::-1]),
        parts[3].merge(*parts[:3], *parts[4:]),
    ):
        np.testing.assert_array_equal(merged.key, whole.key)
        np.testing.assert_array_equal(merged.count, whole.count)
    conf = whole.to_confusion()
    assert_confusion_equal(conf, ConfusionStats.from_data(on_grid(data)))
    assert (
        sum(e.size for e in conf.edges) > 5
    )  # several regions per class: the quantile rule is exercised
    raw = ConfusionStats.from_data(
        data
    )  # regions move by < one cell; the confusion matrix is the same
    np.testing.assert_array_equal(conf.confusion(), raw.confusion())
    for e, r in zip(conf.edges, raw.edges):
        assert e.size == r.size and np.all(np.abs(e - r) <= 0.5 / DEFAULT_CELLS + 1e-15)
    # sparse counting (few rows per part) and dense counting (the merge of all parts) agree
    small = [
        GridConfusion.from_data(data.subset(i), n_cells=8)
        for i in np.array_split(np.arange(data.n_rows), 100)
    ]
    dense = GridConfusion.from_data(data, n_cells=8)
    merged = GridConfusion.merge_all(small)
    np.testing.assert_array_equal(merged.key, dense.key)
    np.testing.assert_array_equal(merged.count, dense.count)
    assert_confusion_equal(dense.to_confusion(), ConfusionStats.from_data(on_grid(data, 8)))
    assert GridConfusion.from_data(load_phanns()) is None  # binned data: no true classes
    with pytest.raises(DataError, match="grid"):
        whole.merge(GridConfusion.from_data(data, n_cells=64))


def test_a_fit_from_evidence_keeps_the_confusion_counts_and_checks_them():
    data = _sim(n=2000)
    stats, grid = ScoreStats.from_data(data), GridConfusion.from_data(data)
    cal = _quiet_fit(topcal.calibrator("hist"), stats.to_data())
    assert cal.evidence_.confusion is None  # statistics alone carry no true classes
    got = topcal.calibrator("hist").fit(Evidence(stats, grid))
    ref = _quiet_fit(topcal.calibrator("hist"), stats.to_data())
    np.testing.assert_array_equal(got.predict(data), ref.predict(data))
    assert_confusion_equal(got.evidence_.confusion, grid.to_confusion())
    got.adapt(priors=np.full(data.n_classes, 0.25))  # adaptable without a refit
    with pytest.raises(DataError, match="GridConfusion"):
        topcal.calibrator("hist").fit(Evidence(stats, grid.to_confusion()))
    with pytest.raises(DataError, match="grid"):
        topcal.calibrator("hist").fit(Evidence(stats, GridConfusion.from_data(data, n_cells=64)))


def test_update_from_statistics_with_confusion_counts_equals_a_per_sample_update():
    data = _sim(n=3000, seed=4)
    a, b = data.subset(np.arange(1200)), data.subset(np.arange(1200, 3000))
    ref = _quiet_fit(topcal.calibrator("kde-mon2"), a)
    cal = _quiet_fit(topcal.calibrator("kde-mon2"), a)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref.update(b)
        chunks = [b.subset(i) for i in np.array_split(np.arange(b.n_rows), 4)]
        new = cal.evidence_.confusion.count(chunks[0]).merge(
            *(cal.evidence_.confusion.count(c) for c in chunks[1:])
        )
        cal.update(ScoreStats.from_data(b), confusion=new)
    assert cal.evidence_.stats.equals(ref.evidence_.stats)
    assert_confusion_equal(cal.evidence_.confusion, ref.evidence_.confusion)
    with pytest.raises(ParameterError, match="counts are taken from its rows"):
        cal.update(b, confusion=new)
    fresh = _sim(n=600, seed=9)  # rows the model has not seen (b again is refused: issue 33)
    other = ConfusionStats.from_data(fresh)  # regions of other data: not this model's
    with pytest.raises(DataError, match="other score regions"):
        cal.update(ScoreStats.from_data(fresh), confusion=other)
    with pytest.raises(DataError, match="count them twice"):
        cal.update(ScoreStats.from_data(b), confusion=new)
    binned = _quiet_fit(topcal.calibrator("hist"), load_phanns())
    with pytest.raises(ParameterError, match="keeps no confusion counts"):
        binned.update(binned.evidence_.stats, confusion=new)


def test_fit_counts_its_statistics_on_first_use_bit_for_bit():
    """Issue 26: a fit keeps a compact copy of its rows and counts the confusion and score
    statistics
    when first asked; the counts equal the eager ones, and later changes to the caller's arrays do
    not
    reach them."""
    import topcal
    from topcal.evidence.confusion import ConfusionStats

    rng = np.random.default_rng(3)
    probs = rng.dirichlet(np.ones(4), 3000)
    labels = rng.integers(0, 4, 3000)
    data = topcal.TopLabelData.from_probs(probs, labels)
    eager_conf = ConfusionStats.from_data(data)
    eager_stats = ScoreStats.from_data(data)
    model = topcal.calibrator("hist", shrinkage=0).fit(data)
    kept = model.evidence_
    assert kept._rows is not None and kept._pending == {"stats", "confusion"}  # nothing counted yet
    data.score[:] = 0.5  # the caller changes its arrays after the fit
    data.labels[:] = 0
    lazy_stats, lazy_conf = model.evidence_.stats, model.evidence_.confusion
    for a, b in zip(lazy_stats.to_dict().values(), eager_stats.to_dict().values()):
        assert a == b
    assert all(np.array_equal(x, y) for x, y in zip(lazy_conf.edges, eager_conf.edges))
    assert all(np.array_equal(x, y) for x, y in zip(lazy_conf.counts, eager_conf.counts))
    assert kept._rows is None and not kept._pending  # the copy is gone


def test_auto_update_that_refits_another_method_says_so_after_save_and_load():
    # the choice needs full vectors (sts); an update from statistics refits the best score method,
    # and the
    # saved model keeps saying which method it replaced
    rng = np.random.default_rng(3)
    logits = rng.normal(size=(3000, 4)) * 3
    p = np.exp(logits)
    p /= p.sum(axis=1, keepdims=True)
    soft = np.exp(logits / 3)
    soft /= soft.sum(axis=1, keepdims=True)
    labels = np.array(
        [rng.choice(4, p=q) for q in soft]
    )  # the network is overconfident by one temperature
    data = topcal.TopLabelData.from_probs(p, labels)
    cal = _quiet_fit(
        topcal.calibrator("auto", candidates=["sts", "hist"]), data.subset(np.arange(2000))
    )
    assert cal.method_ == "sts"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cal.update(data.subset(np.arange(2000, 3000)))
    assert (
        cal.method_ == "hist"
        and cal.refitted_from_ == "sts"
        and "instead of sts" in cal.summary_line()
    )
    again = persist.loads(persist.dumps(cal))
    assert again.refitted_from_ == "sts" and again.summary_line() == cal.summary_line()
    fresh = persist.loads(
        persist.dumps(_quiet_fit(topcal.calibrator("auto", candidates=["sts", "hist"]), data))
    )
    assert fresh.refitted_from_ is None and "refitted" not in persist.dumps(fresh)
    doc = json.loads(persist.dumps(cal))
    doc["model"]["state"]["refitted_from"] = "nope"
    doc["sha256"] = persist.hashlib.sha256(
        persist.canonical_json(doc["model"]).encode()
    ).hexdigest()
    with pytest.raises(topcal.TopcalError, match="refitted_from"):
        persist.loads(json.dumps(doc))
