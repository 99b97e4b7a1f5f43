"""The histogram's lookups over all classes at once equal its class-by-class definitions, and
its compact model-file layout (equal-width edges as (low, high, bins)) loads as the listed one.

The references below are the per-class loops the vectorised code replaced (the
``_interval_counts`` / ``_interval_bias`` of the histogram before), run on the same fitted
states: the results must agree bit for bit.
"""

import json

import numpy as np
import pytest

import topcal
from topcal import TopLabelData
from topcal._numeric import bin_index
from topcal.calibrators.counts.histogram import class_gradient
from topcal.data import rows_by_class
from topcal.errors import DegenerateClassWarning

# the labels hold classes never predicted (their fallback is tested elsewhere)
pytestmark = pytest.mark.filterwarnings("ignore", category=DegenerateClassWarning)


def zipf_data(n: int, K: int, seed: int) -> TopLabelData:
    """Zipf-predicted classes (most with a row or two), score ~ Beta(5, 1.5), right with
    probability s^1.3: next-token-like outputs."""
    rng = np.random.default_rng(seed)
    p = 1.0 / np.arange(1, K + 1) ** 1.1
    pred = np.minimum(np.searchsorted(np.cumsum(p / p.sum()), rng.random(n)), K - 1)
    score = rng.beta(5.0, 1.5, n)
    label = np.where(rng.random(n) < score**1.3, pred, (pred + 1) % K)
    return TopLabelData.from_scores(pred, score, label)


def source_bins(st):
    n = st["tp"] + st["fp"]
    idx = np.arange(n.size)
    full = np.flatnonzero(n > 0)
    if full.size == 0:
        return idx, idx
    pos = np.searchsorted(full, idx)
    left = full[np.clip(pos - 1, 0, full.size - 1)]
    right = full[np.clip(pos, 0, full.size - 1)]
    dl = np.where(pos > 0, idx - left, np.inf)
    dr = np.where(pos < full.size, right - idx, np.inf)
    a = np.where(n > 0, idx, np.where(dl <= dr, left, right))
    b = np.where(n > 0, idx, np.where(dr <= dl, right, left))
    return a, b


def interval_counts_by_class(model, pred, score):
    t, n = np.zeros(score.size), np.zeros(score.size)
    for k, rows in rows_by_class(pred, len(model.class_state_)):
        st = model.class_state_[k]
        if st is None:
            continue
        a, b = source_bins(st)
        i = bin_index(st["edges"], score[rows])
        both = a[i] != b[i]
        t[rows] = st["tp"][a[i]] + np.where(both, st["tp"][b[i]], 0.0)
        n[rows] = t[rows] + st["fp"][a[i]] + np.where(both, st["fp"][b[i]], 0.0)
    return t, n


def interval_bias_by_class(model, pred, score):
    bias = np.zeros(score.size)
    for k, rows in rows_by_class(pred, len(model.class_state_)):
        st = model.class_state_[k]
        if st is None or st["edges"].size <= 2:
            continue
        e = st["edges"]
        mid = 0.5 * (e[:-1] + e[1:])
        c = model._curve_rows(np.full(mid.size, k), mid)
        full = np.flatnonzero(st["tp"] + st["fp"] > 0)
        if full.size < 2:
            continue
        slope = np.zeros(mid.size)
        slope[full] = np.gradient(c[full], mid[full])
        a, b = source_bins(st)
        i = bin_index(e, score[rows])
        along = 0.5 * (slope[a[i]] + slope[b[i]])
        bias[rows] = along * (score[rows] - 0.5 * (mid[a[i]] + mid[b[i]]))
    return bias


@pytest.fixture(scope="module")
def many():
    """3,000 classes, about 1,200 of them predicted (most with one or two rows)."""
    return zipf_data(12_000, 3_000, 0)


@pytest.fixture(scope="module")
def hist_many(many):
    """hist with its default parameters fitted on ``many``, once (the tests taking it read it,
    or a JSON copy of its dict)."""
    return topcal.calibrator("hist").fit(many)


def query_rows(data):
    """Every fitted row's class at its own score and at a fresh one (bin edges included)."""
    rng = np.random.default_rng(1)
    fresh = rng.random(data.pred.size)
    fresh[::50] = np.round(fresh[::50], 1)  # on the equal-width edges
    return np.concatenate([data.pred, data.pred]), np.concatenate([data.score, fresh])


