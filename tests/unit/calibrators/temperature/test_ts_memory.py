"""The temperature family's memory work of issue 26 changes no number (docs/benchmarks.md, "The
temperature
family: memory and speed"): narrower exp() scratch blocks, smaller split blocks, the others gathered
by two
shifted copies, the information evaluated during the fit, lockstep chunks of any size give the same
fits
bit for bit; and a fit's traced peak stays within twice the input score matrix where the issue
measures it."""

import tracemalloc
import warnings

import numpy as np
import pytest

import topcal
from topcal import TopLabelData
from topcal.calibrators.temperature import _core, _lockstep
from topcal.calibrators.temperature._core import (
    MultinomialObjective,
    TopLabelObjective,
    lse_moments,
    split_top,
)
from topcal.data import canonical_order

from _sim import bench_probs

pytestmark = pytest.mark.slow


def evaluate(obj, x):
    g, h = obj.grad_hess(x)
    return (obj.value(x), g, h) + ((obj.margin(x),) if hasattr(obj, "margin") else ())


@pytest.mark.parametrize("k", [3, 12, 120])
@pytest.mark.parametrize("loss, awards", [("nll", 0), ("brier", 0), ("nll", 1), ("nll", 4)])
def test_narrow_scratch_gives_the_numbers_of_one_wide_block(k, loss, awards, monkeypatch):
    p, labels = bench_probs(20_000, k, k)  # three 8192-row blocks, the last one partial
    pred = p.argmax(axis=1)
    d, others = split_top(p, pred, log_floor=1e-300)
    tp = (labels == pred).astype(float)
    groups = pred % awards if awards > 1 else None
    x = np.array([0.3] + [0.2 * (g + 1) for g in range(awards)])

    def objective():
        return TopLabelObjective(d, others, tp, 1.0 - tp, loss=loss, n_awards=awards, groups=groups)

    monkeypatch.setattr(_core, "_SCRATCH_COLS", 1 << 30)
    monkeypatch.setattr(_core, "_SCRATCH_ELEMENTS", 1 << 30)
    wide = evaluate(objective(), x)
    wide_lse = lse_moments(others, 0.7)
    wide_mult = evaluate(MultinomialObjective(np.log(p), labels, np.ones(len(labels))), [0.3])
    monkeypatch.setattr(_core, "_SCRATCH_COLS", 37)  # sub-block edges everywhere
    narrow = evaluate(objective(), x)
    for a, b in zip(wide + wide_lse, narrow + lse_moments(others, 0.7)):
        np.testing.assert_array_equal(a, b)
    narrow_mult = evaluate(MultinomialObjective(np.log(p), labels, np.ones(len(labels))), [0.3])
    for a, b in zip(wide_mult, narrow_mult):
        np.testing.assert_array_equal(a, b)


def split_by_index(z, pred, log_floor=None):
    """split_top's formulation before issue 26: one block, the others gathered by index
    (take_along_axis)."""
    z = np.log(np.maximum(z, log_floor)) if log_floor is not None else z
    k = z.shape[1]
    cols = np.arange(k - 1)[None, :]
    cols = cols + (cols >= pred[:, None])
    o = np.take_along_axis(z, cols, axis=1).T.copy()
    omax = o.max(axis=0)
    o -= omax
    return z[np.arange(len(pred)), pred] - omax, o


@pytest.mark.parametrize("k", [2, 7, 150])
@pytest.mark.parametrize("chunk", [1, 100, 1 << 20])
def test_split_by_shifted_copies_equals_the_gather_by_index(k, chunk, monkeypatch):
    p, _ = bench_probs(3000, k, 1)
    pred = p.argmax(axis=1)
    pred[::5] = (pred[::5] + 1) % k  # the predicted class need not be the argmax
    rows = np.random.default_rng(2).permutation(3000)
    monkeypatch.setattr(_core, "_CHUNK_ELEMENTS", chunk)
    for got, want in [
        (split_top(p, pred, log_floor=1e-300), split_by_index(p, pred, 1e-300)),
        (split_top(np.log(p), pred), split_by_index(np.log(p), pred)),
        (
            split_top(p, pred[rows], log_floor=1e-300, rows=rows),
            split_by_index(p[rows], pred[rows], 1e-300),
        ),
    ]:
        for a, b in zip(got, want):
            np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("method", ["sts", "tswa", "csts", "cstswa"])
@pytest.mark.parametrize("loss", ["nll", "brier"])
def test_information_evaluated_during_the_fit_equals_a_pass_over_the_data(method, loss):
    p, labels = bench_probs(6000, 6, 3)
    data = TopLabelData.from_probs(p, labels)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = topcal.calibrator(method, loss=loss).fit(data)
    ordered = data.subset(canonical_order(data))  # the rows as the fit ran over them
    again = model._covariances(model._cov_blocks(ordered, model.fitted_classes_))
    if method == "tswa" and loss == "nll":
        # issue 36: tswa's information comes from the profile fit's last evaluation, at the
        # solver's (log T, A / T) rather than at log(T) and A / T recomputed from the stored T
        # and A, with sigmoid(+-m) from one exp: the same numbers to rounding, not bit for bit
        np.testing.assert_allclose(model.param_cov_, again, rtol=1e-9, atol=0)
    elif method == "sts":
        # issue 36: at the fit's own last point, where log(T) recomputed from the stored T differs
        # from it by an ulp (no second pass): the same numbers to rounding
        np.testing.assert_allclose(model.param_cov_, again, rtol=1e-12, atol=0)
    else:
        np.testing.assert_array_equal(model.param_cov_, again)
    assert np.isfinite(model.param_cov_[:, 0, 0]).all()


@pytest.mark.parametrize("method", ["bts", "btswa"])
def test_lockstep_chunks_change_no_number(method, monkeypatch):
    # 2,000 rows in 40 classes (1 to ~260 rows): 150-row chunks split the five largest; chunks of
    # one row cost ~1 ms each
    p, labels = bench_probs(2000, 40, 4)
    data = TopLabelData.from_probs(p, labels)
    fits = []
    for rows in (1, 150, 1 << 30):
        monkeypatch.setattr(_lockstep, "_LOCKSTEP_ROWS", rows)
        with warnings.catch_warnings():
            warnings.simplefilter(
                "ignore"
            )  # a few small classes with only TP or FP: at their corner
            model = topcal.calibrator(method).fit(data)
        fits.append(
            (model.temperature_, model.awards_, model.loss_, model.class_nll_, model.n_iter_)
        )
    for other in fits[1:]:
        for a, b in zip(fits[0], other):
            np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize(
    "n, k, methods",
    [
        (10_000, 100, ["sts", "tswa", "csts", "cstswa", "bts", "btswa"]),
        (30_000, 20, ["sts", "csts", "bts"]),
        (10_000, 10, ["csts", "cstswa"]),
    ],
)
@pytest.mark.heavy
def test_fit_peak_memory_within_twice_the_input(n, k, methods):
    p, labels = bench_probs(n, k, 0)
    data = TopLabelData.from_probs(p, labels)
    for method in methods:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            topcal.calibrator(method).fit(data)  # imports and caches first
            tracemalloc.start()
            try:  # the method alone: the vector map's own peak is test_full_vector's
                topcal.calibrator(method).fit(data, vector=False)
                peak = tracemalloc.get_traced_memory()[1]
            finally:
                tracemalloc.stop()
        assert peak <= 2.0 * p.nbytes, (
            f"{method} at {n} x {k}: peak {peak / p.nbytes:.2f} x the input"
        )
