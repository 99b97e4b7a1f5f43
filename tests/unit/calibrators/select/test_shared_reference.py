"""In a cross-validation fold (foldmemo's sharing block), the pooled reference curve of a shrunk
score method is fitted once per method and parameters on the fold's pooled rows (issue 36):
kde-mon2's reference and pooled-kde-mon2's inner model's reference are one fit, and every model
predicts what it predicts when fitted alone. Outside a fold nothing is kept."""

import numpy as np
from _sim import many_small_classes

from topcal.calibrators import get_class
from topcal.calibrators.select.crossfit import scratch_fit
from topcal.calibrators.foldmemo import sharing
from topcal.calibrators.score import pooled_rows


def _count_references(monkeypatch):
    cls = type(get_class("kde-mon2")())
    real, calls = cls._fit_reference, []

    def spy(self, pooled, data):
        calls.append(pooled)
        return real(self, pooled, data)

    monkeypatch.setattr(cls, "_fit_reference", spy)
    return calls


def test_a_fold_fits_one_kde_reference_and_predicts_as_alone(monkeypatch):
    train, test = many_small_classes(0, 8, 600), many_small_classes(1, 8, 300)
    calls = _count_references(monkeypatch)
    names = ("kde-mon2", "pooled-kde-mon2", "hist", "pooled-hist")
    with sharing(train):
        shared = {n: scratch_fit(n, train) for n in names}
        assert pooled_rows(train) is pooled_rows(train)  # made once in the fold
        assert pooled_rows(pooled_rows(train)) is pooled_rows(train)  # pooled rows pool to self
    assert len(calls) == 1  # kde-mon2's reference, found again by pooled-kde-mon2's inner model
    assert shared["kde-mon2"].reference_ is shared["pooled-kde-mon2"].model_.reference_
    alone = {n: scratch_fit(n, train) for n in names}
    assert len(calls) == 3  # outside a fold: each its own (pooled-kde-mon2: its inner's)
    assert pooled_rows(train) is not pooled_rows(train)
    for n in names:
        np.testing.assert_array_equal(shared[n].predict(test), alone[n].predict(test))
