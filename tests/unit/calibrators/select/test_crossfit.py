"""Cross-fitting without waste (issue 26): one fingerprint per fit, one cross-fit helper."""

import warnings

import numpy as np
import pytest

import topcal
from topcal.evidence import fingerprint as fingerprint_module
from topcal.data import TopLabelData
from topcal.evidence.fingerprint import Fingerprint


def _quiet(f):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return f()


def _vectors(seed, n, k, sharp=1.0):
    """Softmax outputs with a class-dependent miscalibration, and labels drawn from them."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, k, n)
    z = rng.normal(0.0, 2.0, size=(n, k))
    z[np.arange(n), labels] += 2.0
    z *= sharp / np.linspace(0.5, 2.0, k)[None, :]
    p = np.exp(z - z.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    return TopLabelData.from_probs(p, labels, classes=[f"c{i}" for i in range(k)])


def test_auto_hashes_its_rows_once_and_its_model_carries_the_fingerprint(monkeypatch, tmp_path):
    data = _vectors(0, 600, 4)
    calls = []
    real = Fingerprint.of.__func__

    def counting(cls, d):
        calls.append(d.n_rows)
        return real(cls, d)

    monkeypatch.setattr(fingerprint_module.Fingerprint, "of", classmethod(counting))
    model = _quiet(
        lambda: topcal.calibrator("auto", candidates=["pooled-hist", "hist", "sts", "bts"]).fit(
            data
        )
    )
    assert calls == [
        data.n_rows
    ]  # the top-level fit only: no fold's fit, no reference, no second for model_
    monkeypatch.undo()
    assert model.evidence_.fingerprint == Fingerprint.of(data)
    assert (
        model.model_.evidence_.is_empty
    )  # auto's choice is a part of auto, which holds the evidence
    path = tmp_path / "auto.json"
    model.save(path)
    again = topcal.load(path)
    assert again.evidence_.fingerprint == model.evidence_.fingerprint
    # the guarantee check still refuses the fitting rows
    same, share = again.evidence_.fingerprint.containment(data)
    assert same and share == 1.0


def test_a_scratch_fit_keeps_nothing_for_later():
    data = _vectors(1, 300, 3)
    model = topcal.calibrator("hist")
    _quiet(lambda: model.fit(data, keep="predictions"))
    assert (
        model.evidence_.fingerprint is None
        and model.evidence_.stats is None
        and model.evidence_.confusion is None
    )
    full = _quiet(lambda: topcal.calibrator("hist").fit(data))
    np.testing.assert_array_equal(model.predict(data), full.predict(data))
    assert (
        full.evidence_.fingerprint is not None
        and full.evidence_.stats is not None
        and full.evidence_.confusion is not None
    )


def _row_refit(data, names, n_folds, seed):
    """The K-fold loop as it was before the cross-fit helper: every fold's model an ordinary fit on
    its rows."""
    from topcal.data import kfold_split

    folds = kfold_split(data, n_folds, seed=seed)
    out = {}
    for n in names:
        parts = []
        for f in range(n_folds):
            train = TopLabelData.concat([folds[g] for g in range(n_folds) if g != f])
            parts.append(_quiet(lambda: topcal.calibrator(n).fit(train)).predict(folds[f]))
        out[n] = np.concatenate(parts)
    return TopLabelData.concat(folds), out


def _binned(seed):
    rng = np.random.default_rng(seed)
    edges = np.linspace(0.3, 1.0, 15)
    pred = np.repeat(np.arange(3), 14)
    lo, hi = np.tile(edges[:-1], 3), np.tile(edges[1:], 3)
    tp = rng.integers(0, 40, pred.size).astype(float)
    fp = rng.integers(0, 15, pred.size).astype(float)
    return TopLabelData.from_binned(pred, lo, hi, tp, fp, classes=["a", "b", "c"])


SETS = {
    "vectors": lambda: _vectors(2, 900, 5),
    "sharp": lambda: _vectors(3, 700, 3, sharp=2.0),
    "binned": lambda: _binned(4),
}


@pytest.mark.slow
@pytest.mark.parametrize("which", sorted(SETS))
def test_auto_choice_and_table_equal_the_row_refit_path(which):
    """Tolerance: 1e-9 relative on every candidate's mean NLL and standard errors where the helper's
    fits are
    ordinary fits on the same rows (only the sums of the table may differ in their last bits); 1e-6
    for the
    warm-started ones (sts, hier-*: the optimiser stops at 1e-10 relative on the loss
    from another start); where a vector map (vs, sms, warm-started since issue 36) is the
    candidate or the lead, 1e-5 on the mean NLL and 1e-3 on the standard errors: a fold's vs/sms
    is an approximate fit (docs/vector.md#fold-fits: its first-stage temperature one Newton step
    from the all-data one, its solve stopped before its last step), whose confidences differ from
    this helper's cold fits by ~1e-4 relative on these small sets (720-1,680 training rows a fold):
    mean NLLs up to 6.5e-6 apart, standard errors 1.4e-4, paired differences' standard errors
    7.5e-4 (vs against the lead sms: two close maps, both approximate)."""
    from topcal.calibrators.select.rules import choose, paired_se
    from topcal.metrics import nll
    from topcal._numeric import binary_nll

    data = SETS[which]()

    def runs(n):  # auto's own filter: full vectors, and the class counts a candidate declares
        cls = topcal.calibrators.get_class(n)
        lo, hi = vars(cls).get("auto_min_classes", 0), vars(cls).get("auto_max_classes", np.inf)
        return (data.has_full or not cls.needs_full) and lo <= data.n_classes <= hi

    names = [n for n in topcal.calibrators.select.rules.DEFAULT_CANDIDATES if runs(n)]
    model = _quiet(lambda: topcal.calibrator("auto").fit(data))
    target, conf = _row_refit(data, names, 5, 0)
    cv = {}
    loss = {n: (binary_nll(1.0, 0.0, c), binary_nll(0.0, 1.0, c)) for n, c in conf.items()}
    for n, c in conf.items():
        cv[n] = {"nll": nll(target, c).overall, "se": paired_se(target.tp, target.fp, *loss[n])[1]}
    lead = min(cv, key=lambda n: cv[n]["nll"])
    for n in cv:
        cv[n]["diff_se"] = paired_se(target.tp, target.fp, *loss[n], *loss[lead])[1]
    assert set(model.cv_) == set(cv)
    for n in cv:
        classes = [topcal.calibrators.get_class(n), topcal.calibrators.get_class(lead)]
        vector = any(getattr(c, "_warm_refit", False) for c in classes)
        rtol = 1e-5 if vector else 1e-6 if any(c._warm_starts for c in classes) else 1e-9
        for key in ("nll", "se", "diff_se"):
            tol = 1e-3 if vector and key != "nll" else rtol
            np.testing.assert_allclose(
                model.cv_[n][key], cv[n][key], rtol=tol, atol=0, err_msg=f"{n} {key}"
            )
    assert (model.method_, model.best_) == choose(cv, 1.0)


@pytest.mark.slow
def test_compare_kfold_runs_through_the_helper_and_reports_a_failing_method(monkeypatch):
    from topcal.errors import ConvergenceError
    from topcal.evaluate import compare_methods

    data = _vectors(5, 500, 3)
    res = _quiet(lambda: compare_methods(data, ["hist", "sts", "auto"], folds=3, seed=1))
    target, conf = _row_refit(data, ["hist", "sts"], 3, 1)
    for n in ("hist", "sts"):
        expect = topcal.evaluate.evaluate(target, conf[n])["nll"]["overall"]
        np.testing.assert_allclose(
            res["methods"][n]["nll"]["overall"], expect, rtol=1e-12 if n == "hist" else 1e-6
        )
    assert [c["fold"] for c in res["choices"]["auto"]] == [1, 2, 3]
    cls = topcal.calibrators.get_class("sts")
    real, calls = cls._fit, []

    def fails(
        self, d
    ):  # the first call is the all-data fit that warm-starts the folds', then folds 1, 2, ...
        calls.append(self._warm is not None)
        if len(calls) in bad:
            raise ConvergenceError("made to fail")
        return real(self, d)

    monkeypatch.setattr(cls, "_fit", fails)
    bad = {3}
    res = _quiet(lambda: compare_methods(data, ["hist", "sts"], folds=3))
    assert res["failed"] == {"sts": "fold 2: ConvergenceError: made to fail"} and calls == [
        False,
        True,
        True,
    ]
    assert "hist" in res["methods"] and "sts" not in res["methods"]
    # an all-data fit that fails only loses the warm start: the folds fit from the fixed start
    bad, calls[:] = {1}, []
    res = _quiet(lambda: compare_methods(data, ["sts"], folds=3))
    assert calls == [False, False, False, False] and "sts" in res["methods"] and not res["failed"]


def test_softplus_both_equals_logaddexp_within_two_ulp():
    """The same as ``np.logaddexp`` to the last bit or two: which SIMD path numpy's exp, log1p and
    logaddexp take depends on the processor (bit for bit on AVX2, 1 ulp apart on some AVX-512
    machines)."""
    from topcal._numeric import softplus_both

    rng = np.random.default_rng(6)
    m = np.concatenate(
        [rng.normal(0, 5, 5000), rng.normal(0, 60, 500), [0.0, -0.0, 1e-300, -1e-300, 700, -700]]
    )
    neg, pos = softplus_both(m)
    np.testing.assert_array_max_ulp(neg, np.logaddexp(0.0, -m), maxulp=2)
    np.testing.assert_array_max_ulp(pos, np.logaddexp(0.0, m), maxulp=2)


@pytest.mark.parametrize("k", [1, 2, 10, 16, 17, 40])
def test_row_max_equals_numpys_row_max(k):
    """The column-by-column maximum (short rows) is numpy's, NaN and infinities included, on a
    strided view too."""
    from topcal._numeric import ROW_MAX_LOOP, row_max

    rng = np.random.default_rng(k)
    x = rng.normal(0, 3, (300, 2 * k))[:, ::2]  # a view: no contiguous rows
    x[5, 0], x[7, k - 1], x[9, :] = np.nan, np.inf, -np.inf
    x[11, k // 2] = np.nan
    assert ROW_MAX_LOOP == 16  # the parameters cover both of its paths
    for keep in (False, True):
        got, want = row_max(x, keepdims=keep), x.max(axis=1, keepdims=keep)
        assert got.shape == want.shape
        np.testing.assert_array_equal(got, want)  # NaN where numpy has NaN
    with pytest.raises(ValueError):
        row_max(np.empty((3, 0)))


@pytest.mark.parametrize("tied", [False, True])
def test_canonical_order_equals_the_sort_on_every_key(tied):
    from topcal.data import canonical_order

    data = _vectors(7, 3000, 4)
    if tied:  # rounded scores: many rows tie on (class, score), the later keys order them
        data = TopLabelData.from_probs(
            np.round(data.full, 2) + 1e-3, data.labels, classes=data.classes, renormalize=True
        )
        assert len(np.unique(np.stack([data.pred, data.score]), axis=1)[0]) < data.n_rows
    w = np.random.default_rng(0).random(data.full.shape[1]) + 0.5
    keys = [data.pred, data.score, data.labels, data.tp, data.fp, np.nan_to_num(data.full) @ w]
    np.testing.assert_array_equal(canonical_order(data), np.lexsort(keys[::-1]))


@pytest.mark.slow  # memory at 60,000 x 20 (a peak against the input's size)
@pytest.mark.parametrize("name, most", [("sts", 2.2), ("csts", 2.0), ("bts", 1.0)])
def test_temperature_fit_reads_the_score_matrix_through_its_row_order_without_copying_it(
    name, most
):
    """Peak traced memory of a fit ÷ the (n, K) input: before, the canonical row order copied the
    matrix
    (sts 2.86, csts 4.49, bts 1.79 here; now 1.86, 1.52, 0.63); the fit is the one on the rows put
    in that order first, bit for bit."""
    import tracemalloc

    from topcal.data import canonical_order

    data = _vectors(8, 60000, 20)
    tracemalloc.start()
    try:
        # the method alone: the vector map's own peak is test_full_vector's
        model = _quiet(lambda: topcal.calibrator(name).fit(data, vector=False))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak / data.full.nbytes < most
    ordered = data.subset(canonical_order(data))  # already in order: the fit reads it as it is
    again = _quiet(lambda: topcal.calibrator(name).fit(ordered))
    np.testing.assert_array_equal(model.temperature_, again.temperature_)
    np.testing.assert_array_equal(model.param_cov_, again.param_cov_)
    np.testing.assert_array_equal(model.class_nll_, again.class_nll_)


def _small_classes(seed):
    """Many small classes (ImageNet's regime: a few dozen rows a class), top score only."""
    d = _vectors(seed, 3000, 60, sharp=1.5)
    return TopLabelData(d.classes, d.pred, d.score, d.score_range, tp=d.tp, fp=d.fp)


@pytest.mark.slow
@pytest.mark.parametrize("which", ["vectors", "sharp", "binned", "small"])
def test_a_folds_local_strength_search_finds_the_grid_searchs_strength(which):
    """A fold's hier-* fit, warm-started, searches the strength from the all-data choice (3-5 Newton
    solves instead of 15 where the choice moves little); it must land on the strength of the full
    grid
    scan on the same rows (a cold scratch fit), and its confidences within 1e-6 relative of that
    fit's
    (another start). A fold's pooled-beta (one class: its own pool) searches no strength: its
    confidences
    are an ordinary fit's within 1e-8 relative."""
    from topcal.calibrators.select.crossfit import scratch_fit
    from topcal.data import kfold_split

    data = _small_classes(5) if which == "small" else SETS[which]()
    folds = kfold_split(data, 5, seed=0)
    for name in ("hier-platt", "hier-beta", "pooled-beta"):
        warm = scratch_fit(name, data)
        for f in range(5):
            train = TopLabelData.concat([folds[g] for g in range(5) if g != f])
            local = scratch_fit(name, train, warm=warm)
            if name == "pooled-beta":
                full = _quiet(lambda: topcal.calibrator(name).fit(train))
                assert not local.model_._strength_fits and len(full.model_._strength_fits) >= 14
                np.testing.assert_allclose(
                    local.predict(folds[f]), full.predict(folds[f]), rtol=1e-8, atol=0
                )
                continue
            grid = scratch_fit(name, train)
            assert len(local._strength_fits) < len(grid._strength_fits), (
                name,
                f,
            )  # the local search ran
            assert local.strength_ == grid.strength_, (name, f)
            np.testing.assert_allclose(
                local.predict(folds[f]), grid.predict(folds[f]), rtol=1e-6, atol=0
            )


def test_a_folds_temperature_fits_share_one_order_and_split_and_fit_as_alone(monkeypatch):
    """Inside cross_fit's sharing block the fold's sts/tswa/csts/bts/btswa order their rows once and
    keep the
    order (and the split of the score vectors: foldmemo.py); each fit's confidences equal its fit
    alone bit
    for bit; outside the block nothing is kept."""
    from topcal.calibrators import foldmemo
    from topcal.calibrators.select.crossfit import scratch_fit
    from topcal.calibrators.temperature import calibrator as tcal

    data = _vectors(7, 800, 6)
    calls = []
    real_order = tcal.canonical_order

    def order(d):
        calls.append(d.n_rows)
        return real_order(d)

    monkeypatch.setattr(tcal, "canonical_order", order)
    names = ["sts", "tswa", "csts", "bts", "btswa"]
    alone = {n: scratch_fit(n, data).predict(data) for n in names}
    assert len(calls) == 5
    calls.clear()
    with foldmemo.sharing(data):
        together = {n: scratch_fit(n, data).predict(data) for n in names}
        assert foldmemo.shared(data)
        kept = foldmemo.memo(data, "canonical_order", lambda: None)
        # kept() reads without computing or keeping anything
        assert foldmemo.kept(data, "canonical_order") is kept
        assert foldmemo.kept(data, "nothing") is None
        assert foldmemo.memo(data, "nothing", lambda: 3) == 3
    assert len(calls) == 1 and kept is not None and kept.shape == (data.n_rows,)
    assert foldmemo.kept(data, "canonical_order") is None  # the block's results are gone
    for n in names:
        np.testing.assert_array_equal(together[n], alone[n], err_msg=n)
    assert not foldmemo.shared(data)
    # outside a block memo computes every time: a user's array changed between two fits is read
    # again
    assert foldmemo.memo(data, "k", lambda: 1) == 1 and foldmemo.memo(data, "k", lambda: 2) == 2


@pytest.mark.parametrize("name", ["hier-platt", "hier-beta"])
def test_hierarchical_fits_merge_rows_of_equal_class_and_score_losslessly(name, monkeypatch):
    """Scores rounded to 2 digits: rows of equal (class, score) are merged into one with summed
    weights; the
    fit (strength, parameters, covariance, confidences) is the row-by-row fit's up to the order of
    sums
    (measured: parameters within 2e-14, covariance 1.2e-14, confidences 1.1e-15 relative)."""
    from topcal.calibrators.pooled import _rows as _hier_rows

    d = _vectors(11, 3000, 8, sharp=1.5)
    data = TopLabelData.from_scores(
        d.pred, np.round(d.score, 2), labels=d.labels, classes=d.classes
    )
    seen = []
    real = _hier_rows.class_order

    def spy(g, k):  # the fit's rows are grouped by class (the pooled rows of one class are not)
        seen.append(g.size)
        return real(g, k)

    monkeypatch.setattr(_hier_rows, "class_order", spy)
    merged = _quiet(lambda: topcal.calibrator(name).fit(data))
    assert seen and seen[0] * 4 < data.n_rows  # the rows were merged (at most 8 x 100 distinct)
    monkeypatch.setattr(_hier_rows, "MERGE_GAIN", np.inf)
    monkeypatch.setattr(_hier_rows, "BIN_GAIN", np.inf)  # no binned strength scan either
    seen.clear()
    rows = _quiet(lambda: topcal.calibrator(name).fit(data))
    assert seen == [data.n_rows]
    a, b = merged, rows
    assert a.strength_ == b.strength_
    np.testing.assert_allclose(a.theta_, b.theta_, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(a.cov_, b.cov_, rtol=1e-10, atol=1e-16)
    np.testing.assert_allclose(merged.predict(data), rows.predict(data), rtol=1e-12, atol=0)


def test_a_sharing_block_nested_in_one_of_the_same_data_keeps_the_outer_results():
    """cross_fit's all-data fits share their work (foldmemo.sharing on the data); where that data
    is already shared (a fold's auto inside compare's K folds), the inner block keeps the outer
    block's results and leaves them to it."""
    from topcal.calibrators import foldmemo

    data = _vectors(7, 100, 3)
    with foldmemo.sharing(data):
        assert foldmemo.memo(data, "k", lambda: 1) == 1
        with foldmemo.sharing(data):
            assert foldmemo.memo(data, "k", lambda: 2) == 1
            assert foldmemo.memo(data, "j", lambda: 3) == 3
        assert foldmemo.shared(data) and foldmemo.memo(data, "j", lambda: 4) == 3
    assert not foldmemo.shared(data) and foldmemo.memo(data, "k", lambda: 5) == 5


@pytest.mark.parametrize("binned", [False, True])
def test_kfold_groups_hold_their_folds_one_after_the_other(binned):
    from topcal.data import kfold_split
    from topcal.errors import ParameterError

    rng = np.random.default_rng(4)
    p = rng.dirichlet(np.ones(4), 600)
    data = TopLabelData.from_probs(p, rng.integers(0, 4, 600))
    if binned:
        data = TopLabelData.from_binned(
            ["a", "b", "a"], [0.1, 0.5, 0.8], [0.2, 0.6, 0.9], [5.0, 7.0, 9.0], [3.0, 2.0, 1.0]
        )
    folds = kfold_split(data, 5, seed=2)
    groups = [[0], [1, 2, 3, 4], [3, 1]]
    for g, part in zip(groups, kfold_split(data, 5, seed=2, groups=groups)):
        whole = TopLabelData.concat([folds[f] for f in g])
        for attr in ("pred", "score", "tp", "fp", "labels", "full"):
            a, b = getattr(whole, attr), getattr(part, attr)
            assert (a is None and b is None) or np.array_equal(a, b)
    with pytest.raises(ParameterError, match="groups"):
        kfold_split(data, 5, groups=[[5]])
    for bad in ([[]], [[1, 1]], [[1.5]], [[True]]):  # empty, a fold twice, not an index
        with pytest.raises(ParameterError, match="groups"):
            kfold_split(data, 5, groups=bad)
