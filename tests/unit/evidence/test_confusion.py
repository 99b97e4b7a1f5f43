"""The label-shift confusion statistics held sparse: equal to the dense computation at a few
classes, exact merges, the sparse model-file layout and the older dense one, EM and BBSE as
before, and memory that follows the rows at many classes."""

import functools
import json
import tracemalloc

import numpy as np
import pytest

import topcal
from topcal import persist
from topcal.data import TopLabelData
from topcal.evidence.confusion import ConfusionStats, class_region_edges
from topcal.labelshift import estimate_priors
from topcal.labelshift import estimators as est_module
from topcal.labelshift.estimates import fp_mix, fp_weight
from topcal.labelshift.estimators import bbse_priors, em_priors, shrunk_fp_mix

from _frames import assert_confusion_equal, dense_layout, format_4_text
from _sim import with_weights


def top_scores(n, k, seed, *, zipf=1.2):
    """Top-score outputs with Zipf-distributed predicted classes: score ~ Beta(5, 1.5), correct
    with probability score^1.3, a wrong row's true class Zipf-distributed too."""
    rng = np.random.default_rng(seed)
    pred = np.minimum(rng.zipf(zipf, n) - 1, k - 1)
    score = rng.beta(5.0, 1.5, n)
    right = rng.random(n) < score**1.3
    other = np.minimum(rng.zipf(zipf, n) - 1, k - 1)
    other = np.where(other == pred, (pred + 1) % k, other)
    labels = np.where(right, pred, other)
    classes = [f"c{i}" for i in range(k)]
    return TopLabelData.from_scores(pred, score, labels, classes, score_range=(0.0, 1.0))


def dense_reference(data, min_fp=40, max_regions=4):
    """The counts as topcal computed them densely: per predicted class, (regions, K)."""
    K, w = data.n_classes, data.tp + data.fp
    edges, counts = [], []
    for k in range(K):
        rows = np.flatnonzero(data.pred == k)
        s, lab, wk = data.score[rows], data.labels[rows], w[rows]
        e = class_region_edges(s[lab != k], wk[lab != k], min_fp, max_regions)
        c = np.zeros((e.size + 1, K))
        for r, j, x in zip(np.searchsorted(e, s, side="left"), lab, wk):  # row order
            c[r, j] += x
        edges.append(e)
        counts.append(c)
    return edges, counts


@pytest.mark.parametrize("weighted", [False, True])
def test_sparse_counts_equal_the_dense_computation(weighted):
    data = top_scores(4000, 12, 0, zipf=1.5)
    if weighted:
        data = with_weights(data, np.random.default_rng(1).uniform(0.2, 3.0, data.n_rows))
    stats = ConfusionStats.from_data(data)
    edges, counts = dense_reference(data)
    for k in range(data.n_classes):
        np.testing.assert_array_equal(stats.edges[k], edges[k])
        np.testing.assert_array_equal(stats.counts[k], counts[k])
    conf = np.vstack([c.sum(axis=0) for c in counts])
    np.testing.assert_allclose(stats.confusion(), conf, rtol=1e-15, atol=0)
    np.testing.assert_allclose(stats.source_priors(), conf.sum(0) / conf.sum(), rtol=1e-15)
    np.testing.assert_allclose(
        stats.fp_totals(), conf.sum(0) - np.diag(conf), rtol=1e-15, atol=1e-12
    )
    assert stats.table.nnz == sum(int((c > 0).sum()) for c in counts)
    np.testing.assert_array_equal(
        stats.row_counts(data.pred, data.score),
        np.vstack(counts)[stats.cells(data.pred, data.score)],
    )


def test_merges_are_exact_in_any_order_and_split():
    data = top_scores(6000, 50, 2)
    whole = ConfusionStats.from_data(data)
    rng = np.random.default_rng(3)
    parts = [whole.count(data.subset(i)) for i in np.array_split(rng.permutation(6000), 5)]
    for order in ([0, 1, 2, 3, 4], [4, 2, 0, 3, 1]):
        merged = parts[order[0]].merge(*(parts[i] for i in order[1:]))
        assert (merged.table != whole.table).nnz == 0
        np.testing.assert_array_equal(merged.table.indptr, whole.table.indptr)
        np.testing.assert_array_equal(merged.table.indices, whole.table.indices)
    twice = whole.add(data)
    np.testing.assert_array_equal(twice.table.data, 2 * whole.table.data)


def test_model_file_round_trip_and_old_dense_layout():
    data = top_scores(5000, 30, 4)
    stats = ConfusionStats.from_data(data)
    d = json.loads(json.dumps(stats.to_dict()))
    assert d["layout"] == "cells" and all(isinstance(v, int) for v in d["count"])
    back = ConfusionStats.from_dict(d, stats.classes)
    assert (back.table != stats.table).nnz == 0
    for a, b in zip(back.edges, stats.edges):
        np.testing.assert_array_equal(a, b)
    # the older dense layout is read only through persist.migrate (a file of an earlier format)
    with pytest.raises(ValueError, match="unknown layout"):
        ConfusionStats.from_dict(json.loads(json.dumps(dense_layout(stats))), stats.classes)
    model = topcal.calibrator("hist").fit(data)
    text = format_4_text(model, dense_layout(model.evidence_.confusion))
    loaded = persist.loads(text)
    assert_confusion_equal(loaded.evidence_.confusion, model.evidence_.confusion)
    # saved again: the sparse layout, the file a fit writes
    assert persist.dumps(loaded) == persist.dumps(model)


