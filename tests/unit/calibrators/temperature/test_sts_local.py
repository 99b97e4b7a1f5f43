"""sts's temperature by steps on the local model of its rows (issue 36, ``temperature/_local.py``):
the optimum of :func:`bounded_newton` on the same objective within the stated tolerance (T within
``STEP`` = 1e-7 relative, loss within 1e-12 relative), in fewer exact passes over the others; below
``LOCAL_OTHERS`` other entries, and wherever the model cannot settle, bounded_newton's own fit."""

import numpy as np
import pytest
from _sim import bench_probs

import topcal
from topcal.calibrators.context import FitContext
from topcal import TopLabelData
from topcal.calibrators.temperature import _core, _local
from topcal.calibrators.temperature._core import TopLabelObjective, split_top
from topcal.calibrators.temperature._local import STEP, LocalModel, newton
from topcal.calibrators.temperature._rows import LOG_T
from topcal.calibrators.temperature._solver import bounded_newton

LO, HI = np.array([LOG_T[0]]), np.array([LOG_T[1]])


def objective(n=3000, k=80, seed=0, loss="nll", labels=None, rows=True, take=None):
    p, y = bench_probs(n, k, seed)
    p, y = (p, y) if take is None else (p[take], y[take])
    y = y if labels is None else labels(p, y)
    pred = p.argmax(axis=1)
    d, others = split_top(p, pred, log_floor=1e-300)
    tp = (y == pred).astype(float)
    return TopLabelObjective(d, others, tp, 1.0 - tp, loss=loss, rows=rows)


def counting(monkeypatch):
    """The exact passes over the others (each block's moments counted once per pass)."""
    passes = []
    real = _core.TopLabelObjective._eval

    def spy(self, x):
        if self._at is None or not np.array_equal(self._at[0], np.asarray(x, float)):
            passes.append(float(x[0]))
        return real(self, x)

    monkeypatch.setattr(_core.TopLabelObjective, "_eval", spy)
    return passes


@pytest.mark.parametrize("loss", ["nll", "brier"])
@pytest.mark.parametrize("seed", [0, 1])
def test_the_local_fit_is_bounded_newtons_within_the_stated_tolerance(loss, seed):
    want = bounded_newton(objective(seed=seed, loss=loss, rows=False), [0.0], LO, HI)
    for start in (0.0, float(want.x[0]) + 0.02, float(want.x[0]) - 0.3):  # cold, warm, far
        got = newton(objective(seed=seed, loss=loss), [start], LO, HI)
        assert abs(np.exp(got.x[0] - want.x[0]) - 1.0) <= STEP
        assert got.fun == pytest.approx(want.fun, rel=1e-12, abs=0)


def test_a_warm_start_takes_two_passes_and_a_cold_one_fewer_than_bounded_newton(monkeypatch):
    passes = counting(monkeypatch)
    cold_old = bounded_newton(objective(rows=False), [0.0], LO, HI)
    n_old = len(passes)
    passes.clear()
    cold = newton(objective(), [0.0], LO, HI)
    n_cold = len(passes)
    passes.clear()
    # a fold's fit starts from the optimum on all the rows: here 4 of every 5 rows
    newton(objective(take=np.arange(3000) % 5 != 2), cold.x, LO, HI)
    n_warm = len(passes)
    passes.clear()
    newton(objective(), cold.x, LO, HI)  # at its own optimum: the one pass that confirms it
    assert (n_old, n_cold, n_warm, len(passes)) == (8, 4, 2, 1)
    assert cold.x[0] == pytest.approx(cold_old.x[0], rel=1e-9)


@pytest.mark.filterwarnings("ignore::topcal.errors.DegenerateClassWarning")
def test_a_folds_fit_takes_the_models_first_step_unconfirmed_in_one_pass(monkeypatch):
    """``fold`` (a cross-validation fold from the all-data optimum; issue 36): the local model's
    first step is the result, after the one pass at the start (the warm fit above: two), T within
    1e-7 relative of bounded_newton's optimum; a step longer than FOLD_MOVE is confirmed as
    before; an sts fold fit reads the others once and leaves its training NLL unset."""
    passes = counting(monkeypatch)
    whole = newton(objective(), [0.0], LO, HI)
    part = np.arange(3000) % 5 != 2
    want = bounded_newton(objective(take=part, rows=False), [0.0], LO, HI)
    passes.clear()
    got = newton(objective(take=part), whole.x, LO, HI, fold=True)
    assert len(passes) == 1 and got.n_iter == 1
    assert abs(np.exp(got.x[0] - want.x[0]) - 1.0) <= 1e-7
    assert got.fun == pytest.approx(want.fun, rel=1e-9)
    monkeypatch.setattr(_local, "FOLD_MOVE", 1e-9)  # the step is longer: confirmed
    passes.clear()
    newton(objective(take=part), whole.x, LO, HI, fold=True)
    assert len(passes) == 2
    monkeypatch.setattr(_local, "FOLD_MOVE", 0.05)
    p, y = bench_probs(3000, 80, 0)
    data = TopLabelData.from_probs(p, y)
    fold = data.subset(np.flatnonzero(np.arange(3000) % 5 != 2))
    all_fit = topcal.calibrator("sts").fit(data, keep="predictions")
    cold = topcal.calibrator("sts").fit(fold, keep="predictions")
    passes.clear()
    as_fold = FitContext(fold=True)
    warm = topcal.calibrator("sts").fit(fold, keep="predictions", warm=all_fit, context=as_fold)
    assert len(passes) == 1 and np.isnan(warm.nll_) and not np.isnan(cold.nll_)
    np.testing.assert_allclose(warm.temperature_, cold.temperature_, rtol=1e-7)
    np.testing.assert_allclose(warm.predict(data), cold.predict(data), rtol=1e-6)
    # auto's final fit from it (not a fold: the same rows): confirmed, its NLL computed
    final = topcal.calibrator("sts").fit(data, warm=all_fit)
    assert not np.isnan(final.nll_)


