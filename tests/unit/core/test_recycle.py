"""Recycled scratch arrays (issue 36): memory is handed out again only when nothing uses it, and a
fit that recycles every array it can gives the numbers of one that recycles none."""

import numpy as np
import pytest

import topcal
from topcal import _recycle
from topcal.data import TopLabelData
from topcal.errors import DataError

BIG = (2 * _recycle.MIN_BYTES // 800, 100)  # twice the size the pool starts at


def address(a):
    return a.__array_interface__["data"][0]


def test_outside_a_block_it_is_numpy_empty():
    a = _recycle.empty(BIG)
    assert a.base is None and a.shape == BIG and a.dtype == np.float64


def test_memory_comes_back_only_when_nothing_holds_it():
    with _recycle.recycling():
        a = _recycle.empty(BIG)
        a[:] = 1.0
        b = _recycle.empty(BIG)
        assert not np.shares_memory(a, b)  # a is alive: never handed out twice
        where = address(a)
        view = a[::3]
        del a
        c = _recycle.empty(BIG)
        assert address(c) != where  # a view of it lives on
        del view
        d = _recycle.empty((BIG[0] - 7, BIG[1]))  # dropped, and large enough: reused
        assert address(d) == where
        assert d.flags.c_contiguous and d.shape == (BIG[0] - 7, BIG[1])
        del b, c, d
        e = _recycle.empty((2 * BIG[0], BIG[1]))  # larger than every dropped one: fresh
        assert e.shape == (2 * BIG[0], BIG[1])


def test_nested_blocks_share_the_outer_pool_and_small_arrays_are_numpy_own():
    with _recycle.recycling():
        a = _recycle.empty(BIG)
        where = address(a)
        del a
        with _recycle.recycling():
            assert address(_recycle.empty(BIG)) == where
        small = _recycle.empty((10, 10))
        assert small.base is None
    with _recycle.recycling():  # a new block starts empty
        fresh = _recycle.empty(BIG)
        assert fresh.base is not None


@pytest.mark.parametrize("kind", ["probs", "logits"])
def test_a_fit_recycling_every_array_equals_one_recycling_none(monkeypatch, kind):
    # with the pool taking every array, any array handed out while still in use would change the
    # numbers: auto's choice, its cross-validation table and its confidences must not move
    rng = np.random.default_rng(3)
    n, k = 1500, 12
    z = rng.normal(0.0, 2.0, size=(n, k))
    y = rng.integers(0, k, n)
    z[np.arange(n), y] += 2.0
    if kind == "probs":
        p = np.exp(z - z.max(axis=1, keepdims=True))
        data = TopLabelData.from_probs(p / p.sum(axis=1, keepdims=True), y)
    else:
        data = TopLabelData.from_logits(z, y)

    def fit():
        m = topcal.calibrator("auto", candidates=("sts", "csts", "vs", "vs-hier-platt", "hist"))
        m.fit(data)
        return m.method_, m.cv_, m.predict(data)

    monkeypatch.setattr(_recycle, "MIN_BYTES", 1 << 62)
    plain = fit()
    monkeypatch.setattr(_recycle, "MIN_BYTES", 0)
    pooled = fit()
    assert pooled[0] == plain[0]
    assert {n: v["nll"] for n, v in pooled[1].items()} == {n: v["nll"] for n, v in plain[1].items()}
    np.testing.assert_array_equal(pooled[2], plain[2])


def test_subset_into_a_recycled_buffer_reads_the_rows_indexing_reads(monkeypatch):
    rng = np.random.default_rng(1)
    p = rng.dirichlet(np.ones(6), 400)
    data = TopLabelData.from_probs(p, rng.integers(0, 6, 400))
    monkeypatch.setattr(_recycle, "MIN_BYTES", 0)
    with _recycle.recycling():
        for index in (np.array([-1, 0, 399, -400, 5]), data.pred == 2, np.arange(0, 400, 7)):
            part = data.subset(index)
            assert part.full.base is not None  # from the pool
            np.testing.assert_array_equal(part.full, p[index])
            np.testing.assert_array_equal(part.pred, data.pred[index])
        with pytest.raises(DataError, match="out of range"):
            data.subset(np.array([0, 400]))


def test_concat_into_a_recycled_buffer_keeps_the_parts_dtype(monkeypatch):
    import dataclasses

    rng = np.random.default_rng(2)
    data = TopLabelData.from_probs(rng.dirichlet(np.ones(3), 40), rng.integers(0, 3, 40))
    low = dataclasses.replace(data, full=data.full.astype(np.float32))
    monkeypatch.setattr(_recycle, "MIN_BYTES", 0)
    with _recycle.recycling():
        both = TopLabelData.concat([low, low])
    assert both.full.dtype == np.float32
    np.testing.assert_array_equal(both.full, np.concatenate([low.full, low.full]))
