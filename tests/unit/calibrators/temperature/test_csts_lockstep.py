"""csts and cstswa solve a cross-validation fold's classes in lockstep (issue 36), as bts/btswa do
(test_bts_lockstep.py): the same fit as one Newton solve per class, to the documented tolerance
(docs/temperature.md): out-of-fold confidences within 1e-8 relative. Their folds still start cold
(a warm start moved one-sided classes' awards along their flat loss: confidence 1.0 became 0.2).
"""

import numpy as np
import pytest
from _sim import bench_probs

from topcal import TopLabelData
from topcal.calibrators.select.crossfit import cross_fit
from topcal.calibrators.temperature import calibrator as tcal
from topcal.calibrators.temperature._core import TopLabelObjective, split_top
from topcal.calibrators.temperature._lockstep import BinaryClassesObjective
from topcal.calibrators.temperature.calibrator import TemperatureBase

_SOLVE = tcal.solve_classes


def small_classes(seed, n=480, k=32):
    """Full vectors with ~15 rows a class, some classes one-sided (only right or only wrong)."""
    p, y = bench_probs(n, k, seed)
    pred = p.argmax(axis=1)
    y = np.where(pred % 7 == 0, pred, y)  # only true positives
    y = np.where(pred % 11 == 1, (pred + 1) % k, y)  # only false positives
    return TopLabelData.from_probs(p, y)


def out_of_fold(data, method, lockstep, monkeypatch):
    monkeypatch.setattr(TemperatureBase, "_lockstep", lockstep)
    calls = []
    real = _SOLVE

    def spy(*args, **kw):
        calls.append(kw.get("others") is not None)
        return real(*args, **kw)

    monkeypatch.setattr(tcal, "solve_classes", spy)
    conf = cross_fit(data, [method], 5).confidence[method]
    return conf, calls


@pytest.mark.parametrize("method", ["csts", "cstswa"])
@pytest.mark.parametrize("seed", [0, 1])
def test_lockstep_folds_match_the_per_class_loop(method, seed, monkeypatch):
    data = TopLabelData.from_probs(*bench_probs(3000, 10, seed)) if seed else small_classes(seed)
    old, old_calls = out_of_fold(data, method, False, monkeypatch)
    new, new_calls = out_of_fold(data, method, True, monkeypatch)
    assert not old_calls and new_calls and all(new_calls)  # each path was the one taken
    np.testing.assert_allclose(new, old, rtol=1e-8, atol=1e-12)


def test_full_vector_lockstep_objective_is_the_per_class_objective():
    rng = np.random.default_rng(3)
    counts = np.array([1, 2, 40, 7])
    heads = np.concatenate([[0], np.cumsum(counts)])
    n, k = int(heads[-1]), 6
    z = rng.normal(0, 2, (n, k))
    pred = z.argmax(axis=1)
    d, others = split_top(z, pred)
    tp = rng.random(n)
    fp = 1 - tp
    x = np.column_stack([rng.normal(0, 0.5, counts.size), rng.normal(0, 1, counts.size)])
    for n_aw in (0, 1):
        batch = BinaryClassesObjective(
            d, tp, fp, heads[:-1], counts, loss="nll", n_awards=n_aw, others=others
        )
        f, g, h = batch.evaluate(x[:, : 1 + n_aw], np.arange(counts.size))
        for j in range(counts.size):
            r = slice(heads[j], heads[j + 1])
            one = TopLabelObjective(d[r], others[:, r], tp[r], fp[r], loss="nll", n_awards=n_aw)
            g1, h1 = one.grad_hess(x[j, : 1 + n_aw])
            assert f[j] == pytest.approx(one.value(x[j, : 1 + n_aw]), rel=1e-13)
            np.testing.assert_allclose(g[j], g1, rtol=1e-12, atol=1e-13)
            np.testing.assert_allclose(h[j], h1, rtol=1e-12, atol=1e-13)
        rows, m = next(batch.margin(x[:, : 1 + n_aw], np.arange(counts.size)))
        j = 2
        one = TopLabelObjective(
            d[heads[j] : heads[j + 1]],
            others[:, heads[j] : heads[j + 1]],
            tp[heads[j] : heads[j + 1]],
            fp[heads[j] : heads[j + 1]],
            n_awards=n_aw,
        )
        np.testing.assert_allclose(
            m[heads[j] : heads[j + 1]], one.margin(x[j, : 1 + n_aw]), rtol=1e-13, atol=1e-13
        )