def test_the_model_agrees_with_the_exact_objective_at_its_point_and_to_third_order_near_it():
    obj = objective()
    x0 = np.array([1.2])
    f0 = obj.value(x0)
    g0, h0 = obj.grad_hess(x0)
    model = LocalModel(obj, 1.2)
    assert model.value(x0) == pytest.approx(f0, rel=1e-13)
    g, h = model.grad_hess(x0)
    np.testing.assert_allclose([g[0], h[0, 0]], [g0[0], h0[0, 0]], rtol=1e-12)
    errs = []
    for dx in (1e-2, 5e-3):  # the model's error shrinks as (beta - beta0)^3
        x = x0 + dx
        errs.append(abs(model.value(x) - obj.value(x)))
    assert 0 < errs[1] < errs[0] / 6
    # its gradient is its own value's derivative (central differences)
    e = 1e-5
    fd = (model.value(x0 + 0.01 + e) - model.value(x0 + 0.01 - e)) / (2 * e)
    assert model.grad_hess(x0 + 0.01)[0][0] == pytest.approx(fd, rel=1e-6)


def test_few_other_entries_keep_no_rows_and_fit_by_bounded_newton_bit_for_bit():
    obj = objective(k=_core.LOCAL_OTHERS)  # K - 1 = LOCAL_OTHERS - 1 other entries
    assert obj.rows is None
    got = newton(obj, [0.0], LO, HI)
    want = bounded_newton(objective(k=_core.LOCAL_OTHERS), [0.0], LO, HI)
    assert (got.x[0], got.fun, got.n_iter) == (want.x[0], want.fun, want.n_iter)
    assert objective(k=_core.LOCAL_OTHERS + 1).rows is not None


def test_a_loss_that_runs_to_a_bound_is_handed_to_bounded_newton(monkeypatch):
    # every top label right: the loss falls toward T -> T_MIN, bounded_newton's corner
    handed = []
    real = _local.bounded_newton

    def spy(obj, *a, **kw):
        if isinstance(obj, TopLabelObjective):
            handed.append(True)
        return real(obj, *a, **kw)

    monkeypatch.setattr(_local, "bounded_newton", spy)
    right = objective(labels=lambda p, y: p.argmax(axis=1))
    got = newton(right, [0.0], LO, HI)
    want = bounded_newton(
        objective(labels=lambda p, y: p.argmax(axis=1), rows=False), [0.0], LO, HI
    )
    assert handed
    assert got.x[0] == pytest.approx(want.x[0], rel=1e-9, abs=1e-9)
    assert got.fun == pytest.approx(want.fun, rel=1e-9, abs=1e-12)


def test_an_sts_fit_evaluates_its_information_at_its_own_last_point(monkeypatch):
    p, y = bench_probs(2000, 100, 2)
    data = TopLabelData.from_probs(p, y)
    passes = counting(monkeypatch)
    with pytest.warns(Warning):  # some classes are never predicted
        model = topcal.calibrator("sts").fit(data)
    # the model's passes: the cold fit's and none after it (no pass for the information or the
    # margins at log(exp(log T)))
    assert passes[-1] == pytest.approx(np.log(model.temperature_[model.fitted_classes_][0]))
    assert len(passes) == len(set(passes)) <= 5
    assert np.isfinite(model.param_cov_[model.fitted_classes_, 0, 0]).all()


def test_the_split_by_runs_of_one_class_is_the_split_by_masks_bit_for_bit(monkeypatch):
    p, _ = bench_probs(1500, 100, 3)
    pred = p.argmax(axis=1)
    pred[::7] = 0  # not always the argmax
    order = np.argsort(pred, kind="stable")  # a fit's canonical order: runs of one class
    want = split_top(p, pred[order], log_floor=1e-300, rows=order)
    for runs in (_core.SPLIT_RUNS, 10**9):  # some blocks by runs, some masked; every block by runs
        monkeypatch.setattr(_core, "SPLIT_RUNS", runs)
        for got, w in zip(split_top(p, pred[order], log_floor=1e-300, rows=order), want):
            np.testing.assert_array_equal(got, w)
    monkeypatch.setattr(_core, "SPLIT_RUNS", 0)  # the masked copies only
    for got, w in zip(split_top(p, pred[order], log_floor=1e-300, rows=order), want):
        np.testing.assert_array_equal(got, w)
    z = np.log(p[order])  # logits, no gather: the same
    for got, w in zip(split_top(z, pred[order]), want):
        np.testing.assert_array_equal(got, w)


@pytest.mark.parametrize("passes", [1, 2, 3])
def test_a_spent_pass_budget_or_a_wrong_model_still_ends_at_the_optimum(passes, monkeypatch):
    want = bounded_newton(objective(rows=False), [0.0], LO, HI)
    monkeypatch.setattr(_local, "_PASSES", passes)  # bounded_newton goes on from the best point
    got = newton(objective(), [0.0], LO, HI)
    assert abs(np.exp(got.x[0] - want.x[0]) - 1.0) <= STEP
    monkeypatch.undo()
    real = LocalModel.__init__

    def wrong(self, obj, theta0):  # a model with the wrong slope: trials rejected, the budget spent
        real(self, obj, theta0)
        self.mean = self.mean + 0.5

    monkeypatch.setattr(LocalModel, "__init__", wrong)
    got = newton(objective(), [1.3], LO, HI)
    assert abs(np.exp(got.x[0] - want.x[0]) - 1.0) <= STEP
    assert got.fun == pytest.approx(want.fun, rel=1e-12, abs=0)
