"""tswa at many classes (issue 36, item 2): the O(K) arrowhead Newton step and covariance equal the
dense ones, and the profile-loss fit reaches the joint Newton's optimum (parameters within 1e-7
relative, loss within 1e-9 relative), or a lower loss where the joint Newton stalled."""

import warnings

import numpy as np
import pytest

import topcal
from topcal import TopLabelData
from topcal.calibrators.temperature._arrow import arrowhead_inverse, arrowhead_step
from topcal.calibrators.temperature._core import OFFSET_MAX, TopLabelObjective, split_top
from topcal.calibrators.temperature._rows import LOG_T
from topcal.calibrators.temperature._solver import bounded_newton, newton_step
from topcal.data import LOG_PROB_FLOOR, canonical_order

from _sim import bench_probs


def arrowhead(rng, k, shift=0.0):
    a = rng.normal() + shift
    u = rng.normal(size=k)
    d = rng.uniform(0.5, 3.0, size=k)
    h = np.diag(np.concatenate([[a], d]))
    h[0, 1:] = h[1:, 0] = u
    return h


def dense_step(g, h):
    ev, vec = np.linalg.eigh(h)
    ev = np.maximum(np.abs(ev), 1e-12 * np.max(np.abs(ev)))
    return -(vec @ ((vec.T @ g) / ev))


@pytest.mark.parametrize("shift", [50.0, 0.0, -50.0])
@pytest.mark.parametrize("k", [3, 40])
def test_arrowhead_step_equals_the_dense_step(k, shift):
    rng = np.random.default_rng(k)
    for _ in range(8):
        h = arrowhead(rng, k, shift)
        g = rng.normal(size=k + 1)
        step = arrowhead_step(g, h)
        ev = np.linalg.eigvalsh(h)
        assert (step is not None) == ((ev > 0).all() or (ev < 0).sum() == 1)
        if step is not None:
            np.testing.assert_allclose(step, dense_step(g, h), rtol=1e-9, atol=1e-12)
        np.testing.assert_allclose(newton_step(g, h), dense_step(g, h), rtol=1e-9, atol=1e-12)


def test_arrowhead_step_declines_what_it_cannot_do():
    rng = np.random.default_rng(0)
    h = arrowhead(rng, 5, 50.0)
    g = rng.normal(size=6)
    full = h.copy()
    full[2, 3] = full[3, 2] = 0.1  # not an arrowhead
    assert arrowhead_step(g, full) is None
    neg = h.copy()
    neg[2, 2] = -1.0  # a negative diagonal entry: two negative eigenvalues possible
    assert arrowhead_step(g, neg) is None
    sing = h.copy()
    u, d = sing[0, 1:], np.diag(sing)[1:]
    sing[0, 0] = float(u @ (u / d))  # Schur complement 0: a zero eigenvalue, floored
    assert arrowhead_step(g, sing) is None


def test_arrowhead_inverse_equals_the_dense_inverse():
    rng = np.random.default_rng(1)
    for _ in range(20):
        h = arrowhead(rng, 30, 60.0)
        inv = np.linalg.inv(h)
        i00, i0j, ijj = arrowhead_inverse(h)
        np.testing.assert_allclose(i00, inv[0, 0], rtol=1e-10)
        np.testing.assert_allclose(i0j, inv[0, 1:], rtol=1e-10, atol=1e-14)
        np.testing.assert_allclose(ijj, np.diag(inv)[1:], rtol=1e-10)
    assert arrowhead_inverse(arrowhead(rng, 30, -60.0)) is None  # not positive definite


def joint_fit(data, loss):
    """tswa's joint (K + 1)-parameter Newton, as before issue 36, on the fit's canonical rows."""
    data = data.subset(canonical_order(data))
    k = data.n_classes
    d, others = split_top(data.full, data.pred, log_floor=LOG_PROB_FLOOR)
    tpc = np.bincount(data.pred, weights=data.tp, minlength=k)
    fpc = np.bincount(data.pred, weights=data.fp, minlength=k)
    fixed = np.concatenate([[False], (tpc == 0) | (fpc == 0)])
    x0 = np.zeros(k + 1)
    x0[1:][(tpc > 0) & (fpc == 0)] = OFFSET_MAX
    x0[1:][(tpc == 0) & (fpc > 0)] = -OFFSET_MAX
    lo = np.array([LOG_T[0]] + [-OFFSET_MAX] * k)
    hi = np.array([LOG_T[1]] + [OFFSET_MAX] * k)
    if loss == "brier":
        obj = TopLabelObjective(d, others, data.tp, data.fp, n_awards=k, groups=data.pred)
        x0 = bounded_newton(obj, x0, lo, hi, fixed=fixed).x
    obj = TopLabelObjective(d, others, data.tp, data.fp, loss=loss, n_awards=k, groups=data.pred)
    return bounded_newton(obj, x0, lo, hi, fixed=fixed)


@pytest.mark.parametrize("loss", ["nll", "brier"])
@pytest.mark.parametrize("n, k", [(6000, 6), (8000, 40)])
def test_profile_fit_reaches_the_joint_newton_optimum(n, k, loss):
    p, labels = bench_probs(n, k, 3)
    data = TopLabelData.from_probs(p, labels)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = topcal.calibrator("tswa", loss=loss).fit(data)
    res = joint_fit(data, loss)
    fitted = model.fitted_classes_
    free = fitted & (model.n_tp_ > 0) & (model.n_fp_ > 0)
    np.testing.assert_allclose(model.temperature_[fitted], np.exp(res.x[0]), rtol=1e-7)
    np.testing.assert_allclose(
        model.awards_[free], (res.x[1:] * np.exp(res.x[0]))[free], rtol=1e-7, atol=1e-7
    )
    assert abs(model.loss_ - res.fun) <= 1e-9 * res.fun


@pytest.mark.heavy
@pytest.mark.slow
def test_profile_fit_is_stationary_where_the_joint_newton_stalls():
    """Many classes of a few rows: the joint Newton's one step length for all offsets drove some
    offsets into the flat region of the clipped NLL (every row confidently wrong), where it stopped
    on its stall test (loss 694 against 491 here). The profile fit's joint gradient is zero there
    and its loss is lower."""
    p, labels = bench_probs(10_000, 1000, 0)
    data = TopLabelData.from_probs(p, labels)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = topcal.calibrator("tswa").fit(data)
    res = joint_fit(data, "nll")
    assert model.loss_ < 0.8 * res.fun
    ordered = data.subset(canonical_order(data))
    d, others = split_top(ordered.full, ordered.pred, log_floor=LOG_PROB_FLOOR)
    k = data.n_classes
    obj = TopLabelObjective(d, others, ordered.tp, ordered.fp, n_awards=k, groups=ordered.pred)
    x = np.concatenate([[np.log(model.temperature_[0])], model.awards_ / model.temperature_])
    g, _ = obj.grad_hess(x)
    free = np.concatenate([[True], model.fitted_classes_ & (model.n_tp_ > 0) & (model.n_fp_ > 0)])
    assert np.max(np.abs(g[free])) <= 1e-5 * model.loss_
