"""Batched and vectorised paths give the per-class results (issue 15)."""

import warnings

import numpy as np
import pytest

from topcal.calibrators.kde import _engine as eng
from topcal.calibrators import paper_calibrator
from topcal.data import TopLabelData
from topcal.errors import DegenerateClassWarning

from _sim import bench_probs, binned_engines, many_small_classes


def _many_small_classes(seed=0, k=50, n=4000, discrete=False):
    """Per-sample data with k classes of a few to a few hundred positives (tests/_sim.py)."""
    return many_small_classes(seed, k, n, concentration=0.7, levels=100 if discrete else None)


def test_vectorised_sign_count_equals_the_per_row_count():
    rng = np.random.default_rng(1)
    rows = []
    for _ in range(300):
        g = int(rng.integers(2, 40))
        kind = rng.integers(3)
        if kind == 0:
            c = rng.random(g)
        elif kind == 1:  # steps near the flat tolerance
            c = np.cumsum(
                rng.choice([-1.0, 0.0, 1.0], g) * rng.choice([0.5e-7, 1e-7, 2e-7, 1e-3], g)
            )
        else:
            c = np.round(rng.random(g) * 3) / 3
        rows.append(c)
    g = 40
    conf = np.zeros((len(rows), g))
    res = np.zeros((len(rows), g), dtype=bool)
    for i, c in enumerate(rows):
        conf[i, : c.size] = c
        conf[i, c.size :] = np.nan  # unresolved points may hold anything
        res[i, : c.size] = rng.random(c.size) < 0.8
        res[i, int(rng.integers(c.size))] = True  # at least one resolved point, as in every scan
    got = eng.count_sign_changes_rows(conf, res)
    want = [eng.count_sign_changes(conf[i], res[i]) for i in range(len(rows))]
    np.testing.assert_array_equal(got, want)
    all_res = np.isfinite(conf[:, :2]).all(axis=1)
    two = conf[all_res][:, :2]
    np.testing.assert_array_equal(
        eng.count_sign_changes_rows(two, np.ones_like(two, dtype=bool)), 0
    )


@pytest.mark.slow
@pytest.mark.parametrize(
    "method, boundary, discrete, engine",
    [
        ("kde-mon2", None, False, "auto"),
        ("kde-mon", "reflect", False, "auto"),
        ("kde-mon4", None, True, "auto"),
        ("kde-mon2", "reflect", True, "auto"),
        ("kde-mon2", None, False, "binned"),
        ("kde-mon", "reflect", False, "binned"),
        ("kde-mon4", None, True, "binned"),
    ],
)
def test_lockstep_scan_gives_the_per_class_curves(method, boundary, discrete, engine):
    data = _many_small_classes(seed=3, discrete=discrete)
    fits = {}
    for batched in (True, False):
        cal = paper_calibrator(method, boundary=boundary, engine=engine)
        cal.batch_classes = batched
        cal.compact = False  # the full tables, to compare
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DegenerateClassWarning)
            fits[batched] = cal.fit(data)
    a, b = fits[True], fits[False]
    kind = "exact" if engine == "auto" else engine
    scanned = [st for st in a.class_state_ if st is not None and st["engine"] == kind]
    assert len(scanned) > 35  # the lockstep path was exercised
    np.testing.assert_allclose(
        np.nan_to_num(a.bandwidth_), np.nan_to_num(b.bandwidth_), rtol=1e-12, atol=0
    )
    for sa, sb in zip(a.class_state_, b.class_state_):
        if sa is None:
            assert sb is None
            continue
        assert sa["sign_changes"] == sb["sign_changes"]
        assert sa["admissible"] == sb["admissible"]
        np.testing.assert_allclose(sa["table"], sb["table"], rtol=0, atol=1e-12)
    np.testing.assert_allclose(a.predict(data), b.predict(data), rtol=0, atol=1e-12)


def test_lockstep_scan_respects_the_rule_on_every_class():
    data = _many_small_classes(seed=5)
    cal = paper_calibrator("kde-mon2")
    cal.compact = False  # every class's kernel centres (a binned one's too)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DegenerateClassWarning)
        cal.fit(data)
    for st in cal.class_state_:
        if st is None or st["degenerate"] is not None:
            continue
        if st["admissible"]:
            assert st["sign_changes"] <= 2
        # the recorded count is the count of the chosen bandwidth's own curve
        e = eng.ExactEngine(st["points"], st["tp"], st["fp"], st["table_lo"], st["table_hi"])
        if st["engine"] == "exact":
            conf, res = e.scan([st["bandwidth"]])
            assert eng.count_sign_changes(conf[0], res[0]) == st["sign_changes"]


def test_grouped_shrinkage_loss_equals_the_per_group_loss():
    from topcal.calibrators import shrinkage as shr

    rng = np.random.default_rng(2)
    rows = 200_000  # more than one block of rows
    group = rng.integers(0, 300, rows)
    group[group == 7] = 8  # a group without rows
    n = rng.gamma(2.0, 20.0, rows) + 1.0
    t = n * rng.random(rows)
    tp = (rng.random(rows) < t / n).astype(float)
    fp = 1.0 - tp
    tp[::50] = 3.0  # binned rows: TP and FP weight on one row
    fp[::50] = 2.0
    r = rng.random(rows) * 0.98 + 0.01
    got = shr.loo_nll_by_group(t, n, tp, fp, r, group, 301)
    assert got.shape == (301, shr.M_GRID.size)
    np.testing.assert_array_equal(got[7], 0.0)
    np.testing.assert_array_equal(got[300], 0.0)
    for k in (0, 8, 150, 299):
        sel = group == k
        want = shr.loo_nll_grid(t[sel], n[sel], tp[sel], fp[sel], r[sel])
        np.testing.assert_allclose(got[k], want, rtol=1e-12)