@pytest.mark.parametrize(
    # each strategy and each shrinkage once in the fast lane, the other two pairs in the slow one
    "shrinkage, strategy",
    [
        ("auto", "quantile"),
        (0, "uniform"),
        pytest.param("auto", "uniform", marks=pytest.mark.slow),
        pytest.param(0, "quantile", marks=pytest.mark.slow),
    ],
)
def test_all_classes_at_once_equal_class_by_class(many, strategy, shrinkage):
    m = topcal.calibrator("hist", strategy=strategy, shrinkage=shrinkage).fit(many)
    pred, score = query_rows(many)
    t, n = m._interval_counts(pred, score)
    t0, n0 = interval_counts_by_class(m, pred, score)
    np.testing.assert_array_equal(t, t0)
    np.testing.assert_array_equal(n, n0)
    bias = m._interval_bias(pred, score)
    assert np.count_nonzero(bias) > pred.size // 4  # the comparison is not of zeros
    np.testing.assert_array_equal(bias, interval_bias_by_class(m, pred, score))
    # the local counts and the unshrunk values, against the per-class lookups
    t, n = m._local_counts_rows(pred, score)
    conf = m._predict_rows(pred, score)
    for k, rows in rows_by_class(pred, len(m.classes_)):
        st = m.class_state_[k]
        if st is None:
            assert not t[rows].any() and not n[rows].any()
            continue
        tk, nk = m._local_counts(k, score[rows])
        np.testing.assert_array_equal(t[rows], tk)
        np.testing.assert_array_equal(n[rows], nk)
        np.testing.assert_array_equal(conf[rows], m._predict_class(st, score[rows]))


def test_class_gradient_is_numpys_per_group():
    rng = np.random.default_rng(3)
    sizes = rng.integers(2, 9, 400)
    group = np.repeat(np.arange(sizes.size) * 3, sizes)  # numbers with gaps
    steps = np.where(
        np.repeat(rng.random(sizes.size) < 0.5, sizes),  # half the groups evenly spaced
        0.1,
        rng.random(group.size) + 0.01,
    )
    x = np.cumsum(steps)
    y = rng.random(group.size)
    got = class_gradient(y, x, group)
    a = 0
    for s in sizes.tolist():
        np.testing.assert_array_equal(got[a : a + s], np.gradient(y[a : a + s], x[a : a + s]))
        a += s


def test_interval_of_a_class_without_state_and_of_one_bin():
    d = TopLabelData.from_scores([0, 0, 0, 1], [0.2, 0.7, 0.9, 0.5], [0, 1, 0, 1])
    m = topcal.calibrator("hist", n_bins=1, shrinkage=0).fit(d)
    np.testing.assert_array_equal(m._interval_bias(np.array([0, 1]), np.array([0.3, 0.5])), 0.0)
    t, n = m._interval_counts(np.array([0, 1]), np.array([0.3, 0.5]))
    np.testing.assert_array_equal(t, [2.0, 1.0])
    np.testing.assert_array_equal(n, [3.0, 1.0])


@pytest.mark.parametrize("strategy", ["uniform", "quantile"])
def test_compact_file_round_trip(many, strategy):
    m = topcal.calibrator("hist", strategy=strategy).fit(many)
    d = m.to_dict()
    states = [s for s in d["state"]["class_state"] if s is not None]
    if strategy == "uniform":
        assert all("edges" not in s and s["bins"] == [0.0, 1.0, 10] for s in states)
    else:
        assert any("edges" in s for s in states)
    assert all(isinstance(c, int) for s in states for c in s["tp"] + s["fp"])
    back = type(m).from_dict(json.loads(json.dumps(d)))
    pred, score = query_rows(many)
    data = TopLabelData(tuple(m.classes_), pred, score, tuple(m.score_range_))
    np.testing.assert_array_equal(back.predict(data), m.predict(data))
    for a, b in zip(back.predict_interval(data, 0.9), m.predict_interval(data, 0.9)):
        np.testing.assert_array_equal(a, b)
    for s0, s1 in zip(back.class_state_, m.class_state_):
        assert (s0 is None) == (s1 is None)
        if s0 is not None:
            np.testing.assert_array_equal(s0["edges"], s1["edges"])


def test_listed_edges_still_load(many, hist_many):
    """Files written before the compact layout list every class's edges and float counts."""
    m = hist_many
    d = json.loads(json.dumps(m.to_dict()))
    compact = len(json.dumps(d["state"]["class_state"]))
    for s in d["state"]["class_state"]:
        if s is not None:
            lo, hi, nb = s.pop("bins")
            s["edges"] = np.linspace(lo, hi, nb + 1).tolist()
            s["tp"], s["fp"] = [float(c) for c in s["tp"]], [float(c) for c in s["fp"]]
    assert len(json.dumps(d["state"]["class_state"])) > compact * 1.5
    back = type(m).from_dict(json.loads(json.dumps(d)))
    pred, score = query_rows(many)
    data = TopLabelData(tuple(m.classes_), pred, score, tuple(m.score_range_))
    np.testing.assert_array_equal(back.predict(data), m.predict(data))


@pytest.mark.parametrize(
    "bins", [[0.0, 1.0, 0], [1.0, 0.0, 10], [0.0, 1.0, 2.5], [0.0, float("nan"), 3]]
)
def test_malformed_bins_are_refused(hist_many, bins):
    m = hist_many
    d = json.loads(json.dumps(m.to_dict()))
    st = next(s for s in d["state"]["class_state"] if s is not None)
    st["bins"] = bins
    with pytest.raises((ValueError, topcal.errors.TopcalError)):
        type(m).from_dict(d)
