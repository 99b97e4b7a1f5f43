"""Cross-fitting without waste (issue 26): one fingerprint per fit, one cross-fit helper."""

import warnings

import numpy as np
import pytest

import topcal
from topcal import fingerprint as fingerprint_module
from topcal.data import TopLabelData
from topcal.fingerprint import Fingerprint


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
    model = _quiet(lambda: topcal.calibrator("auto", candidates=["pooled-hist", "hist", "sts", "bts"]).fit(data))
    assert calls == [data.n_rows]  # the top-level fit only: no fold's fit, no reference, no second for model_
    monkeypatch.undo()
    assert model.fingerprint_ == Fingerprint.of(data)
    assert model.model_.fingerprint_ == model.fingerprint_
    path = tmp_path / "auto.json"
    model.save(path)
    again = topcal.load(path)
    assert again.fingerprint_ == model.fingerprint_
    # the guarantee check still refuses the fitting rows
    same, share = again.fingerprint_.containment(data)
    assert same and share == 1.0


def test_a_scratch_fit_keeps_nothing_for_later():
    data = _vectors(1, 300, 3)
    model = topcal.calibrator("hist")
    model._scratch = True
    _quiet(lambda: model.fit(data))
    assert model.fingerprint_ is None and model.stats_ is None and model.confusion_ is None
    full = _quiet(lambda: topcal.calibrator("hist").fit(data))
    np.testing.assert_array_equal(model.predict(data), full.predict(data))
    assert full.fingerprint_ is not None and full.stats_ is not None and full.confusion_ is not None