@pytest.mark.parametrize("method", ["hist", "cum-opt", "kde-mon2"])
def test_shrunk_fit_and_predict_follow_the_per_class_definition(method):
    """The grouped fit/predict paths equal the per-class definitions (curve(k) per row, loss per
    class)."""
    from topcal.calibrators import calibrator, shrinkage as shr

    data = _many_small_classes(seed=9, k=30, n=3000)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DegenerateClassWarning)
        cal = calibrator(method, shrinkage="class")
        cal.cell_sums = (
            cal.count_run_width == 0
        )  # exact cells only (cum's runs: test_shrinkage's tolerance)
        cal.fit(data)
    got = cal.predict(data)
    for k in range(0, 30, 7):
        rows = data.pred == k
        np.testing.assert_allclose(
            got[rows], cal.curve(k, data.score[rows]).confidence, rtol=0, atol=1e-15
        )
        if cal.class_state_[k] is None:
            continue
        t, n = cal._local_counts(k, data.score[rows])
        want = shr.loo_nll_grid(
            t, n, data.tp[rows], data.fp[rows], cal._reference(data.score[rows])
        )
        np.testing.assert_allclose(cal.shrinkage_loss_[k], want, rtol=1e-10)


def test_blockwise_construction_equals_the_full_matrix_definition():
    rng = np.random.default_rng(4)
    n, k = 3000, 200  # several blocks of rows
    z = rng.normal(0.0, 3.0, (n, k))
    labels = rng.integers(0, k, n)
    e = np.exp(z - z.max(axis=1, keepdims=True))
    probs = e / e.sum(axis=1, keepdims=True)
    d = TopLabelData.from_logits(z, labels)
    np.testing.assert_array_equal(d.pred, np.argmax(z, axis=1))
    np.testing.assert_array_equal(d.score, probs[np.arange(n), d.pred])  # bit for bit
    assert d.full is z or np.shares_memory(d.full, z)  # kept as given, no copy
    d = TopLabelData.from_probs(probs, labels)
    np.testing.assert_array_equal(d.score, probs[np.arange(n), np.argmax(probs, axis=1)])
    assert np.shares_memory(d.full, probs)
    np.testing.assert_array_equal(d.tp, (labels == d.pred).astype(float))


@pytest.mark.parametrize("kind", ["probs", "logits"])
def test_blockwise_validation_names_the_first_bad_entry(kind):
    from topcal.errors import DataError

    rng = np.random.default_rng(5)
    x = rng.dirichlet(np.ones(300), 4000)
    x[2500, 17] = np.nan
    x[3100, 5] = np.inf
    build = TopLabelData.from_probs if kind == "probs" else TopLabelData.from_logits
    with pytest.raises(
        DataError, match=rf"{kind} has a non-finite value \(nan\) at row 2501, column 18"
    ):
        build(x)
    x[2500, 17] = 0.0
    with pytest.raises(DataError, match=r"non-finite value \(inf\) at row 3101, column 6"):
        build(x)
    if kind == "probs":
        x[3100, 5] = 0.0
        x[3999, 299] = -1e-9
        with pytest.raises(DataError, match=r"negative value \(-1e-09\) at row 4000, column 300"):
            build(x, renormalize=True)
    huge = np.full((3, 4), 1e308)  # finite values whose row sums overflow are accepted, silently
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert TopLabelData.from_logits(huge).score[0] == 0.25