def test_em_and_bbse_equal_the_dense_computation():
    source = top_scores(8000, 20, 5, zipf=1.6)
    use = top_scores(3000, 20, 6, zipf=1.3).without_labels()
    model = topcal.calibrator("hist").fit(source)
    stats = model.evidence_.confusion
    N = np.vstack(stats.counts)
    cells = stats.cells(use.pred, use.score)
    ps = stats.source_priors()
    got = estimate_priors(model, use, estimator="bbse", n_bootstrap=0, shrink=1.0).priors
    want = bbse_priors(N, np.bincount(cells, minlength=N.shape[0]), ps, prior_strength=0.3)
    np.testing.assert_array_equal(got, want)
    # the sparse solve (used where the dense table is too big) finds the same minimiser
    sparse_way = bbse_priors(
        stats.table, np.bincount(cells, minlength=N.shape[0]), ps, prior_strength=0.3
    )
    np.testing.assert_allclose(sparse_way, want, atol=1e-9)
    # EM on the sparse cell posteriors equals EM on the dense (n, K) posteriors
    c = model.predict(use)
    q = shrunk_fp_mix(N[cells], use.pred, stats.confusion(), 10.0)
    dense_post = q * (1.0 - c)[:, None]
    dense_post[np.arange(use.n_rows), use.pred] = c
    em = estimate_priors(model, use, n_bootstrap=0, shrink=1.0).priors
    np.testing.assert_allclose(em, em_priors(dense_post, ps, prior_strength=0.1), atol=1e-8)
    # the FP mix and its weighted mean as the dense formula gives them
    w = np.random.default_rng(7).uniform(0.0, 3.0, 20)
    q2, wbar = fp_mix(stats, use.pred, use.score, w, 10.0)
    np.testing.assert_allclose(q2, q, rtol=1e-13, atol=1e-15)
    np.testing.assert_allclose(fp_weight(stats, use.pred, use.score, w, 10.0), q @ w, rtol=1e-13)
    np.testing.assert_allclose(wbar, q @ w, rtol=1e-13)


def test_bbse_sparse_threshold_is_the_only_switch(monkeypatch):
    source = top_scores(6000, 15, 8, zipf=1.6)
    use = top_scores(2000, 15, 9, zipf=1.3).without_labels()
    model = topcal.calibrator("hist").fit(source)
    dense = estimate_priors(model, use, estimator="bbse", n_bootstrap=0, shrink=1.0).priors
    monkeypatch.setattr(est_module, "BBSE_DENSE_CELLS", 0)
    monkeypatch.setattr("topcal.labelshift.estimates.BBSE_DENSE_CELLS", 0)
    sparse_way = estimate_priors(model, use, estimator="bbse", n_bootstrap=0, shrink=1.0).priors
    np.testing.assert_allclose(sparse_way, dense, atol=1e-9)


@pytest.mark.slow  # memory at 10^5 classes
def test_memory_follows_the_rows_at_many_classes():
    """10^5 classes, 2 x 10^4 rows: the dense per-class counts were rows x K (16 GB here); the
    sparse ones are a few times the input, and a class never predicted costs ~nothing in the
    file."""
    data = top_scores(20_000, 100_000, 10)
    tracemalloc.start()
    stats = ConfusionStats.from_data(data)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 40e6, peak
    assert stats.table.nnz <= data.n_rows
    text = json.dumps(stats.to_dict())
    assert len(text) < 40 * data.n_rows + 8 * data.n_classes, len(text)
    back = ConfusionStats.from_dict(json.loads(text), data.classes)
    assert (back.table != stats.table).nnz == 0
    merged = stats.merge(stats.count(data))
    np.testing.assert_array_equal(merged.column_sums(), 2 * stats.column_sums())


@functools.cache
def _zipf_hist():
    """hist fitted on top_scores(20000, 30, 5, zipf=1.4), once for the estimators below (read
    only)."""
    return topcal.calibrator("hist").fit(top_scores(20000, 30, 5, zipf=1.4))


@pytest.mark.parametrize("estimator", ["em", "bbse"])
def test_safety_simulation_held_sparse_decides_as_the_dense_one(monkeypatch, estimator):
    """Past SIM_DENSE_CELLS the simulation draws from the counted entries plus each cell's spread
    (another stream, the same population): the same decisions on a clear shift and on none."""
    from topcal.labelshift import safety

    model = _zipf_hist()
    for use_zipf, want in ((1.1, "adapted"), (1.4, "not adapted")):
        use = top_scores(5000, 30, 6, zipf=use_zipf).without_labels()
        got = []
        for limit in (safety.SIM_DENSE_CELLS, 0):
            monkeypatch.setattr(safety, "SIM_DENSE_CELLS", limit)
            est = estimate_priors(model, use, estimator=estimator, n_bootstrap=0)
            got.append(est.shrink)
        if want == "adapted":
            assert min(got) >= 0.9, got
        else:
            assert got == [0.0, 0.0], got
