"""issue 36, item 3: the strength scan of hier-platt / hier-beta / pooled-beta on binned rows, the
fits finished on the rows (calibrators/pooled/_solve.py ``binned_search``).

The stated tolerance against the fit on the rows alone (every strength fitted on the rows, as
before): the same strength, parameters within 1e-6 relative (measured: <= 4e-9), every class's
NLL within 1e-9 relative, the parameter covariance within 1e-6 relative; and fewer Newton solves
on the rows (a neighbour of the chosen strength whose binned loss is clearly worse is not fitted
on the rows: ``_solve.ESTIMATE_MARGIN``)."""

import warnings

import numpy as np
import pytest

import topcal
from topcal import TopLabelData
from topcal.calibrators.pooled import _rows as _hier_rows, _solve as _hier_solve, hierarchical

from _sim import bench_probs, simulate_probs


def _data_sets():
    p, y = simulate_probs(24_000, 5, 4, sharpen=[0.6, 1.0, 1.5, 2.2])
    yield "sharpened", TopLabelData.from_probs(p, y)
    p, y = bench_probs(30_000, 6, 3)
    yield "bench", TopLabelData.from_probs(p, y)
    d = TopLabelData.from_probs(p, y)
    w = np.random.default_rng(4).random(d.n_rows) * 3.0
    yield (
        "weighted",
        TopLabelData(d.classes, d.pred, d.score, d.score_range, tp=d.tp * w, fp=d.fp * w),
    )


DATA = dict(_data_sets())


def _fit(name, data, **params):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return topcal.calibrator(name, **params).fit(data)


def _class_nll(model, data):
    """Per predicted class, the weighted NLL of the model's confidences."""
    c = np.clip(model.predict(data), 1e-15, 1 - 1e-15)
    rows = -(data.tp * np.log(c) + data.fp * np.log1p(-c))
    return np.bincount(data.pred, rows, minlength=len(data.classes))


@pytest.mark.slow
@pytest.mark.parametrize("which", list(DATA))
@pytest.mark.parametrize(
    "name, params",
    [
        ("hier-platt", {}),
        ("hier-beta", {}),
        ("hier-beta", {"shrinkage": 20.0}),
        ("pooled-beta", {}),
    ],
)
def test_binned_scan_gives_the_fit_on_the_rows_within_tolerance(which, name, params, monkeypatch):
    data = DATA[which]
    solves = []
    real = hierarchical.newton if "shrinkage" in params else _hier_solve.newton

    def counting(rows, *args, **kw):
        solves.append(rows.tp.size)
        return real(rows, *args, **kw)

    target = hierarchical if "shrinkage" in params else _hier_solve
    monkeypatch.setattr(target, "newton", counting)
    binned = _fit(name, data, **params)
    fast = sum(n == data.n_rows for n in solves)
    assert len(solves) > fast  # the binned rows were used
    monkeypatch.setattr(_hier_rows, "BIN_GAIN", np.inf)
    solves.clear()
    rows = _fit(name, data, **params)
    assert all(n == data.n_rows for n in solves)
    if "shrinkage" not in params:
        assert fast <= 6 < len(solves)  # 3-5 solves on the rows instead of 15
    a, b = (binned.model_, rows.model_) if name == "pooled-beta" else (binned, rows)
    assert a.strength_ == b.strength_
    np.testing.assert_allclose(a.theta_, b.theta_, rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(a.pooled_, b.pooled_, rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(_class_nll(binned, data), _class_nll(rows, data), rtol=1e-9)
    np.testing.assert_allclose(a.cov_, b.cov_, rtol=1e-6, atol=1e-12 * np.abs(b.cov_).max())
    if a.strength_loss_ is not None:
        # the chosen strength is fitted on the rows in both: the same loss; its neighbours too,
        # or, where their binned losses say they are clearly worse, those shifted (within 1e-6
        # relative: measured 2e-8), and worse on the rows too
        j = a._strength_index
        np.testing.assert_allclose(a.strength_loss_[j], b.strength_loss_[j], rtol=1e-9)
        near = [i for i in (j - 1, j + 1) if 0 <= i < a.strength_loss_.size]
        np.testing.assert_allclose(a.strength_loss_[near], b.strength_loss_[near], rtol=1e-6)
        assert np.all(b.strength_loss_[near] > b.strength_loss_[j])


def test_binned_rows_pay_only_where_they_divide_the_rows():
    """Few rows, or few rows per class: no binned rows (the scan runs on the rows, as before)."""
    rng = np.random.default_rng(2)
    for n, k in [(_hier_rows.BIN_MIN_ROWS - 1, 4), (40_000, 400)]:
        tp = (rng.random(n) < 0.7) * 1.0
        cols = [np.log(rng.uniform(0.3, 1.0, n)), rng.normal(0.0, 1.0, n)]
        got = _hier_rows.binned_rows(cols, tp, 1.0 - tp, rng.integers(0, k, n), k, sum(cols))
        assert got is None
    big = DATA["bench"]
    cols = hierarchical.HierarchicalBeta._columns(big)
    u = hierarchical.HierarchicalBeta._logit(cols)
    bc, btp, bfp, bg = _hier_rows.binned_rows(cols, big.tp, big.fp, big.pred, 6, u)
    assert btp.size * _hier_rows.BIN_GAIN <= big.n_rows
    # the binned rows hold the rows' weights, per class, and their weighted feature sums
    np.testing.assert_allclose(np.bincount(bg, btp, 6), np.bincount(big.pred, big.tp, 6))
    np.testing.assert_allclose(np.bincount(bg, bfp, 6), np.bincount(big.pred, big.fp, 6))
    for c, b in zip(cols, bc):
        np.testing.assert_allclose(
            np.bincount(bg, b * (btp + bfp), 6),
            np.bincount(big.pred, c * (big.tp + big.fp), 6),
            rtol=1e-12,
        )


@pytest.mark.parametrize("name", ["hier-platt", "hier-beta", "pooled-beta"])
def test_fits_on_the_rows_from_binned_starts_seldom_evaluate_the_loss(name, monkeypatch):
    """A solve started within its tolerance (the binned fit shifted, its losses as the stop's
    scale) takes its last Newton step on the predicted decrease: one exp per row at the start and
    one at the fit, no loss (exp and log1p) evaluated; before, 2 per solve (8-10 per fit)."""
    data = DATA["bench"]
    calls = {"loss": 0, "probs": 0}
    for what in calls:
        real = getattr(_hier_rows.Rows, what)

        def counting(rows, m, q, real=real, what=what):
            calls[what] += rows.tp.size == data.n_rows
            return real(rows, m, q)

        monkeypatch.setattr(_hier_rows.Rows, what, counting)
    _fit(name, data)
    assert calls["loss"] <= (0 if name == "pooled-beta" else 4)
    assert 2 <= calls["probs"] <= 10