@pytest.mark.parametrize("bounds", [None, (0.0, 1.0)])
def test_loo_over_all_bandwidths_at_once_equals_one_at_a_time(bounds):
    """The exact engine's LOO NLL, vectorised over bandwidths, against a direct per-sample
    reference."""
    rng = np.random.default_rng(6)
    p = np.sort(rng.random(40))
    t = rng.integers(0, 3, 40).astype(float)
    f = rng.integers(0, 3, 40).astype(float)
    t[t + f == 0] = 1.0
    t[3] = 0.4  # a weight below 1 is left out whole
    e = eng.ExactEngine(p, t, f, p[0], p[-1], bounds)
    bs = np.geomspace(0.003, 2.0, 30)
    got = e.loo_nll(bs)
    np.testing.assert_allclose(got, [e.loo_nll([b])[0] for b in bs], rtol=1e-13)
    # direct definition: leave one unit of one group out, sum every remaining kernel (with mirrors)
    pa = p if bounds is None else np.concatenate([p, -p, 2.0 - p])
    for j in (15, 22, 29):  # the direct sums do not underflow here
        b = bs[j]
        k = np.exp(-0.5 * ((p[:, None] - pa[None, :]) / b) ** 2)
        kt = k @ np.tile(t, pa.size // p.size)
        kf = k @ np.tile(f, pa.size // p.size)
        selfk = k[
            np.arange(40)[:, None], np.arange(40)[:, None] + 40 * np.arange(pa.size // 40)[None, :]
        ].sum(1)
        ut, uf = np.minimum(t, 1.0), np.minimum(f, 1.0)
        ct = np.clip((kt - ut * selfk) / (kt + kf - ut * selfk), 1e-12, 1 - 1e-12)
        zf = np.clip((kf - uf * selfk) / (kt + kf - uf * selfk), 1e-12, 1 - 1e-12)
        want = -(t[t > 0] * np.log(ct[t > 0])).sum() - (f[f > 0] * np.log(zf[f > 0])).sum()
        assert got[j] == pytest.approx(want, rel=1e-9)


@pytest.mark.parametrize("kind", ["probs", "logits"])
def test_temperature_margin_from_the_score_matrix_equals_the_split_path(kind):
    from topcal.calibrators.temperature._core import (
        split_top,
        top_label_margin,
        top_label_margin_rows,
    )
    from topcal.data import LOG_PROB_FLOOR

    rng = np.random.default_rng(8)
    n, k = 5000, 300  # several blocks
    z = rng.normal(0.0, 3.0, (n, k))
    if kind == "probs":
        z = np.exp(z - z.max(axis=1, keepdims=True))
        z /= z.sum(axis=1, keepdims=True)
        z[::7, 3] = 0.0  # exact zeros are floored in the logs
    floor = LOG_PROB_FLOOR if kind == "probs" else None
    pred = np.argmax(z, axis=1)
    pred[::11] = 5  # a predicted class need not be the argmax
    d, others = split_top(z.copy(), pred, log_floor=floor)
    for beta, award in ((0.7, 0.0), (rng.uniform(0.2, 3.0, n), rng.normal(0.0, 1.0, n))):
        want = top_label_margin(d, others, beta, award)
        got = top_label_margin_rows(z, pred, beta, award, log_floor=floor)
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    # the split itself: the others are the row without its predicted entry, shifted by their maximum
    zl = np.log(np.maximum(z, LOG_PROB_FLOOR)) if floor else z
    i = 11
    rest = np.delete(zl[i], pred[i])
    np.testing.assert_array_equal(others[:, i], rest - rest.max())
    assert d[i] == zl[i, pred[i]] - rest.max()


def test_merged_rows_give_the_loss_of_the_rows():
    from topcal.calibrators import shrinkage as shr

    rng = np.random.default_rng(10)
    rows = 50_000
    group = rng.integers(0, 40, rows)
    n = rng.integers(1, 6, rows).astype(float)  # few distinct values: many equal rows
    t = np.floor(n * rng.random(rows))
    r = rng.choice([0.2, 0.5, 0.9], rows)
    tp = (rng.random(rows) < 0.7).astype(float)
    fp = 1.0 - tp
    merged = shr.merge_equal_rows(t, n, tp, fp, r, group)
    assert merged[0].size < rows / 5
    np.testing.assert_allclose(
        shr.loo_nll_by_group(*merged, 40),
        shr.loo_nll_by_group(t, n, tp, fp, r, group, 40),
        rtol=1e-12,
    )
    assert merged[2].sum() == tp.sum() and merged[3].sum() == fp.sum()


def test_cumulative_predict_from_the_tables_equals_the_per_class_lookup():
    """cum-opt's apply looks every row up in one bucket grid over all classes' tables (and the
    reference's, longer than 2048 entries here): the same values as curve(k)."""
    from topcal.calibrators import calibrator

    data = _many_small_classes(seed=3, k=4, n=40_000)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DegenerateClassWarning)
        cal = calibrator("cum-opt").fit(data)
    assert cal.reference_.class_state_[0]["scores"].size > 2048
    got = cal.predict(data)
    for k in range(4):
        rows = data.pred == k
        np.testing.assert_array_equal(got[rows], cal.curve(k, data.score[rows]).confidence)


@pytest.mark.parametrize("bounds", [None, (0.0, 1.0)])
def test_exact_sums_and_loo_in_cache_blocks_equal_one_block(bounds, monkeypatch):
    """The exact engine's table sums and LOO NLL computed in cache-sized blocks of one buffer, and
    in
    several chunks, equal the direct formula (blocks that do not divide the rows, a last partial
    one)."""
    rng = np.random.default_rng(12)
    p = np.sort(rng.random(37))
    t = rng.integers(0, 3, 37).astype(float)
    f = rng.integers(0, 2, 37).astype(float)
    t[t + f == 0] = 1.0
    x = np.linspace(p[0], p[-1], 1001)
    bs = np.geomspace(0.004, 2.0, 23)
    e = eng.ExactEngine(p, t, f, p[0], p[-1], bounds)
    want_loo = [e.loo_nll([b])[0] for b in bs]
    pa = p if bounds is None else np.concatenate([p, -p, 2.0 - p])
    ta, fa = np.tile(t, pa.size // p.size), np.tile(f, pa.size // p.size)
    d2 = (x[:, None] - pa[None, :]) ** 2
    m = d2.min(axis=1)
    for chunk, block in (
        (eng.CHUNK_ELEMENTS, eng.CACHE_ELEMENTS),
        (pa.size * 300, pa.size * 7),
        (pa.size * 5, pa.size * 2),
    ):
        monkeypatch.setattr(eng, "CHUNK_ELEMENTS", chunk)
        monkeypatch.setattr(eng, "CACHE_ELEMENTS", block)
        num, den, shift = eng.exact_sums(x, p, t, f, 0.05, bounds)
        k = np.exp(-(d2 - m[:, None]) / (2 * 0.05**2))
        np.testing.assert_array_equal(shift, m)
        np.testing.assert_allclose(num, k @ ta, rtol=1e-12)
        np.testing.assert_allclose(den, k @ (ta + fa), rtol=1e-12)
        np.testing.assert_allclose(e.loo_nll(bs), want_loo, rtol=1e-12)


@pytest.mark.slow
@pytest.mark.parametrize(
    "bounds, discrete", [(None, False), ((0.0, 1.0), False), (None, True), ((0.0, 1.0), True)]
)
def test_lockstep_lower_bound_never_exceeds_the_count(bounds, discrete):
    """ExactScanBatch.lower_bounds (every 8th scan point) is at most the full grid's count, for
    every
    class and bandwidth of a scan; with ``at_most``, counts up to the bound are exact and the others
    stay above it."""
    rng = np.random.default_rng(13)
    engines, cands = [], []
    for i in range(40):
        n = int(rng.integers(5, 300))
        s = np.clip(rng.beta(4, 2, n) if i % 3 else rng.random(n), 1e-6, 1.0)
        if discrete:
            s = np.round(s * 40) / 40
        right = rng.random(n) < s ** (0.5 + 2.0 * rng.random())
        u, inv = np.unique(s, return_inverse=True)
        if u.size < 2:
            continue
        t = np.bincount(inv, right.astype(float), minlength=u.size)
        f = np.bincount(inv, (~right).astype(float), minlength=u.size)
        engines.append(eng.ExactEngine(u, t, f, u[0], u[-1], bounds))
        cands.append(
            (u[-1] - u[0]) / 256 * 2.0 ** (np.arange(41) / 4)
        )  # the scan's candidates, b_lo = R / 256
    batch = eng.ExactScanBatch(engines)
    rows = np.arange(len(engines))
    seen_below = seen_above = 0
    for j in range(0, 45, 4):  # every 4th of the scan's 41 candidates, both ends included
        bw = np.array([c[min(j, c.size - 1)] for c in cands])
        exact = batch.sign_changes(rows, bw)
        want = [eng.count_sign_changes(*(a[0] for a in e.scan([b]))) for e, b in zip(engines, bw)]
        np.testing.assert_array_equal(exact, want)
        lb = batch.lower_bounds(rows, bw)
        assert (lb <= exact).all()
        got = batch.sign_changes(rows, bw, np.full(rows.size, 2.0))
        np.testing.assert_array_equal(got[exact <= 2], exact[exact <= 2])
        assert (got[exact > 2] > 2).all()
        seen_below += int((lb[exact > 2] > 2).sum())
        seen_above += int((exact > 2).sum())
    assert seen_below > 0.3 * seen_above  # the bound settles many inadmissible bandwidths


def _naive_cumulative_counts(state, score):
    """The cum family's local counts from one class's saved state, by ``np.searchsorted`` per
    call."""
    u = state["scores"]
    i = np.minimum(np.searchsorted(u, score, side="left"), u.size - 1)
    above = score >= state["theta"]
    n = np.where(above, state["n_above"][i], state["n_below"])
    return np.where(above, state["values"][i], state["below"]) * n, n


def _naive_cumulative_predict(cal, data):
    """What a fitted cum model predicts, written out per row from its states (no tables, no
    grid)."""
    from topcal.calibrators import shrinkage as shr

    out = np.empty(data.n_rows)
    ref = cal.reference_.class_state_[0] if cal._shrunk() else None
    for row, (k, s) in enumerate(zip(data.pred, data.score)):
        st = cal.class_state_[k]
        s = np.array([s])
        if ref is None:
            if st is None:
                out[row] = cal._uncalibrated(s)[0]
                continue
            u = st["scores"]
            i = min(int(np.searchsorted(u, s[0], side="left")), u.size - 1)
            out[row] = st["values"][i] if s[0] >= st["theta"] else st["below"]
            continue
        t0, n0 = _naive_cumulative_counts(ref, s)
        r = shr.shrink(t0, n0, cal.reference_rate_, cal.reference_m_)
        if st is None:
            out[row] = r[0]
            continue
        t, n = _naive_cumulative_counts(st, s)
        out[row] = shr.shrink(t, n, r, cal.shrinkage_[k])[0]
    return out


def _cumulative_cases():
    """Per-sample, tied, binned data, and classes holding a single score value."""
    rng = np.random.default_rng(17)
    yield "per-sample", _many_small_classes(seed=4, k=12, n=3000)
    yield "ties", _many_small_classes(seed=5, k=12, n=3000, discrete=True)
    k, bins = 6, 20
    edges = np.linspace(0.0, 1.0, bins + 1)
    pc = np.repeat(np.arange(k), bins)
    lo, hi = np.tile(edges[:-1], k), np.tile(edges[1:], k)
    tp = rng.integers(0, 30, pc.size) * (rng.random(pc.size) < 0.8)
    fp = rng.integers(0, 30, pc.size) * (rng.random(pc.size) < 0.8)
    tp[pc == 0] = 0
    tp[(pc == 0) & (lo == edges[12])] = 5  # class 0: one occupied bin
    fp[pc == 0] = 0
    fp[(pc == 0) & (lo == edges[12])] = 3
    yield "binned", TopLabelData.from_binned([f"c{c}" for c in pc], lo, hi, tp, fp)
    pred = rng.integers(0, 5, 2000)
    score = np.round(rng.random(2000), 3)
    score[pred == 1] = 0.75  # one score value for the whole class
    score[pred == 2] = 1.0
    pred[:3] = 4  # class 4: three rows
    labels = np.where(rng.random(2000) < score, pred, (pred + 1) % 6)
    yield (
        "single-score",
        TopLabelData.from_scores(
            pred, score, labels, classes=[f"c{i}" for i in range(6)], score_range=(0.0, 1.0)
        ),
    )


@pytest.mark.slow
@pytest.mark.parametrize("method", ["cum", "cum-median", "cum-opt"])
@pytest.mark.parametrize("shrinkage", ["auto", "class", 0, 3.0])
def test_cumulative_predict_equals_a_naive_per_row_reference(method, shrinkage):
    """The one-lookup apply (all classes' tables, the reference's) gives, bit for bit, what each
    row's
    class state says read with np.searchsorted: on other data than the fit's too (scores between,
    below and above the tables' entries, classes never predicted at fit time)."""
    from topcal.calibrators import calibrator

    rng = np.random.default_rng(23)
    for name, data in _cumulative_cases():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DegenerateClassWarning)
            cal = calibrator(method, shrinkage=shrinkage).fit(data)
        np.testing.assert_array_equal(
            cal.predict(data), _naive_cumulative_predict(cal, data), err_msg=name
        )
        K = len(data.classes)
        other = TopLabelData.from_scores(
            rng.integers(0, K, 500),
            np.concatenate([rng.random(497), [0.0, 1.0, 0.5]]),
            rng.integers(0, K, 500),
            classes=list(data.classes),
            score_range=(0.0, 1.0),
        )
        np.testing.assert_array_equal(
            cal.predict(other), _naive_cumulative_predict(cal, other), err_msg=name
        )


@pytest.mark.slow
@pytest.mark.parametrize("per_entry, linear_steps", [(4, 2), (1, 0), (1, 5)])
def test_sorted_tables_search_equals_searchsorted(monkeypatch, per_entry, linear_steps):
    """SortedTables gives np.searchsorted(side="left") per table: empty and one-entry tables, ties,
    entries crowded in one bucket (the bisection), queries outside the tables and infinite ones."""
    from topcal._numeric import SortedTables

    monkeypatch.setattr(SortedTables, "BUCKETS_PER_ENTRY", per_entry)
    monkeypatch.setattr(SortedTables, "LINEAR_STEPS", linear_steps)
    rng = np.random.default_rng(per_entry * 10 + linear_steps)
    for _ in range(100):
        tables = []
        for _ in range(rng.integers(1, 6)):
            size = rng.integers(0, 60)
            kind = rng.integers(0, 4)
            t = [
                rng.random(size),
                np.round(rng.random(size), 2),
                np.concatenate([0.5 + 1e-9 * rng.random(size), rng.random(3)]),
                np.full(min(size, 1), 0.3),
            ][kind]
            tables.append(np.unique(t))
        offsets = np.concatenate([[0], np.cumsum([t.size for t in tables])])
        index = SortedTables(np.concatenate(tables), offsets, paired=bool(rng.integers(0, 2)))
        group = rng.integers(0, len(tables), 400)
        pool = np.concatenate(
            [np.concatenate(tables), rng.random(400), [-1e300, 1e300, np.inf, -np.inf, 0.5]]
        )
        x = rng.choice(pool, 400)
        want = np.array([np.searchsorted(tables[g], v, side="left") for g, v in zip(group, x)])
        np.testing.assert_array_equal(index.search(x, group), want)
        np.testing.assert_array_equal(
            index.search(x, 0), np.searchsorted(tables[0], x, side="left")
        )
        # layout: the gather at positions() is the entry min(searchsorted, size - 1) of the query's
        # table
        laid = index.layout(np.concatenate(tables))
        got = laid[index.positions(x, group)]
        for g, v, w in zip(group, x, got):
            if tables[g].size:
                assert (
                    w
                    == tables[g][
                        min(np.searchsorted(tables[g], v, side="left"), tables[g].size - 1)
                    ]
                )


def test_vectorised_alternation_count_equals_a_loop():
    rng = np.random.default_rng(4)
    s = rng.choice([-1.0, 0.0, 1.0], (200, 30), p=[0.4, 0.3, 0.3])
    s[:5] = 0.0  # rows without a sign
    want = []
    for row in s:
        nz = row[row != 0]
        want.append(int(np.count_nonzero(nz[1:] != nz[:-1])))
    np.testing.assert_array_equal(eng.count_alternations(s), want)


def test_batched_levels_equal_each_engines_level():
    """BinnedScanBatch.levels_of gives BinnedEngine.level_of for every (class, bandwidth), also at
    and
    next to the level boundaries b = 16 * 2^L * delta (where the scan's candidates fall)."""
    rng = np.random.default_rng(5)
    engines = []
    for _ in range(6):
        lo = rng.uniform(0.0, 0.5)
        hi = lo + rng.uniform(1e-4, 0.5)
        w = rng.random((2, eng.FINE_CELLS + 1))
        engines.append(eng.BinnedEngine(w[0], w[1], lo, hi))
    batch = eng.BinnedScanBatch(engines)
    rows, bs = [], []
    for i, e in enumerate(engines):
        unit = e.CELLS_PER_B * e.delta
        edges = unit * 2.0 ** np.arange(-1, 5)
        b = np.concatenate(
            [
                edges,
                np.nextafter(edges, 0),
                np.nextafter(edges, np.inf),
                unit * 2.0 ** rng.uniform(-2, 6, 50),
                (e.hi - e.lo) / 256 * 2.0 ** (np.arange(41) / 4),
            ]
        )
        rows += [i] * b.size
        bs.append(b)
    rows, bs = np.array(rows), np.concatenate(bs)
    np.testing.assert_array_equal(
        batch.levels_of(rows, bs), [engines[r].level_of(b) for r, b in zip(rows, bs)]
    )


def test_binned_batch_counts_for_rows_in_any_order():
    """Consecutive classes are read as views of the stacked transforms, others gathered: the same
    counts
    as each engine's own scan either way."""
    rng = np.random.default_rng(6)
    engines = binned_engines(rng, 5)
    batch = eng.BinnedScanBatch(engines)
    for rows in ([0, 1, 2, 3, 4], [1, 2, 3], [3, 1, 4], [4, 3, 2, 1, 0], [2, 0, 1]):
        bw = np.array([engines[r].delta * 16 * 2.0 ** rng.uniform(0, 5) for r in rows])
        want = [
            eng.count_sign_changes(*(a[0] for a in engines[r].scan([b]))) for r, b in zip(rows, bw)
        ]
        np.testing.assert_array_equal(batch.sign_changes(rows, bw), want)


def test_linear_bin_of_one_group_equals_the_gathered_path():
    """One group (the pooled reference) uses its scalars, not per-row gathers: the same grids bit
    for bit
    as that group binned among others."""
    rng = np.random.default_rng(7)
    n = 5000
    score = rng.beta(4, 2, n)
    tp = (rng.random(n) < score).astype(float)
    fp = 1.0 - tp
    lo, hi = np.array([score.min(), 0.0]), np.array([score.max(), 1.0])
    T1, F1 = eng.linear_bin(np.zeros(n, dtype=np.int64), score, tp, fp, lo[:1], hi[:1], 1)
    T2, F2 = eng.linear_bin(np.zeros(n, dtype=np.int64), score, tp, fp, lo, hi, 2)
    np.testing.assert_array_equal(T1[0], T2[0])
    np.testing.assert_array_equal(F1[0], F2[0])
    assert T1.sum() > 0 and F1.sum() > 0


@pytest.mark.parametrize("bounds", [None, (0.0, 1.0)])
def test_binned_sums_in_a_reused_workspace_equal_fresh_arrays(bounds):
    """The batched scan writes its transforms into one workspace, step after step: the sums are
    those of
    fresh arrays bit for bit, whatever an earlier call (more rows, a wider kernel, another level)
    left in it."""
    rng = np.random.default_rng(8)
    work = eng.Workspace()
    lo = 0.1
    for level, rows, scale in [
        (0, 9, 64.0),
        (0, 3, 1.0),
        (2, 5, 2.0),
        (0, 7, 1.3),
        (3, 2, 300.0),
        (1, 4, 1.0),
    ]:
        cells = eng.FINE_CELLS >> level
        m, nfft = cells + 1, (2 if bounds is None else 4) * cells
        step = 0.8 / eng.FINE_CELLS * (1 << level)
        b = 16 * step * scale * 2.0 ** rng.uniform(0, 0.5, rows)
        w = rng.random((2, rows, m))
        ft_t, ft_p = np.fft.rfft(w[0], nfft, axis=1), np.fft.rfft(w[0] + w[1], nfft, axis=1)
        want = eng.binned_sums(ft_t, ft_p, b, step, m, nfft, lo, bounds)
        got = eng.binned_sums(ft_t, ft_p, b, step, m, nfft, lo, bounds, work)
        for g, w_ in zip(got, want):
            np.testing.assert_array_equal(g, w_)


@pytest.mark.parametrize("method", ["hist", "cum-opt", "kde-mon2"])
def test_pseudo_count_choice_equals_the_per_row_log_definition(method):
    """The grouped loss multiplies runs of unit-weight confidences before one log (issue 26): the
    pseudo-counts it chooses (the reference's and the classes') are those of the per-row
    definition."""
    from topcal.calibrators import calibrator, shrinkage as shr

    for seed in (1, 2):
        data = _many_small_classes(seed=seed, k=12, n=6000)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DegenerateClassWarning)
            cal = calibrator(method)
            cal.merge_cells = (
                False  # the loss on every row (kde's merged cells have their own tolerance)
            )
            cal.cell_sums = (
                cal.count_run_width == 0
            )  # and cum's runs theirs (hist's cells are exact)
            cal.fit(data)
        t0, n0 = cal.reference_._local_counts(0, data.score)
        assert cal.reference_m_ == shr.choose_m(
            shr.loo_nll_grid(t0, n0, data.tp, data.fp, cal.reference_rate_)
        )
        want = np.zeros(shr.M_GRID.size)
        for k in range(12):
            rows = data.pred == k
            if cal.class_state_[k] is None or not rows.any():
                continue
            t, n = cal._local_counts(k, data.score[rows])
            want += shr.loo_nll_grid(
                t, n, data.tp[rows], data.fp[rows], cal._reference(data.score[rows])
            )
        np.testing.assert_allclose(cal.shrinkage_loss_.sum(axis=0), want, rtol=1e-10)
        assert cal.shrinkage_[0] == shr.choose_m(want)


@pytest.mark.parametrize("shrinkage, bound", [(0, 2.0), ("auto", 4.0)])
def test_cumulative_fit_peak_memory_is_a_small_multiple_of_the_input(shrinkage, bound):
    """issue 26, memory: a cum-opt fit at 10^5 x 10 holds at most ``bound`` x the score matrix above
    it
    (tracemalloc counts numpy's allocations; measured 1.4x and 3.2x, were 2.4x and 5.6x)."""
    import tracemalloc

    from topcal import TopLabelData
    from topcal.calibrators import calibrator

    z, labels = bench_probs(100_000, 10, 0, temperatures=False)
    data = TopLabelData.from_probs(z, labels)
    tracemalloc.start()
    try:
        # the method alone: the vector map's own peak is test_full_vector's
        calibrator("cum-opt", shrinkage=shrinkage).fit(data, vector=False)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < bound * z.nbytes


def test_sorted_tables_layout_of_sizes_and_lazy_grid():
    """SortedTables.layout_of (the tables' sizes only) lays values out as layout() does, also for
    empty
    tables and no tables; the bucket grid is built by the first search (or build())."""
    from topcal._numeric import SortedTables

    rng = np.random.default_rng(7)
    for sizes in ([], [0], [3], [0, 4, 0, 1], [5, 2, 7], [1, 0, 0]):
        tables = [np.sort(rng.random(s)) for s in sizes]
        index = SortedTables(
            np.concatenate(tables) if tables else np.zeros(0),
            np.concatenate([[0], np.cumsum(sizes)]),
        )
        per = rng.random((sum(sizes), 2))
        after = rng.random((len(sizes), 2))
        for a in (None, after):
            np.testing.assert_array_equal(
                SortedTables.layout_of(sizes, per, a), index.layout(per, a)
            )
        assert index._head is None  # nothing searched yet
    for paired in (
        False,
        True,
    ):  # a (position, entry) pair per bucket, or the position only (int32)
        index = SortedTables(np.arange(5.0), np.array([0, 2, 5]), paired=paired)
        np.testing.assert_array_equal(
            index.search(np.array([0.5, 3.0, 9.0]), np.array([0, 1, 1])), [1, 1, 3]
        )
        assert index._head.dtype == (np.float64 if paired else np.int32) and index.build() is index


def test_in_place_numerics_equal_their_expressions():
    """binary_nll, shrink and count_runs compute in place since issue 26 (peak memory): bit for bit
    the
    expressions they replaced, for arrays, scalars and broadcasting operands."""
    from topcal._numeric import PROB_CLIP, binary_nll
    from topcal.calibrators import shrinkage as shr

    rng = np.random.default_rng(3)
    c = np.concatenate([rng.random(500), [0.0, 1.0, 1e-15, 1 - 1e-15]])
    tp, fp = rng.integers(0, 3, c.size).astype(float), rng.random(c.size)

    def nll_old(tp, fp, conf):
        cc = np.clip(conf, PROB_CLIP, 1.0 - PROB_CLIP)
        return -(tp * np.log(cc) + fp * np.log1p(-cc))

    for args in (
        (tp, fp, c),
        (1.0, 0.0, c),
        (0.0, 1.0, c),
        (tp[:, None], fp[:, None], c[None, :5]),
        (tp[:5, None], fp[:5, None], c[None, :7]),
        (2.0, 1.0, 0.3),
    ):
        np.testing.assert_array_equal(binary_nll(*args), nll_old(*args))

    def shrink_old(t, n, r, m):
        t = np.maximum(np.asarray(t, dtype=np.float64), 0.0)
        n = np.maximum(np.asarray(n, dtype=np.float64), t)
        return np.clip(np.add(t, np.multiply(m, r)) / np.add(n, m), 0.0, 1.0)

    n = rng.integers(0, 50, c.size).astype(float)
    t = np.floor(n * rng.random(c.size))
    for args in (
        (t, n, c, 3.0),
        (t, n, 0.4, 2.5),
        (t, n, c, rng.random(c.size) + 1),
        (2.0, 5.0, c, 1.0),
        (t[:3], n[:3], 0.5, np.array([1.0, 2.0, 4.0])),
        (1.0, 3.0, 0.2, 1.0),
    ):
        np.testing.assert_array_equal(shr.shrink(*args), shrink_old(*args))

    n = np.cumsum(rng.integers(0, 40, 3000))[::-1].astype(float)
    t = np.floor(n * 0.8)
    group = np.repeat(np.arange(3), 1000)
    runs = shr.count_runs(t, n, group)
    assert runs.dtype == np.int32 and runs[0] == 0 and np.all(np.diff(runs) >= 0)


@pytest.mark.parametrize("name", ["cum", "cum-median", "cum-opt"])
def test_cumulative_layout_equals_the_per_key_formulation(name):
    """The cum family's slot layouts (written with slices since issue 26) equal the per-key gathers
    they
    replaced (_lookup_keys: entry and above per key, laid out by SortedTables.layout_of), also where
    the
    float below theta is a score of the class (adjacent floats) and for classes without a state."""
    from topcal._numeric import SortedTables

    def lookup_keys(
        st,
    ):  # a class's keys (its scores and the float below theta), entry and side per key
        u, cut = st["scores"], np.nextafter(st["theta"], -np.inf)
        p = int(np.searchsorted(u, cut, side="left"))
        keys = u if p < u.size and u[p] == cut else np.insert(u, p, cut)
        return keys, np.minimum(np.searchsorted(u, keys, side="left"), u.size - 1), keys > cut

    rng = np.random.default_rng(11)
    for trial in range(12):
        n, K = 300, 4
        score = rng.random(n) if trial % 3 else np.round(rng.random(n), 2)
        if trial % 2:  # pairs of adjacent floats: the key below theta may be a score
            score[: n // 2] = np.nextafter(score[n // 2 :], -np.inf)
        pred = rng.integers(0, K, n)
        pred[pred == 3] = 2 if trial % 4 == 0 else 3  # sometimes a class without rows
        labels = np.where(rng.random(n) < score, pred, (pred + 1) % K)
        data = TopLabelData.from_scores(
            pred, score, labels=labels, classes=list("abcd"), score_range=(0.0, 1.0)
        )
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DegenerateClassWarning)
            cal = paper_calibrator(name).fit(data)
        for counts in (False, True):
            keys = [None if st is None else lookup_keys(st) for st in cal.class_state_]
            per, end = [], np.zeros((K, 2) if counts else K)
            for k, (st, kk) in enumerate(zip(cal.class_state_, keys)):
                if st is None:
                    continue
                _, entry, above = kk
                v, m = st["values"], st["n_above"]
                if counts:
                    per.append(
                        np.stack(
                            [
                                np.where(above, v[entry] * m[entry], st["below"] * st["n_below"]),
                                np.where(above, m[entry], st["n_below"]),
                            ],
                            axis=1,
                        )
                    )
                    end[k] = (v[-1] * m[-1], m[-1])
                else:
                    per.append(np.where(above, v[entry], st["below"]))
                    end[k] = v[-1]
            sizes = [0 if kk is None else kk[0].size for kk in keys]
            want = SortedTables.layout_of(sizes, np.concatenate(per), end)
            np.testing.assert_array_equal(cal._layout(counts), want)


@pytest.mark.parametrize("binned", [False, True])
def test_histogram_fit_of_all_classes_at_once_equals_the_per_class_fit(binned):
    """Equal-width bins: every class's counts from one bincount, and the empty bins filled for
    all classes at once, give bit for bit the states of the per-class fit (empty bins, rows
    of no weight and classes never predicted included)."""
    from topcal.calibrators.counts.histogram import Histogram, fill_empty_bins

    data = _many_small_classes(seed=3, k=60, n=3000, discrete=True)
    if binned:  # 40 classes of 23 bins each, fractional counts, some bins and classes empty
        rng = np.random.default_rng(4)
        k, j = np.divmod(np.arange(40 * 23), 23)
        w = rng.gamma(0.7, 2.0, (2, k.size)) * (rng.random((2, k.size)) < 0.7)
        w[:, k == 5] = 0.0
        data = TopLabelData.from_binned(
            k, j / 23, (j + 1) / 23, w[0] * (j / 23), w[1], classes=[f"c{i}" for i in range(40)]
        )
    model = Histogram(n_bins=7, shrinkage=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model.fit(data)
    support = data.class_supports()
    assert sum(s is None for s in support) >= (1 if binned else 0)
    for k, (view, sup) in enumerate(zip(data.class_views(), support)):
        got = model.class_state_[k]
        if sup is None:
            assert got is None
            continue
        want = model._fit_class(view, k)
        for key in ("edges", "values", "tp", "fp"):
            np.testing.assert_array_equal(got[key], want[key])
    rng = np.random.default_rng(0)
    counts = rng.integers(0, 2, (200, 9)) * (rng.random((200, 9)) < 0.5)
    counts[np.arange(200), rng.integers(0, 9, 200)] = 1
    values = rng.random((200, 9))
    np.testing.assert_array_equal(
        fill_empty_bins(values, counts),
        [fill_empty_bins(v, c) for v, c in zip(values, counts)],
    )


@pytest.mark.parametrize("p", [1, 2, 3, 4])
def test_small_symmetric_solves_equal_lapack(p):
    """The hierarchical fits' stacked Newton systems: adjugates for p <= 3, LAPACK for larger
    ones and for matrices that are not positive definite, within rounding of np.linalg."""
    from topcal._numeric import inverse_sym_small, solve_sym_small

    rng = np.random.default_rng(p)
    A = rng.normal(size=(500, p, p))
    H = A @ A.transpose(0, 2, 1) + 0.5 * np.eye(p)
    H[7] = -H[7]  # negative definite: its determinant's sign says so for odd p only
    H[9] = np.nan
    g = rng.normal(size=(500, p))
    want_inv = np.linalg.inv(H)
    want_x = np.linalg.solve(H, g[:, :, None])[:, :, 0]
    close = dict(rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(inverse_sym_small(H), want_inv, **close)
    np.testing.assert_allclose(solve_sym_small(H, g), want_x, **close)
    assert np.isnan(solve_sym_small(H, g)[9]).all()


def test_linspace_rows_are_the_scalar_calls_bit_for_bit():
    from topcal._numeric import linspace_rows

    rng = np.random.default_rng(3)
    lo = rng.random(300)
    hi = lo + rng.random(300) * np.r_[np.ones(295), 0, 0, 1e-320, 1e-300, 1]
    for num in (2, 21, 65):
        got = linspace_rows(lo, hi, num)
        want = np.array([np.linspace(a, b, num) for a, b in zip(lo, hi)])
        assert got.tobytes() == want.tobytes()
    assert linspace_rows(lo[:3], hi[:3], 1).shape == (3, 1)
